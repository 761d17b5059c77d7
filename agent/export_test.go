package agent

import "github.com/taloscluster/taloscluster/reconcile/retry"

// SetRetryPolicy replaces the waits between the tries of a failed converge
// or plan (RetryInitial, RetryMax, RetryAttempts), so tests need not wait
// minutes. Call it before the first Poll.
func (a *Agent) SetRetryPolicy(p retry.Policy) { a.retry = p }

// HumanDuration is humanDuration, for tests.
var HumanDuration = humanDuration
