package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/gitsync"
	"github.com/taloscluster/taloscluster/internal/noredirect"
	"github.com/taloscluster/taloscluster/lab/kube/realkube"
	"github.com/taloscluster/taloscluster/reconcile/state"
	gh "github.com/taloscluster/taloscluster/report/github"
)

// benchReplicas is how many replicas BenchmarkFigureIdlePollReplicas runs.
const benchReplicas = 3

// benchNamespace is the namespace of the replicas' state and Leases.
const benchNamespace = "taloscluster"

// benchLease is the replicas' Lease duration. The benchmark runs the Lease
// rounds between polls, not beside them as Fleet.Run does, so it is long
// enough that a replica keeps its clusters through a slow poll.
const benchLease = 2 * time.Minute

// sampleBudget and measureBudget bound the wall time of
// BenchmarkFigureIdlePollReplicas's polls: a sample stops polling after
// sampleBudget, once each replica has polled the same number of times
// (at least once), and no sample starts after measureBudget.
const (
	sampleBudget  = 5 * time.Second
	measureBudget = 30 * time.Second
)

// BenchmarkFigureIdlePollReplicas: the idle poll of three replicas of the
// agent sharing a repository of 1,000 cluster directories and 50 open
// pull requests through Kubernetes Leases on a real kube-apiserver (each
// replica owns a third of the clusters), the forge in a process of its
// own. Each replica has its own clone, its own GitHub and Kubernetes
// clients and keeps its state in Kubernetes, as in production. Every
// figure is per replica and per poll.
//   - charged: GitHub requests per poll that count against the rate limit
//     (target and floor: none); conditional: those answered 304 Not
//     Modified, which do not;
//   - cpu: the process's CPU time during the polls (the three agents and
//     their Kubernetes clients, not the forge nor the API server) per
//     replica-poll against that of a `git ls-remote` process on the same
//     remote (target: at most half of it);
//   - wire: the bytes of git traffic per poll against the ref advertisement
//     the poll must read (target: at most 1.5 times);
//   - kube: the requests the poll sends to Kubernetes, which are not
//     GitHub's and have no floor.
//
// The Lease rounds (a replica renews its membership and the owner Leases
// of its clusters) run between polls, every third of the Lease duration as
// Fleet.Run runs them, so that the poll figures hold none and each round
// is counted whole: lease is the Kubernetes requests of one replica's
// round, leasecpu its CPU time. A replica runs a round about every third
// of its Lease duration whatever its poll interval: nearly three per poll
// at the defaults (30 s each).
//
// A sample is up to 20 idle polls of each replica, fewer when the polls
// are slow (sampleBudget), and the samples up to three (measureBudget).
func BenchmarkFigureIdlePollReplicas(b *testing.B) {
	cp := realkube.Start(b, realkube.Options{})
	ready, caFile := startForgeProcess(b)
	roots := pool(b, caFile)
	rs := newBenchReplicaSet(b, cp, ready, roots)
	remote := ready.URL + "/org/clusters.git"
	for b.Loop() {
		var cpu, floor, wire, advert, charged, conditional, kube []float64
		began := time.Now()
		for len(cpu) < rounds && (len(cpu) == 0 || time.Since(began) < measureBudget) {
			s := rs.sample(b)
			polls := float64(s.polls)
			cpu = append(cpu, float64(s.cpu)/polls/1e6)
			wire = append(wire, float64(s.wire)/polls)
			charged = append(charged, float64(s.charged)/polls)
			conditional = append(conditional, float64(s.conditional)/polls)
			kube = append(kube, float64(s.kube)/polls)
			floor = append(floor, float64(lsRemoteCPU(b, remote, caFile))/1e6)
			advert = append(advert, float64(refAdvertisement(b, remote, roots)))
		}
		b.ReportMetric(float64(len(cpu)), "runs")
		reportIdlePoll(b, cpu, floor, wire, advert, charged, conditional)
		b.ReportMetric(median(kube), "kube-req/poll")
		b.ReportMetric(float64(rs.roundRequests)/float64(rs.rounds), "lease-req/round")
		b.ReportMetric(float64(rs.roundCPU)/float64(rs.rounds)/1e6, "leasecpu-ms/round")
	}
}

// benchReplica is one replica of BenchmarkFigureIdlePollReplicas with the
// counters of its traffic.
type benchReplica struct {
	agent     *agent.Agent
	fleet     *state.Fleet
	gitWire   *atomic.Int64
	github    *statusCounter
	githubLog *requestLog
	// kube counts the requests its Kubernetes client sends.
	kube *atomic.Int64
}

// benchReplicaSet is the replicas of BenchmarkFigureIdlePollReplicas and
// the count of their Lease rounds.
type benchReplicaSet struct {
	replicas []*benchReplica
	dirs     []string
	// lastRound is when the last round began; rounds counts the rounds
	// of single replicas, roundRequests and roundCPU their Kubernetes
	// requests and CPU time.
	lastRound     time.Time
	rounds        int
	roundRequests int64
	roundCPU      time.Duration
}

// newBenchReplicaSet starts benchReplicas replicas on the forge of ready,
// their state and Leases in the namespace benchNamespace of cp. Every
// cluster is recorded converged at the forge's main, the Leases are shared
// out, and each replica has made its first poll, which plans the open pull
// requests it owns; later polls are idle.
func newBenchReplicaSet(b *testing.B, cp *realkube.ControlPlane, ready forgeReady, roots *x509.CertPool) *benchReplicaSet {
	b.Helper()
	ctx := context.Background()
	admin := realkube.Client(b, cp.Admin)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	kubeconfig := cp.Kubeconfig(b, "taloscluster-agent", "system:masters")
	ids := make([]string, benchReplicas)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-replica-%d", i)
	}

	// The setup (the converged commits, the first share of the Leases)
	// goes through a client without the agent's rate limit, so that it
	// takes seconds: each replica's Leases are taken under its identity,
	// and its own Fleet renews them as its own.
	fast, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	fast.QPS, fast.Burst = 2000, 2000
	setup, err := state.NewKubeStore(realkube.Client(b, fast), state.KubeOptions{Namespace: benchNamespace})
	if err != nil {
		b.Fatal(err)
	}
	if err := parallel(ready.Dirs, 8, func(d string) error { return setup.SetLastConverged(ctx, d, ready.Main) }); err != nil {
		b.Fatal(err)
	}
	var setupFleets []*state.Fleet
	for _, id := range ids {
		f, err := setup.NewFleet(id, benchLease, nil)
		if err != nil {
			b.Fatal(err)
		}
		setupFleets = append(setupFleets, f)
	}
	// Every replica is a member before any shares out the clusters, so
	// none takes more than its third.
	if err := syncFleets(ctx, setupFleets); err != nil {
		b.Fatal(err)
	}
	for _, f := range setupFleets {
		f.SetClusters(ready.Dirs)
	}
	for attempt := 0; ; attempt++ {
		err := syncFleets(ctx, setupFleets)
		if _, perr := partition(setupFleets, ready.Dirs); err == nil && perr == nil {
			break
		} else if attempt == 10 {
			b.Fatalf("the Leases did not settle: %v", errors.Join(err, perr))
		}
	}

	rs := &benchReplicaSet{dirs: ready.Dirs}
	for _, id := range ids {
		rs.replicas = append(rs.replicas, newBenchReplica(b, id, kubeconfig, ready, roots))
	}
	if err := syncFleets(ctx, rs.fleets()); err != nil {
		b.Fatal(err)
	}
	rs.settled(b)

	// The first polls, at once as replicas make them, with the rounds
	// beside them as Fleet.Run makes them: each replica plans the pull
	// requests it owns.
	stop := make(chan struct{})
	var renew sync.WaitGroup
	var renewErr error
	renew.Go(func() {
		t := time.NewTicker(benchLease / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				renewErr = errors.Join(renewErr, syncFleets(ctx, rs.fleets()))
			}
		}
	})
	var wg sync.WaitGroup
	errs := make([]error, len(rs.replicas))
	for i, r := range rs.replicas {
		wg.Go(func() {
			errs[i] = r.agent.Poll(ctx)
			r.agent.Wait()
		})
	}
	wg.Wait()
	close(stop)
	renew.Wait()
	if err := errors.Join(append(errs, renewErr)...); err != nil {
		b.Fatal(err)
	}
	return rs
}

// pollSample is what one sample of idle polls counted, over all replicas.
type pollSample struct {
	polls                            int
	cpu                              time.Duration
	wire, charged, conditional, kube int64
}

// sample makes a round, then up to idlePolls idle polls of each replica,
// the replicas in turn, with a round before a poll when the last is a
// third of the Lease duration old. It fails when the share changes.
func (rs *benchReplicaSet) sample(b *testing.B) pollSample {
	b.Helper()
	ctx := context.Background()
	rs.round(b)
	owned := rs.settled(b)
	rs.reset()
	var s pollSample
	start := time.Now()
	for i := 0; i < idlePolls && (i == 0 || time.Since(start) < sampleBudget); i++ {
		for _, r := range rs.replicas {
			if time.Since(rs.lastRound) >= benchLease/3 {
				rs.round(b)
			}
			kube, cpu := r.kube.Load(), cpuTime()
			if err := r.agent.Poll(ctx); err != nil {
				b.Fatalf("replica %s: %v", r.fleet.Identity(), err)
			}
			s.cpu += cpuTime() - cpu
			s.kube += r.kube.Load() - kube
			s.polls++
		}
	}
	if now := rs.settled(b); !maps.EqualFunc(now, owned, slices.Equal) {
		b.Fatal("a replica's share changed during the polls")
	}
	for _, r := range rs.replicas {
		s.wire += r.gitWire.Load()
		s.charged += r.github.charged.Load()
		s.conditional += r.github.notModified.Load()
		if n := r.github.charged.Load(); n > 0 {
			b.Logf("replica %s (%d clusters): %d billed GitHub requests in %d idle polls: %s", r.fleet.Identity(),
				len(owned[r.fleet.Identity()]), n, s.polls/len(rs.replicas), r.githubLog.summary(billed))
		}
	}
	return s
}

// round runs a Lease round of every replica at once and counts it.
func (rs *benchReplicaSet) round(b *testing.B) {
	b.Helper()
	kube, cpu := rs.kubeRequests(), cpuTime()
	rs.lastRound = time.Now()
	if err := syncFleets(context.Background(), rs.fleets()); err != nil {
		b.Fatal(err)
	}
	rs.roundCPU += cpuTime() - cpu
	rs.roundRequests += rs.kubeRequests() - kube
	rs.rounds += len(rs.replicas)
}

// newBenchReplica builds the replica id as cmd/taloscluster's buildAgent
// does with the kubernetes backend: a KubeStore through kubeconfig with the
// agent's rate limit for its state, its report outbox and its Fleet.
func newBenchReplica(b *testing.B, id, kubeconfig string, ready forgeReady, roots *x509.CertPool) *benchReplica {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(benchToken), 0o600); err != nil {
		b.Fatal(err)
	}
	r := &benchReplica{gitWire: &atomic.Int64{}, githubLog: &requestLog{}, kube: &atomic.Int64{}}

	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	rc.QPS, rc.Burst = state.ClientQPS, state.ClientBurst
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return noredirect.Transport(rt) }
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, r.kube} })
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	store, err := state.NewKubeStore(cs, state.KubeOptions{Namespace: benchNamespace})
	if err != nil {
		b.Fatal(err)
	}
	if r.fleet, err = store.NewFleet(id, benchLease, nil); err != nil {
		b.Fatal(err)
	}
	r.fleet.SetClusters(ready.Dirs)

	tlsCfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	tr := &http.Transport{TLSClientConfig: tlsCfg, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, r.gitWire}, nil
	}}
	repo, err := gitsync.Open(ctx, gitsync.Options{URL: ready.URL + "/org/clusters.git", Dir: filepath.Join(dir, "repo"),
		Auth: gitsync.Auth{TokenFile: tokenFile}, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		b.Fatal(err)
	}
	r.github = &statusCounter{base: &loggingTransport{base: &http.Transport{TLSClientConfig: tlsCfg}, log: r.githubLog}}
	client, err := gh.New(gh.Options{APIURL: ready.URL + "/", Repo: "org/clusters", Token: benchToken, HTTPClient: &http.Client{Transport: r.github}})
	if err != nil {
		b.Fatal(err)
	}
	cfg := &agent.Config{Repository: agent.Repository{URL: "x", DefaultBranch: "main"},
		GitHub: agent.GitHub{Repo: "org/clusters", TokenFile: tokenFile}, SecretsDir: dir, DataDir: dir,
		State: agent.State{Backend: "kubernetes", Namespace: benchNamespace}}
	cfg.Defaults()
	reports, err := agent.OpenOutbox(ctx, cfg, store, r.fleet.OutboxName(), nil)
	if err != nil {
		b.Fatal(err)
	}
	r.agent = agent.New(cfg, agent.Deps{Repo: repo, Forge: client, Runner: emptyRunner{}, Progress: store,
		Outbox: reports, Fleet: roundsByHand{r.fleet}})
	b.Cleanup(r.agent.Close)
	return r
}

// roundsByHand is a replica's Fleet whose Lease rounds the benchmark runs
// (benchReplicaSet.round), in place of Fleet.Run.
type roundsByHand struct{ *state.Fleet }

func (roundsByHand) Run(ctx context.Context, _ func(string) bool) { <-ctx.Done() }

// reset zeroes the replicas' counters of git and GitHub traffic.
func (rs *benchReplicaSet) reset() {
	for _, r := range rs.replicas {
		r.gitWire.Store(0)
		r.github.charged.Store(0)
		r.github.notModified.Store(0)
		r.githubLog.reset()
	}
}

func (rs *benchReplicaSet) kubeRequests() int64 {
	var n int64
	for _, r := range rs.replicas {
		n += r.kube.Load()
	}
	return n
}

func (rs *benchReplicaSet) fleets() []*state.Fleet {
	var fleets []*state.Fleet
	for _, r := range rs.replicas {
		fleets = append(fleets, r.fleet)
	}
	return fleets
}

// settled fails unless every cluster is owned by exactly one replica, and
// returns each replica's clusters.
func (rs *benchReplicaSet) settled(b *testing.B) map[string][]string {
	b.Helper()
	owned, err := partition(rs.fleets(), rs.dirs)
	if err != nil {
		b.Fatal(err)
	}
	return owned
}

func syncFleets(ctx context.Context, fleets []*state.Fleet) error {
	errs := make([]error, len(fleets))
	var wg sync.WaitGroup
	for i, f := range fleets {
		wg.Go(func() { errs[i] = f.Sync(ctx, nil) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// partition returns each fleet's clusters by identity, or an error unless
// every one of dirs is owned by exactly one fleet, and no fleet has none.
func partition(fleets []*state.Fleet, dirs []string) (map[string][]string, error) {
	owners := map[string]int{}
	owned := map[string][]string{}
	for _, f := range fleets {
		st := f.Status()
		if len(st.Owned) == 0 {
			return nil, fmt.Errorf("replica %s owns no cluster", st.Identity)
		}
		owned[st.Identity] = st.Owned
		for _, c := range st.Owned {
			owners[c]++
		}
	}
	for _, d := range dirs {
		if owners[d] != 1 {
			return nil, fmt.Errorf("cluster %s is owned by %d replicas, want 1", d, owners[d])
		}
	}
	return owned, nil
}

// parallel calls fn for each item, n at a time.
func parallel(items []string, n int, fn func(string) error) error {
	work := make(chan string)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for it := range work {
				if err := fn(it); err != nil && errs[i] == nil {
					errs[i] = err
				}
			}
		})
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// requestLog counts a client's answered requests by method, path and
// status ("GET /repos/org/clusters/pulls 304").
type requestLog struct {
	mu   sync.Mutex
	seen map[string]int
}

func (l *requestLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = nil
}

func (l *requestLog) add(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]int{}
	}
	l.seen[key]++
}

// summary lists the requests whose keys keep selects, with their counts.
func (l *requestLog) summary(keep func(string) bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l.seen)) {
		if keep(k) {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, l.seen[k]))
		}
	}
	return strings.Join(parts, "; ")
}

// billed selects the requests of a requestLog not answered 304.
func billed(key string) bool { return !strings.HasSuffix(key, " 304") }

// loggingTransport records each answered request in log.
type loggingTransport struct {
	base http.RoundTripper
	log  *requestLog
}

func (t *loggingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil {
		t.log.add(fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, resp.StatusCode))
	}
	return resp, err
}

// countingTransport counts the requests it sends.
type countingTransport struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.base.RoundTrip(r)
}
