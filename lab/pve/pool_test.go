package pve_test

import (
	"net/http"
	"net/netip"
	"net/url"
	"testing"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/lab/pve"
)

// TestPools covers pool create, comment update, membership and delete
// through the library's pool client.
func TestPools(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	ctx := t.Context()
	c := l.client
	for _, id := range []int{100, 101} {
		code, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {itoa(id)}, "name": {"vm" + itoa(id)}})
		if code != http.StatusOK {
			t.Fatalf("creating VM %d: %d %v", id, code, body)
		}
	}

	comment := "managed-by=taloscluster cluster=a"
	if err := c.New().Pool.Create(ctx, proxmox.ConfigPool{Name: "taloscluster-a", Comment: &comment}); err != nil {
		t.Fatal(err)
	}
	if err := c.New().Pool.Create(ctx, proxmox.ConfigPool{Name: "taloscluster-a"}); err == nil {
		t.Error("creating an existing pool succeeded")
	}
	if err := c.New().Pool.Create(ctx, proxmox.ConfigPool{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	raw, err := c.New().Pool.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[proxmox.PoolName]string{}
	for p := range raw.Iter() {
		pools[p.GetName()] = p.GetComment()
	}
	if pools["taloscluster-a"] != comment || len(pools) != 2 {
		t.Errorf("pools = %v", pools)
	}

	newComment := "managed-by=taloscluster cluster=a (renamed)"
	if err := c.New().Pool.Update(ctx, proxmox.ConfigPool{Name: "taloscluster-a", Comment: &newComment}); err != nil {
		t.Fatalf("updating the comment: %v", err)
	}
	if err := c.New().Pool.AddMembers(ctx, "taloscluster-a", []proxmox.GuestID{100, 101}, nil); err != nil {
		t.Fatalf("adding guests: %v", err)
	}
	// A VM moves between pools only with allow-move, which the library
	// sends for Proxmox VE 8 and later.
	if err := c.New().Pool.AddMembers(ctx, "other", []proxmox.GuestID{101}, nil); err != nil {
		t.Fatalf("moving a guest: %v", err)
	}
	code, body := l.call(t, http.MethodPut, "/pools/taloscluster-a", url.Values{"vms": {"101"}})
	if code != http.StatusInternalServerError {
		t.Errorf("adding a member of another pool without allow-move = %d %v", code, body)
	}
	info, err := c.New().Pool.Read(ctx, "taloscluster-a")
	if err != nil {
		t.Fatal(err)
	}
	guests, _ := info.GetMembers().AsMaps()
	if _, ok := guests[100]; !ok || len(guests) != 1 || info.GetComment() != newComment {
		t.Errorf("pool = %q %v", info.GetComment(), guests)
	}
	if err := c.New().Pool.RemoveMembers(ctx, "taloscluster-a", []proxmox.GuestID{100}, nil); err != nil {
		t.Fatal(err)
	}
	if vms := l.srv.VMs(); vms[0].Pool != "" || vms[1].Pool != "other" {
		t.Errorf("pools of the VMs = %q %q", vms[0].Pool, vms[1].Pool)
	}

	// The library empties a pool that is not empty, then deletes it.
	if err := deletePool(ctx, c, "other"); err != nil {
		t.Fatalf("deleting a non-empty pool: %v", err)
	}
	if exists, err := c.New().Pool.Exists(ctx, "other"); err != nil || exists {
		t.Errorf("deleted pool exists = %v, %v", exists, err)
	}
	if code, body := l.call(t, http.MethodDelete, "/pools/nope", nil); code != http.StatusInternalServerError || body["message"] != "delete pool failed: pool 'nope' does not exist\n" {
		t.Errorf("deleting a missing pool = %d %v", code, body)
	}
}

// TestConfigValidation checks that bad parameters are refused with
// per-parameter errors and that state rules hold.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	m := newMachines()
	l := newLab(t, pve.Options{Machines: m})
	for _, tc := range []struct {
		name   string
		params url.Values
		field  string
	}{
		{"missing vmid", url.Values{"name": {"a"}}, "vmid"},
		{"unknown key", url.Values{"vmid": {"100"}, "cpus": {"2"}}, "cpus"},
		{"bad cores", url.Values{"vmid": {"100"}, "cores": {"two"}}, "cores"},
		{"bad name", url.Values{"vmid": {"100"}, "name": {"not_a_dns_name"}}, "name"},
		{"bad model", url.Values{"vmid": {"100"}, "net0": {"rtl9000,bridge=vmbr0"}}, "net0"},
		{"bad tag", url.Values{"vmid": {"100"}, "tags": {"a;-b"}}, "tags"},
	} {
		code, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu", tc.params)
		errs, _ := body["errors"].(map[string]any)
		if code != http.StatusBadRequest || errs[tc.field] == nil {
			t.Errorf("%s: %d %v, want a 400 naming %s", tc.name, code, body, tc.field)
		}
	}

	code, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{
		"vmid": {"100"}, "name": {"a"}, "net0": {"virtio,bridge=vmbr9,firewall=1"}, "agent": {"enabled=1"},
	})
	if code != http.StatusOK || l.waitTask(t, "pve1", body["data"].(string)) != "OK" {
		t.Fatalf("create = %d %v", code, body)
	}
	vm := l.srv.VMs()[0]
	if len(vm.MACs) != 1 || vm.MACs[0][:8] != "BC:24:11" || vm.Config["agent"] != "1" {
		t.Errorf("generated MAC %v, agent %q", vm.MACs, vm.Config["agent"])
	}
	// Proxmox VE checks bridges when the VM starts.
	_, body = l.call(t, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)
	if st := l.waitTask(t, "pve1", body["data"].(string)); st != "bridge 'vmbr9' does not exist" {
		t.Errorf("start with a missing bridge = %q", st)
	}
	code, _ = l.call(t, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"net0": {"virtio,bridge=vmbr0"}})
	if code != http.StatusOK {
		t.Fatalf("fixing the bridge = %d", code)
	}
	if l.srv.VMs()[0].MACs[0] != vm.MACs[0] {
		t.Error("changing a NIC without a MAC changed the MAC")
	}
	_, body = l.call(t, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)
	if st := l.waitTask(t, "pve1", body["data"].(string)); st != "OK" {
		t.Fatalf("start = %q", st)
	}
	m.wantOn(t)
	if code, body := l.call(t, http.MethodDelete, "/nodes/pve1/qemu/100", nil); code != http.StatusInternalServerError || body["message"] != "VM 100 is running - destroy failed\n" {
		t.Errorf("deleting a running VM = %d %v", code, body)
	}
	if code, body := l.call(t, http.MethodGet, "/nodes/pve2/qemu/100/config", nil); code != http.StatusInternalServerError {
		t.Errorf("config on the wrong node = %d %v", code, body)
	}
	code, body = l.call(t, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"name": {"b"}, "digest": {"0000"}})
	if code != http.StatusInternalServerError || body["message"] != "checksum mismatch (file change by other user?)\n" {
		t.Errorf("update with a stale digest = %d %v", code, body)
	}
	// qemu-server's resize makes every check in its worker: the call
	// answers a UPID and the task fails.
	code, body = l.call(t, http.MethodPut, "/nodes/pve1/qemu/100/resize", url.Values{"disk": {"scsi0"}, "size": {"+1G"}})
	if code != http.StatusOK {
		t.Fatalf("resizing a missing disk = %d %v, want a task", code, body)
	}
	if st := l.waitTask(t, "pve1", body["data"].(string)); st != "disk 'scsi0' does not exist" {
		t.Errorf("resize task of a missing disk = %q", st)
	}
	code, body = l.call(t, http.MethodPut, "/nodes/pve1/qemu/999/resize", url.Values{"disk": {"scsi0"}, "size": {"+1G"}})
	if code != http.StatusOK {
		t.Fatalf("resizing a missing VM = %d %v, want a task", code, body)
	}
	if st := l.waitTask(t, "pve1", body["data"].(string)); st != "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist" {
		t.Errorf("resize task of a missing VM = %q", st)
	}
	// Reboot and reset refuse a stopped VM before forking.
	if _, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu/100/status/stop", nil); l.waitTask(t, "pve1", body["data"].(string)) != "OK" {
		t.Fatal("stopping failed")
	}
	m.wantOff(t)
	for _, action := range []string{"reboot", "reset"} {
		code, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu/100/status/"+action, nil)
		if code != http.StatusInternalServerError || body["message"] != "VM 100 not running\n" {
			t.Errorf("%s of a stopped VM = %d %v", action, code, body)
		}
	}
	// Stopping a stopped VM is not an error (_do_vm_stop returns early).
	if _, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu/100/status/stop", nil); l.waitTask(t, "pve1", body["data"].(string)) != "OK" {
		t.Error("stopping a stopped VM failed")
	}
	// skiplock is for root@pam only, which an API token never is.
	code, body = l.call(t, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"name": {"b"}, "skiplock": {"1"}})
	if errs, _ := body["errors"].(map[string]any); code != http.StatusBadRequest || errs["skiplock"] != "Only root may use this option.\n" {
		t.Errorf("skiplock = %d %v", code, body)
	}
}

// TestAgentPerNIC uses the InterfaceAddresses extension to report addresses
// per NIC.
func TestAgentPerNIC(t *testing.T) {
	t.Parallel()
	m := nicMachines{newMachines()}
	l := newLab(t, pve.Options{Machines: m})
	code, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{
		"vmid": {"100"}, "agent": {"1"}, "start": {"1"},
		"net0": {"virtio=02:00:00:00:00:01,bridge=vmbr0"}, "net1": {"virtio=02:00:00:00:00:02,bridge=vmbr1"},
	})
	if code != http.StatusOK || l.waitTask(t, "pve1", body["data"].(string)) != "OK" {
		t.Fatalf("create and start = %d %v", code, body)
	}
	m.wantOn(t)
	m.setAddresses(100, mustPrefix("10.0.0.5/24"), mustPrefix("192.0.2.5/24"))
	m.mu.Lock()
	m.perNIC[100] = map[string][]netip.Prefix{
		"02:00:00:00:00:01": {mustPrefix("10.0.0.5/24"), mustPrefix("10.0.0.2/32")},
		"02:00:00:00:00:02": {mustPrefix("192.0.2.5/24")},
	}
	m.mu.Unlock()
	vmr := proxmox.NewVmRef(100)
	raw, state, err := vmr.GetAgentInformation(t.Context(), l.client)
	if err != nil || state != proxmox.GuestAgentStateRunning {
		t.Fatalf("agent = %v %v", state, err)
	}
	ifaces := raw.Get()
	if len(ifaces) != 3 || ifaces[0].Name != "lo" {
		t.Fatalf("interfaces = %+v", ifaces)
	}
	if ips := ifaces[1].IpAddresses; len(ips) != 3 || ips[1].String() != "10.0.0.2" || ips[2].String() != "fe80::ff:fe00:1" {
		t.Errorf("eth0 = %v", ips)
	}
	if ips := ifaces[2].IpAddresses; len(ips) != 2 || ips[0].String() != "192.0.2.5" || ips[1].String() != "fe80::ff:fe00:2" || ifaces[2].MacAddress.String() != "02:00:00:00:00:02" {
		t.Errorf("eth1 = %v %v", ips, ifaces[2].MacAddress)
	}
}
