package scenario_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// Remediation scenarios: each proves one rule of docs/safety.md
// ("Remediation") against the lab, on every cloud. The lab marks a
// silent node NotReady after its node-monitor grace period (half a
// second); the engine's clock runs two minutes ahead, so
// remediation.after (1m at least) has passed without a test waiting for
// it.

// ahead is an engine clock two minutes ahead of the lab's.
func ahead() time.Time { return time.Now().Add(2 * time.Minute) }

// remediating returns the world's engine with its clock ahead.
func (w *world) remediating(t *testing.T) *reconcile.Engine {
	t.Helper()
	e := w.engine(t)
	e.Now = ahead
	return e
}

// crash powers a machine off behind the engine's back and waits until
// its Node is NotReady.
func (w *world) crash(ctx context.Context, t *testing.T, cs kubernetes.Interface, hostname string) {
	t.Helper()
	w.stop(t, hostname)
	waitFor(t, hostname+" NotReady", func() bool { return !nodeReady(ctx, cs, hostname) })
}

func nodeReady(ctx context.Context, cs kubernetes.Interface, name string) bool {
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// remediations lists the machines a plan replaces.
func remediations(p *plan.Plan) []string {
	var out []string
	for _, ch := range p.Changes {
		if ch.Phase == plan.PhaseScaleDown && ch.Action == plan.ActionDelete && ch.Resource.Kind == plan.KindMachine && strings.HasPrefix(ch.Reason, "remediation") {
			out = append(out, ch.Resource.Name)
		}
	}
	return out
}

func hasWarning(p *plan.Plan, text string) bool {
	return slices.ContainsFunc(p.Warnings, func(w string) bool { return strings.Contains(w, text) })
}

func TestScenarioRemediationReplacesAWorkerNotReadyTooLong(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "remedy", 2)
		_, cs := w.kube(t)
		w.set(t, "remediation", "{after: 1m, max_unhealthy: 1}")
		victim := w.name + "-worker-02"
		old, _ := w.machine(t, victim)
		w.crash(ctx, t, cs, victim)

		p, err := w.remediating(t).Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := remediations(p); !slices.Equal(got, []string{victim}) {
			t.Fatalf("remediations %v, want %s; warnings %q", got, victim, p.Warnings)
		}
		if !hasWarning(p, "remediation: "+victim+" has been NotReady for 2m") || !hasWarning(p, "it is replaced (1 of at most 1 in pool worker)") {
			t.Errorf("the plan does not show the remediation: %q", p.Warnings)
		}
		var created bool
		for _, ch := range p.Changes {
			if ch.Phase == plan.PhaseCompute && ch.Action == plan.ActionCreate && ch.Resource.Kind == plan.KindMachine && ch.Resource.Name == victim {
				created = strings.HasPrefix(ch.Reason, "remediation")
			}
			if ch.Resource.Name == victim && ch.Op != nil && ch.Action == plan.ActionUpdate && ch.Phase == plan.PhaseCompute {
				t.Errorf("the old VM is still planned for: %s %s", ch.Action, ch.Reason)
			}
		}
		if !created {
			t.Errorf("no new VM %s marked remediation in the compute phase", victim)
		}

		e := w.remediating(t)
		var mu sync.Mutex
		var told []string
		e.Remediated = func(cluster, pool, hostname string) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, cluster+"/"+pool+"/"+hostname)
		}
		mark := time.Now()
		if err := e.Converge(ctx); err != nil {
			t.Fatalf("converge: %v", err)
		}
		log := since(w.lab, mark)
		inOrder(t, log,
			[3]string{"kubernetes", "patch nodes", victim},
			[3]string{"kubernetes", "delete nodes", victim},
			w.deletion(old),
			w.creation(),
		)
		if find(log, 0, "talos", "Reset", "") >= 0 {
			t.Error("a powered-off machine was reset")
		}
		// (The lab's Proxmox gives the new VM the lowest free id: the old
		// one's.)
		if !w.exists(t, victim) || !w.running(t, victim) {
			t.Fatalf("no new running VM %s", victim)
		}
		for _, s := range c.then {
			if find(log, 0, s[0], s[1], s[2]) >= 0 {
				t.Errorf("the replacement removed what the new machine needs: %s %s", s[0], s[1])
			}
		}
		if !nodeReady(ctx, cs, victim) {
			t.Error("the replaced node is not Ready")
		}
		if n := len(w.lab.Talos.EtcdMembers(w.name)); n != 3 {
			t.Errorf("%d etcd members, want 3", n)
		}
		for _, op := range []string{"EtcdRemoveMemberByID", "EtcdLeaveCluster"} {
			if find(log, 0, "talos", op, "") >= 0 {
				t.Errorf("etcd was touched: %s", op)
			}
		}
		if want := []string{w.name + "/worker/" + victim}; !slices.Equal(told, want) {
			t.Errorf("remediations reported %v, want %v", told, want)
		}
		// Idempotent: nothing is left to do.
		if p, err := w.remediating(t).Plan(ctx); err != nil || !p.Empty() {
			t.Fatalf("plan after the remediation: %v %s %q", err, p.Summary(), p.Warnings)
		}
	})
}

func TestScenarioRemediationStaysWithinMaxUnhealthy(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "remedy3", 3)
		_, cs := w.kube(t)
		w.set(t, "remediation", "{after: 1m, max_unhealthy: 40%}")
		a, b := w.name+"-worker-02", w.name+"-worker-03"
		w.crash(ctx, t, cs, a)
		w.crash(ctx, t, cs, b)
		p, err := w.remediating(t).Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The one NotReady the longest goes (the lab's times have whole
		// seconds: a tie goes by name); the other is named in a warning.
		got := remediations(p)
		if len(got) != 1 || (got[0] != a && got[0] != b) {
			t.Fatalf("remediations %v, want one of %s and %s; warnings %q", got, a, b, p.Warnings)
		}
		other := a
		if got[0] == a {
			other = b
		}
		// How long it has been NotReady depends on the machine's load: a
		// second more is fine.
		if !hasWarning(p, "remediation: "+other+" has been NotReady for 2m") || !hasWarning(p, "(after: 1m), but it is not replaced now") || !hasWarning(p, "max_unhealthy 40% of 3 allows 1 at once") {
			t.Errorf("no warning names %s: %q", other, p.Warnings)
		}
	})
}

func TestScenarioRemediationNeverReplacesAControlPlane(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "remedycp", 1)
		_, cs := w.kube(t)
		w.set(t, "remediation", "{after: 1m, max_unhealthy: 1}")
		w.crash(ctx, t, cs, w.name+"-controlplane-03")
		p, err := w.remediating(t).Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range p.Changes {
			if strings.Contains(ch.Reason, "remediation") || (ch.Action == plan.ActionDelete && ch.Resource.Kind == plan.KindMachine) {
				t.Errorf("a control plane is remediated: %s %s: %s", ch.Action, ch.Resource, ch.Reason)
			}
		}
	})
}

func TestScenarioRemediationWaitsForAHealthyCluster(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "remedysick", 2)
		_, cs := w.kube(t)
		w.set(t, "remediation", "{after: 1m, max_unhealthy: 1}")
		victim, cp := w.name+"-worker-02", w.name+"-controlplane-03"
		w.crash(ctx, t, cs, victim)
		w.crash(ctx, t, cs, cp)
		p, err := w.remediating(t).Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := remediations(p); len(got) > 0 {
			t.Fatalf("remediations %v while a control plane is down", got)
		}
		if !hasWarning(p, "remediation: "+victim) || !hasWarning(p, "nothing is replaced while the cluster itself is unhealthy") || !hasWarning(p, cp) {
			t.Errorf("no warning says why %s is not replaced: %q", victim, p.Warnings)
		}
	})
}

func TestScenarioRemediationIsOffByDefault(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "remedyoff", 2)
		_, cs := w.kube(t)
		victim := w.name + "-worker-02"
		old, _ := w.machine(t, victim)
		w.crash(ctx, t, cs, victim)
		mark := time.Now()
		p, err := w.remediating(t).Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := remediations(p); len(got) > 0 || hasWarning(p, "remediation") {
			t.Fatalf("remediation without a remediation section: %v %q", got, p.Warnings)
		}
		if err := w.remediating(t).Converge(ctx); err != nil {
			t.Fatalf("converge: %v", err)
		}
		if w.deletes(since(w.lab, mark), "") {
			t.Error("a VM was deleted")
		}
		if now, _ := w.machine(t, victim); now != old {
			t.Errorf("the VM of %s was replaced (%s -> %s)", victim, old, now)
		}
	})
}

func TestScenarioRemediationSparesANodeThatRecovered(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, c *cloud) {
		w, ctx := built(t, c, "remedyback", 2)
		k, cs := w.kube(t)
		w.set(t, "remediation", "{after: 1m, max_unhealthy: 1}")
		victim := w.name + "-worker-02"
		old, _ := w.machine(t, victim)
		w.crash(ctx, t, cs, victim)
		e := w.remediating(t)
		e.Remediated = func(_, _, h string) { t.Errorf("remediation of %s reported", h) }
		e.Approve = func(p *plan.Plan) error {
			if got := remediations(p); !slices.Equal(got, []string{victim}) {
				t.Errorf("remediations %v, want %s", got, victim)
			}
			// It comes back between the plan and its first step.
			return k.SetNodeReady(victim, true)
		}
		mark := time.Now()
		err := e.Converge(ctx)
		if !errors.Is(err, reconcile.ErrPrecondition) {
			t.Fatalf("converge: %v, want the precondition error", err)
		}
		log := since(w.lab, mark)
		if w.deletes(log, "") || find(log, 0, "kubernetes", "patch nodes", victim) >= 0 {
			t.Error("a node that recovered was touched")
		}
		if now, _ := w.machine(t, victim); now != old {
			t.Errorf("the VM of %s was replaced", victim)
		}
	})
}
