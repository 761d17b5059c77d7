package agent_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/agent/httpapi"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	gh "github.com/taloscluster/taloscluster/report/github"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// waitUntil polls cond until it holds, failing the test after a while.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// requeued reports whether the converge of the cluster ran n times and
// waits in the queue to run again.
func (w *world) requeued(n int) bool {
	w.runner.mu.Lock()
	converges := w.runner.converges
	w.runner.mu.Unlock()
	return converges == n && len(w.agent.Status().Queue) == 1
}

// section returns the status page's section of the cluster.
func (w *world) section() httpapi.ClusterStatus {
	w.t.Helper()
	st := w.agent.Status()
	if len(st.Clusters) != 1 {
		w.t.Fatalf("status page clusters %+v", st.Clusters)
	}
	return st.Clusters[0]
}

// pdbBlocks is what the engine returns when a PodDisruptionBudget blocks
// the drain of a node: the run waits.
func pdbBlocks(after time.Duration) error {
	return retry.Waiting("a PodDisruptionBudget blocks draining w1 (token "+secret+")", after,
		errors.New("evicting pod web-1: 429 Too Many Requests"))
}

// A converge that stops on something that will change on its own ends as
// waiting: a pending status with the reason, the status page and the
// metrics say so, and it runs again after the wait the engine names as
// often as it takes, none of its runs counting an attempt. Its comment
// comes with the run that ends it.
func TestWaitingConvergeRunsAgainWithoutCountingAnAttempt(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *agent.Config) { c.RequireReviewedPlan = true })
	clock := newFakeClock()
	w.agent.SetClock(clock.now)
	w.openPR(1, "h1", "w1 w2")
	// The first run creates w1, then waits; more runs wait than a
	// transient failure has attempts; the last one creates w2.
	w.runner.set(func(r *fakeRunner) {
		r.failures = []failure{{1, pdbBlocks(10 * time.Minute)}}
		for range agent.RetryAttempts {
			r.failures = append(r.failures, failure{0, pdbBlocks(10 * time.Minute)})
		}
	})
	w.land(1, "m1", "w1 w2")
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the converge waits", func() bool { return w.requeued(1) })
	w.agent.FlushReports()

	const waiting = "waiting: a PodDisruptionBudget blocks draining w1 (token [redacted]), retrying in 10m"
	if s := w.last("m1", convergeContext); s.state != gh.StatePending || s.description != waiting {
		t.Fatalf("converge status %+v; want pending %q", s, waiting)
	}
	q := w.agent.Status().Queue
	if q[0].Attempt > 1 || q[0].Waiting != "a PodDisruptionBudget blocks draining w1 (token [redacted])" ||
		time.Until(q[0].NotBefore) < 9*time.Minute {
		t.Fatalf("queued %+v; want the first attempt, waiting, in 10 minutes", q)
	}
	sec := w.section()
	if sec.Waiting == nil || sec.Waiting.Reason != "a PodDisruptionBudget blocks draining w1 (token [redacted])" ||
		!sec.Waiting.Since.Equal(clock.now()) || sec.Waiting.Commit != "m1" || time.Until(sec.Waiting.Next) < 9*time.Minute ||
		sec.LastConverge == nil || sec.LastConverge.Result != "waiting" {
		t.Fatalf("status page section %+v, waiting %+v", sec, sec.Waiting)
	}
	page := w.get("/")
	for _, want := range []string{
		`<code>clusters/a</code></a> (waiting)</li>`,
		"<p>Waiting. Last plan:",
		`converge of <code>m1</code> <span class="retried">waiting: a PodDisruptionBudget blocks draining w1 (token [redacted])</span> (since <time datetime="2025-06-01T12:00:00Z">`,
		"it runs again <time",
		"converge (waiting: a PodDisruptionBudget blocks draining w1 (token [redacted]), not before",
		`<span class="retried">waiting</span>: a PodDisruptionBudget blocks draining w1 (token [redacted]), retrying in 10m</td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %q:\n%s", want, page)
		}
	}
	for _, want := range []string{
		`taloscluster_runs_total{kind="converge",result="waiting"} 1`,
		`taloscluster_runs_total{kind="converge",result="retried"} 0`,
		`taloscluster_cluster_converge_waiting{cluster="clusters/a"} 1`,
		`taloscluster_cluster_converge_failing{cluster="clusters/a"} 0`,
	} {
		if !w.metric(want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if c := w.forge.commentsOn(1); len(c) != 0 {
		t.Fatalf("a waiting run commented: %q", c)
	}

	for n := 2; n <= agent.RetryAttempts+1; n++ {
		if !w.agent.RunRequeuedNow(cluster) {
			t.Fatalf("run %d: nothing requeued", n)
		}
		waitUntil(t, fmt.Sprintf("run %d waits", n), func() bool { return w.requeued(n) })
		w.agent.FlushReports()
		if q := w.agent.Status().Queue; q[0].Attempt > 1 || q[0].Waiting == "" {
			t.Fatalf("run %d: queued %+v; a wait counts no attempt", n, q)
		}
	}
	if !w.metric(fmt.Sprintf(`taloscluster_runs_total{kind="converge",result="waiting"} %d`, agent.RetryAttempts+1)) {
		t.Errorf("metrics:\n%s", w.get("/metrics"))
	}
	// The wait is over: the last run converges what is left of the
	// reviewed plan.
	if !w.agent.RunRequeuedNow(cluster) {
		t.Fatal("nothing requeued")
	}
	w.agent.Wait()

	for _, s := range w.forge.statusesOf("m1", convergeContext) {
		if s.state == gh.StateFailure || strings.HasPrefix(s.description, "attempt") || strings.Contains(s.description, ", attempt") {
			t.Errorf("a wait was reported as a failure or an attempt: %+v", s)
		}
	}
	if s := w.last("m1", convergeContext); s.state != gh.StateSuccess || s.description != "converged" {
		t.Fatalf("final status %+v; want success, converged", s)
	}
	if got := w.runner.mutations; !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("mutations %v; want each machine once", got)
	}
	if len(w.runner.refusedBy) != 0 {
		t.Fatalf("a run after a wait was refused: %v", w.runner.refusedBy)
	}
	if c := w.forge.commentsOn(1); len(c) != 1 || !strings.Contains(c[0], "**converged**") {
		t.Fatalf("comments %q; want one, after the last run", c)
	}
	if sec := w.section(); sec.Waiting != nil || sec.LastConverge.Result != "success" || len(w.agent.Status().Queue) != 0 {
		t.Fatalf("status page section %+v after the wait; queue %+v", sec, w.agent.Status().Queue)
	}
	if page := w.get("/"); strings.Contains(page, "(waiting)") || strings.Contains(page, "it runs again") {
		t.Errorf("the status page still shows the wait:\n%s", page)
	}
	for _, want := range []string{
		`taloscluster_cluster_converge_waiting{cluster="clusters/a"} 0`,
		`taloscluster_runs_total{kind="converge",result="success"} 1`,
	} {
		if !w.metric(want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	w.checkReported()
}

// A converge that still waits once it has waited the limit fails, saying
// it waited too long, and is not run again; the wait before the last run
// is cut to end at the limit.
func TestWaitingConvergeFailsAfterTheLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	clock := newFakeClock()
	w.agent.SetClock(clock.now)
	w.agent.SetWaitPolicy(retry.Policy{Initial: 20 * time.Minute, Max: 20 * time.Minute}, time.Hour)
	w.runner.set(func(r *fakeRunner) {
		for range 3 {
			r.failures = append(r.failures, failure{0, pdbBlocks(0)})
		}
	})
	w.land(1, "m1", "w1")
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the converge waits", func() bool { return w.requeued(1) })
	w.agent.FlushReports()
	// No wait named: the agent's backoff, 20 minutes give or take a fifth.
	s := w.last("m1", convergeContext)
	if s.state != gh.StatePending || !strings.HasPrefix(s.description, "waiting: a PodDisruptionBudget blocks draining w1 (token [redacted]), retrying in ") {
		t.Fatalf("converge status %+v", s)
	}

	clock.advance(59 * time.Minute)
	if !w.agent.RunRequeuedNow(cluster) {
		t.Fatal("nothing requeued")
	}
	waitUntil(t, "the second run waits", func() bool { return w.requeued(2) })
	w.agent.FlushReports()
	if s := w.last("m1", convergeContext); s.description != "waiting: a PodDisruptionBudget blocks draining w1 (token [redacted]), retrying in 1m" {
		t.Fatalf("converge status %+v; want the wait cut to the minute left", s)
	}
	if sec := w.section(); sec.Waiting == nil || !sec.Waiting.Since.Equal(clock.now().Add(-59*time.Minute)) {
		t.Fatalf("waiting %+v; want it to have begun with the first run", sec.Waiting)
	}

	clock.advance(time.Minute)
	if !w.agent.RunRequeuedNow(cluster) {
		t.Fatal("nothing requeued")
	}
	w.agent.Wait()
	const tooLong = "waited too long (over 1h): a PodDisruptionBudget blocks draining w1 (token [redacted])"
	if s := w.last("m1", convergeContext); s.state != gh.StateFailure || s.description != tooLong {
		t.Fatalf("final status %+v; want failure %q", s, tooLong)
	}
	if w.runner.converges != 3 || len(w.agent.Status().Queue) != 0 {
		t.Fatalf("%d converges, queue %+v; a run that waited too long is not run again", w.runner.converges, w.agent.Status().Queue)
	}
	if c := w.forge.commentsOn(1); len(c) != 1 || !strings.Contains(c[0], tooLong) {
		t.Fatalf("comments %q; want one saying it waited too long", c)
	}
	if sec := w.section(); sec.Waiting != nil || sec.LastConverge.Result != "failure" {
		t.Fatalf("status page section %+v", sec)
	}
	for _, want := range []string{
		`taloscluster_runs_total{kind="converge",result="waiting"} 2`,
		`taloscluster_runs_total{kind="converge",result="failure"} 1`,
		`taloscluster_cluster_converge_waiting{cluster="clusters/a"} 0`,
		`taloscluster_cluster_converge_failing{cluster="clusters/a"} 1`,
	} {
		if !w.metric(want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	w.checkReported()
}

// A terminal error is a failure at once, never a wait nor a retry, even
// after the converge waited.
func TestTerminalErrorAfterAWaitIsAFailure(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.agent.SetWaitPolicy(retry.Policy{Initial: time.Millisecond, Max: time.Millisecond}, time.Hour)
	w.runner.set(func(r *fakeRunner) {
		r.failures = []failure{{0, pdbBlocks(0)}, {0, retry.Terminal(errors.New("resetting control plane cp-1: the node did not leave etcd"))}}
	})
	w.merge(1, "m1", "w1")
	if w.runner.converges != 2 {
		t.Fatalf("%d converges, want 2: a wait, then a terminal failure not retried", w.runner.converges)
	}
	if s := w.last("m1", convergeContext); s.state != gh.StateFailure || s.description != "resetting control plane cp-1: the node did not leave etcd" {
		t.Fatalf("final status %+v", s)
	}
	if !w.metric(`taloscluster_cluster_converge_waiting{cluster="clusters/a"} 0`) || !w.metric(`taloscluster_runs_total{kind="converge",result="failure"} 1`) {
		t.Errorf("metrics:\n%s", w.get("/metrics"))
	}
}
