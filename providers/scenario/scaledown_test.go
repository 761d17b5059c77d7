package scenario_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/taloscluster/taloscluster/lab"
	labkube "github.com/taloscluster/taloscluster/lab/kube"
	labtalos "github.com/taloscluster/taloscluster/lab/talos"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// Scale-down scenarios: each proves one rule of docs/safety.md against the
// lab, from the lab's operation log, on every cloud.

func TestScenarioWorkerRemovalOrder(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "shrink", 2)
		k, _ := w.kube(t)
		victim := w.name + "-worker-02"
		if _, err := k.AddPod(labkube.Pod{Node: victim, Labels: map[string]string{"app": "web"}, OwnerKind: "ReplicaSet", OwnerName: "web"}); err != nil {
			t.Fatal(err)
		}
		if _, err := k.AddPod(labkube.Pod{Node: victim, Labels: map[string]string{"app": "agent"}, OwnerKind: "DaemonSet", OwnerName: "agent"}); err != nil {
			t.Fatal(err)
		}
		vm, ok := w.machine(t, victim)
		if !ok {
			t.Fatal("no VM of the victim")
		}
		w.set(t, "workers.worker.count", "1")
		p, err := w.engine(t).Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var steps []string
		for _, ch := range p.Changes {
			if ch.Resource.Name == victim {
				steps = append(steps, string(ch.Action)+" "+string(ch.Resource.Kind))
			}
		}
		want := []string{"update node", "drain node", "reset machine", "delete node", "delete machine"}
		if !slices.Equal(steps, want) {
			t.Fatalf("steps for %s: %v, want %v", victim, steps, want)
		}
		mark := time.Now()
		if err := w.engine(t).Converge(ctx); err != nil {
			t.Fatalf("converge of the scale-down: %v", err)
		}
		log := since(w.lab, mark)
		inOrder(t, log, append([][3]string{
			{"kubernetes", "patch nodes", victim},
			{"kubernetes", "create pods/eviction", "web"},
			{"talos", "Reset", ""},
			{"kubernetes", "delete nodes", victim},
		}, w.deleted(vm)...)...)
		if find(log, 0, "kubernetes", "create pods/eviction", "agent") >= 0 {
			t.Error("the DaemonSet pod was evicted")
		}
		if w.exists(t, victim) {
			t.Error("the VM is still there")
		}
		if !w.exists(t, w.name+"-worker-01") {
			t.Error("worker-01 is gone")
		}
		if n := len(w.lab.Talos.EtcdMembers(w.name)); n != 3 {
			t.Errorf("%d etcd members, want 3", n)
		}
		// Idempotent: nothing is left to do.
		p, err = w.engine(t).Plan(ctx)
		if err != nil || !p.Empty() {
			t.Fatalf("plan after the scale-down: %v %s", err, p.Summary())
		}
	})
}

func TestScenarioDisruptionBudgetMakesTheRunWait(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "pdb", 2)
		k, cs := w.kube(t)
		victim := w.name + "-worker-02"
		guarded(t, k, cs, victim)
		w.set(t, "workers.worker.count", "1")
		e := w.engine(t)
		e.DrainTimeout = 2 * time.Second
		mark := time.Now()
		err := e.Converge(ctx)
		s := reconcile.Settle(err)
		if s.Outcome != reconcile.Waiting || !strings.Contains(s.Reason, "PodDisruptionBudget") {
			t.Fatalf("converge with a blocking budget: %v (outcome %s), want waiting on the budget", err, s.Outcome)
		}
		log := since(w.lab, mark)
		if find(log, 0, "talos", "Reset", "") >= 0 || find(log, 0, "kubernetes", "delete nodes", victim) >= 0 || w.deletes(log, "") {
			t.Fatal("a run waiting on a drain reset or deleted something")
		}
		// The pull request is reverted: the node the engine cordoned is
		// uncordoned, since Talos never would.
		w.set(t, "workers.worker.count", "2")
		if err := w.engine(t).Converge(ctx); err != nil {
			t.Fatalf("converge after restoring the count: %v", err)
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil || n.Spec.Unschedulable {
			t.Fatalf("node %s after the revert: unschedulable=%v err=%v, want schedulable", victim, n.Spec.Unschedulable, err)
		}
	})
}

func TestScenarioControlPlanesOneAtATime(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "cpdown", 0)
		cp3, cp2 := w.name+"-controlplane-03", w.name+"-controlplane-02"
		vm3, ok3 := w.machine(t, cp3)
		vm2, ok2 := w.machine(t, cp2)
		if !ok3 || !ok2 {
			t.Fatal("no VM of controlplane-03 or controlplane-02")
		}
		w.nodeAddr(t, cp3)
		w.nodeAddr(t, cp2)
		w.set(t, "controlplane.count", "1")
		mark := time.Now()
		if err := w.engine(t).Converge(ctx); err != nil {
			t.Fatalf("converge 3 -> 1 control planes: %v", err)
		}
		log := since(w.lab, mark)
		var steps [][3]string
		for _, cp := range []struct{ host, vm string }{{cp3, vm3}, {cp2, vm2}} {
			steps = append(steps,
				[3]string{"talos", "EtcdMemberList", ""}, // the gate before the control plane
				[3]string{"talos", "Reset", w.nodeAddr(t, cp.host)},
				[3]string{"kubernetes", "delete nodes", cp.host})
			steps = append(steps, w.deleted(cp.vm)...)
		}
		inOrder(t, log, steps...)
		members := w.lab.Talos.EtcdMembers(w.name)
		if len(members) != 1 {
			t.Fatalf("etcd members after 3 -> 1: %v", members)
		}
		p, err := w.engine(t).Plan(ctx)
		if err != nil || !p.Empty() {
			t.Fatalf("plan after the scale-down: %v %s", err, p.Summary())
		}
	})
}

func TestScenarioEvenControlPlaneCountRefused(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "even", 0)
		w.set(t, "controlplane.count", "2")
		before := w.mutations()
		err := w.engine(t).Converge(ctx)
		if err == nil || !strings.Contains(err.Error(), "two etcd members") {
			t.Fatalf("converge 3 -> 2: %v, want a refusal naming two etcd members", err)
		}
		if reconcile.Settle(err).Outcome != reconcile.Failed {
			t.Errorf("outcome %s, want failure", reconcile.Settle(err).Outcome)
		}
		if w.mutations() != before {
			t.Error("a refused scale-down changed something")
		}
	})
}

func TestScenarioFailedControlPlaneResetKeepsTheVM(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "cpfail", 0)
		cp3 := w.name + "-controlplane-03"
		var addr string
		for _, n := range w.lab.Talos.Nodes() {
			if n.Hostname == cp3 {
				addr = n.Addr.String()
			}
		}
		if addr == "" {
			t.Fatal("no node of controlplane-03")
		}
		if err := w.lab.Inject(lab.Fault{Kind: "talos-reset-fails", Addr: addr, N: 1}); err != nil {
			t.Fatal(err)
		}
		w.set(t, "controlplane.count", "1")
		mark := time.Now()
		err := w.engine(t).Converge(ctx)
		if reconcile.Settle(err).Outcome != reconcile.Failed || !strings.Contains(err.Error(), "VM is kept") {
			t.Fatalf("converge with a failing reset: %v (outcome %s), want a failure that keeps the VM", err, reconcile.Settle(err).Outcome)
		}
		log := since(w.lab, mark)
		if w.deletes(log, "") || find(log, 0, "kubernetes", "delete nodes", "") >= 0 {
			t.Fatal("a control plane whose reset failed was deleted")
		}
		if !w.exists(t, cp3) {
			t.Fatal("the VM of the control plane whose reset failed is gone")
		}
		if n := len(w.lab.Talos.EtcdMembers(w.name)); n != 3 {
			t.Fatalf("%d etcd members, want 3 (nothing left etcd)", n)
		}
	})
}

func TestScenarioMachineWithoutNodeIsDeleted(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "nonode", 2)
		_, cs := w.kube(t)
		victim := w.name + "-worker-02"
		// A prior run reset the node and deleted its Node, then its VM delete
		// failed: the VM is there, powered off, with no Node.
		w.stop(t, victim)
		if err := cs.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		w.set(t, "workers.worker.count", "1")
		mark := time.Now()
		if err := w.engine(t).Converge(ctx); err != nil {
			t.Fatalf("converge: %v", err)
		}
		log := since(w.lab, mark)
		if find(log, 0, "talos", "Reset", "") >= 0 {
			t.Error("a powered-off machine was reset")
		}
		inOrder(t, log, w.deleted("")...)
		if w.exists(t, victim) {
			t.Fatal("the VM without a Node was left")
		}
	})
}

func TestScenarioNodeWithoutMachineIsDeleted(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "novm", 2)
		_, cs := w.kube(t)
		victim := w.name + "-worker-02"
		w.stop(t, victim)
		w.remove(t, victim)
		waitFor(t, victim+" NotReady", func() bool {
			n, err := cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, c := range n.Status.Conditions {
				if c.Type == "Ready" {
					return c.Status != "True"
				}
			}
			return false
		})
		w.set(t, "workers.worker.count", "1")
		mark := time.Now()
		if err := w.engine(t).Converge(ctx); err != nil {
			t.Fatalf("converge: %v", err)
		}
		log := since(w.lab, mark)
		inOrder(t, log, [3]string{"kubernetes", "delete nodes", victim})
		if w.deletes(log, "") || find(log, 0, "talos", "Reset", "") >= 0 {
			t.Error("a Node without a VM made the engine reset or delete a VM")
		}
		if _, err := cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{}); err == nil {
			t.Fatal("the Node whose VM is gone is still there")
		}
	})
}

func TestScenarioDeadControlPlaneLeavesThroughTheSurvivors(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "deadcp", 0)
		cp3 := w.name + "-controlplane-03"
		w.stop(t, cp3)
		w.set(t, "controlplane.count", "1")
		mark := time.Now()
		if err := w.engine(t).Converge(ctx); err != nil {
			t.Fatalf("converge 3 -> 1 with controlplane-03 dead: %v", err)
		}
		log := since(w.lab, mark)
		steps := [][3]string{
			{"talos", "EtcdRemoveMemberByID", ""},
			{"kubernetes", "delete nodes", cp3},
		}
		steps = append(steps, w.deleted("")...)
		steps = append(steps,
			[3]string{"talos", "Reset", ""},
			[3]string{"kubernetes", "delete nodes", w.name + "-controlplane-02"})
		inOrder(t, log, steps...)
		if ms := w.lab.Talos.EtcdMembers(w.name); len(ms) != 1 {
			t.Fatalf("etcd members after 3 -> 1: %v", ms)
		}
	})
}

func TestScenarioUnreadableMembersKeepTheMachine(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "nolist", 0)
		cp3 := w.name + "-controlplane-03"
		w.stop(t, cp3)
		w.set(t, "controlplane.count", "1")
		e := w.engine(t)
		e.ReadBudget = time.Second
		// Observation reads the members first; the fault hits the reads
		// after it.
		p, err := e.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Removals(p)) == 0 {
			t.Fatalf("no removal planned: %s", p.Summary())
		}
		for _, n := range w.lab.Talos.Nodes() {
			if n.Cluster == w.name {
				if err := w.lab.Inject(lab.Fault{Kind: "talos-fail", Op: "EtcdMemberList", Addr: n.Addr.String(), N: 1000}); err != nil {
					t.Fatal(err)
				}
			}
		}
		mark := time.Now()
		err = e.Converge(ctx)
		if err == nil || !strings.Contains(err.Error(), "etcd-member "+cp3) || !strings.Contains(err.Error(), "could not be read from any surviving control plane") {
			t.Fatalf("converge without the etcd members: %v, want the etcd-member step of %s to stop on the unread list", err, cp3)
		}
		if s := reconcile.Settle(err); s.Outcome != reconcile.Transient {
			t.Errorf("outcome %s, want transient: the members may be read again", s.Outcome)
		}
		log := since(w.lab, mark)
		if w.deletes(log, "") || find(log, 0, "talos", "EtcdRemoveMemberByID", "") >= 0 {
			t.Fatalf("the members could not be read, yet a member or VM was removed: %v", err)
		}
		if !w.exists(t, cp3) {
			t.Fatal("the dead control plane's VM is gone")
		}
	})
}

func TestScenarioEtcdGateIgnoresTheAPI(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w := newWorld(t, c, "gate", 0)
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
		defer cancel()
		w.set(t, "controlplane.count", "5")
		if err := w.engine(t).Converge(ctx); err != nil {
			t.Fatalf("first converge: %v", err)
		}
		// controlplane-02 stays but is down. The API still answers through
		// the VIP and etcd keeps its majority (four of five), so only etcd's
		// own health tells that removing controlplane-05 now would leave the
		// cluster one failure from losing quorum.
		w.stop(t, w.name+"-controlplane-02")
		w.set(t, "controlplane.count", "3")
		e := w.engine(t)
		// Long enough for a few whole looks at etcd on a busy machine.
		e.BootTimeout = 30 * time.Second
		mark := time.Now()
		err := e.Converge(ctx)
		if err == nil || !strings.Contains(err.Error(), "waiting for a healthy etcd before removing "+w.name+"-controlplane-05") || !strings.Contains(err.Error(), "controlplane-02") {
			t.Fatalf("converge while a control plane that stays is down: %v, want a stop naming it", err)
		}
		for _, e := range since(w.lab, mark) {
			if e.Source == "talos" && e.Op == "Reset" || e.Source == c.deletion[0] && e.Op == c.deletion[1] {
				t.Fatalf("a control plane was removed while etcd was not healthy: %v", err)
			}
		}
		if n := len(w.lab.Talos.EtcdMembers(w.name)); n != 5 {
			t.Errorf("%d etcd members, want all 5 still", n)
		}
	})
}

func TestScenarioNodelessControlPlaneNeedsEtcdEvidence(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "nodeless", 0)
		_, cs := w.kube(t)
		cp3 := w.name + "-controlplane-03"
		// A control plane without its Node, whose reset fails and which is
		// still an etcd member: the failed reset is not fatal by itself, but
		// the membership check then keeps its VM.
		if err := cs.CoreV1().Nodes().Delete(ctx, cp3, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var addr string
		for _, n := range w.lab.Talos.Nodes() {
			if n.Hostname == cp3 {
				addr = n.Addr.String()
			}
		}
		if err := w.lab.Inject(lab.Fault{Kind: "talos-reset-fails", Addr: addr, N: 1}); err != nil {
			t.Fatal(err)
		}
		w.set(t, "controlplane.count", "1")
		mark := time.Now()
		err := w.engine(t).Converge(ctx)
		if reconcile.Settle(err).Outcome != reconcile.Failed || !strings.Contains(err.Error(), "still an etcd member") {
			t.Fatalf("converge: %v, want a failure: still an etcd member", err)
		}
		log := since(w.lab, mark)
		inOrder(t, log, [3]string{"talos", "Reset", ""}, [3]string{"talos", "EtcdMemberList", ""})
		if w.deletes(log, "") {
			t.Fatal("the VM of a control plane that is still an etcd member was deleted")
		}
	})
}

// TestScenarioResumedResetIsFollowedNotRepeated: a run killed while a
// node resets leaves the reset running on the node; the next run follows
// that reset to its end instead of asking for a second one.
func TestScenarioResumedResetIsFollowedNotRepeated(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "resume", 2)
		victim := w.name + "-worker-02"
		addr := w.nodeAddr(t, victim)
		k, cs := w.kube(t)
		// A budget holds Talos's own drain for its whole timeout (two
		// seconds in the lab), so the reset runs for a while.
		guarded(t, k, cs, victim)
		secrets, err := os.ReadFile(filepath.Join(w.dir, "talossecrets.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		bundle, err := machineconfig.ParseSecrets("talossecrets.yaml", secrets)
		if err != nil {
			t.Fatal(err)
		}
		tc, err := talos.Dial(ctx, w.name, bundle, []string{w.nodeAddr(t, w.name+"-controlplane-01")})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		// The first run asks for the reset and dies while it runs.
		killed, kill := context.WithTimeout(ctx, 300*time.Millisecond)
		defer kill()
		if err := tc.Reset(killed, addr, true); err == nil {
			t.Fatal("the reset ended within 300ms, though a budget holds its drain")
		}
		// The next run.
		if err := tc.ResetOnce(ctx, addr, true); err != nil {
			t.Fatalf("resuming the reset: %v", err)
		}
		resets := 0
		for _, op := range w.lab.Talos.Log() {
			if op.Short() == "Reset" && op.Node.String() == addr {
				resets++
			}
		}
		if resets != 1 {
			t.Fatalf("%d Reset calls for %s, want 1: the running reset is followed, not asked for again", resets, victim)
		}
		if st, _ := w.lab.Talos.Node(netip.MustParseAddr(addr)); st.Mode != labtalos.ModeOff {
			t.Fatalf("%s after the followed reset: %s, want off", victim, st.Mode)
		}
	})
}

// guarded puts a StatefulSet pod on node with a PodDisruptionBudget that
// lets none of its pods go: its eviction is refused (429) for good.
func guarded(t *testing.T, k *labkube.Server, cs kubernetes.Interface, node string) {
	t.Helper()
	if _, err := k.AddPod(labkube.Pod{Node: node, Labels: map[string]string{"app": "db"}, OwnerKind: "StatefulSet", OwnerName: "db"}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(t.Context(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
