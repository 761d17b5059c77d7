package forge

import (
	"context"
	"net"
	"net/http"
	"path"
	"slices"
	"time"

	"github.com/taloscluster/taloscluster/lab/internal/connabort"
)

// AnyOp is the operation pattern matching every operation.
const AnyOp = "*"

type failRule struct {
	pattern string
	left    int
	status  int
}

type secondaryRule struct {
	pattern    string
	left       int
	retryAfter time.Duration
}

type latencyRule struct {
	pattern string
	d       time.Duration
}

// dropKind is a fault that keeps the answer from the client.
type dropKind string

const (
	dropHang  dropKind = "hang"       // never answer
	dropReset dropKind = "reset"      // reset the connection, without effect
	dropLost  dropKind = "lost-reply" // take effect, then reset the connection
)

type dropRule struct {
	pattern string
	left    int
	kind    dropKind
}

type faultTable struct {
	fail      []*failRule
	secondary []*secondaryRule
	latency   []latencyRule
	drop      []*dropRule
}

// matchOp reports whether op matches pattern, a path.Match pattern such as
// "pulls.get", "comments.*" or AnyOp.
func matchOp(pattern, op string) bool {
	ok, err := path.Match(pattern, op)
	return err == nil && ok
}

// gitOps are the operation names of git smart HTTP (see Handler).
var gitOps = []string{"git.upload-pack.refs", "git.upload-pack", "git.receive-pack.refs", "git.receive-pack"}

// Operations returns the names of every operation the forge serves (see
// Handler), sorted: the names fault patterns match against.
func (f *Forge) Operations() []string {
	var out []string
	for _, rt := range f.routes {
		if !slices.Contains(out, rt.op) {
			out = append(out, rt.op)
		}
	}
	out = append(out, gitOps...)
	slices.Sort(out)
	return out
}

// MatchesOperation reports whether an operation pattern, as Fail,
// SecondaryRateLimit, Latency, Hang, ResetConn and LoseReply take it, is well formed and matches at
// least one operation of the forge.
func (f *Forge) MatchesOperation(pattern string) bool {
	for _, op := range f.Operations() {
		if matchOp(pattern, op) {
			return true
		}
	}
	return false
}

// Fail makes the next n requests whose operation matches opPattern (a
// path.Match pattern over operation names, such as "pulls.get",
// "comments.*" or AnyOp) fail with the given HTTP status (500 if it is not
// one), before they have any effect. Rules queue up in the order they are
// given. Git operations can fail too.
func (f *Forge) Fail(opPattern string, n int, status int) {
	if n <= 0 {
		return
	}
	if status < 100 || status > 599 {
		status = http.StatusInternalServerError
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults.fail = append(f.faults.fail, &failRule{pattern: opPattern, left: n, status: status})
}

// SecondaryRateLimit makes the next n API requests whose operation matches
// opPattern fail, without effect, the way GitHub answers a client that hit
// a secondary rate limit: 403 with a Retry-After header (retryAfter rounded
// up to whole seconds) and the documentation URL go-github recognises as
// an *github.AbuseRateLimitError. The requests count against the primary
// limit.
func (f *Forge) SecondaryRateLimit(opPattern string, n int, retryAfter time.Duration) {
	if n <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults.secondary = append(f.faults.secondary, &secondaryRule{pattern: opPattern, left: n, retryAfter: retryAfter})
}

// PrimaryExhausted uses up every user's primary rate limit until reset:
// until then every counted API request is answered 403 with
// X-RateLimit-Remaining: 0 (go-github's *github.RateLimitError), and from
// then on each user has a fresh budget.
func (f *Forge) PrimaryExhausted(reset time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.users {
		a.used = f.limit
		a.reset = reset
	}
}

// Latency delays every request whose operation matches opPattern by d
// before it is handled (a client that gives up meanwhile gets no answer and
// the request has no effect). A later rule for the same pattern replaces
// the earlier one; zero removes it. When several patterns match, the
// longest delay applies.
func (f *Forge) Latency(opPattern string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules := f.faults.latency[:0]
	for _, l := range f.faults.latency {
		if l.pattern != opPattern {
			rules = append(rules, l)
		}
	}
	if d > 0 {
		rules = append(rules, latencyRule{pattern: opPattern, d: d})
	}
	f.faults.latency = rules
}

// Hang makes the next n requests whose operation matches opPattern (see
// Fail) never answer, without effect: they are held until the client gives
// up, or until Close is called, which resets their connections. API and git
// operations can hang.
func (f *Forge) Hang(opPattern string, n int) { f.addDrop(opPattern, n, dropHang) }

// ResetConn makes the next n requests whose operation matches opPattern
// (see Fail) get no answer: the connection is aborted with a TCP reset
// before the request has any effect, as when a proxy or the server
// crashes.
func (f *Forge) ResetConn(opPattern string, n int) { f.addDrop(opPattern, n, dropReset) }

// LoseReply makes the next n requests whose operation matches opPattern
// (see Fail) take full effect (the comment or status is stored, the push
// is received) and then lose their answer: the connection is aborted with
// a TCP reset instead.
func (f *Forge) LoseReply(opPattern string, n int) { f.addDrop(opPattern, n, dropLost) }

func (f *Forge) addDrop(opPattern string, n int, kind dropKind) {
	if n <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults.drop = append(f.faults.drop, &dropRule{pattern: opPattern, left: n, kind: kind})
}

// Close releases the requests held by Hang (their connections are reset);
// later hangs end at once. The forge keeps serving otherwise.
func (f *Forge) Close() {
	f.closeOnce.Do(func() { close(f.closed) })
}

// ConnContext is a hook for the http.Server.ConnContext of the server
// serving Handler. ResetConn and LoseReply need it to reset HTTP/2
// connections; HTTP/1 connections are reset without it.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return connabort.ConnContext(ctx, c)
}

// takeDrop consumes a hang, reset or lost-reply rule matching op; it
// returns "" when none applies. The caller holds f.mu.
func (t *faultTable) takeDrop(op string) dropKind {
	for _, r := range t.drop {
		if r.left > 0 && matchOp(r.pattern, op) {
			r.left--
			return r.kind
		}
	}
	return ""
}

// hold keeps a hung request until its client gives up or the forge
// closes: it never gets an answer.
func (f *Forge) hold(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
		// The client is gone. Aborting the handler drops the request alone,
		// not an HTTP/2 connection the client may share with others.
		panic(http.ErrAbortHandler)
	case <-f.closed:
		connabort.HTTP(w, r)
	}
}

// takeFail consumes a failure rule matching op. The caller holds f.mu.
func (t *faultTable) takeFail(op string) *failRule {
	for _, r := range t.fail {
		if r.left > 0 && matchOp(r.pattern, op) {
			r.left--
			return r
		}
	}
	return nil
}

// takeSecondary consumes a secondary-rate-limit rule matching op. The
// caller holds f.mu.
func (t *faultTable) takeSecondary(op string) *secondaryRule {
	for _, r := range t.secondary {
		if r.left > 0 && matchOp(r.pattern, op) {
			r.left--
			return r
		}
	}
	return nil
}

// latencyOf returns the delay for op. The caller holds f.mu.
func (t *faultTable) latencyOf(op string) time.Duration {
	var d time.Duration
	for _, l := range t.latency {
		if matchOp(l.pattern, op) {
			d = max(d, l.d)
		}
	}
	return d
}

// delay applies the latency configured for op. It reports false when the
// client gave up while waiting.
func (f *Forge) delay(r *http.Request, op string) bool {
	f.mu.Lock()
	d := f.faults.latencyOf(op)
	f.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}
