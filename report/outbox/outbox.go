// Package outbox keeps the reports the agent owes GitHub (commit statuses
// and pull-request comments) until they are delivered.
//
// Every report is written to the outbox, and so to the state backend,
// before it is sent, and taken out only once GitHub accepted it, so a
// report outlives a failed request, a rate limit and a restart of the
// agent. Reports are sent in the order they were added, except that a
// report that fails holds back only the later reports of its own commit:
// a run's comment always reaches the pull request before the run's final
// status, and one stuck pull request does not hold up the others. A newer
// status of the same commit and context, or a newer plan comment of the
// same pull request, replaces the queued one (and goes to the back).
//
// The outbox is bounded (in reports, and in bytes so that its document
// fits a Kubernetes Secret beside the agent's others). When it is full,
// reports are dropped in this order: first the plan reports of a pull
// request head that a newer push superseded, then the plan reports of the
// commit that holds the most, and only when no plan report is left the
// reports of the commit that holds the most. A converge status or a
// merge's comment is therefore never dropped to make room for a pull
// request's plans, and the pull request that fills the outbox pays for it,
// not the others.
package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// Kind is what a report is.
type Kind string

// The kinds of report.
const (
	// Status is a commit status: Commit, Context, State, Description,
	// TargetURL.
	Status Kind = "status"
	// Comment is a one-off comment on pull request PR, or when PR is 0 on
	// the pull request merged as Commit: Body.
	Comment Kind = "comment"
	// PlanComment is the plan comment of pull request PR, in parts:
	// Bodies.
	PlanComment Kind = "plan-comment"
)

// Report is one report owed to GitHub, with its delivery record.
type Report struct {
	// Key identifies the report; a comment carries it so that a retried
	// post never creates a second copy.
	Key  string `json:"key"`
	Kind Kind   `json:"kind"`
	// Commit orders reports: those of one commit go out in order.
	Commit string `json:"commit"`
	// PR is the pull request a comment goes to; on a plan status, the
	// pull request whose head Commit is.
	PR int `json:"pr,omitempty"`
	// Plan marks a report of a pull request's plan (its plan statuses;
	// a PlanComment is one always): the next push plans again, so when the
	// outbox is full these go before the reports of merges.
	Plan        bool     `json:"plan,omitempty"`
	Context     string   `json:"context,omitempty"`
	State       string   `json:"state,omitempty"`
	Description string   `json:"description,omitempty"`
	TargetURL   string   `json:"target_url,omitempty"`
	Body        string   `json:"body,omitempty"`
	Bodies      []string `json:"bodies,omitempty"`

	// Queued is when the report was added.
	Queued time.Time `json:"queued"`
	// Attempts counts the failed tries to send it.
	Attempts int `json:"attempts,omitempty"`
	// Next is when it may be tried again.
	Next time.Time `json:"next,omitzero"`
	// LastError is the first line of the last failure.
	LastError string `json:"last_error,omitempty"`

	// size is the length of the report's JSON encoding.
	size int
}

// isPlan reports whether r is a report of a pull request's plan.
func (r Report) isPlan() bool { return r.Plan || r.Kind == PlanComment }

// String names a report for logs, without its text.
func (r Report) String() string {
	switch r.Kind {
	case Status:
		return fmt.Sprintf("status %s=%s on %s", r.Context, r.State, short(r.Commit))
	case PlanComment:
		return fmt.Sprintf("plan comment on pull request %d", r.PR)
	}
	if r.PR == 0 {
		return fmt.Sprintf("comment on the pull request merged as %s", short(r.Commit))
	}
	return fmt.Sprintf("comment on pull request %d", r.PR)
}

// supersedes reports whether r makes the queued report o pointless.
func (r Report) supersedes(o Report) bool {
	switch {
	case r.Kind == Status && o.Kind == Status:
		return r.Commit == o.Commit && r.Context == o.Context
	case r.Kind == PlanComment && o.Kind == PlanComment:
		return r.PR == o.PR
	}
	return false
}

// Store is where the outbox keeps its document (state.AgentDocs).
type Store interface {
	GetAgentDoc(ctx context.Context, name string) ([]byte, error)
	PutAgentDoc(ctx context.Context, name string, data []byte) error
}

// Send delivers one report. It returns an error wrapping ErrHold when
// nothing can be sent for now (GitHub's rate limit): the delivery pass
// ends there and no attempt is counted.
type Send func(ctx context.Context, r Report) error

// ErrHold stops a delivery pass without counting a failed attempt.
var ErrHold = errors.New("reports held back")

// Options configure an Outbox.
type Options struct {
	// Store keeps the document; nil keeps the outbox in memory only.
	Store Store
	// Name is the document's name; empty means "outbox.json".
	Name string
	// Log receives a record of every failed attempt and every dropped
	// report.
	Log *slog.Logger
	// Retry paces the attempts of one report; zero means 10s doubling
	// to 10m.
	Retry retry.Policy
	// Transient says whether a failure may go away; a report that failed
	// otherwise is dropped after TerminalAttempts tries. Nil treats every
	// failure as transient.
	Transient func(error) bool
	// Now reads the clock; nil means time.Now.
	Now func() time.Time
}

// TerminalAttempts is how many times a report is tried when GitHub keeps
// refusing it for a reason that will not go away (a pull request that is
// gone, a status GitHub finds invalid), before it is dropped.
const TerminalAttempts = 3

// Bounds of the outbox: past them reports are dropped (see the package
// comment for which), with an error logged. The size bound keeps the
// document within a Kubernetes Secret.
const (
	maxReports  = 4000
	maxDocBytes = 768 << 10
)

// Outbox is the queue of reports owed.
type Outbox struct {
	opts Options

	// sending serialises delivery passes.
	sending sync.Mutex

	mu       sync.Mutex
	reports  []Report // oldest first
	bytes    int      // the sum of the reports' sizes
	saveErr  error    // the last failure to save, until a save works
	dropped  int      // reports dropped since start
	lastDrop Drop     // the last report dropped

	// observeMu serialises calls of observe, each with a fresh Pending, so
	// the last call always tells the latest state.
	observeMu sync.Mutex
	observe   func(Pending)
}

// Drop describes a report given up on.
type Drop struct {
	// Report names the report (Report.String).
	Report string
	// Reason says why it was dropped.
	Reason string
	// At is when.
	At time.Time
}

// Open loads the outbox kept in opts.Store. A document that cannot be
// read is an error; one that cannot be parsed is logged and set aside,
// and the outbox starts empty.
func Open(ctx context.Context, opts Options) (*Outbox, error) {
	if opts.Name == "" {
		opts.Name = "outbox.json"
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Retry.Initial == 0 {
		opts.Retry = retry.Policy{Initial: 10 * time.Second, Max: 10 * time.Minute}
	}
	if opts.Transient == nil {
		opts.Transient = func(error) bool { return true }
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	o := &Outbox{opts: opts}
	if opts.Store == nil {
		return o, nil
	}
	data, err := opts.Store.GetAgentDoc(ctx, opts.Name)
	if errors.Is(err, fs.ErrNotExist) {
		return o, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening the report outbox: %w", err)
	}
	var doc document
	if err := json.Unmarshal(data, &doc); err != nil {
		aside := opts.Name + ".unreadable"
		opts.Log.Error("the report outbox cannot be parsed: starting with an empty one; the old one is kept",
			"document", opts.Name, "kept_as", aside, "error", err)
		if err := opts.Store.PutAgentDoc(ctx, aside, data); err != nil {
			return nil, fmt.Errorf("keeping the unreadable report outbox as %s: %w", aside, err)
		}
		return o, nil
	}
	o.reports = doc.Reports
	for i := range o.reports {
		o.reports[i].size = encodedSize(o.reports[i])
		o.bytes += o.reports[i].size
	}
	if len(o.reports) > 0 {
		opts.Log.Info("reports still owed from before the restart", "count", len(o.reports), "oldest", o.reports[0].Queued)
	}
	return o, nil
}

// document is the stored form of the outbox.
type document struct {
	Version int      `json:"version"`
	Reports []Report `json:"reports"`
}

// Add queues rs, in order, and saves the outbox once. It sets each
// report's Key, when empty, and Queued. A save that fails is logged and
// the reports are kept in memory: a report is never refused (though the
// outbox, when full, may drop others or one of these; see the package
// comment).
func (o *Outbox) Add(ctx context.Context, rs ...Report) {
	now := o.opts.Now()
	o.mu.Lock()
	for _, r := range rs {
		if r.Key == "" {
			r.Key = newKey()
		}
		r.Queued = now
		r.size = encodedSize(r)
		o.remove(r.supersedes)
		o.reports = append(o.reports, r)
		o.bytes += r.size
		o.fit(maxReports, maxDocBytes)
	}
	o.mu.Unlock()
	o.save(ctx)
	o.changed()
}

// Observe has f called with what is owed after every change of the
// outbox (a report queued, delivered or dropped), and once now. The calls
// do not overlap and each reads the outbox afresh.
func (o *Outbox) Observe(f func(Pending)) {
	o.observeMu.Lock()
	o.observe = f
	o.observeMu.Unlock()
	o.changed()
}

// changed tells the observer what is owed now; o.mu is not held.
func (o *Outbox) changed() {
	o.observeMu.Lock()
	defer o.observeMu.Unlock()
	if o.observe != nil {
		o.observe(o.Pending())
	}
}

// remove takes out the reports del selects; o.mu is held.
func (o *Outbox) remove(del func(Report) bool) {
	o.reports = slices.DeleteFunc(o.reports, func(q Report) bool {
		if del(q) {
			o.bytes -= q.size
			return true
		}
		return false
	})
}

// fit drops reports until at most count of them, of at most size bytes
// in all, are left: first the plan reports of superseded pull-request
// heads, then the plan reports of the commit that holds the most bytes,
// then the reports of the commit that holds the most; within each, the
// oldest first. o.mu is held.
func (o *Outbox) fit(count, size int) {
	for len(o.reports) > 0 && (len(o.reports) > count || o.bytes > size) {
		i, why := o.victim()
		o.drop(o.reports[i], why)
		o.bytes -= o.reports[i].size
		o.reports = slices.Delete(o.reports, i, i+1)
	}
}

// victim chooses the report fit drops next, and says why; o.mu is held.
func (o *Outbox) victim() (int, string) {
	full := fmt.Sprintf("the outbox is full (%d reports, %d KiB; at most %d, %d KiB)",
		len(o.reports), o.bytes>>10, maxReports, maxDocBytes>>10)
	// The newest commit whose plan reports each pull request has queued.
	newest := map[int]string{}
	for _, r := range o.reports {
		if r.isPlan() && r.PR != 0 {
			newest[r.PR] = r.Commit
		}
	}
	for i, r := range o.reports {
		if r.isPlan() && r.PR != 0 && newest[r.PR] != r.Commit {
			return i, fmt.Sprintf("%s, and pull request %d was pushed again (%s): its reports on the older head go first",
				full, r.PR, short(newest[r.PR]))
		}
	}
	if i, n, b := o.largest(Report.isPlan); i >= 0 {
		return i, fmt.Sprintf("%s: the plan reports of the commit that holds the most (%s of pull request %d: %d reports, %d KiB) go first; those of merges are kept",
			full, short(o.reports[i].Commit), o.reports[i].PR, n, b>>10)
	}
	i, n, b := o.largest(func(Report) bool { return true })
	return i, fmt.Sprintf("%s, with no plan report left to drop: the reports of the commit that holds the most (%s: %d reports, %d KiB) go first",
		full, short(o.reports[i].Commit), n, b>>10)
}

// largest returns the oldest report that sel selects of the commit whose
// selected reports hold the most bytes, with their count and bytes; -1
// when sel selects none. o.mu is held.
func (o *Outbox) largest(sel func(Report) bool) (int, int, int) {
	type group struct{ first, count, bytes int }
	groups := map[string]*group{}
	var top *group
	for i, r := range o.reports {
		if !sel(r) {
			continue
		}
		g := groups[r.Commit]
		if g == nil {
			g = &group{first: i}
			groups[r.Commit] = g
		}
		g.count++
		g.bytes += r.size
		if top == nil || g.bytes > top.bytes {
			top = g
		}
	}
	if top == nil {
		return -1, 0, 0
	}
	return top.first, top.count, top.bytes
}

// encodedSize is the length of r's JSON encoding in the document.
func encodedSize(r Report) int {
	data, err := json.Marshal(r)
	if err != nil {
		return 0
	}
	return len(data) + 1 // and its comma
}

// Adopt takes the reports of another outbox's document (that of a
// replica that is gone) into this one, in the order they were queued, and
// saves. A report that a newer one of the same commit and context (or
// pull request) supersedes is dropped; one already held is not doubled.
func (o *Outbox) Adopt(ctx context.Context, data []byte) error {
	var doc document
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("reading a report outbox to adopt: %w", err)
	}
	if len(doc.Reports) == 0 {
		return nil
	}
	o.mu.Lock()
	for _, r := range doc.Reports {
		if slices.ContainsFunc(o.reports, func(q Report) bool { return q.Key == r.Key }) {
			continue
		}
		if slices.ContainsFunc(o.reports, func(q Report) bool { return q.supersedes(r) && !q.Queued.Before(r.Queued) }) {
			continue
		}
		o.remove(func(q Report) bool { return r.supersedes(q) && q.Queued.Before(r.Queued) })
		r.size = encodedSize(r)
		o.reports = append(o.reports, r)
		o.bytes += r.size
	}
	slices.SortStableFunc(o.reports, func(a, b Report) int { return a.Queued.Compare(b.Queued) })
	o.fit(maxReports, maxDocBytes)
	o.mu.Unlock()
	o.opts.Log.Info("reports adopted from a replica that is gone", "count", len(doc.Reports))
	o.save(ctx)
	o.changed()
	return nil
}

// Deliver sends the reports that are due, in order, and returns how many
// were delivered. A report that fails is tried again after a backoff and
// holds back the later reports of its commit meanwhile. Deliveries do not
// overlap: a second caller waits for the first.
func (o *Outbox) Deliver(ctx context.Context, send Send) int {
	o.sending.Lock()
	defer o.sending.Unlock()
	held := map[string]bool{} // commits whose next report must wait
	sent := 0
	for ctx.Err() == nil {
		r, ok := o.next(held)
		if !ok {
			break
		}
		err := send(ctx, r)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, ErrHold) {
			break
		}
		if err == nil {
			o.done(r.Key)
			o.changed()
			sent++
			continue
		}
		held[r.Commit] = true
		o.failed(r, err)
	}
	if sent > 0 {
		o.save(ctx)
	}
	return sent
}

// next returns the first report whose commit is not held and that is due;
// a report not yet due holds its commit.
func (o *Outbox) next(held map[string]bool) (Report, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.opts.Now()
	for _, r := range o.reports {
		if held[r.Commit] {
			continue
		}
		if now.Before(r.Next) {
			held[r.Commit] = true
			continue
		}
		return r, true
	}
	return Report{}, false
}

// done takes a delivered report out.
func (o *Outbox) done(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.remove(func(r Report) bool { return r.Key == key })
}

// failed records a failed attempt of r, and drops r when its failure is
// not transient and it was tried TerminalAttempts times.
func (o *Outbox) failed(r Report, err error) {
	msg := firstLine(err.Error())
	transient := o.opts.Transient(err)
	o.mu.Lock()
	i := slices.IndexFunc(o.reports, func(q Report) bool { return q.Key == r.Key })
	if i < 0 {
		o.mu.Unlock()
		return // superseded while it was being sent
	}
	q := &o.reports[i]
	q.Attempts++
	q.LastError = msg
	wait := o.opts.Retry.Backoff(q.Attempts)
	q.Next = o.opts.Now().Add(wait)
	attempts := q.Attempts
	drop := !transient && attempts >= TerminalAttempts
	if drop {
		o.drop(*q, "GitHub keeps refusing it: "+msg)
		o.bytes -= q.size
		o.reports = slices.Delete(o.reports, i, i+1)
	} else {
		// Its record grew a little.
		size := encodedSize(*q)
		o.bytes += size - q.size
		q.size = size
	}
	o.mu.Unlock()
	if !drop {
		o.opts.Log.Warn("report not delivered; trying again", "report", r.String(), "attempt", attempts,
			"in", wait.Round(time.Millisecond).String(), "queued", r.Queued, "error", msg)
	}
	o.save(context.Background())
	o.changed()
}

// drop counts and logs a report given up on; o.mu is held.
func (o *Outbox) drop(r Report, why string) {
	o.dropped++
	o.lastDrop = Drop{Report: r.String(), Reason: why, At: o.opts.Now()}
	o.opts.Log.Error("report dropped: it will never reach GitHub", "report", r.String(), "queued", r.Queued,
		"attempts", r.Attempts, "reason", why)
}

// save writes the outbox to its store, dropping the oldest reports when
// the document would be too large.
func (o *Outbox) save(ctx context.Context) {
	if o.opts.Store == nil {
		return
	}
	o.mu.Lock()
	var data []byte
	for {
		var err error
		data, err = json.Marshal(document{Version: 1, Reports: o.reports})
		if err != nil {
			o.mu.Unlock()
			o.opts.Log.Error("encoding the report outbox", "error", err)
			return
		}
		if len(data) <= maxDocBytes || len(o.reports) == 0 {
			break
		}
		// The sizes kept fall short of the document (they should not):
		// drop by the same rule until it fits.
		o.fit(len(o.reports)-1, maxDocBytes)
	}
	if len(o.reports) == 0 {
		data = nil
	}
	o.mu.Unlock()
	// A delivery that ended with its caller still gets saved.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := o.opts.Store.PutAgentDoc(ctx, o.opts.Name, data)
	o.mu.Lock()
	was := o.saveErr
	o.saveErr = err
	o.mu.Unlock()
	switch {
	case err != nil && (was == nil || was.Error() != err.Error()):
		o.opts.Log.Error("saving the report outbox: reports are kept in memory and saved again with the next change", "error", err)
	case err == nil && was != nil:
		o.opts.Log.Info("the report outbox is saved again")
	}
}

// Pending describes what is owed.
type Pending struct {
	// Count is how many reports wait.
	Count int
	// Oldest is when the oldest of them was queued; zero when none.
	Oldest time.Time
	// Failing counts those with at least one failed attempt, and
	// LastError is the most recent failure among them.
	Failing   int
	LastError string
	// Dropped counts the reports given up on since start, and LastDrop
	// is the last of them.
	Dropped  int
	LastDrop Drop
	// SaveError is set while the outbox cannot be saved.
	SaveError string
}

// Pending returns what is owed now.
func (o *Outbox) Pending() Pending {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := Pending{Count: len(o.reports), Dropped: o.dropped, LastDrop: o.lastDrop}
	if o.saveErr != nil {
		p.SaveError = firstLine(o.saveErr.Error())
	}
	var last time.Time
	for _, r := range o.reports {
		if p.Oldest.IsZero() || r.Queued.Before(p.Oldest) {
			p.Oldest = r.Queued
		}
		if r.Attempts > 0 {
			p.Failing++
			if !r.Next.Before(last) {
				last, p.LastError = r.Next, r.LastError
			}
		}
	}
	return p
}

// Reports returns a copy of the queued reports, oldest first.
func (o *Outbox) Reports() []Report {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.reports)
}

func newKey() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
