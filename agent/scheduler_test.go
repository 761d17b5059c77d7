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

func (r *recorder) run(ctx context.Context, j agent.Job) time.Duration {
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
	return 0
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
	s := agent.NewScheduler(t.Context(), 4, func(context.Context, agent.Job) time.Duration { return 0 })
	cancelled := make(chan struct{})
	started := make(chan struct{})
	s.Plan(7, "head1", []string{"c/a"}, func(ctx context.Context, _ int) time.Duration {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return 0
	})
	<-started
	done := make(chan struct{})
	s.Plan(7, "head2", []string{"c/a"}, func(ctx context.Context, _ int) time.Duration { close(done); return 0 })
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

// flaky is a job runner that asks for a retry until a job's attempt
// reaches pass, and records every run.
type flaky struct {
	mu   sync.Mutex
	runs []agent.Job
	pass int
	wait time.Duration
	ran  chan agent.Job
}

func (f *flaky) run(_ context.Context, j agent.Job) time.Duration {
	f.mu.Lock()
	f.runs = append(f.runs, j)
	f.mu.Unlock()
	f.ran <- j
	if max(j.Attempt, 1) < f.pass {
		return f.wait
	}
	return 0
}

func next(t *testing.T, ch <-chan agent.Job) agent.Job {
	t.Helper()
	select {
	case j := <-ch:
		return j
	case <-time.After(5 * time.Second):
		t.Fatal("no job ran")
		return agent.Job{}
	}
}

func TestAJobAskingForARetryRunsAgainWithTheNextAttempt(t *testing.T) {
	t.Parallel()
	f := &flaky{pass: 3, wait: time.Millisecond, ran: make(chan agent.Job, 8)}
	s := agent.NewScheduler(t.Context(), 4, f.run)
	s.Mutate(agent.Job{Kind: agent.KindConverge, Cluster: "c/a", Commit: "m1"})
	for want := 1; want <= 3; want++ {
		if j := next(t, f.ran); max(j.Attempt, 1) != want || j.Commit != "m1" {
			t.Fatalf("run %d: %+v", want, j)
		}
	}
	s.Wait()
	if n := len(f.runs); n != 3 {
		t.Fatalf("%d runs, want 3", n)
	}
	if s.Requeued("c/a") || s.Busy("c/a") {
		t.Fatal("the cluster is still requeued or busy after the last try")
	}
	s.Close()
}

// A job whose run waited on something that will change on its own runs
// again as the same attempt, one wait more, keeping when it began
// waiting; a transient failure after that counts an attempt. A newer
// merge supersedes it and starts afresh.
func TestAWaitingJobRunsAgainWithoutCountingAnAttempt(t *testing.T) {
	t.Parallel()
	since := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	answers := []agent.Requeue{
		{After: time.Millisecond, WaitingSince: since},
		{After: time.Millisecond, WaitingSince: since},
		{After: time.Millisecond}, // transient
		{After: time.Hour, WaitingSince: since},
	}
	ran := make(chan agent.Job, 8)
	var mu sync.Mutex
	s := agent.NewSchedulerRequeue(t.Context(), 4, func(_ context.Context, j agent.Job) agent.Requeue {
		ran <- j
		mu.Lock()
		defer mu.Unlock()
		a := answers[0]
		answers = answers[1:]
		return a
	})
	defer s.Close()
	s.Mutate(agent.Job{Kind: agent.KindConverge, Cluster: "c/a", Commit: "m1"})
	for i, want := range []struct {
		attempt, waits int
		since          time.Time
	}{{1, 0, time.Time{}}, {1, 1, since}, {1, 2, since}, {2, 2, since}} {
		j := next(t, ran)
		if max(j.Attempt, 1) != want.attempt || j.Waits != want.waits || !j.WaitingSince.Equal(want.since) {
			t.Fatalf("run %d: attempt %d, waits %d since %v; want %d, %d since %v", i+1, j.Attempt, j.Waits, j.WaitingSince, want.attempt, want.waits, want.since)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !s.Requeued("c/a") {
		if time.Now().After(deadline) {
			t.Fatal("the waiting job was not requeued")
		}
		time.Sleep(time.Millisecond)
	}
	if _, waiting := s.Queue(); len(waiting) != 1 || waiting[0].Attempt != 2 || waiting[0].Waits != 3 || waiting[0].NotBefore.IsZero() {
		t.Fatalf("queue %+v; want the job waiting as attempt 2, wait 3, with its time", waiting)
	}
	mu.Lock()
	answers = append(answers, agent.Requeue{})
	mu.Unlock()
	s.Mutate(agent.Job{Kind: agent.KindConverge, Cluster: "c/a", Commit: "m2"})
	if j := next(t, ran); j.Commit != "m2" || max(j.Attempt, 1) != 1 || j.Waits != 0 || !j.WaitingSince.IsZero() || !slices.Equal(j.Covers, []string{"m2", "m1"}) {
		t.Fatalf("superseding job %+v; want m2 afresh, covering m1", j)
	}
}

func TestANewerMergeSupersedesARequeuedJob(t *testing.T) {
	t.Parallel()
	f := &flaky{pass: 99, wait: time.Hour, ran: make(chan agent.Job, 8)}
	s := agent.NewScheduler(t.Context(), 4, f.run)
	s.Mutate(agent.Job{Kind: agent.KindConverge, Cluster: "c/a", Commit: "m1"})
	next(t, f.ran)
	deadline := time.Now().Add(5 * time.Second)
	for !s.Requeued("c/a") {
		if time.Now().After(deadline) {
			t.Fatal("the failed job was not requeued")
		}
		time.Sleep(time.Millisecond)
	}
	_, waiting := s.Queue()
	if len(waiting) != 1 || waiting[0].Attempt != 2 || waiting[0].NotBefore.IsZero() {
		t.Fatalf("queue %+v; want the requeued job as attempt 2 with its time", waiting)
	}
	f.pass = 0 // the newer run succeeds
	s.Mutate(agent.Job{Kind: agent.KindConverge, Cluster: "c/a", Commit: "m2"})
	j := next(t, f.ran)
	if j.Commit != "m2" || max(j.Attempt, 1) != 1 || !slices.Equal(j.Covers, []string{"m2", "m1"}) {
		t.Fatalf("superseding job %+v; want m2 at attempt 1 covering m2 and m1", j)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a superseded retry")
	}
	if len(f.runs) != 2 {
		t.Fatalf("%d runs, want 2: the superseded retry must not run", len(f.runs))
	}
}

func TestCloseDropsARequeuedJob(t *testing.T) {
	t.Parallel()
	f := &flaky{pass: 99, wait: time.Hour, ran: make(chan agent.Job, 8)}
	s := agent.NewScheduler(t.Context(), 4, f.run)
	s.Mutate(agent.Job{Kind: agent.KindConverge, Cluster: "c/a", Commit: "m1"})
	next(t, f.ran)
	for !s.Requeued("c/a") {
		time.Sleep(time.Millisecond)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the requeued job's hour")
	}
}

func TestAPlanRetriesAndANewerPushCancelsTheWait(t *testing.T) {
	t.Parallel()
	s := agent.NewScheduler(t.Context(), 1, func(context.Context, agent.Job) time.Duration { return 0 })
	defer s.Close()
	attempts := make(chan int, 8)
	s.Plan(7, "head1", []string{"c/a"}, func(_ context.Context, attempt int) time.Duration {
		attempts <- attempt
		if attempt < 2 {
			return time.Millisecond
		}
		return time.Hour // waits until the newer push
	})
	for want := 1; want <= 2; want++ {
		select {
		case got := <-attempts:
			if got != want {
				t.Fatalf("attempt %d, want %d", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("attempt %d never ran", want)
		}
	}
	// The waiting retry holds no concurrency slot: with a bound of 1 the
	// newer head's plan runs at once.
	done := make(chan struct{})
	s.Plan(7, "head2", []string{"c/a"}, func(context.Context, int) time.Duration { close(done); return 0 })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the newer plan did not run")
	}
	s.Wait()
	if len(attempts) != 0 {
		t.Fatalf("the older plan ran again after the newer push")
	}
}
