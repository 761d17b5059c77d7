package pve_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/taloscluster/taloscluster/lab/pve"
)

// TestAgentReportsEveryAddress checks network-get-interfaces against the
// shape qemu-ga answers on Linux: lo with 127.0.0.1/8 and ::1/128, then
// each NIC with every address it holds (IPv4 first, a VIP as a /32 after
// the primary address) and its EUI-64 link-local address.
func TestAgentReportsEveryAddress(t *testing.T) {
	t.Parallel()
	m := newMachines()
	l := newLab(t, pve.Options{Machines: m})
	upid := l.started(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{
		"vmid": {"100"}, "agent": {"1"}, "start": {"1"}, "net0": {"virtio=BC:24:11:0A:0B:0C,bridge=vmbr0"},
	})
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Fatalf("create = %q", st)
	}
	m.wantOn(t)
	path := "/nodes/pve1/qemu/100/agent/network-get-interfaces"
	if code, body := l.call(t, http.MethodGet, path, nil); code != http.StatusInternalServerError || body["message"] != "QEMU guest agent is not running\n" {
		t.Errorf("before an address = %d %v", code, body)
	}

	// The node holds the cluster VIP next to its own address.
	m.setAddresses(100, mustPrefix("10.0.0.11/24"), mustPrefix("10.0.0.10/32"))
	code, body := l.call(t, http.MethodGet, path, nil)
	if code != http.StatusOK {
		t.Fatalf("interfaces = %d %v", code, body)
	}
	got, _ := json.Marshal(body["data"])
	stats := `"statistics":{"rx-bytes":0,"rx-dropped":0,"rx-errs":0,"rx-packets":0,"tx-bytes":0,"tx-dropped":0,"tx-errs":0,"tx-packets":0}`
	want := `{"result":[` +
		`{"hardware-address":"00:00:00:00:00:00","ip-addresses":[` +
		`{"ip-address":"127.0.0.1","ip-address-type":"ipv4","prefix":8},` +
		`{"ip-address":"::1","ip-address-type":"ipv6","prefix":128}],"name":"lo",` + stats + `},` +
		`{"hardware-address":"bc:24:11:0a:0b:0c","ip-addresses":[` +
		`{"ip-address":"10.0.0.11","ip-address-type":"ipv4","prefix":24},` +
		`{"ip-address":"10.0.0.10","ip-address-type":"ipv4","prefix":32},` +
		`{"ip-address":"fe80::be24:11ff:fe0a:b0c","ip-address-type":"ipv6","prefix":64}],"name":"eth0",` + stats + `}]}`
	if string(got) != want {
		t.Errorf("interfaces =\n%s\nwant\n%s", got, want)
	}

	// The VIP moves away: the next answer no longer has it.
	m.setAddresses(100, mustPrefix("10.0.0.11/24"))
	_, body = l.call(t, http.MethodGet, path, nil)
	nic := body["data"].(map[string]any)["result"].([]any)[1].(map[string]any)
	if ips := nic["ip-addresses"].([]any); len(ips) != 2 {
		t.Errorf("after the VIP moved: %v", ips)
	}
}

// TestAgentErrors checks the order of qemu-server's assert_agent_available:
// agent configured, VM running, agent answering.
func TestAgentErrors(t *testing.T) {
	t.Parallel()
	m := newMachines()
	l := newLab(t, pve.Options{Machines: m})
	for _, vm := range []url.Values{
		{"vmid": {"100"}},
		{"vmid": {"101"}, "agent": {"0"}},
		{"vmid": {"102"}, "agent": {"1"}},
	} {
		if st := l.waitTask(t, "pve1", l.started(t, http.MethodPost, "/nodes/pve1/qemu", vm)); st != "OK" {
			t.Fatalf("create = %q", st)
		}
	}
	for _, tc := range []struct{ vmid, want string }{
		{"100", "No QEMU guest agent configured\n"},
		{"101", "VM 101 is not running\n"},
		{"102", "VM 102 is not running\n"},
	} {
		code, body := l.call(t, http.MethodGet, "/nodes/pve1/qemu/"+tc.vmid+"/agent/network-get-interfaces", nil)
		if code != http.StatusInternalServerError || body["message"] != tc.want {
			t.Errorf("VM %s stopped = %d %v, want %q", tc.vmid, code, body, tc.want)
		}
	}
	if st := l.waitTask(t, "pve1", l.started(t, http.MethodPost, "/nodes/pve1/qemu/101/status/start", nil)); st != "OK" {
		t.Fatalf("start = %q", st)
	}
	m.wantOn(t)
	m.setAddresses(101, mustPrefix("10.0.0.12/24"))
	code, body := l.call(t, http.MethodGet, "/nodes/pve1/qemu/101/agent/network-get-interfaces", nil)
	if code != http.StatusInternalServerError || body["message"] != "QEMU guest agent is not running\n" {
		t.Errorf("agent disabled = %d %v", code, body)
	}
}
