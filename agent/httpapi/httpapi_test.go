package httpapi_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taloscluster/taloscluster/agent/httpapi"
	"github.com/taloscluster/taloscluster/report/metrics"
)

const sha = "0123456789abcdef0123456789abcdef01234567"

var when = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type response struct {
	code   int
	header http.Header
	body   string
}

func do(t *testing.T, srv *httptest.Server, method, path string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: res.StatusCode, header: res.Header, body: string(b)}
}

func serve(t *testing.T, opts httpapi.Options) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(httpapi.New(opts))
	t.Cleanup(srv.Close)
	return srv
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	srv := serve(t, httpapi.Options{})
	res := do(t, srv, http.MethodGet, "/healthz")
	if res.code != http.StatusOK || res.body != "ok\n" {
		t.Fatalf("GET /healthz: %d %q", res.code, res.body)
	}
	if ct := res.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("content type %q", ct)
	}
	head := do(t, srv, http.MethodHead, "/healthz")
	if head.code != http.StatusOK || head.body != "" {
		t.Errorf("HEAD /healthz: %d %q", head.code, head.body)
	}
}

func TestReadyzFlips(t *testing.T) {
	t.Parallel()
	var reason atomic.Pointer[error]
	srv := serve(t, httpapi.Options{Ready: func() error {
		if p := reason.Load(); p != nil {
			return *p
		}
		return nil
	}})
	if res := do(t, srv, http.MethodGet, "/readyz"); res.code != http.StatusOK || res.body != "ok\n" {
		t.Fatalf("ready: %d %q", res.code, res.body)
	}
	notCloned := errors.New("repository not cloned yet\nclone of https://github.com/org/infra: dial tcp: i/o timeout")
	reason.Store(&notCloned)
	res := do(t, srv, http.MethodGet, "/readyz")
	if res.code != http.StatusServiceUnavailable {
		t.Fatalf("not ready: status %d", res.code)
	}
	if res.body != "not ready: repository not cloned yet\n" {
		t.Errorf("not ready: body %q, want only the first line of the reason", res.body)
	}
	stale := errors.New(strings.Repeat("x", 1000))
	reason.Store(&stale)
	if res := do(t, srv, http.MethodGet, "/readyz"); res.code != http.StatusServiceUnavailable || len(res.body) > 300 {
		t.Errorf("long reason: %d, %d bytes", res.code, len(res.body))
	}
	reason.Store(nil)
	if res := do(t, srv, http.MethodGet, "/readyz"); res.code != http.StatusOK {
		t.Fatalf("ready again: %d %q", res.code, res.body)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.QueueDepth(3)
	m.Drift("clusters/prod-a", true)
	srv := serve(t, httpapi.Options{Metrics: reg})
	res := do(t, srv, http.MethodGet, "/metrics")
	if res.code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", res.code)
	}
	for _, want := range []string{"taloscluster_queue_depth 3", `taloscluster_cluster_drift{cluster="clusters/prod-a"} 1`} {
		if !strings.Contains(res.body, want) {
			t.Errorf("exposition lacks %q:\n%s", want, res.body)
		}
	}

	without := serve(t, httpapi.Options{})
	if res := do(t, without, http.MethodGet, "/metrics"); res.code != http.StatusNotFound {
		t.Errorf("GET /metrics without a gatherer: %d, want 404", res.code)
	}
}

func TestStatusPage(t *testing.T) {
	t.Parallel()
	page := httpapi.StatusPage{
		Repository: "org/infra",
		Branch:     "main",
		LastFetch:  when,
		Generated:  when.Add(time.Second),
		Clusters: []httpapi.ClusterStatus{
			{
				Path:         "clusters/prod-a",
				LastPlan:     &httpapi.RunSummary{Commit: sha, Result: "success", Time: when, PlanID: "prod-a-42"},
				LastConverge: &httpapi.RunSummary{Commit: "fedcba9876543210", Result: "failure", Time: when},
				Drift:        true,
				DriftChecked: when,
				Running:      "converge",
				Runs:         []httpapi.Run{{Kind: "plan", Commit: sha, PR: 42, Result: "success", Finished: when, PlanID: "prod-a-42"}},
			},
			{Path: "clusters/staging", DriftChecked: when},
		},
		Queue: []httpapi.QueuedJob{{Cluster: "clusters/staging", Kind: "plan", Commit: sha, Queued: when}},
	}
	srv := serve(t, httpapi.Options{Status: func() httpapi.StatusPage { return page }})
	res := do(t, srv, http.MethodGet, "/")
	if res.code != http.StatusOK {
		t.Fatalf("GET /: %d", res.code)
	}
	if ct := res.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("content type %q", ct)
	}
	if csp := res.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("content security policy %q", csp)
	}
	for _, want := range []string{
		"<code>org/infra</code>",
		"<code>clusters/prod-a</code>",
		"<code>0123456</code>",
		`<a href="plans/prod-a-42">plan</a>`,
		"<code>fedcba9</code>",
		`<span class="failure">failure</span>`,
		`<span class="drift">drift</span>`,
		"2026-03-01 12:00:00 UTC",
		"<code>clusters/staging</code>",
		"in sync",
		"Running: converge.",
		"Idle.",
	} {
		if !strings.Contains(res.body, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	// The full SHA is only in title attributes, for those who hover.
	if strings.Count(res.body, sha) != strings.Count(res.body, `title="`+sha+`"`) {
		t.Error("status page shows the full SHA, want the short form")
	}
	if !strings.Contains(res.body, "Nothing queued.") == (len(page.Queue) == 0) {
		t.Error("queue section does not match the queue")
	}
	if !strings.Contains(res.body, "Reports to GitHub</h2>\n<p>All delivered.</p>") {
		t.Errorf("reports section with nothing owed:\n%s", res.body)
	}

	owed := page
	owed.Reports = httpapi.ReportsStatus{Pending: 2, Oldest: time.Now().Add(-95 * time.Second), Failing: 1,
		LastError: "POST comments: 502 Bad Gateway", Dropped: 1, LastDropped: "status taloscluster/plan: clusters/c0001=pending on 0123456789ab",
		DropReason: "the outbox is full (4000 reports, 700 KiB; at most 4000, 768 KiB), and pull request 12 was pushed again (fedcba987654)", DroppedAt: when}
	res = do(t, serve(t, httpapi.Options{Status: func() httpapi.StatusPage { return owed }}), http.MethodGet, "/")
	for _, want := range []string{"2 not yet delivered", "(1m3", "502 Bad Gateway", "1 given up on",
		"the last, status taloscluster/plan: clusters/c0001=pending on 0123456789ab", "because the outbox is full", "pull request 12 was pushed again"} {
		if !strings.Contains(res.body, want) {
			t.Errorf("reports section lacks %q:\n%s", want, res.body)
		}
	}

	empty := serve(t, httpapi.Options{})
	res = do(t, empty, http.MethodGet, "/")
	if res.code != http.StatusOK || !strings.Contains(res.body, "No clusters found") || !strings.Contains(res.body, "Last fetch: <time datetime=\"\">never</time>") {
		t.Errorf("empty status page: %d\n%s", res.code, res.body)
	}
	if res := do(t, empty, http.MethodGet, "/nope"); res.code != http.StatusNotFound {
		t.Errorf("GET /nope: %d, want 404", res.code)
	}
}

const hostile = `<script>alert("x")</script>`

// unescaped are what a hostile value would leave on the page had it not
// been escaped: a tag, an attribute broken out of, a script URL.
var unescaped = []string{"<script", "<img", `"><img`, `"><script`, `'><`, `href="javascript:`, "onerror=alert(1)>"}

func TestStatusPageEscapes(t *testing.T) {
	t.Parallel()
	page := httpapi.StatusPage{
		Repository: hostile,
		Clusters: []httpapi.ClusterStatus{{
			Path:     "clusters/" + hostile,
			LastPlan: &httpapi.RunSummary{Commit: hostile, Result: `"><img src=x onerror=alert(1)>`, PlanID: `javascript:alert(1)//"><script>`},
			Running:  hostile,
		}},
		Queue:   []httpapi.QueuedJob{{Cluster: hostile, Kind: hostile, Commit: hostile}},
		Reports: httpapi.ReportsStatus{Pending: 1, Failing: 1, LastError: hostile, SaveError: hostile, Dropped: 1, LastDropped: hostile, DropReason: hostile},
	}
	srv := serve(t, httpapi.Options{Status: func() httpapi.StatusPage { return page }})
	res := do(t, srv, http.MethodGet, "/")
	if res.code != http.StatusOK {
		t.Fatalf("GET /: %d", res.code)
	}
	for _, bad := range unescaped {
		if strings.Contains(res.body, bad) {
			t.Errorf("status page contains %q unescaped:\n%s", bad, res.body)
		}
	}
	if !strings.Contains(res.body, "&lt;script&gt;") {
		t.Errorf("hostile cluster name not shown escaped:\n%s", res.body)
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	plans := map[string]string{
		"prod-a-42": "## Plan for clusters/prod-a\n\n+ create vm prod-a-worker-04\n",
		"evil":      "</pre>" + hostile + "<pre>",
	}
	var asked atomic.Int32
	srv := serve(t, httpapi.Options{Plan: func(id string) (string, bool) {
		asked.Add(1)
		p, ok := plans[id]
		return p, ok
	}})

	res := do(t, srv, http.MethodGet, "/plans/prod-a-42")
	if res.code != http.StatusOK {
		t.Fatalf("GET plan: %d", res.code)
	}
	if !strings.Contains(res.body, "<pre>## Plan for clusters/prod-a\n\n&#43; create vm prod-a-worker-04\n</pre>") {
		t.Errorf("plan page lacks the plan inside <pre>:\n%s", res.body)
	}

	res = do(t, srv, http.MethodGet, "/plans/prod-a-42?format=text")
	if res.code != http.StatusOK || res.body != plans["prod-a-42"] {
		t.Errorf("plain plan: %d %q", res.code, res.body)
	}
	if ct := res.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("plain plan content type %q", ct)
	}
	if res.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Error("plain plan without nosniff")
	}

	res = do(t, srv, http.MethodGet, "/plans/evil")
	if res.code != http.StatusOK {
		t.Fatalf("GET evil plan: %d", res.code)
	}
	if strings.Contains(res.body, "<script>") || strings.Count(res.body, "</pre>") != 1 {
		t.Errorf("hostile plan body not escaped:\n%s", res.body)
	}
	if !strings.Contains(res.body, "&lt;/pre&gt;&lt;script&gt;") {
		t.Errorf("hostile plan body not shown escaped:\n%s", res.body)
	}

	before := asked.Load()
	for _, path := range []string{"/plans/missing", "/plans/..%2Fetc", "/plans/%3Cscript%3E", "/plans/"} {
		if res := do(t, srv, http.MethodGet, path); res.code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, res.code)
		}
	}
	if n := asked.Load() - before; n != 1 {
		t.Errorf("Plan called %d times for the 404 cases, want 1 (only for the well-formed id)", n)
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	var called atomic.Bool
	srv := serve(t, httpapi.Options{
		Metrics: prometheus.NewRegistry(),
		Ready:   func() error { called.Store(true); return nil },
		Status:  func() httpapi.StatusPage { called.Store(true); return httpapi.StatusPage{} },
		Plan:    func(string) (string, bool) { called.Store(true); return "", true },
	})
	for _, path := range []string{"/", "/metrics", "/healthz", "/readyz", "/plans/x", "/nope"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			res := do(t, srv, method, path)
			if res.code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", method, path, res.code)
			}
			if allow := res.header.Get("Allow"); allow != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q", method, path, allow)
			}
		}
	}
	if called.Load() {
		t.Error("a write method reached an agent callback")
	}
}

func TestStatusPageShowsAFailedDriftCheckAndRetries(t *testing.T) {
	t.Parallel()
	page := httpapi.StatusPage{
		Clusters: []httpapi.ClusterStatus{
			{Path: "clusters/prod-a", DriftError: "listing VMs: 401 " + hostile},
			{Path: "clusters/prod-b", Drift: true, DriftError: "proxmox: 503"},
		},
		Queue: []httpapi.QueuedJob{{Cluster: "clusters/prod-a", Kind: "converge", Commit: sha, Queued: when,
			Attempt: 2, NotBefore: when.Add(time.Minute)}},
	}
	srv := serve(t, httpapi.Options{Status: func() httpapi.StatusPage { return page }})
	res := do(t, srv, http.MethodGet, "/")
	if res.code != http.StatusOK {
		t.Fatalf("GET /: %d", res.code)
	}
	for _, want := range []string{
		`<span class="failure">drift unknown: listing VMs: 401 &lt;script&gt;`,
		`drift unknown: proxmox: 503</span> (the last check that worked found drift)`,
		`converge (attempt 2, not before <time datetime="2026-03-01T12:01:00Z">2026-03-01 12:01:00 UTC</time>)`,
	} {
		if !strings.Contains(res.body, want) {
			t.Errorf("status page lacks %q:\n%s", want, res.body)
		}
	}
	if strings.Contains(res.body, "in sync") || strings.Contains(res.body, "<script>") {
		t.Errorf("a failed drift check shows as in sync, or the error is not escaped:\n%s", res.body)
	}
}
