package lab_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

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
		Endpoints  map[string]string `json:"endpoints"`
		FaultKinds []string          `json:"fault_kinds"`
	}
	if get("/lab/v1/", &index) != 200 || len(index.Endpoints) < 5 {
		t.Fatalf("index: %+v", index)
	}
	if !slices.Contains(index.FaultKinds, "talos-never-reboot") {
		t.Errorf("fault kinds lack talos-never-reboot: %v", index.FaultKinds)
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
	if code := post(`{"kind":"talos-never-reboot","addr":"127.42.0.5"}`); code != 200 {
		t.Fatalf("talos-never-reboot answered %d", code)
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

// TestControlAPIConnectionFaults injects the reset, lost-reply and hang
// kinds through the control API, refuses bad ones with a clear message,
// and sees a lost reply and a reset with an HTTP/2 client of the lab's
// Proxmox API and in the log.
func TestControlAPIConnectionFaults(t *testing.T) {
	t.Parallel()
	l, err := lab.Start(t.Context(), lab.Options{Bridges: map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix("127.58.0.0/24")}, TaskDuration: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv := httptest.NewServer(l.ControlHandler())
	defer srv.Close()

	inject := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/lab/v1/faults", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var answer map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, answer["error"]
	}
	for _, body := range []string{
		`{"kind":"proxmox-reset","op":"qemu.create"}`,
		`{"kind":"proxmox-lost-reply","op":"qemu.create","n":1}`,
		`{"kind":"talos-hang","addr":"127.58.0.100","op":"Bootstrap"}`,
		`{"kind":"talos-reset","addr":"127.58.0.100","op":"ApplyConfiguration","n":2}`,
		`{"kind":"talos-lost-reply","addr":"127.58.0.100","op":"/machine.MachineService/Reset"}`,
	} {
		if code, msg := inject(body); code != http.StatusOK {
			t.Errorf("POST %s: %d %s", body, code, msg)
		}
	}
	for body, want := range map[string]string{
		`{"kind":"proxmox-reset"}`:                                  "needs op",
		`{"kind":"talos-reset","op":"Bootstrap"}`:                   "needs addr",
		`{"kind":"talos-lost-reply","addr":"node-1","op":"Reset"}`:  "needs addr",
		`{"kind":"talos-hang","addr":"127.58.0.100"}`:               "needs op",
		`{"kind":"kube-reset","op":"*"}`:                            "needs cluster",
		`{"kind":"kube-lost-reply","cluster":"nope","op":"*"}`:      `cluster "nope" has no Kubernetes API`,
		`{"kind":"talos-crash","addr":"127.58.0.100","op":"Reset"}`: "unknown fault kind",
		`{"kind":"kube-explode","cluster":"x"}`:                     "unknown fault kind",
		`{"kind":"proxmox-reboot","op":"*"}`:                        "unknown fault kind",
	} {
		if code, msg := inject(body); code != http.StatusBadRequest || !strings.Contains(msg, want) {
			t.Errorf("POST %s: %d %q, want 400 naming %q", body, code, msg, want)
		}
	}

	// The lab's Proxmox API over HTTP/2: the first create is reset, the
	// second carried out with its reply lost.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(l.CA.PEM())
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true,
	}}
	create := func(vmid string) error {
		form := url.Values{"vmid": {vmid}, "name": {"vm-" + vmid}}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, l.PVEURL+"/api2/json/nodes/pve1/qemu", strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "PVEAPIToken="+l.TokenID+"="+l.TokenSecret)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return fmt.Errorf("answered %s over %s", resp.Status, resp.Proto)
	}
	for _, vmid := range []string{"200", "201"} {
		if err := create(vmid); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			t.Fatalf("create %s: %v, want a connection reset", vmid, err)
		}
	}
	var ids []int
	for _, vm := range l.PVE.VMs() {
		ids = append(ids, vm.ID)
	}
	if !slices.Equal(ids, []int{201}) {
		t.Errorf("VMs %v, want only 201, whose reply was lost", ids)
	}

	var log []lab.LogEntry
	resp, err := http.Get(srv.URL + "/lab/v1/log")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&log); err != nil {
		t.Fatal(err)
	}
	var results, faults []string
	for _, e := range log {
		switch {
		case e.Source == "proxmox" && e.Op == "qemu.create":
			results = append(results, e.Result)
		case e.Source == "lab" && e.Op == "fault":
			faults = append(faults, e.Target)
		}
	}
	if want := []string{"no answer (reset)", "200 not sent (lost-reply)"}; !slices.Equal(results, want) {
		t.Errorf("the log's creates %q, want %q", results, want)
	}
	if want := []string{"proxmox-reset", "proxmox-lost-reply", "talos-hang", "talos-reset", "talos-lost-reply"}; !slices.Equal(faults, want) {
		t.Errorf("the log's faults %q, want %q", faults, want)
	}
}
