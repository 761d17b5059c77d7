package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taloscluster/taloscluster/agent/httpapi"
	"github.com/taloscluster/taloscluster/gitsync"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/report"
	gh "github.com/taloscluster/taloscluster/report/github"
	"github.com/taloscluster/taloscluster/report/metrics"
	"github.com/taloscluster/taloscluster/report/outbox"
)

// Repo is the cluster repository as the agent reads it (gitsync.Repo).
type Repo interface {
	Fetch(ctx context.Context, open []int) (gitsync.Heads, error)
	Tree(commit string) (fs.FS, error)
	ChangedPaths(ctx context.Context, from, to string) ([]string, error)
	PRChanges(ctx context.Context, base, head string) ([]string, error)
	Commits(ctx context.Context, from, to string) ([]gitsync.Commit, error)
	ClusterDirs(commit string, roots []string) ([]string, error)
}

// Forge is where pull requests, comments and statuses live (GitHub).
type Forge interface {
	OpenPRs(ctx context.Context, base string) ([]gh.PR, error)
	Permission(ctx context.Context, user string) (string, error)
	SetStatus(ctx context.Context, sha, context, state, description, targetURL string) error
	UpsertComments(ctx context.Context, pr int, bodies []string) error
	// Comment posts a one-off comment, unless one marked with key is on
	// the pull request already.
	Comment(ctx context.Context, pr int, key, body string) error
	MergedPR(ctx context.Context, sha string) (int, bool, error)
	Reachable(ctx context.Context) error
}

// Runner runs the engine on one cluster. The agent never learns which
// provider a cluster uses.
type Runner interface {
	// Plan plans a cluster read from files, changing nothing.
	Plan(ctx context.Context, cluster string, files fs.FS) (*plan.Plan, error)
	// Converge makes the cluster match files at commit, telling h what
	// it does and asking h to approve its plan (see ConvergeHooks).
	Converge(ctx context.Context, cluster, commit string, files fs.FS, h ConvergeHooks) error
	// Endpoints returns every endpoint a cluster sends credentials to or
	// trusts, as the engine will use them, and the TLS settings they are
	// reached with, for the pull-request endpoint policy. It makes no
	// request.
	Endpoints(cluster string, files fs.FS) (Endpoints, error)
	// Describe reads a cluster's name and the files its cluster.yaml
	// reads, making no request.
	Describe(cluster string, files fs.FS) (ClusterInfo, error)
	// Check compares a cluster read from files with the upstream
	// releases and with the running cluster (check.Run), changing
	// nothing. A source it cannot read makes the report incomplete, not an
	// error; an error means the cluster could not be checked at all (its
	// files do not load).
	Check(ctx context.Context, cluster string, files fs.FS) (*CheckResult, error)
}

// ConvergeHooks is what a converge tells the agent as it runs, and what
// it asks of it.
type ConvergeHooks struct {
	// Log receives the engine's progress lines.
	Log func(string)
	// Approve is called with the plan about to run, before the first
	// mutation; an error from it stops the converge, nothing changed, and
	// Converge returns that error.
	Approve func(*plan.Plan) error
	// Step, when set, is told when each step starts and ends. It is
	// called from several goroutines at once: the steps of a worker batch
	// run in parallel.
	Step func(reconcile.StepEvent)
	// Loaded, when set, is told the cluster.yaml the converge runs, once
	// it is read.
	Loaded func(*spec.Cluster)
	// Remediated, when set, is told of each remediation the converge
	// begins: the worker pool and the machine's hostname.
	Remediated func(pool, hostname string)
}

// Progress is the state the agent keeps between runs: the last commit
// converged per cluster, so a restarted agent resumes.
type Progress interface {
	LastConverged(ctx context.Context, cluster string) (string, error)
	SetLastConverged(ctx context.Context, cluster, commit string) error
}

// Agent is the GitOps loop.
type Agent struct {
	cfg      *Config
	repo     Repo
	forge    Forge
	runner   Runner
	progress Progress
	metrics  *metrics.Metrics
	redact   *report.Redactor
	log      *slog.Logger
	sched    *Scheduler
	stop     context.CancelFunc
	// retry paces the tries of a converge or plan that failed with a
	// transient error: RetryInitial, RetryMax and RetryAttempts, which
	// tests shrink.
	retry retry.Policy
	// waits paces the runs of a job that stopped on something that will
	// change on its own: WaitInitial, WaitMax and WaitLimit, which tests
	// shrink.
	waits waitPolicy
	// now is the clock a job's wait is measured with; tests replace it.
	now func() time.Time

	// allowed is cfg.AllowedEndpoints parsed.
	allowed []endpoint
	// reports holds the statuses and comments owed to GitHub until they
	// are delivered.
	reports *outbox.Outbox
	// kick asks the deliverer for a pass over the outbox; flushReq asks
	// for one and waits for it; delivererDone is closed when it stops.
	kick          chan struct{}
	flushReq      chan chan struct{}
	delivererDone chan struct{}
	// fleet shares the clusters among replicas; nil owns them all.
	fleet     Fleet
	fleetDone chan struct{}
	// ownedBefore are the clusters owned at the last poll (poll loop only).
	ownedBefore map[string]bool
	// quiet keeps lasting conditions from being logged on every poll.
	quiet quietLog
	// release drops the data directory's lock (Deps.Release), once.
	release func()
	// infos are the cluster descriptions read, by commit and directory.
	infos infoCache
	// board is what the status page shows; it has its own lock.
	board *board

	mu          sync.Mutex
	defaultHead string
	clusters    []string
	open        []int // the open pull requests last listed, sorted
	apiLimit    *gh.RateLimitedError
	lastProbe   time.Time
	planned     map[int]string // pull request -> head planned
	// elsewhere holds the pull requests another replica plans: the head
	// and base this replica found them at, and the cluster whose owner
	// plans them. An idle poll then checks that cluster's Lease alone
	// instead of reading both trees again.
	elsewhere  map[int]plannedElsewhere
	untrusted  map[int]string // pull request -> head refused
	lastFetch  time.Time
	fetchErr   error
	forgeErr   error
	lastDrift  time.Time
	shown      map[shownKey]shownPlan // the last plan shown per cluster and pull request
	shownOrder []shownKey
	approved   map[string]approvedPlan // cluster -> the plan its current converge job was allowed to run
}

// Deps are what New wires together.
type Deps struct {
	Repo     Repo
	Forge    Forge
	Runner   Runner
	Progress Progress
	Metrics  *metrics.Metrics
	Redact   *report.Redactor
	Log      *slog.Logger
	// Outbox keeps the reports owed to GitHub (see OpenOutbox); nil keeps
	// them in memory only.
	Outbox *outbox.Outbox
	// Fleet shares the clusters among replicas; nil owns them all.
	Fleet Fleet
	// Release, when set, is called by Close once the agent stopped: it
	// drops the agent's lock on its data directory.
	Release func()
}

// OpenOutbox opens the agent's report outbox kept in store (the state
// backend), with the retry classification the agent uses and cfg's
// ReportRetry; name is the document's name, empty for the default.
func OpenOutbox(ctx context.Context, cfg *Config, store outbox.Store, name string, log *slog.Logger) (*outbox.Outbox, error) {
	return outbox.Open(ctx, outbox.Options{Store: store, Name: name, Log: log, Transient: gh.Retryable, Retry: cfg.ReportRetry})
}

// New returns an agent for cfg.
func New(cfg *Config, d Deps) *Agent {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Outbox == nil {
		d.Outbox, _ = OpenOutbox(context.Background(), cfg, nil, "", d.Log) // in memory: cannot fail
	}
	a := &Agent{cfg: cfg, repo: d.Repo, forge: d.Forge, runner: d.Runner, progress: d.Progress, metrics: d.Metrics,
		redact: d.Redact, log: d.Log, reports: d.Outbox, fleet: d.Fleet, planned: map[int]string{}, elsewhere: map[int]plannedElsewhere{}, untrusted: map[int]string{},
		board: newBoard(d.Redact), shown: map[shownKey]shownPlan{}, approved: map[string]approvedPlan{},
		retry: retry.Policy{Initial: RetryInitial, Max: RetryMax, Attempts: RetryAttempts},
		waits: waitPolicy{backoff: retry.Policy{Initial: WaitInitial, Max: WaitMax}, limit: WaitLimit}, now: time.Now,
		release: func() {},
		// The first drift check comes one interval after start: on start,
		// the resume logic converges what is behind.
		lastDrift: time.Now()}
	// Jobs outlive the poll that queued them; Close stops them.
	ctx, stop := context.WithCancel(context.Background())
	a.stop = stop
	if d.Release != nil {
		a.release = sync.OnceFunc(d.Release)
	}
	if cfg.RunRetry.Initial != 0 {
		a.retry = cfg.RunRetry
	}
	if a.metrics != nil {
		// What is owed shows as reports are queued, delivered and dropped.
		a.reports.Observe(func(p outbox.Pending) { a.metrics.ReportsPending(p.Count, p.Oldest, p.Dropped) })
	}
	a.startDeliverer(ctx)
	a.sched = NewSchedulerRequeue(ctx, cfg.Concurrency, a.runMutation)
	if a.fleet != nil {
		a.fleetDone = make(chan struct{})
		go func() {
			defer close(a.fleetDone)
			a.fleet.Run(ctx, a.sched.Busy)
		}()
	}
	var err error
	if a.allowed, err = parseAllowed(cfg.AllowedEndpoints); err != nil {
		// LoadConfig refuses these; a Config built in code may have them.
		a.log.Error("ignoring bad allowed_endpoints entries", "error", err)
	}
	return a
}

// Run polls until ctx ends, then stops the running jobs and waits for
// them.
func (a *Agent) Run(ctx context.Context) error {
	defer a.Close()
	interval := a.cfg.Repository.PollInterval.D()
	for {
		if err := a.Poll(ctx); err != nil && ctx.Err() == nil {
			msg := a.redact.String(err.Error())
			if a.quiet.allow("poll", msg) {
				a.log.Error("poll failed", "error", msg)
			}
		} else if err == nil {
			a.quiet.forget("poll")
		}
		// Jitter ±10% so several agents do not poll in step.
		wait := interval - interval/10 + time.Duration(rand.Int64N(int64(interval/5)+1))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Poll runs one cycle: fetch, converge what changed on the default branch,
// deliver the reports that are due, list the open pull requests
// and plan their new heads, check drift. Fetching and converging need no
// GitHub API: the fetch asks for the pull requests listed last, and a
// failed or rate-limited listing only holds up planning.
func (a *Agent) Poll(ctx context.Context) error {
	a.mu.Lock()
	known := slices.Clone(a.open)
	a.mu.Unlock()
	heads, err := a.fetch(ctx, known)
	if err != nil {
		return err
	}
	if err := a.defaultBranch(ctx, heads.Default); err != nil {
		return err
	}
	a.takeOver(ctx, heads.Default)
	a.probeLimit(ctx)
	a.deliver(ctx)
	prErr := a.pullRequests(ctx, heads, known)
	a.mu.Lock()
	head := a.defaultHead
	a.mu.Unlock()
	a.drift(ctx, head)
	if a.metrics != nil {
		running, waiting := a.sched.Queue()
		a.metrics.QueueDepth(len(running) + len(waiting))
	}
	return prErr
}

// fetch fetches the default branch and the heads of the pull requests
// open.
func (a *Agent) fetch(ctx context.Context, open []int) (gitsync.Heads, error) {
	heads, err := a.repo.Fetch(ctx, open)
	a.mu.Lock()
	a.fetchErr = err
	if err == nil {
		a.lastFetch = time.Now()
	}
	a.mu.Unlock()
	if a.metrics != nil {
		a.metrics.Fetched(err == nil, time.Now())
	}
	if err != nil {
		return heads, fmt.Errorf("fetching: %w", err)
	}
	return heads, nil
}

// pullRequests lists the open pull requests and plans their new heads;
// fetched are the pull requests whose heads heads holds. While GitHub's
// API is rate limited nothing is asked and nothing planned.
func (a *Agent) pullRequests(ctx context.Context, heads gitsync.Heads, fetched []int) error {
	if l := a.apiLimited(); l != nil {
		return fmt.Errorf("pull requests not listed nor planned: %w", l)
	}
	prs, err := a.forge.OpenPRs(ctx, a.cfg.Repository.DefaultBranch)
	if err != nil {
		if a.noteAPI(err) {
			if l := a.apiLimited(); l != nil {
				return fmt.Errorf("pull requests not listed nor planned: %w", l)
			}
		}
		a.mu.Lock()
		a.forgeErr = err
		a.mu.Unlock()
		return fmt.Errorf("listing pull requests: %w", err)
	}
	numbers := make([]int, len(prs))
	for i, p := range prs {
		numbers[i] = p.Number
	}
	slices.Sort(numbers)
	numbers = slices.Compact(numbers)
	a.mu.Lock()
	a.forgeErr = nil
	a.open = numbers
	a.mu.Unlock()
	if slices.ContainsFunc(numbers, func(n int) bool { return !slices.Contains(fetched, n) }) {
		// A pull request opened since the last listing: fetch its head.
		if heads, err = a.fetch(ctx, numbers); err != nil {
			return err
		}
		if err := a.defaultBranch(ctx, heads.Default); err != nil {
			return err
		}
	}
	for _, p := range prs {
		if head, ok := heads.PRs[p.Number]; ok {
			p.Head = head
		}
		a.pullRequest(ctx, p, heads.Default)
	}
	return nil
}

// defaultBranch converges every cluster a new default-branch commit
// affects. On the first poll it resumes: a cluster whose last converged
// commit is not the head is converged.
func (a *Agent) defaultBranch(ctx context.Context, head string) error {
	a.mu.Lock()
	prev := a.defaultHead
	a.mu.Unlock()
	if head == prev {
		return nil
	}
	dirs, err := a.repo.ClusterDirs(head, a.cfg.Repository.ClusterRoots)
	if err != nil {
		return err
	}
	if a.metrics != nil {
		a.metrics.SetClusters(dirs)
	}
	if a.fleet != nil {
		a.fleet.SetClusters(dirs)
	}
	var affected, changed []string
	if prev == "" {
		affected = slices.Clone(dirs)
	} else {
		changed, err = a.repo.ChangedPaths(ctx, prev, head)
		if err != nil {
			return err
		}
		a.mu.Lock()
		before := a.clusters
		a.mu.Unlock()
		affected = a.affectedBy(prev, head, dirs, before, changed)
		for _, gone := range Removed(before, dirs) {
			if a.owns(gone) {
				a.removed(ctx, gone, head)
			}
		}
	}
	a.mu.Lock()
	a.defaultHead, a.clusters = head, dirs
	a.mu.Unlock()
	a.board.track(dirs)
	affected = slices.DeleteFunc(affected, func(d string) bool { return !a.owns(d) })
	if prev == "" {
		// On the first poll, resume: converge each cluster whose last
		// converged commit is behind. With a Fleet, takeOver does it for
		// each cluster as this replica comes to own it.
		if a.fleet == nil {
			a.queueBehind(ctx, head, affected)
		}
		return nil
	}
	// The merged pull request is only needed to say a merge waits behind
	// a running converge.
	var mergedPR int
	lookupLimited := false
	if slices.ContainsFunc(affected, func(d string) bool { return a.runningCommit(d) != "" }) {
		pr, ok, err := a.mergedPR(ctx, head)
		if err == nil && ok {
			mergedPR = pr
		}
		_, lookupLimited = gh.RateLimited(err)
	}
	for _, d := range affected {
		a.queueConverge(ctx, d, head, nil, mergedPR, lookupLimited)
	}
	for _, d := range a.linkedClusters(head, changed) {
		if a.owns(d) {
			a.log.Warn("cluster directory skipped: cluster.yaml is a symbolic link", "cluster", d, "commit", head)
			a.setStatus(ctx, head, gh.StatusContext("converge", d), gh.StateFailure, linkedSkipped, "")
		}
	}
	return nil
}

// queueBehind queues a converge of each of clusters whose last converged
// commit is not head and that changed since; one that did not change is
// recorded as converged to head.
func (a *Agent) queueBehind(ctx context.Context, head string, clusters []string) {
	for _, d := range clusters {
		last, err := a.progress.LastConverged(ctx, d)
		if err != nil {
			a.log.Error("reading the last converged commit", "cluster", d, "error", err)
			continue
		}
		if last == head || a.jobFor(d, head) {
			continue
		}
		if last != "" {
			changed, err := a.repo.ChangedPaths(ctx, last, head)
			if err == nil && len(a.affectedBy(last, head, []string{d}, []string{d}, changed)) == 0 {
				// Nothing of this cluster changed since: record it.
				_ = a.progress.SetLastConverged(ctx, d, head)
				continue
			}
		}
		a.queueConverge(ctx, d, head, a.touching(ctx, d, last, head), 0, false)
	}
}

// maxCovers bounds the merges a resumed converge reports on.
const maxCovers = 20

// touching returns the commits of the default branch's first-parent line
// after last up to head whose change touched cluster d, newest first, at
// most maxCovers: the merges a converge that resumes after a restart
// covers, so that it reports on the pull requests that changed the
// cluster. It returns nil when last is "" or the history cannot be read.
func (a *Agent) touching(ctx context.Context, d, last, head string) []string {
	if last == "" {
		return nil
	}
	commits, err := a.repo.Commits(ctx, last, head)
	if err != nil {
		a.log.Warn("listing the merges a resumed converge covers", "cluster", d, "error", err)
		return nil
	}
	byHash := make(map[string]gitsync.Commit, len(commits))
	for _, c := range commits {
		byHash[c.SHA] = c
	}
	var out []string
	for c, ok := byHash[head]; ok && c.Parent != "" && len(out) < maxCovers; c, ok = byHash[c.Parent] {
		changed, err := a.repo.ChangedPaths(ctx, c.Parent, c.SHA)
		if err == nil && len(a.affectedBy(c.Parent, c.SHA, []string{d}, []string{d}, changed)) > 0 {
			out = append(out, c.SHA)
		}
		delete(byHash, c.SHA)
	}
	return out
}

// queueConverge queues the converge of cluster d to head and sets its
// pending status; mergedPR, when known, is told that the merge waits
// behind a running converge.
func (a *Agent) queueConverge(ctx context.Context, d, head string, covers []string, mergedPR int, lookupLimited bool) {
	a.log.Info("converge queued", "cluster", d, "commit", head)
	if len(covers) == 0 {
		covers = []string{head}
	}
	desc := "queued"
	if running := a.runningCommit(d); running != "" {
		desc = "queued behind the converge of " + short(running)
		if mergedPR != 0 || lookupLimited {
			a.comment(ctx, mergedPR, head, fmt.Sprintf("**taloscluster:** `%s` is being converged to `%s` right now; this merge is queued behind that run and will be converged next (together with any later merge).", d, short(running)))
		}
	}
	pending := make([]outbox.Report, len(covers))
	for i, c := range covers {
		pending[i] = outbox.Report{Kind: outbox.Status, Commit: c, Context: gh.StatusContext("converge", d), State: gh.StatePending,
			Description: desc, TargetURL: a.link("")}
	}
	a.report(ctx, pending...)
	a.sched.Mutate(Job{Kind: KindConverge, Cluster: d, Commit: head, Covers: covers})
}

// jobFor reports whether a converge of cluster to commit runs or waits.
func (a *Agent) jobFor(cluster, commit string) bool {
	running, waiting := a.sched.Queue()
	for _, j := range append(running, waiting...) {
		if j.Cluster == cluster && j.Kind != KindPlan && j.Commit == commit {
			return true
		}
	}
	return false
}

// runningCommit returns the commit of the mutating job running on a
// cluster, or "".
func (a *Agent) runningCommit(cluster string) string {
	running, _ := a.sched.Queue()
	for _, j := range running {
		if j.Cluster == cluster && j.Kind != KindPlan {
			return j.Commit
		}
	}
	return ""
}

// removed reports a cluster directory deleted on the default branch:
// nothing is destroyed; destroying needs the explicit marker.
func (a *Agent) removed(ctx context.Context, cluster, head string) {
	msg := fmt.Sprintf("cluster directory %s was removed from the default branch. Nothing was destroyed: the machines and the cluster keep running. To destroy a cluster, follow the README (destroy marker).", cluster)
	a.log.Warn("cluster directory removed; not destroying", "cluster", cluster, "commit", head)
	if pr, ok, err := a.mergedPR(ctx, head); err == nil && ok {
		a.comment(ctx, pr, head, "**taloscluster:** "+msg)
	} else if _, limited := gh.RateLimited(err); limited {
		a.comment(ctx, 0, head, "**taloscluster:** "+msg)
	}
	a.setStatus(ctx, head, gh.StatusContext("converge", cluster), gh.StateSuccess, "directory removed: nothing destroyed", a.link(""))
}

// withFiles runs f on the cluster's files at commit.
func (a *Agent) withFiles(commit, cluster string, f func(fs.FS) error) error {
	tree, err := a.repo.Tree(commit)
	if err != nil {
		return err
	}
	files, err := ClusterFiles(tree, a.cfg.SecretsDir, cluster)
	if err != nil {
		return err
	}
	return f(files)
}

// pullRequest plans a new head of an open pull request.
func (a *Agent) pullRequest(ctx context.Context, p gh.PR, base string) {
	a.mu.Lock()
	done := a.planned[p.Number] == p.Head || a.untrusted[p.Number] == p.Head
	a.mu.Unlock()
	if done || p.Head == "" {
		return
	}
	a.mu.Lock()
	other, ok := a.elsewhere[p.Number]
	a.mu.Unlock()
	if ok && other.head == p.Head && other.base == base && !a.owns(other.owner) {
		return
	}
	// Each poll tries a pull request that could not be read again; the
	// same error is logged once a minute.
	topic := fmt.Sprint("pull request ", p.Number)
	fail := func(msg string, err error) {
		if cause := a.redact.String(err.Error()); a.quiet.allow(topic, cause) {
			a.log.Error(msg, "pr", p.Number, "commit", p.Head, "error", cause)
		}
	}
	changed, err := a.repo.PRChanges(ctx, base, p.Head)
	if err != nil {
		fail("reading the changes of a pull request", err)
		return
	}
	dirs, err := a.repo.ClusterDirs(p.Head, a.cfg.Repository.ClusterRoots)
	if err != nil {
		fail("listing clusters", err)
		return
	}
	baseDirs, err := a.repo.ClusterDirs(base, a.cfg.Repository.ClusterRoots)
	if err != nil {
		fail("listing clusters of the default branch", err)
		return
	}
	a.quiet.forget(topic)
	trees := prTrees{base: base, dirs: dirs, baseDirs: baseDirs, removed: removedBy(baseDirs, dirs, changed)}
	affected := a.affectedBy(base, p.Head, dirs, baseDirs, changed)
	// A cluster directory the pull request deletes is reported on too:
	// nothing is destroyed.
	affected = append(affected, trees.removed...)
	slices.Sort(affected)
	linked := a.linkedClusters(p.Head, changed)
	if len(affected) == 0 && len(linked) == 0 {
		a.mu.Lock()
		a.planned[p.Number] = p.Head
		a.mu.Unlock()
		return
	}
	// One replica plans a pull request and reports on it: the owner of
	// the first cluster it changes. (Plans change nothing, so it may plan
	// clusters other replicas own.)
	if first := slices.Min(append(slices.Clone(affected), linked...)); !a.owns(first) {
		a.mu.Lock()
		a.elsewhere[p.Number] = plannedElsewhere{head: p.Head, base: base, owner: first}
		a.mu.Unlock()
		return
	}
	why, err := a.untrustedBecause(ctx, p)
	if err != nil {
		// Not planned for now; the next poll asks again.
		if !a.noteAPI(err) && a.quiet.allow(fmt.Sprint("permission ", p.Number), err.Error()) {
			a.log.Warn("reading the author's permission; the next poll tries again", "pr", p.Number, "author", p.Author, "error", a.redact.String(err.Error()))
		}
		return
	}
	if why != "" {
		a.log.Warn("pull request not planned", "pr", p.Number, "author", p.Author, "reason", why)
		a.report(ctx, *a.planStatus(p, "taloscluster/plan", gh.StateFailure, "not planned: untrusted author", ""))
		a.mu.Lock()
		a.untrusted[p.Number] = p.Head
		a.mu.Unlock()
		return
	}
	a.mu.Lock()
	a.planned[p.Number] = p.Head
	a.mu.Unlock()
	for _, d := range linked {
		a.log.Warn("cluster directory skipped: cluster.yaml is a symbolic link", "pr", p.Number, "cluster", d, "commit", p.Head)
		a.report(ctx, *a.planStatus(p, gh.StatusContext("plan", d), gh.StateFailure, linkedSkipped, ""))
	}
	if len(affected) == 0 {
		return
	}
	if most := a.maxClustersPerPR(); len(affected) > most {
		// One comment (the pull request's plan comment, updated in place)
		// and one status; nothing per cluster.
		a.log.Warn("pull request not planned: it changes too many clusters", "pr", p.Number, "commit", p.Head,
			"clusters", len(affected), "max_clusters_per_pr", most)
		msg := fmt.Sprintf("this pull request changes %d clusters, more than the %d one pull request may change and be planned (max_clusters_per_pr in the agent's configuration), so no cluster is planned. "+
			"Split it into pull requests of at most %d clusters each; a merge is still converged cluster by cluster.", len(affected), most, most)
		a.report(ctx,
			outbox.Report{Kind: outbox.PlanComment, PR: p.Number, Commit: p.Head,
				Bodies: []string{fmt.Sprintf("**taloscluster plan** for %s at `%s`\n\n**Not planned:** %s\n", report.MarkdownText(p.Title, maxTitle), short(p.Head), msg)}},
			*a.planStatus(p, "taloscluster/plan", gh.StateFailure, fmt.Sprintf("not planned: changes %d clusters, more than max_clusters_per_pr (%d)", len(affected), most), ""))
		return
	}
	pending := make([]outbox.Report, len(affected))
	for i, c := range affected {
		pending[i] = *a.planStatus(p, gh.StatusContext("plan", c), gh.StatePending, "planning", a.link(""))
	}
	a.report(ctx, pending...)
	a.sched.Plan(p.Number, p.Head, affected, a.planPR(p, trees, affected))
}

// plannedElsewhere is a pull request another replica plans (Agent.elsewhere).
type plannedElsewhere struct{ head, base, owner string }

// untrustedBecause says why a pull request must not be planned with
// production credentials, or "". An error means it cannot tell now (the
// author's permission could not be read): the pull request is not planned
// until it can.
func (a *Agent) untrustedBecause(ctx context.Context, p gh.PR) (string, error) {
	if p.Fork {
		return "the head is in a fork", nil
	}
	if len(a.cfg.GitHub.AllowedAuthors) > 0 {
		if !slices.Contains(a.cfg.GitHub.AllowedAuthors, p.Author) {
			return "the author is not in github.allowed_authors", nil
		}
		return "", nil
	}
	perm, err := a.forge.Permission(ctx, p.Author)
	if err != nil {
		return "", err
	}
	if perm != "admin" && perm != "write" {
		return "the author lacks write permission", nil
	}
	return "", nil
}

// drift plans every cluster on the default branch every drift interval;
// with self_heal a drifted cluster is converged. A plan with changes or
// refusals is drift; a cluster that could not be planned is neither
// drifted nor in sync: the failed check is recorded on the status page
// and in taloscluster_cluster_drift_check_success. After its drift plan,
// each cluster is checked (checkCluster): its pins against the upstream
// releases and its running nodes.
func (a *Agent) drift(ctx context.Context, head string) {
	a.mu.Lock()
	due := time.Since(a.lastDrift) >= a.cfg.DriftInterval.D()
	clusters := slices.Clone(a.clusters)
	if due {
		a.lastDrift = time.Now()
	}
	a.mu.Unlock()
	if !due {
		return
	}
	for _, c := range clusters {
		if a.sched.Busy(c) || a.sched.Requeued(c) || !a.owns(c) {
			continue
		}
		drifted := a.driftCheck(ctx, c, head)
		if ctx.Err() != nil {
			return
		}
		a.checkCluster(ctx, c, head)
		if ctx.Err() != nil {
			return
		}
		if drifted && a.cfg.SelfHeal {
			a.sched.Mutate(Job{Kind: KindDrift, Cluster: c, Commit: head})
		}
	}
}

// driftCheck plans cluster c at head, records what it found, and reports
// whether it drifted.
func (a *Agent) driftCheck(ctx context.Context, c, head string) bool {
	started := time.Now()
	var pl *plan.Plan
	err := a.withFiles(head, c, func(files fs.FS) error {
		var err error
		pl, err = a.runner.Plan(ctx, c, files)
		return err
	})
	if err == nil && pl == nil {
		err = errors.New("the engine returned no plan")
	}
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		reason := firstLine(a.redact.String(err.Error()))
		a.log.Warn("drift check failed", "cluster", c, "commit", head, "error", reason)
		if a.metrics != nil {
			a.metrics.DriftCheckFailed(c)
		}
		a.board.record(c, func(s *httpapi.ClusterStatus) { s.DriftError, s.DriftChecked = reason, time.Now() })
		a.board.addRun(c, httpapi.Run{Kind: runDrift, Commit: head, Result: "failure", Detail: reason, Duration: time.Since(started)})
		return false
	}
	if pl.Incomplete {
		// What could not be read may differ from cluster.yaml: neither
		// drift nor in sync.
		reason := firstLine(a.redact.String("incomplete: " + strings.Join(pl.IncompleteReasons, "; ")))
		a.log.Warn("drift check incomplete", "cluster", c, "commit", head, "reason", reason)
		if a.metrics != nil {
			a.metrics.DriftCheckFailed(c)
		}
		a.board.record(c, func(s *httpapi.ClusterStatus) { s.DriftError, s.DriftChecked = reason, time.Now() })
		a.board.addRun(c, httpapi.Run{Kind: runDrift, Commit: head, Result: "unknown", Detail: reason, Duration: time.Since(started)})
		return false
	}
	drifted := !pl.Empty()
	if a.metrics != nil {
		a.metrics.Drift(c, drifted)
	}
	summary := a.redact.String(pl.Summary())
	var changes []string
	var more int
	var id string
	result := "no drift"
	if drifted {
		pl.Commit = head
		id = a.board.storePlan(c, head, runDrift, report.Markdown(pl))
		changes, more = a.driftLines(pl)
		result = "drift"
	}
	a.board.record(c, func(s *httpapi.ClusterStatus) {
		s.Drift, s.DriftError, s.DriftChecked = drifted, "", time.Now()
		s.DriftSummary, s.DriftChanges, s.DriftMore, s.DriftPlanID = summary, changes, more, id
	})
	detail := ""
	if drifted {
		detail = summary
	}
	a.board.addRun(c, httpapi.Run{Kind: runDrift, Commit: head, Result: result, Detail: detail, Duration: time.Since(started), PlanID: id})
	return drifted
}

// maxTitle bounds the bytes of a pull request's title shown in its plan
// comment.
const maxTitle = 200

func (a *Agent) link(planID string) string {
	if a.cfg.PublicURL == "" {
		return ""
	}
	u := strings.TrimRight(a.cfg.PublicURL, "/")
	if planID == "" {
		return u + "/"
	}
	return u + "/plans/" + planID
}

// Ready reports why the agent cannot do all of its work, or nil: the
// repository not fetched lately, GitHub's API rate limited (merges are
// still converged then, but pull requests are not planned), or GitHub not
// answering.
func (a *Agent) Ready() error {
	limit := a.apiLimited()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.lastFetch.IsZero():
		return errors.New("the repository has not been fetched yet")
	case time.Since(a.lastFetch) > 3*a.cfg.Repository.PollInterval.D():
		return fmt.Errorf("the last successful fetch was %s ago", time.Since(a.lastFetch).Round(time.Second))
	case limit != nil:
		return fmt.Errorf("%s: pull requests are planned, and statuses posted, after it (merges are still converged)", limit)
	case a.forgeErr != nil:
		return fmt.Errorf("GitHub is not reachable: %s", firstLine(a.redact.String(a.forgeErr.Error())))
	}
	return nil
}

// Status returns the status page's content.
func (a *Agent) Status() httpapi.StatusPage {
	a.mu.Lock()
	page := httpapi.StatusPage{Repository: a.cfg.GitHub.Repo, Branch: a.cfg.Repository.DefaultBranch, LastFetch: a.lastFetch,
		RepositoryURL: repositoryURL(a.cfg.GitHub.APIURL, a.cfg.GitHub.Repo)}
	a.mu.Unlock()
	page.Clusters = a.board.sections()
	for i := range page.Clusters {
		page.Clusters[i].Elsewhere = !a.owns(page.Clusters[i].Path)
	}
	if a.fleet != nil {
		page.Replica = a.redact.String(a.fleet.Summary())
	}
	{
		_, waiting := a.sched.Queue()
		for _, j := range waiting {
			q := httpapi.QueuedJob{Cluster: j.Cluster, Kind: string(j.Kind), Commit: j.Commit, Attempt: j.Attempt, NotBefore: j.NotBefore}
			if j.Waits > 0 {
				q.Waiting = a.board.waitingReason(j.Cluster)
			}
			page.Queue = append(page.Queue, q)
		}
	}
	r := a.reports.Pending()
	page.Reports = httpapi.ReportsStatus{Pending: r.Count, Oldest: r.Oldest, Failing: r.Failing,
		LastError: a.redact.String(r.LastError), Dropped: r.Dropped, SaveError: a.redact.String(r.SaveError),
		LastDropped: r.LastDrop.Report, DropReason: a.redact.String(r.LastDrop.Reason), DroppedAt: r.LastDrop.At}
	return page
}

// Plan returns a stored plan for the status page.
func (a *Agent) Plan(id string) (string, bool) {
	return a.board.plan(id)
}

// Wait waits until no job runs or waits, then for a pass over the reports
// they left.
func (a *Agent) Wait() {
	a.sched.Wait()
	a.flushReports(context.Background())
}

// Close stops the running jobs (their contexts end) and waits for them,
// then stops delivering reports (what is left waits in the outbox) and
// gives up the replica's clusters.
func (a *Agent) Close() {
	a.stop()
	a.sched.Close()
	<-a.delivererDone
	if a.fleetDone != nil {
		<-a.fleetDone
	}
	a.release()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

func short(sha string) string {
	if len(sha) > 10 {
		return sha[:10]
	}
	return sha
}

// humanDuration writes a wait for people: "45s", "1m", "2m30s".
func humanDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%ds", int(d/time.Second))
	}
	if d >= time.Hour {
		d = d.Round(time.Minute)
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	}
	m, sec := int(d/time.Minute), int(d%time.Minute/time.Second)
	if sec == 0 {
		return fmt.Sprintf("%dm", m)
	}
	return fmt.Sprintf("%dm%ds", m, sec)
}

// prTrees are the cluster directories a pull request is planned against.
type prTrees struct {
	// base is the default branch's head; baseDirs its cluster directories.
	base     string
	baseDirs []string
	// dirs are the cluster directories at the pull request's head.
	dirs []string
	// removed are the cluster directories the pull request deletes.
	removed []string
}

// removedBy returns the cluster directories of before that a change
// deletes: gone after, and their cluster.yaml among the changed paths (a
// directory added on the default branch since the pull request's base is
// not one).
func removedBy(before, after, changed []string) []string {
	var out []string
	for _, d := range Removed(before, after) {
		if slices.Contains(changed, path.Join(d, spec.ClusterFile)) {
			out = append(out, d)
		}
	}
	return out
}
