package talos

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
)

// ErrNotConfigDisk is returned by ReadNoCloudISO for an image that Talos's
// nocloud platform would not take for its config disk: not an ISO 9660
// filesystem, or not labelled cidata or CIDATA.
var ErrNotConfigDisk = errors.New("not a nocloud config disk")

// NoCloudData is what Talos's nocloud platform reads from its config disk.
type NoCloudData struct {
	// Label is the filesystem label the disk was found by: "cidata" or
	// "CIDATA".
	Label string
	// UserData, MetaData and NetworkConfig are the files user-data,
	// meta-data and network-config of the disk's root directory; nil when
	// the file is missing, is not a regular file or cannot be read (Talos
	// logs the error and goes on without it).
	UserData, MetaData, NetworkConfig []byte
}

// The file names the nocloud platform reads, and the labels it finds its
// config disk by.
const (
	noCloudUserData      = "user-data"
	noCloudMetaData      = "meta-data"
	noCloudNetworkConfig = "network-config"
)

var noCloudLabels = []string{"cidata", "CIDATA"}

// ReadNoCloudISO reads a NoCloud config ISO the way Talos 1.13's nocloud
// platform does, so that the lab boots exactly what a real machine would.
//
// The disk is found by its filesystem label as Talos's block device probe
// (go-blockdevice's blkid) reports it: the volume identifier of the first
// supplementary (Joliet) volume descriptor, decoded as UTF-16BE, else that
// of the primary volume descriptor, with trailing spaces and NULs trimmed;
// it must be exactly "cidata" or "CIDATA". The files are then looked up in
// the root directory the way the Linux iso9660 driver, with the default
// mount options Talos uses ("ro" only), names them: with Rock Ridge (an
// "ER" entry in the root directory's SUSP area) the Rock Ridge names; else,
// with a Joliet tree, the Joliet names, matched case-insensitively (the
// driver's check=relaxed default for Joliet); else Rock Ridge "NM" names
// where records have them and otherwise the ISO 9660 identifiers mapped
// like the driver's map=normal (lower-cased, a ";1" or ".;1" version
// suffix dropped), matched exactly. Associated files are skipped and a
// directory is not a file, as in the kernel.
//
// A volume whose root directory cannot be read fails to mount: that is an
// error other than ErrNotConfigDisk, and Talos does not get past it.
func ReadNoCloudISO(iso []byte) (NoCloudData, error) {
	v, err := openVolume(iso)
	if err != nil {
		return NoCloudData{}, err
	}

	found := false

	for _, l := range noCloudLabels {
		found = found || v.label == l
	}

	if !found {
		return NoCloudData{}, fmt.Errorf("%w: the volume is labelled %q, not cidata", ErrNotConfigDisk, v.label)
	}

	entries, err := v.rootEntries()
	if err != nil {
		return NoCloudData{}, fmt.Errorf("reading the root directory of the config disk: %w", err)
	}

	out := NoCloudData{Label: v.label}

	out.UserData = v.readFile(entries, noCloudUserData)
	out.MetaData = v.readFile(entries, noCloudMetaData)
	out.NetworkConfig = v.readFile(entries, noCloudNetworkConfig)

	return out, nil
}

// ISO 9660 layout (ECMA-119).
const (
	isoSector        = 2048
	isoFirstVD       = 16 // the volume descriptors start at sector 16
	isoMaxVDs        = 16 // the descriptors the label probe looks at
	vdPrimary        = 1
	vdSupplementary  = 2
	vdTerminator     = 255
	vdVolumeIDOffset = 40
	vdVolumeIDLength = 32
	vdEscapesOffset  = 88
	vdBlockSize      = 128
	vdRootRecord     = 156
	recordMinLength  = 34

	flagDirectory  = 0x02
	flagAssociated = 0x04
	flagMultiExtnt = 0x80
)

// volume is an ISO 9660 image with the directory tree Linux would use.
type volume struct {
	img       []byte
	label     string
	blockSize int64
	root      []byte // the root directory record of the tree mounted
	naming    naming
	suspSkip  int // bytes to skip at the start of System Use areas (SUSP SP)
}

// naming is how the kernel names the entries of the tree it mounts.
type naming int

const (
	// namingISO: Rock Ridge NM names where present, else the mapped ISO
	// 9660 identifiers (the kernel's s_rock 1, or 2 when no ER was seen).
	namingISO naming = iota
	// namingJoliet: the Joliet names of the supplementary tree.
	namingJoliet
)

// maxContinuations bounds the SUSP continuation areas followed, like the
// kernel's RR_MAX_CE_ENTRIES.
const maxContinuations = 32

func openVolume(img []byte) (*volume, error) {
	first := sector(img, isoFirstVD)
	if first == nil || string(first[1:6]) != "CD001" {
		return nil, fmt.Errorf("%w: no ISO 9660 volume descriptor", ErrNotConfigDisk)
	}

	// The label probe reads the first descriptors up to the terminator,
	// keeping the primary one and any supplementary one.
	var pvd, svd []byte

	for i := range isoMaxVDs {
		vd := sector(img, isoFirstVD+i)
		if vd == nil || vd[0] == vdTerminator {
			break
		}

		switch vd[0] {
		case vdPrimary:
			pvd = vd
		case vdSupplementary:
			svd = vd
		}

		if pvd != nil && svd != nil {
			break
		}
	}

	if pvd == nil {
		return nil, fmt.Errorf("%w: no ISO 9660 primary volume descriptor", ErrNotConfigDisk)
	}

	v := &volume{img: img, label: probeLabel(pvd, svd), naming: namingISO}

	// The kernel's mount scans the ISO 9660 descriptors up to the
	// terminator or the first Joliet one, keeping the first primary one.
	var primary, joliet []byte

	for i := 0; ; i++ {
		vd := sector(img, isoFirstVD+i)
		if vd == nil {
			break
		}

		if string(vd[1:6]) != "CD001" {
			continue
		}

		if vd[0] == vdTerminator {
			break
		}

		if vd[0] == vdPrimary && primary == nil {
			primary = vd
		}

		if vd[0] == vdSupplementary && isJoliet(vd) {
			joliet = vd

			break
		}
	}

	if primary == nil {
		primary = joliet
	}

	if primary == nil {
		return nil, errors.New("mounting the config disk: no primary volume descriptor")
	}

	v.blockSize = int64(binary.LittleEndian.Uint16(primary[vdBlockSize:]))
	if v.blockSize == 0 {
		v.blockSize = isoSector
	}

	v.root = rootRecord(primary)

	rockRidge := v.detectRockRidge()

	if !rockRidge && joliet != nil {
		v.naming, v.root, v.suspSkip = namingJoliet, rootRecord(joliet), 0
	}

	return v, nil
}

// probeLabel is the filesystem label go-blockdevice's probe reports.
func probeLabel(pvd, svd []byte) string {
	id := pvd[vdVolumeIDOffset : vdVolumeIDOffset+vdVolumeIDLength]

	if svd != nil {
		raw := svd[vdVolumeIDOffset : vdVolumeIDOffset+vdVolumeIDLength]
		units := make([]uint16, len(raw)/2)

		for i := range units {
			units[i] = binary.BigEndian.Uint16(raw[2*i:])
		}

		return strings.TrimRight(string(utf16.Decode(units)), " \x00")
	}

	return strings.TrimRight(string(id), " \x00")
}

// isJoliet reports whether a supplementary descriptor declares UCS-2
// (Joliet levels 1 to 3).
func isJoliet(vd []byte) bool {
	esc := vd[vdEscapesOffset : vdEscapesOffset+3]

	return esc[0] == '%' && esc[1] == '/' && (esc[2] == '@' || esc[2] == 'C' || esc[2] == 'E')
}

func rootRecord(vd []byte) []byte {
	return vd[vdRootRecord : vdRootRecord+recordMinLength]
}

func sector(img []byte, n int) []byte {
	start := int64(n) * isoSector
	if start < 0 || start+isoSector > int64(len(img)) {
		return nil
	}

	return img[start : start+isoSector]
}

// extent returns the bytes of a record's extent.
func (v *volume) extent(rec []byte) ([]byte, error) {
	start := int64(binary.LittleEndian.Uint32(rec[2:])) * v.blockSize
	size := int64(binary.LittleEndian.Uint32(rec[10:]))

	if start+size > int64(len(v.img)) {
		return nil, fmt.Errorf("an extent of %d bytes at %d is beyond the end of the image (%d bytes)", size, start, len(v.img))
	}

	return v.img[start : start+size], nil
}

// records splits a directory's extent into its records; a record never
// spans a logical sector, zero bytes pad the rest of a sector.
func records(dir []byte) [][]byte {
	var out [][]byte

	for pos := 0; pos < len(dir); {
		n := int(dir[pos])
		if n == 0 {
			pos = (pos/isoSector + 1) * isoSector

			continue
		}

		if n < recordMinLength || pos+n > len(dir) {
			break
		}

		out = append(out, dir[pos:pos+n])
		pos += n
	}

	return out
}

// identifier returns a record's file identifier.
func identifier(rec []byte) ([]byte, bool) {
	n := int(rec[32])
	if 33+n > len(rec) {
		return nil, false
	}

	return rec[33 : 33+n], true
}

// systemUse returns a record's System Use area.
func (v *volume) systemUse(rec []byte) []byte {
	n := int(rec[32])
	start := 33 + n + (n+1)%2 + v.suspSkip

	if start >= len(rec) {
		return nil
	}

	return rec[start:]
}

// detectRockRidge looks at the SUSP entries of the root directory's "."
// record like the kernel: an "SP" entry sets the skip length of System Use
// areas, an "ER" entry means Rock Ridge.
func (v *volume) detectRockRidge() bool {
	dir, err := v.extent(v.root)
	if err != nil {
		return false
	}

	recs := records(dir)
	if len(recs) == 0 {
		return false
	}

	found := false

	for _, e := range v.suspEntries(v.systemUse(recs[0])) {
		switch string(e[:2]) {
		case "SP":
			if len(e) >= 7 && e[4] == 0xbe && e[5] == 0xef {
				v.suspSkip = int(e[6])
			}
		case "ER":
			found = true
		}
	}

	return found
}

// suspEntries returns the SUSP entries of a System Use area, following
// continuation areas (CE).
func (v *volume) suspEntries(su []byte) [][]byte {
	var out [][]byte

	for hops := 0; su != nil && hops <= maxContinuations; hops++ {
		area := su
		su = nil

		for len(area) >= 4 {
			n := int(area[2])
			if n < 4 || n > len(area) {
				break
			}

			e := area[:n]
			area = area[n:]

			switch string(e[:2]) {
			case "ST":
				area = nil
			case "CE":
				if n >= 28 {
					start := int64(binary.LittleEndian.Uint32(e[4:]))*v.blockSize + int64(binary.LittleEndian.Uint32(e[12:]))
					size := int64(binary.LittleEndian.Uint32(e[20:]))

					if start >= 0 && start+size <= int64(len(v.img)) {
						su = v.img[start : start+size]
					}
				}
			default:
				out = append(out, e)
			}
		}
	}

	return out
}

// rockRidgeName returns a record's Rock Ridge name, the concatenation of
// its "NM" entries, like the kernel's get_rock_ridge_filename; hidden
// reports a relocated directory ("RE"), which lookups never find.
func (v *volume) rockRidgeName(rec []byte) (name string, found, hidden bool) {
	var b []byte

	for _, e := range v.suspEntries(v.systemUse(rec)) {
		switch string(e[:2]) {
		case "RE":
			return "", false, true
		case "NM":
			if len(e) < 5 || e[4]&0x06 != 0 || e[4]&^0x01 != 0 {
				continue
			}

			part := e[5:]
			if i := bytes.IndexByte(part, 0); i >= 0 {
				part = part[:i]
			}

			if len(b)+len(part) >= 254 {
				return string(b), len(b) > 0, false
			}

			b = append(b, part...)
			found = true
		}
	}

	return string(b), found, false
}

// entry is a directory entry under the name the kernel gives it.
type entry struct {
	name  string
	flags byte
	recs  [][]byte // the records of its extents, in order
}

// rootEntries lists the root directory as the kernel names it, skipping
// the "." and ".." records and associated files.
func (v *volume) rootEntries() ([]entry, error) {
	dir, err := v.extent(v.root)
	if err != nil {
		return nil, err
	}

	var (
		out  []entry
		cont bool // the previous record continues in the next one
	)

	for _, rec := range records(dir) {
		id, ok := identifier(rec)
		if !ok {
			continue
		}

		flags := rec[25]

		if cont && len(out) > 0 {
			last := &out[len(out)-1]
			last.recs = append(last.recs, rec)
			cont = flags&flagMultiExtnt != 0

			continue
		}

		cont = flags&flagMultiExtnt != 0

		if len(id) == 1 && id[0] <= 1 {
			continue
		}

		if flags&flagAssociated != 0 {
			cont = false

			continue
		}

		name := v.name(rec, id)
		if name == "" {
			cont = false

			continue
		}

		out = append(out, entry{name: name, flags: flags, recs: [][]byte{rec}})
	}

	return out, nil
}

// name is the kernel's name for a record; "" for one lookups never find.
func (v *volume) name(rec, id []byte) string {
	if v.naming == namingJoliet {
		return jolietName(id)
	}

	name, found, hidden := v.rockRidgeName(rec)

	switch {
	case hidden:
		return ""
	case found:
		return name
	default:
		return plainName(id)
	}
}

// plainName maps an ISO 9660 identifier like Linux's map=normal: upper
// case to lower case, a trailing ";1" or ".;1" dropped, other ';' and '/'
// turned into '.'.
func plainName(id []byte) string {
	var b strings.Builder

	for i := 0; i < len(id); i++ {
		c := id[i]
		if c == 0 {
			break
		}

		if c >= 'A' && c <= 'Z' {
			c |= 0x20
		}

		if c == '.' && i == len(id)-3 && id[i+1] == ';' && id[i+2] == '1' {
			break
		}

		if c == ';' && i == len(id)-2 && id[i+1] == '1' {
			break
		}

		if c == ';' || c == '/' {
			c = '.'
		}

		b.WriteByte(c)
	}

	return b.String()
}

// jolietName decodes a Joliet identifier (UCS-2BE) like Linux does: a
// trailing ";1" and trailing dots are dropped.
func jolietName(id []byte) string {
	units := make([]uint16, len(id)/2)
	for i := range units {
		units[i] = binary.BigEndian.Uint16(id[2*i:])
	}

	name := string(utf16.Decode(units))

	if len(name) > 2 && strings.HasSuffix(name, ";1") {
		name = name[:len(name)-2]
	}

	for len(name) >= 2 && name[len(name)-1] == '.' {
		name = name[:len(name)-1]
	}

	return name
}

// readFile returns the content of the regular file called name; nil when
// there is none or it cannot be read.
func (v *volume) readFile(entries []entry, name string) []byte {
	for _, e := range entries {
		if !v.matches(e.name, name) {
			continue
		}

		if e.flags&flagDirectory != 0 {
			return nil
		}

		data := []byte{}

		for _, rec := range e.recs {
			part, err := v.extent(rec)
			if err != nil || len(data)+len(part) > len(v.img) {
				// Beyond the medium, or overlapping extents adding up to
				// more than the whole medium: not a file that can be read.
				return nil
			}

			data = append(data, part...)
		}

		return data
	}

	return nil
}

// matches compares a directory entry's name with a looked-up name: exactly,
// or for Joliet case-insensitively and ignoring trailing dots.
func (v *volume) matches(have, want string) bool {
	if v.naming != namingJoliet {
		return have == want
	}

	return strings.EqualFold(strings.TrimRight(have, "."), strings.TrimRight(want, "."))
}
