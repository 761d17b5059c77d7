package agent

import (
	"context"
	"slices"
	"sync"
	"time"
)

// JobKind is what a job does.
type JobKind string

// Job kinds.
const (
	KindPlan     JobKind = "plan"
	KindConverge JobKind = "converge"
	KindDrift    JobKind = "drift"
)

// Job is one unit of work for one cluster at one exact commit.
type Job struct {
	Kind    JobKind
	Cluster string // cluster directory path
	Commit  string
	// PR is the pull request a plan is for; 0 for the default branch.
	PR int
	// Covers lists the commits a converge covers, newest first, when
	// several merges were coalesced into one run.
	Covers []string
	// Attempt counts the tries of the job, from 1; zero means 1. A job
	// requeued after a transient failure runs again with Attempt one more.
	Attempt int
	// Waits counts the runs of the job that stopped on something that
	// will change on its own and were requeued to run again (see
	// Requeue.WaitingSince): they count no attempt. WaitingSince is when
	// the job began waiting, zero for a job that never waited.
	Waits        int
	WaitingSince time.Time
	// NotBefore is when a requeued job runs again; zero for a job that
	// runs as soon as it can.
	NotBefore time.Time
}

// Scheduler runs jobs: one mutating job (converge, drift) per cluster at a
// time, independent clusters concurrently up to a bound, and at most one
// plan per pull request, a newer head cancelling an older one.
//
// A job that asks for it (its run returns a Requeue with a positive
// After: a transient failure, or a wait on something that will change on
// its own) is requeued to run again after that long. A newer mutating job
// for the same cluster supersedes a requeued one: it runs instead, at
// once, and covers the requeued job's commits too.
type Scheduler struct {
	run func(ctx context.Context, j Job) Requeue
	sem chan struct{}

	mu       sync.Mutex
	busy     map[string]bool       // clusters with a mutating job running
	pending  map[string]*Job       // the next mutating job per cluster
	retries  map[string]*retryWait // a requeued mutating job per cluster
	plans    map[int]*planRun
	running  []Job
	wg       sync.WaitGroup
	base     context.Context
	quit     chan struct{} // closed by Close: waits end
	shutdown bool
}

type planRun struct {
	commit string
	cancel context.CancelFunc
}

// retryWait is a mutating job waiting to be run again. Whoever removes it
// from Scheduler.retries (its timer, a superseding job, Close) marks it
// done in the wait group.
type retryWait struct {
	job   Job
	timer *time.Timer
}

// Requeue is how a mutating job runs again once its run returned.
type Requeue struct {
	// After is how long the job waits before it runs again; zero or less:
	// it does not.
	After time.Duration
	// WaitingSince, when set, marks a run that stopped on something that
	// will change on its own, which the job has waited for since then: its
	// next run is another wait (Job.Waits one more, Job.WaitingSince
	// this), not another attempt (Job.Attempt stays). Zero: the next run
	// is the job's next attempt.
	WaitingSince time.Time
}

// NewScheduler returns a scheduler that calls run for every mutating job,
// with at most concurrency jobs at once. When run returns a positive
// duration the job is requeued to run again after it, as its next attempt
// (see Scheduler). Jobs stop when ctx ends.
func NewScheduler(ctx context.Context, concurrency int, run func(ctx context.Context, j Job) (retryAfter time.Duration)) *Scheduler {
	return NewSchedulerRequeue(ctx, concurrency, func(ctx context.Context, j Job) Requeue {
		return Requeue{After: run(ctx, j)}
	})
}

// NewSchedulerRequeue is NewScheduler for a run that says how its job runs
// again: as its next attempt, or as another wait that counts no attempt.
func NewSchedulerRequeue(ctx context.Context, concurrency int, run func(ctx context.Context, j Job) Requeue) *Scheduler {
	return &Scheduler{run: run, sem: make(chan struct{}, max(1, concurrency)), busy: map[string]bool{},
		pending: map[string]*Job{}, retries: map[string]*retryWait{}, plans: map[int]*planRun{}, base: ctx,
		quit: make(chan struct{})}
}

// Mutate queues a converge or drift job. If the cluster is busy, the job
// waits; a later job for the same cluster replaces a waiting one, covering
// its commits too, so several merges converge once to the newest. A job
// requeued after a transient failure is superseded the same way, and the
// new job runs at once.
func (s *Scheduler) Mutate(j Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return
	}
	if len(j.Covers) == 0 {
		j.Covers = []string{j.Commit}
	}
	j.NotBefore = time.Time{}
	if r := s.retries[j.Cluster]; r != nil {
		s.dropRetry(j.Cluster, r)
		j = absorb(j, r.job)
	}
	if s.busy[j.Cluster] {
		if old := s.pending[j.Cluster]; old != nil {
			j = absorb(j, *old)
		}
		s.pending[j.Cluster] = &j
		return
	}
	s.busy[j.Cluster] = true
	s.start(j)
}

// absorb returns newer covering older's commits too; the run is a converge
// if either is.
func absorb(newer, older Job) Job {
	if older.Kind == KindConverge || newer.Kind == KindConverge {
		newer.Kind = KindConverge
	}
	newer.Covers = compactKeepFirst(append(slices.Clone(newer.Covers), older.Covers...))
	return newer
}

func compactKeepFirst(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// start runs j in its own goroutine; s.mu must be held.
func (s *Scheduler) start(j Job) {
	j.NotBefore = time.Time{}
	s.running = append(s.running, j)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case s.sem <- struct{}{}:
		case <-s.base.Done():
			s.finish(j, Requeue{})
			return
		}
		again := s.run(s.base, j)
		<-s.sem
		s.finish(j, again)
	}()
}

// finish ends a mutating job: the next one waiting for the cluster starts,
// covering j's commits too when j asked to be run again; otherwise j is
// requeued when it asked to be, as its next attempt or, after a wait, as
// the same attempt.
func (s *Scheduler) finish(j Job, again Requeue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = slices.DeleteFunc(s.running, func(r Job) bool {
		return r.Kind == j.Kind && r.Cluster == j.Cluster && r.Commit == j.Commit && r.PR == j.PR
	})
	if j.Kind == KindPlan {
		return
	}
	if next := s.pending[j.Cluster]; next != nil && !s.shutdown {
		delete(s.pending, j.Cluster)
		if again.After > 0 {
			*next = absorb(*next, j)
		}
		s.start(*next)
		return
	}
	delete(s.busy, j.Cluster)
	if again.After > 0 && !s.shutdown && s.base.Err() == nil {
		next := j
		if again.WaitingSince.IsZero() {
			next.Attempt = max(j.Attempt, 1) + 1
		} else {
			next.Waits, next.WaitingSince = j.Waits+1, again.WaitingSince
		}
		next.NotBefore = time.Now().Add(again.After)
		r := &retryWait{job: next}
		s.retries[j.Cluster] = r
		s.wg.Add(1)
		r.timer = time.AfterFunc(again.After, func() { s.fire(r) })
	}
}

// fire runs a requeued job whose wait is over, unless it was superseded.
func (s *Scheduler) fire(r *retryWait) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := r.job.Cluster
	if s.retries[c] != r {
		return // superseded or stopped: done already
	}
	delete(s.retries, c)
	defer s.wg.Done()
	if s.shutdown {
		return
	}
	if s.busy[c] {
		// Only a newer job can hold the cluster: it covers this one.
		if next := s.pending[c]; next != nil {
			*next = absorb(*next, r.job)
		} else {
			j := r.job
			s.pending[c] = &j
		}
		return
	}
	s.busy[c] = true
	s.start(r.job)
}

// dropRetry removes a requeued job; s.mu must be held.
func (s *Scheduler) dropRetry(cluster string, r *retryWait) {
	delete(s.retries, cluster)
	r.timer.Stop()
	s.wg.Done()
}

// Plan runs a plan for a pull request head; an older plan of the same pull
// request that is still running or waiting is cancelled. run gets the
// attempt (from 1); when it returns a positive duration it is called again
// after that long with the next attempt, unless a newer head cancelled it
// meanwhile. It does not hold a concurrency slot while it waits.
func (s *Scheduler) Plan(pr int, commit string, clusters []string, run func(ctx context.Context, attempt int) (retryAfter time.Duration)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return
	}
	if old := s.plans[pr]; old != nil {
		if old.commit == commit {
			return
		}
		old.cancel()
	}
	ctx, cancel := context.WithCancel(s.base)
	pr0 := &planRun{commit: commit, cancel: cancel}
	s.plans[pr] = pr0
	j := Job{Kind: KindPlan, PR: pr, Commit: commit}
	if len(clusters) == 1 {
		j.Cluster = clusters[0]
	}
	s.running = append(s.running, j)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		for attempt := 1; ; attempt++ {
			var again time.Duration
			select {
			case s.sem <- struct{}{}:
				again = run(ctx, attempt)
				<-s.sem
			case <-ctx.Done():
			}
			if again <= 0 || !s.wait(ctx, again) {
				break
			}
		}
		s.mu.Lock()
		if s.plans[pr] == pr0 {
			delete(s.plans, pr)
		}
		s.mu.Unlock()
		s.finish(j, Requeue{})
	}()
}

// wait waits for d and reports whether the wait ran out rather than ctx
// ending or the scheduler closing.
func (s *Scheduler) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.quit:
	}
	return false
}

// Busy reports whether a mutating job runs on the cluster.
func (s *Scheduler) Busy(cluster string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy[cluster]
}

// Requeued reports whether a mutating job of the cluster waits to be run
// again after a transient failure or a wait.
func (s *Scheduler) Requeued(cluster string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retries[cluster] != nil
}

// Queue returns the running and waiting jobs, for the status page. The
// waiting ones include the jobs requeued after a transient failure or a
// wait, with NotBefore set.
func (s *Scheduler) Queue() (running, waiting []Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	running = slices.Clone(s.running)
	for _, j := range s.pending {
		waiting = append(waiting, *j)
	}
	for _, r := range s.retries {
		waiting = append(waiting, r.job)
	}
	slices.SortFunc(waiting, func(a, b Job) int {
		if a.Cluster < b.Cluster {
			return -1
		}
		if a.Cluster > b.Cluster {
			return 1
		}
		return 0
	})
	return running, waiting
}

// Wait waits until no job runs or waits to be run again.
func (s *Scheduler) Wait() {
	s.wg.Wait()
}

// Close stops accepting jobs, drops the requeued ones and waits for the
// running ones.
func (s *Scheduler) Close() {
	s.mu.Lock()
	if !s.shutdown {
		s.shutdown = true
		close(s.quit)
	}
	for c, r := range s.retries {
		s.dropRetry(c, r)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
