package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/check"
	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/forge"
)

// agentWorld is a lab datacenter, a lab forge holding a cluster repository,
// and an agent configured against both.
type agentWorld struct {
	lab     *lab.Lab
	forge   *forge.Forge
	repo    *forge.Repo
	agent   *agent.Agent
	http    http.Handler
	logs    *syncBuffer
	secrets []string
	cluster string // clusters/demo/cluster.yaml as first committed
	cfg     *agent.Config
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const (
	agentToken   = "ghp_agent0123456789abcdefghijklmnop"
	aliceToken   = "ghp_alice0123456789abcdefghijklmnop"
	malloryToken = "ghp_mallory0123456789abcdefghijklmn"
)

func newAgentWorld(t *testing.T, net string) *agentWorld {
	t.Helper()
	l := startLab(t, net)
	f, srv := startForge(t, l, forge.User{Login: "taloscluster-bot", Token: agentToken},
		forge.User{Login: "alice", Token: aliceToken}, forge.User{Login: "mallory", Token: malloryToken})
	repo := clustersRepo(t, f)

	clusterYAML, err := l.ClusterYAML(lab.Cluster{Name: "demo", Workers: 1, Bridge: "vmbr0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Commit("main", map[string]string{
		"clusters/demo/cluster.yaml": clusterYAML,
		"clusters/demo/ca.pem":       string(l.CA.PEM()),
		"README.md":                  "clusters\n",
	}, "add the demo cluster"); err != nil {
		t.Fatal(err)
	}

	dir, write := fileWriter(t)
	write("secrets/clusters/demo/secrets.yaml", fmt.Sprintf("proxmox:\n  token_id: %q\n  token_secret: %q\n", l.TokenID, l.TokenSecret))
	cfg := &agent.Config{
		Repository: agent.Repository{URL: srv.URL + "/org/clusters.git", TokenFile: write("repo-token", agentToken),
			CAFile: write("ca.pem", string(l.CA.PEM())), PollInterval: agent.Duration(time.Second)},
		GitHub: agent.GitHub{APIURL: srv.URL + "/", Repo: "org/clusters", TokenFile: write("gh-token", agentToken),
			CAFile: filepath.Join(dir, "ca.pem"), MutationSpacing: agent.Duration(time.Millisecond)},
		SecretsDir: filepath.Join(dir, "secrets"), DataDir: filepath.Join(dir, "data"),
		Concurrency: 4, DriftInterval: agent.Duration(time.Hour), PublicURL: "http://agent.example",
		DrainTimeout: agent.Duration(2 * time.Second),
		State:        agent.State{Backend: "dir"}, Listen: "127.0.0.1:0",
	}
	cfg.Defaults()
	logs := &syncBuffer{}
	a, handler, err := buildAgent(t.Context(), cfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return &agentWorld{lab: l, forge: f, repo: repo, agent: a, http: handler, logs: logs, cluster: clusterYAML, cfg: cfg,
		secrets: []string{l.TokenSecret, agentToken, aliceToken, malloryToken}}
}

// startForge starts a forge with users over TLS with the lab's CA, seeded
// with the upstream releases the check reads; the test closes it (hung
// requests first).
func startForge(t *testing.T, l *lab.Lab, users ...forge.User) (*forge.Forge, *httptest.Server) {
	t.Helper()
	f, err := forge.New(forge.Options{Dir: t.TempDir(), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SeedUpstreamReleases(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f.Handler())
	if srv.TLS, err = l.CA.ServerTLS("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	srv.Config.ConnContext = forge.ConnContext
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(f.Close) // runs first: it ends hung requests
	return f, srv
}

// clustersRepo creates org/clusters on f, writable by the agent's bot and
// by alice.
func clustersRepo(t *testing.T, f *forge.Forge) *forge.Repo {
	t.Helper()
	repo, err := f.CreateRepo("org", "clusters", "main")
	if err != nil {
		t.Fatal(err)
	}
	repo.Grant("taloscluster-bot", forge.PermissionWrite)
	repo.Grant("alice", forge.PermissionWrite)
	return repo
}

// fileWriter returns a new temporary directory and a function that writes
// a file below it (mode 0600, parents created) and returns its path.
func fileWriter(t *testing.T) (string, func(rel, body string) string) {
	t.Helper()
	dir := t.TempDir()
	return dir, func(rel, body string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// pollUntil polls the agent until cond holds.
func (w *agentWorld) pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\nagent log:\n%s", what, w.logs.String())
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		if err := w.agent.Poll(ctx); err != nil {
			t.Logf("poll: %v", err)
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
}

func (w *agentWorld) status(sha, context string) string {
	for _, s := range w.repo.Statuses(sha) { // newest first
		if s.Context == context {
			return s.State
		}
	}
	return ""
}

func TestAgentPlansPullRequestsAndConvergesMerges(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.81.0.0/24")
	main, err := w.repo.Branch("main")
	if err != nil {
		t.Fatal(err)
	}

	// Start: the cluster was never converged, so the agent builds it.
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	if n := len(w.lab.PVE.VMs()); n != 4 {
		t.Fatalf("%d VMs after the first converge, want 4", n)
	}

	// A pull request that adds a worker gets one plan comment.
	grown := strings.Replace(w.cluster, "count: 1\n", "count: 2\n", 1)
	head1, err := w.repo.Commit("add-worker", map[string]string{"clusters/demo/cluster.yaml": grown}, "add a worker")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "add-worker", "main", "Add a worker")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the plan status", func() bool {
		return w.status(head1, "taloscluster/plan: clusters/demo") == "success"
	})
	comments := w.repo.Comments(pr.Number)
	if len(comments) != 1 || !strings.Contains(comments[0].Body, "demo-worker-02") {
		t.Fatalf("plan comments: %+v", comments)
	}

	// A second push updates the same comment.
	head2, err := w.repo.Commit("add-worker", map[string]string{"clusters/demo/notes.txt": "why\n"}, "explain")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the plan of the second push", func() bool {
		return w.status(head2, "taloscluster/plan: clusters/demo") == "success"
	})
	if comments := w.repo.Comments(pr.Number); len(comments) != 1 || !strings.Contains(comments[0].Body, head2[:10]) {
		t.Fatalf("after a push: %d comments (want exactly 1, updated)", len(comments))
	}

	// The merge is converged at exactly the merge commit.
	merge, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the converge of the merge", func() bool {
		return w.status(merge, "taloscluster/converge: clusters/demo") == "success"
	})
	if n := len(w.lab.PVE.VMs()); n != 5 {
		t.Fatalf("%d VMs after the merge, want 5", n)
	}
	found := false
	for _, c := range w.repo.Comments(pr.Number) {
		found = found || strings.Contains(c.Body, "taloscluster converge")
	}
	if !found {
		t.Fatal("no converge comment on the merged pull request")
	}

	// An untrusted author's pull request is not planned.
	evil, err := w.repo.Commit("evil", map[string]string{"clusters/demo/cluster.yaml": grown + "# x\n"}, "evil")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := w.repo.OpenPR("mallory", "evil", "main", "Please merge")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the untrusted status", func() bool { return w.status(evil, "taloscluster/plan") == "failure" })
	if len(w.repo.Comments(bad.Number)) != 0 {
		t.Fatal("an untrusted pull request got a plan comment")
	}

	// No secret reached a comment, a status or the log.
	var out strings.Builder
	for _, n := range []int{pr.Number, bad.Number} {
		for _, c := range w.repo.Comments(n) {
			out.WriteString(c.Body)
		}
	}
	for _, sha := range []string{main, head1, head2, merge, evil} {
		for _, s := range w.repo.Statuses(sha) {
			out.WriteString(s.Description + s.TargetURL + s.Context)
		}
	}
	out.WriteString(w.logs.String())
	for _, page := range []string{"/metrics", "/", "/readyz"} {
		rec := httptest.NewRecorder()
		w.http.ServeHTTP(rec, httptest.NewRequest("GET", page, nil))
		out.WriteString(rec.Body.String())
		if page == "/metrics" && !strings.Contains(rec.Body.String(), `taloscluster_runs_total{kind="converge",result="success"} 2`) {
			t.Errorf("metrics lack the two converges:\n%s", rec.Body.String())
		}
	}
	for _, s := range w.secrets {
		if strings.Contains(out.String(), s) {
			t.Fatalf("a secret leaked into comments, statuses or logs")
		}
	}
}

// restart replaces the agent with a new one on the same data directory, as
// after a crash or a rollout.
func (w *agentWorld) restart(t *testing.T) {
	t.Helper()
	w.agent.Close()
	a, handler, err := buildAgent(t.Context(), w.cfg, w.logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	w.agent, w.http = a, handler
}

func TestAgentSurvivesGitHubFaultsWithoutDuplicates(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.82.0.0/24")
	w.convergedFirst(t)
	head, pr := w.openGrowPR(t)
	w.forge.Fail("comments.create", 1, 502)
	w.forge.Fail("statuses.create", 2, 502)
	w.forge.SecondaryRateLimit("comments.list", 1, time.Second)
	w.pollUntil(t, "a plan comment despite the faults", func() bool {
		return len(w.repo.Comments(pr.Number)) > 0 && w.status(head, "taloscluster/plan: clusters/demo") == "success"
	})
	// More polls must not add a second comment.
	for i := 0; i < 3; i++ {
		if err := w.agent.Poll(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	w.agent.Wait()
	if n := len(w.repo.Comments(pr.Number)); n != 1 {
		t.Fatalf("%d plan comments after the faults, want exactly 1", n)
	}
}

func TestAgentRefusesForksAndIgnoresRepositoryConfig(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.83.0.0/24")
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	fork, err := w.forge.CreateFork("org", "clusters", "mallory")
	if err != nil {
		t.Fatal(err)
	}
	forkHead, err := fork.Commit("steal", map[string]string{
		"clusters/demo/cluster.yaml": strings.Replace(w.cluster, "count: 1\n", "count: 9\n", 1),
		// An agent configuration in the repository is only data.
		"agent.yaml": "github:\n  allowed_authors: [mallory]\nself_heal: true\n",
	}, "steal")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("mallory", "mallory:steal", "main", "Innocent change")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the fork refusal", func() bool { return w.status(forkHead, "taloscluster/plan") == "failure" })
	if len(w.repo.Comments(pr.Number)) != 0 {
		t.Fatal("a fork pull request was planned")
	}
	if n := len(w.lab.PVE.VMs()); n != 4 {
		t.Fatalf("%d VMs; a fork pull request changed the cluster", n)
	}
}

func TestAgentResumesAfterRestartMidConverge(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.84.0.0/24")
	main, _ := w.repo.Branch("main")
	// Slow VM creation down so the agent can be stopped mid-converge.
	w.lab.PVE.SetLatency("qemu.create", 300*time.Millisecond)
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		created := 0
		for _, op := range w.lab.PVE.Log() {
			if op.Name == "qemu.create" && op.Status < 300 {
				created++
			}
		}
		if created >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the converge never started creating VMs")
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.restart(t) // the old agent's converge is cancelled mid-way
	w.lab.PVE.SetLatency("qemu.create", 0)
	w.pollUntil(t, "the resumed converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	names := map[string]int{}
	for _, v := range w.lab.PVE.VMs() {
		names[v.Name]++
	}
	if len(names) != 4 {
		t.Fatalf("VMs after the resumed converge: %v, want the 4 machines once each", names)
	}
	for n, c := range names {
		if c != 1 {
			t.Fatalf("%s exists %d times", n, c)
		}
	}
}

func TestAgentDetectsDrift(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.85.0.0/24")
	w.cfg.DriftInterval = agent.Duration(100 * time.Millisecond)
	w.restart(t)
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	// After each drift check the agent checks the cluster: the pins
	// against the forge's releases (kubernetes v1.36.1 is two patch
	// releases behind v1.36.3) and the running nodes.
	w.pollUntil(t, "a check of the built cluster", func() bool {
		r, ok := w.agent.LastCheck("clusters/demo")
		return ok && r.Scope == check.ScopeCluster && len(r.Nodes) == 4
	})
	r, _ := w.agent.LastCheck("clusters/demo")
	if r.Incomplete || r.Components[1].PatchesBehind != 2 || r.Components[0].PatchesBehind != 0 {
		t.Errorf("check of the built cluster: incomplete %v %q, components %+v", r.Incomplete, r.IncompleteReasons, r.Components)
	}
	get := func(path string) string {
		rec := httptest.NewRecorder()
		w.http.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Body.String()
	}
	scrape := get("/metrics")
	for _, want := range []string{
		`taloscluster_patch_releases_behind{cluster="clusters/demo",component="kubernetes"} 2`,
		`taloscluster_update_available{cluster="clusters/demo",component="kubernetes"} 1`,
		`taloscluster_patch_releases_behind{cluster="clusters/demo",component="talos"} 0`,
		`taloscluster_update_available{cluster="clusters/demo",component="talos"} 0`,
		`taloscluster_nodes_cordoned{cluster="clusters/demo"} 0`,
		`taloscluster_cluster_check_success{cluster="clusters/demo"} 1`,
	} {
		if !strings.Contains(scrape, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	page := get("/")
	for _, want := range []string{
		`<section class="cluster" id="cluster-clusters-demo" aria-labelledby="h-clusters-demo">`,
		`<table class="nodes"><caption>Nodes</caption>`,
		`<tr data-node="demo-controlplane-01"><th scope="row"><code>demo-controlplane-01</code></th><td>controlplane</td><td>v1.13.8</td><td>v1.36.1</td><td><span class="success">Ready</span></td><td>schedulable</td></tr>`,
		`<tr data-node="demo-worker-01">`,
		"kubernetes v1.36.1 → v1.36.3 (2 patch releases behind)",
		"talos v1.13.8: up to date",
		`<table class="runs"><caption>Last runs</caption>`,
		"<tr><td>check</td>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %q", want)
		}
	}
	if n := strings.Count(page, "<tr data-node="); n != 4 {
		t.Errorf("%d node rows, want 4", n)
	}
	for _, s := range w.secrets {
		if strings.Contains(page+scrape, s) {
			t.Error("a secret is on the status page or in the metrics")
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("status page:\n%s", page)
	}
	// Someone stops a VM behind the agent's back.
	vm := w.lab.PVE.VMs()[0]
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.lab.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost,
		fmt.Sprintf("%s/api2/json/nodes/%s/qemu/%d/status/stop", w.lab.PVEURL, vm.Node, vm.ID), nil)
	req.Header.Set("Authorization", "PVEAPIToken="+w.lab.TokenID+"="+w.lab.TokenSecret)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	w.pollUntil(t, "drift", func() bool {
		rec := httptest.NewRecorder()
		w.http.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return strings.Contains(rec.Body.String(), `taloscluster_cluster_drift{cluster="clusters/demo"} 1`)
	})
}

func TestAgentCoalescesMergesWhileBusy(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.86.0.0/24")
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	merge := func(branch string, files map[string]string) string {
		t.Helper()
		if _, err := w.repo.Commit(branch, files, branch); err != nil {
			t.Fatal(err)
		}
		pr, err := w.repo.OpenPR("alice", branch, "main", branch)
		if err != nil {
			t.Fatal(err)
		}
		sha, err := w.repo.Merge(pr.Number, "alice")
		if err != nil {
			t.Fatal(err)
		}
		return sha
	}
	// The first merge grows the cluster; VM creation is slowed down so
	// the next merges arrive while the cluster is busy.
	w.lab.PVE.SetLatency("qemu.create", 1500*time.Millisecond)
	m1 := merge("grow", map[string]string{"clusters/demo/cluster.yaml": strings.Replace(w.cluster, "count: 1\n", "count: 2\n", 1)})
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	m2 := merge("note-a", map[string]string{"clusters/demo/a.txt": "a\n"})
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	m3 := merge("note-b", map[string]string{"clusters/demo/b.txt": "b\n"})
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.lab.PVE.SetLatency("qemu.create", 0)
	w.pollUntil(t, "the converge of the newest merge", func() bool {
		return w.status(m3, "taloscluster/converge: clusters/demo") == "success"
	})
	if got := w.status(m1, "taloscluster/converge: clusters/demo"); got != "success" {
		t.Fatalf("the first merge's converge: %q", got)
	}
	// m2 was covered by the run of m3: both get its status, and the run
	// says it covered m2.
	if got := w.status(m2, "taloscluster/converge: clusters/demo"); got != "success" {
		t.Fatalf("the covered merge's status: %q", got)
	}
	covered := false
	for _, c := range w.repo.Comments(3) {
		covered = covered || strings.Contains(c.Body, m2[:10])
	}
	if !covered {
		t.Fatalf("the coalesced run does not say it covered %s: %+v", m2[:10], w.repo.Comments(3))
	}
	queued := false
	for _, c := range w.repo.Comments(2) {
		queued = queued || strings.Contains(c.Body, "queued behind")
	}
	if !queued {
		t.Fatalf("no queued note on the second pull request: %+v", w.repo.Comments(2))
	}
	runs := 0
	for _, l := range strings.Split(w.logs.String(), "\n") {
		if strings.Contains(l, `phase=validate step="checking credentials`) {
			runs++
		}
	}
	if runs != 3 { // the first build, m1, then one run for m2 and m3
		t.Fatalf("%d converge runs, want 3", runs)
	}
}

func TestAgentDestroysOnlyWithTheMarker(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.87.0.0/24")
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	// A marker naming another cluster destroys nothing.
	wrong, err := w.repo.Commit("main", map[string]string{"clusters/demo/DESTROY": "prod\n"}, "wrong marker")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the refused destroy", func() bool {
		return w.status(wrong, "taloscluster/converge: clusters/demo") == "failure"
	})
	if n := len(w.lab.PVE.VMs()); n != 4 {
		t.Fatalf("%d VMs after a wrong marker, want 4", n)
	}
	// A pull request with the right marker shows what would be deleted.
	head, err := w.repo.Commit("destroy", map[string]string{"clusters/demo/DESTROY": "demo\n"}, "destroy demo")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "destroy", "main", "Destroy demo")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the destroy plan", func() bool {
		return w.status(head, "taloscluster/plan: clusters/demo") == "success"
	})
	if d := w.description(head, "taloscluster/plan: clusters/demo"); !strings.HasPrefix(d, "destroy: ") {
		t.Errorf("destroy plan status %q, want it to say destroy", d)
	}
	cs := w.repo.Comments(pr.Number)
	if len(cs) != 1 || !strings.Contains(cs[0].Body, "delete") || !strings.Contains(cs[0].Body, "**destroy:**") {
		t.Fatalf("destroy plan comment: %+v", cs)
	}
	for _, vm := range w.lab.PVE.VMs() {
		if !strings.Contains(cs[0].Body, vm.Name) {
			t.Errorf("the destroy plan does not list the VM %s:\n%s", vm.Name, cs[0].Body)
		}
	}
	if n := len(w.lab.PVE.VMs()); n != 4 {
		t.Fatal("a plan destroyed something")
	}
	merge, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the destroy", func() bool {
		return w.final(merge, "taloscluster/converge: clusters/demo")
	})
	if st, d := w.status(merge, "taloscluster/converge: clusters/demo"), w.description(merge, "taloscluster/converge: clusters/demo"); st != "success" || d != "destroyed" {
		t.Fatalf("destroy converge status %s %q, want success \"destroyed\"", st, d)
	}
	if n := len(w.lab.PVE.VMs()); n != 0 {
		t.Fatalf("%d VMs after the destroy, want 0", n)
	}
	w.agent.Wait()
	if cs := w.repo.Comments(pr.Number); len(cs) != 2 || !strings.Contains(cs[1].Body, "**taloscluster destroy** of `clusters/demo`") || !strings.Contains(cs[1].Body, "**destroyed**") {
		t.Fatalf("the merge's comment does not say destroyed: %+v", cs)
	}
}

// A destroy marker pushed to the default branch without a pull request
// destroys nothing, whatever require_reviewed_plan says: no destroy plan
// was shown.
func TestAgentDestroysOnlyAShownPlan(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.76.0.0/24")
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	push, err := w.repo.Commit("main", map[string]string{"clusters/demo/DESTROY": "demo\n"}, "destroy demo unreviewed")
	if err != nil {
		t.Fatal(err)
	}
	const ctx = "taloscluster/converge: clusters/demo"
	w.pollUntil(t, "the refused destroy", func() bool { return w.final(push, ctx) })
	if st, d := w.status(push, ctx), w.description(push, ctx); st != "failure" || !strings.Contains(d, "refused") {
		t.Fatalf("an unreviewed destroy ended %s %q, want a refusal", st, d)
	}
	if n := len(w.lab.PVE.VMs()); n != 4 {
		t.Fatalf("%d VMs after an unreviewed destroy, want 4", n)
	}
}

// convergedFirst polls until demo's first converge on the default branch
// succeeded.
func (w *agentWorld) convergedFirst(t *testing.T) {
	t.Helper()
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
}

// openGrowPR commits demo with one more worker on the branch grow and
// opens its pull request as alice; it returns the head and the pull
// request.
func (w *agentWorld) openGrowPR(t *testing.T) (string, forge.PullRequest) {
	t.Helper()
	grown := strings.Replace(w.cluster, "count: 1\n", "count: 2\n", 1)
	head, err := w.repo.Commit("grow", map[string]string{"clusters/demo/cluster.yaml": grown}, "grow")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "grow", "main", "Grow")
	if err != nil {
		t.Fatal(err)
	}
	return head, pr
}
