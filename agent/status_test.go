package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/check"
)

// needsUpdates is a check of clusters/a that read everything: Talos one
// patch release behind, Kubernetes two, two nodes of which one is
// cordoned and not ready.
func needsUpdates() *agent.CheckResult {
	return &agent.CheckResult{
		Report: &check.Report{Cluster: "a", Scope: check.ScopeCluster, NeedsAttention: true,
			Components: []check.Component{
				{Name: check.ComponentTalos, Pinned: "v1.13.8", PinnedReleased: true, LatestPatch: "v1.13.9", PatchesBehind: 1,
					Update: &check.Update{Kind: check.UpdatePatch, Version: "v1.13.9"}},
				{Name: check.ComponentKubernetes, Pinned: "v1.36.1", PinnedReleased: true, LatestPatch: "v1.36.3", PatchesBehind: 2,
					Update: &check.Update{Kind: check.UpdatePatch, Version: "v1.36.3"}},
			},
			Nodes: []check.Node{
				{Name: "a-cp-01", Role: "controlplane", InClusterYAML: true,
					Talos:   check.Fact{Want: "v1.13.8", Have: "v1.13.8", State: check.StateInSync},
					Kubelet: check.Fact{Want: "v1.36.1", Have: "v1.36.1", State: check.StateInSync}},
				{Name: "a-worker-01", Role: "worker", InClusterYAML: true, Cordoned: true,
					Talos:   check.Fact{Want: "v1.13.8", Have: "v1.13.7", State: check.StateDrift},
					Kubelet: check.Fact{Want: "v1.36.1", Have: "v1.36.1", State: check.StateInSync}},
			},
			Cordoned: []string{"a-worker-01"},
			Findings: []check.Finding{{Kind: check.KindUpdate}, {Kind: check.KindUpdate}, {Kind: check.KindDrift}, {Kind: check.KindCordon}},
		},
		Kube: map[string]agent.KubeNode{"a-cp-01": {Ready: true}, "a-worker-01": {Cordoned: true}},
	}
}

func TestCheckRunsAfterTheDriftPlan(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *agent.Config) { c.DriftInterval = agent.Duration(time.Nanosecond) })
	w.runner.set(func(r *fakeRunner) { r.checkRes, r.calls = needsUpdates(), nil })
	w.poll()
	if got := w.runner.calls; !slices.Equal(got, []string{"plan", "check"}) {
		t.Fatalf("runner calls %v; want the drift plan, then the check", got)
	}
	for _, want := range []string{
		`taloscluster_update_available{cluster="clusters/a",component="talos"} 1`,
		`taloscluster_update_available{cluster="clusters/a",component="kubernetes"} 1`,
		`taloscluster_patch_releases_behind{cluster="clusters/a",component="talos"} 1`,
		`taloscluster_patch_releases_behind{cluster="clusters/a",component="kubernetes"} 2`,
		`taloscluster_nodes_cordoned{cluster="clusters/a"} 1`,
		`taloscluster_cluster_check_success{cluster="clusters/a"} 1`,
	} {
		if !w.metric(want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if r, ok := w.agent.LastCheck(cluster); !ok || r.Components[1].PatchesBehind != 2 {
		t.Errorf("the last report is not kept: %v %+v", ok, r)
	}
	page := w.get("/")
	for _, want := range []string{
		`<section class="cluster" id="cluster-clusters-a" aria-labelledby="h-clusters-a">`,
		`<h2 id="h-clusters-a"><code>clusters/a</code></h2>`,
		`<table class="nodes"><caption>Nodes</caption>`,
		`<tr data-node="a-cp-01"><th scope="row"><code>a-cp-01</code></th><td>controlplane</td><td>v1.13.8</td><td>v1.36.1</td><td><span class="success">Ready</span></td><td>schedulable</td></tr>`,
		`<tr data-node="a-worker-01"><th scope="row"><code>a-worker-01</code></th><td>worker</td><td>v1.13.7 <span class="drift">(want v1.13.8)</span></td><td>v1.36.1</td><td><span class="failure">Not ready</span></td><td><span class="retried">cordoned</span></td></tr>`,
		"talos v1.13.8 → v1.13.9 (1 patch release behind)",
		"kubernetes v1.36.1 → v1.36.3 (2 patch releases behind)",
		"<tr><td>check</td>",
		`<span class="retried">needs attention</span>: 2 updates, 1 drift finding, 1 cordon`,
		"<tr><td>drift</td>",
		`<span class="success">no drift</span>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("status page:\n%s", page)
	}

	// A check that could not read the Talos releases nor a node: the
	// last known update series stay, the check counts as not finished,
	// and the reasons show without the secret.
	incomplete := needsUpdates()
	incomplete.Report.Components[0] = check.Component{Name: check.ComponentTalos, Pinned: "v1.13.8",
		Unknown: "listing the releases of siderolabs/talos: 401 for token " + secret}
	incomplete.Report.Incomplete = true
	incomplete.Report.IncompleteReasons = []string{"releases: listing the releases of siderolabs/talos: 401 for token " + secret}
	w.runner.set(func(r *fakeRunner) { r.checkRes = incomplete })
	w.poll()
	for _, want := range []string{
		`taloscluster_update_available{cluster="clusters/a",component="talos"} 1`,
		`taloscluster_cluster_check_success{cluster="clusters/a"} 0`,
	} {
		if !w.metric(want) {
			t.Errorf("metrics after an incomplete check lack %s", want)
		}
	}
	page = w.get("/")
	for _, want := range []string{
		"<h3>Check incomplete</h3>",
		"<li>releases: listing the releases of siderolabs/talos: 401 for token [redacted]</li>",
		`<span class="retried">incomplete</span>: releases: listing the releases of siderolabs/talos: 401 for token [redacted]`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page after an incomplete check lacks %q:\n%s", want, page)
		}
	}
	w.checkReported()

	// A check that could not run at all.
	w.runner.set(func(r *fakeRunner) { r.checkErr = errors.New("cluster.yaml: token " + secret + " is not a version") })
	w.poll()
	if !w.metric(`taloscluster_cluster_check_success{cluster="clusters/a"} 0`) {
		t.Error("a failed check is not counted as unfinished")
	}
	if page := w.get("/"); !strings.Contains(page, "The last check failed: cluster.yaml: token [redacted] is not a version") ||
		!strings.Contains(page, "Nodes: the last check failed, so no node was read.") {
		t.Errorf("the status page does not show the failed check:\n%s", page)
	}
	w.checkReported()
}

func TestRunsAreKeptNewestFirstAndBounded(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *agent.Config) { c.DriftInterval = agent.Duration(time.Nanosecond) })
	for range 12 {
		w.poll()
	}
	st := w.agent.Status()
	runs := st.Clusters[0].Runs
	if len(runs) != 20 {
		t.Fatalf("%d runs kept, want 20", len(runs))
	}
	for i, r := range runs {
		want := "check"
		if i%2 == 1 {
			want = "drift"
		}
		if r.Kind != want || r.Commit != "c0" {
			t.Fatalf("run %d: %+v, want a %s of c0 (newest first)", i, r, want)
		}
		if i > 0 && r.Finished.After(runs[i-1].Finished) {
			t.Fatalf("run %d finished after run %d", i, i-1)
		}
	}
	if n := strings.Count(w.get("/"), "<tr><td>"); n != 20 {
		t.Errorf("%d rows in the runs table, want 20", n)
	}
}

func TestConvergeProgressAndRunsOnTheStatusPage(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.openPR(1, "h1", "w1 w2")
	hold := make(chan struct{})
	w.runner.hold = hold // the runner is idle: no lock needed
	w.land(1, "m1", "w1 w2")
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var page string
	for {
		page = w.get("/")
		if strings.Contains(page, "<progress") || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="5">`,
		"reloads itself every 5 seconds while a converge runs",
		`<div class="progress" role="status" aria-live="polite"><progress value="1" max="2">1 of 2</progress> converge of <code>m1</code>: step 1 of 2: &#43; machine w1 (running for`,
		"Running: converge.",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page during the converge lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("status page:\n%s", page)
	}
	close(hold)
	w.agent.Wait()
	page = w.get("/")
	for _, want := range []string{
		`<meta http-equiv="refresh" content="30">`,
		`<tr><td>converge</td><td><code title="m1">m1</code></td><td><a href="https://github.com/org/clusters/pull/1">#1</a></td><td><span class="success">success</span></td>`,
		`<td><a href="plans/converge-m1-clusters_a">plan</a></td></tr>`,
		`<tr><td>plan</td><td><code title="h1">h1</code></td><td><a href="https://github.com/org/clusters/pull/1">#1</a></td><td><span class="success">success</span>: &#43;2 ~0 -0</td>`,
		`<td><a href="plans/plan-h1-clusters_a">plan</a></td></tr>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page after the converge lacks %q", want)
		}
	}
	for _, bad := range []string{`class="progress"`, "<progress"} {
		if strings.Contains(page, bad) {
			t.Errorf("the status page after the converge still has %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("status page:\n%s", page)
	}
	if st := w.agent.Status(); st.Clusters[0].Progress != nil || st.Clusters[0].Running != "" {
		t.Errorf("progress kept after the run: %+v", st.Clusters[0].Progress)
	}
}

func TestProgressLinesAreParsedAndRedacted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	a := w.agent
	a.SetRunningForTest(cluster, agent.Job{Kind: agent.KindConverge, Cluster: cluster, Commit: "m1"})
	step := func() (int, int, string) {
		p := a.Status().Clusters[0].Progress
		return p.Step, p.Steps, p.Text
	}
	log := a.ProgressLog(cluster)
	for _, tc := range []struct {
		line  string
		i, n  int
		text  string
		label string
	}{
		{"compute:   [3/12] + machine w3\n", 3, 12, "+ machine w3", "a step"},
		{"bootstrap: still waiting for addresses\n", 3, 12, "+ machine w3", "not a step"},
		{"talos:     [0/12] nothing\ntalos:     [13/12] nothing\n", 3, 12, "+ machine w3", "out of range"},
		{"first line\nkube:      [4/12] ~ node w4 (token " + secret + ")\n", 4, 12, "~ node w4 (token [redacted])", "a step after another line, with a secret"},
	} {
		log(tc.line)
		if i, n, text := step(); i != tc.i || n != tc.n || text != tc.text {
			t.Errorf("%s: step %d of %d %q, want %d of %d %q", tc.label, i, n, text, tc.i, tc.n, tc.text)
		}
	}
}

func TestRepositoryURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ api, repo, want string }{
		{"https://api.github.com/", "org/infra", "https://github.com/org/infra"},
		{"https://API.GitHub.com", "org/infra", "https://github.com/org/infra"},
		{"https://ghe.example.com/api/v3/", "org/infra", "https://ghe.example.com/org/infra"},
		{"http://127.0.0.1:8080/", "org/infra", "http://127.0.0.1:8080/org/infra"},
		{"javascript:alert(1)", "org/infra", ""},
		{"https://user:pw@ghe.example.com/api/v3/", "org/infra", ""},
		{"https://api.github.com/", "infra", ""},
		{"https://api.github.com/", "org/in/fra", ""},
	} {
		if got := agent.RepositoryURL(tc.api, tc.repo); got != tc.want {
			t.Errorf("RepositoryURL(%q, %q) = %q, want %q", tc.api, tc.repo, got, tc.want)
		}
	}
}

// fakeFleet owns clusters/a while owned is set.
type fakeFleet struct {
	mu    sync.Mutex
	owned bool
}

func (f *fakeFleet) SetClusters([]string) {}
func (f *fakeFleet) Owns(string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owned
}
func (f *fakeFleet) Run(ctx context.Context, _ func(string) bool) { <-ctx.Done() }
func (f *fakeFleet) TakeOrphanOutboxes(context.Context) (map[string][]byte, error) {
	return nil, nil
}
func (f *fakeFleet) Summary() string {
	return fmt.Sprintf("replica-x, owning clusters/a: %v", f.Owns(cluster))
}

func (f *fakeFleet) set(owned bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.owned = owned
}

func TestCheckOnlyForOwnedClusters(t *testing.T) {
	t.Parallel()
	fleet := &fakeFleet{owned: true}
	w := newWorldWithFleet(t, fleet)
	w.runner.set(func(r *fakeRunner) { r.checkRes, r.calls = needsUpdates(), nil })
	w.poll()
	if !w.metric(`taloscluster_patch_releases_behind{cluster="clusters/a",component="kubernetes"} 2`) {
		t.Fatalf("the owned cluster was not checked: %v", w.runner.calls)
	}

	// Another replica takes the cluster: no check here, its series are
	// dropped, and the page shows nothing live of it.
	fleet.set(false)
	w.runner.set(func(r *fakeRunner) { r.calls = nil })
	w.poll()
	if len(w.runner.calls) != 0 {
		t.Errorf("a cluster owned elsewhere was planned or checked: %v", w.runner.calls)
	}
	metrics := w.get("/metrics")
	for _, name := range []string{"taloscluster_update_available{", "taloscluster_patch_releases_behind{", "taloscluster_nodes_cordoned{", "taloscluster_cluster_check_success{"} {
		if strings.Contains(metrics, name) {
			t.Errorf("%s series kept for a cluster owned elsewhere", name)
		}
	}
	page := w.get("/")
	if !strings.Contains(page, "handled by another replica") {
		t.Errorf("the status page does not say another replica handles the cluster:\n%s", page)
	}
	for _, bad := range []string{`class="nodes"`, `class="runs"`, "v1.13.9"} {
		if strings.Contains(page, bad) {
			t.Errorf("the status page shows %q of a cluster owned elsewhere", bad)
		}
	}
}

// TestPullRequestOfAnotherReplicaIsNotReadAgain: a pull request that
// another replica plans is read once per head; idle polls only ask
// whether this replica owns its cluster now, and it is planned here as
// soon as it does.
func TestPullRequestOfAnotherReplicaIsNotReadAgain(t *testing.T) {
	t.Parallel()
	fleet := &fakeFleet{}
	w := newWorldWithFleet(t, fleet)
	w.openPR(1, "h1", "w1 w2")
	reads := func() int {
		w.repo.mu.Lock()
		defer w.repo.mu.Unlock()
		return w.repo.prReads
	}
	first := reads()
	if first == 0 {
		t.Fatal("the pull request's changes were never read")
	}
	w.poll()
	w.poll()
	if got := reads(); got != first {
		t.Errorf("idle polls read the changes of a pull request another replica plans again: %d reads, want %d", got, first)
	}
	if slices.Contains(w.runner.calls, "plan") {
		t.Fatalf("a pull request of a cluster owned elsewhere was planned: %v", w.runner.calls)
	}

	fleet.set(true)
	w.poll()
	w.runner.set(func(r *fakeRunner) {
		if !slices.Contains(r.calls, "plan") {
			t.Errorf("the pull request was not planned once this replica owned its cluster: %v", r.calls)
		}
	})
	w.forge.mu.Lock()
	body := strings.Join(w.forge.plans[1], "")
	w.forge.mu.Unlock()
	if !strings.Contains(body, "taloscluster plan") {
		t.Errorf("no plan comment once this replica owned the cluster: %q", body)
	}
}
