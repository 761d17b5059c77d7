package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	gh "github.com/taloscluster/taloscluster/report/github"
	"github.com/taloscluster/taloscluster/report/outbox"
)

// How the agent reports: every status and comment goes into the outbox
// (report/outbox), kept in the state backend, and is taken out once GitHub
// accepted it; a failure is retried with backoff, in order per commit, and
// survives a restart.
//
// While GitHub's API is rate limited, git fetches and converges go on
// (they need no API); pull requests are not listed nor planned until the
// limit is over, and the outbox holds its reports until then. The state
// shows on /readyz, and each condition is logged once a minute or when it
// changes, not on every poll.

// RateProber is an optional capability of a Forge: reading the rate limit
// without spending it (GitHub's GET /rate_limit). While the primary limit
// is exhausted the agent asks at most once a poll interval, so it learns
// early when the limit is back.
type RateProber interface {
	RateLimit(ctx context.Context) (gh.Rate, error)
}

// quietLog lets a message on one topic through when its cause changed or a
// minute passed since it last did, so a lasting condition is logged once a
// minute rather than on every poll.
type quietLog struct {
	mu   sync.Mutex
	last map[string]quietEntry
}

type quietEntry struct {
	cause string
	at    time.Time
}

// quietEvery is how often a lasting condition is logged again.
const quietEvery = time.Minute

func (q *quietLog) allow(topic, cause string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	if e, ok := q.last[topic]; ok && e.cause == cause && now.Sub(e.at) < quietEvery {
		return false
	}
	if q.last == nil {
		q.last = map[string]quietEntry{}
	}
	q.last[topic] = quietEntry{cause: cause, at: now}
	return true
}

// forget makes the next message on topic go through.
func (q *quietLog) forget(topic string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.last, topic)
}

// apiLimited returns the rate limit GitHub's API is under now, or nil.
func (a *Agent) apiLimited() *gh.RateLimitedError {
	a.mu.Lock()
	l := a.apiLimit
	a.mu.Unlock()
	if l == nil {
		return nil
	}
	if time.Now().Before(l.Until) {
		return l
	}
	a.limitOver(l)
	return nil
}

// limitOver records that the rate limit l is over.
func (a *Agent) limitOver(l *gh.RateLimitedError) {
	a.mu.Lock()
	was := a.apiLimit == l
	if was {
		a.apiLimit = nil
	}
	a.mu.Unlock()
	if was {
		a.log.Info("GitHub API rate limit over", "reports_waiting", a.reports.Pending().Count)
		a.quiet.forget("github-limit")
		a.quiet.forget("github-pending")
	}
}

// noteAPI records what an error of a GitHub call says of the rate limit,
// and reports whether it is a rate limit.
func (a *Agent) noteAPI(err error) bool {
	l, ok := gh.RateLimited(err)
	if !ok {
		return false
	}
	if !time.Now().Before(l.Until) {
		return true // already over: the next call goes out
	}
	a.mu.Lock()
	if a.apiLimit == nil || l.Until.After(a.apiLimit.Until) {
		a.apiLimit = l
	}
	cur := a.apiLimit
	a.mu.Unlock()
	if a.quiet.allow("github-limit", cur.Error()) {
		a.log.Warn("GitHub API rate limited: git fetches and converges go on; pull requests are planned, and statuses and comments posted, after the limit",
			"until", cur.Until.UTC().Format(time.RFC3339), "secondary", cur.Secondary)
	}
	return true
}

// probeLimit asks GitHub, without spending the limit, whether an exhausted
// primary limit is back, at most once a poll interval.
func (a *Agent) probeLimit(ctx context.Context) {
	l := a.apiLimited()
	p, ok := a.forge.(RateProber)
	if l == nil || l.Secondary || !ok {
		return
	}
	a.mu.Lock()
	due := time.Since(a.lastProbe) >= a.cfg.Repository.PollInterval.D()
	if due {
		a.lastProbe = time.Now()
	}
	a.mu.Unlock()
	if !due {
		return
	}
	rate, err := p.RateLimit(ctx)
	if err != nil || rate.Remaining == 0 {
		return
	}
	a.limitOver(l)
}

// setStatus queues a commit status in the outbox and delivers what is
// due. A status queued replaces a queued one of the same commit and
// context.
func (a *Agent) setStatus(ctx context.Context, sha, statusContext, state, description, targetURL string) {
	a.report(ctx, outbox.Report{Kind: outbox.Status, Commit: sha, Context: statusContext, State: state,
		Description: a.redact.String(description), TargetURL: targetURL})
}

// comment queues a one-off comment on pull request pr, or, when pr is 0,
// on the pull request merged as sha, and delivers what is due.
func (a *Agent) comment(ctx context.Context, pr int, sha, body string) {
	a.report(ctx, outbox.Report{Kind: outbox.Comment, PR: pr, Commit: sha, Body: a.redact.String(body)})
}

// report queues rs at once and asks for a delivery pass.
func (a *Agent) report(ctx context.Context, rs ...outbox.Report) {
	a.reports.Add(ctx, rs...)
	a.deliver(ctx)
}

// planStatus returns the commit status of a plan of pull request p, at
// its head: a plan report, which gives way to the reports of merges when
// the outbox is full.
func (a *Agent) planStatus(p gh.PR, statusContext, state, description, targetURL string) *outbox.Report {
	return &outbox.Report{Kind: outbox.Status, Commit: p.Head, PR: p.Number, Plan: true, Context: statusContext,
		State: state, Description: a.redact.String(description), TargetURL: targetURL}
}

// maxClustersPerPR is the most clusters a pull request may change and be
// planned.
func (a *Agent) maxClustersPerPR() int {
	if a.cfg.MaxClustersPerPR > 0 {
		return a.cfg.MaxClustersPerPR
	}
	return DefaultMaxClustersPerPR
}

// startDeliverer starts the goroutine that sends the outbox's reports, so
// that a slow or hung GitHub never holds up a poll or a converge: adding a
// report only asks for a delivery pass.
func (a *Agent) startDeliverer(ctx context.Context) {
	a.kick = make(chan struct{}, 1)
	a.flushReq = make(chan chan struct{})
	a.delivererDone = make(chan struct{})
	go func() {
		defer close(a.delivererDone)
		for {
			var done chan struct{}
			select {
			case <-ctx.Done():
				return
			case <-a.kick:
			case done = <-a.flushReq:
			}
			a.deliverNow(ctx)
			if done != nil {
				close(done)
			}
		}
	}()
}

// deliver asks for a delivery pass and does not wait for it.
func (a *Agent) deliver(context.Context) {
	select {
	case a.kick <- struct{}{}:
	default: // a pass is asked for already
	}
}

// flushReports runs a delivery pass and waits until it is over, or ctx
// ends, or the agent is closed.
func (a *Agent) flushReports(ctx context.Context) {
	done := make(chan struct{})
	select {
	case a.flushReq <- done:
	case <-ctx.Done():
		return
	case <-a.delivererDone:
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	case <-a.delivererDone:
	}
}

// deliverNow sends the reports that are due, unless GitHub's API is rate
// limited. (The outbox metrics follow every change of the outbox: see
// New.)
func (a *Agent) deliverNow(ctx context.Context) {
	if a.apiLimited() == nil {
		if n := a.reports.Deliver(ctx, a.send); n > 0 {
			a.log.Debug("reports delivered", "count", n)
		}
	}
}

// send delivers one report. While GitHub's API is rate limited it holds
// every report back.
func (a *Agent) send(ctx context.Context, r outbox.Report) error {
	if l := a.apiLimited(); l != nil {
		return fmt.Errorf("%w: %w", outbox.ErrHold, l)
	}
	var err error
	switch r.Kind {
	case outbox.Status:
		err = a.forge.SetStatus(ctx, r.Commit, r.Context, r.State, r.Description, r.TargetURL)
	case outbox.PlanComment:
		err = a.forge.UpsertComments(ctx, r.PR, r.Bodies)
	case outbox.Comment:
		pr := r.PR
		if pr == 0 {
			var ok bool
			pr, ok, err = a.forge.MergedPR(ctx, r.Commit)
			if err == nil && !ok {
				return nil // a merge that came through no pull request gets no comment
			}
		}
		if err == nil {
			err = a.forge.Comment(ctx, pr, r.Key, r.Body)
		}
	default:
		a.log.Error("dropping a report of unknown kind", "kind", r.Kind)
		return nil
	}
	if err != nil && a.noteAPI(err) {
		if l := a.apiLimited(); l != nil {
			if a.quiet.allow("github-pending", l.Error()) {
				p := a.reports.Pending()
				a.log.Info("reports wait until the GitHub rate limit is over", "until", l.Until.UTC().Format(time.RFC3339), "waiting", p.Count)
			}
			return fmt.Errorf("%w: %w", outbox.ErrHold, l)
		}
	}
	if err != nil {
		return redactedError{err: err, msg: a.redact.String(err.Error())}
	}
	return nil
}

// redactedError is err with a message that holds no secret, for the
// outbox's logs and page; the error itself stays for classification.
type redactedError struct {
	err error
	msg string
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

// mergedPR finds the pull request merged as sha; while the API is rate
// limited it fails at once with the limit.
func (a *Agent) mergedPR(ctx context.Context, sha string) (int, bool, error) {
	if l := a.apiLimited(); l != nil {
		return 0, false, l
	}
	pr, ok, err := a.forge.MergedPR(ctx, sha)
	if err != nil {
		a.noteAPI(err)
	}
	return pr, ok, err
}
