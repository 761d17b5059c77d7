package pve_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/lab/pve"
)

// deletingMachines implements the Deletions extension and records, at
// each hook, what the server shows of the VM.
type deletingMachines struct {
	*machines
	srv    func() *pve.Server
	events chan string
}

func (m deletingMachines) PowerOn(vm pve.VM) { m.events <- fmt.Sprintf("on %d", vm.ID) }
func (m deletingMachines) PowerOff(id int)   { m.events <- fmt.Sprintf("off %d", id) }

func (m deletingMachines) Deleted(id int) {
	srv := m.srv()
	exists := slices.ContainsFunc(srv.VMs(), func(v pve.VMState) bool { return v.ID == id })
	disks := 0
	for _, v := range srv.Volumes() {
		if v.Content == "images" && v.VMID == id {
			disks++
		}
	}
	m.events <- fmt.Sprintf("deleted %d exists=%t disks=%d", id, exists, disks)
}

func (m deletingMachines) want(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-m.events:
		if got != want {
			t.Fatalf("hook %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no hook, want %q", want)
	}
}

// newDeletionLab is a lab with a pool and the ISOs nodeConfig inserts.
func newDeletionLab(t *testing.T, m pve.MachineHooks) *lab {
	t.Helper()
	l := newLab(t, pve.Options{Machines: m})
	ctx, c := t.Context(), l.client
	if err := c.New().Pool.Create(ctx, proxmox.ConfigPool{Name: "taloscluster-prod-a"}); err != nil {
		t.Fatal(err)
	}
	for _, iso := range []string{"talos.iso", "cidata-cp01.iso"} {
		if err := c.Upload(ctx, "pve1", "local", "iso", iso, bytes.NewReader([]byte(iso))); err != nil {
			t.Fatalf("uploading %s: %v", iso, err)
		}
	}
	return l
}

// TestDeletionHook: with the Deletions extension, deleting a VM reports
// Deleted, after its stop and after the VM and its disks are gone; a VM
// that gets the deleted VM's ID is a new VM.
func TestDeletionHook(t *testing.T) {
	t.Parallel()
	var l *lab
	m := deletingMachines{machines: newMachines(), srv: func() *pve.Server { return l.srv }, events: make(chan string, 32)}
	l = newDeletionLab(t, m)
	ctx := t.Context()
	c := l.client

	create := func() *proxmox.VmRef {
		t.Helper()
		vmr, err := nodeConfig("cp01", "taloscluster-prod-a", mustMAC(t, "02:00:00:00:00:01"), mustMAC(t, "02:00:00:00:00:02")).Create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return vmr
	}

	vmr := create()
	if _, err := c.StartVm(ctx, vmr); err != nil {
		t.Fatal(err)
	}
	m.want(t, "on 100")

	// The library stops a running VM before it destroys it.
	if err := vmr.Delete(ctx, c); err != nil {
		t.Fatalf("deleting: %v", err)
	}
	m.want(t, "off 100")
	m.want(t, "deleted 100 exists=false disks=0")

	// The ID is free again: the next VM gets it and is reported as itself.
	vmr = create()
	if vmr.VmId() != 100 {
		t.Fatalf("the new VM has ID %d, want 100", vmr.VmId())
	}
	if _, err := c.StartVm(ctx, vmr); err != nil {
		t.Fatal(err)
	}
	m.want(t, "on 100")
	if err := vmr.Stop(ctx, c); err != nil {
		t.Fatal(err)
	}
	m.want(t, "off 100")
	if err := vmr.Delete(ctx, c); err != nil {
		t.Fatalf("deleting a stopped VM: %v", err)
	}
	m.want(t, "deleted 100 exists=false disks=0")

	select {
	case e := <-m.events:
		t.Errorf("extra hook %q", e)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestDeletionWithoutExtension: hooks without Deletions still see a
// deletion as a PowerOff.
func TestDeletionWithoutExtension(t *testing.T) {
	t.Parallel()
	m := newMachines()
	l := newDeletionLab(t, m)
	ctx := t.Context()
	c := l.client

	vmr, err := nodeConfig("cp01", "taloscluster-prod-a", mustMAC(t, "02:00:00:00:00:01"), mustMAC(t, "02:00:00:00:00:02")).Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := vmr.Delete(ctx, c); err != nil {
		t.Fatalf("deleting: %v", err)
	}
	if id := m.wantOff(t); id != 100 {
		t.Errorf("PowerOff(%d), want 100", id)
	}
}
