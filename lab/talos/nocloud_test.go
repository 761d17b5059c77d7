package talos_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"testing"
	"unicode/utf16"

	"github.com/kdomanski/iso9660"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// isoFile is a file of a hand-built test ISO.
type isoFile struct {
	id     string // the ISO 9660 identifier, such as "USER-DATA;1"
	rrName string // the Rock Ridge NM name; none when empty
	joliet string // the name in the Joliet tree; the file is not there when empty
	flags  byte
	data   []byte
}

// isoSpec describes a hand-built test ISO: a primary volume, optionally
// with Rock Ridge on its root and a Joliet tree.
type isoSpec struct {
	label       string
	jolietLabel string // a Joliet supplementary descriptor when set
	rockRidge   bool   // SP and ER entries on the root's "." record
	files       []isoFile
}

const sectorSize = 2048

// buildISO writes the image sector by sector, independently of any ISO
// library: system area, primary descriptor (16), Joliet descriptor (17),
// terminator, the root directories, then one sector per file.
func buildISO(tb testing.TB, s isoSpec) []byte {
	tb.Helper()

	sectors := 17
	if s.jolietLabel != "" {
		sectors++
	}

	terminator := sectors
	rootPrimary := terminator + 1
	rootJoliet := rootPrimary + 1
	firstFile := rootJoliet + 1
	img := make([]byte, (firstFile+len(s.files))*sectorSize)

	both32 := func(b []byte, v uint32) {
		binary.LittleEndian.PutUint32(b, v)
		binary.BigEndian.PutUint32(b[4:], v)
	}

	record := func(lba, size uint32, flags byte, id, su []byte) []byte {
		n := 33 + len(id)
		if len(id)%2 == 0 {
			n++
		}

		rec := make([]byte, n+len(su))
		rec[0] = byte(len(rec))
		both32(rec[2:], lba)
		both32(rec[10:], size)
		rec[25] = flags
		rec[32] = byte(len(id))
		copy(rec[33:], id)
		copy(rec[n:], su)

		return rec
	}

	ucs2 := func(s string) []byte {
		var out []byte
		for _, u := range utf16.Encode([]rune(s)) {
			out = binary.BigEndian.AppendUint16(out, u)
		}

		return out
	}

	descriptor := func(at, kind int, label []byte, rootLBA int) {
		vd := img[at*sectorSize : (at+1)*sectorSize]
		vd[0] = byte(kind)
		copy(vd[1:], "CD001")
		vd[6] = 1
		copy(vd[40:72], label)
		binary.LittleEndian.PutUint16(vd[128:], sectorSize)
		binary.BigEndian.PutUint16(vd[130:], sectorSize)
		copy(vd[156:], record(uint32(rootLBA), sectorSize, 0x02, []byte{0}, nil))
	}

	label := bytes.Repeat([]byte(" "), 32)
	copy(label, s.label)
	descriptor(16, 1, label, rootPrimary)

	if s.jolietLabel != "" {
		jl := ucs2(s.jolietLabel)
		for len(jl) < 32 {
			jl = append(jl, 0, ' ')
		}

		descriptor(17, 2, jl, rootJoliet)
		copy(img[17*sectorSize+88:], "%/E")
	}

	img[terminator*sectorSize] = 255
	copy(img[terminator*sectorSize+1:], "CD001")

	var dotSU []byte
	if s.rockRidge {
		dotSU = append(dotSU, 'S', 'P', 7, 1, 0xbe, 0xef, 0)
		er := []byte{'E', 'R', 0, 1, 10, 0, 0, 1}
		er = append(er, "RRIP_1991A"...)
		er[2] = byte(len(er))
		dotSU = append(dotSU, er...)
	}

	dirs := map[int][]byte{
		rootPrimary: append(record(uint32(rootPrimary), sectorSize, 0x02, []byte{0}, dotSU), record(uint32(rootPrimary), sectorSize, 0x02, []byte{1}, nil)...),
		rootJoliet:  append(record(uint32(rootJoliet), sectorSize, 0x02, []byte{0}, nil), record(uint32(rootJoliet), sectorSize, 0x02, []byte{1}, nil)...),
	}

	for i, f := range s.files {
		lba := firstFile + i
		copy(img[lba*sectorSize:], f.data)

		var su []byte
		if f.rrName != "" {
			su = append([]byte{'N', 'M', byte(5 + len(f.rrName)), 1, 0}, f.rrName...)
		}

		dirs[rootPrimary] = append(dirs[rootPrimary], record(uint32(lba), uint32(len(f.data)), f.flags, []byte(f.id), su)...)

		if f.joliet != "" {
			dirs[rootJoliet] = append(dirs[rootJoliet], record(uint32(lba), uint32(len(f.data)), f.flags, ucs2(f.joliet), nil)...)
		}
	}

	for lba, dir := range dirs {
		if len(dir) > sectorSize {
			tb.Fatal("test ISO directory too large")
		}

		copy(img[lba*sectorSize:], dir)
	}

	return img
}

// libraryISO is a config ISO written by github.com/kdomanski/iso9660, the
// library the Proxmox provider builds its config ISOs with.
func libraryISO(t *testing.T, label string, files map[string][]byte) []byte {
	t.Helper()

	w, err := iso9660.NewWriter()
	if err != nil {
		t.Fatal(err)
	}

	defer w.Cleanup() //nolint:errcheck

	for name, data := range files {
		if err := w.AddFile(bytes.NewReader(data), name); err != nil {
			t.Fatal(err)
		}
	}

	var buf bytes.Buffer
	if err := w.WriteTo(&buf, label); err != nil {
		t.Fatal(err)
	}

	return buf.Bytes()
}

func TestReadNoCloudISO(t *testing.T) {
	t.Parallel()

	user := []byte("version: v1alpha1\nmachine:\n  type: worker\n")
	meta := []byte("instance-id: a\nlocal-hostname: a\n")

	for _, tt := range []struct {
		name      string
		iso       func(t *testing.T) []byte
		label     string
		user      []byte
		meta      []byte
		notConfig bool
		mountFail bool
	}{
		{
			name: "written by the provider's ISO library",
			iso: func(t *testing.T) []byte {
				return libraryISO(t, "cidata", map[string][]byte{"user-data": user, "meta-data": meta})
			},
			label: "cidata", user: user, meta: meta,
		},
		{
			name: "upper-case label and identifiers",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "CIDATA", files: []isoFile{
					{id: "USER-DATA;1", data: user},
					{id: "META-DATA.;1", data: meta},
				}})
			},
			label: "CIDATA", user: user, meta: meta,
		},
		{
			name: "8.3 names without extensions are what Linux shows",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "cidata", files: []isoFile{{id: "USER_DAT.;1", data: user}}})
			},
			label: "cidata",
		},
		{
			name: "Rock Ridge names",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "cidata", rockRidge: true, files: []isoFile{
					{id: "USER_DAT.;1", rrName: "user-data", data: user},
					{id: "META_DAT.;1", rrName: "meta-data", data: meta},
				}})
			},
			label: "cidata", user: user, meta: meta,
		},
		{
			name: "Rock Ridge names are case-sensitive",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "cidata", rockRidge: true, files: []isoFile{
					{id: "USER_DAT.;1", rrName: "User-Data", data: user},
				}})
			},
			label: "cidata",
		},
		{
			name: "Joliet names, matched case-insensitively, and the Joliet label",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "CDROM", jolietLabel: "cidata", files: []isoFile{
					{id: "USER_DAT.;1", joliet: "USER-DATA;1", data: user},
					{id: "META_DAT.;1", joliet: "meta-data", data: meta},
				}})
			},
			label: "cidata", user: user, meta: meta,
		},
		{
			name: "Rock Ridge wins over Joliet",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "cidata", jolietLabel: "cidata", rockRidge: true, files: []isoFile{
					{id: "USER_DAT.;1", rrName: "user-data", joliet: "not-user-data", data: user},
				}})
			},
			label: "cidata", user: user,
		},
		{
			name: "the Joliet label decides",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "cidata", jolietLabel: "config", files: []isoFile{{id: "USER-DATA;1", data: user}}})
			},
			notConfig: true,
		},
		{
			name: "another label",
			iso: func(t *testing.T) []byte {
				return libraryISO(t, "config-2", map[string][]byte{"user-data": user})
			},
			notConfig: true,
		},
		{
			name: "the label is case-sensitive",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "CiData", files: []isoFile{{id: "USER-DATA;1", data: user}}})
			},
			notConfig: true,
		},
		{
			name: "a directory is not the file",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "cidata", files: []isoFile{{id: "USER-DATA", flags: 0x02, data: user}}})
			},
			label: "cidata",
		},
		{
			name: "associated files are skipped",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "cidata", files: []isoFile{{id: "USER-DATA;1", flags: 0x04, data: user}}})
			},
			label: "cidata",
		},
		{
			name: "an unreadable file counts as missing",
			iso: func(t *testing.T) []byte {
				img := buildISO(t, isoSpec{label: "cidata", files: []isoFile{{id: "META-DATA;1", data: meta}, {id: "USER-DATA;1", data: user}}})

				return img[:len(img)-sectorSize] // user-data's extent is gone
			},
			label: "cidata", meta: meta,
		},
		{
			name: "an unreadable root directory fails the mount",
			iso: func(t *testing.T) []byte {
				return buildISO(t, isoSpec{label: "cidata", files: []isoFile{{id: "USER-DATA;1", data: user}}})[:18*sectorSize]
			},
			mountFail: true,
		},
		{
			name:      "not an ISO",
			iso:       func(*testing.T) []byte { return bytes.Repeat([]byte("talos"), 10000) },
			notConfig: true,
		},
		{
			name:      "empty",
			iso:       func(*testing.T) []byte { return nil },
			notConfig: true,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := talos.ReadNoCloudISO(tt.iso(t))
			if tt.mountFail {
				if err == nil || errors.Is(err, talos.ErrNotConfigDisk) {
					t.Fatalf("got %+v, %v; want a mount error", got, err)
				}

				return
			}

			if tt.notConfig {
				if !errors.Is(err, talos.ErrNotConfigDisk) {
					t.Fatalf("got %+v, %v; want ErrNotConfigDisk", got, err)
				}

				return
			}

			if err != nil {
				t.Fatal(err)
			}

			if got.Label != tt.label || !bytes.Equal(got.UserData, tt.user) || !bytes.Equal(got.MetaData, tt.meta) ||
				(tt.user == nil) != (got.UserData == nil) || got.NetworkConfig != nil {
				t.Errorf("got label %q, user-data %q, meta-data %q, network-config %q", got.Label, got.UserData, got.MetaData, got.NetworkConfig)
			}
		})
	}
}

func FuzzReadNoCloudISO(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 20*sectorSize))

	for _, spec := range []isoSpec{
		{label: "cidata", files: []isoFile{{id: "USER-DATA;1", data: []byte("x")}}},
		{label: "cidata", rockRidge: true, jolietLabel: "cidata", files: []isoFile{{id: "A;1", rrName: "user-data", joliet: "user-data", data: []byte("y")}}},
	} {
		f.Add(buildISO(f, spec))
	}

	f.Fuzz(func(t *testing.T, img []byte) {
		_, _ = talos.ReadNoCloudISO(img) //nolint:errcheck // only must not panic
	})
}

// TestBootGzippedUserData boots a node from gzip-compressed user data, which
// Talos unzips before loading the config.
func TestBootGzippedUserData(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 11)
	w := newWorld(t, talos.Options{})
	addr := tc.addrs[tc.worker(1)]

	var buf bytes.Buffer

	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(tc.configs[tc.worker(1)]); err != nil {
		t.Fatal(err)
	}

	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}

	if err := w.Boot(t.Context(), addr, buf.Bytes()); err != nil {
		t.Fatal(err)
	}

	if st := waitUp(t, w, addr, talos.ModeRunning); st.Hostname != tc.worker(1) || st.Cluster != tc.name {
		t.Errorf("node %+v", st)
	}
}
