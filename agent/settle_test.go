package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	gh "github.com/taloscluster/taloscluster/report/github"
	"github.com/taloscluster/taloscluster/report/metrics"
)

// TestSettle covers every row of the table from a run's verdict to its
// outcome, for converges and for plans.
func TestSettle(t *testing.T) {
	t.Parallel()
	const reason = "proxmox did not answer"
	pdb := reconcile.Settle(retry.Waiting("a PodDisruptionBudget blocks draining w1", 0, nil))
	pdbIn := func(d time.Duration) reconcile.Settled { s := pdb; s.RetryAfter = d; return s }
	transient := reconcile.Settle(retry.Transient(errors.New(reason)))
	failed := reconcile.Settle(errors.New(reason))
	// base is a converge's first attempt that failed with reason.
	base := func(s reconcile.Settled) verdict {
		return verdict{settled: s, reason: reason, detail: reason, attempt: 1, attempts: 5, backoff: 30 * time.Second,
			waitReason: "a PodDisruptionBudget blocks draining w1", waitBackoff: 40 * time.Second, waitMin: 30 * time.Second, waitLimit: time.Hour}
	}
	with := func(v verdict, f func(*verdict)) verdict { f(&v); return v }
	long := strings.Repeat("x", 300)

	for _, tc := range []struct {
		name string
		v    verdict
		want outcome
	}{
		{"success", verdict{settled: reconcile.Settle(nil), attempt: 1, attempts: 5, covers: 1},
			outcome{result: metrics.ResultSuccess, state: gh.StateSuccess, desc: "converged"}},
		{"success of a destroy", verdict{settled: reconcile.Settle(nil), attempt: 1, attempts: 5, covers: 1, destroy: true},
			outcome{result: metrics.ResultSuccess, state: gh.StateSuccess, desc: "destroyed"}},
		{"success covering merges, retried, with a review note",
			verdict{settled: reconcile.Settle(nil), attempt: 3, attempts: 5, covers: 2, note: "the plan changed since review (1 difference)"},
			outcome{result: metrics.ResultSuccess, state: gh.StateSuccess,
				desc: "converged, covering 2 merges (attempt 3 of 5); the plan changed since review (1 difference)"}},
		{"refused by the agent", with(base(failed), func(v *verdict) { v.refused = "refused: " + long }),
			outcome{result: metrics.ResultRefused, state: gh.StateFailure, desc: fitLine("refused: "+long, gh.MaxDescription)}},
		{"refused though transient", with(base(transient), func(v *verdict) { v.refused = "refused: no reviewed plan" }),
			outcome{result: metrics.ResultRefused, state: gh.StateFailure, desc: "refused: no reviewed plan"}},
		{"cancelled", with(base(transient), func(v *verdict) { v.cancelled = true }),
			outcome{result: metrics.ResultCancelled, state: gh.StateFailure, desc: reason}},
		{"cancelled while waiting", with(base(pdb), func(v *verdict) { v.cancelled = true }),
			outcome{result: metrics.ResultCancelled, state: gh.StateFailure, desc: reason}},
		{"disk full, past the attempts", with(base(failed), func(v *verdict) { v.diskFull, v.attempt = true, 9 }),
			outcome{result: metrics.ResultRetried, state: gh.StatePending, again: 30 * time.Second,
				desc: "no space left on the agent's disk; retrying in 30s once there is room"}},
		{"waiting, the agent's backoff", base(pdb),
			outcome{result: metrics.ResultWaiting, state: gh.StatePending, again: 40 * time.Second, waiting: true,
				reason: "a PodDisruptionBudget blocks draining w1", desc: "waiting: a PodDisruptionBudget blocks draining w1, retrying in 40s"}},
		{"waiting, the engine's wait", base(pdbIn(10 * time.Minute)),
			outcome{result: metrics.ResultWaiting, state: gh.StatePending, again: 10 * time.Minute, waiting: true,
				reason: "a PodDisruptionBudget blocks draining w1", desc: "waiting: a PodDisruptionBudget blocks draining w1, retrying in 10m"}},
		{"waiting, the engine's wait, at least the shortest", base(pdbIn(time.Second)),
			outcome{result: metrics.ResultWaiting, state: gh.StatePending, again: 30 * time.Second, waiting: true,
				reason: "a PodDisruptionBudget blocks draining w1", desc: "waiting: a PodDisruptionBudget blocks draining w1, retrying in 30s"}},
		{"waiting, the wait cut to the limit", with(base(pdbIn(10*time.Minute)), func(v *verdict) { v.waited = 58 * time.Minute }),
			outcome{result: metrics.ResultWaiting, state: gh.StatePending, again: 2 * time.Minute, waiting: true,
				reason: "a PodDisruptionBudget blocks draining w1", desc: "waiting: a PodDisruptionBudget blocks draining w1, retrying in 2m"}},
		{"waiting counts no attempt", with(base(pdb), func(v *verdict) { v.attempt = 5 }),
			outcome{result: metrics.ResultWaiting, state: gh.StatePending, again: 40 * time.Second, waiting: true,
				reason: "a PodDisruptionBudget blocks draining w1", desc: "waiting: a PodDisruptionBudget blocks draining w1, retrying in 40s"}},
		{"waiting, a long reason cut to fit", with(base(pdb), func(v *verdict) { v.waitReason = long }),
			outcome{result: metrics.ResultWaiting, state: gh.StatePending, again: 40 * time.Second, waiting: true, reason: long,
				desc: "waiting: " + fitLine(long, gh.MaxDescription-len("waiting: ")-len(", retrying in 40s")) + ", retrying in 40s"}},
		{"waited the limit", with(base(pdb), func(v *verdict) { v.waited = time.Hour }),
			outcome{result: metrics.ResultFailure, state: gh.StateFailure,
				desc: "waited too long (over 1h): a PodDisruptionBudget blocks draining w1"}},
		{"waited the limit, the plan had refusals", with(base(pdb), func(v *verdict) { v.waited, v.planRefused = 2*time.Hour, true }),
			outcome{result: metrics.ResultRefused, state: gh.StateFailure,
				desc: "waited too long (over 1h): a PodDisruptionBudget blocks draining w1"}},
		{"transient, attempts left", base(transient),
			outcome{result: metrics.ResultRetried, state: gh.StatePending, again: 30 * time.Second,
				desc: "attempt 1 of 5 failed: proxmox did not answer, retrying in 30s"}},
		{"transient, GitHub's rate limit outlasts the backoff", with(base(transient), func(v *verdict) { v.limited = 5 * time.Minute }),
			outcome{result: metrics.ResultRetried, state: gh.StatePending, again: 5 * time.Minute,
				desc: "attempt 1 of 5 failed: proxmox did not answer, retrying in 5m"}},
		{"transient, no attempt left", with(base(transient), func(v *verdict) { v.attempt = 5 }),
			outcome{result: metrics.ResultFailure, state: gh.StateFailure, desc: "attempt 5 of 5 failed: proxmox did not answer"}},
		{"transient, no attempt left, the plan had refusals", with(base(transient), func(v *verdict) { v.attempt, v.planRefused = 5, true }),
			outcome{result: metrics.ResultRefused, state: gh.StateFailure, desc: "attempt 5 of 5 failed: proxmox did not answer"}},
		{"failed", base(failed),
			outcome{result: metrics.ResultFailure, state: gh.StateFailure, desc: reason}},
		{"failed after a retry", with(base(failed), func(v *verdict) { v.attempt = 2 }),
			outcome{result: metrics.ResultFailure, state: gh.StateFailure, desc: "attempt 2 of 5 failed: proxmox did not answer"}},
		{"failed, the plan had refusals", with(base(failed), func(v *verdict) { v.planRefused = true }),
			outcome{result: metrics.ResultRefused, state: gh.StateFailure, desc: reason}},
		{"plan: transient", with(base(transient), func(v *verdict) { v.plan = true }),
			outcome{result: metrics.ResultRetried, state: gh.StatePending, again: 30 * time.Second,
				desc: "attempt 1 of 5 failed: proxmox did not answer, retrying in 30s"}},
		{"plan: waiting is transient", with(base(pdb), func(v *verdict) { v.plan = true }),
			outcome{result: metrics.ResultRetried, state: gh.StatePending, again: 30 * time.Second,
				desc: "attempt 1 of 5 failed: proxmox did not answer, retrying in 30s"}},
		{"plan: waiting, no attempt left", with(base(pdb), func(v *verdict) { v.plan, v.attempt = true, 5 }),
			outcome{result: metrics.ResultFailure, state: gh.StateFailure, desc: "attempt 5 of 5 failed: proxmox did not answer"}},
		{"plan: failed, the whole message", with(base(failed), func(v *verdict) { v.plan, v.detail = true, reason+"\nat line 2" }),
			outcome{result: metrics.ResultFailure, state: gh.StateFailure, desc: reason + "\nat line 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := settle(tc.v)
			if got != tc.want {
				t.Errorf("settle(%+v)\n = %+v\nwant %+v", tc.v, got, tc.want)
			}
			if len(got.desc) > gh.MaxDescription && !tc.v.plan && tc.v.settled.Outcome != reconcile.Succeeded {
				t.Errorf("description of %d bytes: %q", len(got.desc), got.desc)
			}
			if (got.again > 0) != (got.state == gh.StatePending) {
				t.Errorf("runs again after %v with a %s status", got.again, got.state)
			}
		})
	}
}

// Every outcome reconcile.Settle gives has its row: a converge that
// settled on any of them ends with a result of the fixed set.
func TestSettleCoversEveryOutcome(t *testing.T) {
	t.Parallel()
	for _, err := range []error{nil, retry.Waiting("a node still booting", time.Minute, nil),
		retry.Transient(errors.New("timeout")), retry.Terminal(errors.New("refused"))} {
		s := reconcile.Settle(err)
		out := settle(verdict{settled: s, reason: fmt.Sprint(err), detail: fmt.Sprint(err), attempt: 1, attempts: 5,
			backoff: time.Second, waitBackoff: time.Second, waitLimit: time.Hour})
		want := map[reconcile.Outcome]metrics.Result{reconcile.Succeeded: metrics.ResultSuccess, reconcile.Waiting: metrics.ResultWaiting,
			reconcile.Transient: metrics.ResultRetried, reconcile.Failed: metrics.ResultFailure}[s.Outcome]
		if out.result != want {
			t.Errorf("%s: result %s, want %s", s.Outcome, out.result, want)
		}
	}
}
