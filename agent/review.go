package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/report"
	gh "github.com/taloscluster/taloscluster/report/github"
)

// ErrPlanNotReviewed is wrapped by the error that stops a converge when
// require_reviewed_plan is set and the plan about to run is not the plan
// shown on the merged pull request.
var ErrPlanNotReviewed = errors.New("the plan about to run is not the reviewed plan")

// maxShown bounds the plans remembered as shown on pull requests.
const maxShown = 500

// shownKey names the plan of one cluster on one pull request.
type shownKey struct {
	cluster string
	pr      int
}

// shownPlan is a plan the agent showed on a pull request.
type shownPlan struct {
	plan   *plan.Plan
	commit string // the head it was planned at
}

// approvedPlan is a plan a converge of a job was allowed to run, with how
// it compared with the reviewed plan, kept so a retry of the job may run
// what is left of it and report the comparison of the whole.
type approvedPlan struct {
	plan     *plan.Plan
	commit   string
	shown    shownPlan
	hasShown bool
	diffs    []string
}

// rememberShown records the plan now shown for a cluster on a pull
// request; a nil plan records that none is shown (the comment shows an
// error or a refusal instead).
func (a *Agent) rememberShown(cluster string, pr int, commit string, pl *plan.Plan) {
	k := shownKey{cluster, pr}
	a.mu.Lock()
	defer a.mu.Unlock()
	if pl == nil {
		if _, ok := a.shown[k]; ok {
			delete(a.shown, k)
			a.shownOrder = slices.DeleteFunc(a.shownOrder, func(o shownKey) bool { return o == k })
		}
		return
	}
	if _, ok := a.shown[k]; !ok {
		a.shownOrder = append(a.shownOrder, k)
	}
	a.shown[k] = shownPlan{plan: pl, commit: commit}
	for len(a.shownOrder) > maxShown {
		delete(a.shown, a.shownOrder[0])
		a.shownOrder = a.shownOrder[1:]
	}
}

// shownPlanOf returns the last plan shown for a cluster on a pull
// request: the one this agent remembers, else the one the cluster's state
// keeps (shown before a restart, or by another replica).
func (a *Agent) shownPlanOf(ctx context.Context, cluster string, pr int) (shownPlan, bool) {
	a.mu.Lock()
	s, ok := a.shown[shownKey{cluster, pr}]
	a.mu.Unlock()
	if ok {
		return s, true
	}
	return a.storedShown(ctx, cluster, pr)
}

func (a *Agent) setApproved(cluster, commit string, ap approvedPlan) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if prev, ok := a.approved[cluster]; ok && prev.commit == commit {
		return // a retry keeps the plan of the first attempt
	}
	ap.commit = commit
	a.approved[cluster] = ap
}

func (a *Agent) approvedOf(cluster, commit string) (approvedPlan, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.approved[cluster]
	return p, ok && p.commit == commit
}

func (a *Agent) forgetApproved(cluster, commit string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.approved[cluster]; ok && p.commit == commit {
		delete(a.approved, cluster)
	}
}

// review checks the plan a converge is about to run against the plan
// people reviewed on the merged pull request, and keeps what it found for
// the comment and the status. The engine calls approve before Converge
// returns; the other fields are read after.
type review struct {
	a *Agent
	// ctx is the run's, for reading the plans kept in the state.
	ctx     context.Context
	job     Job
	attempt int
	// prs is the merged pull request of each covered commit, 0 when none
	// was found.
	prs []int
	// lookupErr is why the pull request of the newest covered commit
	// could not be found.
	lookupErr error
	// limited[i] is set when GitHub's rate limit kept the pull request of
	// covered commit i from being looked up.
	limited []bool

	// ran is the plan approve was called with, or on a resumed retry the
	// whole plan the first attempt was allowed to run; nil when approve
	// was not called.
	ran *plan.Plan
	// shown is the plan shown on the pull request of the newest covered
	// merge, the one the run is checked against.
	shown    shownPlan
	hasShown bool
	// diffs lists how ran differs from shown; with no plan shown, every
	// step of ran.
	diffs []string
	// resumed is set on a retry that runs what is left of the plan an
	// earlier attempt was allowed to run; ran, shown and diffs are then
	// the earlier attempt's.
	resumed bool
	// refused says why approve refused the plan; "" when it did not.
	refused string
	// destroy is set when the run destroys the cluster (the destroy
	// marker): its plan must be the one shown on the merged pull request,
	// whatever require_reviewed_plan says.
	destroy bool
}

// newReview finds the merged pull request of every commit j covers.
func (a *Agent) newReview(ctx context.Context, j Job, attempt int) *review {
	r := &review{a: a, ctx: ctx, job: j, attempt: attempt, prs: make([]int, len(j.Covers)), limited: make([]bool, len(j.Covers))}
	for i, c := range j.Covers {
		pr, ok, err := a.mergedPR(ctx, c)
		_, r.limited[i] = gh.RateLimited(err)
		switch {
		case err != nil && i == 0:
			r.lookupErr = err
		case err == nil && ok:
			r.prs[i] = pr
		}
	}
	return r
}

// approve is the Runner's approve callback of a converge.
func (r *review) approve(pl *plan.Plan) error {
	a := r.a
	r.ran = pl
	if r.job.Kind == KindDrift && !r.destroy {
		return nil // self-heal: converging drift is what self_heal asks for
	}
	if prev, ok := a.approvedOf(r.job.Cluster, r.job.Commit); (r.attempt > 1 || r.job.Waits > 0) && ok && onlyGone(plan.Differences(prev.plan, pl)) {
		// Every step left was in the plan an earlier attempt (or an
		// earlier run of this one, before it waited) was allowed to run.
		r.resumed = true
		r.ran, r.shown, r.hasShown, r.diffs = prev.plan, prev.shown, prev.hasShown, prev.diffs
		return nil
	}
	var shown *plan.Plan
	if len(r.prs) > 0 && r.prs[0] != 0 {
		r.shown, r.hasShown = a.shownPlanOf(r.ctx, r.job.Cluster, r.prs[0])
		shown = r.shown.plan
	}
	r.diffs = plan.Differences(shown, pl)
	mustReview := a.cfg.RequireReviewedPlan || r.destroy
	if r.destroy && !r.hasShown {
		r.diffs = append(r.diffs, "no destroy plan was shown")
	}
	if len(r.diffs) == 0 || (pl.Empty() && !r.destroy) || !mustReview {
		a.setApproved(r.job.Cluster, r.job.Commit, approvedPlan{plan: pl, shown: r.shown, hasShown: r.hasShown, diffs: r.diffs})
		return nil
	}
	if !r.hasShown && r.lookupErr != nil {
		// Whether a plan was reviewed is unknown until GitHub answers.
		return retry.Transient(fmt.Errorf("finding the merged pull request to compare its reviewed plan: %w", r.lookupErr))
	}
	r.refused = r.why()
	return retry.Terminal(fmt.Errorf("%s: %w", r.refused, ErrPlanNotReviewed))
}

// why says in a few words why the plan about to run is not the reviewed
// one.
func (r *review) why() string {
	switch {
	case r.hasShown:
		return "the plan changed since review (" + plural(len(r.diffs), "difference", "differences") + ")"
	case len(r.prs) == 0 || r.prs[0] == 0:
		return "no reviewed plan: the commit was not merged through a pull request"
	default:
		if _, kept := r.a.progress.(ShownStore); kept {
			return fmt.Sprintf("no reviewed plan: none was shown on #%d (none is kept in the cluster's state)", r.prs[0])
		}
		return fmt.Sprintf("no reviewed plan: none was shown on #%d since the agent started", r.prs[0])
	}
}

// note is the status's word on the review after a converge that ran: ""
// when it ran the reviewed plan or needs none.
func (r *review) note() string {
	if r.ran == nil || r.job.Kind == KindDrift || len(r.diffs) == 0 {
		return ""
	}
	if r.hasShown {
		return "the plan changed since review (" + plural(len(r.diffs), "difference", "differences") + ")"
	}
	if len(r.prs) > 0 && r.prs[0] != 0 {
		return "no plan was shown on #" + strconv.Itoa(r.prs[0])
	}
	return "" // not merged through a pull request: nothing to review on
}

// onlyGone reports whether every difference is a step or refusal gone.
func onlyGone(diffs []string) bool {
	for _, d := range diffs {
		if !strings.HasPrefix(d, "- ") {
			return false
		}
	}
	return true
}

// Bounds of the review part of a converge comment.
const (
	maxDiffLines   = 60
	maxDiffLine    = 300
	maxCommentPlan = 30000
)

// section is the review part of the converge comment on pull request pr
// (the merge at index i of the job's covers): the plan that ran and how it
// differs from the plan shown on that pull request.
func (r *review) section(i, pr int, fullURL string) string {
	if r.ran == nil || r.job.Kind == KindDrift {
		return ""
	}
	var b strings.Builder
	if r.resumed {
		b.WriteString("Retries ran what was left of the plan the first attempt was allowed to run; the plan below is the whole of it.\n\n")
	}
	shown, ok := r.shown, r.hasShown
	diffs := r.diffs
	if i != 0 {
		shown, ok = r.a.shownPlanOf(r.ctx, r.job.Cluster, pr)
		var sp *plan.Plan
		if ok {
			sp = shown.plan
		}
		diffs = plan.Differences(sp, r.ran)
	}
	ran := "The plan that ran"
	if r.refused != "" {
		ran = "The plan that would have run"
	}
	if r.refused != "" && i == 0 {
		if r.destroy {
			b.WriteString("**Refused:** a destroy runs only the destroy plan shown on its pull request, and " + r.refused + ". Nothing was destroyed. " +
				"To destroy, open a pull request that adds the marker, let the agent show its destroy plan, and merge it.\n\n")
		} else {
			b.WriteString("**Refused:** `require_reviewed_plan` is set and " + r.refused + ". Nothing was changed. " +
				"To converge, open a pull request that changes the cluster's directory, let the agent show its plan, and merge it.\n\n")
		}
	}
	switch {
	case len(diffs) == 0 && ok:
		fmt.Fprintf(&b, "%s is the plan shown on this pull request at `%s`%s.\n", ran, short(shown.commit), r.commits(shown.commit))
		return b.String()
	case len(diffs) == 0:
		return b.String() // nothing to run, nothing was shown
	case ok:
		fmt.Fprintf(&b, "**Plan changed since review:** %s differs from the plan shown on this pull request at `%s`%s (a commit pushed after the plan, another merge or drift came in between):\n\n",
			strings.ToLower(ran[:1])+ran[1:], short(shown.commit), r.commits(shown.commit))
	default:
		if _, kept := r.a.progress.(ShownStore); kept {
			b.WriteString("**Plan changed since review:** no plan of this cluster shown on this pull request is kept in the cluster's state " +
				"(the agent never planned this head), so every step is unreviewed:\n\n")
		} else {
			b.WriteString("**Plan changed since review:** no plan of this cluster was shown on this pull request since the agent started " +
				"(it restarted, or never planned this head), so every step is unreviewed:\n\n")
		}
	}
	b.WriteString(diffBlock(diffs))
	md := report.Markdown(r.ran)
	if len(md) > maxCommentPlan {
		md = cutUTF8(md, maxCommentPlan)
		if strings.Count(md, "```")%2 == 1 {
			md += "\n```"
		}
		if strings.Count(md, "<details>") > strings.Count(md, "</details>") {
			md += "\n</details>"
		}
		md += "\n\n… the plan is too long for a comment"
		if fullURL != "" {
			md += ": [full plan](" + fullURL + ")"
		}
		md += "\n"
	}
	b.WriteString("\n" + ran + ":\n\n" + md)
	return b.String()
}

// commits names the commit the run converges next to the reviewed one, the
// commit its plan was shown at, when they differ: "" when they are one.
func (r *review) commits(reviewed string) string {
	if reviewed == "" || reviewed == r.job.Commit {
		return ""
	}
	verb := "converged"
	if r.refused != "" {
		verb = "it would have converged"
	}
	return fmt.Sprintf(", the reviewed commit; the commit %s is `%s`", verb, short(r.job.Commit))
}

// diffBlock renders differences as a diff code block, bounded, in a fence
// no line can close.
func diffBlock(diffs []string) string {
	lines := make([]string, 0, min(len(diffs), maxDiffLines)+1)
	for i, d := range diffs {
		if i == maxDiffLines {
			lines = append(lines, fmt.Sprintf("… and %d more", len(diffs)-maxDiffLines))
			break
		}
		d = strings.NewReplacer("\r", " ", "\n", " ").Replace(d)
		if len(d) > maxDiffLine {
			d = cutUTF8(d, maxDiffLine) + "…"
		}
		lines = append(lines, d)
	}
	body := strings.Join(lines, "\n")
	fence := "```"
	for strings.Contains(body, fence) {
		fence += "`"
	}
	return fence + "diff\n" + body + "\n" + fence + "\n"
}

// differencesText is the differences for the stored converge page.
func (r *review) differencesText() string {
	if r.ran == nil || r.job.Kind == KindDrift || len(r.diffs) == 0 {
		return ""
	}
	head := "Plan changed since review"
	if !r.hasShown {
		head += " (no plan was shown on the pull request)"
	}
	return head + ":\n\n" + diffBlock(r.diffs) + "\n"
}

// attemptDescription is a status description "attempt n of max failed:
// reason" and suffix, the reason cut so the whole fits.
func attemptDescription(n, of int, reason, suffix string) string {
	prefix := fmt.Sprintf("attempt %d of %d failed: ", n, of)
	return prefix + fitLine(reason, gh.MaxDescription-len(prefix)-len(suffix)) + suffix
}

// fitLine is the first line of s in at most n bytes.
func fitLine(s string, n int) string {
	s = firstLine(s)
	if len(s) <= n {
		return s
	}
	return cutUTF8(s, max(0, n-3)) + "..."
}

func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
