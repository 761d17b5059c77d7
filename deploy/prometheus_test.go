package deploy_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/yaml"

	"github.com/taloscluster/taloscluster/report/metrics"
)

var update = flag.Bool("update", false, "write deploy/base/prometheusrule.yaml from deploy/prometheus/rules.yml")

// Files of the alerts, relative to this directory.
const (
	rulesFile          = "prometheus/rules.yml"
	rulesTestFile      = "prometheus/rules_test.yml"
	prometheusRuleFile = "base/prometheusrule.yaml"
	dashboardFile      = "base/dashboards/taloscluster.json"
	alertsDoc          = "../docs/alerts.md"
	operationsDoc      = "../docs/operations.md"
)

// runbookBase is where every alert's runbook_url points, followed by
// "#" and the alert's heading anchor in docs/alerts.md.
const runbookBase = "https://github.com/taloscluster/taloscluster/blob/main/docs/alerts.md"

// The alerts the rules must define, each with its severity.
var wantAlerts = map[string]string{
	"TalosclusterConvergeFailing":          "critical",
	"TalosclusterConvergeWaiting":          "warning",
	"TalosclusterDefaultBranchPlanFailing": "warning",
	"TalosclusterDriftPersistent":          "warning",
	"TalosclusterRepositoryNotFetched":     "warning",
	"TalosclusterReportsUndelivered":       "warning",
	"TalosclusterGitHubRateLimitLow":       "warning",
	"TalosclusterAgentDown":                "critical",
	"TalosclusterClusterUnowned":           "critical",
	"TalosclusterReportsDropped":           "warning",
	"TalosclusterPatchReleasesBehind":      "info",
	"TalosclusterCheckFailing":             "warning",
}

type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// The parts of a promtool unit test file the coverage check reads.
type unitTestFile struct {
	RuleFiles          []string   `json:"rule_files"`
	EvaluationInterval string     `json:"evaluation_interval"`
	Tests              []unitTest `json:"tests"`
}

type unitTest struct {
	Name        string `json:"name"`
	Interval    string `json:"interval"`
	InputSeries []struct {
		Series string `json:"series"`
		Values string `json:"values"`
	} `json:"input_series"`
	AlertRuleTests []struct {
		EvalTime  string `json:"eval_time"`
		Alertname string `json:"alertname"`
		ExpAlerts []struct {
			ExpLabels      map[string]string `json:"exp_labels"`
			ExpAnnotations map[string]string `json:"exp_annotations"`
		} `json:"exp_alerts"`
	} `json:"alert_rule_test"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	var rf ruleFile
	readYAML(t, rulesFile, &rf)
	return rf
}

func alertByName(t *testing.T, rf ruleFile, name string) rule {
	t.Helper()
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == name {
				return r
			}
		}
	}
	t.Fatalf("%s has no alert %s", rulesFile, name)
	return rule{}
}

// prometheusRuleHeader starts the generated PrometheusRule.
const prometheusRuleHeader = `# Generated from deploy/prometheus/rules.yml, the one source of the rules:
# edit that file, then run
#   go test ./deploy -run TestPrometheusRuleMatchesRulesFile -update
# docs/alerts.md explains every alert.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: taloscluster
  labels:
    app.kubernetes.io/component: agent
spec:
`

// prometheusRuleFor returns the PrometheusRule that holds the groups of a
// rules file: its lines after its leading comment, indented under spec.
func prometheusRuleFor(rules []byte) []byte {
	lines := strings.Split(strings.TrimRight(string(rules), "\n"), "\n")
	for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
		lines = lines[1:]
	}
	var b strings.Builder
	b.WriteString(prometheusRuleHeader)
	for _, l := range lines {
		if l != "" {
			b.WriteString("  ")
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// TestPrometheusRuleMatchesRulesFile: the PrometheusRule is generated
// from rules.yml (byte for byte), and the PrometheusRule kustomize renders
// has exactly the groups of rules.yml. With -update it writes the
// PrometheusRule first.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want := prometheusRuleFor(rules)
	if *update {
		if err := os.WriteFile(prometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not generated from %s: run go test ./deploy -run %s -update", prometheusRuleFile, rulesFile, t.Name())
	}

	var plain map[string]any
	if err := yaml.Unmarshal(rules, &plain); err != nil {
		t.Fatal(err)
	}
	rendered := find(t, render(t, overlayDir), "PrometheusRule", "taloscluster")
	spec, ok := rendered.Object["spec"].(map[string]any)
	if !ok {
		t.Fatal("the rendered PrometheusRule has no spec")
	}
	if len(spec) != 1 || !reflect.DeepEqual(spec["groups"], plain["groups"]) {
		a, _ := json.MarshalIndent(spec, "", " ")
		b, _ := json.MarshalIndent(plain, "", " ")
		t.Errorf("the rendered PrometheusRule's spec differs from %s:\n%s\nwant groups of\n%s", rulesFile, a, b)
	}
}

// TestAlertRules: exactly the expected alerts, each with its severity, a
// summary, a description, and a runbook_url that points at its own
// section of docs/alerts.md.
func TestAlertRules(t *testing.T) {
	rf := loadRules(t)
	doc, err := os.ReadFile(alertsDoc)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, l := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(l, "## "); ok {
			headings[strings.TrimSpace(h)] = true
		}
	}
	seen := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if seen[r.Alert] {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			seen[r.Alert] = true
			sev, known := wantAlerts[r.Alert]
			if !known {
				t.Errorf("alert %s is not one the tests know: add it to wantAlerts", r.Alert)
			} else if r.Labels["severity"] != sev {
				t.Errorf("%s: severity %q, want %q", r.Alert, r.Labels["severity"], sev)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s has no %s", r.Alert, a)
				}
			}
			// GitHub's anchor of a heading that is one word is the word in
			// lower case.
			if want := runbookBase + "#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %s, want %s", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !headings[r.Alert] {
				t.Errorf("%s has no section \"## %s\" in %s", r.Alert, r.Alert, alertsDoc)
			}
		}
	}
	for a := range wantAlerts {
		if !seen[a] {
			t.Errorf("%s defines no alert %s", rulesFile, a)
		}
	}
}

// TestRulesUnitTestsCoverEveryAlert: rules_test.yml has, for every alert,
// a case where it fires and one where it stays silent.
func TestRulesUnitTestsCoverEveryAlert(t *testing.T) {
	var ut unitTestFile
	readYAML(t, rulesTestFile, &ut)
	if !slices.Equal(ut.RuleFiles, []string{filepath.Base(rulesFile)}) {
		t.Errorf("%s tests %v, want [%s]", rulesTestFile, ut.RuleFiles, filepath.Base(rulesFile))
	}
	fires, silent := map[string]int{}, map[string]int{}
	for _, tc := range ut.Tests {
		for _, a := range tc.AlertRuleTests {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname]++
			} else {
				silent[a.Alertname]++
			}
		}
	}
	for a := range wantAlerts {
		if fires[a] == 0 {
			t.Errorf("%s has no case where %s fires", rulesTestFile, a)
		}
		if silent[a] == 0 {
			t.Errorf("%s has no case where %s stays silent", rulesTestFile, a)
		}
	}
}

// sampleMetrics builds the agent's metrics on a fresh registry, records a
// value of every kind, and returns what /metrics would serve.
func sampleMetrics(t *testing.T) []byte {
	t.Helper()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	m.SetClusters([]string{"clusters/prod", "clusters/staging"})
	m.RunStarted(metrics.KindConverge, "clusters/prod")
	m.RunFinished(metrics.KindConverge, "clusters/prod", metrics.ResultSuccess, 42*time.Second)
	m.RunStarted(metrics.KindConverge, "clusters/prod")
	m.RunFinished(metrics.KindConverge, "clusters/prod", metrics.ResultWaiting, 5*time.Second)
	m.RunStarted(metrics.KindConverge, "clusters/staging")
	m.RunFinished(metrics.KindConverge, "clusters/staging", metrics.ResultRetried, 3*time.Second)
	m.RunStarted(metrics.KindPlan, "clusters/staging")
	m.LeaseHeld("clusters/prod", true)
	m.LeaseHeld("clusters/staging", false)
	m.Drift("clusters/prod", true)
	m.DriftCheckFailed("clusters/staging")
	m.ComponentChecked("clusters/prod", metrics.ComponentKubernetes, true, 2)
	m.NodesCordoned("clusters/prod", 1)
	m.CheckFinished("clusters/prod", true)
	m.Fetched(true, now.Add(-10*time.Second))
	m.Fetched(false, now)
	m.GitHubRequest(metrics.OpListPulls, 200)
	m.GitHubRequest(metrics.OpCreateStatus, 0)
	m.RateLimitRemaining(4321)
	m.QueueDepth(2)
	m.ReportsPending(3, now.Add(-time.Minute), 1)

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// exportedNames returns every series name a scrape holds, with the
// _bucket, _sum and _count series of histograms.
func exportedNames(scrape []byte) map[string]bool {
	names := map[string]bool{}
	for _, l := range strings.Split(string(scrape), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		names[f[2]] = true
		if f[3] == "histogram" || f[3] == "summary" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f[2]+s] = true
			}
		}
	}
	return names
}

// dashboardExprs returns the PromQL of every panel of the dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID         int             `json:"id"`
			Type       string          `json:"type"`
			Title      string          `json:"title"`
			Datasource json.RawMessage `json:"datasource"`
			Targets    []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" {
		t.Errorf("%s has no uid", dashboardFile)
	}
	var exprs []string
	ids, titles := map[int]bool{}, map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] || titles[p.Title] {
			t.Errorf("panel %d %q: id or title used twice", p.ID, p.Title)
		}
		ids[p.ID], titles[p.Title] = true, true
		if p.Type == "row" {
			continue
		}
		if !strings.Contains(string(p.Datasource), "${datasource}") {
			t.Errorf("panel %q does not use the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	return exprs
}

var metricRef = regexp.MustCompile(`\btaloscluster_[a-z0-9_]*[a-z0-9]`)

// TestMetricNamesExist: every taloscluster_ metric that the alerts, the
// dashboard and the operations docs name is one the agent exports, and
// the dashboard shows what an operator looks at first.
func TestMetricNamesExist(t *testing.T) {
	exported := exportedNames(sampleMetrics(t))
	if len(exported) == 0 {
		t.Fatal("the scrape holds no metric")
	}
	sources := map[string]string{}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	sources[rulesFile] = string(rules)
	sources[dashboardFile] = strings.Join(dashboardExprs(t), "\n")
	for _, doc := range []string{alertsDoc, operationsDoc} {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		sources[doc] = string(data)
	}
	for file, text := range sources {
		for _, name := range metricRef.FindAllString(text, -1) {
			if !exported[name] {
				t.Errorf("%s names %s, which the agent does not export", file, name)
			}
		}
	}
	dash := sources[dashboardFile]
	for _, want := range []string{
		`taloscluster_runs_total{kind="converge"}`, // converge results
		"taloscluster_cluster_drift)",
		"taloscluster_cluster_drift_check_success",
		"taloscluster_reports_pending",
		"taloscluster_reports_oldest_pending_age_seconds",
		"taloscluster_github_rate_limit_remaining",
		"taloscluster_git_last_fetch_timestamp_seconds",
		"taloscluster_queue_depth",
		"taloscluster_run_duration_seconds_bucket",
	} {
		if !strings.Contains(dash, want) {
			t.Errorf("the dashboard has no panel with %s", want)
		}
	}
}

// promtool returns the path of promtool, or skips the test without it,
// unless TALOSCLUSTER_REQUIRE_PROMTOOL=1 (as CI sets) makes that a failure.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	if os.Getenv("TALOSCLUSTER_REQUIRE_PROMTOOL") == "1" {
		t.Fatalf("promtool is not on PATH and TALOSCLUSTER_REQUIRE_PROMTOOL=1: %v", err)
	}
	t.Skip("promtool is not on PATH (Debian: apt-get install prometheus; .ci/run installs it); set TALOSCLUSTER_REQUIRE_PROMTOOL=1 to fail instead")
	return ""
}

// runPromtool runs promtool with args and stdin, and fails the test
// unless it succeeds.
func runPromtool(t *testing.T, stdin []byte, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), promtool(t), args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), bytes.TrimSpace(out))
	if err != nil {
		t.Fatalf("promtool %s: %v", strings.Join(args, " "), err)
	}
}

// TestPromtoolCheckRules: promtool accepts the rules file, and every
// dashboard query parses (checked as recording rules, with Grafana's
// $__rate_interval replaced).
func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, nil, "check", "rules", rulesFile)

	var rf ruleFile
	g := ruleGroup{Name: "dashboard"}
	for i, e := range dashboardExprs(t) {
		e = strings.ReplaceAll(e, "$__rate_interval", "5m")
		g.Rules = append(g.Rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: e})
	}
	rf.Groups = append(rf.Groups, g)
	data, err := yaml.Marshal(rf)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, nil, "check", "rules", file)
}

// TestPromtoolTestRules runs the unit tests of every alert.
func TestPromtoolTestRules(t *testing.T) {
	runPromtool(t, nil, "test", "rules", rulesTestFile)
}

// TestPromtoolCheckMetrics lints a scrape of the agent's real metrics.
func TestPromtoolCheckMetrics(t *testing.T) {
	scrape := sampleMetrics(t)
	names := exportedNames(scrape)
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	t.Logf("%d series names, e.g. %s", len(sorted), strings.Join(sorted[:min(3, len(sorted))], ", "))
	runPromtool(t, scrape, "check", "metrics")
}
