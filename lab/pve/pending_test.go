package pve_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/taloscluster/taloscluster/lab/pve"
)

// pendingOf reads GET .../pending as key -> item.
func (l *lab) pendingOf(t *testing.T, vmid int) map[string]map[string]any {
	t.Helper()
	code, body := l.call(t, http.MethodGet, fmt.Sprintf("/nodes/pve1/qemu/%d/pending", vmid), nil)
	if code != http.StatusOK {
		t.Fatalf("pending = %d %v", code, body)
	}
	items, ok := body["data"].([]any)
	if !ok {
		t.Fatalf("pending answers %v, want a list", body)
	}
	out := map[string]map[string]any{}
	for _, it := range items {
		m := it.(map[string]any)
		out[m["key"].(string)] = m
	}
	return out
}

// configOf reads GET .../config, the current configuration when current.
func (l *lab) configOf(t *testing.T, vmid int, current bool) map[string]any {
	t.Helper()
	var q url.Values
	if current {
		q = url.Values{"current": {"1"}}
	}
	code, body := l.call(t, http.MethodGet, fmt.Sprintf("/nodes/pve1/qemu/%d/config", vmid), q)
	if code != http.StatusOK {
		t.Fatalf("config = %d %v", code, body)
	}
	return body["data"].(map[string]any)
}

// post makes a POST whose answer is a task and waits for its exit status.
func (l *lab) post(t *testing.T, path string, params url.Values) string {
	t.Helper()
	code, body := l.call(t, http.MethodPost, path, params)
	if code != http.StatusOK {
		t.Fatalf("POST %s = %d %v", path, code, body)
	}
	return l.waitTask(t, "pve1", body["data"].(string))
}

func text(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// TestPendingHardwareChanges: on a running VM, cores, sockets and memory
// are not hot-plugged (default hotplug network,disk,usb) and stay pending;
// GET pending lists {key, value, pending}; GET config shows the pending
// values unless current=1; a change back to the current value is no
// change (cleanup_pending); an API stop applies them as the VM stops, a
// guest power-off does not (the next start does), and a reboot applies
// them and power-cycles the machine.
func TestPendingHardwareChanges(t *testing.T) {
	t.Parallel()
	m := newMachines()
	l := newLab(t, pve.Options{Machines: m})
	if st := l.post(t, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "name": {"cp01"}, "cores": {"2"}, "memory": {"4096"}, "start": {"1"},
		"net0": {"virtio=02:00:00:00:00:01,bridge=vmbr0"}}); st != "OK" {
		t.Fatalf("create = %s", st)
	}
	m.wantOn(t)

	if st := l.post(t, "/nodes/pve1/qemu/100/config", url.Values{"cores": {"4"}, "sockets": {"2"}, "memory": {"8192"}, "description": {"resized"}}); st != "OK" {
		t.Fatalf("update = %s", st)
	}
	p := l.pendingOf(t, 100)
	for key, want := range map[string][2]string{"cores": {"2", "4"}, "sockets": {"", "2"}, "memory": {"4096", "8192"}, "description": {"resized", ""}, "name": {"cp01", ""}} {
		it := p[key]
		if it == nil || text(it["value"]) != want[0] || text(it["pending"]) != want[1] {
			t.Errorf("pending item %s = %v, want value %q pending %q", key, it, want[0], want[1])
		}
	}
	if _, ok := p["digest"]; !ok {
		t.Error("pending lists no digest (load_config's conf has one)")
	}
	if c := l.configOf(t, 100, false); text(c["cores"]) != "4" || text(c["memory"]) != "8192" {
		t.Errorf("config = cores %v memory %v, want the pending values", c["cores"], c["memory"])
	}
	if c := l.configOf(t, 100, true); text(c["cores"]) != "2" || text(c["memory"]) != "4096" || c["sockets"] != nil {
		t.Errorf("config current=1 = cores %v memory %v sockets %v, want the current values", c["cores"], c["memory"], c["sockets"])
	}

	// Back to the current value: cleanup_pending drops it.
	if st := l.post(t, "/nodes/pve1/qemu/100/config", url.Values{"cores": {"2"}}); st != "OK" {
		t.Fatalf("update = %s", st)
	}
	if it := l.pendingOf(t, 100)["cores"]; it["pending"] != nil {
		t.Errorf("cores set back to its current value is still pending: %v", it)
	}

	// An API stop applies the pending changes as the VM stops.
	if st := l.post(t, "/nodes/pve1/qemu/100/status/stop", nil); st != "OK" {
		t.Fatalf("stop = %s", st)
	}
	m.wantOff(t)
	st := l.srv.VMs()[0]
	if len(st.Pending) != 0 || st.Config["memory"] != "8192" || st.Config["sockets"] != "2" {
		t.Errorf("after an API stop: pending %v, memory %q sockets %q; want them applied", st.Pending, st.Config["memory"], st.Config["sockets"])
	}

	// A guest power-off keeps them until the next start.
	if st := l.post(t, "/nodes/pve1/qemu/100/status/start", nil); st != "OK" {
		t.Fatalf("start = %s", st)
	}
	m.wantOn(t)
	if st := l.post(t, "/nodes/pve1/qemu/100/config", url.Values{"memory": {"16384"}}); st != "OK" {
		t.Fatalf("update = %s", st)
	}
	l.srv.GuestStopped(100)
	m.wantOff(t)
	if st := l.srv.VMs()[0]; st.Pending["memory"] != "16384" || st.Config["memory"] != "8192" {
		t.Errorf("after a guest power-off: memory %q pending %q, want 8192 then 16384", st.Config["memory"], st.Pending["memory"])
	}
	if st := l.post(t, "/nodes/pve1/qemu/100/status/start", nil); st != "OK" {
		t.Fatalf("start = %s", st)
	}
	if on := m.wantOn(t); on.MemoryMB != 16384 {
		t.Errorf("started with %d MiB, want the pending 16384", on.MemoryMB)
	}

	// A reboot applies them and power-cycles the machine.
	if st := l.post(t, "/nodes/pve1/qemu/100/config", url.Values{"cores": {"3"}}); st != "OK" {
		t.Fatalf("update = %s", st)
	}
	code, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu/100/status/reboot", nil)
	upid, _ := body["data"].(string)
	if code != http.StatusOK || !taskType(upid, "qmreboot") {
		t.Fatalf("reboot = %d %v, want a qmreboot task", code, body)
	}
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Fatalf("reboot task = %s", st)
	}
	if id := m.wantOff(t); id != 100 {
		t.Errorf("PowerOff(%d)", id)
	}
	if on := m.wantOn(t); on.Cores != 6 {
		t.Errorf("rebooted with %d vCPUs, want 3 cores x 2 sockets", on.Cores)
	}
	for k, it := range l.pendingOf(t, 100) {
		if it["pending"] != nil || it["delete"] != nil {
			t.Errorf("after the reboot %s is still pending: %v", k, it)
		}
	}
}

func taskType(upid, typ string) bool {
	// UPID:node:pid:pstart:starttime:type:id:user:
	n := 0
	for i := 0; i < len(upid); i++ {
		if upid[i] == ':' {
			n++
			if n == 5 {
				rest := upid[i+1:]
				return len(rest) > len(typ) && rest[:len(typ)] == typ && rest[len(typ)] == ':'
			}
		}
	}
	return false
}

// TestRebootNeedsPowerMgmt: POST status/reboot checks VM.PowerMgmt on
// /vms/{vmid} (vm_reboot's permissions), before forking.
func TestRebootNeedsPowerMgmt(t *testing.T) {
	t.Parallel()
	m := newMachines()
	l := newLab(t, pve.Options{Machines: m,
		Tokens: []pve.Token{{ID: "ops@pve!audit", Secret: "s", Privsep: true}},
		ACLs: []pve.ACL{
			{Path: "/", User: "ops@pve", Roles: []string{"PVEAdmin"}, Propagate: true},
			{Path: "/", Token: "ops@pve!audit", Roles: []string{"PVEAuditor"}, Propagate: true},
		}})
	if st := l.post(t, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "start": {"1"}}); st != "OK" {
		t.Fatalf("create = %s", st)
	}
	m.wantOn(t)
	code, body := l.callAuth(t, http.MethodPost, "/nodes/pve1/qemu/100/status/reboot", nil, "PVEAPIToken=ops@pve!audit=s")
	if code != http.StatusForbidden || body["message"] != "Permission check failed (/vms/100, VM.PowerMgmt)\n" {
		t.Errorf("reboot without VM.PowerMgmt = %d %v, want 403", code, body)
	}
	if !l.srv.VMs()[0].Running {
		t.Error("the refused reboot stopped the VM")
	}
}
