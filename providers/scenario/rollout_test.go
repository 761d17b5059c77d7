package scenario_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/taloscluster/taloscluster/internal/labtest"
	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// Rollout scenarios: each proves one rule of docs/safety.md against the
// lab, from the lab's operation log, on every cloud.

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

// talosVersions returns the Talos version each of the world's nodes runs.
func (w *world) talosVersions() map[string]string {
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
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "tup", 2)
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
		for h, v := range w.talosVersions() {
			if v != "v1.13.9" {
				t.Errorf("%s runs %s after the upgrade", h, v)
			}
		}
		p, err = w.engine(t).Plan(ctx)
		if err != nil || !p.Empty() {
			t.Fatalf("plan after the upgrade: %v %s %v", err, p.Summary(), p.Changes)
		}
	})
}

// TestScenarioKubernetesStepsEveryMinor: a Kubernetes upgrade two minors
// ahead goes through the minor in between; per hop each control plane's
// API server, controller manager and scheduler in turn, then kube-proxy,
// then the kubelets.
func TestScenarioKubernetesStepsEveryMinor(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := builtAt(t, c, "khop", "v1.34.2")
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
		stop := w.watchVersions()
		if err := w.journaled(t).Converge(ctx); err != nil {
			t.Fatalf("converge of the upgrade: %v", err)
		}
		seen := stop()
		checkSkew(t, seen)
		w.checkWent(t, seen, "v1.34.2", "v1.35.0", "v1.36.1")
		if got, want := seen.proxy, []string{"v1.34.2", "v1.35.0", "v1.36.1"}; !slices.Equal(got, want) {
			t.Errorf("kube-proxy went %v, want %v", got, want)
		}
		log := since(w.lab, mark)
		inOrder(t, log,
			[3]string{"talos", "ImageService.Pull", w.nodeAddr(t, w.name+"-controlplane-01")},
			[3]string{"talos", "ImageService.Pull", w.nodeAddr(t, w.name+"-worker-01")},
			[3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, w.name+"-controlplane-01")},
			[3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, w.name+"-controlplane-02")},
			[3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, w.name+"-controlplane-03")},
			[3]string{"kubernetes", "patch daemonsets", "kube-proxy"},
			[3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, w.name+"-worker-01")},
			[3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, w.name+"-controlplane-01")},
			[3]string{"kubernetes", "patch daemonsets", "kube-proxy"},
			[3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, w.name+"-worker-01")})
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
	})
}

// versionsSeen is what watchVersions saw: each version in the order it
// first appeared, per node, and every skew it saw.
type versionsSeen struct {
	kubelets, apiservers map[string][]string
	proxy                []string
	skews                []string
}

// watchVersions samples the lab's Kubernetes versions until stop is
// called: each node's kubelet config and API server, and kube-proxy; and
// notes every sample where a kubelet config is newer than the oldest API
// server, or a node's controller manager or scheduler newer than its API
// server.
func (w *world) watchVersions() (stop func() versionsSeen) {
	seen := versionsSeen{kubelets: map[string][]string{}, apiservers: map[string][]string{}}
	note := func(list []string, v string) []string {
		if v == "" || (len(list) > 0 && list[len(list)-1] == v) {
			return list
		}
		return append(list, v)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			v := w.lab.World()
			oldest := ""
			for _, c := range v.Clusters {
				if c.Name != w.name {
					continue
				}
				seen.proxy = note(seen.proxy, c.KubeProxy)
				for _, cp := range c.ControlPlane {
					seen.apiservers[cp.Node] = note(seen.apiservers[cp.Node], cp.APIServer)
					if oldest == "" || olderTag(cp.APIServer, oldest) {
						oldest = cp.APIServer
					}
					if olderTag(cp.APIServer, cp.ControllerManager) || olderTag(cp.APIServer, cp.Scheduler) {
						seen.skews = append(seen.skews, fmt.Sprintf("%s: kube-apiserver %s, controller manager %s, scheduler %s", cp.Node, cp.APIServer, cp.ControllerManager, cp.Scheduler))
					}
				}
			}
			for _, n := range v.Nodes {
				if n.Cluster != w.name || n.ConfigKubernetes == "" {
					continue
				}
				seen.kubelets[n.Hostname] = note(seen.kubelets[n.Hostname], n.ConfigKubernetes)
				if oldest != "" && olderTag(oldest, n.ConfigKubernetes) && minorOf(oldest) != minorOf(n.ConfigKubernetes) {
					seen.skews = append(seen.skews, fmt.Sprintf("%s's kubelet config is at %s while an API server runs %s", n.Hostname, n.ConfigKubernetes, oldest))
				}
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() versionsSeen {
		close(done)
		<-finished
		return seen
	}
}

func checkSkew(t *testing.T, seen versionsSeen) {
	t.Helper()
	if len(seen.skews) > 0 {
		t.Errorf("%d samples broke the version skew rules, the first: %s", len(seen.skews), seen.skews[0])
	}
}

// olderTag compares two Kubernetes version tags.
func olderTag(a, b string) bool {
	va, err1 := version.ParseGeneric(a)
	vb, err2 := version.ParseGeneric(b)
	return err1 == nil && err2 == nil && va.LessThan(vb)
}

func minorOf(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// TestScenarioLiveConfigApplyMovesOnAtOnce: a change Talos applies live
// goes to the control planes one at a time, then the workers, with no
// restart, no cordon and no gate.
func TestScenarioLiveConfigApplyMovesOnAtOnce(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "live", 1)
		w.set(t, "talos.config_patches", yamlString("machine:\n  sysctls:\n    net.core.somaxconn: \"4096\"\n"))
		p, err := w.engine(t).Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range w.hosts(3, 1) {
			if got, want := stepsOf(p, h), []string{"apply-config machine"}; !slices.Equal(got, want) {
				t.Fatalf("steps of %s: %v, want %v", h, got, want)
			}
		}
		mark := time.Now()
		if err := w.journaled(t).Converge(ctx); err != nil {
			t.Fatalf("converge of a live change: %v", err)
		}
		log := since(w.lab, mark)
		var steps [][3]string
		for _, h := range w.hosts(3, 1) {
			steps = append(steps, [3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, h)})
		}
		inOrder(t, log, steps...)
		for _, op := range []string{"Reboot", "node-left"} {
			if find(log, 0, "talos", op, "") >= 0 || find(log, 0, "lab", op, "") >= 0 {
				t.Errorf("a live change caused a %s", op)
			}
		}
		if find(log, 0, "kubernetes", "patch nodes", "") >= 0 {
			t.Error("a live change cordoned a node")
		}
		p, err = w.engine(t).Plan(ctx)
		if err != nil || !p.Empty() {
			t.Fatalf("plan after the apply: %v %s", err, p.Summary())
		}
	})
}

// TestScenarioRestartingConfigApplyIsSettledNodeByNode: a change that
// takes effect only at a restart is staged and the node rebooted, each
// control plane back and healthy before the next is touched, then the
// workers in batches of rollout.max_unavailable.
func TestScenarioRestartingConfigApplyIsSettledNodeByNode(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "restart", 3)
		w.set(t, "talos.config_patches", yamlString("machine:\n  env:\n    HTTP_PROXY: http://127.0.0.1:3128\n"),
			"rollout", "{max_unavailable: 2}")
		p, err := w.engine(t).Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cp2 := w.name + "-controlplane-02"
		want := []string{"update node", "drain node", "apply-config machine", "restart machine", "wait machine", "update node"}
		if got := stepsOf(p, cp2); !slices.Equal(got, want) {
			t.Fatalf("steps of %s: %v, want %v", cp2, got, want)
		}
		batches := map[int][]string{}
		for _, ch := range p.Changes {
			if ch.Batch != 0 && !slices.Contains(batches[ch.Batch], ch.Resource.Name) {
				batches[ch.Batch] = append(batches[ch.Batch], ch.Resource.Name)
			}
		}
		if len(batches) != 2 || len(batches[1]) != 2 || len(batches[2]) != 1 {
			t.Fatalf("worker batches %v, want two of two and one", batches)
		}
		mark := time.Now()
		if err := w.journaled(t).Converge(ctx); err != nil {
			t.Fatalf("converge of a restarting change: %v", err)
		}
		log := since(w.lab, mark)
		var steps [][3]string
		for _, h := range w.hosts(3, 0) {
			steps = append(steps,
				[3]string{"kubernetes", "patch nodes", h},
				[3]string{"talos", "ApplyConfiguration", w.nodeAddr(t, h)},
				[3]string{"talos", "Reboot", w.nodeAddr(t, h)},
				[3]string{"lab", "node-left", h},
				[3]string{"lab", "node-joined", h},
				[3]string{"talos", "EtcdMemberList", w.nodeAddr(t, h)})
		}
		inOrder(t, log, steps...)
		downs(t, log, w.hosts(3, 0), 1)
		downs(t, log, w.hosts(0, 3), 2)
		// The batch runs in parallel: both workers are cordoned before either
		// is uncordoned.
		var patched []string
		for _, e := range log {
			for _, h := range batches[1] {
				if e.Source == "kubernetes" && e.Op == "patch nodes" && strings.HasSuffix(e.Target, " "+h) {
					patched = append(patched, h)
				}
			}
		}
		if len(patched) < 2 || patched[0] == patched[1] {
			t.Errorf("the batch %v ran one node after the other: cordons and uncordons %v", batches[1], patched)
		}
		for _, n := range w.lab.World().Nodes {
			if n.Cluster == w.name && !n.Up {
				t.Errorf("%s is down after the rollout", n.Hostname)
			}
		}
		_, cs := w.kube(t)
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Items {
			if n.Spec.Unschedulable {
				t.Errorf("%s is left cordoned", n.Name)
			}
		}
		p, err = w.engine(t).Plan(ctx)
		if err != nil || !p.Empty() {
			t.Fatalf("plan after the apply: %v %s %v", err, p.Summary(), p.Changes)
		}
	})
}

// TestScenarioNodeThatNeverGoesDownStopsTheRollout: a control plane that
// accepts its restart and never goes down stops the rollout after the
// grace window; the next control plane is not touched.
func TestScenarioNodeThatNeverGoesDownStopsTheRollout(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "never", 0)
		cp1, cp2 := w.name+"-controlplane-01", w.name+"-controlplane-02"
		w.lab.Talos.NeverReboot(netip.MustParseAddr(w.nodeAddr(t, cp1)))
		w.set(t, "talos.config_patches", yamlString("machine:\n  env:\n    HTTP_PROXY: http://127.0.0.1:3128\n"))
		e := w.journaled(t)
		e.RebootGrace = time.Second
		mark := time.Now()
		err := e.Converge(ctx)
		if err == nil || !strings.Contains(err.Error(), "never went down") {
			t.Fatalf("converge with a node that never goes down: %v", err)
		}
		if s := reconcile.Settle(err); s.Outcome != reconcile.Failed {
			t.Errorf("outcome %s, want failure", s.Outcome)
		}
		log := since(w.lab, mark)
		if find(log, 0, "talos", "ApplyConfiguration", w.nodeAddr(t, cp2)) >= 0 {
			t.Error("the rollout went on to the next control plane")
		}
	})
}

// TestScenarioRolledBackUpgradeStops: a control plane that comes back on
// its previous Talos (the new system did not boot) stops the rollout as a
// failure; the next control plane is not touched.
func TestScenarioRolledBackUpgradeStops(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "rollback", 0)
		cp1, cp2 := w.name+"-controlplane-01", w.name+"-controlplane-02"
		w.lab.Talos.RollbackUpgrade(netip.MustParseAddr(w.nodeAddr(t, cp1)), 1)
		w.set(t, "talos.version", "v1.13.9")
		mark := time.Now()
		err := w.journaled(t).Converge(ctx)
		if err == nil || !strings.Contains(err.Error(), "came back running Talos v1.13.8, not v1.13.9") {
			t.Fatalf("converge with an upgrade that rolls back: %v", err)
		}
		if s := reconcile.Settle(err); s.Outcome != reconcile.Failed {
			t.Errorf("outcome %s, want failure", s.Outcome)
		}
		if find(since(w.lab, mark), 0, "talos", "LifecycleService.Upgrade", w.nodeAddr(t, cp2)) >= 0 {
			t.Error("the rollout went on to the next control plane")
		}
	})
}

// TestScenarioUnreadableKubernetesVersionRefuses: when the running
// Kubernetes version of a node cannot be read, a Kubernetes upgrade is
// refused before any config is generated or applied.
func TestScenarioUnreadableKubernetesVersionRefuses(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "unread", 1)
		wk := w.name + "-worker-01"
		w.lab.Talos.FailCalls(netip.MustParseAddr(w.nodeAddr(t, wk)), "/machine.MachineService/Version", 1000, codes.Unavailable)
		w.set(t, "kubernetes.version", "v1.36.2")
		before := len(w.lab.Talos.Log())
		err := w.journaled(t).Converge(ctx)
		if err == nil || !strings.Contains(err.Error(), "the running Kubernetes version of "+wk+" could not be read") {
			t.Fatalf("converge with an unreadable node: %v", err)
		}
		for _, op := range w.lab.Talos.Log()[before:] {
			if op.Name() == "ApplyConfiguration" {
				t.Fatalf("a config was applied: %v", op)
			}
		}
	})
}

// TestScenarioInterruptedKubernetesUpgradeResumes: a Kubernetes upgrade
// over two minors, stopped at random moments, resumes where it was: no
// minor skipped, no kubelet ever newer than the oldest API server, no
// component moved back, no node restarted.
func TestScenarioInterruptedKubernetesUpgradeResumes(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := builtAt(t, c, "khalt", "v1.34.2")
		w.set(t, "kubernetes.version", "v1.36.1")
		mark := time.Now()
		stop := w.watchVersions()
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
		stops := 0
		for try := 0; ; try++ {
			if try == 40 {
				t.Fatal("the upgrade did not finish in 40 runs")
			}
			// The window grows with each try, so that a loaded machine still
			// gets through.
			rctx, rcancel := context.WithTimeout(ctx, time.Duration(100+rng.IntN(500)+150*try)*time.Millisecond)
			err := w.journaled(t).Converge(rctx)
			rcancel()
			if err == nil {
				break
			}
			if rctx.Err() == nil {
				t.Fatalf("a run that was not stopped failed: %v", err)
			}
			stops++
		}
		seen := stop()
		checkSkew(t, seen)
		w.checkWent(t, seen, "v1.34.2", "v1.35.0", "v1.36.1")
		if find(since(w.lab, mark), 0, "lab", "node-left", "") >= 0 {
			t.Error("a node went down during a Kubernetes upgrade")
		}
		if stops == 0 {
			t.Log("no run was stopped before the upgrade finished")
		}
		t.Logf("the upgrade finished after %d stopped runs", stops)
	})
}

// builtAt builds the world's cluster of three control planes and a worker
// at a Kubernetes version.
func builtAt(t *testing.T, c *cloud, name, kubernetes string) (*world, context.Context) {
	t.Helper()
	w := newWorld(t, c, name, 1)
	w.set(t, "kubernetes.version", kubernetes)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("first converge: %v", err)
	}
	return w, ctx
}

// checkWent checks that every kubelet config and API server of the world
// went through exactly these versions, in order.
func (w *world) checkWent(t *testing.T, seen versionsSeen, versions ...string) {
	t.Helper()
	for _, h := range w.hosts(3, 1) {
		if got := seen.kubelets[h]; !slices.Equal(got, versions) {
			t.Errorf("the kubelet config of %s went %v, want %v", h, got, versions)
		}
	}
	for _, h := range w.hosts(3, 0) {
		if got := seen.apiservers[h]; !slices.Equal(got, versions) {
			t.Errorf("the API server of %s went %v, want %v", h, got, versions)
		}
	}
}

// TestRolloutPlanOrder: the plan keeps its rollout in order once sorted by
// phase, whatever each node needs: control planes before workers, each
// batch of workers after the health gate that follows the batch before,
// even when one worker only restarts for its config and another is
// upgraded. A new endpoint together with restarts is refused (where
// cluster.yaml names the endpoint: Proxmox's kubeapi_vip).
func TestRolloutPlanOrder(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "order", 3)
		env := yamlString("machine:\n  env:\n    HTTP_PROXY: http://127.0.0.1:3128\n")
		for _, tc := range []struct {
			name string
			sets [][2]string
		}{
			{"restarts everywhere", [][2]string{{"talos.config_patches", env}, {"rollout", "{max_unavailable: 2}"}}},
			{"control planes restart, workers upgrade", [][2]string{{"controlplane.config_patches", env}, {"workers.worker.extensions", "[siderolabs/iscsi-tools]"}, {"rollout", "{max_unavailable: 2}"}}},
			{"workers restart for their config while every node is upgraded", [][2]string{{"workers.worker.config_patches", env}, {"talos.version", "v1.13.9"}}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p, err := planSets(t, ctx, w, tc.sets)
				if err != nil {
					t.Fatal(err)
				}
				if len(p.Refusals) > 0 {
					t.Fatalf("refusals %v", p.Refusals)
				}
				checkRolloutOrder(t, p)
			})
		}
		key, vip, ok := c.endpoint(w)
		if !ok {
			return
		}
		p, err := planSets(t, ctx, w, [][2]string{{"talos.config_patches", env}, {key, vip}})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Refusals) != 1 || !strings.Contains(p.Refusals[0].Reason, "Move the endpoint on its own first") {
			t.Errorf("a new endpoint with restarts: refusals %v, want the endpoint's", p.Refusals)
		}
	})
}

// checkRolloutOrder checks a sorted plan's rollout: no control-plane step
// after a worker's, and every batch after a cluster gate that comes after
// the batch before it.
func checkRolloutOrder(t *testing.T, p *plan.Plan) {
	t.Helper()
	first, last := map[int]int{}, map[int]int{}
	var gates []int
	workerSeen := false
	for i, ch := range p.Changes {
		if (ch.Phase != plan.PhaseApplyConfig && ch.Phase != plan.PhaseUpgrade) || ch.Action == plan.ActionUpgradeKubernetes {
			continue
		}
		if ch.Action == plan.ActionWait && ch.Resource.Kind == plan.KindCluster {
			gates = append(gates, i)
			continue
		}
		worker := strings.Contains(ch.Resource.Name, "-worker-")
		if !worker && workerSeen && ch.Resource.Kind != plan.KindKubeconfig {
			t.Errorf("step %d (%s %s) of a control plane comes after a worker's", i, ch.Action, ch.Resource)
		}
		workerSeen = workerSeen || worker
		if ch.Batch > 0 {
			if _, ok := first[ch.Batch]; !ok {
				first[ch.Batch] = i
			}
			last[ch.Batch] = i
		}
	}
	for k := 1; k <= len(first); k++ {
		after := -1
		if k > 1 {
			after = last[k-1]
		}
		if !slices.ContainsFunc(gates, func(g int) bool { return g > after && g < first[k] }) {
			t.Errorf("batch %d (steps %d to %d) has no health gate before it, after the batch before", k, first[k], last[k])
		}
		for b, i := range first {
			if b != k && i > first[k] && i < last[k] {
				t.Errorf("batch %d starts inside batch %d", b, k)
			}
		}
	}
	if len(first) == 0 {
		t.Error("the plan has no batch of workers")
	}
}

// TestScenarioGateReadsEveryEtcd: the health gate before a control plane
// goes down reads the etcd service of every control plane; one whose etcd
// cannot be read (or does not run healthy) keeps the next control plane
// up, whatever the member list and the Nodes say.
func TestScenarioGateReadsEveryEtcd(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "etcdgate", 0)
		cp1, cp3 := w.name+"-controlplane-01", w.name+"-controlplane-03"
		w.lab.Talos.FailCalls(netip.MustParseAddr(w.nodeAddr(t, cp3)), "ServiceList", 100000, codes.Unavailable)
		w.set(t, "talos.config_patches", yamlString("machine:\n  env:\n    HTTP_PROXY: http://127.0.0.1:3128\n"))
		e := w.journaled(t)
		var out strings.Builder
		e.Progress, e.ReportEvery, e.BootTimeout = &out, 100*time.Millisecond, 5*time.Second
		mark := time.Now()
		// The gate's last look may be cut by its own deadline on a loaded
		// machine: what it waited for is in its progress lines.
		if err := e.Converge(ctx); err == nil {
			t.Fatal("converge with an unreadable etcd succeeded")
		}
		if !strings.Contains(out.String(), cp3+" does not answer the Talos API: its etcd service could not be read") {
			t.Errorf("the gate never said it waits for the etcd of %s:\n%s", cp3, out.String())
		}
		if find(since(w.lab, mark), 0, "talos", "Reboot", w.nodeAddr(t, cp1)) >= 0 {
			t.Fatal("a control plane was rebooted although another one's etcd could not be read")
		}
	})
}

// TestScenarioRunStoppedInARebootWaitResumesThere: a run stopped while it
// waits for a rebooted control plane leaves the restart open in the
// journal; the next run's first rollout step is the wait for that node,
// before any other node is touched, and the restart is closed once it
// passed.
func TestScenarioRunStoppedInARebootWaitResumesThere(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "resume", 0)
		cp1 := w.name + "-controlplane-01"
		w.set(t, "talos.config_patches", yamlString("machine:\n  env:\n    HTTP_PROXY: http://127.0.0.1:3128\n"))
		rctx, cancel := context.WithCancel(ctx)
		e := w.journaled(t)
		e.Steps = func(ev reconcile.StepEvent) {
			if ev.Ended.IsZero() && ev.Action == plan.ActionWait && ev.Resource.Name == cp1 {
				cancel()
			}
		}
		if err := e.Converge(rctx); err == nil {
			t.Fatal("the stopped run succeeded")
		}
		cancel()
		open, err := state.Local{Dir: w.dir}.Open(ctx, w.name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(open, func(en state.Entry) bool { return en.Target == cp1 && en.Boot != "" }) {
			t.Fatalf("open journal entries %v, want the restart of %s", open, cp1)
		}
		e = w.journaled(t)
		var first string
		e.Approve = func(p *plan.Plan) error {
			for _, ch := range p.Changes {
				if ch.Phase == plan.PhaseApplyConfig {
					first = string(ch.Action) + " " + ch.Resource.String() + ": " + ch.Reason
					break
				}
			}
			return nil
		}
		if err := e.Converge(ctx); err != nil {
			t.Fatalf("the next converge: %v", err)
		}
		if !strings.HasPrefix(first, "wait machine "+cp1+": an interrupted run restarted this node") {
			t.Errorf("the next run's first rollout step is %q, want the wait for %s", first, cp1)
		}
		open, err = state.Local{Dir: w.dir}.Open(ctx, w.name)
		if err != nil || len(open) > 0 {
			t.Errorf("open journal entries after the run: %v %v", open, err)
		}
	})
}
