package agent

import (
	"context"
	"slices"
	"sync"
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
}

// Scheduler runs jobs: one mutating job (converge, drift) per cluster at a
// time, independent clusters concurrently up to a bound, and at most one
// plan per pull request, a newer head cancelling an older one.
type Scheduler struct {
	run func(ctx context.Context, j Job)
	sem chan struct{}

	mu       sync.Mutex
	busy     map[string]bool // clusters with a mutating job running
	pending  map[string]*Job // the next mutating job per cluster
	plans    map[int]*planRun
	running  []Job
	wg       sync.WaitGroup
	base     context.Context
	shutdown bool
}

type planRun struct {
	commit string
	cancel context.CancelFunc
}

// NewScheduler returns a scheduler that calls run for every job, with at
// most concurrency jobs at once. Jobs stop when ctx ends.
func NewScheduler(ctx context.Context, concurrency int, run func(ctx context.Context, j Job)) *Scheduler {
	return &Scheduler{run: run, sem: make(chan struct{}, max(1, concurrency)), busy: map[string]bool{},
		pending: map[string]*Job{}, plans: map[int]*planRun{}, base: ctx}
}

// Mutate queues a converge or drift job. If the cluster is busy, the job
// waits; a later job for the same cluster replaces a waiting one, covering
// its commits too, so several merges converge once to the newest.
func (s *Scheduler) Mutate(j Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return
	}
	if len(j.Covers) == 0 {
		j.Covers = []string{j.Commit}
	}
	if s.busy[j.Cluster] {
		if old := s.pending[j.Cluster]; old != nil {
			if old.Kind == KindConverge || j.Kind == KindConverge {
				j.Kind = KindConverge
			}
			j.Covers = append(slices.Clone(j.Covers), old.Covers...)
			j.Covers = compactKeepFirst(j.Covers)
		}
		s.pending[j.Cluster] = &j
		return
	}
	s.busy[j.Cluster] = true
	s.start(j)
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
	s.running = append(s.running, j)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case s.sem <- struct{}{}:
		case <-s.base.Done():
			s.finish(j)
			return
		}
		s.run(s.base, j)
		<-s.sem
		s.finish(j)
	}()
}

func (s *Scheduler) finish(j Job) {
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
		s.start(*next)
		return
	}
	delete(s.busy, j.Cluster)
}

// Plan runs a plan for a pull request head; an older plan of the same pull
// request that is still running is cancelled.
func (s *Scheduler) Plan(pr int, commit string, clusters []string, run func(ctx context.Context)) {
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
		select {
		case s.sem <- struct{}{}:
			run(ctx)
			<-s.sem
		case <-ctx.Done():
		}
		s.mu.Lock()
		if s.plans[pr] == pr0 {
			delete(s.plans, pr)
		}
		s.mu.Unlock()
		s.finish(j)
	}()
}

// Busy reports whether a mutating job runs on the cluster.
func (s *Scheduler) Busy(cluster string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy[cluster]
}

// Queue returns the running and waiting jobs, for the status page.
func (s *Scheduler) Queue() (running, waiting []Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	running = slices.Clone(s.running)
	for _, j := range s.pending {
		waiting = append(waiting, *j)
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

// Wait waits until no job runs.
func (s *Scheduler) Wait() {
	s.wg.Wait()
}

// Close stops accepting jobs and waits for the running ones.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.shutdown = true
	s.mu.Unlock()
	s.wg.Wait()
}
