package factory_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kdomanski/iso9660"
	"github.com/ulikunitz/xz"

	"github.com/taloscluster/taloscluster/lab/factory"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
)

func start(t *testing.T) (*factory.Server, *httptest.Server) {
	t.Helper()
	f := factory.New()
	ts := httptest.NewServer(f.Handler())
	t.Cleanup(ts.Close)
	return f, ts
}

func do(t *testing.T, ts *httptest.Server, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// Published schematic IDs. The first six are the expectations of
// image-factory's pkg/schematic tests (TestID, TestUnmarshalID); the last
// two are the IDs factory.talos.dev answers for the schematics of official
// extensions that Proxmox and Longhorn guides publish.
const (
	idEmpty           = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	idKernelArgs      = "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c"
	idMeta            = "d308a2a5ee2277bed5fbaa104fcbc8d59122abfa737df987a95b4ca763459a7f"
	idSecureBoot      = "fa8e05f142a851d3ee568eb0a8e5841eaf6b0ebc8df9a63df16ac5ed2c04f3e6"
	idSector4K        = "92833e9ddd9bb9e11b2464fa5525429f01866306d52ebd882ee08d7918f6d1ea"
	idOverlay         = "ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9"
	idQemuGuestAgent  = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"
	idISCSIUtilLinux  = "613e1592b2da41ae5e265e8789429f22e121aab91cb4deb6bc3c0b6262961245"
	qemuGuestAgentDoc = "customization:\n    systemExtensions:\n        officialExtensions:\n            - siderolabs/qemu-guest-agent\n"
)

func TestSchematics(t *testing.T) {
	t.Parallel()
	_, ts := start(t)
	for _, tc := range []struct {
		name   string
		body   string
		code   int
		wantID string
		answer string // the error text, for refusals
	}{
		{"empty object", `{}`, http.StatusCreated, idEmpty, ""},
		{"empty customization", "customization: {}", http.StatusCreated, idEmpty, ""},
		{"empty kernel args", `customization: {"extraKernelArgs": []}`, http.StatusCreated, idEmpty, ""},
		{"kernel args", `{"customization": {"extraKernelArgs": ["noapic", "nolapic"]}}`, http.StatusCreated, idKernelArgs, ""},
		{"kernel args, empty extensions", `{"customization": {"extraKernelArgs": ["noapic", "nolapic"], "systemExtensions": {}}}`, http.StatusCreated, idKernelArgs, ""},
		{"meta", `{"customization": {"meta": [{"key": 10, "value": "foo"}], "extraKernelArgs": [], "systemExtensions": {}}}`, http.StatusCreated, idMeta, ""},
		{"overlay", `{"overlay": {"name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"}}`, http.StatusCreated, idOverlay, ""},
		{"overlay, empty customization", `{"overlay": {"name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"},"customization":{}}`, http.StatusCreated, idOverlay, ""},
		{"secureboot", `{"customization":{"secureboot": {"includeWellKnownCertificates": true}}}`, http.StatusCreated, idSecureBoot, ""},
		{"4k sectors", "customization:\n  diskImage:\n    sectorSize: 4096\n", http.StatusCreated, idSector4K, ""},
		{"qemu-guest-agent yaml", qemuGuestAgentDoc, http.StatusCreated, idQemuGuestAgent, ""},
		{"qemu-guest-agent json", `{"customization":{"systemExtensions":{"officialExtensions":["siderolabs/qemu-guest-agent"]}}}`, http.StatusCreated, idQemuGuestAgent, ""},
		{"iscsi and util-linux", `{"customization":{"systemExtensions":{"officialExtensions":["siderolabs/iscsi-tools","siderolabs/util-linux-tools"]}}}`, http.StatusCreated, idISCSIUtilLinux, ""},
		{"empty body", "", http.StatusBadRequest, "", "EOF\n"},
		{"unknown field", "customization:\n  kernelArgs: [console=ttyS0]\n", http.StatusBadRequest, "", ""},
		{"owner", "owner: someone\n", http.StatusBadRequest, "", "owner field is only supported in Enterprise edition\n"},
		{"bad bootloader", "customization:\n  bootloader: lilo\n", http.StatusBadRequest, "", ""},
		{"not yaml", "customization: [", http.StatusBadRequest, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, ts, http.MethodPost, "/schematics", tc.body)
			if code != tc.code {
				t.Fatalf("status %d (%s), want %d", code, body, tc.code)
			}
			if tc.answer != "" && string(body) != tc.answer {
				t.Errorf("answer %q, want %q", body, tc.answer)
			}
			if tc.wantID == "" {
				return
			}
			var got struct{ ID, Schematic string }
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("answer %q: %v", body, err)
			}
			if got.ID != tc.wantID {
				t.Errorf("id = %s, want %s", got.ID, tc.wantID)
			}
			// The canonical form is answered and served back.
			code, yaml := do(t, ts, http.MethodGet, "/schematics/"+got.ID, "")
			if code != http.StatusOK || string(yaml) != got.Schematic {
				t.Errorf("GET /schematics/%s = %d %q, want %q", got.ID, code, yaml, got.Schematic)
			}
			if id, err := factory.SchematicID([]byte(tc.body)); err != nil || id != tc.wantID {
				t.Errorf("SchematicID = %s, %v", id, err)
			}
		})
	}
	if code, body := do(t, ts, http.MethodGet, "/schematics/"+strings.Repeat("a", 64), ""); code != http.StatusNotFound || string(body) != "schematic not found\n" {
		t.Errorf("unknown schematic = %d %q", code, body)
	}

	// The factory keeps the order of a list: another order (or a
	// duplicate) is another schematic.
	_, body := do(t, ts, http.MethodPost, "/schematics", `{"customization":{"systemExtensions":{"officialExtensions":["siderolabs/util-linux-tools","siderolabs/iscsi-tools"]}}}`)
	if strings.Contains(string(body), idISCSIUtilLinux) {
		t.Errorf("reordered extensions got the sorted list's ID: %s", body)
	}
}

// TestEngineSchematics checks the engine's schematic against the factory:
// the document it posts must get the ID it computes on its own.
func TestEngineSchematics(t *testing.T) {
	t.Parallel()
	_, ts := start(t)
	for _, exts := range [][]string{
		nil,
		{"siderolabs/qemu-guest-agent"},
		{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"},
		{"siderolabs/util-linux-tools", "siderolabs/qemu-guest-agent", "siderolabs/iscsi-tools", "siderolabs/qemu-guest-agent"},
	} {
		doc, err := machineconfig.SchematicYAML(exts)
		if err != nil {
			t.Fatal(err)
		}
		want, err := machineconfig.SchematicID(exts)
		if err != nil {
			t.Fatal(err)
		}
		code, body := do(t, ts, http.MethodPost, "/schematics", string(doc))
		var got struct{ ID string }
		if code != http.StatusCreated || json.Unmarshal(body, &got) != nil || got.ID != want {
			t.Errorf("%v: factory answered %d %s, engine computes %s", exts, code, body, want)
		}
	}
	if id, _ := machineconfig.SchematicID([]string{"siderolabs/qemu-guest-agent"}); id != idQemuGuestAgent {
		t.Errorf("engine ID for qemu-guest-agent = %s, published %s", id, idQemuGuestAgent)
	}
}

func TestImages(t *testing.T) {
	t.Parallel()
	f, ts := start(t)
	id := idQemuGuestAgent
	exts := []string{"siderolabs/qemu-guest-agent"}
	if code, body := do(t, ts, http.MethodPost, "/schematics", qemuGuestAgentDoc); code != http.StatusCreated {
		t.Fatalf("posting the schematic: %d %s", code, body)
	}

	isoPath := "/image/" + id + "/v1.13.9/nocloud-amd64.iso"
	code, img := do(t, ts, http.MethodGet, isoPath, "")
	if code != http.StatusOK {
		t.Fatalf("GET iso = %d", code)
	}
	_, again := do(t, ts, http.MethodGet, isoPath, "")
	if !bytes.Equal(img, again) || !bytes.Equal(img, factory.Image(id, "v1.13.9", "nocloud-amd64.iso", exts)) {
		t.Error("the ISO is not deterministic")
	}
	// The factory accepts the version without its "v".
	if _, noV := do(t, ts, http.MethodGet, "/image/"+id+"/1.13.9/nocloud-amd64.iso", ""); !bytes.Equal(img, noV) {
		t.Error("the version without v gives another image")
	}
	iso, err := iso9660.OpenImage(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("the ISO does not parse: %v", err)
	}
	if label, _ := iso.Label(); label != "TALOS" {
		t.Errorf("label = %q", label)
	}
	root, err := iso.RootDir()
	if err != nil {
		t.Fatal(err)
	}
	children, err := root.GetChildren()
	if err != nil || len(children) != 1 || children[0].Name() != "TALOS.TXT" {
		t.Fatalf("root = %v, %v", children, err)
	}
	text, err := io.ReadAll(children[0].Reader())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"schematic: " + id, "version: v1.13.9", "siderolabs/qemu-guest-agent"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("TALOS.TXT lacks %q:\n%s", want, text)
		}
	}

	for _, file := range []string{
		"openstack-amd64.raw.xz", "metal-arm64.raw.zst", "gcp-amd64.raw.tar.gz", "metal-amd64.qcow2",
		"azure-amd64.vhd.xz", "vmware-amd64.ova", "digital-ocean-amd64.raw.gz", "metal-amd64-secureboot.iso",
		"kernel-amd64", "initramfs-arm64.xz", "cmdline-metal-amd64", "installer-amd64.tar", "metal-installer-amd64.tar",
		"metal-amd64-uki.efi",
	} {
		code, raw := do(t, ts, http.MethodGet, "/image/"+id+"/v1.13.9/"+file, "")
		if code != http.StatusOK || len(raw) < 2048 {
			t.Errorf("%s = %d, %d bytes", file, code, len(raw))
		}
		if strings.HasSuffix(file, ".iso") || strings.HasSuffix(file, ".efi") {
			continue
		}
		// Compressed names are real streams of the stand-in bytes.
		plain, err := decompress(file, raw)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if !bytes.HasPrefix(plain, []byte("TALOSCLUSTER LAB IMAGE\nschematic: "+id)) || len(plain) < 4096 {
			t.Errorf("%s decompresses to %d bytes starting %q", file, len(plain), plain[:min(len(plain), 40)])
		}
	}

	unknown := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name, path string
		code       int
		answer     string
	}{
		{"unknown schematic", "/image/" + unknown + "/v1.13.9/nocloud-amd64.iso", http.StatusNotFound, `schematic ID "` + unknown + `" not found` + "\n"},
		{"short id", "/image/abc/v1.13.9/nocloud-amd64.iso", http.StatusNotFound, `schematic ID "abc" not found` + "\n"},
		{"bad version", "/image/" + id + "/latest/nocloud-amd64.iso", http.StatusInternalServerError, "internal server error\n"},
		{"unknown file", "/image/" + id + "/v1.13.9/readme.txt", http.StatusBadRequest, `invalid profile path: "readme.txt"` + "\n"},
		{"bad arch", "/image/" + id + "/v1.13.9/metal-riscv.iso", http.StatusBadRequest, `invalid architecture: "riscv"` + "\n"},
		{"no arch", "/image/" + id + "/v1.13.9/metal.iso", http.StatusBadRequest, `invalid platform-arch: "metal"` + "\n"},
	} {
		code, body := do(t, ts, http.MethodGet, tc.path, "")
		if code != tc.code || string(body) != tc.answer {
			t.Errorf("%s: %d %q, want %d %q", tc.name, code, body, tc.code, tc.answer)
		}
	}

	f.Fail("image.get", 1, http.StatusServiceUnavailable)
	if code, _ := do(t, ts, http.MethodGet, isoPath, ""); code != http.StatusServiceUnavailable {
		t.Errorf("injected failure = %d, want 503", code)
	}
	if code, _ := do(t, ts, http.MethodGet, isoPath, ""); code != http.StatusOK {
		t.Errorf("after the failure = %d", code)
	}

	// With a catalogue, an extension the factory does not offer is refused
	// when an image is asked for.
	f.SetOfficialExtensions("siderolabs/iscsi-tools")
	code, body := do(t, ts, http.MethodGet, isoPath, "")
	if want := `official extension "siderolabs/qemu-guest-agent" is not available for Talos version v1.13.9` + "\n"; code != http.StatusBadRequest || string(body) != want {
		t.Errorf("extension outside the catalogue = %d %q", code, body)
	}

	log := f.Log()
	if len(log) == 0 || log[0].Op != "schematics.create" || log[0].Status != http.StatusCreated {
		t.Errorf("first log entry = %+v", log)
	}
	if got := f.Schematics()[id]; len(got) != 1 || got[0] != exts[0] {
		t.Errorf("Schematics()[id] = %v", got)
	}
	if _, ok := f.Schematics()[factory.EmptySchematicID]; !ok {
		t.Error("the empty schematic is not known from the start")
	}
}

// decompress undoes what the factory's file name says: xz, gzip, or a
// gzip'd tar archive holding disk.raw.
func decompress(file string, data []byte) ([]byte, error) {
	switch {
	case strings.HasSuffix(file, ".xz"):
		r, err := xz.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(r)
	case strings.HasSuffix(file, ".gz"):
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		if !strings.HasSuffix(file, ".tar.gz") {
			return io.ReadAll(zr)
		}
		tr := tar.NewReader(zr)
		h, err := tr.Next()
		if err != nil {
			return nil, err
		}
		if h.Name != "disk.raw" {
			return nil, fmt.Errorf("the archive holds %q, want disk.raw", h.Name)
		}
		return io.ReadAll(tr)
	}
	return data, nil
}
