package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taloscluster/taloscluster/agent"
)

// The status page in a real browser: headless Chromium, driven with
// chromedp, reads the page the agent serves while it converges the lab
// cluster. Without a browser on PATH the test is skipped, unless
// TALOSCLUSTER_REQUIRE_BROWSER=1 (as in CI) makes that a failure. The
// screenshots go to $TALOSCLUSTER_ARTIFACTS, or to
// $TMPDIR/taloscluster-artifacts.

// browserNames are the programs looked up on PATH, in this order.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome"}

// browserActionLimit bounds every single browser action.
const browserActionLimit = 15 * time.Second

// pageSnapshot is what one read of the status page in the browser returns.
// Field names match the keys of snapshotJS.
type pageSnapshot struct {
	URL      string
	Lang     string
	H1       int
	Refresh  *string // the content of <meta http-equiv="refresh">, nil without one
	HTML     string  // document.documentElement.outerHTML
	Links    []string
	Clusters []clusterView
	Tables   []tableView
	Progress *progressView
}

type clusterView struct {
	ID, LabelledBy, H2ID, H2, Code string
	NodeTables                     int
	Nodes                          []nodeRow
	RunTables                      int
	RunsCaption                    string
	RunLinks                       []string
}

type nodeRow struct {
	Name  string
	Cells []string
}

type tableView struct {
	Class, Caption string
	Headers        []headerCell
}

type headerCell struct {
	Text, Scope string
}

type progressView struct {
	Live, Text string
	Value, Max *string // nil when the attribute is missing
	Bars       int     // <progress> elements inside
}

// snapshotJS reads everything the test checks in one evaluation, so a
// refresh of the page cannot mix two versions of it.
const snapshotJS = `(() => {
	const text = e => e ? e.textContent.replace(/\s+/g, ' ').trim() : '';
	const all = (sel, root) => Array.from((root || document).querySelectorAll(sel));
	const refresh = document.querySelector('meta[http-equiv="refresh" i]');
	const prog = document.querySelector('div.progress[role="status"]');
	const bar = prog && prog.querySelector('progress');
	return {
		url: location.href,
		lang: document.documentElement.getAttribute('lang') || '',
		h1: all('h1').length,
		refresh: refresh ? refresh.getAttribute('content') : null,
		html: document.documentElement.outerHTML,
		links: all('a[href]').map(a => a.getAttribute('href')),
		clusters: all('section.cluster').map(s => {
			const h = s.querySelector('h2');
			const runs = s.querySelector('table.runs');
			return {
				id: s.id,
				labelledBy: s.getAttribute('aria-labelledby') || '',
				h2ID: h ? h.id : '',
				h2: text(h),
				code: text(h && h.querySelector('code')),
				nodeTables: all('table.nodes', s).length,
				nodes: all('table.nodes tr[data-node]', s).map(tr => ({
					name: tr.getAttribute('data-node'),
					cells: all('td, th', tr).map(text),
				})),
				runTables: all('table.runs', s).length,
				runsCaption: runs ? text(runs.querySelector(':scope > caption')) : '',
				runLinks: runs ? all('a[href]', runs).map(a => a.getAttribute('href')) : [],
			};
		}),
		tables: all('table').map(t => ({
			class: t.getAttribute('class') || '',
			caption: text(t.querySelector(':scope > caption')),
			headers: all('th', t).map(th => ({text: text(th), scope: th.getAttribute('scope') || ''})),
		})),
		progress: prog ? {
			live: prog.getAttribute('aria-live') || '',
			text: text(prog),
			value: bar && bar.hasAttribute('value') ? bar.getAttribute('value') : null,
			max: bar && bar.hasAttribute('max') ? bar.getAttribute('max') : null,
			bars: all('progress', prog).length,
		} : null,
	};
})()`

// findBrowser returns the path of the first of browserNames on PATH, or "".
func findBrowser() string {
	for _, name := range browserNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserTab is one tab of a headless browser, with what a failure needs
// to explain itself.
type browserTab struct {
	t   *testing.T
	ctx context.Context
	out *syncBuffer // the browser's stdout and stderr
}

// browse runs one action with its own deadline and fails the test on error.
func browse[T any](b *browserTab, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	v, err := tryBrowse(b, a)
	if err != nil {
		b.t.Fatalf("browser: %s: %v\nbrowser output:\n%s", what, err, b.out.String())
	}
	return v
}

// tryBrowse runs one action with its own deadline.
func tryBrowse[T any](b *browserTab, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, browserActionLimit)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// snapshot reads the page as it is now. A read that races with the page's
// own refresh is tried again.
func (b *browserTab) snapshot() pageSnapshot {
	b.t.Helper()
	var err error
	for range 3 {
		var s pageSnapshot
		if s, err = tryBrowse(b, chromedp.Evaluate[pageSnapshot](snapshotJS)); err == nil {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.t.Fatalf("browser: reading the page: %v\nbrowser output:\n%s", err, b.out.String())
	return pageSnapshot{}
}

// startBrowser starts headless Chromium at path and opens a tab.
func startBrowser(t *testing.T, path string) *browserTab {
	t.Helper()
	out := &syncBuffer{}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.CombinedOutput(out),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()), opts...)
	t.Cleanup(cancelAlloc) // stops the browser and waits for it
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	// The first run starts the browser, whose life is bound to the context
	// of that run: it gets no deadline, the wait for it does.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting %s: %v\nbrowser output:\n%s", path, err, out.String())
		}
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("%s did not start within 30s\nbrowser output:\n%s", path, out.String())
	}
	return &browserTab{t: t, ctx: ctx, out: out}
}

// testArtifactDir is where the test writes files for people to look at.
func testArtifactDir() string {
	if d := os.Getenv("TALOSCLUSTER_ARTIFACTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "taloscluster-artifacts")
}

// screenshot saves a full-page PNG of the tab as the artifact name.
func (b *browserTab) screenshot(name string) {
	b.t.Helper()
	png := browse(b, "taking a screenshot", chromedp.FullScreenshot(100))
	dir := testArtifactDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", p)
}

// clusterSlug is the id part the page derives from a cluster path.
func clusterSlug(path string) string {
	return regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(path), "-")
}

func TestStatusPageInABrowser(t *testing.T) {
	t.Parallel()
	exe := findBrowser()
	if exe == "" {
		if os.Getenv("TALOSCLUSTER_REQUIRE_BROWSER") == "1" {
			t.Fatalf("TALOSCLUSTER_REQUIRE_BROWSER=1 and none of %v is on PATH", browserNames)
		}
		t.Skipf("none of %v is on PATH (TALOSCLUSTER_REQUIRE_BROWSER=1 makes this a failure)", browserNames)
	}
	began := time.Now()
	w := newAgentWorld(t, "127.170.0.0/24")
	// The nodes on the page are those the last check read, and checks run
	// once a drift interval.
	w.cfg.DriftInterval = agent.Duration(2 * time.Second)
	w.restart(t)
	srv := httptest.NewServer(w.http)
	t.Cleanup(srv.Close)
	pageURL := srv.URL + "/"

	// The agent works as it does in production: a loop polls it.
	pollCtx, stopPolling := context.WithCancel(t.Context())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for pollCtx.Err() == nil {
			ctx, cancel := context.WithTimeout(pollCtx, 30*time.Second)
			_ = w.agent.Poll(ctx) // a failed poll is tried again; the waits below say what never happened
			cancel()
			select {
			case <-pollCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stopPolling(); <-polled })

	b := startBrowser(t, exe) // while the agent builds the cluster
	t.Logf("agent and browser ready after %s", time.Since(began).Round(time.Millisecond))

	const cluster = "clusters/demo"
	slug := clusterSlug(cluster)
	if slug != "clusters-demo" {
		t.Fatalf("slug of %s: %q", cluster, slug)
	}
	forgeURL, err := url.Parse(w.cfg.GitHub.APIURL)
	if err != nil {
		t.Fatal(err)
	}
	talosVersion := clusterYAMLVersion(t, w.cluster, "talos")
	kubeVersion := clusterYAMLVersion(t, w.cluster, "kubernetes")
	checks := pageChecks{t: t, w: w, page: pageURL, forge: forgeURL.Host, client: &http.Client{Timeout: 10 * time.Second}}

	// The first converge: the page lists the cluster and its nodes.
	main, err := w.repo.Branch("main")
	if err != nil {
		t.Fatal(err)
	}
	waitWhilePolled(t, w, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: "+cluster) == "success"
	})
	built := map[string]string{} // node name -> role
	for _, vm := range w.lab.PVE.VMs() {
		built[vm.Name] = labRole(vm.Name)
	}
	if len(built) != 4 || countLabRole(built, "control plane") != 3 || countLabRole(built, "worker") != 1 {
		t.Fatalf("machines after the first converge: %v, want 3 control planes and 1 worker", built)
	}
	browse(b, "opening the status page", chromedp.Navigate(pageURL))
	idle := b.waitPage("the cluster's 4 nodes, idle (no 5 s refresh)", func(s pageSnapshot) bool {
		c := s.cluster("cluster-" + slug)
		return c != nil && len(c.Nodes) == len(built) && s.idle()
	})
	checks.all("idle", idle)
	c := idle.cluster("cluster-" + slug)
	checks.section(c, cluster, slug)
	checks.nodes(c, built, talosVersion, kubeVersion)
	t.Logf("first converge shown after %s", time.Since(began).Round(time.Millisecond))

	// A pull request that adds a worker: planned, then merged. The
	// converge is slowed down so the page can be read while it runs.
	grown := strings.Replace(w.cluster, "count: 1\n", "count: 2\n", 1)
	if grown == w.cluster {
		t.Fatal("cluster.yaml has no worker count to change")
	}
	head, err := w.repo.Commit("add-worker", map[string]string{"clusters/demo/cluster.yaml": grown}, "add a worker")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "add-worker", "main", "Add a worker")
	if err != nil {
		t.Fatal(err)
	}
	waitWhilePolled(t, w, "the plan of the pull request", func() bool {
		return w.status(head, "taloscluster/plan: "+cluster) == "success"
	})
	w.lab.PVE.SetLatency("qemu.create", 2*time.Second)
	w.lab.PVE.SetLatency("qemu.start", 2*time.Second)
	merge, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	converged := func() bool { return w.status(merge, "taloscluster/converge: "+cluster) == "success" }

	// The progress advances while the converge runs.
	var first, advanced *pageSnapshot
	var seen []string
	deadline := time.Now().Add(40 * time.Second)
	for advanced == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed the converge's progress advance; seen: %v\nagent log:\n%s", seen, w.logs.String())
		}
		done := converged() // read before the page: a page read after it cannot be mid-run
		browse(b, "reloading the status page", chromedp.Reload())
		s := b.snapshot()
		switch p := s.Progress; {
		case p == nil && (first != nil || done):
			t.Fatalf("the converge ended before the page showed its progress advance; seen: %v", seen)
		case p == nil:
			// Not started yet.
		case p.Bars == 0:
			seen = append(seen, "planning") // no step started yet
		default:
			value, total := checks.progress(s)
			seen = append(seen, fmt.Sprintf("%d/%d", value, total))
			switch {
			case first == nil:
				first = &s
			case value > progressStep(first):
				advanced = &s
			}
		}
		time.Sleep(150 * time.Millisecond)
	}
	t.Logf("progress seen while converging: %v", seen)
	checks.all("first converging", *first)
	checks.all("converging", *advanced)
	b.screenshot("status-page-converging.png")
	w.lab.PVE.SetLatency("qemu.create", 0)
	w.lab.PVE.SetLatency("qemu.start", 0)

	// The converge done: five nodes, the runs with their links, no
	// progress and no refresh.
	waitWhilePolled(t, w, "the converge of the merge", converged)
	built = map[string]string{}
	for _, vm := range w.lab.PVE.VMs() {
		built[vm.Name] = labRole(vm.Name)
	}
	if len(built) != 5 {
		t.Fatalf("machines after the merge: %v, want 5", built)
	}
	browse(b, "reloading the status page", chromedp.Reload())
	final := b.waitPage("the cluster's 5 nodes, idle (no progress, no 5 s refresh)", func(s pageSnapshot) bool {
		c := s.cluster("cluster-" + slug)
		return c != nil && len(c.Nodes) == len(built) && s.Progress == nil && s.idle()
	})
	checks.all("final", final)
	c = final.cluster("cluster-" + slug)
	checks.section(c, cluster, slug)
	checks.nodes(c, built, talosVersion, kubeVersion)
	checks.runs(c)
	b.screenshot("status-page.png")
	t.Logf("done after %s", time.Since(began).Round(time.Millisecond))
}

// waitWhilePolled waits up to 45 s for cond, while the background loop polls the
// agent.
func waitWhilePolled(t *testing.T, w *agentWorld, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\nagent log:\n%s", what, w.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPage reloads the page until cond holds for what it shows, for up to
// 15 s, and returns that read.
func (b *browserTab) waitPage(what string, cond func(pageSnapshot) bool) pageSnapshot {
	b.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := b.snapshot()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the page never showed %s; it has:\n%s", what, s.HTML)
		}
		time.Sleep(200 * time.Millisecond)
		browse(b, "reloading the status page", chromedp.Reload())
	}
}

// idle reports whether the page does not refresh itself as fast as while
// a converge runs.
func (s pageSnapshot) idle() bool {
	return s.Refresh == nil || *s.Refresh != "5"
}

func (s pageSnapshot) cluster(id string) *clusterView {
	for i := range s.Clusters {
		if s.Clusters[i].ID == id {
			return &s.Clusters[i]
		}
	}
	return nil
}

// clusterYAMLVersion returns the version under the top-level key of a cluster.yaml.
func clusterYAMLVersion(t *testing.T, clusterYAML, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + key + `:\n\s+version: (\S+)`).FindStringSubmatch(clusterYAML)
	if m == nil {
		t.Fatalf("no %s version in cluster.yaml", key)
	}
	return m[1]
}

// labRole is the role of a lab machine, from its name.
func labRole(name string) string {
	if strings.Contains(name, "controlplane") {
		return "control plane"
	}
	return "worker"
}

func countLabRole(nodes map[string]string, role string) int {
	n := 0
	for _, r := range nodes {
		if r == role {
			n++
		}
	}
	return n
}

func progressStep(s *pageSnapshot) int {
	v, _ := strconv.Atoi(*s.Progress.Value)
	return v
}

// pageChecks are the checks every read of the page must pass.
type pageChecks struct {
	t      *testing.T
	w      *agentWorld
	page   string // the status page's URL
	forge  string // host of the lab's GitHub
	client *http.Client
}

func (p pageChecks) all(state string, s pageSnapshot) {
	p.t.Helper()
	p.accessibility(state, s)
	served, external := p.links(state, s)
	p.noSecrets(state, s)
	p.t.Logf("%s page: %d tables, links served by the agent (200): %v, pull request links: %v", state, len(s.Tables), served, external)
}

// accessibility: a language, one h1, tables with a caption and scoped
// headers.
func (p pageChecks) accessibility(state string, s pageSnapshot) {
	t := p.t
	t.Helper()
	if s.Lang == "" {
		t.Errorf("%s page: <html> has no lang", state)
	}
	if s.H1 != 1 {
		t.Errorf("%s page: %d h1 elements, want exactly 1", state, s.H1)
	}
	if len(s.Tables) == 0 {
		t.Errorf("%s page: no table", state)
	}
	for i, tb := range s.Tables {
		name := fmt.Sprintf("%s page: table %d (class %q)", state, i+1, tb.Class)
		if tb.Caption == "" {
			t.Errorf("%s has no caption", name)
		}
		if len(tb.Headers) == 0 {
			t.Errorf("%s has no th", name)
		}
		for _, th := range tb.Headers {
			switch th.Scope {
			case "col", "row", "colgroup", "rowgroup":
			default:
				t.Errorf("%s: th %q has scope %q", name, th.Text, th.Scope)
			}
		}
	}
}

// prLinkPath is the shape of a link to a pull request of the lab repository.
var prLinkPath = regexp.MustCompile(`^/org/clusters/pull/[1-9][0-9]*$`)

// links: every link served by the agent answers 200; a link to GitHub is a
// pull request of the repository (there is no network to follow it).
func (p pageChecks) links(state string, s pageSnapshot) (served, external []string) {
	t := p.t
	t.Helper()
	base, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	agent, _ := url.Parse(p.page)
	if len(s.Links) == 0 {
		t.Errorf("%s page has no link", state)
	}
	checked := map[string]bool{}
	for _, href := range s.Links {
		u, err := base.Parse(href)
		if err != nil {
			t.Errorf("%s page: link %q: %v", state, href, err)
			continue
		}
		switch {
		case u.Scheme == agent.Scheme && u.Host == agent.Host:
			u.Fragment = ""
			if checked[u.String()] {
				continue
			}
			checked[u.String()] = true
			served = append(served, u.Path)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
			resp, err := p.client.Do(req)
			if err != nil {
				cancel()
				t.Errorf("%s page: link %q (%s): %v", state, href, u, err)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			cancel()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s page: link %q (%s): %s", state, href, u, resp.Status)
			}
		case u.Scheme == "https" && (u.Host == "github.com" || u.Host == p.forge):
			if !prLinkPath.MatchString(u.Path) || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
				t.Errorf("%s page: link %q is not a pull request of org/clusters", state, href)
			}
			external = append(external, u.String())
		default:
			t.Errorf("%s page: link %q leads neither to the agent nor to a pull request", state, href)
		}
	}
	return served, external
}

// noSecrets: no credential is in the page, as the browser has it or as
// served.
func (p pageChecks) noSecrets(state string, s pageSnapshot) {
	t := p.t
	t.Helper()
	rec := httptest.NewRecorder()
	p.w.http.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	for i, secret := range p.w.secrets {
		if strings.Contains(s.HTML, secret) || strings.Contains(rec.Body.String(), secret) {
			t.Errorf("%s page: secret %d of the world is in the page", state, i)
		}
	}
}

// section: the cluster's section, labelled by its heading.
func (p pageChecks) section(c *clusterView, path, slug string) {
	t := p.t
	t.Helper()
	if c == nil {
		t.Fatalf("no section.cluster#cluster-%s", slug)
	}
	if c.H2ID != "h-"+slug || c.LabelledBy != c.H2ID {
		t.Errorf("section %s: h2 id %q, aria-labelledby %q, want both h-%s", c.ID, c.H2ID, c.LabelledBy, slug)
	}
	if c.Code != path || !strings.Contains(c.H2, path) {
		t.Errorf("section %s: h2 %q (code %q), want %s", c.ID, c.H2, c.Code, path)
	}
	if c.NodeTables != 1 {
		t.Errorf("section %s: %d table.nodes, want 1", c.ID, c.NodeTables)
	}
}

// nodes: one row per node, with its role and the versions it runs.
func (p pageChecks) nodes(c *clusterView, want map[string]string, talos, kube string) {
	t := p.t
	t.Helper()
	got := map[string]bool{}
	for _, n := range c.Nodes {
		if got[n.Name] {
			t.Errorf("node %s has two rows", n.Name)
		}
		got[n.Name] = true
		role, ok := want[n.Name]
		if !ok {
			t.Errorf("row for %q, which is no node of the cluster", n.Name)
			continue
		}
		// The role is read from the other cells: the name itself says it.
		rest := strings.ToLower(strings.ReplaceAll(strings.Join(n.Cells, " | "), n.Name, ""))
		other := "worker"
		if role == "worker" {
			other = "control"
		}
		if !strings.Contains(rest, strings.Fields(role)[0]) || strings.Contains(rest, other) {
			t.Errorf("row of %s does not show the role %s: %q", n.Name, role, n.Cells)
		}
		for _, v := range []string{talos, kube} {
			if !strings.Contains(rest, strings.ToLower(strings.TrimPrefix(v, "v"))) {
				t.Errorf("row of %s does not show version %s: %q", n.Name, v, n.Cells)
			}
		}
	}
	for name := range want {
		if !got[name] {
			t.Errorf("no row for node %s (rows: %d)", name, len(c.Nodes))
		}
	}
}

// progress: the converge's progress bar and its text agree; it returns
// the step and the number of steps.
func (p pageChecks) progress(s pageSnapshot) (value, total int) {
	t := p.t
	t.Helper()
	pr := s.Progress
	if pr.Bars != 1 || pr.Value == nil || pr.Max == nil {
		t.Fatalf("div.progress: %d progress elements, value %v, max %v; want one with both attributes", pr.Bars, pr.Value, pr.Max)
	}
	value, err1 := strconv.Atoi(*pr.Value)
	total, err2 := strconv.Atoi(*pr.Max)
	if err1 != nil || err2 != nil || total < 1 || value < 0 || value > total {
		t.Fatalf("progress value %q max %q", *pr.Value, *pr.Max)
	}
	if pr.Live != "polite" {
		t.Errorf("div.progress aria-live %q, want polite", pr.Live)
	}
	if want := fmt.Sprintf("step %d of %d", value, total); !strings.Contains(pr.Text, want) {
		t.Errorf("progress text %q does not say %q", pr.Text, want)
	}
	if s.Refresh == nil || *s.Refresh != "5" {
		t.Errorf("page of a running converge: meta refresh %v, want content 5", s.Refresh)
	}
	return value, total
}

// runs: the last runs link their pull request and their plan.
func (p pageChecks) runs(c *clusterView) {
	t := p.t
	t.Helper()
	if c.RunTables != 1 || c.RunsCaption != "Last runs" {
		t.Errorf("section %s: %d table.runs, caption %q; want one, captioned Last runs", c.ID, c.RunTables, c.RunsCaption)
	}
	var prs, plans int
	for _, href := range c.RunLinks {
		u, err := url.Parse(href)
		if err != nil {
			continue
		}
		if prLinkPath.MatchString(u.Path) && u.IsAbs() {
			prs++
		}
		if !u.IsAbs() && strings.HasPrefix(u.Path, "plans/") {
			plans++
		}
	}
	if prs == 0 || plans == 0 {
		t.Errorf("table.runs links %d pull requests and %d plans, want both: %q", prs, plans, c.RunLinks)
	}
}
