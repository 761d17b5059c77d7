package lab_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/taloscluster/taloscluster/lab"
)

func TestControlAPI(t *testing.T) {
	t.Parallel()
	l, err := lab.Start(t.Context(), lab.Options{Bridges: map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix("127.59.0.0/24")}, TaskDuration: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv := httptest.NewServer(l.ControlHandler())
	defer srv.Close()

	get := func(path string, into any) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if into != nil {
			if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		return resp.StatusCode
	}
	var index struct {
		Endpoints map[string]string `json:"endpoints"`
	}
	if get("/lab/v1/", &index) != 200 || len(index.Endpoints) < 5 {
		t.Fatalf("index: %+v", index)
	}
	var world lab.WorldView
	if get("/lab/v1/world", &world) != 200 || world.VMs == nil || world.Nodes == nil {
		t.Fatalf("world: %+v", world)
	}
	post := func(body string) int {
		t.Helper()
		resp, err := http.Post(srv.URL+"/lab/v1/faults", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(`{"kind":"proxmox-fail","op":"qemu.create","n":1,"status":500}`); code != 200 {
		t.Fatalf("injecting a fault: %d", code)
	}
	if code := post(`{"kind":"nonsense"}`); code != 400 {
		t.Fatalf("an unknown fault kind answered %d, want 400", code)
	}
	if code := post(`{"kind":"talos-never-boot"}`); code != 400 {
		t.Fatalf("a node fault without an address answered %d, want 400", code)
	}
	var log []lab.LogEntry
	if get("/lab/v1/log", &log) != 200 {
		t.Fatal("log")
	}
	found := false
	for _, e := range log {
		found = found || (e.Source == "lab" && e.Op == "fault" && e.Target == "proxmox-fail")
	}
	if !found {
		t.Fatalf("the fault is not in the log: %+v", log)
	}
	if code := get("/lab/v1/nope", nil); code != http.StatusNotImplemented {
		t.Fatalf("unknown path answered %d, want 501", code)
	}
}
