package agent

import (
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
