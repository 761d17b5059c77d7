package agent

import (
	"context"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// SetRetryPolicy replaces the waits between the tries of a failed converge
// or plan (RetryInitial, RetryMax, RetryAttempts), so tests need not wait
// minutes. Call it before the first Poll.
func (a *Agent) SetRetryPolicy(p retry.Policy) { a.retry = p }

// HumanDuration is humanDuration, for tests.
var HumanDuration = humanDuration

// EndpointRefusal is endpointRefusal with allowed_endpoints unparsed, for
// tests.
func EndpointRefusal(pr Endpoints, base *Endpoints, allowed []string, allowTLS bool) string {
	rules, err := parseAllowed(allowed)
	if err != nil {
		panic(err)
	}
	return endpointRefusal(pr, base, rules, allowTLS)
}

// RepositoryURL is repositoryURL, for tests.
var RepositoryURL = repositoryURL

// SetRunningForTest records that job j started on cluster now, as a
// converge does before its first step.
func (a *Agent) SetRunningForTest(cluster string, j Job) {
	j.Cluster = cluster
	a.board.setRunning(j, time.Now())
}

// ProgressLog is the log func a converge of cluster passes the runner.
func (a *Agent) ProgressLog(cluster string) func(string) {
	return a.progressLog(cluster, func(string) {})
}

// SetWaitPolicy replaces the waits between the runs of a converge that
// stopped on something that will change on its own (WaitInitial,
// WaitMax) and how long it may wait in all (WaitLimit). Call it before the
// first Poll.
func (a *Agent) SetWaitPolicy(backoff retry.Policy, limit time.Duration) {
	a.waits = waitPolicy{backoff: backoff, limit: limit}
}

// SetClock replaces the clock a converge's wait is measured with. Call it
// before the first Poll; now must be safe for concurrent use.
func (a *Agent) SetClock(now func() time.Time) { a.now = now }

// RunRequeuedNow runs the converge of cluster that was requeued, after a
// transient failure or a wait, at once rather than when its wait is over.
// It reports whether one was requeued.
func (a *Agent) RunRequeuedNow(cluster string) bool { return a.sched.RunRequeuedNow(cluster) }

// RunRequeuedNow runs the job of cluster that was requeued at once rather
// than when its wait is over, and reports whether one was requeued.
func (s *Scheduler) RunRequeuedNow(cluster string) bool {
	s.mu.Lock()
	r := s.retries[cluster]
	s.mu.Unlock()
	if r == nil || !r.timer.Stop() {
		return false
	}
	s.fire(r)
	return true
}

// FlushReports delivers the reports the outbox holds now, as Wait does
// after the jobs ended; for tests of a job that waits in the queue.
func (a *Agent) FlushReports() { a.flushReports(context.Background()) }
