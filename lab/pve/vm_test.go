package pve_test

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/lab/pve"
)

const gibKiB = proxmox.QemuDiskSize(1048576)

// nodeConfig is a control-plane VM the way a provider would create it.
func nodeConfig(name string, pool string, mac0, mac1 net.HardwareAddr) proxmox.ConfigQemu {
	node := proxmox.NodeName("pve1")
	tags := proxmox.Tags{"taloscluster", "cluster_prod-a", "role_controlplane", "pool_controlplane"}
	return proxmox.ConfigQemu{
		Node:    &node,
		Name:    ptr(proxmox.GuestName(name)),
		Pool:    ptr(proxmox.PoolName(pool)),
		CPU:     &proxmox.QemuCPU{Cores: ptr(proxmox.QemuCpuCores(2)), Type: ptr(proxmox.CpuType("host"))},
		Memory:  &proxmox.QemuMemory{CapacityMiB: ptr(proxmox.QemuMemoryCapacity(4096))},
		Agent:   &proxmox.QemuGuestAgent{Enable: ptr(true)},
		Bios:    "ovmf",
		Machine: "q35",
		Scsihw:  "virtio-scsi-single",
		QemuOs:  "l26",
		EFIDisk: proxmox.QemuDevice{"storage": "local-lvm", "efitype": "4m"},
		Tags:    &tags,
		Networks: proxmox.QemuNetworkInterfaces{
			0: {Bridge: ptr("vmbr0"), Model: ptr(proxmox.QemuNetworkModelVirtIO), MAC: &mac0, Firewall: ptr(true)},
			1: {Bridge: ptr("vmbr1"), Model: ptr(proxmox.QemuNetworkModelVirtIO), MAC: &mac1, Firewall: ptr(true)},
		},
		Disks: &proxmox.QemuStorages{
			Scsi: &proxmox.QemuScsiDisks{Disk_0: &proxmox.QemuScsiStorage{Disk: &proxmox.QemuScsiDisk{
				Storage:         "local-lvm",
				SizeInKibibytes: 10 * gibKiB,
				Format:          proxmox.QemuDiskFormat_Raw,
				Backup:          true,
				IOThread:        true,
				Discard:         true,
			}}},
			Ide: &proxmox.QemuIdeDisks{
				Disk_2: &proxmox.QemuIdeStorage{CdRom: &proxmox.QemuCdRom{Iso: &proxmox.IsoFile{Storage: "local", File: "talos.iso"}}},
				Disk_3: &proxmox.QemuIdeStorage{CdRom: &proxmox.QemuCdRom{Iso: &proxmox.IsoFile{Storage: "local", File: "cidata-cp01.iso"}}},
			},
		},
	}
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	mac, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// TestVMLifecycle drives a VM through the provider's path with the real
// client: pool, ISO uploads, typed create, read back, resize, start, guest
// agent, stop and delete.
func TestVMLifecycle(t *testing.T) {
	t.Parallel()
	m := newMachines()
	l := newLab(t, pve.Options{Machines: m})
	ctx := t.Context()
	c := l.client

	comment := "managed-by=taloscluster cluster=prod-a"
	if err := c.New().Pool.Create(ctx, proxmox.ConfigPool{Name: "taloscluster-prod-a", Comment: &comment}); err != nil {
		t.Fatalf("creating the pool: %v", err)
	}

	talosISO := bytes.Repeat([]byte("TALOS-ISO "), 4096)
	cidataISO := bytes.Repeat([]byte("cidata "), 300)
	if err := c.Upload(ctx, "pve1", "local", "iso", "talos.iso", bytes.NewReader(talosISO)); err != nil {
		t.Fatalf("uploading the boot ISO: %v", err)
	}
	if err := c.UploadLargeFile(ctx, "pve1", "local", "iso", "cidata-cp01.iso", int64(len(cidataISO)), bytes.NewReader(cidataISO)); err != nil {
		t.Fatalf("uploading the cidata ISO: %v", err)
	}

	mac0, mac1 := mustMAC(t, "02:a1:b2:c3:d4:01"), mustMAC(t, "02:a1:b2:c3:d4:02")
	vmr, err := nodeConfig("prod-a-controlplane-01", "taloscluster-prod-a", mac0, mac1).Create(ctx, c)
	if err != nil {
		t.Fatalf("creating the VM: %v", err)
	}
	if vmr.VmId() != 100 {
		t.Errorf("VM ID = %d, want 100 (the first free ID)", vmr.VmId())
	}

	got, err := proxmox.NewConfigQemuFromApi(ctx, vmr, c)
	if err != nil {
		t.Fatalf("reading the VM back: %v", err)
	}
	checkRoundTrip(t, got, mac0, mac1)

	info, err := c.New().Pool.Read(ctx, "taloscluster-prod-a")
	if err != nil {
		t.Fatalf("reading the pool: %v", err)
	}
	if info.GetComment() != comment {
		t.Errorf("pool comment = %q, want %q", info.GetComment(), comment)
	}
	guests, _ := info.GetMembers().AsMaps()
	if _, ok := guests[100]; !ok || len(guests) != 1 {
		t.Errorf("pool members = %v, want VM 100", guests)
	}

	// Resize adds 2 GiB to the 10 GiB disk.
	if _, err := c.ResizeQemuDisk(ctx, vmr, "scsi0", 2); err != nil {
		t.Fatalf("resizing: %v", err)
	}
	got, err = proxmox.NewConfigQemuFromApi(ctx, vmr, c)
	if err != nil {
		t.Fatalf("reading the VM back: %v", err)
	}
	if size := got.Disks.Scsi.Disk_0.Disk.SizeInKibibytes; size != 12*gibKiB {
		t.Errorf("disk size after resize = %d KiB, want %d", size, 12*gibKiB)
	}

	// Before start the guest agent reports the VM is not running.
	_, state, err := vmr.GetAgentInformation(ctx, c)
	if err != nil || state != proxmox.GuestAgentStateVmNotRunning {
		t.Errorf("agent before start = %v, %v; want VM not running", state, err)
	}

	if _, err := c.StartVm(ctx, vmr); err != nil {
		t.Fatalf("starting: %v", err)
	}
	on := m.wantOn(t)
	if on.ID != 100 || on.Node != "pve1" || on.Name != "prod-a-controlplane-01" {
		t.Errorf("PowerOn VM = %d %s %s", on.ID, on.Node, on.Name)
	}
	if want := []string{"02:A1:B2:C3:D4:01", "02:A1:B2:C3:D4:02"}; !slices.Equal(on.MACs, want) {
		t.Errorf("PowerOn MACs = %v, want %v", on.MACs, want)
	}
	if on.Cores != 2 || on.MemoryMB != 4096 {
		t.Errorf("PowerOn cores, memory = %d, %d", on.Cores, on.MemoryMB)
	}
	if on.CDROMs["ide2"] != "local:iso/talos.iso" || on.CDROMs["ide3"] != "local:iso/cidata-cp01.iso" || len(on.CDROMs) != 2 {
		t.Errorf("PowerOn CDROMs = %v", on.CDROMs)
	}
	if !strings.HasPrefix(on.Boot, "order=scsi0;ide2;net0") {
		t.Errorf("boot order = %q", on.Boot)
	}
	data, err := on.ReadVolume(on.CDROMs["ide3"])
	if err != nil || !bytes.Equal(data, cidataISO) {
		t.Errorf("ReadVolume(cidata) = %d bytes, %v; want the uploaded %d bytes", len(data), err, len(cidataISO))
	}
	if _, err := on.ReadVolume("local:iso/missing.iso"); err == nil {
		t.Error("ReadVolume of a missing volume succeeded")
	}

	status, err := vmr.GetRawGuestStatus(ctx, c)
	if err != nil || status.GetState() != proxmox.PowerStateRunning {
		t.Errorf("status = %v, %v; want running", status.GetState(), err)
	}

	// The agent is not running until the machine has an address.
	_, state, err = vmr.GetAgentInformation(ctx, c)
	if err != nil || state != proxmox.GuestAgentStateNotRunning {
		t.Errorf("agent before an address = %v, %v; want not running", state, err)
	}
	m.setAddresses(100, netip.MustParsePrefix("10.0.0.11/24"))
	raw, state, err := vmr.GetAgentInformation(ctx, c)
	if err != nil || state != proxmox.GuestAgentStateRunning {
		t.Fatalf("agent = %v, %v; want running", state, err)
	}
	nic, ok := raw.SelectMacAddress(mac0)
	if !ok {
		t.Fatalf("no interface with MAC %s in %v", mac0, raw.Get())
	}
	// The kernel's EUI-64 link-local address follows the IPv4 address.
	if ips := nic.GetIpAddresses(); len(ips) != 2 || ips[0].String() != "10.0.0.11" || ips[1].String() != "fe80::a1:b2ff:fec3:d401" {
		t.Errorf("interface addresses = %v, want 10.0.0.11 and fe80::a1:b2ff:fec3:d401", ips)
	}
	if nic.GetName() != "eth0" {
		t.Errorf("interface name = %q, want eth0", nic.GetName())
	}

	// Delete stops the running VM first (as the library does), then
	// destroys it with its disks.
	if err := vmr.Delete(ctx, c); err != nil {
		t.Fatalf("deleting: %v", err)
	}
	if id := m.wantOff(t); id != 100 {
		t.Errorf("PowerOff(%d), want 100", id)
	}
	if vms := l.srv.VMs(); len(vms) != 0 {
		t.Errorf("VMs after delete = %v", vms)
	}
	for _, v := range l.srv.Volumes() {
		if v.Content == "images" {
			t.Errorf("disk volume %s left after delete", v.VolID)
		}
	}
	if _, err := c.New().Pool.Read(ctx, "taloscluster-prod-a"); err != nil {
		t.Errorf("pool after delete: %v", err)
	}
	if err := deletePool(ctx, c, "taloscluster-prod-a"); err != nil {
		t.Errorf("deleting the empty pool: %v", err)
	}
}

func checkRoundTrip(t *testing.T, got *proxmox.ConfigQemu, mac0, mac1 net.HardwareAddr) {
	t.Helper()
	if got.Name == nil || *got.Name != "prod-a-controlplane-01" {
		t.Errorf("name = %v", got.Name)
	}
	if got.Node == nil || *got.Node != "pve1" {
		t.Errorf("node = %v", got.Node)
	}
	if got.Pool == nil || *got.Pool != "taloscluster-prod-a" {
		t.Errorf("pool = %v", got.Pool)
	}
	if got.CPU == nil || got.CPU.Cores == nil || *got.CPU.Cores != 2 || got.CPU.Type == nil || *got.CPU.Type != "host" {
		t.Errorf("cpu = %+v", got.CPU)
	}
	if got.Memory == nil || got.Memory.CapacityMiB == nil || *got.Memory.CapacityMiB != 4096 {
		t.Errorf("memory = %+v", got.Memory)
	}
	if got.Agent == nil || got.Agent.Enable == nil || !*got.Agent.Enable {
		t.Errorf("agent = %+v", got.Agent)
	}
	if got.Bios != "ovmf" || got.Machine != "q35" || got.Scsihw != "virtio-scsi-single" || got.QemuOs != "l26" {
		t.Errorf("bios, machine, scsihw, ostype = %q %q %q %q", got.Bios, got.Machine, got.Scsihw, got.QemuOs)
	}
	if got.EFIDisk["storage"] != "local-lvm" || got.EFIDisk["efitype"] != "4m" {
		t.Errorf("efidisk = %v", got.EFIDisk)
	}
	wantTags := proxmox.Tags{"cluster_prod-a", "pool_controlplane", "role_controlplane", "taloscluster"}
	if got.Tags == nil || !slices.Equal(*got.Tags, wantTags) {
		t.Errorf("tags = %v, want %v", got.Tags, wantTags)
	}
	for i, want := range []struct {
		mac    net.HardwareAddr
		bridge string
	}{{mac0, "vmbr0"}, {mac1, "vmbr1"}} {
		nic, ok := got.Networks[proxmox.QemuNetworkInterfaceID(i)]
		if !ok {
			t.Errorf("net%d missing", i)
			continue
		}
		if nic.MAC == nil || nic.MAC.String() != want.mac.String() {
			t.Errorf("net%d MAC = %v, want %v", i, nic.MAC, want.mac)
		}
		if nic.Bridge == nil || *nic.Bridge != want.bridge {
			t.Errorf("net%d bridge = %v, want %s", i, nic.Bridge, want.bridge)
		}
		if nic.Firewall == nil || !*nic.Firewall {
			t.Errorf("net%d firewall = %v, want true", i, nic.Firewall)
		}
		if nic.Model == nil || *nic.Model != proxmox.QemuNetworkModelVirtIO {
			t.Errorf("net%d model = %v", i, nic.Model)
		}
	}
	if got.Disks == nil || got.Disks.Scsi == nil || got.Disks.Scsi.Disk_0 == nil || got.Disks.Scsi.Disk_0.Disk == nil {
		t.Fatalf("scsi0 missing: %+v", got.Disks)
	}
	disk := got.Disks.Scsi.Disk_0.Disk
	if disk.Storage != "local-lvm" || disk.SizeInKibibytes != 10*gibKiB || disk.Format != proxmox.QemuDiskFormat_Raw {
		t.Errorf("scsi0 = %s %d %s", disk.Storage, disk.SizeInKibibytes, disk.Format)
	}
	if !disk.Backup || !disk.IOThread || !disk.Discard || disk.Replicate {
		t.Errorf("scsi0 flags: backup %v iothread %v discard %v replicate %v", disk.Backup, disk.IOThread, disk.Discard, disk.Replicate)
	}
	for slot, want := range map[string]*proxmox.QemuIdeStorage{"ide2": got.Disks.Ide.Disk_2, "ide3": got.Disks.Ide.Disk_3} {
		if want == nil || want.CdRom == nil || want.CdRom.Iso == nil || want.CdRom.Iso.Storage != "local" {
			t.Errorf("%s = %+v, want a CD-ROM on local", slot, want)
		}
	}
	if iso := got.Disks.Ide.Disk_2.CdRom.Iso; iso.File != "talos.iso" || iso.SizeInKibibytes != "40K" {
		t.Errorf("ide2 ISO = %+v, want talos.iso of 40K", iso)
	}
	if got.Iso == nil || got.Iso.File != "talos.iso" {
		t.Errorf("iso = %+v", got.Iso)
	}
}

// TestPendingChanges shows a change to a running VM becoming pending and
// applying at the reboot, as the library expects when it decides whether a
// reboot is needed.
func TestPendingChanges(t *testing.T) {
	t.Parallel()
	m := newMachines()
	l := newLab(t, pve.Options{Machines: m})
	ctx := t.Context()
	c := l.client
	if err := c.Upload(ctx, "pve1", "local", "iso", "talos.iso", bytes.NewReader(make([]byte, 4096))); err != nil {
		t.Fatal(err)
	}
	if err := c.Upload(ctx, "pve1", "local", "iso", "cidata-cp01.iso", bytes.NewReader(make([]byte, 2048))); err != nil {
		t.Fatal(err)
	}
	if err := c.New().Pool.Create(ctx, proxmox.ConfigPool{Name: "taloscluster-prod-a"}); err != nil {
		t.Fatal(err)
	}
	vmr, err := nodeConfig("cp01", "taloscluster-prod-a", mustMAC(t, "02:00:00:00:00:01"), mustMAC(t, "02:00:00:00:00:02")).Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartVm(ctx, vmr); err != nil {
		t.Fatal(err)
	}
	m.wantOn(t)

	change := proxmox.ConfigQemu{
		Memory: &proxmox.QemuMemory{CapacityMiB: ptr(proxmox.QemuMemoryCapacity(8192))},
		Tags:   &proxmox.Tags{"taloscluster", "cluster_prod-a", "role_controlplane", "pool_controlplane", "extra"},
	}
	reboot, err := change.Update(ctx, false, vmr, c)
	if err != nil {
		t.Fatalf("updating: %v", err)
	}
	if !reboot {
		t.Error("a memory change on a running VM did not ask for a reboot")
	}
	st := l.srv.VMs()[0]
	if st.Config["memory"] != "4096" || st.Pending["memory"] != "8192" {
		t.Errorf("memory current %q pending %q; want 4096 then 8192", st.Config["memory"], st.Pending["memory"])
	}
	if !slices.Contains(st.Tags, "extra") {
		t.Errorf("tags = %v; a tag change applies at once", st.Tags)
	}

	if _, err := c.RebootVm(ctx, vmr); err != nil {
		t.Fatalf("rebooting: %v", err)
	}
	if id := m.wantOff(t); id != int(vmr.VmId()) {
		t.Errorf("PowerOff(%d)", id)
	}
	if on := m.wantOn(t); on.MemoryMB != 8192 {
		t.Errorf("memory after reboot = %d, want 8192", on.MemoryMB)
	}
	if pending, err := vmr.PendingChanges(ctx, c); err != nil || pending {
		t.Errorf("pending after reboot = %v, %v", pending, err)
	}
}

// TestConcurrentCreates runs creates at once. One client serialises its
// own creates (proxmox-api-go holds a mutex from reading the next ID to the
// end of the create task), so they get distinct IDs. Two clients that read
// the same next ID collide: qemu-server's create_and_lock_config refuses the
// second before forking, with a text the library does not retry on (it
// retries only on clone's "config file already exists").
func TestConcurrentCreates(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	ctx := t.Context()
	const n = 6
	errs := make(chan error, n)
	for i := range n {
		go func() {
			node := proxmox.NodeName([]string{"pve1", "pve2", "pve3"}[i%3])
			cfg := proxmox.ConfigQemu{
				Node:   &node,
				Name:   ptr(proxmox.GuestName("w" + string(rune('a'+i)))),
				CPU:    &proxmox.QemuCPU{Cores: ptr(proxmox.QemuCpuCores(1))},
				Memory: &proxmox.QemuMemory{CapacityMiB: ptr(proxmox.QemuMemoryCapacity(1024))},
			}
			_, err := cfg.Create(ctx, l.client)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("creating: %v", err)
		}
	}
	var ids []int
	for _, vm := range l.srv.VMs() {
		ids = append(ids, vm.ID)
	}
	if want := []int{100, 101, 102, 103, 104, 105}; !slices.Equal(ids, want) {
		t.Errorf("IDs = %v, want %v", ids, want)
	}
	guests, err := proxmox.ListGuests(ctx, l.client)
	if err != nil || len(guests) != n {
		t.Fatalf("ListGuests = %d, %v", len(guests), err)
	}
	vmr, err := l.client.GetVmRefByName(ctx, "wc")
	if err != nil || vmr.Node() != "pve3" {
		t.Errorf("GetVmRefByName(wc) = %v, %v; want a VM on pve3", vmr, err)
	}
	next, err := l.client.GetNextID(ctx, ptr(proxmox.GuestID(100)))
	if err != nil || next != 106 {
		t.Errorf("GetNextID(100) = %d, %v; want 106", next, err)
	}

	// A second client that read the same next ID loses the race.
	other := l.newClient(t, pve.DefaultTokenID, pve.DefaultTokenSecret)
	if _, err := other.PostWithTask(ctx, map[string]any{"vmid": 106, "name": "x"}, "/nodes/pve1/qemu"); err != nil {
		t.Fatalf("creating 106: %v", err)
	}
	_, err = l.client.PostWithTask(ctx, map[string]any{"vmid": 106, "name": "y"}, "/nodes/pve2/qemu")
	if err == nil || !strings.Contains(err.Error(), "unable to create VM 106 - VM 106 already exists on node 'pve1'") {
		t.Errorf("colliding create = %v", err)
	}
}

// TestCreateErrors covers injected and real create failures as the library
// reports them.
func TestCreateErrors(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	ctx := t.Context()
	c := l.client
	node := proxmox.NodeName("pve1")
	base := proxmox.ConfigQemu{
		Node:   &node,
		Name:   ptr(proxmox.GuestName("vm")),
		CPU:    &proxmox.QemuCPU{Cores: ptr(proxmox.QemuCpuCores(1))},
		Memory: &proxmox.QemuMemory{CapacityMiB: ptr(proxmox.QemuMemoryCapacity(512))},
	}

	l.srv.Fail("qemu.create", 1, 500, "emulated outage")
	// The library formats the ApiError into its own error with %v.
	_, err := base.Create(ctx, c)
	if err == nil || !strings.Contains(err.Error(), "api error: code: 500 message: emulated outage") {
		t.Errorf("create with an injected failure = %v, want the 500 ApiError", err)
	}
	if len(l.srv.VMs()) != 0 {
		t.Error("a failed create left a VM")
	}

	// The CD-ROM's ISO does not exist: the task fails and nothing is left.
	withISO := base
	withISO.Disks = &proxmox.QemuStorages{Ide: &proxmox.QemuIdeDisks{Disk_2: &proxmox.QemuIdeStorage{
		CdRom: &proxmox.QemuCdRom{Iso: &proxmox.IsoFile{Storage: "local", File: "missing.iso"}},
	}}}
	if _, err := withISO.Create(ctx, c); err == nil || !strings.Contains(err.Error(), "volume 'local:iso/missing.iso' does not exist") {
		t.Errorf("create with a missing ISO = %v", err)
	}

	// A disk on a storage without images content is refused.
	onLocal := base
	onLocal.Disks = &proxmox.QemuStorages{Scsi: &proxmox.QemuScsiDisks{Disk_0: &proxmox.QemuScsiStorage{Disk: &proxmox.QemuScsiDisk{
		Storage: "local", SizeInKibibytes: gibKiB, Format: proxmox.QemuDiskFormat_Raw,
	}}}}
	if _, err := onLocal.Create(ctx, c); err == nil || !strings.Contains(err.Error(), "does not support content-type 'images'") {
		t.Errorf("create with a disk on local = %v", err)
	}
	if len(l.srv.VMs()) != 0 {
		t.Errorf("failed creates left VMs: %v", l.srv.VMs())
	}

	if _, err := base.Create(ctx, c); err != nil {
		t.Errorf("create after the failures: %v", err)
	}
	var sawInjected bool
	for _, op := range l.srv.Log() {
		if op.Name == "qemu.create" && op.Status == 500 && op.Message == "emulated outage" {
			sawInjected = true
		}
	}
	if !sawInjected {
		t.Error("the log does not show the injected failure")
	}
}
