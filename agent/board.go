package agent

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taloscluster/taloscluster/agent/httpapi"
	"github.com/taloscluster/taloscluster/check"
	"github.com/taloscluster/taloscluster/report"
)

// maxPlans bounds the plans kept for the status page.
const maxPlans = 200

// maxRuns bounds the runs kept per cluster for the status page.
const maxRuns = 20

// board is what the status page shows of each cluster (its last runs, the
// run in progress, a converge that waits, drift, the last check) and the
// plans and converge logs it links to. It has its own lock: recording a
// run never waits for the poll loop's state, nor a page for a run.
type board struct {
	redact *report.Redactor

	mu        sync.Mutex
	clusters  map[string]*httpapi.ClusterStatus
	plans     map[string]string // id -> markdown
	planOrder []string
	checks    map[string]*CheckResult // cluster -> its last check
}

func newBoard(redact *report.Redactor) *board {
	return &board{redact: redact, clusters: map[string]*httpapi.ClusterStatus{}, plans: map[string]string{},
		checks: map[string]*CheckResult{}}
}

// track adds a section for each of dirs that has none yet.
func (b *board) track(dirs []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range dirs {
		if b.clusters[d] == nil {
			b.clusters[d] = &httpapi.ClusterStatus{Path: d}
		}
	}
}

// record changes the section of cluster with f, adding the section if
// there is none.
func (b *board) record(cluster string, f func(*httpapi.ClusterStatus)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.clusters[cluster]
	if s == nil {
		s = &httpapi.ClusterStatus{Path: cluster}
		b.clusters[cluster] = s
	}
	f(s)
}

// addRun records a finished run of cluster, its detail one line without
// secrets.
func (b *board) addRun(cluster string, r httpapi.Run) {
	r.Detail = firstLine(b.redact.String(r.Detail))
	if r.Finished.IsZero() {
		r.Finished = time.Now()
	}
	b.record(cluster, func(s *httpapi.ClusterStatus) {
		s.Runs = append([]httpapi.Run{r}, s.Runs...)
		if len(s.Runs) > maxRuns {
			s.Runs = s.Runs[:maxRuns]
		}
	})
}

// setRunning records the mutating job that started on its cluster at
// started, or with an empty Kind that none runs any more. A job that
// starts ends the cluster's wait, if it had one.
func (b *board) setRunning(j Job, started time.Time) {
	b.record(j.Cluster, func(s *httpapi.ClusterStatus) {
		s.Running, s.Progress = string(j.Kind), nil
		if j.Kind != "" {
			s.Progress = &httpapi.Progress{Kind: string(j.Kind), Commit: j.Commit, Started: started}
			s.Waiting = nil
		}
	})
}

// maxRolloutNodes bounds the nodes the status page shows of one run.
const maxRolloutNodes = 500

// nodeStep records on the run in progress on cluster that a step of node
// n.Node started or ended. It is called from the run's goroutines: the
// nodes of a batch go through their steps at the same time. A run that
// is no longer in progress is left as it is.
func (b *board) nodeStep(cluster string, n httpapi.NodeProgress) {
	b.record(cluster, func(s *httpapi.ClusterStatus) {
		if s.Progress == nil {
			return
		}
		for i := range s.Progress.Nodes {
			cur := &s.Progress.Nodes[i]
			if cur.Node != n.Node {
				continue
			}
			if n.Step < cur.Step {
				return // an older step's news, come late
			}
			n.Done = cur.Done
			if !n.Ended.IsZero() {
				n.Done++
			}
			*cur = n
			return
		}
		if len(s.Progress.Nodes) >= maxRolloutNodes {
			return
		}
		if !n.Ended.IsZero() {
			n.Done = 1
		}
		s.Progress.Nodes = append(s.Progress.Nodes, n)
	})
}

// storePlan keeps a plan (or a converge's page) for /plans/{id}, secrets
// removed, and returns its id.
func (b *board) storePlan(cluster, commit, kind, markdown string) string {
	id := fmt.Sprintf("%s-%s-%s", kind, short(commit), strings.NewReplacer("/", "_", " ", "_").Replace(cluster))
	md := b.redact.String(markdown)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.plans[id]; !ok {
		b.planOrder = append(b.planOrder, id)
	}
	b.plans[id] = md
	for len(b.planOrder) > maxPlans {
		delete(b.plans, b.planOrder[0])
		b.planOrder = b.planOrder[1:]
	}
	return id
}

// plan returns a stored plan.
func (b *board) plan(id string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	md, ok := b.plans[id]
	return md, ok
}

// keepCheck keeps the last check of cluster.
func (b *board) keepCheck(cluster string, res *CheckResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checks[cluster] = res
}

// lastCheck returns the report of the last check of cluster, and whether
// one ran.
func (b *board) lastCheck(cluster string) (*check.Report, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	res, ok := b.checks[cluster]
	if !ok {
		return nil, false
	}
	return res.Report, true
}

// sections returns a copy of every cluster's section, by path.
func (b *board) sections() []httpapi.ClusterStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	paths := make([]string, 0, len(b.clusters))
	for p := range b.clusters {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	out := make([]httpapi.ClusterStatus, 0, len(paths))
	for _, p := range paths {
		cs := *b.clusters[p]
		if cs.Progress != nil {
			progress := *cs.Progress
			progress.Nodes = slices.Clone(progress.Nodes)
			cs.Progress = &progress
		}
		if cs.Waiting != nil {
			waiting := *cs.Waiting
			cs.Waiting = &waiting
		}
		out = append(out, cs)
	}
	return out
}

// waitingReason returns what the converge of cluster waits for, or "".
func (b *board) waitingReason(cluster string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.clusters[cluster]; s != nil && s.Waiting != nil {
		return s.Waiting.Reason
	}
	return ""
}
