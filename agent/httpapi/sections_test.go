package httpapi_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/agent/httpapi"
)

// statusBody serves page and returns the status page's HTML.
func statusBody(t *testing.T, page httpapi.StatusPage) string {
	t.Helper()
	srv := serve(t, httpapi.Options{Status: func() httpapi.StatusPage { return page }})
	res := do(t, srv, http.MethodGet, "/")
	if res.code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", res.code, res.body)
	}
	return res.body
}

// section returns the section of the cluster whose slug is slug.
func section(t *testing.T, body, slug string) string {
	t.Helper()
	start := strings.Index(body, `<section class="cluster" id="cluster-`+slug+`"`)
	if start < 0 {
		t.Fatalf("no section for %s:\n%s", slug, body)
	}
	end := strings.Index(body[start:], "</section>")
	if end < 0 {
		t.Fatalf("the section for %s does not end", slug)
	}
	return body[start : start+end+len("</section>")]
}

func contains(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, body)
		}
	}
}

func lacks(t *testing.T, what, body string, bads ...string) {
	t.Helper()
	for _, b := range bads {
		if strings.Contains(body, b) {
			t.Errorf("%s has %q:\n%s", what, b, body)
		}
	}
}

// checked is a check that read everything: Talos one patch behind, a
// Kubernetes minor to take, three nodes of which one is not ready and
// one cordoned, and a machine not created yet.
var checked = &httpapi.CheckStatus{
	Time: when,
	Components: []httpapi.ComponentStatus{
		{Name: "talos", Pinned: "v1.13.8", Update: "v1.13.9", UpdateKind: "patch", PatchesBehind: 1},
		{Name: "kubernetes", Pinned: "v1.35.3", Update: "v1.36.3", UpdateKind: "minor"},
	},
	Compared:       true,
	KubernetesRead: true,
	Nodes: []httpapi.NodeStatus{
		{Name: "prod-a-cp-01", Role: "controlplane", Talos: "v1.13.8", Kubernetes: "v1.35.3", InKubernetes: true, Ready: true},
		{Name: "prod-a-worker-01", Role: "worker", Talos: "v1.13.7", TalosWant: "v1.13.8", Kubernetes: "v1.35.3", InKubernetes: true, Cordoned: true},
		{Name: "prod-a-worker-02", Role: "worker"},
	},
	Missing: []string{"prod-a-worker-03"},
	Plugins: []httpapi.PluginStatus{
		{Name: "charts", State: "drift", Steps: []string{"update release traefik: chart values changed"}},
		{Name: "rancher", State: "deferred", Reason: "the cluster is not bootstrapped yet"},
		{Name: "argocd", State: "in_sync"},
	},
}

func TestStatusPageClusterSections(t *testing.T) {
	t.Parallel()
	body := statusBody(t, httpapi.StatusPage{Generated: when, Queue: []httpapi.QueuedJob{{Cluster: "clusters/prod-a", Kind: "plan", Commit: sha}},
		Clusters: []httpapi.ClusterStatus{
			{Path: "clusters/Prod_A", Check: checked},
			{Path: "clusters/prod-a"}, // the same slug: numbered
			{Path: "clusters/other", Elsewhere: true, Check: checked, Running: "converge",
				Progress: &httpapi.Progress{Kind: "converge", Commit: sha, Started: when, Step: 1, Steps: 2, Text: "+ machine x"},
				Runs:     []httpapi.Run{{Kind: "converge", Commit: sha, Result: "success"}}},
		}})
	contains(t, "status page", body,
		`<html lang="en">`,
		`<section class="cluster" id="cluster-clusters-prod-a" aria-labelledby="h-clusters-prod-a">`+"\n"+`<h2 id="h-clusters-prod-a"><code>clusters/Prod_A</code></h2>`,
		`<section class="cluster" id="cluster-clusters-prod-a-2" aria-labelledby="h-clusters-prod-a-2">`+"\n"+`<h2 id="h-clusters-prod-a-2"><code>clusters/prod-a</code></h2>`,
		`<a href="#cluster-clusters-other"><code>clusters/other</code></a> (another replica)`,
	)
	if n := strings.Count(body, "<h1"); n != 1 {
		t.Errorf("%d h1 elements, want 1", n)
	}
	// Every column header says what it heads.
	if n, scoped := len(regexp.MustCompile(`<th[ >]`).FindAllString(body, -1)), strings.Count(body, `<th scope="`); n != scoped {
		t.Errorf("%d th elements, %d with a scope", n, scoped)
	}
	if n, c := strings.Count(body, "<table"), strings.Count(body, "<caption>"); n != c || n == 0 {
		t.Errorf("%d tables, %d captions: want every table captioned", n, c)
	}
	// Another replica's cluster shows no live data, whatever this
	// replica last knew.
	other := section(t, body, "clusters-other")
	contains(t, "the other replica's section", other, "handled by another replica")
	lacks(t, "the other replica's section", other, `class="nodes"`, `class="runs"`, `class="progress"`, "v1.13.9")
	if strings.Count(body, "handled by another replica") != 1 {
		t.Errorf("\"handled by another replica\" is not said once per such cluster:\n%s", body)
	}
	// Its converge does not speed up this replica's page.
	contains(t, "status page", body, `<meta http-equiv="refresh" content="30">`)
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"clusters/prod-a":       "clusters-prod-a",
		"Clusters/Prod_A":       "clusters-prod-a",
		"eu/west/db--1":         "eu-west-db-1",
		"a.b":                   "a-b",
		"x/" + hostile:          "x-script-alert-x-script-",
		"démo/ü":                "d-mo-",
		"clusters/prod-a/v1.2/": "clusters-prod-a-v1-2-",
	} {
		if got := httpapi.Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStatusPageNodesTable(t *testing.T) {
	t.Parallel()
	body := statusBody(t, httpapi.StatusPage{Clusters: []httpapi.ClusterStatus{
		{Path: "clusters/prod-a", Check: checked},
		{Path: "clusters/fresh"},
		{Path: "clusters/new", Check: &httpapi.CheckStatus{Time: when, NotCompared: "the cluster does not exist yet"}},
		{Path: "clusters/broken", Check: &httpapi.CheckStatus{Time: when, Error: "cluster.yaml:3: talos.version: required"}},
		{Path: "clusters/nokube", Check: &httpapi.CheckStatus{Time: when, Compared: true,
			Nodes: []httpapi.NodeStatus{{Name: "n1", Role: "worker", Talos: "v1.13.8"}}}},
	}})
	prod := section(t, body, "clusters-prod-a")
	contains(t, "the plugins", prod, `<li data-plugin="charts" data-state="drift"><code>charts</code>: <span class="drift">drift</span>, a converge would make 1 step:<ul><li>update release traefik: chart values changed</li></ul>`,
		`<li data-plugin="rancher" data-state="deferred"><code>rancher</code>: deferred: the cluster is not bootstrapped yet</li>`,
		`<li data-plugin="argocd" data-state="in_sync"><code>argocd</code>: in sync</li>`)
	contains(t, "the nodes table", prod,
		`<table class="nodes"><caption>Nodes</caption>`,
		`<thead><tr><th scope="col">Node</th><th scope="col">Role</th><th scope="col">Talos</th><th scope="col">Kubernetes</th><th scope="col">Ready</th><th scope="col">Scheduling</th></tr></thead>`,
		`<tr data-node="prod-a-cp-01"><th scope="row"><code>prod-a-cp-01</code></th><td>controlplane</td><td>v1.13.8</td><td>v1.35.3</td><td><span class="success">Ready</span></td><td>schedulable</td></tr>`,
		`<tr data-node="prod-a-worker-01"><th scope="row"><code>prod-a-worker-01</code></th><td>worker</td><td>v1.13.7 <span class="drift">(want v1.13.8)</span></td><td>v1.35.3</td><td><span class="failure">Not ready</span></td><td><span class="retried">cordoned</span></td></tr>`,
		`<tr data-node="prod-a-worker-02"><th scope="row"><code>prod-a-worker-02</code></th><td>worker</td><td>unknown</td><td>unknown</td><td>not registered</td><td>unknown</td></tr>`,
		"In cluster.yaml but not created yet: <code>prod-a-worker-03</code>.",
	)
	if n := strings.Count(prod, "<tr data-node="); n != 3 {
		t.Errorf("%d node rows, want 3", n)
	}
	contains(t, "a cluster never checked", section(t, body, "clusters-fresh"), "Nodes: no check has run yet", "No check has run yet: updates show after the first one")
	lacks(t, "a cluster never checked", section(t, body, "clusters-fresh"), `class="nodes"`)
	contains(t, "a cluster not compared", section(t, body, "clusters-new"), "Nodes: the last check did not compare the running cluster: the cluster does not exist yet")
	contains(t, "a failed check", section(t, body, "clusters-broken"), "Nodes: the last check failed", "The last check failed: cluster.yaml:3: talos.version: required")
	contains(t, "a check without the Kubernetes API", section(t, body, "clusters-nokube"),
		`<tr data-node="n1"><th scope="row"><code>n1</code></th><td>worker</td><td>v1.13.8</td><td>unknown</td><td>unknown</td><td>unknown</td></tr>`)
}

func TestStatusPageUpdatesDriftAndIncomplete(t *testing.T) {
	t.Parallel()
	incomplete := *checked
	incomplete.Components = []httpapi.ComponentStatus{
		{Name: "talos", Pinned: "v1.13.8", Unknown: "listing the releases of siderolabs/talos: 502 Bad Gateway"},
		{Name: "kubernetes", Pinned: "v1.36.3"},
	}
	incomplete.Incomplete = []string{"releases: listing the releases of siderolabs/talos: 502 Bad Gateway", "prod-b-worker-01: the machine is stopped"}
	body := statusBody(t, httpapi.StatusPage{Clusters: []httpapi.ClusterStatus{
		{Path: "clusters/prod-a", Check: checked, Drift: true, DriftChecked: when, DriftSummary: "+1 ~0 -0, 1 refused",
			DriftChanges: []string{"+ machine prod-a-worker-03: listed in cluster.yaml", "refused machine prod-a-cp-02: shrinking the control plane"},
			DriftMore:    2, DriftPlanID: "drift-0123456789-clusters_prod-a"},
		{Path: "clusters/prod-b", Check: &incomplete, DriftChecked: when},
	}})
	prod := section(t, body, "clusters-prod-a")
	contains(t, "the updates", prod,
		`<li data-component="talos">talos v1.13.8 → v1.13.9 (1 patch release behind)</li>`,
		`<li data-component="kubernetes">kubernetes v1.35.3 → v1.36.3 (a newer minor release)</li>`,
		`<span class="drift">drift</span>: &#43;1 ~0 -0, 1 refused (checked <time datetime="2026-03-01T12:00:00Z">2026-03-01 12:00:00 UTC</time>) <a href="plans/drift-0123456789-clusters_prod-a">plan</a>`,
		"<li>&#43; machine prod-a-worker-03: listed in cluster.yaml</li>",
		"<li>refused machine prod-a-cp-02: shrinking the control plane</li>",
		"<li>and 2 more (see the plan)</li>",
	)
	lacks(t, "a complete check", prod, "Check incomplete")
	b := section(t, body, "clusters-prod-b")
	contains(t, "an incomplete check", b,
		`talos v1.13.8: <span class="failure">releases unknown: listing the releases of siderolabs/talos: 502 Bad Gateway</span>`,
		"kubernetes v1.36.3: up to date",
		"<h3>Check incomplete</h3>",
		`<ul class="incomplete">`,
		"<li>releases: listing the releases of siderolabs/talos: 502 Bad Gateway</li>",
		"<li>prod-b-worker-01: the machine is stopped</li>",
		"in sync (checked",
	)
}

func TestStatusPageProgress(t *testing.T) {
	t.Parallel()
	started := time.Now().Add(-90 * time.Second)
	page := httpapi.StatusPage{Clusters: []httpapi.ClusterStatus{
		{Path: "clusters/prod-a", Running: "converge",
			Progress: &httpapi.Progress{Kind: "converge", Commit: sha, Started: started, Step: 3, Steps: 12, Text: "+ machine prod-a-worker-03"}},
		{Path: "clusters/prod-b", Running: "drift", Progress: &httpapi.Progress{Kind: "drift", Commit: sha, Started: started}},
		{Path: "clusters/idle"},
	}}
	body := statusBody(t, page)
	contains(t, "a running converge", section(t, body, "clusters-prod-a"),
		`<div class="progress" role="status" aria-live="polite"><progress value="3" max="12">3 of 12</progress> converge of <code>0123456</code>: step 3 of 12: &#43; machine prod-a-worker-03 (running for 1m3`)
	contains(t, "a converge still planning", section(t, body, "clusters-prod-b"),
		`<div class="progress" role="status" aria-live="polite">drift of <code>0123456</code>: planning, no step started yet (running for`)
	lacks(t, "a converge still planning", section(t, body, "clusters-prod-b"), "<progress")
	lacks(t, "an idle cluster", section(t, body, "clusters-idle"), `class="progress"`)
	contains(t, "the page while a converge runs", body,
		`<meta http-equiv="refresh" content="5">`,
		"This page reloads itself every 5 seconds while a converge runs (every 30 seconds otherwise).")

	page.Clusters = page.Clusters[2:]
	body = statusBody(t, page)
	contains(t, "the page while nothing runs", body,
		`<meta http-equiv="refresh" content="30">`,
		"This page reloads itself every 30 seconds (every 5 seconds while a converge runs).")
	lacks(t, "the page while nothing runs", body, `content="5"`, "<progress")

	// A plan does not change: its page does not reload.
	srv := serve(t, httpapi.Options{Plan: func(string) (string, bool) { return "plan", true }})
	lacks(t, "a plan page", do(t, srv, http.MethodGet, "/plans/p1").body, "http-equiv")
}

func TestStatusPageRunsTable(t *testing.T) {
	t.Parallel()
	runs := []httpapi.Run{
		{Kind: "converge", Commit: sha, PR: 42, Result: "success", Finished: when, Duration: 3*time.Minute + 7*time.Second, PlanID: "converge-0123456789-clusters_prod-a"},
		{Kind: "check", Commit: sha, Result: "needs attention", Detail: "1 update", Finished: when, Duration: 850 * time.Millisecond},
		{Kind: "drift", Commit: sha, Result: "failure", Detail: "proxmox: 503", Finished: when, Duration: 2 * time.Second},
	}
	body := statusBody(t, httpapi.StatusPage{RepositoryURL: "https://github.com/org/infra/", Clusters: []httpapi.ClusterStatus{
		{Path: "clusters/prod-a", Runs: runs},
		{Path: "clusters/quiet"},
	}})
	prod := section(t, body, "clusters-prod-a")
	contains(t, "the runs table", prod,
		`<table class="runs"><caption>Last runs</caption>`,
		`<th scope="col">Kind</th><th scope="col">Commit</th><th scope="col">Pull request</th><th scope="col">Result</th><th scope="col">Duration</th>`,
		`<tr><td>converge</td><td><code title="`+sha+`">0123456</code></td><td><a href="https://github.com/org/infra/pull/42">#42</a></td><td><span class="success">success</span></td><td class="nowrap">3m7s</td>`,
		`<td><a href="plans/converge-0123456789-clusters_prod-a">plan</a></td></tr>`,
		`<tr><td>check</td>`, `<td>none</td><td><span class="retried">needs attention</span>: 1 update</td><td class="nowrap">850ms</td>`,
		`<tr><td>drift</td>`, `<span class="failure">failure</span>: proxmox: 503</td><td class="nowrap">2s</td>`,
	)
	if n := strings.Count(prod, "<tr><td>"); n != 3 {
		t.Errorf("%d run rows, want 3", n)
	}
	contains(t, "a cluster without runs", section(t, body, "clusters-quiet"), "Last runs: none since the agent started.")

	// Without a repository URL the pull request is shown, not linked.
	body = statusBody(t, httpapi.StatusPage{Clusters: []httpapi.ClusterStatus{{Path: "clusters/prod-a", Runs: runs[:1]}}})
	contains(t, "a run without a repository URL", body, "<td>#42</td>")
}

// Every field the sections show comes from the repository, a pull
// request, the provider or the cluster: hostile values are escaped
// everywhere, and no URL field can carry a script.
func TestStatusPageSectionsEscapeEveryField(t *testing.T) {
	t.Parallel()
	h := hostile
	attr := `"><img src=x onerror=alert(1)>`
	page := httpapi.StatusPage{
		RepositoryURL: "javascript:alert(1)//",
		Clusters: []httpapi.ClusterStatus{{
			Path: "clusters/" + attr, Running: h,
			Progress:     &httpapi.Progress{Kind: h, Commit: attr, Started: when, Step: 1, Steps: 2, Text: h},
			Drift:        true,
			DriftChecked: when, DriftSummary: h, DriftChanges: []string{h, attr}, DriftPlanID: `javascript:alert(1)`,
			Check: &httpapi.CheckStatus{
				Time: when, Compared: true, KubernetesRead: true, Incomplete: []string{h, attr}, NotCompared: h,
				Components: []httpapi.ComponentStatus{
					{Name: h, Pinned: attr, Update: h, UpdateKind: h},
					{Name: attr, Pinned: h, Unknown: h},
				},
				Nodes:   []httpapi.NodeStatus{{Name: attr, Role: h, Talos: h, TalosWant: attr, Kubernetes: h, KubernetesWant: attr, InKubernetes: true}},
				Missing: []string{h, attr},
				Plugins: []httpapi.PluginStatus{{Name: attr, State: "drift", Steps: []string{h, attr}}, {Name: h, State: "unknown", Reason: attr}},
			},
			Runs: []httpapi.Run{{Kind: h, Commit: attr, PR: 7, Result: attr, Detail: h, PlanID: `javascript:alert(1)//"><script>`}},
		}},
	}
	body := statusBody(t, page)
	for _, bad := range unescaped {
		if strings.Contains(body, bad) {
			t.Errorf("status page contains %q unescaped:\n%s", bad, body)
		}
	}
	checkMarkup(t, body)
	contains(t, "the hostile page", body, `data-node="&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"`, `href="#ZgotmplZ/pull/7"`,
		`&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`)

	// And the error of a failed check.
	body = statusBody(t, httpapi.StatusPage{Clusters: []httpapi.ClusterStatus{{Path: "c", Check: &httpapi.CheckStatus{Error: attr}}}})
	lacks(t, "a failed check", body, unescaped...)
}

var (
	tagStart = regexp.MustCompile(`<[a-zA-Z]`)
	tagRE    = regexp.MustCompile(`^<([a-zA-Z][a-zA-Z0-9]*)((?:\s+[^\s"'<>/=]+(?:="[^"<>]*")?)*)\s*>`)
	attrRE   = regexp.MustCompile(`([^\s"'<>/=]+)(?:="([^"]*)")?`)
)

// checkMarkup reads every tag of a page: each must parse with its
// attributes quoted, and none may be a script, an embedded resource, an
// event handler or a script URL.
func checkMarkup(t *testing.T, body string) {
	t.Helper()
	allowed := map[string]bool{"html": true, "head": true, "meta": true, "title": true, "style": true, "body": true,
		"h1": true, "h2": true, "h3": true, "p": true, "ul": true, "li": true, "a": true, "code": true, "time": true, "span": true,
		"section": true, "div": true, "progress": true, "table": true, "caption": true, "thead": true, "tbody": true,
		"tr": true, "th": true, "td": true, "pre": true}
	for _, loc := range tagStart.FindAllStringIndex(body, -1) {
		m := tagRE.FindStringSubmatch(body[loc[0]:])
		if m == nil {
			t.Errorf("a tag that does not parse: %.80q", body[loc[0]:])
			continue
		}
		if !allowed[strings.ToLower(m[1])] {
			t.Errorf("a <%s> element on the page: %s", m[1], m[0])
		}
		for _, a := range attrRE.FindAllStringSubmatch(m[2], -1) {
			name, value := strings.ToLower(a[1]), strings.ToLower(strings.TrimSpace(a[2]))
			if strings.HasPrefix(name, "on") || name == "style" || name == "srcdoc" {
				t.Errorf("attribute %s on the page: %s", name, m[0])
			}
			if (name == "href" || name == "src" || name == "action") && (strings.HasPrefix(value, "javascript:") || strings.HasPrefix(value, "data:")) {
				t.Errorf("a %s that is a script: %s", name, m[0])
			}
		}
	}
}

// The page carries no script and its policy forbids any: everything it
// does (reloading) is markup.
func TestStatusPageStaysScriptFree(t *testing.T) {
	t.Parallel()
	srv := serve(t, httpapi.Options{Status: func() httpapi.StatusPage {
		return httpapi.StatusPage{Clusters: []httpapi.ClusterStatus{{Path: "clusters/a", Check: checked, Running: "converge",
			Progress: &httpapi.Progress{Kind: "converge", Commit: sha, Started: when, Step: 1, Steps: 3, Text: "+ machine a"},
			Runs:     []httpapi.Run{{Kind: "plan", Commit: sha, PR: 1, Result: "success"}}}}}
	}})
	res := do(t, srv, http.MethodGet, "/")
	const policy = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	if csp := res.header.Get("Content-Security-Policy"); csp != policy {
		t.Errorf("content security policy %q, want %q", csp, policy)
	}
	lacks(t, "the status page", strings.ToLower(res.body), "<script", "javascript:", "<form", "<iframe", "<link", "<img")
	checkMarkup(t, res.body)
}

// A converge that waits shows what it waits for, since when, and when it
// runs again, in its section, in the list of clusters and in the queue;
// the reason is escaped like everything else.
func TestStatusPageShowsAWaitingConverge(t *testing.T) {
	t.Parallel()
	next := time.Now().Add(10 * time.Minute)
	reason := "a PodDisruptionBudget <b>web</b> blocks draining w1"
	body := statusBody(t, httpapi.StatusPage{Generated: when,
		Queue: []httpapi.QueuedJob{{Cluster: "clusters/prod-a", Kind: "converge", Commit: sha, Attempt: 1, NotBefore: next, Waiting: reason}},
		Clusters: []httpapi.ClusterStatus{{Path: "clusters/prod-a",
			LastConverge: &httpapi.RunSummary{Commit: sha, Result: "waiting", Time: when},
			Waiting:      &httpapi.Waiting{Kind: "converge", Commit: sha, Reason: reason, Since: when, Next: next}}}})
	escaped := "a PodDisruptionBudget &lt;b&gt;web&lt;/b&gt; blocks draining w1"
	contains(t, "the page", body,
		`<code>clusters/prod-a</code></a> (waiting)</li>`,
		"converge (waiting: "+escaped+", not before <time")
	lacks(t, "the page", body, "<b>web</b>")
	sec := section(t, body, "clusters-prod-a")
	contains(t, "the section", sec,
		"<p>Waiting. Last plan: none. Last converge: <code>"+sha[:7]+`</code> <span class="retried">waiting</span>`,
		`converge of <code>`+sha[:7]+`</code> <span class="retried">waiting: `+escaped+`</span> (since <time datetime="`+when.UTC().Format(time.RFC3339)+`">`,
		"; it runs again <time datetime=")
	if !regexp.MustCompile(`\(in (9m5\ds|10m0s)\)\.</div>`).MatchString(sec) {
		t.Errorf("the section does not say it runs again in 10 minutes:\n%s", sec)
	}
}

// TestStatusPageRemediation: each cluster says whether remediation is on
// and with which settings, and lists the remediations converges began.
func TestStatusPageRemediation(t *testing.T) {
	t.Parallel()
	body := statusBody(t, httpapi.StatusPage{Clusters: []httpapi.ClusterStatus{
		{Path: "clusters/on", Remediation: &httpapi.RemediationStatus{On: true, After: "10m", MaxUnhealthy: "40%", Pools: []string{"gpu", "batch"},
			Events: []httpapi.RemediationEvent{{At: when, Pool: "gpu", Node: "on-gpu-02", Commit: sha}}}},
		{Path: "clusters/every", Remediation: &httpapi.RemediationStatus{On: true, After: "1h30m", MaxUnhealthy: "2"}},
		{Path: "clusters/off", Remediation: &httpapi.RemediationStatus{}},
		{Path: "clusters/fresh"},
	}})
	contains(t, "a cluster with remediation", section(t, body, "clusters-on"),
		`<p data-remediation="on">On: a worker NotReady longer than 10m is replaced, at most 40% of a pool at once, in pools <code>gpu</code>, <code>batch</code>`,
		`<code>on-gpu-02</code> of pool <code>gpu</code> replaced by the converge of <code>`+sha[:7])
	contains(t, "a cluster with remediation of every pool", section(t, body, "clusters-every"),
		`longer than 1h30m is replaced, at most 2 of a pool at once, in every worker pool`)
	contains(t, "a cluster without remediation", section(t, body, "clusters-off"), `<p data-remediation="off">Off: cluster.yaml has no remediation section.</p>`)
	contains(t, "a cluster not converged yet", section(t, body, "clusters-fresh"), "Known after the first converge since the agent started.")
}
