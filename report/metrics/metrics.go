// Package metrics exports the agent's Prometheus metrics: runs by kind and
// result, their durations, the last success and drift of every cluster,
// whether the last drift check could plan the cluster at all, what the last
// check found (updates available, patch releases behind, cordoned nodes,
// whether it finished), Git fetches, GitHub API calls and the rate limit,
// the queue, the runs in progress and the converges waiting on something
// that will change on its own. Every name starts with taloscluster_.
//
// Label values come only from fixed sets or from the repository's cluster
// paths, never from free text such as error messages, so nothing secret can
// become a label and the number of series stays bounded. Kinds, results
// and GitHub operations are typed values checked against their sets, an
// HTTP code outside 100-599 is reported as "error", and a cluster path must
// match [ClusterPathPattern] and, once [Metrics.SetClusters] has been
// called, be one of the repository's cluster paths. Anything else is
// reported under the fixed label value [InvalidLabel].
//
// A [Metrics] registers itself with the registerer it is given, never with
// the global registry.
package metrics

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace is the prefix of every metric name.
const Namespace = "taloscluster"

// InvalidLabel is the label value that stands in for a value outside its
// fixed set, such as a cluster path that is not a repository path.
const InvalidLabel = "invalid"

// maxClusterPath bounds the length of a cluster label value.
const maxClusterPath = 128

// ClusterPathPattern is what a cluster path must look like to become a
// label value: slash-separated segments of letters, digits, dots, dashes
// and underscores, none starting with a dot or a dash, at most 128
// characters in all.
const ClusterPathPattern = `^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$`

var clusterPathRE = regexp.MustCompile(ClusterPathPattern)

// Kind is the kind of a run.
type Kind string

// The kinds of run.
const (
	KindPlan     Kind = "plan"
	KindConverge Kind = "converge"
	KindDrift    Kind = "drift"
	KindDestroy  Kind = "destroy"
)

// kinds lists every kind of run.
var kinds = []Kind{KindPlan, KindConverge, KindDrift, KindDestroy}

// Result is how a run ended.
type Result string

// The results of a run.
const (
	ResultSuccess   Result = "success"
	ResultFailure   Result = "failure"
	ResultRefused   Result = "refused"
	ResultCancelled Result = "cancelled"
	// ResultRetried is a run that failed with a transient error and was
	// queued to run again; the last try of a job ends in one of the other
	// results.
	ResultRetried Result = "retried"
	// ResultWaiting is a converge that stopped on something that will
	// change on its own (a PodDisruptionBudget blocking a drain, a node
	// still booting) and was queued to run again: not a failure. A run
	// that waits longer than the agent's bound ends as a failure.
	ResultWaiting Result = "waiting"
)

// results lists every result of a run.
var results = []Result{ResultSuccess, ResultFailure, ResultRefused, ResultCancelled, ResultRetried, ResultWaiting}

// GitHubOp names a GitHub API call the agent makes.
type GitHubOp string

// The GitHub API calls the agent makes. OpOther is for a call not listed
// here; a value outside this set is counted as OpOther too.
const (
	OpGetRepo            GitHubOp = "get_repo"
	OpListPulls          GitHubOp = "list_pulls"
	OpGetPull            GitHubOp = "get_pull"
	OpListPullFiles      GitHubOp = "list_pull_files"
	OpListPullsForCommit GitHubOp = "list_pulls_for_commit"
	OpListComments       GitHubOp = "list_comments"
	OpCreateComment      GitHubOp = "create_comment"
	OpEditComment        GitHubOp = "edit_comment"
	OpCreateStatus       GitHubOp = "create_status"
	OpRateLimit          GitHubOp = "rate_limit"
	OpOther              GitHubOp = "other"
)

// Component is a component whose releases the check compares with its
// pin; a value outside the set below is reported as InvalidLabel.
type Component string

// The components the check compares.
const (
	ComponentTalos      Component = "talos"
	ComponentKubernetes Component = "kubernetes"
)

// codeError is the code label of a GitHub request that got no HTTP answer.
const codeError = "error"

// durationBuckets are the buckets of the run duration histogram, in
// seconds: from one second to one hour.
var durationBuckets = []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600}

// Option changes how [New] builds a Metrics.
type Option func(*Metrics)

// WithClock makes the Metrics read the time from now instead of
// time.Now; the time of a run's success is taken from it.
func WithClock(now func() time.Time) Option {
	return func(m *Metrics) { m.now = now }
}

// Metrics holds the agent's metrics. It is a prometheus.Collector; its
// methods are safe for concurrent use.
type Metrics struct {
	now func() time.Time

	mu       sync.RWMutex
	clusters map[string]bool   // nil until SetClusters
	inFlight map[[2]string]int // runs in progress by cluster and kind label

	runs          *prometheus.CounterVec
	runDuration   *prometheus.HistogramVec
	lastSuccess   *prometheus.GaugeVec
	drift         *prometheus.GaugeVec
	driftCheck    *prometheus.GaugeVec
	running       *prometheus.GaugeVec
	failing       *prometheus.GaugeVec
	waiting       *prometheus.GaugeVec
	leaseHeld     *prometheus.GaugeVec
	update        *prometheus.GaugeVec
	behind        *prometheus.GaugeVec
	cordoned      *prometheus.GaugeVec
	pluginDrift   *prometheus.GaugeVec
	checkSuccess  *prometheus.GaugeVec
	lastFetch     prometheus.Gauge
	fetches       *prometheus.CounterVec
	githubCalls   *prometheus.CounterVec
	rateRemaining prometheus.Gauge
	queueDepth    prometheus.Gauge
	remediations  *prometheus.CounterVec

	// reports: the outbox, as last recorded; the age of the oldest report
	// is computed when scraped.
	reportsMu      sync.Mutex
	reportsPending int
	reportsOldest  time.Time
	reportsDropped int
}

// Descriptions of the outbox series, computed when scraped.
var (
	reportsPendingDesc = prometheus.NewDesc(Namespace+"_reports_pending",
		"Reports (commit statuses and comments) owed to GitHub and not yet delivered.", nil, nil)
	reportsAgeDesc = prometheus.NewDesc(Namespace+"_reports_oldest_pending_age_seconds",
		"How long the oldest report owed to GitHub has waited; 0 when none waits.", nil, nil)
	reportsDroppedDesc = prometheus.NewDesc(Namespace+"_reports_dropped_total",
		"Reports given up on (GitHub kept refusing them, or the outbox was full) since the agent started.", nil, nil)
)

var _ prometheus.Collector = (*Metrics)(nil)

// New builds the agent's metrics and registers them with reg. A nil reg
// leaves them unregistered; the Metrics is a collector that can be
// registered later. Registering twice with one registerer is an error.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	m := &Metrics{
		now:      time.Now,
		inFlight: make(map[[2]string]int),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "runs_total",
			Help:      "Runs finished, by kind and result.",
		}, []string{"kind", "result"}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "run_duration_seconds",
			Help:      "How long runs took, by kind.",
			Buckets:   durationBuckets,
		}, []string{"kind"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "cluster_last_success_timestamp_seconds",
			Help:      "Unix time of the last successful run of a cluster, by kind.",
		}, []string{"cluster", "kind"}),
		drift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "cluster_drift",
			Help:      "1 when the last drift check found the cluster differs from the default branch, else 0.",
		}, []string{"cluster"}),
		driftCheck: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "cluster_drift_check_success",
			Help:      "1 when the last drift check of a cluster could plan it, 0 when it failed and drift is unknown (cluster_drift keeps the last known value).",
		}, []string{"cluster"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "cluster_running",
			Help:      "Runs of a cluster in progress, by kind.",
		}, []string{"cluster", "kind"}),
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "cluster_converge_failing",
			Help:      "1 when the last converge of a cluster failed or was refused (also while it waits to be retried), 0 after a successful one or one that waits on something that will change on its own.",
		}, []string{"cluster"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "cluster_converge_waiting",
			Help:      "1 when the last converge of a cluster stopped on something that will change on its own (a PodDisruptionBudget, a node still booting) and waits to run again, 0 after any other result.",
		}, []string{"cluster"}),
		leaseHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "cluster_lease_held",
			Help:      "1 when this agent replica holds the cluster's Lease and so plans and converges it, else 0.",
		}, []string{"cluster"}),
		update: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "update_available",
			Help:      "1 when the last check that could read the releases found an update of the component to take (a newer patch of the pinned minor, or a newer minor the other pin allows), else 0.",
		}, []string{"cluster", "component"}),
		behind: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "patch_releases_behind",
			Help:      "Releases of the pinned minor newer than the pin, as the last check that could read the releases found them.",
		}, []string{"cluster", "component"}),
		cordoned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "nodes_cordoned",
			Help:      "Kubernetes nodes of the cluster marked unschedulable, as the last check that could read the Kubernetes API found them.",
		}, []string{"cluster"}),
		pluginDrift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "plugin_drift",
			Help:      "1 when the last check that could read a configured plugin's objects found steps a converge would make (argocd, charts, rancher), else 0.",
		}, []string{"cluster", "plugin"}),
		checkSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "cluster_check_success",
			Help:      "1 when the last check of a cluster finished, 0 when it was incomplete (a source could not be read) or failed; the other check series keep their last known values meanwhile.",
		}, []string{"cluster"}),
		lastFetch: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "git_last_fetch_timestamp_seconds",
			Help:      "Unix time of the last successful fetch of the repository.",
		}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "git_fetches_total",
			Help:      "Fetches of the repository, by result.",
		}, []string{"result"}),
		githubCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "github_requests_total",
			Help:      "GitHub API requests, by operation and HTTP status code (\"error\" when no answer came).",
		}, []string{"op", "code"}),
		rateRemaining: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "github_rate_limit_remaining",
			Help:      "GitHub API requests left in the current rate-limit window, as last reported.",
		}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "queue_depth",
			Help:      "Jobs waiting to run.",
		}),
		remediations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "remediations_total",
			Help:      "Worker machines a converge began to replace because their node stayed NotReady (remediation), by cluster and worker pool.",
		}, []string{"cluster", "pool"}),
	}
	for _, o := range opts {
		o(m)
	}
	// Series that exist from the start, so rates and alerts see zeroes
	// rather than gaps.
	for _, k := range kinds {
		for _, r := range results {
			m.runs.WithLabelValues(string(k), string(r))
		}
	}
	for _, r := range []string{"success", "failure"} {
		m.fetches.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(m); err != nil {
			return nil, fmt.Errorf("registering the agent metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.runs, m.runDuration, m.lastSuccess, m.drift, m.driftCheck, m.running, m.failing, m.waiting, m.leaseHeld,
		m.update, m.behind, m.cordoned, m.pluginDrift, m.checkSuccess, m.lastFetch, m.fetches, m.githubCalls, m.rateRemaining, m.queueDepth,
		m.remediations,
	}
}

// Describe sends the descriptions of every metric to ch.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	ch <- reportsPendingDesc
	ch <- reportsAgeDesc
	ch <- reportsDroppedDesc
}

// Collect sends the current value of every metric to ch.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	m.reportsMu.Lock()
	pending, oldest, dropped := m.reportsPending, m.reportsOldest, m.reportsDropped
	m.reportsMu.Unlock()
	age := 0.0
	if pending > 0 && !oldest.IsZero() {
		age = max(m.now().Sub(oldest).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(reportsPendingDesc, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(reportsAgeDesc, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(reportsDroppedDesc, prometheus.CounterValue, float64(dropped))
}

// SetClusters sets the repository's cluster paths: from then on only these
// paths become cluster labels, and the series of clusters no longer listed
// are removed. Paths that do not match ClusterPathPattern are ignored.
func (m *Metrics) SetClusters(paths []string) {
	next := make(map[string]bool, len(paths))
	for _, p := range paths {
		if wellFormed(p) {
			next[p] = true
		}
	}
	m.mu.Lock()
	prev := m.clusters
	m.clusters = next
	m.mu.Unlock()
	for p := range prev {
		if !next[p] {
			m.forget(p)
		}
	}
}

// forget removes every series labelled with cluster.
func (m *Metrics) forget(cluster string) {
	m.mu.Lock()
	for key := range m.inFlight {
		if key[0] == cluster {
			delete(m.inFlight, key)
		}
	}
	m.mu.Unlock()
	l := prometheus.Labels{"cluster": cluster}
	m.lastSuccess.DeletePartialMatch(l)
	m.drift.DeletePartialMatch(l)
	m.driftCheck.DeletePartialMatch(l)
	m.running.DeletePartialMatch(l)
	m.failing.DeletePartialMatch(l)
	m.waiting.DeletePartialMatch(l)
	m.leaseHeld.DeletePartialMatch(l)
	m.dropCheck(l)
}

// dropCheck removes the check series of a cluster.
func (m *Metrics) dropCheck(l prometheus.Labels) {
	m.update.DeletePartialMatch(l)
	m.behind.DeletePartialMatch(l)
	m.cordoned.DeletePartialMatch(l)
	m.pluginDrift.DeletePartialMatch(l)
	m.checkSuccess.DeletePartialMatch(l)
}

// ClusterLabel returns the label value for a cluster path: the path itself
// when it is well-formed and, once SetClusters has been called, one of the
// repository's cluster paths; InvalidLabel otherwise.
func (m *Metrics) ClusterLabel(path string) string {
	if !wellFormed(path) {
		return InvalidLabel
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.clusters != nil && !m.clusters[path] {
		return InvalidLabel
	}
	return path
}

// poolRE is what a worker pool's name must look like to become a label
// value: cluster.yaml's pool names are lowercase DNS labels.
var poolRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func poolLabel(pool string) string {
	if !poolRE.MatchString(pool) {
		return InvalidLabel
	}
	return pool
}

// Remediation records that a converge of cluster began to replace a
// worker machine of pool (taloscluster_remediations_total).
func (m *Metrics) Remediation(cluster, pool string) {
	m.remediations.WithLabelValues(m.ClusterLabel(cluster), poolLabel(pool)).Inc()
}

func wellFormed(path string) bool {
	return len(path) <= maxClusterPath && clusterPathRE.MatchString(path)
}

func kindLabel(k Kind) string {
	switch k {
	case KindPlan, KindConverge, KindDrift, KindDestroy:
		return string(k)
	}
	return InvalidLabel
}

func resultLabel(r Result) string {
	switch r {
	case ResultSuccess, ResultFailure, ResultRefused, ResultCancelled, ResultRetried, ResultWaiting:
		return string(r)
	}
	return InvalidLabel
}

func componentLabel(c Component) string {
	switch c {
	case ComponentTalos, ComponentKubernetes:
		return string(c)
	}
	return InvalidLabel
}

func opLabel(op GitHubOp) string {
	switch op {
	case OpGetRepo, OpListPulls, OpGetPull, OpListPullFiles, OpListPullsForCommit,
		OpListComments, OpCreateComment, OpEditComment, OpCreateStatus, OpRateLimit:
		return string(op)
	}
	return string(OpOther)
}

func codeLabel(code int) string {
	if code < 100 || code > 599 {
		return codeError
	}
	return strconv.Itoa(code)
}

// RunStarted records that a run of cluster began; it counts in
// taloscluster_cluster_running until the matching RunFinished.
func (m *Metrics) RunStarted(kind Kind, cluster string) {
	m.addRunning(m.ClusterLabel(cluster), kindLabel(kind), 1)
}

// addRunning changes the count of runs in progress, never below zero.
func (m *Metrics) addRunning(cluster, kind string, delta int) {
	key := [2]string{cluster, kind}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := max(m.inFlight[key]+delta, 0)
	if n == 0 {
		delete(m.inFlight, key)
	} else {
		m.inFlight[key] = n
	}
	m.running.WithLabelValues(cluster, kind).Set(float64(n))
}

// RunFinished records the end of a run that RunStarted began: its result
// and duration, and for a success the time of the cluster's last success.
// A converge that waits (ResultWaiting) sets the cluster's waiting gauge and
// clears its failing one; any other converge result clears the waiting
// gauge.
func (m *Metrics) RunFinished(kind Kind, cluster string, result Result, d time.Duration) {
	k, c := kindLabel(kind), m.ClusterLabel(cluster)
	m.addRunning(c, k, -1)
	m.runs.WithLabelValues(k, resultLabel(result)).Inc()
	m.runDuration.WithLabelValues(k).Observe(d.Seconds())
	if result == ResultSuccess {
		m.lastSuccess.WithLabelValues(c, k).Set(unixSeconds(m.now()))
	}
	if kind == KindConverge {
		switch result {
		case ResultSuccess, ResultWaiting:
			m.failing.WithLabelValues(c).Set(0)
		case ResultFailure, ResultRefused, ResultRetried:
			m.failing.WithLabelValues(c).Set(1)
		}
		waiting := 0.0
		if result == ResultWaiting {
			waiting = 1
		}
		m.waiting.WithLabelValues(c).Set(waiting)
	}
}

// LeaseHeld records whether this replica holds a cluster's Lease. A
// replica that does not hold it drops the cluster's converge, drift and
// check series: they are the owner's to report, and a stale value here
// would keep an alert firing.
func (m *Metrics) LeaseHeld(cluster string, held bool) {
	c := m.ClusterLabel(cluster)
	if held {
		m.leaseHeld.WithLabelValues(c).Set(1)
		return
	}
	m.leaseHeld.WithLabelValues(c).Set(0)
	l := prometheus.Labels{"cluster": c}
	m.failing.DeletePartialMatch(l)
	m.waiting.DeletePartialMatch(l)
	m.drift.DeletePartialMatch(l)
	m.driftCheck.DeletePartialMatch(l)
	m.dropCheck(l)
}

// Drift records the outcome of a drift check that could plan cluster:
// whether it drifted, and that the check succeeded.
func (m *Metrics) Drift(cluster string, drifted bool) {
	v := 0.0
	if drifted {
		v = 1
	}
	c := m.ClusterLabel(cluster)
	m.drift.WithLabelValues(c).Set(v)
	m.driftCheck.WithLabelValues(c).Set(1)
}

// DriftCheckFailed records a drift check that could not plan cluster:
// whether it drifted is unknown, so taloscluster_cluster_drift keeps its
// last value and taloscluster_cluster_drift_check_success goes to 0.
func (m *Metrics) DriftCheckFailed(cluster string) {
	m.driftCheck.WithLabelValues(m.ClusterLabel(cluster)).Set(0)
}

// ComponentChecked records what a check that could read a component's
// releases found: whether there is an update to take, and how many
// releases of the pinned minor are newer than the pin (negative counts
// as 0). A check that could not read the releases should not call it, so
// the last known values stay.
func (m *Metrics) ComponentChecked(cluster string, component Component, updateAvailable bool, patchesBehind int) {
	c, comp := m.ClusterLabel(cluster), componentLabel(component)
	v := 0.0
	if updateAvailable {
		v = 1
	}
	m.update.WithLabelValues(c, comp).Set(v)
	m.behind.WithLabelValues(c, comp).Set(float64(max(patchesBehind, 0)))
}

// NodesCordoned records how many Kubernetes nodes of a cluster are marked
// unschedulable, as a check that read the Kubernetes API found them.
func (m *Metrics) NodesCordoned(cluster string, n int) {
	m.cordoned.WithLabelValues(m.ClusterLabel(cluster)).Set(float64(max(n, 0)))
}

// Plugins whose drift is a series; any other name is InvalidLabel.
var pluginNames = []string{"argocd", "charts", "rancher"}

// PluginChecked records whether a configured plugin of cluster has steps
// a converge would make, as a check that read its objects found.
func (m *Metrics) PluginChecked(cluster, plugin string, drift bool) {
	label := InvalidLabel
	if slices.Contains(pluginNames, plugin) {
		label = plugin
	}
	v := 0.0
	if drift {
		v = 1
	}
	m.pluginDrift.WithLabelValues(m.ClusterLabel(cluster), label).Set(v)
}

// PluginsConfigured drops the drift series of cluster's plugins that are
// not among configured (a section removed from cluster.yaml).
func (m *Metrics) PluginsConfigured(cluster string, configured []string) {
	c := m.ClusterLabel(cluster)
	for _, name := range pluginNames {
		if !slices.Contains(configured, name) {
			m.pluginDrift.DeleteLabelValues(c, name)
		}
	}
}

// CheckFinished records the end of a check of cluster: complete is true
// when it read every source, false when it was incomplete or failed.
func (m *Metrics) CheckFinished(cluster string, complete bool) {
	v := 0.0
	if complete {
		v = 1
	}
	m.checkSuccess.WithLabelValues(m.ClusterLabel(cluster)).Set(v)
}

// Fetched records a fetch of the repository that ended at at; a
// successful one also sets the time of the last fetch.
func (m *Metrics) Fetched(ok bool, at time.Time) {
	if !ok {
		m.fetches.WithLabelValues("failure").Inc()
		return
	}
	m.fetches.WithLabelValues("success").Inc()
	m.lastFetch.Set(unixSeconds(at))
}

// GitHubRequest counts a GitHub API request and the HTTP status code of its
// answer; code 0 (or any value outside 100-599) means no answer came.
func (m *Metrics) GitHubRequest(op GitHubOp, code int) {
	m.githubCalls.WithLabelValues(opLabel(op), codeLabel(code)).Inc()
}

// RateLimitRemaining records the requests left in GitHub's rate-limit
// window, as reported by its last answer.
func (m *Metrics) RateLimitRemaining(n int) {
	m.rateRemaining.Set(float64(n))
}

// QueueDepth records the number of jobs waiting to run.
func (m *Metrics) QueueDepth(n int) {
	m.queueDepth.Set(float64(n))
}

// ReportsPending records the outbox: how many reports wait, when the
// oldest was queued, and how many were dropped since start.
func (m *Metrics) ReportsPending(n int, oldest time.Time, dropped int) {
	m.reportsMu.Lock()
	defer m.reportsMu.Unlock()
	m.reportsPending, m.reportsOldest, m.reportsDropped = n, oldest, dropped
}

// unixSeconds is t as fractional Unix seconds; the zero time is 0.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}
