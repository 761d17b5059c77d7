package pve_test

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab/pve"
)

// slowTask is long enough for a test to read the state while a task runs.
const slowTask = 500 * time.Millisecond

// started calls an asynchronous endpoint and returns the UPID, failing the
// test unless the call answered one.
func (l *lab) started(t *testing.T, method, path string, params url.Values) string {
	t.Helper()
	code, body := l.call(t, method, path, params)
	upid, ok := body["data"].(string)
	if code != http.StatusOK || !ok {
		t.Fatalf("%s %s = %d %v, want a UPID", method, path, code, body)
	}
	return upid
}

// taskStatus is a task's status and exit status right now.
func (l *lab) taskStatus(t *testing.T, node, upid string) (string, string) {
	t.Helper()
	_, body := l.call(t, http.MethodGet, "/nodes/"+node+"/tasks/"+upid+"/status", nil)
	data := body["data"].(map[string]any)
	exit, _ := data["exitstatus"].(string)
	return data["status"].(string), exit
}

// data calls a read endpoint and returns its data.
func (l *lab) data(t *testing.T, path string, params url.Values) any {
	t.Helper()
	code, body := l.call(t, http.MethodGet, path, params)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %v", path, code, body)
	}
	return body["data"]
}

// uploadRaw posts an ISO upload the way proxmox-api-go does and returns the
// UPID without waiting.
func (l *lab) uploadRaw(t *testing.T, node, storage, name string, content []byte) string {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	_ = w.WriteField("content", "iso")
	fw, err := w.CreateFormFile("filename", name)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(content)
	_ = w.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, l.ts.URL+"/api2/json/nodes/"+node+"/storage/"+storage+"/upload", &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	req.Header.Set("Authorization", "PVEAPIToken="+pve.DefaultTokenID+"="+pve.DefaultTokenSecret)
	resp, err := l.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(raw, []byte("UPID:")) {
		t.Fatalf("upload = %d %s", resp.StatusCode, raw)
	}
	s := string(raw)
	return s[strings.Index(s, "UPID:") : strings.LastIndex(s, ":")+1]
}

func (l *lab) isoNames(t *testing.T, node string) []string {
	t.Helper()
	var out []string
	for _, v := range l.data(t, "/nodes/"+node+"/storage/local/content", url.Values{"content": {"iso"}}).([]any) {
		out = append(out, v.(map[string]any)["volid"].(string))
	}
	return out
}

// TestTaskEffectsAtTaskEnd shows every asynchronous call's effect landing
// when its task ends, as a Proxmox VE worker's does, and a VM being created
// listed with "lock: create" meanwhile.
func TestTaskEffectsAtTaskEnd(t *testing.T) {
	t.Parallel()
	m := newMachines()
	l := newLab(t, pve.Options{Machines: m, TaskDuration: slowTask})

	// Create: the placeholder is listed at once, locked, without a name
	// or pool; changes are refused until the task ends.
	if code, body := l.call(t, http.MethodPost, "/pools", url.Values{"poolid": {"p"}}); code != http.StatusOK {
		t.Fatalf("creating the pool = %d %v", code, body)
	}
	upid := l.started(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{
		"vmid": {"100"}, "name": {"a"}, "pool": {"p"}, "memory": {"1024"}, "agent": {"1"},
		"scsi0": {"local-lvm:4"}, "net0": {"virtio=02:00:00:00:01:01,bridge=vmbr0"},
	})
	if st, _ := l.taskStatus(t, "pve1", upid); st != "running" {
		t.Fatalf("create task = %s, want running", st)
	}
	res := l.data(t, "/cluster/resources", url.Values{"type": {"vm"}}).([]any)
	if len(res) != 1 {
		t.Fatalf("resources while creating = %v", res)
	}
	if r := res[0].(map[string]any); r["lock"] != "create" || r["name"] != "VM 100" || r["pool"] != nil || r["status"] != "stopped" {
		t.Errorf("resource while creating = %v", r)
	}
	conf := l.data(t, "/nodes/pve1/qemu/100/config", nil).(map[string]any)
	if conf["lock"] != "create" || conf["name"] != nil || conf["digest"] == nil || len(conf) != 2 {
		t.Errorf("config while creating = %v", conf)
	}
	for _, method := range []string{http.MethodPut, http.MethodPost} {
		code, body := l.call(t, method, "/nodes/pve1/qemu/100/config", url.Values{"name": {"b"}})
		if code != http.StatusInternalServerError || body["message"] != "VM is locked (create)\n" {
			t.Errorf("%s config while creating = %d %v", method, code, body)
		}
	}
	for _, v := range l.srv.Volumes() {
		if v.Content == "images" {
			t.Errorf("disk %s allocated before the create task ended", v.VolID)
		}
	}
	// A start queued behind the create runs after it, like a worker
	// waiting for the config lock, and finds the VM created.
	startUPID := l.started(t, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Fatalf("create task = %q", st)
	}
	conf = l.data(t, "/nodes/pve1/qemu/100/config", nil).(map[string]any)
	if conf["lock"] != nil || conf["name"] != "a" {
		t.Errorf("config after the create = %v", conf)
	}
	if vm := l.srv.VMs()[0]; vm.Pool != "p" {
		t.Errorf("pool after the create = %q", vm.Pool)
	}
	if st := l.waitTask(t, "pve1", startUPID); st != "OK" {
		t.Fatalf("start task queued behind the create = %q", st)
	}
	m.wantOn(t)

	// Stop: still running while the task runs.
	upid = l.started(t, http.MethodPost, "/nodes/pve1/qemu/100/status/stop", nil)
	if st := l.data(t, "/nodes/pve1/qemu/100/status/current", nil).(map[string]any)["status"]; st != "running" {
		t.Errorf("status while stopping = %v", st)
	}
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Fatalf("stop task = %q", st)
	}
	m.wantOff(t)
	if st := l.data(t, "/nodes/pve1/qemu/100/status/current", nil).(map[string]any)["status"]; st != "stopped" {
		t.Errorf("status after the stop = %v", st)
	}

	// Start: still stopped while the task runs, powered on at its end.
	upid = l.started(t, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)
	if st := l.data(t, "/nodes/pve1/qemu/100/status/current", nil).(map[string]any)["status"]; st != "stopped" {
		t.Errorf("status while starting = %v", st)
	}
	select {
	case <-m.on:
		t.Error("PowerOn before the start task ended")
	default:
	}
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Fatalf("start task = %q", st)
	}
	if st := l.data(t, "/nodes/pve1/qemu/100/status/current", nil).(map[string]any)["status"]; st != "running" {
		t.Errorf("status after the start = %v", st)
	}
	m.wantOn(t)

	// Config (POST): the old value until the task ends.
	upid = l.started(t, http.MethodPost, "/nodes/pve1/qemu/100/config", url.Values{"name": {"b"}})
	if n := l.data(t, "/nodes/pve1/qemu/100/config", nil).(map[string]any)["name"]; n != "a" {
		t.Errorf("name while the config task runs = %v", n)
	}
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Fatalf("config task = %q", st)
	}
	if n := l.data(t, "/nodes/pve1/qemu/100/config", nil).(map[string]any)["name"]; n != "b" {
		t.Errorf("name after the config task = %v", n)
	}
	// Config (PUT) is synchronous.
	if code, _ := l.call(t, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"name": {"c"}}); code != http.StatusOK {
		t.Fatal(code)
	}
	if n := l.data(t, "/nodes/pve1/qemu/100/config", nil).(map[string]any)["name"]; n != "c" {
		t.Errorf("name after PUT = %v", n)
	}

	// Resize: the old size until the task ends.
	upid = l.started(t, http.MethodPut, "/nodes/pve1/qemu/100/resize", url.Values{"disk": {"scsi0"}, "size": {"+1G"}})
	if d := l.srv.VMs()[0].Disks["scsi0"]; d != 4<<30 {
		t.Errorf("disk while resizing = %d", d)
	}
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Fatalf("resize task = %q", st)
	}
	if d := l.srv.VMs()[0].Disks["scsi0"]; d != 5<<30 {
		t.Errorf("disk after resizing = %d", d)
	}

	if st := l.waitTask(t, "pve1", l.started(t, http.MethodPost, "/nodes/pve1/qemu/100/status/stop", nil)); st != "OK" {
		t.Fatalf("stop task = %q", st)
	}
	m.wantOff(t)

	// Destroy: listed until the task ends.
	upid = l.started(t, http.MethodDelete, "/nodes/pve1/qemu/100", nil)
	if len(l.srv.VMs()) != 1 {
		t.Error("the VM vanished before the destroy task ended")
	}
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Fatalf("destroy task = %q", st)
	}
	if len(l.srv.VMs()) != 0 {
		t.Error("the VM is left after the destroy task")
	}
	m.wantOff(t)

	// Upload and delete: the volume appears and goes when the tasks end.
	upid = l.uploadRaw(t, "pve1", "local", "late.iso", []byte("iso"))
	if slices.Contains(l.isoNames(t, "pve1"), "local:iso/late.iso") {
		t.Error("the upload is listed before its task ended")
	}
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Fatalf("upload task = %q", st)
	}
	if !slices.Contains(l.isoNames(t, "pve1"), "local:iso/late.iso") {
		t.Error("the upload is missing after its task ended")
	}
	upid = l.started(t, http.MethodDelete, "/nodes/pve1/storage/local/content/local:iso/late.iso", nil)
	if !slices.Contains(l.isoNames(t, "pve1"), "local:iso/late.iso") {
		t.Error("the volume went before the delete task ended")
	}
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Fatalf("delete task = %q", st)
	}
	if slices.Contains(l.isoNames(t, "pve1"), "local:iso/late.iso") {
		t.Error("the volume is left after the delete task")
	}
	// Deleting a file that is not there is a warning on a directory
	// storage (free_image warns and returns).
	upid = l.started(t, http.MethodDelete, "/nodes/pve1/storage/local/content/local:iso/late.iso", nil)
	if st := l.waitTask(t, "pve1", upid); st != "WARNINGS: 1" {
		t.Errorf("deleting a missing file = %q", st)
	}
}

// TestCreateTaskFailures shows a failed create removing its placeholder
// when the task ends, whether the worker dies or fails a check.
func TestCreateTaskFailures(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{TaskDuration: slowTask})

	l.srv.TaskFail("qemu.create", 1, "emulated: worker killed")
	upid := l.started(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "name": {"a"}})
	if vms := l.srv.VMs(); len(vms) != 1 || vms[0].Config["lock"] != "create" {
		t.Errorf("VMs while the create runs = %+v", vms)
	}
	// The ID is taken while the placeholder exists.
	code, body := l.call(t, http.MethodPost, "/nodes/pve2/qemu", url.Values{"vmid": {"100"}})
	if code != http.StatusInternalServerError || body["message"] != "unable to create VM 100 - VM 100 already exists on node 'pve1'\n" {
		t.Errorf("second create of 100 = %d %v", code, body)
	}
	if st := l.waitTask(t, "pve1", upid); st != "emulated: worker killed" {
		t.Errorf("create task = %q", st)
	}
	if vms := l.srv.VMs(); len(vms) != 0 {
		t.Errorf("VMs after a dead create = %+v", vms)
	}

	upid = l.started(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{
		"vmid": {"101"}, "scsi0": {"local-lvm:1"}, "ide2": {"local:iso/missing.iso,media=cdrom"},
	})
	if st := l.waitTask(t, "pve1", upid); st != "unable to create VM 101 - volume 'local:iso/missing.iso' does not exist" {
		t.Errorf("create with a missing ISO = %q", st)
	}
	if vms, vols := l.srv.VMs(), l.srv.Volumes(); len(vms) != 0 || len(vols) != 0 {
		t.Errorf("a failed create left %+v %+v", vms, vols)
	}

	// A start that fails inside the create worker is only a warning.
	upid = l.started(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{
		"vmid": {"102"}, "start": {"1"}, "net0": {"virtio,bridge=vmbr9"},
	})
	if st := l.waitTask(t, "pve1", upid); st != "WARNINGS: 1" {
		t.Errorf("create with a failing start = %q", st)
	}
	if vms := l.srv.VMs(); len(vms) != 1 || vms[0].Running {
		t.Errorf("VMs after a create whose start failed = %+v", vms)
	}
}

// TestStatsInterval shows /cluster/resources reporting a VM's name and
// power state from pvestatd's last broadcast, while the per-node list and
// status/current are live.
func TestStatsInterval(t *testing.T) {
	t.Parallel()
	const every = 700 * time.Millisecond
	l := newLab(t, pve.Options{StatsInterval: every})
	vmResource := func() map[string]any {
		for _, r := range l.data(t, "/cluster/resources", url.Values{"type": {"vm"}}).([]any) {
			return r.(map[string]any)
		}
		return nil
	}
	_ = vmResource() // a broadcast before the VM exists
	if st := l.waitTask(t, "pve1", l.started(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "name": {"a"}, "tags": {"x"}})); st != "OK" {
		t.Fatalf("create = %q", st)
	}
	r := vmResource()
	if r["status"] != "unknown" || r["name"] != nil || r["tags"] != "x" || r["vmid"] != float64(100) {
		t.Errorf("resource before a broadcast = %v", r)
	}
	if st := l.data(t, "/nodes/pve1/qemu/100/status/current", nil).(map[string]any)["name"]; st != "a" {
		t.Errorf("status/current name = %v, want it live", st)
	}
	deadline := time.Now().Add(5 * every)
	for r["status"] == "unknown" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		r = vmResource()
	}
	if r["status"] != "stopped" || r["name"] != "a" {
		t.Fatalf("resource after a broadcast = %v", r)
	}
	if st := l.waitTask(t, "pve1", l.started(t, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)); st != "OK" {
		t.Fatalf("start = %q", st)
	}
	list := l.data(t, "/nodes/pve1/qemu", nil).([]any)
	if st := list[0].(map[string]any)["status"]; st != "running" {
		t.Errorf("node VM list status = %v, want it live", st)
	}
	r = vmResource()
	deadline = time.Now().Add(5 * every)
	for r["status"] != "running" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		r = vmResource()
	}
	if r["status"] != "running" {
		t.Errorf("resource status after broadcasts = %v", r["status"])
	}
}
