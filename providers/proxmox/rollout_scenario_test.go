package proxmox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// Rollout scenarios: each proves one rule of docs/safety.md against the
// lab, from the lab's operation log.

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
	down := map[string]bool{}
	most := 0
	for _, e := range log {
		if e.Source != "lab" || !slices.Contains(hosts, e.Target) {
			continue
		}
		switch e.Op {
		case "node-left":
			down[e.Target] = true
		case "node-joined":
			delete(down, e.Target)
		}
		if len(down) > limit {
			t.Fatalf("%d of %v down at once (%v), at most %d allowed", len(down), hosts, down, limit)
		}
		most = max(most, len(down))
	}
	return most
}

// talosVersions returns the Talos version each of the world's nodes runs.
func (w *world) talosVersions(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range w.lab.Talos.Nodes() {
		if n.Cluster == w.name && n.Up {
			out[n.Hostname] = n.Version
		}
	}
	return out
}

func stepsOf(p *plan.Plan, host string) []string {
	var out []string
	for _, ch := range p.Changes {
		if ch.Resource.Name == host {
			out = append(out, string(ch.Action)+" "+string(ch.Resource.Kind))
		}
	}
	return out
}

// TestScenarioTalosUpgradeControlPlanesFirst: a Talos upgrade installs
// the node's installer and reboots it, control planes one at a time
// through the health gate, then the workers; never two control planes
// down at once.
func TestScenarioTalosUpgradeControlPlanesFirst(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "tup", 2)
	w.set(t, "talos.version", "v1.13.9")
	p, err := w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Refusals) > 0 {
		t.Fatalf("refusals: %v", p.Refusals)
	}
	cp1 := w.name + "-controlplane-01"
	want := []string{"update node", "drain node", "upgrade-talos machine", "restart machine", "wait machine", "apply-config machine", "update node"}
	if got := stepsOf(p, cp1); !slices.Equal(got, want) {
		t.Fatalf("steps of %s: %v, want %v", cp1, got, want)
	}
	mark := time.Now()
	if err := w.journaled(t).Converge(ctx); err != nil {
		t.Fatalf("converge of the upgrade: %v", err)
	}
	log := since(w.lab, mark)
	var steps [][3]string
	for _, h := range w.hosts(3, 2) {
		addr := w.nodeAddr(t, h)
		steps = append(steps,
			[3]string{"talos", "ImageService.Pull", addr},
			[3]string{"talos", "LifecycleService.Upgrade", addr},
			[3]string{"talos", "Reboot", addr},
			[3]string{"lab", "node-left", h},
			[3]string{"lab", "node-joined", h})
	}
	inOrder(t, log, steps...)
	downs(t, log, w.hosts(3, 0), 1)
	for h, v := range w.talosVersions(t) {
		if v != "v1.13.9" {
			t.Errorf("%s runs %s after the upgrade", h, v)
		}
	}
	p, err = w.engine(t).Plan(ctx)
	if err != nil || !p.Empty() {
		t.Fatalf("plan after the upgrade: %v %s %v", err, p.Summary(), p.Changes)
	}
}

// TestScenarioKubernetesStepsEveryMinor: a Kubernetes upgrade two minors
// ahead goes through the minor in between; per hop each control plane's
// API server, controller manager and scheduler in turn, then kube-proxy,
// then the kubelets.
func TestScenarioKubernetesStepsEveryMinor(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "khop", 1)
	w.set(t, "kubernetes.version", "v1.34.2")
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	t.Cleanup(cancel)
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("first converge: %v", err)
	}
	w.set(t, "kubernetes.version", "v1.36.1")
	p, err := w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var hops []string
	for _, ch := range p.Changes {
		if ch.Action != plan.ActionUpgradeKubernetes {
			continue
		}
		for _, a := range ch.Attributes {
			if a.Key == "kubernetes" && !slices.Contains(hops, a.Value) {
				hops = append(hops, a.Value)
			}
		}
	}
	if want := []string{"v1.34.2 -> v1.35.0", "v1.35.0 -> v1.36.1"}; !slices.Equal(hops, want) {
		t.Fatalf("hops %v, want %v", hops, want)
	}
	mark := time.Now()
	if err := w.journaled(t).Converge(ctx); err != nil {
		t.Fatalf("converge of the upgrade: %v", err)
	}
	log := since(w.lab, mark)
	var steps [][3]string
	for _, hop := range []string{"v1.35.0", "v1.36.1"} {
		for _, h := range w.hosts(3, 0) {
			for _, comp := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				steps = append(steps,
					[3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, h)},
					[3]string{"kubernetes", "list pods", ""})
				_ = comp
			}
		}
		steps = append(steps, [3]string{"kubernetes", "patch daemonsets", "kube-proxy"})
		for _, h := range w.hosts(3, 1) {
			steps = append(steps, [3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, h)})
		}
		_ = hop
	}
	inOrder(t, log, steps...)
	for _, n := range w.lab.Talos.Nodes() {
		if n.Cluster == w.name && n.KubernetesVersion != "v1.36.1" {
			t.Errorf("%s's config is at %s", n.Hostname, n.KubernetesVersion)
		}
	}
	if find(log, 0, "lab", "node-left", "") >= 0 {
		t.Error("a node went down during a Kubernetes upgrade")
	}
	p, err = w.engine(t).Plan(ctx)
	if err != nil || !p.Empty() {
		t.Fatalf("plan after the upgrade: %v %s", err, p.Summary())
	}
	_ = strings.Contains
}
