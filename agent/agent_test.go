package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/agent/httpapi"
	"github.com/taloscluster/taloscluster/check"
	"github.com/taloscluster/taloscluster/gitsync"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/report"
	gh "github.com/taloscluster/taloscluster/report/github"
	"github.com/taloscluster/taloscluster/report/metrics"
)

// The fakes below model one cluster, clusters/a, whose cluster.yaml lists
// the machines it should have, one name per word. The runner plans a
// "create" step per machine not created yet and converges by creating
// them.

const (
	cluster         = "clusters/a"
	secret          = "s3cr3t-proxmox-token"
	convergeContext = "taloscluster/converge: " + cluster
	planContext     = "taloscluster/plan: " + cluster
)

type fakeRepo struct {
	mu    sync.Mutex
	heads gitsync.Heads
	trees map[string]fstest.MapFS
	// prErr, when set, fails reading a pull request's changes.
	prErr error
	// prReads counts the reads of a pull request's changes.
	prReads int
}

func (r *fakeRepo) Fetch(context.Context, []int) (gitsync.Heads, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.heads
	h.PRs = map[int]string{}
	for n, head := range r.heads.PRs {
		h.PRs[n] = head
	}
	return h, nil
}

func (r *fakeRepo) Tree(commit string) (fs.FS, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.trees[commit]
	if !ok {
		return nil, fmt.Errorf("no commit %s", commit)
	}
	return t, nil
}

func (r *fakeRepo) ChangedPaths(context.Context, string, string) ([]string, error) {
	return []string{cluster + "/cluster.yaml"}, nil
}

func (r *fakeRepo) PRChanges(context.Context, string, string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prReads++
	if r.prErr != nil {
		return nil, r.prErr
	}
	return []string{cluster + "/cluster.yaml"}, nil
}

func (r *fakeRepo) Commits(context.Context, string, string) ([]gitsync.Commit, error) {
	return nil, nil
}

func (r *fakeRepo) ClusterDirs(string, []string) ([]string, error) { return []string{cluster}, nil }

type status struct{ sha, context, state, description string }

type fakeForge struct {
	mu sync.Mutex
	// limitedUntil, when set, makes every call (only limitOnly's when
	// that is set) fail with GitHub's rate limit until then; refused
	// counts those calls.
	limitedUntil time.Time
	limitOnly    string
	refused      int
	open         []gh.PR
	merged       map[string]int
	statuses     []status
	comments     map[int][]string // one-off comments
	plans        map[int][]string // the plan comment, as last upserted
	// failUpserts fails the next plan comment upserts with a 502.
	failUpserts int
	// gate, when set, holds every status request until it is closed.
	gate chan struct{}
}

// limited returns the rate-limit error for a call of op while the limit
// lasts. The caller holds f.mu.
func (f *fakeForge) limited(op string) error {
	if time.Now().Before(f.limitedUntil) && (f.limitOnly == "" || f.limitOnly == op) {
		f.refused++
		return fmt.Errorf("calling GitHub: %w", &gh.RateLimitedError{Until: f.limitedUntil})
	}
	return nil
}

func (f *fakeForge) limit(until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limitedUntil = until
}

func (f *fakeForge) RateLimit(context.Context) (gh.Rate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Now().Before(f.limitedUntil) {
		return gh.Rate{Limit: 5000, Reset: f.limitedUntil}, nil
	}
	return gh.Rate{Limit: 5000, Remaining: 5000, Reset: time.Now().Add(time.Hour)}, nil
}

func (f *fakeForge) OpenPRs(context.Context, string) ([]gh.PR, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.limited("OpenPRs"); err != nil {
		return nil, err
	}
	return slices.Clone(f.open), nil
}

func (f *fakeForge) Permission(context.Context, string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.limited("Permission"); err != nil {
		return "", err
	}
	return "write", nil
}

func (f *fakeForge) SetStatus(ctx context.Context, sha, context, state, description, _ string) error {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.limited("SetStatus"); err != nil {
		return err
	}
	f.statuses = append(f.statuses, status{sha, context, state, description})
	return nil
}

func (f *fakeForge) UpsertComments(_ context.Context, pr int, bodies []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.limited("UpsertComments"); err != nil {
		return err
	}
	if f.failUpserts > 0 {
		f.failUpserts--
		return errors.New("PATCH comment: 502 Bad Gateway")
	}
	f.plans[pr] = slices.Clone(bodies)
	return nil
}

func (f *fakeForge) Comment(_ context.Context, pr int, _, body string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.limited("Comment"); err != nil {
		return err
	}
	f.comments[pr] = append(f.comments[pr], body)
	return nil
}

func (f *fakeForge) MergedPR(_ context.Context, sha string) (int, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.limited("MergedPR"); err != nil {
		return 0, false, err
	}
	n, ok := f.merged[sha]
	return n, ok, nil
}

func (f *fakeForge) Reachable(context.Context) error { return nil }

// statusesOf returns the statuses of one context on a commit, oldest first.
func (f *fakeForge) statusesOf(sha, context string) []status {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []status
	for _, s := range f.statuses {
		if s.sha == sha && s.context == context {
			out = append(out, s)
		}
	}
	return out
}

func (f *fakeForge) commentsOn(pr int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.comments[pr])
}

// failure makes a converge create steps machines, then fail with err.
type failure struct {
	steps int
	err   error
}

type fakeRunner struct {
	mu sync.Mutex
	// extra machines appear in every plan besides cluster.yaml's: what
	// another merge or drift brings between review and merge.
	extra []string
	// refuse adds a refusal to every plan.
	refuse bool
	// unread makes every plan incomplete, with this reason.
	unread string
	// planErrs fail the next plans, in order.
	planErrs []error
	// failures fail the next converges after approve, in order.
	failures []failure
	created  map[string]bool
	// mutations lists every machine created, in order.
	mutations []string
	approved  []*plan.Plan
	refusedBy []error // what approve returned when it refused
	converges int
	// hold, when set, stops a converge after its first step until it is
	// closed.
	hold chan struct{}
	// checkRes and checkErr are what Check returns; calls lists the
	// Plan and Check calls in order ("plan", "check").
	checkRes *agent.CheckResult
	checkErr error
	calls    []string
	// steps, when set, runs an approved plan instead of creating its
	// machines: a rollout's steps, told to h.Step.
	steps func(h agent.ConvergeHooks) error
}

func (r *fakeRunner) planOf(files fs.FS) (*plan.Plan, error) {
	data, err := fs.ReadFile(files, "cluster.yaml")
	if err != nil {
		return nil, err
	}
	pl := plan.New("a")
	for _, name := range append(strings.Fields(string(data)), r.extra...) {
		if r.created[name] {
			continue
		}
		pl.Add(plan.Change{Phase: plan.PhaseCompute, Domain: plan.DomainProvider, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindMachine, Name: name}, Reason: "listed in cluster.yaml"})
	}
	if r.refuse {
		pl.Refuse(plan.Resource{Kind: plan.KindMachine, Name: "cp-1"}, "shrinking the control plane is refused")
	}
	if r.unread != "" {
		pl.Unread("the etcd members", r.unread)
	}
	return pl, nil
}

func (r *fakeRunner) Plan(_ context.Context, _ string, files fs.FS) (*plan.Plan, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "plan")
	if len(r.planErrs) > 0 {
		err := r.planErrs[0]
		r.planErrs = r.planErrs[1:]
		return nil, err
	}
	return r.planOf(files)
}

func (r *fakeRunner) Converge(_ context.Context, _, _ string, files fs.FS, h agent.ConvergeHooks) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.converges++
	pl, err := r.planOf(files)
	if err != nil {
		return err
	}
	if pl.Empty() {
		return nil
	}
	if err := h.Approve(pl); err != nil {
		r.refusedBy = append(r.refusedBy, err)
		return err
	}
	r.approved = append(r.approved, pl)
	if len(pl.Refusals) > 0 {
		return fmt.Errorf("refused: %s", pl.Refusals[0].Reason)
	}
	if r.steps != nil {
		return r.steps(h)
	}
	var fail *failure
	if len(r.failures) > 0 {
		fail = &r.failures[0]
		r.failures = r.failures[1:]
	}
	for i, c := range pl.Changes {
		ev := reconcile.StepEvent{Index: i + 1, Total: len(pl.Changes), Phase: c.Phase, Action: c.Action, Resource: c.Resource,
			Reason: c.Reason, Attributes: c.Attributes, Batch: c.Batch, Started: time.Now()}
		if h.Step != nil {
			h.Step(ev)
		}
		if fail != nil && i == fail.steps {
			if h.Step != nil {
				ev.Ended, ev.Err = time.Now(), fail.err
				h.Step(ev)
			}
			return fail.err
		}
		// The executor's progress line: the phase, then [i/n] and the step.
		h.Log(fmt.Sprintf("%-10s [%d/%d] %s %s\n", string(c.Phase)+":", i+1, len(pl.Changes), c.Action.Symbol(), c.Resource))
		if h.Step != nil {
			ev.Ended = time.Now()
			h.Step(ev)
		}
		r.created[c.Resource.Name] = true
		r.mutations = append(r.mutations, c.Resource.Name)
		if i == 0 && r.hold != nil {
			<-r.hold
		}
	}
	if fail != nil {
		return fail.err
	}
	return nil
}

func (r *fakeRunner) Endpoints(string, fs.FS) (agent.Endpoints, error) { return agent.Endpoints{}, nil }

// Describe names each cluster after its directory, so none share a name.
func (r *fakeRunner) Describe(cluster string, _ fs.FS) (agent.ClusterInfo, error) {
	return agent.ClusterInfo{Name: cluster, Files: []string{"cluster.yaml"}}, nil
}

func (r *fakeRunner) Check(context.Context, string, fs.FS) (*agent.CheckResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "check")
	if r.checkErr != nil {
		return nil, r.checkErr
	}
	if r.checkRes != nil {
		return r.checkRes, nil
	}
	return &agent.CheckResult{Report: &check.Report{Cluster: "a", Scope: check.ScopeVersions,
		ScopeReason: "the cluster does not exist yet", Components: []check.Component{
			{Name: check.ComponentTalos, Pinned: "v1.13.8", PinnedReleased: true},
			{Name: check.ComponentKubernetes, Pinned: "v1.36.3", PinnedReleased: true},
		}}}, nil
}

func (r *fakeRunner) set(f func(r *fakeRunner)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

type fakeProgress struct {
	mu   sync.Mutex
	last map[string]string
	// files, when not nil, makes it a ShownStore.
	files map[string][]byte
}

// keepingProgress is a fakeProgress that keeps state files too, as the
// real state backends do.
type keepingProgress struct{ *fakeProgress }

func (p keepingProgress) Get(_ context.Context, cluster, name string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	data, ok := p.files[cluster+"/"+name]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return data, nil
}

func (p keepingProgress) Put(_ context.Context, cluster, name string, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.files[cluster+"/"+name] = slices.Clone(data)
	return nil
}

func (p *fakeProgress) LastConverged(_ context.Context, c string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[c], nil
}

func (p *fakeProgress) SetLastConverged(_ context.Context, c, commit string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last[c] = commit
	return nil
}

// world is an agent with fakes, starting in sync at commit c0 with no
// machines.
type world struct {
	t      *testing.T
	cfg    *agent.Config
	deps   agent.Deps
	agent  *agent.Agent
	repo   *fakeRepo
	forge  *fakeForge
	runner *fakeRunner
	reg    *prometheus.Registry
	http   *httptest.Server
}

func newWorld(t *testing.T, edit func(*agent.Config)) *world {
	t.Helper()
	return newWorldWith(t, edit, nil)
}

// newWorldWithFleet is a world whose agent shares its clusters through
// fleet, checking drift on every poll.
func newWorldWithFleet(t *testing.T, fleet agent.Fleet) *world {
	t.Helper()
	return newWorldWith(t, func(c *agent.Config) { c.DriftInterval = agent.Duration(time.Nanosecond) }, fleet)
}

func newWorldWith(t *testing.T, edit func(*agent.Config), fleet agent.Fleet) *world {
	t.Helper()
	return newWorldFull(t, edit, fleet, &fakeProgress{last: map[string]string{cluster: "c0"}})
}

func newWorldFull(t *testing.T, edit func(*agent.Config), fleet agent.Fleet, progress agent.Progress) *world {
	t.Helper()
	cfg := &agent.Config{
		Repository: agent.Repository{URL: "https://git.example/org/clusters.git", DefaultBranch: "main"},
		GitHub:     agent.GitHub{Repo: "org/clusters"},
		SecretsDir: t.TempDir(), DataDir: t.TempDir(),
	}
	if edit != nil {
		edit(cfg)
	}
	cfg.Defaults()
	w := &world{
		t: t,
		repo: &fakeRepo{heads: gitsync.Heads{Default: "c0", DefaultBranch: "main"},
			trees: map[string]fstest.MapFS{"c0": {cluster + "/cluster.yaml": {Data: []byte("")}}}},
		forge:  &fakeForge{merged: map[string]int{}, comments: map[int][]string{}, plans: map[int][]string{}},
		runner: &fakeRunner{created: map[string]bool{}},
		reg:    prometheus.NewRegistry(),
	}
	m, err := metrics.New(w.reg)
	if err != nil {
		t.Fatal(err)
	}
	redact := &report.Redactor{}
	redact.Add(secret)
	w.cfg = cfg
	w.deps = agent.Deps{Repo: w.repo, Forge: w.forge, Runner: w.runner,
		Progress: progress, Metrics: m, Redact: redact, Fleet: fleet}
	w.startAgent()
	w.http = httptest.NewServer(httpapi.New(httpapi.Options{Metrics: w.reg, Status: w.agent.Status, Plan: w.agent.Plan}))
	t.Cleanup(w.http.Close)
	w.poll()
	return w
}

// startAgent starts the world's agent with its deps, as after a restart.
func (w *world) startAgent() {
	w.agent = agent.New(w.cfg, w.deps)
	w.agent.SetRetryPolicy(retry.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond, Attempts: agent.RetryAttempts})
	w.t.Cleanup(w.agent.Close)
}

// poll polls once and waits for every job it started, retries included.
func (w *world) poll() {
	w.t.Helper()
	if err := w.agent.Poll(w.t.Context()); err != nil {
		w.t.Fatal(err)
	}
	w.agent.Wait()
}

// openPR opens pull request n at head, whose cluster.yaml lists machines,
// and lets the agent plan it.
func (w *world) openPR(n int, head, machines string) {
	w.t.Helper()
	w.repo.mu.Lock()
	w.repo.trees[head] = fstest.MapFS{cluster + "/cluster.yaml": {Data: []byte(machines)}}
	if w.repo.heads.PRs == nil {
		w.repo.heads.PRs = map[int]string{}
	}
	w.repo.heads.PRs[n] = head
	w.repo.mu.Unlock()
	w.forge.mu.Lock()
	w.forge.open = append(w.forge.open, gh.PR{Number: n, Head: head, Author: "alice", Title: "grow"})
	w.forge.mu.Unlock()
	w.poll()
}

// merge merges pull request n as commit sha, whose cluster.yaml lists
// machines, and lets the agent converge it.
func (w *world) merge(n int, sha, machines string) {
	w.t.Helper()
	w.land(n, sha, machines)
	w.poll()
}

// land merges pull request n as commit sha without polling.
func (w *world) land(n int, sha, machines string) {
	w.t.Helper()
	w.repo.mu.Lock()
	w.repo.trees[sha] = fstest.MapFS{cluster + "/cluster.yaml": {Data: []byte(machines)}}
	w.repo.heads.Default = sha
	delete(w.repo.heads.PRs, n)
	w.repo.mu.Unlock()
	w.forge.mu.Lock()
	w.forge.open = slices.DeleteFunc(w.forge.open, func(p gh.PR) bool { return p.Number == n })
	w.forge.merged[sha] = n
	w.forge.mu.Unlock()
}

func (w *world) get(path string) string {
	w.t.Helper()
	res, err := w.http.Client().Get(w.http.URL + path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

func (w *world) metric(line string) bool {
	return strings.Contains(w.get("/metrics"), line)
}

// last returns the final status of a context on a commit.
func (w *world) last(sha, context string) status {
	w.t.Helper()
	all := w.forge.statusesOf(sha, context)
	if len(all) == 0 {
		w.t.Fatalf("no %s status on %s", context, sha)
	}
	return all[len(all)-1]
}

// checkReported fails when a status description is too long for GitHub
// or anything reported holds the secret.
func (w *world) checkReported() {
	w.t.Helper()
	w.forge.mu.Lock()
	defer w.forge.mu.Unlock()
	var all []string
	for _, s := range w.forge.statuses {
		if len(s.description) > gh.MaxDescription {
			w.t.Errorf("status description of %d bytes: %q", len(s.description), s.description)
		}
		all = append(all, s.description)
	}
	for _, cs := range w.forge.comments {
		all = append(all, cs...)
	}
	for _, cs := range w.forge.plans {
		all = append(all, cs...)
	}
	all = append(all, w.get("/"))
	for _, s := range all {
		if strings.Contains(s, secret) {
			w.t.Errorf("the secret reached a status, comment or page: %q", s)
		}
	}
}

func TestConvergeRunsTheReviewedPlan(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *agent.Config) { c.RequireReviewedPlan = true })
	w.openPR(1, "h1", "w1 w2")
	if s := w.last("h1", planContext); s.state != gh.StateSuccess {
		t.Fatalf("plan status %+v", s)
	}
	w.merge(1, "m1", "w1 w2")
	if s := w.last("m1", convergeContext); s.state != gh.StateSuccess || s.description != "converged" {
		t.Fatalf("converge status %+v; want success, converged", s)
	}
	if got := w.runner.mutations; !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("mutations %v", got)
	}
	comments := w.forge.commentsOn(1)
	if len(comments) != 1 || !strings.Contains(comments[0], "The plan that ran is the plan shown on this pull request at `h1`, the reviewed commit; the commit converged is `m1`.") ||
		strings.Contains(comments[0], "Plan changed since review") {
		t.Fatalf("converge comments %q; want one saying the reviewed plan ran", comments)
	}
	w.checkReported()
}

func TestConvergeRefusesAnUnreviewedPlanWhenReviewIsRequired(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		planned  bool // whether the agent showed a plan on the pull request
		desc     string
		comments []string
	}{
		{"changed since review", true, "refused: the plan changed since review (1 difference)",
			[]string{"**Plan changed since review:** the plan that would have run differs from the plan shown on this pull request at `h1`, the reviewed commit; the commit it would have converged is `m1`",
				"+ compute provider create machine w9", "The plan that would have run"}},
		{"never shown", false, "refused: no reviewed plan: none was shown on #1 since the agent started",
			[]string{"**Plan changed since review:** no plan of this cluster was shown", "+ compute provider create machine w1",
				"+ compute provider create machine w9"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, func(c *agent.Config) { c.RequireReviewedPlan = true })
			if tc.planned {
				w.openPR(1, "h1", "w1 w2")
			}
			// Another merge or drift brings a machine nobody reviewed.
			w.runner.set(func(r *fakeRunner) { r.extra = []string{"w9"} })
			w.merge(1, "m1", "w1 w2")

			s := w.last("m1", convergeContext)
			if s.state != gh.StateFailure || s.description != tc.desc {
				t.Fatalf("converge status %+v; want failure %q", s, tc.desc)
			}
			if len(w.runner.mutations) != 0 {
				t.Fatalf("the refused converge mutated: %v", w.runner.mutations)
			}
			if len(w.runner.refusedBy) != 1 || !errors.Is(w.runner.refusedBy[0], agent.ErrPlanNotReviewed) || retry.IsTransient(w.runner.refusedBy[0]) {
				t.Fatalf("approve returned %v; want one terminal ErrPlanNotReviewed", w.runner.refusedBy)
			}
			if w.runner.converges != 1 {
				t.Fatalf("%d converges; a refusal is not retried", w.runner.converges)
			}
			comments := w.forge.commentsOn(1)
			if len(comments) != 1 {
				t.Fatalf("%d converge comments, want 1: %q", len(comments), comments)
			}
			for _, want := range append([]string{"**Refused:** `require_reviewed_plan` is set", "Nothing was changed"}, tc.comments...) {
				if !strings.Contains(comments[0], want) {
					t.Errorf("the comment lacks %q:\n%s", want, comments[0])
				}
			}
			if !w.metric(`taloscluster_runs_total{kind="converge",result="refused"} 1`) {
				t.Error("the refusal is not counted as refused")
			}
			w.checkReported()
		})
	}
}

func TestConvergeWithoutReviewRequiredShowsWhatChanged(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.openPR(1, "h1", "w1 w2")
	w.runner.set(func(r *fakeRunner) { r.extra = []string{"w9"} })
	w.merge(1, "m1", "w1 w2")
	s := w.last("m1", convergeContext)
	if s.state != gh.StateSuccess || s.description != "converged; the plan changed since review (1 difference)" {
		t.Fatalf("converge status %+v", s)
	}
	if got := w.runner.mutations; !slices.Equal(got, []string{"w1", "w2", "w9"}) {
		t.Fatalf("mutations %v; want the plan that ran, w9 included", got)
	}
	comments := w.forge.commentsOn(1)
	if len(comments) != 1 {
		t.Fatalf("converge comments %q", comments)
	}
	for _, want := range []string{"**Plan changed since review:** the plan that ran differs from the plan shown on this pull request at `h1`",
		"```diff\n+ compute provider create machine w9\n```", "The plan that ran:", "w9"} {
		if !strings.Contains(comments[0], want) {
			t.Errorf("the comment lacks %q:\n%s", want, comments[0])
		}
	}
	w.checkReported()
}

func TestTransientFailureIsRetriedWithEachAttemptReported(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *agent.Config) { c.RequireReviewedPlan = true })
	w.openPR(1, "h1", "w1 w2")
	transient := retry.Transient(errors.New("proxmox did not answer (token " + secret + ")"))
	// The first try creates w1 then fails; the second fails at once; the
	// third creates what is left: the rest of the reviewed plan.
	w.runner.set(func(r *fakeRunner) { r.failures = []failure{{1, transient}, {0, transient}} })
	w.merge(1, "m1", "w1 w2")

	var pending []string
	for _, s := range w.forge.statusesOf("m1", convergeContext) {
		if strings.HasPrefix(s.description, "attempt") {
			if s.state != gh.StatePending {
				t.Errorf("a retried attempt has state %s: %+v", s.state, s)
			}
			pending = append(pending, s.description)
		}
	}
	// A pending status may be replaced in the outbox by a newer one of the
	// same commit and context before it is sent; each one that was sent
	// names its attempt, in order, with the reason redacted. That the
	// converge ran three times is the retry.
	want := []string{"attempt 1 of 5 failed: proxmox did not answer (token [redacted]), retrying in ",
		"attempt 2 of 5 failed: proxmox did not answer (token [redacted]), retrying in "}
	next := 0
	for _, d := range pending {
		for next < len(want) && !strings.HasPrefix(d, want[next]) {
			next++
		}
		if next == len(want) {
			t.Fatalf("attempt statuses %q: %q is not one of %q, in order", pending, d, want)
		}
		next++
	}
	if len(pending) == 0 {
		t.Fatalf("no attempt status was sent")
	}
	w.runner.mu.Lock()
	converges := w.runner.converges
	w.runner.mu.Unlock()
	if converges != 3 {
		t.Fatalf("%d converges, want 3: two failed attempts and the one that finished", converges)
	}
	if s := w.last("m1", convergeContext); s.state != gh.StateSuccess || s.description != "converged (attempt 3 of 5)" {
		t.Fatalf("final status %+v", s)
	}
	if got := w.runner.mutations; !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("mutations %v; want each machine once", got)
	}
	if len(w.runner.refusedBy) != 0 {
		t.Fatalf("a retry running the rest of the reviewed plan was refused: %v", w.runner.refusedBy)
	}
	if comments := w.forge.commentsOn(1); len(comments) != 1 || !strings.Contains(comments[0], "converged (attempt 3 of 5)") ||
		!strings.Contains(comments[0], "Retries ran what was left of the plan the first attempt was allowed to run") ||
		!strings.Contains(comments[0], "The plan that ran is the plan shown on this pull request at `h1`") {
		t.Fatalf("converge comments %q; want one, after the last attempt, saying the reviewed plan ran", comments)
	}
	for _, want := range []string{`taloscluster_runs_total{kind="converge",result="retried"} 2`, `taloscluster_runs_total{kind="converge",result="success"} 1`} {
		if !w.metric(want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	w.checkReported()
}

func TestTransientFailureGivesUpAfterTheLastAttempt(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	down := fmt.Errorf("creating a VM: %w", context.DeadlineExceeded) // transient by type
	w.runner.set(func(r *fakeRunner) {
		for range agent.RetryAttempts {
			r.failures = append(r.failures, failure{0, down})
		}
	})
	w.merge(1, "m1", "w1")
	if w.runner.converges != agent.RetryAttempts {
		t.Fatalf("%d converges, want %d", w.runner.converges, agent.RetryAttempts)
	}
	s := w.last("m1", convergeContext)
	if s.state != gh.StateFailure || s.description != "attempt 5 of 5 failed: creating a VM: context deadline exceeded" {
		t.Fatalf("final status %+v", s)
	}
	if n := len(w.forge.commentsOn(1)); n != 1 {
		t.Fatalf("%d converge comments, want 1", n)
	}
	w.checkReported()
}

func TestANewerMergeCancelsAWaitingRetry(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.agent.SetRetryPolicy(retry.Policy{Initial: time.Hour, Max: time.Hour, Attempts: agent.RetryAttempts})
	w.runner.set(func(r *fakeRunner) {
		r.failures = []failure{{0, retry.Transient(errors.New("proxmox did not answer"))}}
	})
	w.land(1, "m1", "w1")
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		all := w.forge.statusesOf("m1", convergeContext)
		if len(all) > 0 && strings.Contains(all[len(all)-1].description, ", retrying in ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first merge was not requeued: %+v", all)
		}
		time.Sleep(time.Millisecond)
	}
	// The newer merge runs at once, not in an hour, and covers the first.
	w.merge(2, "m2", "w1 w2")
	if w.runner.converges != 2 {
		t.Fatalf("%d converges, want 2: the waiting retry must not run", w.runner.converges)
	}
	for _, sha := range []string{"m1", "m2"} {
		if s := w.last(sha, convergeContext); s.state != gh.StateSuccess || s.description != "converged, covering 2 merges; no plan was shown on #2" {
			t.Errorf("%s: %+v", sha, s)
		}
	}
	if got := w.runner.mutations; !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("mutations %v", got)
	}
}

func TestTerminalFailureIsReportedOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.runner.set(func(r *fakeRunner) {
		r.failures = []failure{{0, errors.New("the disk of w1 cannot shrink")}}
	})
	w.merge(1, "m1", "w1")
	if w.runner.converges != 1 {
		t.Fatalf("%d converges; a terminal error is not retried", w.runner.converges)
	}
	all := w.forge.statusesOf("m1", convergeContext)
	var failures int
	for _, s := range all {
		if strings.HasPrefix(s.description, "attempt") {
			t.Errorf("a terminal failure reported an attempt: %+v", s)
		}
		if s.state == gh.StateFailure {
			failures++
		}
	}
	if last := all[len(all)-1]; failures != 1 || last.state != gh.StateFailure || last.description != "the disk of w1 cannot shrink" {
		t.Fatalf("statuses %+v; want one failure with the reason, last", all)
	}
	if !w.metric(`taloscluster_runs_total{kind="converge",result="failure"} 1`) || !w.metric(`taloscluster_runs_total{kind="converge",result="retried"} 0`) {
		t.Error("metrics do not count one failure and no retry")
	}
	w.checkReported()
}

func TestARefusingPlanFailsTheConverge(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.runner.set(func(r *fakeRunner) { r.refuse = true })
	w.merge(1, "m1", "w1")
	s := w.last("m1", convergeContext)
	if s.state != gh.StateFailure || s.description != "refused: shrinking the control plane is refused" {
		t.Fatalf("converge status %+v", s)
	}
	if w.runner.converges != 1 || len(w.runner.mutations) != 0 {
		t.Fatalf("%d converges, mutations %v", w.runner.converges, w.runner.mutations)
	}
}

func TestTransientPlanFailureIsRetried(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.runner.set(func(r *fakeRunner) {
		r.planErrs = []error{retry.Transient(errors.New("proxmox is restarting"))}
	})
	w.openPR(1, "h1", "w1 w2")
	all := w.forge.statusesOf("h1", planContext)
	var attempts []status
	for _, s := range all {
		if strings.HasPrefix(s.description, "attempt") {
			attempts = append(attempts, s)
		}
	}
	// The pending status of the failed attempt may be replaced in the
	// outbox by the final one before it is sent (a newer status of the
	// same commit and context supersedes a queued one); when it was sent,
	// it says so. That the plan ran twice is the retry.
	if len(attempts) > 1 || len(attempts) == 1 && (attempts[0].state != gh.StatePending ||
		!strings.HasPrefix(attempts[0].description, "attempt 1 of 5 failed: proxmox is restarting, retrying in ")) {
		t.Fatalf("plan statuses %+v; want at most one pending attempt", all)
	}
	w.runner.mu.Lock()
	plans := 0
	for _, c := range w.runner.calls {
		if c == "plan" {
			plans++
		}
	}
	w.runner.mu.Unlock()
	if plans != 2 {
		t.Fatalf("%d plans, want 2: the failed one and its retry", plans)
	}
	if s := all[len(all)-1]; s.state != gh.StateSuccess {
		t.Fatalf("final plan status %+v", s)
	}
	w.forge.mu.Lock()
	body := strings.Join(w.forge.plans[1], "")
	w.forge.mu.Unlock()
	if !strings.Contains(body, "w2") || strings.Contains(body, "proxmox is restarting") {
		t.Fatalf("the plan comment does not show the plan of the second attempt:\n%s", body)
	}
	// The plan shown after the retry is the reviewed one.
	w.merge(1, "m1", "w1 w2")
	if s := w.last("m1", convergeContext); s.description != "converged" {
		t.Fatalf("converge status %+v", s)
	}
}

func TestDriftCheckErrorIsRecorded(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *agent.Config) { c.DriftInterval = agent.Duration(time.Nanosecond) })
	w.runner.set(func(r *fakeRunner) {
		r.planErrs = []error{errors.New("listing VMs: 401 for token " + secret)}
	})
	w.poll()
	st := w.agent.Status()
	if len(st.Clusters) != 1 || st.Clusters[0].DriftError != "listing VMs: 401 for token [redacted]" || st.Clusters[0].Drift {
		t.Fatalf("status %+v; want the failed drift check, not drift", st.Clusters)
	}
	page := w.get("/")
	if !strings.Contains(page, "drift unknown: listing VMs: 401 for token [redacted]") || strings.Contains(page, "in sync") {
		t.Fatalf("the status page does not say the drift check failed:\n%s", page)
	}
	if !w.metric(`taloscluster_cluster_drift_check_success{cluster="clusters/a"} 0`) {
		t.Errorf("metrics:\n%s", w.get("/metrics"))
	}
	w.checkReported()

	// A plan with refusals is drift; the check works again.
	w.runner.set(func(r *fakeRunner) { r.refuse = true })
	w.poll()
	if !w.metric(`taloscluster_cluster_drift_check_success{cluster="clusters/a"} 1`) || !w.metric(`taloscluster_cluster_drift{cluster="clusters/a"} 1`) {
		t.Errorf("metrics after a refusing plan:\n%s", w.get("/metrics"))
	}
	if st := w.agent.Status(); st.Clusters[0].DriftError != "" || !st.Clusters[0].Drift {
		t.Fatalf("status %+v; want drift and no error", st.Clusters)
	}

	// A failed check does not clear the drift found before.
	w.runner.set(func(r *fakeRunner) { r.planErrs = []error{errors.New("proxmox: 503")} })
	w.poll()
	if !w.metric(`taloscluster_cluster_drift_check_success{cluster="clusters/a"} 0`) || !w.metric(`taloscluster_cluster_drift{cluster="clusters/a"} 1`) {
		t.Errorf("metrics after a failed check of a drifted cluster:\n%s", w.get("/metrics"))
	}
	if page := w.get("/"); !strings.Contains(page, "drift unknown: proxmox: 503") || !strings.Contains(page, "the last check that worked found drift") {
		t.Errorf("status page:\n%s", page)
	}

	// In sync.
	w.runner.set(func(r *fakeRunner) { r.refuse = false })
	w.poll()
	if !w.metric(`taloscluster_cluster_drift{cluster="clusters/a"} 0`) || !strings.Contains(w.get("/"), "in sync") {
		t.Error("an empty plan is not reported in sync")
	}
}

func TestHumanDuration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{1200 * time.Microsecond, "1ms"},
		{29500 * time.Millisecond, "30s"},
		{time.Minute, "1m"},
		{67 * time.Second, "1m7s"},
		{10 * time.Minute, "10m"},
		{69*time.Minute + 20*time.Second, "1h9m"},
	} {
		if got := agent.HumanDuration(tc.d); got != tc.want {
			t.Errorf("HumanDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// A plan status never reaches a pull request before the plan comment it
// summarises: when GitHub refuses the comment, the status waits with it
// in the outbox, and both are posted, comment first, on a later poll.
func TestPlanStatusWaitsForItsComment(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *agent.Config) {
		c.ReportRetry = retry.Policy{Initial: time.Millisecond, Max: time.Millisecond}
	})
	w.forge.mu.Lock()
	w.forge.failUpserts = 1
	w.forge.mu.Unlock()
	w.openPR(1, "h1", "worker-1")
	for _, st := range w.forge.statusesOf("h1", "taloscluster/plan: "+cluster) {
		if st.state != gh.StatePending {
			t.Fatalf("plan status %v posted while the plan comment was refused", st)
		}
	}
	if !strings.Contains(w.get("/"), "1 failed at least once") {
		t.Errorf("the status page does not show the refused comment:\n%s", w.get("/"))
	}
	time.Sleep(5 * time.Millisecond)
	w.poll()
	w.forge.mu.Lock()
	plan := w.forge.plans[1]
	w.forge.mu.Unlock()
	got := w.forge.statusesOf("h1", "taloscluster/plan: "+cluster)
	if len(plan) == 0 || len(got) == 0 || got[len(got)-1].state != gh.StateSuccess {
		t.Fatalf("after GitHub recovered: plan comment %d parts, statuses %v", len(plan), got)
	}
}

// With a state backend that keeps files, the plan shown on a pull request
// is kept with the cluster: an agent restarted between the review and the
// merge (or another replica) still finds it, and require_reviewed_plan lets
// the reviewed plan run.
func TestReviewedPlanIsKeptAcrossRestarts(t *testing.T) {
	t.Parallel()
	progress := keepingProgress{&fakeProgress{last: map[string]string{cluster: "c0"}, files: map[string][]byte{}}}
	w := newWorldFull(t, func(c *agent.Config) { c.RequireReviewedPlan = true }, nil, progress)
	w.openPR(1, "h1", "w1 w2")
	w.agent.Close()
	w.startAgent() // a new process: nothing in memory
	w.merge(1, "m1", "w1 w2")
	if s := w.last("m1", convergeContext); s.state != gh.StateSuccess {
		t.Fatalf("converge status %+v after a restart; want the reviewed plan to run", s)
	}
	if got := w.runner.mutations; !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("mutations %v", got)
	}

	// A plan nobody reviewed is still refused, and the comment does not
	// blame a restart.
	w.runner.set(func(r *fakeRunner) { r.extra = []string{"w9"} })
	w.merge(2, "m2", "w1 w2 w3")
	if s := w.last("m2", convergeContext); s.state != gh.StateFailure ||
		s.description != "refused: no reviewed plan: none was shown on #2 (none is kept in the cluster's state)" {
		t.Fatalf("converge status %+v; want the refusal", s)
	}
}

// A converge that failed because the agent's disk was full is tried again,
// beyond the attempts a transient failure gets, until there is room.
func TestDiskFullConvergeIsRetriedUntilThereIsRoom(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.agent.SetRetryPolicy(retry.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond, Attempts: agent.RetryAttempts})
	full := fmt.Errorf("writing the journal: %w", &fs.PathError{Op: "write", Path: "/data/state/journal.json", Err: syscall.ENOSPC})
	w.runner.set(func(r *fakeRunner) {
		for range agent.RetryAttempts + 2 {
			r.failures = append(r.failures, failure{0, full})
		}
	})
	w.merge(1, "m1", "w1")
	if want := agent.RetryAttempts + 3; w.runner.converges != want {
		t.Fatalf("%d converges, want %d", w.runner.converges, want)
	}
	if s := w.last("m1", convergeContext); s.state != gh.StateSuccess {
		t.Fatalf("final status %+v, want success once the disk had room", s)
	}
	var waited bool
	for _, s := range w.forge.statusesOf("m1", convergeContext) {
		waited = waited || strings.Contains(s.description, "no space left on the agent's disk")
	}
	if !waited {
		t.Error("no status said the disk was full")
	}
}

// A drift check whose plan could not read part of the cluster is neither
// in sync nor drift: unknown on /metrics and the status page.
func TestIncompleteDriftCheckIsUnknown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *agent.Config) { c.DriftInterval = agent.Duration(time.Nanosecond) })
	w.poll() // the first converge
	w.runner.set(func(r *fakeRunner) { r.unread = "rpc error: code = Unavailable" })
	w.poll()
	if !w.metric(`taloscluster_cluster_drift_check_success{cluster="clusters/a"} 0`) {
		t.Errorf("metrics after an incomplete drift check:\n%s", w.get("/metrics"))
	}
	page := w.get("/")
	if !strings.Contains(page, "drift unknown: incomplete: the etcd members could not be read: rpc error: code = Unavailable") || strings.Contains(page, "in sync") {
		t.Fatalf("the status page does not say drift is unknown:\n%s", page)
	}
	w.checkReported()
}

// The plan of a pull request that could not read part of the cluster says
// incomplete in its status and its comment, never success.
func TestIncompletePlanIsNotASuccess(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.poll()
	w.runner.set(func(r *fakeRunner) { r.unread = "rpc error: code = Unavailable" })
	w.openPR(1, "h1", "w1")
	s := w.last("h1", planContext)
	if s.state != gh.StateFailure || !strings.HasPrefix(s.description, "incomplete: the etcd members could not be read") {
		t.Fatalf("plan status %+v, want an incomplete failure", s)
	}
	w.forge.mu.Lock()
	body := strings.Join(w.forge.plans[1], "")
	w.forge.mu.Unlock()
	if !strings.Contains(body, "**Incomplete:**") || !strings.Contains(body, "the etcd members could not be read") {
		t.Fatalf("plan comment %q, want it to say incomplete", body)
	}
}

// A pull request whose changes cannot be read is tried again on every
// poll, and the same error is logged once, not once a poll.
func TestRepeatedPullRequestErrorIsLoggedOnce(t *testing.T) {
	t.Parallel()
	var logs syncLog
	w := newWorld(t, nil)
	w.deps.Log = slog.New(slog.NewTextHandler(&logs, nil))
	w.agent.Close()
	w.startAgent()
	w.repo.mu.Lock()
	w.repo.prErr = errors.New("object not found")
	w.repo.trees["h1"] = fstest.MapFS{cluster + "/cluster.yaml": {Data: []byte("w1")}}
	w.repo.heads.PRs = map[int]string{1: "h1"}
	w.repo.mu.Unlock()
	w.forge.mu.Lock()
	w.forge.open = []gh.PR{{Number: 1, Head: "h1", Author: "alice", Title: "grow"}}
	w.forge.mu.Unlock()
	for range 5 {
		w.poll()
	}
	if n := strings.Count(logs.String(), "reading the changes of a pull request"); n != 1 {
		t.Fatalf("the error was logged %d times in 5 polls, want once:\n%s", n, logs.String())
	}
	// Readable again: it is planned.
	w.repo.mu.Lock()
	w.repo.prErr = nil
	w.repo.mu.Unlock()
	w.poll()
	if got := w.last("h1", planContext); got.state != gh.StateSuccess {
		t.Fatalf("plan status once readable: %+v", got)
	}
}

// syncLog is a log sink safe for the agent's goroutines.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
