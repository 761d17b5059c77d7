package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/state"
	"github.com/taloscluster/taloscluster/report/outbox"
)

// clock is a settable time.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// github records what it was sent and fails the reports a test chooses.
type github struct {
	sent []string
	fail func(r outbox.Report) error
}

func (g *github) send(_ context.Context, r outbox.Report) error {
	if g.fail != nil {
		if err := g.fail(r); err != nil {
			return err
		}
	}
	g.sent = append(g.sent, label(r))
	return nil
}

func label(r outbox.Report) string {
	switch r.Kind {
	case outbox.Status:
		return r.Commit + ":" + r.Context + "=" + r.State
	case outbox.PlanComment:
		return fmt.Sprintf("plan#%d:%s", r.PR, strings.Join(r.Bodies, "|"))
	}
	return r.Commit + ":comment:" + r.Body
}

type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func open(t *testing.T, store outbox.Store, c *clock, logs *logBuffer, transient func(error) bool) *outbox.Outbox {
	t.Helper()
	o, err := outbox.Open(t.Context(), outbox.Options{Store: store, Now: c.Now, Transient: transient,
		Log:   slog.New(slog.NewTextHandler(logs, nil)),
		Retry: retry.Policy{Initial: time.Minute, Max: 8 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func status(commit, ctx, st string) outbox.Report {
	return outbox.Report{Kind: outbox.Status, Commit: commit, Context: ctx, State: st}
}

func comment(commit, body string) outbox.Report {
	return outbox.Report{Kind: outbox.Comment, Commit: commit, PR: 7, Body: body}
}

var errBadGateway = errors.New("POST comments: 502 Bad Gateway")

func TestFailedCommentHoldsItsStatusOnlyAndSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	store := state.NewDirStore(t.TempDir())
	logs := &logBuffer{}
	o := open(t, store, c, logs, nil)
	o.Add(ctx, status("aaa", "converge", "pending"))
	o.Add(ctx, comment("aaa", "converged"))
	o.Add(ctx, status("aaa", "converge", "success")) // replaces the pending one
	o.Add(ctx, status("bbb", "plan", "success"))

	gh := &github{fail: func(r outbox.Report) error {
		if r.Kind == outbox.Comment {
			return errBadGateway
		}
		return nil
	}}
	if n := o.Deliver(ctx, gh.send); n != 1 {
		t.Fatalf("delivered %d, want 1 (only the other commit's status)", n)
	}
	if want := []string{"bbb:plan=success"}; !slices.Equal(gh.sent, want) {
		t.Fatalf("sent %v, want %v: the final status must wait for its comment", gh.sent, want)
	}
	if !strings.Contains(logs.String(), "report not delivered; trying again") || !strings.Contains(logs.String(), "502 Bad Gateway") {
		t.Fatalf("the failed attempt is not logged:\n%s", logs)
	}
	p := o.Pending()
	if p.Count != 2 || p.Failing != 1 || !strings.Contains(p.LastError, "502") || !p.Oldest.Equal(c.Now()) {
		t.Fatalf("pending %+v", p)
	}

	// The agent restarts: the outbox comes back from the state backend.
	c.Add(30 * time.Second)
	o = open(t, store, c, logs, nil)
	gh.fail = nil
	if n := o.Deliver(ctx, gh.send); n != 0 {
		t.Fatalf("delivered %d before the backoff passed", n)
	}
	c.Add(time.Minute)
	if n := o.Deliver(ctx, gh.send); n != 2 {
		t.Fatalf("delivered %d after the backoff, want 2", n)
	}
	if want := []string{"bbb:plan=success", "aaa:comment:converged", "aaa:converge=success"}; !slices.Equal(gh.sent, want) {
		t.Fatalf("sent %v, want %v", gh.sent, want)
	}
	if p := o.Pending(); p.Count != 0 || !p.Oldest.IsZero() {
		t.Fatalf("pending after delivery %+v", p)
	}
	if _, err := store.GetAgentDoc(ctx, "outbox.json"); err == nil {
		t.Fatal("an empty outbox still has a document")
	}
}

func TestBackoffGrowsAndTransientReportsAreNeverDropped(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	o := open(t, nil, c, &logBuffer{}, nil)
	o.Add(ctx, status("aaa", "converge", "success"))
	tries := 0
	gh := &github{fail: func(outbox.Report) error { tries++; return errBadGateway }}
	var waits []time.Duration
	for range 10 {
		o.Deliver(ctx, gh.send)
		next := o.Reports()[0].Next
		waits = append(waits, next.Sub(c.Now()))
		c.Add(next.Sub(c.Now()))
	}
	if tries != 10 || o.Pending().Count != 1 {
		t.Fatalf("tries %d, pending %d: a transient failure must be retried until delivered", tries, o.Pending().Count)
	}
	if waits[0] >= waits[3] || waits[9] > 8*time.Minute+8*time.Minute/5 {
		t.Fatalf("waits %v do not grow to the cap", waits)
	}
}

func TestTerminalFailureIsDroppedAndLogged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	logs := &logBuffer{}
	gone := errors.New("404 Not Found: pull request 7")
	o := open(t, nil, c, logs, func(err error) bool { return !errors.Is(err, gone) })
	o.Add(ctx, comment("aaa", "hello"))
	gh := &github{fail: func(outbox.Report) error { return gone }}
	for range outbox.TerminalAttempts {
		o.Deliver(ctx, gh.send)
		c.Add(time.Hour)
	}
	if p := o.Pending(); p.Count != 0 || p.Dropped != 1 {
		t.Fatalf("pending %+v, want the report dropped", p)
	}
	if !strings.Contains(logs.String(), "report dropped") || !strings.Contains(logs.String(), "404 Not Found") {
		t.Fatalf("the drop is not logged:\n%s", logs)
	}
}

func TestHoldEndsThePassWithoutCountingAnAttempt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	o := open(t, nil, c, &logBuffer{}, nil)
	o.Add(ctx, status("aaa", "converge", "success"))
	o.Add(ctx, status("bbb", "converge", "success"))
	gh := &github{fail: func(outbox.Report) error { return fmt.Errorf("rate limited: %w", outbox.ErrHold) }}
	if n := o.Deliver(ctx, gh.send); n != 0 {
		t.Fatalf("delivered %d while held", n)
	}
	if p := o.Pending(); p.Count != 2 || p.Failing != 0 {
		t.Fatalf("pending %+v: a hold is not a failed attempt", p)
	}
	gh.fail = nil
	if n := o.Deliver(ctx, gh.send); n != 2 {
		t.Fatalf("delivered %d after the hold", n)
	}
}

func TestNewerPlanCommentReplacesQueuedOne(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	o := open(t, nil, c, &logBuffer{}, nil)
	o.Add(ctx, outbox.Report{Kind: outbox.PlanComment, Commit: "aaa", PR: 3, Bodies: []string{"old"}})
	o.Add(ctx, outbox.Report{Kind: outbox.PlanComment, Commit: "bbb", PR: 4, Bodies: []string{"other"}})
	o.Add(ctx, outbox.Report{Kind: outbox.PlanComment, Commit: "ccc", PR: 3, Bodies: []string{"new"}})
	gh := &github{}
	o.Deliver(ctx, gh.send)
	if want := []string{"plan#4:other", "plan#3:new"}; !slices.Equal(gh.sent, want) {
		t.Fatalf("sent %v, want %v", gh.sent, want)
	}
}

func TestUnreadableDocumentIsKeptAside(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := state.NewDirStore(t.TempDir())
	if err := store.PutAgentDoc(ctx, "outbox.json", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	o := open(t, store, &clock{now: time.Now()}, logs, nil)
	if o.Pending().Count != 0 {
		t.Fatal("reports from an unreadable document")
	}
	kept, err := store.GetAgentDoc(ctx, "outbox.json.unreadable")
	if err != nil || string(kept) != "{not json" {
		t.Fatalf("the unreadable document was not kept: %q, %v", kept, err)
	}
	if !strings.Contains(logs.String(), "cannot be parsed") {
		t.Fatalf("not logged:\n%s", logs)
	}
}

func TestAdoptKeepsOrderAndTheNewestStatus(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	store := state.NewDirStore(t.TempDir())
	gone, err := outbox.Open(ctx, outbox.Options{Store: store, Name: "outbox-gone.json", Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	gone.Add(ctx, comment("aaa", "converged"))
	c.Add(time.Second)
	gone.Add(ctx, status("aaa", "converge", "success"))
	c.Add(time.Second)
	gone.Add(ctx, status("bbb", "plan", "pending"))
	data, err := store.GetAgentDoc(ctx, "outbox-gone.json")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(time.Second)
	o := open(t, store, c, &logBuffer{}, nil)
	o.Add(ctx, status("bbb", "plan", "success")) // newer than the adopted pending one
	if err := o.Adopt(ctx, data); err != nil {
		t.Fatal(err)
	}
	if err := o.Adopt(ctx, data); err != nil { // twice: nothing doubles
		t.Fatal(err)
	}
	gh := &github{}
	o.Deliver(ctx, gh.send)
	if want := []string{"aaa:comment:converged", "aaa:converge=success", "bbb:plan=success"}; !slices.Equal(gh.sent, want) {
		t.Fatalf("sent %v, want %v", gh.sent, want)
	}
}
