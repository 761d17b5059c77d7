package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/forge"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// agentFault drives an agent cell. The agent serves two clusters of one
// lab, clusters/demo and clusters/other (one control plane each, API VIPs
// .5 and .6 of the cell's network), both built before it starts. Each cell
// merges a pull request that changes demo with the fault in place, then
// one that changes other: other must converge its merge and get its
// status, demo's run must end as designed, and once the fault is over
// every merge is converged, with final statuses and exactly one converge
// comment per merged pull request.
type agentFault struct {
	// grow: demo's merge adds a worker (a VM to create); otherwise it
	// changes a file of demo's directory, and the converge of the merge
	// finds nothing to change. Other's merge always changes a file.
	grow bool
	// inject injects the fault before demo's merge.
	inject func(t *testing.T, w *agentWorld)
	// end ends a lasting fault (latency) once other converged.
	end func(w *agentWorld)
	// sequential merges other only once demo's run ended: a fault of the
	// repository hits every cluster's merge alike.
	sequential bool
	// poll bounds each poll; zero means 10s.
	poll time.Duration
	// crash, when set, replaces the first poll after demo's merge: it
	// polls and restarts the agent at the moment the cell is about.
	crash func(t *testing.T, w *agentWorld)
	// spacing is github.mutation_spacing; zero means 1ms.
	spacing time.Duration
	// strict matches the agent's log line that says demo's faulted report
	// gave up: other's merge must be converged before it, while the fault
	// still holds demo's request. (Its report may wait for that request:
	// GitHub asks for one request at a time per token, and each request is
	// bounded by report/github's RequestTimeout.)
	strict string
	// met reports whether the fault fired; mergeA is demo's merge.
	met func(w *agentWorld, mergeA string) bool
}

// forgeMet is met when a forge request whose operation matches op met the
// fault: "hang", "reset", "lost-reply", or an answer with status.
func forgeMet(op, fault string, status int) func(*agentWorld, string) bool {
	return func(w *agentWorld, _ string) bool {
		for _, r := range w.forge.Log() {
			if ok, _ := path.Match(op, r.Op); ok && ((fault != "" && r.Fault == fault) || (status != 0 && r.Status == status)) {
				return true
			}
		}
		return false
	}
}

// gitLate is met when a fetch's pack request came at least d after its
// ref advertisement: the forge does not log the latency it adds, but it
// logs when each request arrived, and the pack request can only be sent
// once the advertisement was answered.
func gitLate(d time.Duration) func(*agentWorld, string) bool {
	return func(w *agentWorld, _ string) bool {
		var refs time.Time
		for _, r := range w.forge.Log() {
			switch r.Op {
			case "git.upload-pack.refs":
				refs = r.Time
			case "git.upload-pack":
				if !refs.IsZero() && r.Time.Sub(refs) >= d {
					return true
				}
			}
		}
		return false
	}
}

// statusesLate is met when demo's final converge status of its merge
// arrived at least d after its first one: the reports between them (the
// comment at least) were each held up by the latency.
func statusesLate(d time.Duration) func(*agentWorld, string) bool {
	return func(w *agentWorld, mergeA string) bool {
		var first, last time.Time
		for _, r := range w.forge.Log() {
			if r.Op != "statuses.create" || !strings.Contains(r.Path, mergeA) {
				continue
			}
			if first.IsZero() || r.Time.Before(first) {
				first = r.Time
			}
			if r.Time.After(last) {
				last = r.Time
			}
		}
		return !first.IsZero() && last.Sub(first) >= d
	}
}

// demoCommentGaveUp matches the agent's log line of a post of demo's
// converge comment (pull request 1) that got no answer in time.
const demoCommentGaveUp = `report not delivered; trying again.*report="comment on pull request 1".*(?i:timeout|deadline)`

// agentCells is the agent part of the matrix, on 127.147.0.0/24 to
// 127.159.0.0/24.
func agentCells() []faultCell {
	commentedOnDemo := func(w *agentWorld) bool {
		for _, r := range w.forge.Log() {
			if r.Op == "comments.create" && r.Status == 201 && r.Fault == "" && strings.Contains(r.Path, "/issues/1/") {
				return true
			}
		}
		return false
	}
	return []faultCell{
		{system: "proxmox", kind: "error", phase: "converge-compute", outcome: outcomeFails, net: "127.147.0.0/24",
			fault: "qemu.create answers 500 while the agent converges demo's merge",
			agent: &agentFault{grow: true,
				inject: func(_ *testing.T, w *agentWorld) { w.lab.PVE.Fail("qemu.create", 1, 500, "injected failure") },
				met: func(w *agentWorld, _ string) bool {
					for _, o := range w.lab.PVE.Log() {
						if o.Name == "qemu.create" && o.Message == "injected failure" {
							return true
						}
					}
					return false
				}},
			failure: `creating VM demo-worker-01 .*500`},

		// The git remote: the agent's fetch of the repository.
		{system: "git", kind: "error", phase: "reporting", outcome: outcomeRecovers, net: "127.148.0.0/24",
			fault: "the ref advertisement of the fetch after the merge answers 500",
			agent: &agentFault{sequential: true,
				inject: func(_ *testing.T, w *agentWorld) { w.forge.Fail("git.upload-pack.refs", 1, 500) },
				met:    forgeMet("git.upload-pack.refs", "", 500)}},
		{system: "git", kind: "latency", phase: "reporting", outcome: outcomeRecovers, net: "127.149.0.0/24",
			fault: "every git request answers 400 ms late",
			agent: &agentFault{sequential: true,
				inject: func(_ *testing.T, w *agentWorld) { w.forge.Latency("git.*", 400*time.Millisecond) },
				end:    func(w *agentWorld) { w.forge.Latency("git.*", 0) },
				met:    gitLate(400 * time.Millisecond)}},
		{system: "git", kind: "hang", phase: "reporting", outcome: outcomeRecovers, net: "127.150.0.0/24",
			fault: "the ref advertisement of the fetch after the merge is accepted and never answered",
			agent: &agentFault{sequential: true, poll: 3 * time.Second,
				inject: func(_ *testing.T, w *agentWorld) { w.forge.Hang("git.upload-pack.refs", 1) },
				met:    forgeMet("git.upload-pack.refs", "hang", 0)}},
		{system: "git", kind: "reset", phase: "reporting", outcome: outcomeRecovers, net: "127.151.0.0/24",
			fault: "the pack request of the fetch after the merge has its connection reset",
			agent: &agentFault{sequential: true,
				inject: func(_ *testing.T, w *agentWorld) { w.forge.ResetConn("git.upload-pack", 1) },
				met:    forgeMet("git.upload-pack", "reset", 0)}},
		{system: "git", kind: "lost-reply", phase: "reporting", outcome: outcomeRecovers, net: "127.152.0.0/24",
			fault: "the pack request of the fetch after the merge is served, then its connection is reset",
			agent: &agentFault{sequential: true,
				inject: func(_ *testing.T, w *agentWorld) { w.forge.LoseReply("git.upload-pack", 1) },
				met:    forgeMet("git.upload-pack", "lost-reply", 0)}},
		{system: "git", kind: "crash", phase: "reporting", outcome: outcomeResumes, net: "127.153.0.0/24",
			fault: "the agent dies right after the fetch that brought the merge (its converge of demo's new worker is cut short)",
			agent: &agentFault{sequential: true, grow: true, crash: func(t *testing.T, w *agentWorld) {
				fetched := len(w.forge.Log())
				w.pollOnce(t, 10*time.Second)
				ok := false
				for _, r := range w.forge.Log()[fetched:] {
					ok = ok || (r.Op == "git.upload-pack" && r.Status == 200)
				}
				if !ok {
					t.Fatal("the poll did not fetch the merge")
				}
				w.restart(t)
				if w.demoFinished(t) {
					t.Fatal("demo's converge had finished before the agent died: the crash came too late to test anything")
				}
			}}},

		// GitHub: the statuses and comments that report the runs.
		{system: "github", kind: "error", phase: "reporting", outcome: outcomeRecovers, net: "127.154.0.0/24",
			fault: "the first two comment posts and three status posts answer 502",
			agent: &agentFault{inject: func(_ *testing.T, w *agentWorld) {
				w.forge.Fail("comments.create", 2, 502)
				w.forge.Fail("statuses.create", 3, 502)
			}, met: forgeMet("*.create", "", 502)}},
		{system: "github", kind: "latency", phase: "reporting", outcome: outcomeRecovers, net: "127.155.0.0/24",
			fault: "every status and comment post answers 400 ms late",
			agent: &agentFault{
				inject: func(_ *testing.T, w *agentWorld) { w.forge.Latency("*.create", 400*time.Millisecond) },
				end:    func(w *agentWorld) { w.forge.Latency("*.create", 0) },
				met:    statusesLate(800 * time.Millisecond)}},
		{system: "github", kind: "hang", phase: "reporting", outcome: outcomeRecovers, net: "127.156.0.0/24",
			fault: "the post of demo's converge comment is accepted and never answered",
			agent: &agentFault{strict: demoCommentGaveUp,
				inject: func(_ *testing.T, w *agentWorld) { w.forge.Hang("comments.create", 1) },
				// The forge logs a hung post only when it closes (it never
				// reads the body, so it does not see the client go): the
				// agent's log says the post gave up.
				met: func(w *agentWorld, _ string) bool {
					return regexp.MustCompile(demoCommentGaveUp).MatchString(w.logs.String())
				}},
		},
		{system: "github", kind: "reset", phase: "reporting", outcome: outcomeRecovers, net: "127.157.0.0/24",
			fault: "the first comment post and status post have their connections reset",
			agent: &agentFault{inject: func(_ *testing.T, w *agentWorld) {
				w.forge.ResetConn("comments.create", 1)
				w.forge.ResetConn("statuses.create", 1)
			}, met: forgeMet("*.create", "reset", 0)}},
		{system: "github", kind: "lost-reply", phase: "reporting", outcome: outcomeRecovers, net: "127.158.0.0/24",
			fault: "demo's converge comment is stored, then its connection is reset",
			agent: &agentFault{inject: func(_ *testing.T, w *agentWorld) { w.forge.LoseReply("comments.create", 1) },
				met: forgeMet("comments.create", "lost-reply", 0)}},
		{system: "github", kind: "crash", phase: "reporting", outcome: outcomeResumes, net: "127.159.0.0/24",
			fault: "the agent dies right after GitHub stored demo's converge comment, before its final status",
			agent: &agentFault{sequential: true, spacing: 500 * time.Millisecond, crash: func(t *testing.T, w *agentWorld) {
				w.pollOnce(t, 10*time.Second)
				deadline := time.Now().Add(60 * time.Second)
				for !commentedOnDemo(w) {
					if time.Now().After(deadline) {
						t.Fatal("demo's converge comment was never posted")
					}
					time.Sleep(2 * time.Millisecond)
				}
				w.restart(t)
				if w.demoFinished(t) {
					t.Fatal("demo's final status was posted before the agent died: the crash came too late to test anything")
				}
			}}},
	}
}

// TestFaultMatrixAgent runs the agent cells.
func TestFaultMatrixAgent(t *testing.T) {
	t.Parallel()
	cells := agentCells()
	tally := newFaultTally(t, "agent", len(cells))
	for _, c := range cells {
		tally.cell(t, c, runAgentCell)
	}
}

// Cluster paths and status contexts of the agent cells.
const (
	demoPath  = "clusters/demo"
	otherPath = "clusters/other"
	demoCtx   = "taloscluster/converge: " + demoPath
	otherCtx  = "taloscluster/converge: " + otherPath
)

// newFaultAgentWorld is newAgentWorld with the two small clusters of the
// agent cells, their identities in place, and short report retries.
func newFaultAgentWorld(t *testing.T, net string, spacing time.Duration) (*agentWorld, map[string]string) {
	t.Helper()
	l := startLab(t, net)
	f, srv := startForge(t, l, forge.User{Login: "taloscluster-bot", Token: agentToken}, forge.User{Login: "alice", Token: aliceToken})
	repo := clustersRepo(t, f)

	prefix := netip.MustParsePrefix(net)
	yamls := map[string]string{}
	for path, name := range map[string]string{demoPath: "demo", otherPath: "other"} {
		y, err := l.ClusterYAML(lab.Cluster{Name: name, Workers: 0, Bridge: "vmbr0"})
		if err != nil {
			t.Fatal(err)
		}
		y = oneControlPlane(t, y)
		if name == "other" {
			// Both clusters are on the lab's one network: other's API VIP
			// is the next address.
			vip := prefix.Addr().Next().Next().Next().Next().Next()
			y2 := strings.Replace(y, "kubeapi_vip: "+vip.String(), "kubeapi_vip: "+vip.Next().String(), 1)
			if y2 == y {
				t.Fatal("the lab's cluster.yaml no longer has the VIP this test moves")
			}
			y = y2
		}
		yamls[path] = y
	}
	if _, err := repo.Commit("main", map[string]string{
		demoPath + "/cluster.yaml":  yamls[demoPath],
		demoPath + "/ca.pem":        string(l.CA.PEM()),
		otherPath + "/cluster.yaml": yamls[otherPath],
		otherPath + "/ca.pem":       string(l.CA.PEM()),
		"README.md":                 "clusters\n",
	}, "add the demo and other clusters"); err != nil {
		t.Fatal(err)
	}

	dir, write := fileWriter(t)
	for _, path := range []string{demoPath, otherPath} {
		write("secrets/"+path+"/secrets.yaml", fmt.Sprintf("proxmox:\n  token_id: %q\n  token_secret: %q\n", l.TokenID, l.TokenSecret))
	}
	if spacing == 0 {
		spacing = time.Millisecond
	}
	cfg := &agent.Config{
		Repository: agent.Repository{URL: srv.URL + "/org/clusters.git", TokenFile: write("repo-token", agentToken),
			CAFile: write("ca.pem", string(l.CA.PEM())), PollInterval: agent.Duration(time.Second)},
		GitHub: agent.GitHub{APIURL: srv.URL + "/", Repo: "org/clusters", TokenFile: write("gh-token", agentToken),
			CAFile: filepath.Join(dir, "ca.pem"), MutationSpacing: agent.Duration(spacing)},
		SecretsDir: filepath.Join(dir, "secrets"), DataDir: filepath.Join(dir, "data"),
		Concurrency: 4, DriftInterval: agent.Duration(time.Hour), PublicURL: "http://agent.example",
		State: agent.State{Backend: "dir"}, Listen: "127.0.0.1:0",
		ReportRetry: retry.Policy{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond},
	}
	cfg.Defaults()
	// The identities exist before the agent starts: minting them is the
	// slowest step of a first build and not what these cells are about.
	store := state.NewDirStore(filepath.Join(cfg.DataDir, "state"))
	for i, path := range []string{demoPath, otherPath} {
		if err := store.Create(t.Context(), path, reconcile.TalosSecretsFile, faultIdentity(t, i)); err != nil {
			t.Fatal(err)
		}
	}
	logs := &syncBuffer{}
	a, handler, err := buildAgent(t.Context(), cfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return &agentWorld{lab: l, forge: f, repo: repo, agent: a, http: handler, logs: logs, cfg: cfg,
		secrets: []string{l.TokenSecret, agentToken, aliceToken}}, yamls
}

// pollOnce polls the agent once, bounded by timeout; a failed poll is
// logged, as the agent's loop logs it.
func (w *agentWorld) pollOnce(t *testing.T, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := w.agent.Poll(ctx); err != nil {
		t.Logf("poll: %v", err)
	}
}

// pollFor polls the agent, each poll bounded by timeout, until cond holds.
func (w *agentWorld) pollFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\nagent log:\n%s", what, w.logs.String())
		}
		w.pollOnce(t, timeout)
		time.Sleep(50 * time.Millisecond)
	}
}

// final reports whether a commit's newest status of a context is final.
func (w *agentWorld) final(sha, context string) bool {
	s := w.status(sha, context)
	return s == "success" || s == "failure" || s == "error"
}

// description is a commit's newest status description of a context.
func (w *agentWorld) description(sha, context string) string {
	for _, s := range w.repo.Statuses(sha) {
		if s.Context == context {
			return s.Description
		}
	}
	return ""
}

// merge commits files on a new branch, opens a pull request and merges it.
func (w *agentWorld) merge(t *testing.T, branch string, files map[string]string) (string, int) {
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
	return sha, pr.Number
}

// demoFinished reports whether the head of main already has demo's final
// converge status.
func (w *agentWorld) demoFinished(t *testing.T) bool {
	t.Helper()
	head, err := w.repo.Branch("main")
	if err != nil {
		t.Fatal(err)
	}
	return w.status(head, demoCtx) == "success"
}

// stateFile reads a file of a cluster's state in the agent's backend.
func (w *agentWorld) stateFile(t *testing.T, cluster, name string) []byte {
	t.Helper()
	data, err := state.NewDirStore(filepath.Join(w.cfg.DataDir, "state")).Get(t.Context(), cluster, name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// runAgentCell runs one agent cell.
func runAgentCell(t *testing.T, c faultCell) {
	af := c.agent
	poll := af.poll
	if poll == 0 {
		poll = 10 * time.Second
	}
	w, yamls := newFaultAgentWorld(t, c.net, af.spacing)
	main0, err := w.repo.Branch("main")
	if err != nil {
		t.Fatal(err)
	}
	prebuild(t, w, yamls, main0)
	w.pollOnce(t, poll)
	w.agent.Wait()
	for _, path := range []string{demoPath, otherPath} {
		if got := w.status(main0, "taloscluster/converge: "+path); got != "" {
			t.Fatalf("the agent converged %s, built before it started, again: %s", path, got)
		}
	}
	identities := map[string][]byte{}
	for _, path := range []string{demoPath, otherPath} {
		identities[path] = w.stateFile(t, path, reconcile.TalosSecretsFile)
	}

	// demo's merge, with the fault in place.
	if af.inject != nil {
		af.inject(t, w)
	}
	changeA := map[string]string{demoPath + "/notes.txt": "a change of demo\n"}
	if af.grow {
		changeA = map[string]string{demoPath + "/cluster.yaml": setWorkers(t, yamls[demoPath], 1)}
	}
	mergeA, prA := w.merge(t, "change-demo", changeA)
	if af.crash != nil {
		af.crash(t, w)
	} else {
		w.pollOnce(t, poll)
	}
	if af.sequential {
		w.pollFor(t, "the end of demo's run", poll, func() bool { return w.final(mergeA, demoCtx) })
	}

	// other's merge: the agent converges it and reports it.
	mergeB, prB := w.merge(t, "change-other", map[string]string{otherPath + "/notes.txt": "a change of other\n"})
	w.pollFor(t, "the converge of other's merge", poll, func() bool { return w.final(mergeB, otherCtx) })
	if got := w.status(mergeB, otherCtx); got != "success" {
		t.Fatalf("other's merge got status %q (%s), want success: the fault of demo's run reached it", got, w.description(mergeB, otherCtx))
	}
	if af.strict != "" {
		logs := w.logs.String()
		gaveUp := regexp.MustCompile(af.strict).FindStringIndex(logs)
		ran := regexp.MustCompile(`msg="converge step" cluster=other `).FindStringIndex(logs)
		if ran == nil || (gaveUp != nil && gaveUp[0] < ran[0]) {
			t.Fatalf("other's merge was converged only after demo's hung request gave up\nagent log:\n%s", logs)
		}
	}
	if af.end != nil {
		af.end(w)
	}

	// demo's run ends as designed.
	w.pollFor(t, "the end of demo's run", poll, func() bool { return w.final(mergeA, demoCtx) })
	merges := map[int]string{prA: mergeA, prB: mergeB}
	switch c.outcome {
	case outcomeFails:
		if got, desc := w.status(mergeA, demoCtx), w.description(mergeA, demoCtx); got != "failure" || !regexp.MustCompile(c.failure).MatchString(desc) {
			t.Fatalf("demo's merge got status %q (%s), want failure saying %q", got, desc, c.failure)
		}
		// Once the fault is over, the next merge of demo converges it.
		mergeC, prC := w.merge(t, "after-demo", map[string]string{demoPath + "/after.txt": "after the fault\n"})
		merges[prC] = mergeC
		w.pollFor(t, "the converge of demo's next merge", poll, func() bool { return w.final(mergeC, demoCtx) })
		if got := w.status(mergeC, demoCtx); got != "success" {
			t.Fatalf("demo's next merge got status %q (%s), want success", got, w.description(mergeC, demoCtx))
		}
	default:
		if got := w.status(mergeA, demoCtx); got != "success" {
			t.Fatalf("demo's merge got status %q (%s), want success", got, w.description(mergeA, demoCtx))
		}
	}

	if af.met != nil {
		// The fault's mark can come after demo's final status: a hung
		// comment post gives up on its own deadline, while the statuses
		// queued behind it may already be delivered. Under load the post
		// itself can come late: the wait is generous, as only a failure
		// waits it out.
		deadline := time.Now().Add(3 * time.Minute)
		for !af.met(w, mergeA) {
			if time.Now().After(deadline) {
				t.Fatalf("the fault never fired (%s)", c.fault)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Every report delivered: final statuses, one converge comment per
	// merged pull request.
	w.agent.Wait()
	w.pollFor(t, "every report delivered", poll, func() bool { return w.agent.Status().Reports.Pending == 0 })
	for pr, sha := range merges {
		n := 0
		for _, cm := range w.repo.Comments(pr) {
			if strings.Contains(cm.Body, "taloscluster converge") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("pull request #%d has %d converge comments, want exactly 1", pr, n)
		}
		for _, s := range w.repo.Statuses(sha) {
			if strings.HasPrefix(s.Context, "taloscluster/converge: ") && !w.final(sha, s.Context) {
				t.Errorf("%s of %s is %q, not final", s.Context, sha[:10], w.status(sha, s.Context))
			}
		}
	}

	// The clusters: every machine once, the identities untouched, no
	// secret anywhere.
	want := map[string]bool{}
	cps := map[string][]string{}
	for _, name := range []string{"demo", "other"} {
		want[name+"-controlplane-01"] = true
		cps[name] = []string{name + "-controlplane-01"}
	}
	if af.grow {
		want["demo-worker-01"] = true
	}
	checkMachines(t, w.lab, want, cps)
	secrets := append([]string{}, w.secrets...)
	for path, id := range identities {
		if got := w.stateFile(t, path, reconcile.TalosSecretsFile); string(got) != string(id) {
			t.Errorf("the identity of %s was regenerated or changed", path)
		}
		secrets = append(secrets, agentIdentitySecrets(t, w, id)...)
	}
	var out strings.Builder
	for pr, sha := range merges {
		for _, cm := range w.repo.Comments(pr) {
			out.WriteString(cm.Body + "\n")
		}
		for _, s := range w.repo.Statuses(sha) {
			out.WriteString(s.Description + s.TargetURL + "\n")
		}
	}
	out.WriteString(w.logs.String())
	for _, page := range []string{"/", "/metrics", "/readyz"} {
		rec := httptest.NewRecorder()
		w.http.ServeHTTP(rec, httptest.NewRequest("GET", page, nil))
		out.WriteString(rec.Body.String())
	}
	for _, s := range secrets {
		if strings.Contains(out.String(), s) {
			t.Errorf("a secret value (%d characters) is in a comment, a status, the log or a page", len(s))
		}
	}
}

// agentIdentitySecrets returns the values of an identity that no output
// may show.
func agentIdentitySecrets(t *testing.T, w *agentWorld, identity []byte) []string {
	t.Helper()
	dir := t.TempDir()
	if err := w.lab.WriteCluster(dir, lab.Cluster{Name: "demo", Bridge: "vmbr0"}); err != nil {
		t.Fatal(err)
	}
	c, _, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := machineconfig.ParseSecrets(reconcile.TalosSecretsFile, identity)
	if err != nil {
		t.Fatal(err)
	}
	return secretStrings(c, b)
}

// prebuild builds both clusters of an agent cell before the agent's first
// poll, with the engine's short bounds, into the agent's state backend, and
// records them as converged at commit: the agent starts with nothing to
// do. (The agent's own engine polls every 2 s; building through it would
// make every cell seconds longer.) The clusters are built one after the
// other.
func prebuild(t *testing.T, w *agentWorld, yamls map[string]string, commit string) {
	t.Helper()
	store := state.NewDirStore(filepath.Join(w.cfg.DataDir, "state"))
	for _, path := range []string{demoPath, otherPath} {
		dir := t.TempDir()
		if err := w.lab.WriteCluster(dir, lab.Cluster{Name: filepath.Base(path), Bridge: "vmbr0"}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, spec.ClusterFile), []byte(yamls[path]), 0o644); err != nil {
			t.Fatal(err)
		}
		out := &triggerWriter{}
		e := faultEngine(t, dir, out, 0)
		e.State, e.Key, e.Journal, e.Commit, e.Holder = store, path, store, commit, ""
		if err := e.Converge(t.Context()); err != nil {
			t.Fatalf("building %s: %v\n%s\nlab events:\n%s", path, err, out.String(), labEvents(w.lab))
		}
		if err := store.SetLastConverged(t.Context(), path, commit); err != nil {
			t.Fatal(err)
		}
	}
}
