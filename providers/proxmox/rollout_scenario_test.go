package proxmox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/internal/labtest"
	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// Rollout scenarios of Proxmox's own rules (a new kubeapi_vip, resizes
// that wait for a restart): each proves one rule of docs/safety.md against
// the lab, from the lab's operation log. The rollout scenarios of the rules
// every provider keeps run against Proxmox and OpenStack in
// providers/scenario.

// journaled returns the world's engine with the CLI's journal.
func (w *world) journaled(t *testing.T) *reconcile.Engine {
	t.Helper()
	e := w.engine(t)
	e.Journal = state.Local{Dir: w.dir}
	return e
}

// hosts returns the world's control planes and workers.
func (w *world) hosts(cps, workers int) []string {
	var out []string
	for i := 1; i <= cps; i++ {
		out = append(out, fmt.Sprintf("%s-controlplane-%02d", w.name, i))
	}
	for i := 1; i <= workers; i++ {
		out = append(out, fmt.Sprintf("%s-worker-%02d", w.name, i))
	}
	return out
}

// downs checks from the lab's events that at most limit of hosts were
// down at the same time, and returns how many were at most.
func downs(t *testing.T, log []lab.LogEntry, hosts []string, limit int) int {
	t.Helper()
	return labtest.Downs(t, log, hosts, limit)
}

// TestScenarioNewEndpointIsWrittenOnceItAnswers: a new kubeapi_vip goes
// to the control planes one at a time, and the kubeconfig names it only
// once the API answers there.
func TestScenarioNewEndpointIsWrittenOnceItAnswers(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "vip", 0)
	vip := w.net.Addr().Next().Next().Next().Next().Next().Next() // .6
	w.set(t, "network.cluster.kubeapi_vip", vip.String())
	mark := time.Now()
	if err := w.journaled(t).Converge(ctx); err != nil {
		t.Fatalf("converge of the new endpoint: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(w.dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://" + vip.String() + ":6443"; kube.Server(data) != want {
		t.Fatalf("the kubeconfig names %s, want %s", kube.Server(data), want)
	}
	log := since(w.lab, mark)
	var steps [][3]string
	for _, h := range w.hosts(3, 0) {
		steps = append(steps, [3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, h)})
	}
	inOrder(t, log, steps...)
	p, err := w.engine(t).Plan(ctx)
	if err != nil || !p.Empty() {
		t.Fatalf("plan after the new endpoint: %v %s %v", err, p.Summary(), p.Refusals)
	}
}

// TestScenarioRebootAppliesPendingResizes: cores and memory of a running
// VM wait for its restart, which the plan shows as restart pending;
// converge --reboot restarts the VMs through the provider, control planes
// one at a time through the health gate, then the workers.
func TestScenarioRebootAppliesPendingResizes(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "resize", 1)
	w.set(t, "controlplane.cores", "3", "workers.worker.memory", "6")
	if err := w.journaled(t).Converge(ctx); err != nil {
		t.Fatalf("converge of the resize: %v", err)
	}
	p, err := w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pending := 0
	for _, msg := range p.Warnings {
		if strings.Contains(msg, "restart pending") {
			pending++
		}
	}
	if pending != 4 || len(p.Changes) != 0 {
		t.Fatalf("plan after the resize: %d restart-pending warnings (want 4), changes %v", pending, p.Changes)
	}
	e := w.journaled(t)
	e.Reboot = true
	mark := time.Now()
	if err := e.Converge(ctx); err != nil {
		t.Fatalf("converge --reboot: %v", err)
	}
	log := since(w.lab, mark)
	var steps [][3]string
	for _, h := range w.hosts(3, 1) {
		vm, _ := vmID(t, w, h)
		steps = append(steps,
			[3]string{"kubernetes", "patch nodes", h},
			[3]string{"proxmox", "qemu.reboot", vm},
			[3]string{"lab", "node-left", h},
			[3]string{"lab", "node-joined", h})
	}
	inOrder(t, log, steps...)
	downs(t, log, w.hosts(3, 0), 1)
	if got := w.vm(t, w.name+"-controlplane-02").Cores; got != 3 {
		t.Errorf("controlplane-02 has %d cores after its restart, want 3", got)
	}
	p, err = w.engine(t).Plan(ctx)
	if err != nil || !p.Empty() || len(p.Warnings) > 0 {
		t.Fatalf("plan after --reboot: %v %s %v", err, p.Summary(), p.Warnings)
	}
}
