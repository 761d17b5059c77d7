package agent_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/agent"
)

// recorder is a job runner that blocks each job until released.
type recorder struct {
	mu      sync.Mutex
	started []agent.Job
	release map[string]chan struct{}
	active  map[string]int
	maxPer  int
	total   int
	maxAll  int
}

func newRecorder() *recorder {
	return &recorder{release: map[string]chan struct{}{}, active: map[string]int{}}
}

func (r *recorder) gate(commit string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.release[commit] == nil {
		r.release[commit] = make(chan struct{})
	}
	return r.release[commit]
}

func (r *recorder) run(ctx context.Context, j agent.Job) {
	r.mu.Lock()
	r.started = append(r.started, j)
	r.active[j.Cluster]++
	r.total++
	r.maxPer = max(r.maxPer, r.active[j.Cluster])
	r.maxAll = max(r.maxAll, r.total)
	r.mu.Unlock()
	select {
	case <-r.gate(j.Commit):
	case <-ctx.Done():
	}
	r.mu.Lock()
	r.active[j.Cluster]--
	r.total--
	r.mu.Unlock()
}

func (r *recorder) waitStarted(t *testing.T, n int) []agent.Job {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		got := slices.Clone(r.started)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs started, want %d", len(got), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMergesWhileBusyConvergeOnceToTheNewest(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	s := agent.NewScheduler(t.Context(), 4, r.run)
	defer s.Close()
	s.Mutate(agent.Job{Kind: agent.KindConverge, Cluster: "c/a", Commit: "m1"})
	r.waitStarted(t, 1)
	s.Mutate(agent.Job{Kind: agent.KindConverge, Cluster: "c/a", Commit: "m2"})
	s.Mutate(agent.Job{Kind: agent.KindConverge, Cluster: "c/a", Commit: "m3"})
	close(r.gate("m1"))
	jobs := r.waitStarted(t, 2)
	close(r.gate("m3"))
	s.Close()
	if len(jobs) != 2 || jobs[1].Commit != "m3" || !slices.Equal(jobs[1].Covers, []string{"m3", "m2"}) {
		t.Fatalf("jobs %+v; want m1, then one run of m3 covering m3 and m2", jobs)
	}
	if r.maxPer != 1 {
		t.Fatalf("%d jobs ran at once on one cluster", r.maxPer)
	}
}

func TestIndependentClustersRunConcurrentlyWithinTheBound(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	s := agent.NewScheduler(t.Context(), 2, r.run)
	for _, c := range []string{"a", "b", "c"} {
		s.Mutate(agent.Job{Kind: agent.KindConverge, Cluster: c, Commit: "x"})
	}
	r.waitStarted(t, 2)
	time.Sleep(20 * time.Millisecond) // a third would have started by now if the bound leaked
	r.mu.Lock()
	started := len(r.started)
	r.mu.Unlock()
	if started != 2 {
		t.Fatalf("%d jobs started with a bound of 2", started)
	}
	close(r.gate("x"))
	s.Close()
	if r.maxAll != 2 {
		t.Fatalf("max concurrency %d, want 2", r.maxAll)
	}
}

func TestNewPushCancelsTheOlderPlan(t *testing.T) {
	t.Parallel()
	s := agent.NewScheduler(t.Context(), 4, func(context.Context, agent.Job) {})
	cancelled := make(chan struct{})
	started := make(chan struct{})
	s.Plan(7, "head1", []string{"c/a"}, func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		close(cancelled)
	})
	<-started
	done := make(chan struct{})
	s.Plan(7, "head2", []string{"c/a"}, func(ctx context.Context) { close(done) })
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the older plan was not cancelled")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the newer plan did not run")
	}
	s.Close()
}
