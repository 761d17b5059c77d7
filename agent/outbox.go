package agent

import (
	"context"
	"slices"
	"sync"
	"time"

	gh "github.com/taloscluster/taloscluster/report/github"
)

// What the agent does while GitHub's API is rate limited: git fetches and
// converges go on (they need no API); pull requests are not listed nor
// planned until the limit is over; the statuses and comments that could
// not be posted wait in an outbox, the newest status per commit and
// context, and are posted, comments first, when the limit is over. The
// state shows on /readyz, and each condition is logged once a minute or
// when it changes, not on every poll.

// RateProber is an optional capability of a Forge: reading the rate limit
// without spending it (GitHub's GET /rate_limit). While the primary limit
// is exhausted the agent asks at most once a poll interval, so it learns
// early when the limit is back.
type RateProber interface {
	RateLimit(ctx context.Context) (gh.Rate, error)
}

// Bounds of the outbox: beyond them the oldest entries are dropped.
const (
	maxPendingStatuses = 1000
	maxPendingComments = 100
)

// pendingStatus is a commit status waiting for the rate limit.
type pendingStatus struct {
	sha, context, state, description, targetURL string
}

// pendingComment is a comment waiting for the rate limit: on pull request
// pr, or when pr is 0 on the pull request merged as sha.
type pendingComment struct {
	pr        int
	sha, body string
}

// outbox holds what waits for the rate limit.
type outbox struct {
	mu       sync.Mutex
	statuses []pendingStatus // oldest first, one per commit and context
	comments []pendingComment
}

func (o *outbox) dropStatus(sha, context string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.statuses = slices.DeleteFunc(o.statuses, func(p pendingStatus) bool { return p.sha == sha && p.context == context })
}

// addStatus queues s in place of any status waiting for the same commit
// and context; front puts it first (a status taken out to be posted that
// could not be, unless a newer one came meanwhile).
func (o *outbox) addStatus(s pendingStatus, front bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if front {
		if slices.ContainsFunc(o.statuses, func(p pendingStatus) bool { return p.sha == s.sha && p.context == s.context }) {
			return
		}
		o.statuses = append([]pendingStatus{s}, o.statuses...)
	} else {
		o.statuses = slices.DeleteFunc(o.statuses, func(p pendingStatus) bool { return p.sha == s.sha && p.context == s.context })
		o.statuses = append(o.statuses, s)
	}
	if n := len(o.statuses) - maxPendingStatuses; n > 0 {
		o.statuses = o.statuses[n:]
	}
}

func (o *outbox) takeStatus() (pendingStatus, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.statuses) == 0 {
		return pendingStatus{}, false
	}
	s := o.statuses[0]
	o.statuses = o.statuses[1:]
	return s, true
}

func (o *outbox) addComment(c pendingComment, front bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if front {
		o.comments = append([]pendingComment{c}, o.comments...)
	} else {
		o.comments = append(o.comments, c)
	}
	if n := len(o.comments) - maxPendingComments; n > 0 {
		o.comments = o.comments[n:]
	}
}

func (o *outbox) takeComment() (pendingComment, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.comments) == 0 {
		return pendingComment{}, false
	}
	c := o.comments[0]
	o.comments = o.comments[1:]
	return c, true
}

func (o *outbox) size() (statuses, comments int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.statuses), len(o.comments)
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
		statuses, comments := a.out.size()
		a.log.Info("GitHub API rate limit over", "statuses_waiting", statuses, "comments_waiting", comments)
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

// setStatus sets a commit status now, or, while the API is rate limited,
// queues it to be set after the limit. A status set or queued replaces a
// queued one of the same commit and context. Other errors are ignored as
// before: a status is a report, not a step.
func (a *Agent) setStatus(ctx context.Context, sha, statusContext, state, description, targetURL string) {
	s := pendingStatus{sha: sha, context: statusContext, state: state, description: a.redact.String(description), targetURL: targetURL}
	a.statusMu.Lock()
	defer a.statusMu.Unlock()
	a.out.dropStatus(sha, statusContext)
	if l := a.apiLimited(); l != nil {
		a.queueStatus(s, l)
		return
	}
	err := a.forge.SetStatus(ctx, s.sha, s.context, s.state, s.description, s.targetURL)
	if err != nil && a.noteAPI(err) {
		if l := a.apiLimited(); l != nil {
			a.queueStatus(s, l)
		}
	}
}

func (a *Agent) queueStatus(s pendingStatus, l *gh.RateLimitedError) {
	a.out.addStatus(s, false)
	statuses, comments := a.out.size()
	if a.quiet.allow("github-pending", l.Error()) {
		a.log.Info("status pending until the GitHub rate limit is over", "commit", s.sha, "context", s.context, "state", s.state,
			"until", l.Until.UTC().Format(time.RFC3339), "statuses_waiting", statuses, "comments_waiting", comments)
	}
}

// comment posts a one-off comment on pull request pr, or, when pr is 0, on
// the pull request merged as sha; while the API is rate limited it is
// queued.
func (a *Agent) comment(ctx context.Context, pr int, sha, body string) {
	c := pendingComment{pr: pr, sha: sha, body: a.redact.String(body)}
	if l := a.apiLimited(); l != nil {
		a.queueComment(c, l)
		return
	}
	if err := a.postComment(ctx, c); err != nil && a.noteAPI(err) {
		if l := a.apiLimited(); l != nil {
			a.queueComment(c, l)
		}
	}
}

func (a *Agent) queueComment(c pendingComment, l *gh.RateLimitedError) {
	a.out.addComment(c, false)
	statuses, comments := a.out.size()
	if a.quiet.allow("github-pending", l.Error()) {
		a.log.Info("comment pending until the GitHub rate limit is over", "pr", c.pr, "commit", c.sha,
			"until", l.Until.UTC().Format(time.RFC3339), "statuses_waiting", statuses, "comments_waiting", comments)
	}
}

// postComment posts c, finding its pull request first when it has none.
// A merge that came through no pull request gets no comment.
func (a *Agent) postComment(ctx context.Context, c pendingComment) error {
	if c.pr == 0 {
		pr, ok, err := a.forge.MergedPR(ctx, c.sha)
		if err != nil || !ok {
			return err
		}
		c.pr = pr
	}
	return a.forge.Comment(ctx, c.pr, c.body)
}

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

// flush posts what waits in the outbox, comments first (a final status
// tells that the run's report is there), unless the API is still rate
// limited. What the limit refuses again goes back.
func (a *Agent) flush(ctx context.Context) {
	if a.apiLimited() != nil {
		return
	}
	posted := 0
	for {
		c, ok := a.out.takeComment()
		if !ok {
			break
		}
		if err := a.postComment(ctx, c); err != nil {
			if a.noteAPI(err) {
				a.out.addComment(c, true)
				return
			}
			a.log.Warn("posting a comment that waited for the rate limit", "pr", c.pr, "commit", c.sha, "error", a.redact.String(err.Error()))
			continue
		}
		posted++
	}
	for {
		a.statusMu.Lock()
		s, ok := a.out.takeStatus()
		if !ok {
			a.statusMu.Unlock()
			break
		}
		err := a.forge.SetStatus(ctx, s.sha, s.context, s.state, s.description, s.targetURL)
		if err != nil && a.noteAPI(err) {
			a.out.addStatus(s, true)
			a.statusMu.Unlock()
			return
		}
		a.statusMu.Unlock()
		if err == nil {
			posted++
		}
	}
	if posted > 0 {
		a.log.Info("posted the statuses and comments that waited for the GitHub rate limit", "count", posted)
	}
}
