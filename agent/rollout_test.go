package agent_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// rolloutStep is one step of a fake rollout.
type rolloutStep struct {
	action plan.Action
	res    plan.Resource
	reason string
	attrs  []plan.Attribute
	// during runs while the step runs; its error fails the step.
	during func() error
}

// nodeSteps are the steps of a node's Talos upgrade, as the engine plans
// them.
func nodeSteps(host string) []rolloutStep {
	node, machine := plan.Resource{Kind: plan.KindNode, Name: host}, plan.Resource{Kind: plan.KindMachine, Name: host}
	return []rolloutStep{
		{action: plan.ActionUpdate, res: node, reason: "cordon before the node restarts", attrs: []plan.Attribute{{Key: "unschedulable", Value: "false -> true"}}},
		{action: plan.ActionDrain, res: node, reason: "evict its pods, honouring PodDisruptionBudgets, before it restarts"},
		{action: plan.ActionUpgradeTalos, res: machine, reason: "install Talos v1.13.9 for the next boot"},
		{action: plan.ActionRestart, res: machine, reason: "reboot into Talos v1.13.9"},
		{action: plan.ActionWait, res: machine, reason: "wait until it went down and came back"},
		{action: plan.ActionUpdate, res: node, reason: "uncordon: it is back and healthy", attrs: []plan.Attribute{{Key: "unschedulable", Value: "true -> false"}}},
	}
}

// rollout runs steps as the engine does: the sequence one step after the
// other, then each batch's nodes at the same time, telling h of each
// step's start and end. It stops at the first failure.
type rollout struct {
	sequence []rolloutStep
	batch    [][]rolloutStep // one list per node of batch 1
}

func (ro rollout) run(h agent.ConvergeHooks) error {
	total := len(ro.sequence)
	for _, b := range ro.batch {
		total += len(b)
	}
	one := func(i, batch int, st rolloutStep) error {
		ev := reconcile.StepEvent{Index: i, Total: total, Phase: plan.PhaseUpgrade, Action: st.action, Resource: st.res,
			Reason: st.reason, Attributes: st.attrs, Batch: batch, Started: time.Now()}
		h.Step(ev)
		var err error
		if st.during != nil {
			err = st.during()
		}
		ev.Ended, ev.Err = time.Now(), err
		h.Step(ev)
		return err
	}
	for i, st := range ro.sequence {
		if err := one(i+1, 0, st); err != nil {
			return err
		}
	}
	next := len(ro.sequence) + 1
	errs := make([]error, len(ro.batch))
	var wg sync.WaitGroup
	for k, steps := range ro.batch {
		first := next
		next += len(steps)
		wg.Go(func() {
			for j, st := range steps {
				if err := one(first+j, 1, st); err != nil {
					errs[k] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestRolloutPerNodeOnTheStatusPageAndInTheComment: while a converge
// rolls out, the status page shows the step each node is in, since when,
// and that the nodes of a batch run in parallel; once it ended, the live
// view is gone and the comment on the merged pull request, like the run's
// page, lists what each node went through, in order, secrets removed.
func TestRolloutPerNodeOnTheStatusPageAndInTheComment(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.openPR(1, "h1", "w1")
	release := make(chan struct{})
	var restarting sync.WaitGroup
	restarting.Add(3)
	hold := func() error { restarting.Done(); <-release; return nil }
	cp := nodeSteps("a-controlplane-01")
	cp = append(cp, rolloutStep{action: plan.ActionUpgradeKubernetes, res: plan.Resource{Kind: plan.KindMachine, Name: "a-controlplane-01"},
		reason: "Kubernetes hop 1 of 2 (v1.34.2 -> v1.35.0): the kubelet of a-controlplane-01, token " + secret,
		attrs:  []plan.Attribute{{Key: "component", Value: "kubelet"}, {Key: "kubernetes", Value: "v1.34.2 -> v1.35.0"}}})
	w1, w2, w3 := nodeSteps("a-worker-01"), nodeSteps("a-worker-02"), nodeSteps("a-worker-03")
	w1[3].during, w2[3].during = hold, hold
	w3[1].during = func() error {
		restarting.Done()
		<-release
		return fmt.Errorf("draining a-worker-03: the API answered 401 for token %s", secret)
	}
	w.runner.steps = rollout{sequence: cp, batch: [][]rolloutStep{w1, w2, w3}}.run // the runner is idle: no lock needed
	w.land(1, "m1", "w1")
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	restarting.Wait()

	page := w.get("/")
	for _, want := range []string{
		`<table class="rollout"><caption>Nodes in this run</caption>`,
		`<tr data-rollout-node="a-controlplane-01"><th scope="row"><code>a-controlplane-01</code></th><td>7</td><td>upgrade</td><td>upgrade-kubernetes (kubelet → v1.35.0)</td><td>Kubernetes hop 1 of 2 (v1.34.2 -&gt; v1.35.0): the kubelet of a-controlplane-01, token [redacted]</td><td class="nowrap">ended `,
		` ago, 7 steps done</td></tr>`,
		`<tr data-rollout-node="a-worker-01"><th scope="row"><code>a-worker-01</code></th><td>11</td><td>upgrade</td><td>restart <span class="note">(batch 1, in parallel)</span></td><td>reboot into Talos v1.13.9</td><td class="nowrap">running for `,
		`<tr data-rollout-node="a-worker-02"><th scope="row"><code>a-worker-02</code></th><td>17</td><td>upgrade</td><td>restart <span class="note">(batch 1, in parallel)</span></td>`,
		`<tr data-rollout-node="a-worker-03"><th scope="row"><code>a-worker-03</code></th><td>21</td><td>upgrade</td><td>drain <span class="note">(batch 1, in parallel)</span></td><td>evict its pods, honouring PodDisruptionBudgets, before it restarts</td><td class="nowrap">running for `,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page during the rollout lacks %q", want)
		}
	}
	if strings.Contains(page, secret) {
		t.Error("the secret reached the status page")
	}
	if t.Failed() {
		t.Logf("status page:\n%s", page)
	}
	nodes := w.agent.Status().Clusters[0].Progress.Nodes
	done := map[string]int{}
	for _, n := range nodes {
		done[n.Node] = n.Done
	}
	if len(nodes) != 4 || nodes[0].Node != "a-controlplane-01" || nodes[0].Ended.IsZero() || nodes[0].Done != 7 ||
		done["a-worker-01"] != 3 || done["a-worker-02"] != 3 || done["a-worker-03"] != 1 {
		t.Errorf("nodes in progress: %+v", nodes)
	}

	close(release)
	w.agent.Wait()
	page = w.get("/")
	if strings.Contains(page, "data-rollout-node") {
		t.Errorf("the status page still shows the rollout after the run:\n%s", page)
	}
	comments := w.forge.commentsOn(1)
	if len(comments) != 1 {
		t.Fatalf("comments on the pull request: %q", comments)
	}
	comment := comments[0]
	for _, want := range []string{
		"**Steps per node** (4 nodes, 21 steps, 1 failed), each in the order it ran:\n\n- `a-controlplane-01`: cordon ",
		", upgrade-kubernetes (kubelet → v1.35.0) ",
		"- `a-worker-01` (batch 1, in parallel): cordon ",
		", uncordon ",
		"- `a-worker-03` (batch 1, in parallel): cordon <0.1s, drain **failed** after ",
		": draining a-worker-03: the API answered 401 for token \\[redacted\\]",
	} {
		if !strings.Contains(comment, want) {
			t.Errorf("the converge comment lacks %q:\n%s", want, comment)
		}
	}
	if i, j := strings.Index(comment, "Steps per node"), strings.Index(comment, "taloscluster converge"); i < j {
		t.Errorf("the steps come before the comment's head:\n%s", comment)
	}
	if run := w.get("/plans/converge-m1-clusters_a?format=text"); !strings.Contains(run, "- `a-worker-02` (batch 1, in parallel): cordon ") {
		t.Errorf("the run's page lacks the steps per node:\n%s", run)
	}
	w.checkReported()
}

// TestRolloutBoardTakesParallelSteps: the steps of many nodes of a batch,
// told at the same time while the status page is read, all land on it
// (run with -race).
func TestRolloutBoardTakesParallelSteps(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.openPR(1, "h1", "w1")
	const nodes, steps = 40, 25
	var batch [][]rolloutStep
	for i := range nodes {
		var list []rolloutStep
		for range steps {
			list = append(list, rolloutStep{action: plan.ActionWait, res: plan.Resource{Kind: plan.KindMachine, Name: fmt.Sprintf("a-worker-%02d", i)}, reason: "wait"})
		}
		batch = append(batch, list)
	}
	release, ended := make(chan struct{}), make(chan struct{})
	ro := rollout{batch: batch}
	w.runner.steps = func(h agent.ConvergeHooks) error {
		err := ro.run(h)
		close(ended)
		<-release
		return err
	}
	w.land(1, "m1", "w1")
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int64
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = w.get("/")
				_ = w.agent.Status()
				reads.Add(1)
			}
		})
	}
	<-ended
	close(stop)
	readers.Wait()
	got := w.agent.Status().Clusters[0].Progress.Nodes
	if len(got) != nodes {
		t.Fatalf("%d nodes on the board, want %d", len(got), nodes)
	}
	for _, n := range got {
		if n.Done != steps || n.Ended.IsZero() || n.Batch != 1 {
			t.Errorf("node %s: %d steps done, ended %v, batch %d; want %d, ended, batch 1", n.Node, n.Done, n.Ended, n.Batch, steps)
		}
	}
	close(release)
	w.agent.Wait()
	if reads.Load() == 0 {
		t.Error("the page was never read during the rollout")
	}
	comments := w.forge.commentsOn(1)
	if len(comments) != 1 || !strings.Contains(comments[0], fmt.Sprintf("<details><summary>Steps per node: %d nodes, %d steps</summary>", nodes, nodes*steps)) {
		t.Errorf("the converge comment does not fold the steps of %d nodes: %q", nodes, comments)
	}
}

// TestRemediationsAreReported: a remediation the converge begins is
// counted in taloscluster_remediations_total{cluster,pool} and shown on
// the status page, with the cluster's remediation settings.
func TestRemediationsAreReported(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.openPR(1, "h1", "w1")
	w.runner.steps = func(h agent.ConvergeHooks) error {
		h.Loaded(&spec.Cluster{Remediation: &spec.Remediation{After: 90 * time.Minute, MaxUnhealthy: spec.MaxUnhealthy{Percent: 40}, Pools: []string{"worker"}}})
		h.Remediated("worker", "a-worker-02")
		return nil
	}
	w.land(1, "m1", "w1")
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.agent.Wait()
	cl := w.agent.Status().Clusters[0]
	want := fmt.Sprintf(`taloscluster_remediations_total{cluster=%q,pool="worker"} 1`, cl.Path)
	if !w.metric(want) {
		t.Errorf("metrics lack %s:\n%s", want, w.get("/metrics"))
	}
	rs := cl.Remediation
	if rs == nil || !rs.On || rs.After != "1h30m" || rs.MaxUnhealthy != "40%" || !slices.Equal(rs.Pools, []string{"worker"}) {
		t.Fatalf("remediation on the board: %+v", rs)
	}
	if len(rs.Events) != 1 || rs.Events[0].Node != "a-worker-02" || rs.Events[0].Pool != "worker" || rs.Events[0].Commit != "m1" {
		t.Errorf("remediation events %+v", rs.Events)
	}
	if page := w.get("/"); !strings.Contains(page, "<code>a-worker-02</code> of pool <code>worker</code> replaced") {
		t.Errorf("the status page does not show the remediation:\n%s", page)
	}
}
