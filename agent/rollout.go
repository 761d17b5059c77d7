package agent

import (
	"sync"
	"time"

	"github.com/taloscluster/taloscluster/agent/httpapi"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/report"
)

// A converge tells its run when each step starts and ends (observe). The
// run shows it live on the status page, per node: the step each node is
// in, since when, and whether it runs in parallel with others of its
// batch. When the run ends the live view goes with the run's progress; the
// steps each node went through, in order with their durations and
// outcomes, stay in the run's comment and on its page (stepLog).

// maxStepReason bounds a step's reason on the status page, in bytes.
const maxStepReason = 200

// maxLoggedSteps bounds the steps a run keeps for its comment and page.
const maxLoggedSteps = 5000

// stepLog is what a run's steps did, in the order they started. It is
// safe for concurrent use: the steps of a batch run in parallel.
type stepLog struct {
	mu    sync.Mutex
	steps []report.Step
	// started holds when each open step started, by its position in
	// steps; open holds that position by the step's number.
	started map[int]time.Time
	open    map[int]int
}

// record adds a step that started, or completes one that ended.
func (l *stepLog) record(ev reconcile.StepEvent, name, errText string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open, l.started = map[int]int{}, map[int]time.Time{}
	}
	if ev.Ended.IsZero() {
		if len(l.steps) >= maxLoggedSteps {
			return
		}
		l.open[ev.Index] = len(l.steps)
		l.started[len(l.steps)] = ev.Started
		l.steps = append(l.steps, report.Step{Resource: ev.Resource, Name: name, Batch: ev.Batch, Unfinished: true})
		return
	}
	i, ok := l.open[ev.Index]
	if !ok {
		return
	}
	delete(l.open, ev.Index)
	delete(l.started, i)
	s := &l.steps[i]
	s.Unfinished, s.Duration, s.Err = false, ev.Ended.Sub(ev.Started), errText
}

// list returns the steps so far; a step still open has run until now.
func (l *stepLog) list(now time.Time) []report.Step {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]report.Step, len(l.steps))
	copy(out, l.steps)
	for i, started := range l.started {
		out[i].Duration = now.Sub(started)
	}
	return out
}

// observe is the converge's report of a step that started or ended: it
// goes to the run's step log and, for a step of a node, to the status
// page. It is called from the converge's goroutines.
func (r *run) observe(ev reconcile.StepEvent) {
	a := r.a
	name := report.StepName(ev.Action, ev.Resource, ev.Attributes)
	var errText string
	if ev.Err != nil {
		errText = firstLine(a.redact.String(ev.Err.Error()))
		if errText == "" {
			errText = "failed"
		}
	}
	r.steps.record(ev, name, errText)
	node := report.StepNode(ev.Resource)
	if node == "" {
		return
	}
	a.board.nodeStep(r.job.Cluster, httpapi.NodeProgress{
		Node: node, Step: ev.Index, Phase: string(ev.Phase), Action: string(ev.Action), Name: name,
		Reason: fitLine(a.redact.String(ev.Reason), maxStepReason), Batch: ev.Batch,
		Started: ev.Started, Ended: ev.Ended, Failed: ev.Err != nil,
	})
}
