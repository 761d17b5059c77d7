package factory_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kdomanski/iso9660"

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

func TestSchematics(t *testing.T) {
	t.Parallel()
	_, ts := start(t)
	exts := []string{"siderolabs/qemu-guest-agent", "siderolabs/tailscale"}
	canonical, err := machineconfig.SchematicYAML(exts)
	if err != nil {
		t.Fatal(err)
	}
	want, err := machineconfig.SchematicID(exts)
	if err != nil {
		t.Fatal(err)
	}
	empty, _ := machineconfig.SchematicID(nil)

	for _, tc := range []struct {
		name   string
		body   string
		code   int
		wantID string
	}{
		{"canonical yaml", string(canonical), http.StatusCreated, want},
		{"json, unsorted with a duplicate", `{"customization":{"systemExtensions":{"officialExtensions":["siderolabs/tailscale","siderolabs/qemu-guest-agent","siderolabs/tailscale"]}}}`, http.StatusCreated, want},
		{"empty body", "", http.StatusCreated, empty},
		{"other customization", "customization:\n  extraKernelArgs: [console=ttyS0]\n", http.StatusBadRequest, ""},
		{"not yaml", "customization: [", http.StatusBadRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, ts, http.MethodPost, "/schematics", tc.body)
			if code != tc.code {
				t.Fatalf("status %d (%s), want %d", code, body, tc.code)
			}
			if tc.wantID == "" {
				return
			}
			var got struct{ ID string }
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("answer %q: %v", body, err)
			}
			if got.ID != tc.wantID {
				t.Errorf("id = %s, want %s", got.ID, tc.wantID)
			}
		})
	}
}

func TestImages(t *testing.T) {
	t.Parallel()
	f, ts := start(t)
	exts := []string{"siderolabs/qemu-guest-agent"}
	canonical, _ := machineconfig.SchematicYAML(exts)
	id, _ := machineconfig.SchematicID(exts)
	if code, body := do(t, ts, http.MethodPost, "/schematics", string(canonical)); code != http.StatusCreated {
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

	code, raw := do(t, ts, http.MethodGet, "/image/"+id+"/v1.13.9/openstack-amd64.raw.xz", "")
	if code != http.StatusOK || len(raw) < 4096 {
		t.Errorf("raw image = %d, %d bytes", code, len(raw))
	}

	unknown := strings.Repeat("a", 64)
	for _, tc := range []struct{ name, path string }{
		{"unknown schematic", "/image/" + unknown + "/v1.13.9/nocloud-amd64.iso"},
		{"bad version", "/image/" + id + "/latest/nocloud-amd64.iso"},
		{"unknown file", "/image/" + id + "/v1.13.9/readme.txt"},
		{"short id", "/image/abc/v1.13.9/nocloud-amd64.iso"},
	} {
		if code, _ := do(t, ts, http.MethodGet, tc.path, ""); code != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", tc.name, code)
		}
	}

	f.Fail("image.get", 1, http.StatusServiceUnavailable)
	if code, _ := do(t, ts, http.MethodGet, isoPath, ""); code != http.StatusServiceUnavailable {
		t.Errorf("injected failure = %d, want 503", code)
	}
	if code, _ := do(t, ts, http.MethodGet, isoPath, ""); code != http.StatusOK {
		t.Errorf("after the failure = %d", code)
	}

	log := f.Log()
	if len(log) == 0 || log[0].Op != "schematics.create" || log[0].Status != http.StatusCreated {
		t.Errorf("first log entry = %+v", log)
	}
	var imageGets int
	for _, r := range log {
		if r.Op == "image.get" {
			imageGets++
		}
	}
	if imageGets != 9 {
		t.Errorf("%d image.get entries, want 9", imageGets)
	}
	if got := f.Schematics()[id]; len(got) != 1 || got[0] != exts[0] {
		t.Errorf("Schematics()[id] = %v", got)
	}
}
