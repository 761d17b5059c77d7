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

func planStatus(pr int, commit string, i int) outbox.Report {
	return outbox.Report{Kind: outbox.Status, Commit: commit, PR: pr, Plan: true,
		Context: fmt.Sprintf("taloscluster/plan: clusters/c%04d", i), State: "pending", Description: "planning",
		TargetURL: "https://agent.example/"}
}

// TestFullOutboxDropsPlansBeforeMerges fills the outbox with the plan
// statuses of two pull requests, one of them pushed again, after a merge's
// converge status and comment: the merge's reports and the other pull
// request's are all kept; the superseded head's go first, then those of
// the pull request that holds the most. What is owed is told as reports
// are queued and dropped, not after a delivery pass.
func TestFullOutboxDropsPlansBeforeMerges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	store := state.NewDirStore(t.TempDir())
	logs := &logBuffer{}
	o := open(t, store, c, logs, nil)
	var seen []outbox.Pending
	o.Observe(func(p outbox.Pending) { seen = append(seen, p) })

	o.Add(ctx, status("merge", "taloscluster/converge: clusters/prod", "success"))
	o.Add(ctx, comment("merge", "converged clusters/prod"))
	if last := seen[len(seen)-1]; last.Count != 2 {
		t.Fatalf("observed %+v after two reports queued", last)
	}
	// Queued in batches, as a plan run queues its statuses.
	for b := range 30 {
		var batch []outbox.Report
		for i := range 100 {
			batch = append(batch, planStatus(12, "p1", b*100+i))
		}
		o.Add(ctx, batch...)
	}
	for b := range 15 {
		var batch []outbox.Report
		for i := range 100 {
			batch = append(batch, planStatus(13, "q1", b*100+i))
		}
		o.Add(ctx, batch...)
	}
	p := o.Pending()
	if p.Dropped == 0 {
		t.Fatalf("pending %+v: 4,502 reports fit; the test does not fill the outbox", p)
	}
	if !strings.Contains(p.LastDrop.Reason, "the outbox is full") || !strings.Contains(p.LastDrop.Reason, "pull request 12") ||
		!strings.Contains(p.LastDrop.Report, "on p1") {
		t.Fatalf("last drop %+v: want a plan status of pull request 12, the one that holds the most, dropped because the outbox is full", p.LastDrop)
	}
	dropped := p.Dropped
	for b := range 5 {
		var batch []outbox.Report
		for i := range 100 {
			batch = append(batch, planStatus(12, "p2", b*100+i))
		}
		o.Add(ctx, batch...)
	}
	p = o.Pending()
	if !strings.Contains(p.LastDrop.Reason, "pull request 12 was pushed again (p2)") || !strings.Contains(p.LastDrop.Report, "on p1") {
		t.Fatalf("last drop %+v: want a status of the superseded head p1, dropped for the push", p.LastDrop)
	}
	held := map[string]int{}
	for _, r := range o.Reports() {
		held[r.Commit]++
	}
	if held["merge"] != 2 || held["q1"] != 1500 || held["p2"] != 500 {
		t.Fatalf("held per commit %v: the merge's 2, pull request 13's 1500 and the new head's 500 must all be kept", held)
	}
	if p.Dropped <= dropped || p.Count != len(o.Reports()) {
		t.Fatalf("pending %+v after the push", p)
	}
	// Observed as queued and dropped, before any delivery.
	if last := seen[len(seen)-1]; last.Count != p.Count || last.Dropped != p.Dropped {
		t.Fatalf("last observed %+v, want %+v", last, p)
	}
	if !strings.Contains(logs.String(), "report dropped") {
		t.Fatal("the drops are not logged")
	}
	// The document fits a Secret, and the merge's reports are delivered
	// first after a restart.
	data, err := store.GetAgentDoc(ctx, "outbox.json")
	if err != nil || len(data) > 768<<10 {
		t.Fatalf("document of %d bytes, %v", len(data), err)
	}
	o = open(t, store, c, logs, nil)
	gh := &github{}
	o.Deliver(ctx, gh.send)
	if len(gh.sent) != p.Count || gh.sent[0] != "merge:taloscluster/converge: clusters/prod=success" || gh.sent[1] != "merge:comment:converged clusters/prod" {
		t.Fatalf("sent %d reports, first %v", len(gh.sent), gh.sent[:2])
	}
}
