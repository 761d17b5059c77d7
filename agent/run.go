package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taloscluster/taloscluster/agent/httpapi"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/report"
	gh "github.com/taloscluster/taloscluster/report/github"
	"github.com/taloscluster/taloscluster/report/metrics"
	"github.com/taloscluster/taloscluster/report/outbox"
)

// This file is where a run of the agent lives, from begin to finish. A
// mutating run (a converge of merges, a self-heal of drift, a destroy) is
// a run value:
//
//   - begin: the pending status, the running record on the status page,
//     the run counted in progress;
//   - converge: the engine, at the job's exact commit;
//   - settle: the engine's error, as reconcile.Settle classifies it (the
//     classification the CLI's exit code comes from too), and what the
//     agent knows around it, turned by one pure table (settle) into an
//     outcome: success; waiting, run again after the engine's RetryAfter
//     or the agent's wait backoff without counting an attempt, until the
//     wait limit; transient, run again with backoff until the attempts are
//     used up; failure, not run again;
//   - finish: the one place that reports the run: it posts the comment,
//     then the final statuses, records the run and forgets the approved
//     plan.
//
// The plan of a pull request (planPR) settles its errors through the same
// table.

// run is one mutating job from begin to finish.
type run struct {
	a       *Agent
	job     Job
	attempt int
	started time.Time
	// statusCtx is the run's commit status context.
	statusCtx string
	// rv compares the plan about to run with the reviewed one.
	rv *review
	// since is when the job began waiting: set for a run that waits.
	since time.Time

	mu    sync.Mutex
	lines []string // the engine's progress, for the run's page
	// steps are the steps the converge ran, for its comment and page.
	steps stepLog
}

// runMutation is the scheduler's run of a mutating job; it returns how the
// job runs again, if it does.
func (a *Agent) runMutation(ctx context.Context, j Job) Requeue {
	r := a.begin(ctx, j)
	defer a.board.setRunning(Job{Cluster: j.Cluster}, time.Time{})
	err := r.converge(ctx)
	// The run is over: the status page stops showing it before its
	// commit status says so, so whoever reads the one after the other
	// never sees an ended run still running.
	a.board.setRunning(Job{Cluster: j.Cluster}, time.Time{})
	return r.finish(ctx, err, settle(r.verdict(ctx, err)))
}

// begin starts a run: the running record, the run counted in progress, its
// pending status on the commit it converges.
func (a *Agent) begin(ctx context.Context, j Job) *run {
	r := &run{a: a, job: j, attempt: max(j.Attempt, 1), started: time.Now(), statusCtx: gh.StatusContext("converge", j.Cluster)}
	a.board.setRunning(j, r.started)
	if a.metrics != nil {
		a.metrics.RunStarted(metrics.KindConverge, j.Cluster)
	}
	running := "converging"
	switch {
	case r.attempt > a.retry.Attempts:
		running = fmt.Sprintf("converging, attempt %d", r.attempt) // after a full disk
	case r.attempt > 1:
		running = fmt.Sprintf("converging, attempt %d of %d", r.attempt, a.retry.Attempts)
	}
	a.setStatus(ctx, j.Commit, r.statusCtx, gh.StatePending, running, a.link(""))
	r.rv = a.newReview(ctx, j, r.attempt)
	r.rv.destroy = a.hasDestroyMarker(j.Commit, j.Cluster)
	return r
}

// converge runs the engine on the job's commit: a destroy when the
// cluster's directory holds the destroy marker and the marker may act, a
// converge otherwise.
func (r *run) converge(ctx context.Context) error {
	a, j := r.a, r.job
	if r.rv.destroy {
		if err := a.destroyAllowed(ctx, j); err != nil {
			return err
		}
	}
	return a.withFiles(j.Commit, j.Cluster, func(files fs.FS) error {
		return a.runner.Converge(ctx, j.Cluster, j.Commit, files, ConvergeHooks{
			Log: a.progressLog(j.Cluster, r.keep), Approve: r.rv.approve, Step: r.observe,
			Loaded: r.loaded, Remediated: r.remediated})
	})
}

// maxRemediationEvents bounds the remediations the status page keeps of
// a cluster.
const maxRemediationEvents = 20

// loaded shows the cluster's remediation settings on the status page.
func (r *run) loaded(c *spec.Cluster) {
	rs := &httpapi.RemediationStatus{}
	if c.Remediation != nil {
		rs = &httpapi.RemediationStatus{On: true, After: durationText(c.Remediation.After), MaxUnhealthy: c.Remediation.MaxUnhealthy.String(),
			Pools: slices.Clone(c.Remediation.Pools)}
	}
	r.a.board.record(r.job.Cluster, func(s *httpapi.ClusterStatus) {
		if s.Remediation != nil {
			rs.Events = s.Remediation.Events
		}
		s.Remediation = rs
	})
}

// durationText writes a duration as cluster.yaml does: 10m, 1h30m, 90s
// as 1m30s.
func durationText(d time.Duration) string {
	out := d.Truncate(time.Second).String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}

// remediated reports a remediation the converge began: the event
// "remediation" in the log, the counter taloscluster_remediations_total,
// and a line on the status page.
func (r *run) remediated(pool, hostname string) {
	a, j := r.a, r.job
	a.log.Info("remediation", "cluster", j.Cluster, "commit", j.Commit, "pool", pool, "node", hostname)
	if a.metrics != nil {
		a.metrics.Remediation(j.Cluster, pool)
	}
	ev := httpapi.RemediationEvent{At: time.Now(), Pool: pool, Node: hostname, Commit: j.Commit}
	a.board.record(j.Cluster, func(s *httpapi.ClusterStatus) {
		if s.Remediation == nil {
			s.Remediation = &httpapi.RemediationStatus{On: true}
		}
		s.Remediation.Events = append([]httpapi.RemediationEvent{ev}, s.Remediation.Events...)
		s.Remediation.Events = s.Remediation.Events[:min(len(s.Remediation.Events), maxRemediationEvents)]
	})
}

// keep keeps a progress line of the engine for the run's page.
func (r *run) keep(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, line)
}

// verdict gathers what settle decides the run's outcome from. For a run
// that waits it sets r.since, when the job began waiting.
func (r *run) verdict(ctx context.Context, err error) verdict {
	a, j := r.a, r.job
	v := verdict{settled: reconcile.Settle(err), attempt: r.attempt, attempts: a.retry.Attempts,
		backoff: a.retry.Backoff(r.attempt), destroy: r.rv.destroy, covers: len(j.Covers)}
	if err == nil {
		v.note = r.rv.note()
		return v
	}
	v.reason = firstLine(a.redact.String(err.Error()))
	v.detail = v.reason
	v.cancelled = ctx.Err() != nil
	v.diskFull = diskFull(err)
	v.planRefused = r.rv.ran != nil && len(r.rv.ran.Refusals) > 0
	switch {
	case errors.Is(err, errDestroyRefused):
		v.refused = v.reason
	case r.rv.refused != "":
		v.refused = "refused: " + r.rv.refused
	}
	if l, ok := gh.RateLimited(err); ok {
		// Trying again before GitHub's limit is over is a wasted attempt.
		v.limited = time.Until(l.Until) + time.Duration(rand.Int64N(int64(30*time.Second)))
	}
	if v.settled.Outcome == reconcile.Waiting {
		now := a.now()
		r.since = j.WaitingSince
		if r.since.IsZero() {
			r.since = now
		}
		v.waited = now.Sub(r.since)
		v.waitBackoff, v.waitMin, v.waitLimit = a.waits.backoff.Backoff(j.Waits+1), a.waits.backoff.Initial, a.waits.limit
		v.waitReason = fitLine(a.redact.String(v.settled.Reason), maxWaitReason)
		if v.waitReason == "" {
			v.waitReason = v.reason
		}
	}
	return v
}

// maxWaitReason bounds the bytes of what a run waits for on the status
// page.
const maxWaitReason = 300

// finish reports a run once it settled, and says how its job runs again.
// It is the one place a run is reported: it logs, records the commit
// converged, forgets the approved plan of a job that does not run again,
// counts the run, records it on the status page, posts the comment on the
// merged pull requests (after the job's last run only) and, last, the
// statuses, which tell that the run is over.
func (r *run) finish(ctx context.Context, err error, out outcome) Requeue {
	a, j := r.a, r.job
	switch {
	case err == nil:
		if perr := a.progress.SetLastConverged(ctx, j.Cluster, j.Commit); perr != nil {
			a.log.Error("recording the converged commit", "cluster", j.Cluster, "error", perr)
		}
	case errors.Is(err, errDestroyRefused):
		a.log.Warn("destroy refused", "cluster", j.Cluster, "commit", j.Commit, "reason", out.desc)
	case r.rv.refused != "":
		a.log.Warn("converge refused: the plan is not the reviewed plan", "cluster", j.Cluster, "commit", j.Commit, "reason", r.rv.refused)
	case out.waiting:
		a.log.Info("converge waiting", "cluster", j.Cluster, "commit", j.Commit, "reason", out.reason, "in", out.again, "since", r.since)
	case out.again > 0:
		a.log.Warn("converge failed; retrying", "cluster", j.Cluster, "commit", j.Commit, "attempt", r.attempt, "in", out.again, "error", firstLine(a.redact.String(err.Error())))
	default:
		a.log.Error("converge failed", "cluster", j.Cluster, "commit", j.Commit, "attempt", r.attempt, "error", firstLine(a.redact.String(err.Error())))
	}
	if out.again == 0 {
		a.forgetApproved(j.Cluster, j.Commit)
	}
	if a.metrics != nil {
		a.metrics.RunFinished(metrics.KindConverge, j.Cluster, out.result, time.Since(r.started))
	}
	id := a.board.storePlan(j.Cluster, j.Commit, "converge", r.page())
	a.board.record(j.Cluster, func(s *httpapi.ClusterStatus) {
		s.LastConverge = &httpapi.RunSummary{Commit: j.Commit, Result: string(out.result), Time: time.Now(), PlanID: id}
		if out.waiting {
			s.Waiting = &httpapi.Waiting{Kind: string(j.Kind), Commit: j.Commit, Reason: out.reason, Since: r.since, Next: time.Now().Add(out.again)}
		}
	})
	run := httpapi.Run{Kind: string(KindConverge), Commit: j.Commit, Result: string(out.result), Duration: time.Since(r.started), PlanID: id}
	if len(r.rv.prs) > 0 {
		run.PR = r.rv.prs[0]
	}
	switch {
	case out.waiting:
		run.Detail = strings.TrimPrefix(out.desc, "waiting: ") // the result says it
	case out.result != metrics.ResultSuccess:
		run.Detail = out.desc
	case j.Kind == KindDrift:
		run.Detail = "self-heal of drift"
	}
	a.board.addRun(j.Cluster, run)
	// A run that will run again only updates the statuses; the comment
	// comes with the last one.
	if out.again == 0 && ctx.Err() == nil {
		r.comment(ctx, out.desc, a.link(id))
	}
	// The status comes last: it tells that the run is over. The newest
	// commit's, the one the run was for, comes after the merges it covered.
	for _, c := range slices.Backward(j.Covers) {
		a.setStatus(ctx, c, r.statusCtx, out.state, out.desc, a.link(id))
	}
	again := Requeue{After: out.again}
	if out.waiting {
		again.WaitingSince = r.since
	}
	return again
}

// page is the run's page on the status page: the plan that ran, how it
// differs from the reviewed one, and the engine's progress.
func (r *run) page() string {
	var page strings.Builder
	if r.rv.ran != nil {
		page.WriteString(report.Markdown(r.rv.ran) + "\n")
	}
	page.WriteString(r.rv.differencesText())
	if steps := r.stepsText(maxPageSteps, ""); steps != "" {
		page.WriteString(steps + "\n")
	}
	r.mu.Lock()
	page.WriteString("```\n" + strings.Join(r.lines, "") + "\n```\n")
	r.mu.Unlock()
	return page.String()
}

// comment posts the run's comment on the pull request of every merge it
// covered; desc is the run's status, fullURL its page.
func (r *run) comment(ctx context.Context, desc, fullURL string) {
	a, j, rv := r.a, r.job, r.rv
	for i, pr := range rv.prs {
		if pr == 0 && !rv.limited[i] {
			continue
		}
		verb := "converge"
		if rv.destroy {
			verb = "destroy"
		}
		head := fmt.Sprintf("**taloscluster %s** of `%s` at `%s`: **%s**", verb, j.Cluster, short(j.Commit), desc)
		if len(j.Covers) > 1 {
			head += fmt.Sprintf("\n\nThis run covered the merges %s.", strings.Join(shorts(j.Covers), ", "))
		}
		var rest string
		if pr == 0 {
			// Found after GitHub's rate limit, with the comment.
			rest = "_GitHub's rate limit kept the agent from finding this pull request when the converge ran, so this comment does not compare the plan that ran with the reviewed one._"
		} else {
			rest = rv.section(i, pr, fullURL)
		}
		// What each node went through comes before the plan, which may be
		// long, in what the comment has left.
		steps := r.stepsText(min(maxCommentSteps, gh.MaxCommentBytes-len(head)-len(rest)-commentSlack), fullURL)
		body := head
		if steps != "" {
			body += "\n\n" + strings.TrimRight(steps, "\n")
		}
		if rest != "" {
			body += "\n\n" + rest
		}
		a.comment(ctx, pr, j.Covers[i], body)
	}
}

// Bounds of the steps per node in a converge's comment and page, in
// bytes; commentSlack is kept free of a comment for what a redaction
// may add.
const (
	maxCommentSteps = 16000
	maxPageSteps    = 1 << 20
	commentSlack    = 2048
)

// stepsText renders the steps the run's converge ran, per node, in at
// most limit bytes; fullURL is the run's page, linked when the list is
// cut. A run that tried before says that the list is of this try only.
func (r *run) stepsText(limit int, fullURL string) string {
	if limit <= 0 {
		return ""
	}
	note := ""
	if r.attempt > 1 || r.job.Waits > 0 {
		note = "_Steps of the last try; earlier tries ran some of the plan already._\n\n"
	}
	md := report.StepsMarkdown(r.steps.list(time.Now()), limit-len(note), fullURL)
	if md == "" {
		return ""
	}
	return note + md
}

// verdict is what settle decides a run's outcome from: the engine's error
// as reconcile.Settle classified it, and what the agent knows around it.
// It is data only: settle does no I/O and reads no clock.
type verdict struct {
	// plan is set for the plan of a pull request. A plan changes nothing,
	// so nothing it stopped on is worth waiting for: it is settled as a
	// transient failure.
	plan    bool
	settled reconcile.Settled
	// reason is the error's first line, secrets removed; detail is what
	// the status of a terminal failure says: the reason, or for a plan the
	// whole message (GitHub shows its first line).
	reason, detail string
	// refused is the status of a run the agent refused before the engine
	// changed anything (a destroy marker that may not act, a plan that is
	// not the reviewed one); "" when it did not.
	refused string
	// planRefused is set when the plan that ran has refusals: a failure
	// then counts as refused.
	planRefused bool
	// cancelled is set when the run's context ended; diskFull when the
	// agent's disk had no room left.
	cancelled, diskFull bool
	// attempt is the run's try, from 1, of attempts.
	attempt, attempts int
	// backoff is the wait before the next attempt; limited the wait until
	// GitHub's rate limit is over, 0 when it is not limited.
	backoff, limited time.Duration
	// waitReason is what a waiting run waits for (one line, secrets
	// removed); waited how long its job has waited, from its first wait (0
	// for the first); waitBackoff the wait before the next run when the
	// engine names none; waitMin the shortest wait, whatever the engine
	// names (GitHub keeps at most 1000 statuses of a commit and context);
	// waitLimit how long a job may wait before it fails.
	waitReason                              string
	waited, waitBackoff, waitMin, waitLimit time.Duration
	// destroy, covers and note shape the status of a success: a destroy,
	// the merges the run covered, the word on the review.
	destroy bool
	covers  int
	note    string
}

// outcome is what the agent does once a run settled.
type outcome struct {
	// result is the run's result on the metrics and the status page.
	result metrics.Result
	// state and desc are the run's commit status.
	state, desc string
	// again, when positive, runs the job again after that long: as a wait
	// that counts no attempt when waiting is set, else as its next
	// attempt.
	again   time.Duration
	waiting bool
	// reason is what a waiting run waits for.
	reason string
}

// settle is the table from a run's verdict to its outcome, the first row
// that matches:
//
//	engine               agent                    result     status                                           runs again
//	succeeded                                     success    success "converged" (covering n merges, attempt)  no
//	                     refused the run          refused    failure "refused: <why>"                          no
//	                     context ended            cancelled  failure "<reason>"                                no
//	                     disk full                retried    pending "no space left ..., retrying in <d> ..."  after backoff, however often
//	waiting              waited under the limit   waiting    pending "waiting: <reason>, retrying in <d>"      after RetryAfter (at least waitMin) or the wait backoff, at most up to the limit; no attempt counted
//	waiting              waited the limit         failure    failure "waited too long (over <limit>): <reason>" no
//	transient (waiting)  attempts left            retried    pending "attempt n of m failed: <reason>, retrying in <d>" after backoff (GitHub's rate limit at least)
//	transient (waiting)  no attempt left          failure    failure "attempt n of m failed: <reason>"         no
//	failed                                        failure    failure "<reason>" (after a retry: "attempt n of m failed: ...") no
//
// Waiting rows are a plan's transient rows. A failure whose plan had
// refusals counts as refused.
func settle(v verdict) outcome {
	switch {
	case v.settled.Outcome == reconcile.Succeeded:
		return succeeded(v)
	case v.refused != "":
		return outcome{result: metrics.ResultRefused, state: gh.StateFailure, desc: fitLine(v.refused, gh.MaxDescription)}
	case v.cancelled:
		return outcome{result: metrics.ResultCancelled, state: gh.StateFailure, desc: v.reason}
	case v.diskFull:
		// Not the cluster's fault and not a try of its own: the run is
		// tried again, however often, until the disk has room.
		return outcome{result: metrics.ResultRetried, state: gh.StatePending, again: v.backoff,
			desc: "no space left on the agent's disk; retrying in " + humanDuration(v.backoff) + " once there is room"}
	}
	waiting := v.settled.Outcome == reconcile.Waiting && !v.plan
	transient := v.settled.Outcome == reconcile.Transient || v.settled.Outcome == reconcile.Waiting
	out := outcome{result: metrics.ResultFailure, state: gh.StateFailure, desc: v.detail}
	switch {
	case waiting && v.waited < v.waitLimit:
		wait := v.settled.RetryAfter
		if wait <= 0 {
			wait = v.waitBackoff
		}
		wait = min(max(wait, v.waitMin), v.waitLimit-v.waited)
		return outcome{result: metrics.ResultWaiting, state: gh.StatePending, again: wait, waiting: true, reason: v.waitReason,
			desc: fitDescription("waiting: ", v.waitReason, ", retrying in "+humanDuration(wait))}
	case waiting:
		out.desc = fitDescription("waited too long (over "+humanDuration(v.waitLimit)+"): ", v.waitReason, "")
	case transient && v.attempt < v.attempts:
		wait := max(v.backoff, v.limited)
		return outcome{result: metrics.ResultRetried, state: gh.StatePending, again: wait,
			desc: attemptDescription(v.attempt, v.attempts, v.reason, ", retrying in "+humanDuration(wait))}
	case transient || v.attempt > 1:
		out.desc = attemptDescription(v.attempt, v.attempts, v.reason, "")
	}
	if v.planRefused {
		out.result = metrics.ResultRefused
	}
	return out
}

// succeeded is settle's row of a run that succeeded.
func succeeded(v verdict) outcome {
	desc := "converged"
	if v.destroy {
		desc = "destroyed"
	}
	if v.covers > 1 {
		desc = fmt.Sprintf("converged, covering %d merges", v.covers)
	}
	if v.attempt > 1 {
		desc += fmt.Sprintf(" (attempt %d of %d)", v.attempt, v.attempts)
	}
	if v.note != "" {
		desc += "; " + v.note
	}
	return outcome{result: metrics.ResultSuccess, state: gh.StateSuccess, desc: desc}
}

// fitDescription is a status description prefix, reason and suffix, the
// reason cut so the whole fits GitHub's bound.
func fitDescription(prefix, reason, suffix string) string {
	return prefix + fitLine(reason, gh.MaxDescription-len(prefix)-len(suffix)) + suffix
}

// destroyAllowed refuses a run of a commit whose cluster directory holds
// the destroy marker when the marker must not act: a drift job never
// destroys, and a directory whose cluster the agent never converged from
// it destroys nothing.
func (a *Agent) destroyAllowed(ctx context.Context, j Job) error {
	if j.Kind == KindDrift {
		return fmt.Errorf("%w: self-heal never destroys; the %s marker acts only on a reviewed merge", errDestroyRefused, DestroyMarker)
	}
	why, err := a.destroyRefusal(ctx, j.Cluster, []string{j.Cluster})
	if err != nil {
		return err
	}
	if why != "" {
		return fmt.Errorf("%w: %s", errDestroyRefused, why)
	}
	return nil
}

// planPR returns the plan run of a pull request head: it plans every
// affected cluster and posts one comment. A cluster whose plan failed with
// a transient error is planned again on the next attempt, after the wait
// the run returns.
func (a *Agent) planPR(p gh.PR, trees prTrees, clusters []string) func(ctx context.Context, attempt int) time.Duration {
	results := make([]clusterPlan, len(clusters))
	todo := make([]int, len(clusters))
	for i := range todo {
		todo[i] = i
	}
	return func(ctx context.Context, attempt int) time.Duration {
		var again time.Duration
		var next []int
		var statuses []outbox.Report
		for _, i := range todo {
			if ctx.Err() != nil {
				return 0 // superseded by a newer push
			}
			r := a.planCluster(ctx, p, trees, clusters[i], attempt)
			results[i] = r
			if r.status != nil {
				statuses = append(statuses, *r.status)
			}
			if r.retry > 0 {
				next = append(next, i)
				again = max(again, r.retry)
			}
		}
		if ctx.Err() != nil {
			return 0
		}
		todo = next
		sections := make([]gh.Section, len(results))
		for i, r := range results {
			sections[i] = r.sec
		}
		header := fmt.Sprintf("**taloscluster plan** for %s at `%s`", report.MarkdownText(p.Title, maxTitle), short(p.Head))
		// The statuses are queued after the comment, on the same commit and
		// at once, so a final status is never posted before the plan it
		// describes.
		a.report(ctx, append([]outbox.Report{{Kind: outbox.PlanComment, PR: p.Number, Commit: p.Head,
			Bodies: gh.Compose(header, sections, 0)}}, statuses...)...)
		// What the comment shows (now, or once GitHub takes it) is what a
		// merge is checked against. Its green status cannot come first.
		for i, c := range clusters {
			a.rememberShown(c, p.Number, p.Head, results[i].plan)
			a.storeShown(ctx, c, p.Number, p.Head, results[i].plan)
		}
		return again
	}
}

// clusterPlan is the outcome of planning one cluster of a pull request.
type clusterPlan struct {
	sec gh.Section
	// status is the cluster's plan status, nil for none.
	status *outbox.Report
	// plan is the plan shown, nil when the section shows none.
	plan *plan.Plan
	// retry is the wait before planning again after a transient failure,
	// 0 for none.
	retry time.Duration
}

// planCluster plans one cluster of a pull request.
func (a *Agent) planCluster(ctx context.Context, p gh.PR, trees prTrees, cluster string, attempt int) clusterPlan {
	base := trees.base
	started := time.Now()
	statusCtx := gh.StatusContext("plan", cluster)
	sec := gh.Section{Cluster: cluster}
	fail := func(result metrics.Result, desc, msg string) clusterPlan {
		msg = a.redact.String(msg)
		sec.Result, sec.Summary, sec.Body = string(result), firstLine(a.redact.String(desc)), "```\n"+msg+"\n```\n"
		if a.metrics != nil {
			a.metrics.RunFinished(metrics.KindPlan, cluster, result, time.Since(started))
		}
		a.board.addRun(cluster, httpapi.Run{Kind: string(KindPlan), Commit: p.Head, PR: p.Number, Result: string(result), Detail: desc, Duration: time.Since(started)})
		return clusterPlan{sec: sec, status: a.planStatus(p, statusCtx, gh.StateFailure, desc, "")}
	}
	if slices.Contains(trees.removed, cluster) {
		msg := fmt.Sprintf("this pull request deletes the cluster directory %s. Merging it destroys nothing: the machines and the cluster keep running, no longer managed by the agent. "+
			"To destroy the cluster, first merge a pull request that adds a %s file to the directory whose first line is the cluster's name, and review its destroy plan.", cluster, DestroyMarker)
		sec.Result, sec.Summary, sec.Body = "removed", "directory deleted: the cluster keeps running", msg+"\n"
		a.board.addRun(cluster, httpapi.Run{Kind: string(KindPlan), Commit: p.Head, PR: p.Number, Result: "removed", Detail: "directory deleted: nothing destroyed", Duration: time.Since(started)})
		return clusterPlan{sec: sec, status: a.planStatus(p, statusCtx, gh.StateSuccess, "directory deleted: the cluster keeps running, nothing is destroyed", "")}
	}
	if why := a.nameConflict(p.Head, base, cluster, trees.dirs, trees.baseDirs); why != "" {
		a.log.Warn("pull request not planned: cluster name in use", "pr", p.Number, "cluster", cluster, "commit", p.Head, "reason", why)
		return fail(metrics.ResultRefused, "not planned: "+why, "not planned: "+why)
	}
	destroy := a.hasDestroyMarker(p.Head, cluster)
	if destroy {
		why, err := a.destroyRefusal(ctx, cluster, trees.baseDirs)
		if err != nil {
			msg := a.redact.String(err.Error())
			return fail(metrics.ResultFailure, msg, msg)
		}
		if why != "" {
			a.log.Warn("destroy not planned", "pr", p.Number, "cluster", cluster, "commit", p.Head, "reason", why)
			return fail(metrics.ResultRefused, "destroy refused: "+why, "destroy refused: "+why)
		}
	}
	why, err := a.endpointPolicy(p.Head, base, cluster)
	if err != nil {
		// Fail closed: the endpoints could not be read, so nothing is
		// asked of them. (The plan would report this load error itself.)
		msg := a.redact.String(err.Error())
		return fail(metrics.ResultFailure, msg, msg)
	}
	if why != "" {
		a.log.Warn("pull request not planned: endpoint policy", "pr", p.Number, "cluster", cluster, "commit", p.Head, "reason", a.redact.String(why))
		return fail(metrics.ResultRefused, "not planned: "+why, "not planned: "+why)
	}
	if a.sched.Busy(cluster) {
		sec.Summary = "(the cluster is being converged right now; this plan may change) "
	}
	var pl *plan.Plan
	err = a.withFiles(p.Head, cluster, func(files fs.FS) error {
		var err error
		pl, err = a.runner.Plan(ctx, cluster, files)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return clusterPlan{sec: sec}
		}
		msg := a.redact.String(err.Error())
		out := settle(verdict{plan: true, settled: reconcile.Settle(err), reason: firstLine(msg), detail: msg,
			attempt: attempt, attempts: a.retry.Attempts, backoff: a.retry.Backoff(attempt)})
		if out.again == 0 {
			return fail(out.result, out.desc, msg)
		}
		a.log.Warn("plan failed; retrying", "pr", p.Number, "cluster", cluster, "attempt", attempt, "in", out.again, "error", firstLine(msg))
		sec.Result, sec.Summary, sec.Body = string(out.result), out.desc, "```\n"+msg+"\n```\n"
		if a.metrics != nil {
			a.metrics.RunFinished(metrics.KindPlan, cluster, out.result, time.Since(started))
		}
		a.board.addRun(cluster, httpapi.Run{Kind: string(KindPlan), Commit: p.Head, PR: p.Number, Result: string(out.result), Detail: out.desc, Duration: time.Since(started)})
		return clusterPlan{sec: sec, retry: out.again, status: a.planStatus(p, statusCtx, out.state, out.desc, "")}
	}
	pl.Commit = p.Head
	md := report.Markdown(pl)
	id := a.board.storePlan(cluster, p.Head, "plan", md)
	sec.Body, sec.FullURL = md, a.link(id)
	sec.Removes = plan.Removals(pl)
	sec.Summary += pl.Summary()
	result, state, desc := metrics.ResultSuccess, gh.StateSuccess, pl.Summary()
	sec.Result = "planned"
	if destroy {
		// A destroy is always reviewed: a merge destroys only what this
		// plan shows (see review.approve).
		sec.Result, desc = "destroy", "destroy: "+pl.Summary()
		sec.Summary = "**destroy:** merging deletes every machine and resource below, and the cluster's identity. " + sec.Summary
	}
	if pl.Incomplete {
		result, state = metrics.ResultFailure, gh.StateFailure
		desc = "incomplete: " + pl.IncompleteReasons[0]
		sec.Result = "incomplete"
	}
	if len(pl.Refusals) > 0 {
		result, state = metrics.ResultRefused, gh.StateFailure
		desc = "refused: " + pl.Refusals[0].Reason
		sec.Result = "refused"
	}
	if a.metrics != nil {
		a.metrics.RunFinished(metrics.KindPlan, cluster, result, time.Since(started))
	}
	a.board.record(cluster, func(s *httpapi.ClusterStatus) {
		s.LastPlan = &httpapi.RunSummary{Commit: p.Head, Result: string(result), Time: time.Now(), PlanID: id}
	})
	run := httpapi.Run{Kind: string(KindPlan), Commit: p.Head, PR: p.Number, Result: string(result), Detail: pl.Summary(), Duration: time.Since(started), PlanID: id}
	if result != metrics.ResultSuccess {
		run.Detail = desc
	}
	a.board.addRun(cluster, run)
	return clusterPlan{sec: sec, plan: pl,
		status: a.planStatus(p, statusCtx, state, desc, a.link(id))}
}

func shorts(shas []string) []string {
	out := make([]string, len(shas))
	for i, s := range shas {
		out[i] = "`" + short(s) + "`"
	}
	return out
}

// diskFull reports whether err comes from a disk with no space or quota
// left (the state backend's, the journal's, the outbox's).
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
