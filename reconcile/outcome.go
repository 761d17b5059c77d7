package reconcile

import (
	"time"

	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// Outcome is how a converge or destroy ended, the one classification the
// CLI's exit code and the agent's commit status both come from.
type Outcome string

// Outcomes of a run.
const (
	// Succeeded: the cluster matches the commit.
	Succeeded Outcome = "success"
	// Waiting: the run stopped on something that will change on its own
	// (a PodDisruptionBudget, a node still booting); run it again later.
	Waiting Outcome = "waiting"
	// Transient: the run failed on something that may go away (an API
	// that did not answer, a lock another run holds); worth a retry.
	Transient Outcome = "transient"
	// Failed: the run failed for good (a refusal, a failed control-plane
	// reset, bad input); running it again changes nothing.
	Failed Outcome = "failure"
)

// Settled is a run's outcome with what the caller needs to act on it.
type Settled struct {
	Outcome Outcome
	// Reason is, for Waiting, what the run waits for.
	Reason string
	// RetryAfter is, for Waiting, when another run is worth it (zero: the
	// caller's own backoff).
	RetryAfter time.Duration
}

// Settle classifies the error a converge or destroy returned.
func Settle(err error) Settled {
	if err == nil {
		return Settled{Outcome: Succeeded}
	}
	if w, ok := retry.IsWaiting(err); ok {
		return Settled{Outcome: Waiting, Reason: w.Reason, RetryAfter: w.RetryAfter}
	}
	if retry.IsTransient(err) {
		return Settled{Outcome: Transient}
	}
	return Settled{Outcome: Failed}
}
