package proxmox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab/talos"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// machineOf returns the observed machine of that hostname.
func machineOf(t *testing.T, inv reconcile.Inventory, hostname string) reconcile.Machine {
	t.Helper()
	for _, m := range inv.Machines() {
		if m.Hostname == hostname {
			return m
		}
	}
	t.Fatalf("no machine %s observed", hostname)
	return reconcile.Machine{}
}

// talosNode returns the lab's Talos node at addr.
func (w *world) talosNode(t *testing.T, addr string) talos.NodeState {
	t.Helper()
	for _, n := range w.lab.Talos.Nodes() {
		if n.Addr.String() == addr {
			return n
		}
	}
	t.Fatalf("no Talos node at %s", addr)
	return talos.NodeState{}
}

// TestRestartAppliesAPendingResize: a resize of running VMs is kept
// pending by Proxmox; the inventory reports it per machine, the next plan
// does not resize again, and a planned restart power-cycles the VM
// through Proxmox: the new size is the VM's, nothing is pending, and the
// Talos node went down and booted again.
func TestRestartAppliesAPendingResize(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "rsz", 0)
	cp1 := w.name + "-controlplane-01"
	w.set(t, "controlplane.cores", "3", "controlplane.memory", "6")
	pl, err := w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(pl.Changes, func(ch plan.Change) bool {
		return ch.Resource.Name == cp1 && ch.Resource.Kind == plan.KindMachine && ch.Action == plan.ActionUpdate
	})
	if i < 0 || !strings.Contains(pl.Changes[i].Reason, "converge --reboot") {
		t.Fatalf("resize of the running %s: %v; want a step whose reason says it waits for converge --reboot", cp1, pl.Changes)
	}
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("converge with the resize: %v", err)
	}
	if v := w.vm(t, cp1); v.Config["cores"] != "2" || v.Pending["cores"] != "3" || v.Pending["memory"] != "6144" {
		t.Fatalf("VM %s: cores %q pending %v; want 2 with cores 3 and memory 6144 pending", cp1, v.Config["cores"], v.Pending)
	}

	p := w.provider(t)
	inv, err := p.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cores 2 -> 3", "memory 4 GB -> 6 GB"}
	for _, m := range inv.Machines() {
		if !slices.Equal(m.RestartPending, want) {
			t.Errorf("%s: restart pending %q, want %q", m.Hostname, m.RestartPending, want)
		}
	}
	again, err := w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(again.Changes, func(ch plan.Change) bool { return ch.Resource.Kind == plan.KindMachine }) {
		t.Errorf("the pending resize is planned again: %s", describe(again))
	}

	steps := p.PlanRestart(cp1, inv)
	if len(steps) != 1 {
		t.Fatalf("PlanRestart(%s) = %d steps, want 1", cp1, len(steps))
	}
	st := steps[0]
	if st.Phase != "" || st.Domain != plan.DomainProvider || st.Action != plan.ActionRestart ||
		st.Resource != (plan.Resource{Kind: plan.KindMachine, Name: cp1}) ||
		!strings.Contains(st.Reason, "cores 2 -> 3, memory 4 GB -> 6 GB") || !strings.Contains(st.Expects, "runs") {
		t.Fatalf("restart step = %+v", st)
	}
	addr := w.nodeAddr(t, cp1)
	boots := w.talosNode(t, addr).Boots
	mark := len(w.lab.PVE.Log())
	if err := p.Apply(ctx, nil, st); err != nil {
		t.Fatalf("restart: %v", err)
	}
	var posts []string
	for _, op := range w.lab.PVE.Log()[mark:] {
		if op.Method != http.MethodGet {
			posts = append(posts, op.Name)
		}
	}
	if !slices.Equal(posts, []string{"qemu.reboot"}) {
		t.Errorf("the restart made the calls %v, want one qemu.reboot", posts)
	}
	if v := w.vm(t, cp1); !v.Running || v.Config["cores"] != "3" || v.Config["memory"] != "6144" || len(v.Pending) != 0 {
		t.Errorf("VM %s after the restart: running %v, cores %q, memory %q, pending %v", cp1, v.Running, v.Config["cores"], v.Config["memory"], v.Pending)
	}
	waitFor(t, cp1+" booted again", func() bool {
		n := w.talosNode(t, addr)
		return n.Up && n.Boots > boots
	})
	inv, err = p.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m := machineOf(t, inv, cp1); len(m.RestartPending) != 0 {
		t.Errorf("%s still has %q pending after its restart", cp1, m.RestartPending)
	}
	if m := machineOf(t, inv, w.name+"-controlplane-02"); !slices.Equal(m.RestartPending, want) {
		t.Errorf("the machine not restarted lost its pending changes: %q", m.RestartPending)
	}
}

// lone starts a lab world with one running VM the cluster owns (its tags),
// created through the API without a converge, and returns its provider,
// hostname and id.
func lone(t *testing.T, name string) (*world, *proxmox.Provider, string, int) {
	t.Helper()
	w := newWorld(t, name, 0)
	host := name + "-controlplane-01"
	const id = 321
	w.createVM(t, "pve1", id, host, "", "taloscluster", "cluster_"+name, "role_controlplane", "pool_controlplane")
	w.pve(t, http.MethodPost, fmt.Sprintf("/nodes/pve1/qemu/%d/status/start", id), nil)
	waitFor(t, host+" running", func() bool { return w.vm(t, host).Running })
	return w, w.provider(t), host, id
}

// TestRestartOfAVMThatChangedFailsItsPrecondition: a planned restart of a
// VM that stopped or vanished since the plan fails with ErrPrecondition
// and reboots nothing.
func TestRestartOfAVMThatChangedFailsItsPrecondition(t *testing.T) {
	t.Parallel()
	w, p, host, id := lone(t, "rgone")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	inv, err := p.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	steps := p.PlanRestart(host, inv)
	if len(steps) != 1 {
		t.Fatalf("PlanRestart = %d steps, want 1", len(steps))
	}
	w.stopVM(t, host)
	err = p.Apply(ctx, nil, steps[0])
	if !errors.Is(err, reconcile.ErrPrecondition) || !strings.Contains(err.Error(), "not running") {
		t.Errorf("restart of a stopped VM: %v, want ErrPrecondition: not running", err)
	}
	w.pve(t, http.MethodDelete, fmt.Sprintf("/nodes/pve1/qemu/%d", id), nil)
	waitFor(t, host+" deleted", func() bool { return len(w.lab.PVE.VMs()) == 0 })
	err = p.Apply(ctx, nil, steps[0])
	if !errors.Is(err, reconcile.ErrPrecondition) || !strings.Contains(err.Error(), fmt.Sprintf("restarting VM %d", id)) {
		t.Errorf("restart of a deleted VM: %v, want ErrPrecondition naming the VM", err)
	}
	for _, op := range w.lab.PVE.Log() {
		if op.Name == "qemu.reboot" {
			t.Errorf("a VM was rebooted: %s", op.Path)
		}
	}
	if inv, err := p.Observe(ctx); err != nil || len(p.PlanRestart(host, inv)) != 0 {
		t.Errorf("a restart is planned for a VM that is gone (%v)", err)
	}
}

// TestPreflightOfARestart: a restart needs VM.PowerMgmt on the VM
// (vm_reboot); the read-only token lacks it, the restricted one holds it
// on /vms.
func TestPreflightOfARestart(t *testing.T) {
	t.Parallel()
	w, p, host, id := lone(t, "rpf")
	inv, err := p.Observe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pl := &plan.Plan{}
	for _, ch := range p.PlanRestart(host, inv) {
		ch.Phase = plan.PhaseCompute
		pl.Changes = append(pl.Changes, ch)
	}
	if len(pl.Changes) != 1 {
		t.Fatalf("%d restart steps, want 1", len(pl.Changes))
	}
	w.useToken(t, w.lab.AuditorTokenID, w.lab.AuditorTokenSecret)
	err = w.provider(t).Preflight(t.Context(), pl)
	if want := fmt.Sprintf("VM.PowerMgmt on /vms/%d (needed to restart %s)", id, host); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("preflight with the read-only token: %v; want it to say %q", err, want)
	}
	w.useToken(t, w.lab.RestrictedTokenID, w.lab.RestrictedTokenSecret)
	if err := w.provider(t).Preflight(t.Context(), pl); err != nil {
		t.Errorf("preflight with the restricted token, which holds VM.PowerMgmt on /vms: %v", err)
	}
}
