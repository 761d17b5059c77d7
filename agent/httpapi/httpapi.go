// Package httpapi is the agent's HTTP surface: Prometheus metrics, the
// liveness and readiness probes, a small read-only status page and the
// full text of the plans the agent has posted.
//
// Every endpoint is read-only: GET and HEAD are served, any other method
// gets 405 Method Not Allowed. Everything shown on a page comes from the
// repository or from pull requests, so it is treated as untrusted and
// escaped by html/template; responses carry headers that forbid scripts,
// framing and content sniffing.
//
// Routes:
//
//	/metrics      the Prometheus exposition of Options.Metrics
//	/healthz      200 "ok" while the process serves requests
//	/readyz       200 "ok" when Options.Ready returns nil, else 503 and the
//	              first line of the reason
//	/             the status page built from Options.Status: one section
//	              per cluster (nodes, updates, drift, the last runs, the
//	              progress of a converge with the step each node is in,
//	              a converge that waits and when
//	              it runs again); it reloads itself, every 5
//	              seconds while a converge runs, every 30 otherwise
//	/plans/{id}   a plan stored by the agent, as HTML (the text inside
//	              <pre>) or, with ?format=text, as text/plain
package httpapi

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configures the handler New returns. Every field may be left
// empty: without Metrics /metrics is 404, without Ready the agent is always
// ready, without Status the page is empty and without Plan every plan is
// 404.
type Options struct {
	// Metrics is gathered for every request to /metrics.
	Metrics prometheus.Gatherer
	// Ready reports why the agent cannot do its work yet (repository not
	// cloned, last fetch older than three intervals, GitHub's API rate
	// limited or unreachable), or nil when it can. It is called for every request to /readyz and
	// must return quickly.
	Ready func() error
	// Status returns what the status page shows. It is called for every
	// request to / and must return quickly.
	Status func() StatusPage
	// Plan returns the full text (Markdown) of the plan with the given id,
	// and whether there is one.
	Plan func(id string) (markdown string, ok bool)
	// Logger receives errors while serving; nil discards them.
	Logger *slog.Logger
}

// StatusPage is what the status page shows.
type StatusPage struct {
	// Repository names the repository the agent follows, for people (for
	// example "org/infra"); it must not hold credentials.
	Repository string
	// Branch is the default branch.
	Branch string
	// LastFetch is when the repository was last fetched successfully; the
	// zero time means never.
	LastFetch time.Time
	// Clusters are the repository's clusters, in the order to show them.
	Clusters []ClusterStatus
	// Queue lists the jobs waiting to run, first to run first.
	Queue []QueuedJob
	// Reports is what the agent owes GitHub.
	Reports ReportsStatus
	// Replica describes this replica's share of the clusters when several
	// replicas share them; empty otherwise.
	Replica string
	// RepositoryURL is the repository's web address, such as
	// https://github.com/org/infra, that pull request links start with;
	// empty shows pull request numbers without links.
	RepositoryURL string
	// Generated is when the page was built; the zero time means now.
	Generated time.Time
}

// ReportsStatus describes the reports (statuses, comments) not yet
// delivered to GitHub. Texts are one line, secrets removed.
type ReportsStatus struct {
	// Pending counts them; Oldest is when the oldest was queued.
	Pending int
	Oldest  time.Time
	// Failing counts those that failed at least once, LastError the most
	// recent failure.
	Failing   int
	LastError string
	// Dropped counts the reports given up on since start; LastDropped
	// names the last of them, DropReason says why it was dropped and
	// DroppedAt when.
	Dropped     int
	LastDropped string
	DropReason  string
	DroppedAt   time.Time
	// SaveError is set while the outbox cannot be saved.
	SaveError string
}

// ClusterStatus is one cluster's line on the status page.
// RemediationStatus is a cluster's remediation section and the
// remediations converges began, for the status page.
type RemediationStatus struct {
	// On is set when cluster.yaml has a remediation section; the other
	// settings are then as cluster.yaml (or its defaults) gives them:
	// After as "10m", MaxUnhealthy as "40%" or "2", Pools the covered
	// worker pools (empty: every worker pool).
	On           bool
	After        string
	MaxUnhealthy string
	Pools        []string
	// Events are the latest remediations, newest first.
	Events []RemediationEvent
}

// RemediationEvent is one remediation a converge began.
type RemediationEvent struct {
	At         time.Time
	Pool, Node string
	Commit     string
}

type ClusterStatus struct {
	// Path is the cluster's directory in the repository.
	Path string
	// Elsewhere is true when another replica plans and converges the
	// cluster, so this replica's view of it may be old.
	Elsewhere bool
	// LastPlan and LastConverge are the latest runs of each kind; nil
	// means none yet.
	LastPlan     *RunSummary
	LastConverge *RunSummary
	// Drift is true when the last drift check that could plan the cluster
	// found it differs from the default branch.
	Drift bool
	// DriftError, when set, says why the last drift check could not plan
	// the cluster (one line, secrets removed): whether it drifted is then
	// unknown, and the page says the check failed rather than in sync.
	DriftError string
	// Running is the kind of the run in progress, empty when idle.
	Running string
	// Progress is the mutating run in progress (converge, drift); nil
	// when none runs.
	Progress *Progress
	// Waiting is a converge that stopped on something that will change
	// on its own and runs again later; nil when none waits.
	Waiting *Waiting
	// DriftChecked is when the last drift check ran, whether or not it
	// could plan; zero before the first.
	DriftChecked time.Time
	// DriftSummary is the one-line summary of the last drift plan, and
	// DriftChanges one line per step and refusal of it (secrets removed),
	// DriftMore how many more it has than are listed. DriftPlanID, when
	// set, names the full plan under /plans/{id}.
	DriftSummary string
	DriftChanges []string
	DriftMore    int
	DriftPlanID  string
	// Check is what the last check of the cluster found; nil before the
	// first.
	Check *CheckStatus
	// Remediation is the cluster's remediation section as the last
	// converge read it; nil before the first converge since the agent
	// started.
	Remediation *RemediationStatus
	// Runs are the cluster's latest runs, newest first.
	Runs []Run
}

// Progress is a mutating run in progress.
type Progress struct {
	// Kind is converge or drift (a self-heal converge).
	Kind string
	// Commit is the full SHA being converged.
	Commit string
	// Started is when the run began.
	Started time.Time
	// Step is the step running, from 1, out of Steps; zero while the run
	// plans, before its first step.
	Step, Steps int
	// Text describes the step ("+ machine prod-a-worker-03").
	Text string
	// Nodes are the nodes the run's steps reached so far, in the order
	// their first step started: the step each runs, or the last one it
	// ended.
	Nodes []NodeProgress
}

// NodeProgress is where one node is in a converge in progress: the step
// it runs, or, between steps, the last one it ended.
type NodeProgress struct {
	// Node is the machine's name (a Kubernetes node's is the same).
	Node string
	// Step is the step's number among the run's steps, from 1.
	Step int
	// Phase and Action are the step's, as the plan shows them; Name says
	// what it does in a few words ("cordon", "upgrade-talos").
	Phase, Action, Name string
	// Reason is the step's reason, shortened to one line, secrets
	// removed.
	Reason string
	// Batch is the step's worker batch, 0 for none: the nodes of a batch
	// go through their steps at the same time.
	Batch int
	// Started is when the step started; Ended when it ended, zero while
	// it runs.
	Started, Ended time.Time
	// Failed is set when the step ended with an error.
	Failed bool
	// Done counts the node's steps that ended in this run.
	Done int
}

// Waiting is a converge (or self-heal) that stopped on something that
// will change on its own, such as a PodDisruptionBudget that blocks a
// drain or a node still booting, and is queued to run again: not a
// failure.
type Waiting struct {
	// Kind is converge or drift (a self-heal converge).
	Kind string
	// Commit is the full SHA the converge runs.
	Commit string
	// Reason says what it waits for: one line, secrets removed.
	Reason string
	// Since is when it began waiting; Next when it runs again.
	Since time.Time
	Next  time.Time
}

// Run is one finished run of a cluster.
type Run struct {
	// Kind is plan (of a pull request), converge, drift (a drift check)
	// or check.
	Kind string
	// Commit is the full SHA the run used.
	Commit string
	// PR is the pull request the run was for (a plan) or that merged the
	// commit (a converge); zero for none.
	PR int
	// Result is how the run ended: success, failure, refused, cancelled,
	// retried, waiting; for a drift check no drift, drift or failure; for
	// a check ok, needs attention, incomplete or failure.
	Result string
	// Detail says more in one line, such as why it failed; may be empty.
	Detail string
	// Finished is when the run ended; Duration how long it took.
	Finished time.Time
	Duration time.Duration
	// PlanID, when set, names the plan served under /plans/{id}.
	PlanID string
}

// CheckStatus is what the last check of a cluster found (check.Run): the
// pins against the releases and the running cluster against cluster.yaml.
// Texts are secrets removed.
type CheckStatus struct {
	// Time is when the check ran.
	Time time.Time
	// Error, when set, says why the check could not run at all; the other
	// fields are then empty.
	Error string
	// Incomplete lists the sources that could not be read, each
	// "<source>: <reason>"; empty when the check finished.
	Incomplete []string
	// Components are Talos, then Kubernetes.
	Components []ComponentStatus
	// Compared is set when the running cluster was compared; NotCompared
	// says why it was not.
	Compared    bool
	NotCompared string
	// KubernetesRead is set when the Kubernetes API listed the nodes, so
	// a node's readiness and scheduling are known.
	KubernetesRead bool
	// Nodes are the machines of the cluster, by name.
	Nodes []NodeStatus
	// Missing are machines cluster.yaml wants that do not exist.
	Missing []string
	// Plugins are the configured plugins against cluster.yaml, in the
	// order they run; empty when the running cluster was not compared.
	Plugins []PluginStatus
}

// PluginStatus is one configured plugin as the last check found it.
type PluginStatus struct {
	Name string
	// State is in_sync, drift, deferred or unknown; Reason says why a
	// plugin is deferred or unknown.
	State  string
	Reason string
	// Steps are what a converge would do.
	Steps []string
}

// ComponentStatus is one pinned component against its releases.
type ComponentStatus struct {
	// Name is talos or kubernetes; Pinned the version cluster.yaml pins.
	Name   string
	Pinned string
	// Update is the version to move to, empty when there is none;
	// UpdateKind is patch (a newer patch of the pinned minor) or minor.
	Update     string
	UpdateKind string
	// PatchesBehind counts the releases of the pinned minor newer than
	// the pin.
	PatchesBehind int
	// Unknown says why the releases could not be read.
	Unknown string
}

// NodeStatus is one machine of the cluster as the last check read it.
type NodeStatus struct {
	Name string
	// Role is controlplane or worker.
	Role string
	// Talos is the Talos version the node runs and Kubernetes its
	// kubelet's version, empty when unknown; TalosWant and
	// KubernetesWant are what cluster.yaml pins, set only when they
	// differ.
	Talos, TalosWant           string
	Kubernetes, KubernetesWant string
	// InKubernetes is set when the Kubernetes API lists the node; Ready
	// and Cordoned are its state then.
	InKubernetes bool
	Ready        bool
	Cordoned     bool
}

// RunSummary is one run of a cluster.
type RunSummary struct {
	// Commit is the full SHA the run used; the page shows a short form.
	Commit string
	// Result is how the run ended: success, failure, refused, cancelled,
	// retried (failed with a transient error and queued again) or waiting
	// (stopped on something that will change on its own and queued
	// again).
	Result string
	// Time is when the run finished.
	Time time.Time
	// PlanID, when set, names the plan served under /plans/{id}.
	PlanID string
}

// QueuedJob is a job waiting to run.
type QueuedJob struct {
	// Cluster is the cluster's directory in the repository.
	Cluster string
	// Kind is plan, converge, drift or destroy.
	Kind string
	// Commit is the full SHA the job will use.
	Commit string
	// Queued is when the job was queued.
	Queued time.Time
	// Attempt is the try the job will be, from 1; zero means 1. A job
	// queued again after a transient failure has 2 or more.
	Attempt int
	// NotBefore, when set, is when a job queued again after a transient
	// failure or a wait runs.
	NotBefore time.Time
	// Waiting, when set, is what a job queued again after a wait waits
	// for (one line, secrets removed).
	Waiting string
}

// planIDPattern is what a plan id must look like; any other id is 404
// without asking Options.Plan.
var planIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// maxReason bounds the reason /readyz gives, in bytes.
const maxReason = 256

// New returns the agent's HTTP handler.
func New(opts Options) http.Handler {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &server{opts: opts, logger: logger}
	mux := http.NewServeMux()
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Metrics, promhttp.HandlerOpts{
			ErrorLog:      promLogger{logger},
			ErrorHandling: promhttp.ContinueOnError,
		}))
	}
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /{$}", s.status)
	mux.HandleFunc("GET /plans/{id}", s.plan)
	return readOnly(mux)
}

type server struct {
	opts   Options
	logger *slog.Logger
	// notReady is set while the last readiness check failed, so a change
	// is logged once rather than on every probe.
	notReady atomic.Bool
}

// readOnly serves GET and HEAD through next, answers every other method
// with 405, and sets the headers every response carries.
func readOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: this endpoint is read-only", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeText(w, http.StatusOK, "ok\n")
}

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	var err error
	if s.opts.Ready != nil {
		err = s.opts.Ready()
	}
	if err == nil {
		if s.notReady.Swap(false) {
			s.logger.Info("agent ready")
		}
		writeText(w, http.StatusOK, "ok\n")
		return
	}
	reason := firstLine(err.Error())
	if !s.notReady.Swap(true) {
		s.logger.Warn("agent not ready", "reason", reason)
	}
	writeText(w, http.StatusServiceUnavailable, "not ready: "+reason+"\n")
}

// Refresh intervals of the status page, in seconds.
const (
	refreshConverging = 5
	refreshIdle       = 30
)

// statusView is what the status page template sees.
type statusView struct {
	StatusPage
	// Refresh is how often the page reloads itself, in seconds;
	// Converging says whether a converge runs.
	Refresh    int
	Converging bool
	Sections   []clusterView
}

// clusterView is one cluster's section.
type clusterView struct {
	ClusterStatus
	// Slug makes the section's ids: cluster-<slug>, h-<slug>.
	Slug          string
	RepositoryURL string
}

func (s *server) status(w http.ResponseWriter, _ *http.Request) {
	var page StatusPage
	if s.opts.Status != nil {
		page = s.opts.Status()
	}
	if page.Generated.IsZero() {
		page.Generated = time.Now()
	}
	s.render(w, "status", newStatusView(page))
}

func newStatusView(page StatusPage) statusView {
	v := statusView{StatusPage: page, Refresh: refreshIdle}
	used := map[string]int{}
	for _, c := range page.Clusters {
		if !c.Elsewhere && c.Running != "" {
			v.Converging, v.Refresh = true, refreshConverging
		}
		slug := Slug(c.Path)
		// Two paths that differ only in case or punctuation would share
		// ids: the later ones get a number.
		if used[slug]++; used[slug] > 1 {
			slug = fmt.Sprintf("%s-%d", slug, used[slug])
		}
		v.Sections = append(v.Sections, clusterView{ClusterStatus: c, Slug: slug, RepositoryURL: strings.TrimRight(page.RepositoryURL, "/")})
	}
	return v
}

// Slug is the part of a cluster section's ids that comes from the
// cluster's path: the path in lower case, with every run of characters
// other than a-z and 0-9 turned into one "-". "clusters/Prod_A" gives
// "clusters-prod-a".
func Slug(path string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(path) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return b.String()
}

// planView is what the plan page template sees.
type planView struct {
	ID   string
	Body string
	// Refresh is 0: a plan does not change.
	Refresh int
}

func (s *server) plan(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !planIDPattern.MatchString(id) || s.opts.Plan == nil {
		http.NotFound(w, r)
		return
	}
	body, ok := s.opts.Plan(id)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.URL.Query().Get("format") == "text" {
		writeText(w, http.StatusOK, body)
		return
	}
	s.render(w, "plan", planView{ID: id, Body: body})
}

// render executes a page template into a buffer first, so a template
// error gives a clean 500 rather than half a page.
func (s *server) render(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		s.logger.Error("rendering a page", "page", name, "error", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

func writeText(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// firstLine returns the first line of s without control characters, cut
// to maxReason bytes on a character boundary.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// promLogger passes promhttp's errors to the agent's logger.
type promLogger struct{ logger *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.logger.Warn("serving metrics", "error", strings.TrimSpace(fmt.Sprintln(v...)))
}
