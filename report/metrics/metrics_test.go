package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/taloscluster/taloscluster/report/metrics"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.WithClock(func() time.Time { return epoch }))
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// series is a collector of the one series of m named name whose labels
// include want, so testutil.ToFloat64 can read it.
type series struct {
	m    *metrics.Metrics
	name string
	want map[string]string
}

func (s series) Describe(ch chan<- *prometheus.Desc) { s.m.Describe(ch) }

func (s series) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() {
		s.m.Collect(all)
		close(all)
	}()
	for metric := range all {
		if !strings.Contains(metric.Desc().String(), `fqName: "`+s.name+`"`) {
			continue
		}
		var pb dto.Metric
		if err := metric.Write(&pb); err != nil {
			continue
		}
		matched := 0
		for _, lp := range pb.GetLabel() {
			if v, ok := s.want[lp.GetName()]; ok && v == lp.GetValue() {
				matched++
			}
		}
		if matched == len(s.want) {
			ch <- metric
		}
	}
}

func value(m *metrics.Metrics, name string, labels map[string]string) float64 {
	return testutil.ToFloat64(series{m: m, name: name, want: labels})
}

func TestNewRegistersEveryMetric(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	m.RunStarted(metrics.KindPlan, "clusters/prod-a")
	m.RunFinished(metrics.KindPlan, "clusters/prod-a", metrics.ResultSuccess, time.Second)
	m.Drift("clusters/prod-a", false)
	m.DriftCheckFailed("clusters/prod-a")
	m.Fetched(true, epoch)
	m.GitHubRequest(metrics.OpListPulls, 200)
	m.RateLimitRemaining(4999)
	m.QueueDepth(0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, name := range []string{
		"taloscluster_runs_total",
		"taloscluster_run_duration_seconds",
		"taloscluster_cluster_last_success_timestamp_seconds",
		"taloscluster_cluster_drift",
		"taloscluster_cluster_drift_check_success",
		"taloscluster_git_last_fetch_timestamp_seconds",
		"taloscluster_git_fetches_total",
		"taloscluster_github_requests_total",
		"taloscluster_github_rate_limit_remaining",
		"taloscluster_queue_depth",
		"taloscluster_cluster_running",
		"taloscluster_reports_pending",
		"taloscluster_reports_oldest_pending_age_seconds",
		"taloscluster_reports_dropped_total",
	} {
		if !got[name] {
			t.Errorf("%s not gathered", name)
		}
	}
	if len(got) != 14 {
		t.Errorf("gathered %d metric families, want 14: %v", len(got), got)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Error("registering a second Metrics with one registry succeeded")
	}
}

func TestNilRegistererLeavesUnregistered(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	m.QueueDepth(3)
	if got := value(m, "taloscluster_queue_depth", nil); got != 3 {
		t.Fatalf("queue depth %v, want 3", got)
	}
}

func TestConvergeFailingWaitingAndLeaseHeld(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	failing := func() float64 {
		return value(m, "taloscluster_cluster_converge_failing", map[string]string{"cluster": "clusters/a"})
	}
	for _, step := range []struct {
		result metrics.Result
		want   float64
	}{{metrics.ResultRetried, 1}, {metrics.ResultCancelled, 1}, {metrics.ResultSuccess, 0}, {metrics.ResultRefused, 1}} {
		m.RunStarted(metrics.KindConverge, "clusters/a")
		m.RunFinished(metrics.KindConverge, "clusters/a", step.result, time.Second)
		if got := failing(); got != step.want {
			t.Fatalf("after a %s converge: failing %v, want %v", step.result, got, step.want)
		}
	}
	// A converge that waits on something that will change on its own is
	// not failing; the next result of any other kind ends the wait.
	waiting := func() float64 {
		return value(m, "taloscluster_cluster_converge_waiting", map[string]string{"cluster": "clusters/a"})
	}
	for _, step := range []struct {
		result           metrics.Result
		failing, waiting float64
	}{{metrics.ResultWaiting, 0, 1}, {metrics.ResultWaiting, 0, 1}, {metrics.ResultFailure, 1, 0}, {metrics.ResultWaiting, 0, 1}, {metrics.ResultSuccess, 0, 0}} {
		m.RunStarted(metrics.KindConverge, "clusters/a")
		m.RunFinished(metrics.KindConverge, "clusters/a", step.result, time.Second)
		if f, w := failing(), waiting(); f != step.failing || w != step.waiting {
			t.Fatalf("after a %s converge: failing %v, waiting %v; want %v, %v", step.result, f, w, step.failing, step.waiting)
		}
	}
	if got := value(m, "taloscluster_runs_total", map[string]string{"kind": "converge", "result": "waiting"}); got != 3 {
		t.Fatalf("waiting converges counted %v, want 3", got)
	}
	m.RunStarted(metrics.KindConverge, "clusters/a")
	m.RunFinished(metrics.KindConverge, "clusters/a", metrics.ResultWaiting, time.Second)
	m.LeaseHeld("clusters/a", true)
	if got := value(m, "taloscluster_cluster_lease_held", map[string]string{"cluster": "clusters/a"}); got != 1 {
		t.Fatalf("lease held %v, want 1", got)
	}
	// Another replica took the cluster: its failing series is that
	// replica's to report now.
	m.LeaseHeld("clusters/a", false)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	for _, name := range []string{"taloscluster_cluster_converge_failing", "taloscluster_cluster_converge_waiting"} {
		n, err := testutil.GatherAndCount(reg, name)
		if err != nil || n != 0 {
			t.Fatalf("%s series after the Lease went elsewhere: %d, %v; want none", name, n, err)
		}
	}
}

func TestReportsPendingAgeGrowsWhileScraped(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t) // the clock stands at epoch
	if got := value(m, "taloscluster_reports_oldest_pending_age_seconds", nil); got != 0 {
		t.Fatalf("age with nothing pending %v, want 0", got)
	}
	m.ReportsPending(3, epoch.Add(-90*time.Second), 1)
	if got := value(m, "taloscluster_reports_pending", nil); got != 3 {
		t.Fatalf("pending %v, want 3", got)
	}
	if got := value(m, "taloscluster_reports_oldest_pending_age_seconds", nil); got != 90 {
		t.Fatalf("age %v, want 90", got)
	}
	if got := value(m, "taloscluster_reports_dropped_total", nil); got != 1 {
		t.Fatalf("dropped %v, want 1", got)
	}
	m.ReportsPending(0, time.Time{}, 1)
	if got := value(m, "taloscluster_reports_oldest_pending_age_seconds", nil); got != 0 {
		t.Fatalf("age after delivery %v, want 0", got)
	}
}

func TestRunFinished(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	m.RunStarted(metrics.KindConverge, "clusters/prod-a")
	m.RunStarted(metrics.KindPlan, "clusters/prod-a")
	m.RunStarted(metrics.KindPlan, "clusters/prod-a")
	if got := value(m, "taloscluster_cluster_running", map[string]string{"cluster": "clusters/prod-a", "kind": "plan"}); got != 2 {
		t.Fatalf("running plans %v, want 2", got)
	}
	m.RunFinished(metrics.KindConverge, "clusters/prod-a", metrics.ResultSuccess, 90*time.Second)
	m.RunFinished(metrics.KindPlan, "clusters/prod-a", metrics.ResultRefused, 2*time.Second)
	m.RunFinished(metrics.KindPlan, "clusters/prod-a", metrics.ResultCancelled, 500*time.Millisecond)
	m.RunStarted(metrics.KindConverge, "clusters/prod-a")
	m.RunFinished(metrics.KindConverge, "clusters/prod-a", metrics.ResultRetried, 0)
	// A finish without a start never drives the gauge below zero.
	m.RunFinished(metrics.KindPlan, "clusters/prod-a", metrics.ResultFailure, time.Second)

	want := `
# HELP taloscluster_cluster_last_success_timestamp_seconds Unix time of the last successful run of a cluster, by kind.
# TYPE taloscluster_cluster_last_success_timestamp_seconds gauge
taloscluster_cluster_last_success_timestamp_seconds{cluster="clusters/prod-a",kind="converge"} 1.7723664e+09
# HELP taloscluster_cluster_running Runs of a cluster in progress, by kind.
# TYPE taloscluster_cluster_running gauge
taloscluster_cluster_running{cluster="clusters/prod-a",kind="converge"} 0
taloscluster_cluster_running{cluster="clusters/prod-a",kind="plan"} 0
# HELP taloscluster_runs_total Runs finished, by kind and result.
# TYPE taloscluster_runs_total counter
taloscluster_runs_total{kind="converge",result="cancelled"} 0
taloscluster_runs_total{kind="converge",result="failure"} 0
taloscluster_runs_total{kind="converge",result="refused"} 0
taloscluster_runs_total{kind="converge",result="retried"} 1
taloscluster_runs_total{kind="converge",result="success"} 1
taloscluster_runs_total{kind="converge",result="waiting"} 0
taloscluster_runs_total{kind="destroy",result="cancelled"} 0
taloscluster_runs_total{kind="destroy",result="failure"} 0
taloscluster_runs_total{kind="destroy",result="refused"} 0
taloscluster_runs_total{kind="destroy",result="retried"} 0
taloscluster_runs_total{kind="destroy",result="success"} 0
taloscluster_runs_total{kind="destroy",result="waiting"} 0
taloscluster_runs_total{kind="drift",result="cancelled"} 0
taloscluster_runs_total{kind="drift",result="failure"} 0
taloscluster_runs_total{kind="drift",result="refused"} 0
taloscluster_runs_total{kind="drift",result="retried"} 0
taloscluster_runs_total{kind="drift",result="success"} 0
taloscluster_runs_total{kind="drift",result="waiting"} 0
taloscluster_runs_total{kind="plan",result="cancelled"} 1
taloscluster_runs_total{kind="plan",result="failure"} 1
taloscluster_runs_total{kind="plan",result="refused"} 1
taloscluster_runs_total{kind="plan",result="retried"} 0
taloscluster_runs_total{kind="plan",result="success"} 0
taloscluster_runs_total{kind="plan",result="waiting"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want),
		"taloscluster_runs_total", "taloscluster_cluster_running", "taloscluster_cluster_last_success_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}

	wantHist := `
# HELP taloscluster_run_duration_seconds How long runs took, by kind.
# TYPE taloscluster_run_duration_seconds histogram
taloscluster_run_duration_seconds_bucket{kind="converge",le="1"} 1
taloscluster_run_duration_seconds_bucket{kind="converge",le="2.5"} 1
taloscluster_run_duration_seconds_bucket{kind="converge",le="5"} 1
taloscluster_run_duration_seconds_bucket{kind="converge",le="10"} 1
taloscluster_run_duration_seconds_bucket{kind="converge",le="20"} 1
taloscluster_run_duration_seconds_bucket{kind="converge",le="30"} 1
taloscluster_run_duration_seconds_bucket{kind="converge",le="60"} 1
taloscluster_run_duration_seconds_bucket{kind="converge",le="120"} 2
taloscluster_run_duration_seconds_bucket{kind="converge",le="300"} 2
taloscluster_run_duration_seconds_bucket{kind="converge",le="600"} 2
taloscluster_run_duration_seconds_bucket{kind="converge",le="1200"} 2
taloscluster_run_duration_seconds_bucket{kind="converge",le="1800"} 2
taloscluster_run_duration_seconds_bucket{kind="converge",le="3600"} 2
taloscluster_run_duration_seconds_bucket{kind="converge",le="+Inf"} 2
taloscluster_run_duration_seconds_sum{kind="converge"} 90
taloscluster_run_duration_seconds_count{kind="converge"} 2
taloscluster_run_duration_seconds_bucket{kind="plan",le="1"} 2
taloscluster_run_duration_seconds_bucket{kind="plan",le="2.5"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="5"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="10"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="20"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="30"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="60"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="120"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="300"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="600"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="1200"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="1800"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="3600"} 3
taloscluster_run_duration_seconds_bucket{kind="plan",le="+Inf"} 3
taloscluster_run_duration_seconds_sum{kind="plan"} 3.5
taloscluster_run_duration_seconds_count{kind="plan"} 3
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(wantHist), "taloscluster_run_duration_seconds"); err != nil {
		t.Fatal(err)
	}
}

func TestDriftFetchGitHubQueue(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	m.Drift("clusters/prod-a", true)
	m.Drift("clusters/staging", true)
	m.Drift("clusters/staging", false)
	// A check that could not plan the cluster leaves the last known drift
	// and says the check failed; one that works again says so.
	m.DriftCheckFailed("clusters/prod-a")
	m.DriftCheckFailed("clusters/staging")
	m.Drift("clusters/staging", false)
	m.Fetched(true, epoch)
	m.Fetched(false, epoch.Add(time.Minute))
	m.GitHubRequest(metrics.OpCreateComment, 201)
	m.GitHubRequest(metrics.OpCreateComment, 201)
	m.GitHubRequest(metrics.OpListPulls, 403)
	m.GitHubRequest(metrics.OpCreateStatus, 0)
	m.GitHubRequest(metrics.GitHubOp("DELETE /repos/x/y token=ghp_abc"), 1234)
	m.RateLimitRemaining(4321)
	m.QueueDepth(7)

	want := `
# HELP taloscluster_cluster_drift 1 when the last drift check found the cluster differs from the default branch, else 0.
# TYPE taloscluster_cluster_drift gauge
taloscluster_cluster_drift{cluster="clusters/prod-a"} 1
taloscluster_cluster_drift{cluster="clusters/staging"} 0
# HELP taloscluster_cluster_drift_check_success 1 when the last drift check of a cluster could plan it, 0 when it failed and drift is unknown (cluster_drift keeps the last known value).
# TYPE taloscluster_cluster_drift_check_success gauge
taloscluster_cluster_drift_check_success{cluster="clusters/prod-a"} 0
taloscluster_cluster_drift_check_success{cluster="clusters/staging"} 1
# HELP taloscluster_git_fetches_total Fetches of the repository, by result.
# TYPE taloscluster_git_fetches_total counter
taloscluster_git_fetches_total{result="failure"} 1
taloscluster_git_fetches_total{result="success"} 1
# HELP taloscluster_git_last_fetch_timestamp_seconds Unix time of the last successful fetch of the repository.
# TYPE taloscluster_git_last_fetch_timestamp_seconds gauge
taloscluster_git_last_fetch_timestamp_seconds 1.7723664e+09
# HELP taloscluster_github_requests_total GitHub API requests, by operation and HTTP status code ("error" when no answer came).
# TYPE taloscluster_github_requests_total counter
taloscluster_github_requests_total{code="201",op="create_comment"} 2
taloscluster_github_requests_total{code="403",op="list_pulls"} 1
taloscluster_github_requests_total{code="error",op="create_status"} 1
taloscluster_github_requests_total{code="error",op="other"} 1
# HELP taloscluster_github_rate_limit_remaining GitHub API requests left in the current rate-limit window, as last reported.
# TYPE taloscluster_github_rate_limit_remaining gauge
taloscluster_github_rate_limit_remaining 4321
# HELP taloscluster_queue_depth Jobs waiting to run.
# TYPE taloscluster_queue_depth gauge
taloscluster_queue_depth 7
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want),
		"taloscluster_cluster_drift", "taloscluster_cluster_drift_check_success", "taloscluster_git_fetches_total", "taloscluster_git_last_fetch_timestamp_seconds",
		"taloscluster_github_requests_total", "taloscluster_github_rate_limit_remaining", "taloscluster_queue_depth"); err != nil {
		t.Fatal(err)
	}
}

func TestClusterLabelRejectsFreeText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path, want string
	}{
		{"repository path", "clusters/prod-a", "clusters/prod-a"},
		{"top-level directory", "staging", "staging"},
		{"underscores and dots", "clusters/eu_west.1", "clusters/eu_west.1"},
		{"empty", "", metrics.InvalidLabel},
		{"error message", "dial tcp 10.0.0.1:443: connection refused", metrics.InvalidLabel},
		{"bearer token", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9", metrics.InvalidLabel},
		{"base64 secret", "c2VjcmV0LXZhbHVlLWhlcmU=", metrics.InvalidLabel},
		{"url with credentials", "https://root:hunter2@pve.example:8006", metrics.InvalidLabel},
		{"pem block", "-----BEGIN PRIVATE KEY-----", metrics.InvalidLabel},
		{"parent directory", "../etc", metrics.InvalidLabel},
		{"hidden directory", "clusters/.git", metrics.InvalidLabel},
		{"absolute path", "/clusters/prod-a", metrics.InvalidLabel},
		{"trailing slash", "clusters/prod-a/", metrics.InvalidLabel},
		{"double slash", "clusters//prod-a", metrics.InvalidLabel},
		{"newline", "clusters/prod-a\nsecret", metrics.InvalidLabel},
		{"non-ascii", "clusters/prød", metrics.InvalidLabel},
		{"too long", "clusters/" + strings.Repeat("a", 200), metrics.InvalidLabel},
	}
	m, _ := newMetrics(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := m.ClusterLabel(tc.path); got != tc.want {
				t.Errorf("ClusterLabel(%q) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

func TestSecretNeverBecomesALabel(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	// A GitHub token is made of path characters, so only the list of the
	// repository's cluster paths keeps it out.
	const token = "ghp_R4nd0mT0k3nV4lu3ThatLooksLikeAPath0123"
	secrets := []string{
		"password=hunter2",
		"c2VjcmV0LXZhbHVlLWhlcmU=",
		"error: 401 Unauthorized for token " + token,
		token,
	}
	m.SetClusters([]string{"clusters/prod-a", "clusters/staging", "bad path with spaces"})
	for _, s := range secrets {
		m.RunStarted(metrics.KindConverge, s)
		m.RunFinished(metrics.KindConverge, s, metrics.ResultSuccess, time.Second)
		m.Drift(s, true)
		m.DriftCheckFailed(s)
		m.RunFinished(metrics.Kind(s), "clusters/prod-a", metrics.Result(s), time.Second)
		m.GitHubRequest(metrics.GitHubOp(s), 200)
	}
	m.Drift("clusters/prod-a", false)

	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"hunter2", "ghp_", "c2VjcmV0", "Unauthorized", "password"} {
		if strings.Contains(string(text), leak) {
			t.Errorf("%q reached the exposition:\n%s", leak, text)
		}
	}
	if got := value(m, "taloscluster_cluster_drift", map[string]string{"cluster": metrics.InvalidLabel}); got != 1 {
		t.Errorf("drift of the invalid cluster label %v, want 1", got)
	}
	if got := value(m, "taloscluster_runs_total", map[string]string{"kind": metrics.InvalidLabel, "result": metrics.InvalidLabel}); got != float64(len(secrets)) {
		t.Errorf("runs with an invalid kind and result %v, want %d", got, len(secrets))
	}
	if got := value(m, "taloscluster_github_requests_total", map[string]string{"op": "other", "code": "200"}); got != float64(len(secrets)) {
		t.Errorf("requests of other operations %v, want %d", got, len(secrets))
	}
	if got := m.ClusterLabel("bad path with spaces"); got != metrics.InvalidLabel {
		t.Errorf("a malformed path listed in SetClusters became label %q", got)
	}
}

func TestSetClustersForgetsRemovedClusters(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	m.SetClusters([]string{"clusters/prod-a", "clusters/old"})
	m.Drift("clusters/prod-a", true)
	m.Drift("clusters/old", true)
	m.DriftCheckFailed("clusters/old")
	m.RunStarted(metrics.KindConverge, "clusters/old")
	m.RunFinished(metrics.KindConverge, "clusters/old", metrics.ResultSuccess, time.Minute)
	if n := testutil.CollectAndCount(m, "taloscluster_cluster_drift"); n != 2 {
		t.Fatalf("%d drift series, want 2", n)
	}
	m.SetClusters([]string{"clusters/prod-a"})
	if n := testutil.CollectAndCount(m, "taloscluster_cluster_drift"); n != 1 {
		t.Errorf("%d drift series after removing a cluster, want 1", n)
	}
	if n := testutil.CollectAndCount(m, "taloscluster_cluster_drift_check_success"); n != 1 {
		t.Errorf("%d drift check series after removing a cluster, want 1", n)
	}
	for _, name := range []string{"taloscluster_cluster_last_success_timestamp_seconds", "taloscluster_cluster_running"} {
		if n := testutil.CollectAndCount(m, name); n != 0 {
			t.Errorf("%d %s series after removing the cluster, want 0", n, name)
		}
	}
	if got := m.ClusterLabel("clusters/old"); got != metrics.InvalidLabel {
		t.Errorf("removed cluster still labels as %q", got)
	}
}

func TestCheckSeries(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	m.SetClusters([]string{"clusters/a"})
	m.ComponentChecked("clusters/a", metrics.ComponentTalos, true, 1)
	m.ComponentChecked("clusters/a", metrics.ComponentKubernetes, true, 0) // a newer minor, no newer patch
	m.NodesCordoned("clusters/a", 2)
	m.PluginChecked("clusters/a", "argocd", true)
	m.PluginChecked("clusters/a", "charts", false)
	m.PluginChecked("clusters/a", `argocd"} 1`, true)
	m.CheckFinished("clusters/a", true)
	talos := map[string]string{"cluster": "clusters/a", "component": "talos"}
	kube := map[string]string{"cluster": "clusters/a", "component": "kubernetes"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"taloscluster_update_available", talos, 1},
		{"taloscluster_patch_releases_behind", talos, 1},
		{"taloscluster_update_available", kube, 1},
		{"taloscluster_patch_releases_behind", kube, 0},
		{"taloscluster_nodes_cordoned", map[string]string{"cluster": "clusters/a"}, 2},
		{"taloscluster_cluster_check_success", map[string]string{"cluster": "clusters/a"}, 1},
		{"taloscluster_plugin_drift", map[string]string{"cluster": "clusters/a", "plugin": "argocd"}, 1},
		{"taloscluster_plugin_drift", map[string]string{"cluster": "clusters/a", "plugin": "charts"}, 0},
		// Only the known plugins become labels.
		{"taloscluster_plugin_drift", map[string]string{"cluster": "clusters/a", "plugin": metrics.InvalidLabel}, 1},
	} {
		if got := value(m, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	// Up to date; an incomplete check.
	m.ComponentChecked("clusters/a", metrics.ComponentTalos, false, 0)
	m.CheckFinished("clusters/a", false)
	if got := value(m, "taloscluster_update_available", talos); got != 0 {
		t.Errorf("update_available after an up-to-date check %v, want 0", got)
	}
	if got := value(m, "taloscluster_cluster_check_success", map[string]string{"cluster": "clusters/a"}); got != 0 {
		t.Errorf("check_success after an incomplete check %v, want 0", got)
	}

	// The charts section was removed: its series goes, argocd's stays.
	m.PluginsConfigured("clusters/a", []string{"argocd"})
	if n, err := testutil.GatherAndCount(reg, "taloscluster_plugin_drift"); err != nil || n != 2 {
		t.Errorf("plugin_drift: %d series after charts was removed (%v), want argocd's and the invalid one", n, err)
	}

	// Only the fixed components become labels; a negative count is 0.
	m.ComponentChecked("clusters/a", metrics.Component(`talos"} 1`), true, -3)
	if got := value(m, "taloscluster_patch_releases_behind", map[string]string{"cluster": "clusters/a", "component": metrics.InvalidLabel}); got != 0 {
		t.Errorf("an unknown component: %v", got)
	}

	// Another replica took the cluster: every check series is its to
	// report now.
	m.LeaseHeld("clusters/a", false)
	for _, name := range []string{"taloscluster_update_available", "taloscluster_patch_releases_behind",
		"taloscluster_nodes_cordoned", "taloscluster_plugin_drift", "taloscluster_cluster_check_success"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
			t.Errorf("%s: %d series after the Lease went elsewhere (%v), want none", name, n, err)
		}
	}

	// A cluster removed from the repository loses its check series too.
	m.CheckFinished("clusters/a", true)
	m.NodesCordoned("clusters/a", 0)
	m.SetClusters(nil)
	for _, name := range []string{"taloscluster_nodes_cordoned", "taloscluster_cluster_check_success"} {
		if n := testutil.CollectAndCount(m, name); n != 0 {
			t.Errorf("%s: %d series after the cluster was removed, want none", name, n)
		}
	}
}

func TestCheckSeriesLint(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	m.ComponentChecked("clusters/a", metrics.ComponentKubernetes, true, 2)
	m.NodesCordoned("clusters/a", 1)
	m.CheckFinished("clusters/a", false)
	problems, err := testutil.GatherAndLint(reg, "taloscluster_update_available", "taloscluster_patch_releases_behind",
		"taloscluster_nodes_cordoned", "taloscluster_cluster_check_success")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestRemediationsAreCounted: each remediation counts under its cluster
// and pool; a pool name that is no pool name, or a cluster that is not
// the repository's, is counted under the invalid label.
func TestRemediationsAreCounted(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	m.SetClusters([]string{"clusters/prod-a"})
	m.Remediation("clusters/prod-a", "worker")
	m.Remediation("clusters/prod-a", "worker")
	m.Remediation("clusters/prod-a", "gpu")
	m.Remediation("clusters/prod-a", "Not A Pool: token=abc")
	m.Remediation("clusters/elsewhere", "worker")
	const name = "taloscluster_remediations_total"
	for _, tt := range []struct {
		cluster, pool string
		want          float64
	}{
		{"clusters/prod-a", "worker", 2},
		{"clusters/prod-a", "gpu", 1},
		{"clusters/prod-a", metrics.InvalidLabel, 1},
		{metrics.InvalidLabel, "worker", 1},
	} {
		if got := value(m, name, map[string]string{"cluster": tt.cluster, "pool": tt.pool}); got != tt.want {
			t.Errorf("%s{cluster=%q,pool=%q} = %v, want %v", name, tt.cluster, tt.pool, got, tt.want)
		}
	}
}
