package factory

import (
	"encoding/binary"
	"slices"
	"strings"
)

const sector = 2048

// isoFile is a file in the root directory of a stand-in ISO image. Its
// name must be an ISO 9660 level 1 name (8.3, A-Z, 0-9, _).
type isoFile struct {
	name string
	data []byte
}

// isoDate is the fixed recording date of every stand-in image, so that the
// same request always yields the same bytes.
var isoDate = [7]byte{124, 1, 1, 0, 0, 0, 0} // 2024-01-01 00:00:00 UTC

const isoDateText = "2024010100000000"

// buildISO writes a minimal ISO 9660 image: a primary volume descriptor,
// the path tables and one root directory holding the files. The output
// depends only on the label and the files.
func buildISO(label string, files []isoFile) []byte {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b isoFile) int { return strings.Compare(a.name, b.name) })

	const (
		pvdSector   = 16
		termSector  = 17
		lPathSector = 18
		mPathSector = 19
		rootSector  = 20
		dataSector  = 21
	)
	extents := make([]uint32, len(files))
	next := uint32(dataSector)
	for i, f := range files {
		extents[i] = next
		next += uint32((len(f.data) + sector - 1) / sector)
	}
	total := next
	img := make([]byte, int(total)*sector)

	root := dirRecord([]byte{0}, rootSector, sector, true)
	dir := append([]byte(nil), root...)
	dir = append(dir, dirRecord([]byte{1}, rootSector, sector, true)...)
	for i, f := range files {
		dir = append(dir, dirRecord([]byte(f.name+";1"), extents[i], uint32(len(f.data)), false)...)
	}
	copy(img[rootSector*sector:], dir)
	for i, f := range files {
		copy(img[int(extents[i])*sector:], f.data)
	}

	pvd := img[pvdSector*sector : (pvdSector+1)*sector]
	pvd[0] = 1
	copy(pvd[1:6], "CD001")
	pvd[6] = 1
	padCopy(pvd[8:40], "LINUX")
	padCopy(pvd[40:72], label)
	putBoth32(pvd[80:88], total)
	putBoth16(pvd[120:124], 1)
	putBoth16(pvd[124:128], 1)
	putBoth16(pvd[128:132], sector)
	putBoth32(pvd[132:140], 10)
	binary.LittleEndian.PutUint32(pvd[140:144], lPathSector)
	binary.BigEndian.PutUint32(pvd[148:152], mPathSector)
	copy(pvd[156:190], root)
	padCopy(pvd[190:813], "")
	padCopy(pvd[574:702], "TALOSCLUSTER LAB IMAGE FACTORY")
	for _, off := range []int{813, 830, 864} {
		copy(pvd[off:off+16], isoDateText)
	}
	copy(pvd[847:863], "0000000000000000")
	pvd[881] = 1

	term := img[termSector*sector:]
	term[0] = 255
	copy(term[1:6], "CD001")
	term[6] = 1

	lPath := img[lPathSector*sector:]
	lPath[0] = 1
	binary.LittleEndian.PutUint32(lPath[2:6], rootSector)
	binary.LittleEndian.PutUint16(lPath[6:8], 1)
	mPath := img[mPathSector*sector:]
	mPath[0] = 1
	binary.BigEndian.PutUint32(mPath[2:6], rootSector)
	binary.BigEndian.PutUint16(mPath[6:8], 1)
	return img
}

// dirRecord is an ISO 9660 directory record.
func dirRecord(name []byte, extent, size uint32, dir bool) []byte {
	n := 33 + len(name)
	if n%2 == 1 {
		n++
	}
	r := make([]byte, n)
	r[0] = byte(n)
	putBoth32(r[2:10], extent)
	putBoth32(r[10:18], size)
	copy(r[18:25], isoDate[:])
	if dir {
		r[25] = 2
	}
	putBoth16(r[28:32], 1)
	r[32] = byte(len(name))
	copy(r[33:], name)
	return r
}

func putBoth32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b[0:4], v)
	binary.BigEndian.PutUint32(b[4:8], v)
}

func putBoth16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b[0:2], v)
	binary.BigEndian.PutUint16(b[2:4], v)
}

func padCopy(dst []byte, s string) {
	for i := range dst {
		dst[i] = ' '
	}
	copy(dst, s)
}
