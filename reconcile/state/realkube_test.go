package state_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/lab/kube/realkube"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// realStore starts a real kube-apiserver (skipped without its binaries;
// CI has them), creates namespace ns and returns a store reached through
// a kubeconfig file, as an agent outside the cluster would.
func realStore(t *testing.T, cp *realkube.ControlPlane, ns string, lease time.Duration) (*state.KubeStore, kubernetes.Interface) {
	t.Helper()
	admin := realkube.Client(t, cp.Admin)
	if _, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !isExists(err) {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig(t, "taloscluster-agent", "system:masters"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = state.ClientQPS, state.ClientBurst
	client := realkube.Client(t, cfg)
	s, err := state.NewKubeStore(client, state.KubeOptions{Namespace: ns, LeaseDuration: lease})
	if err != nil {
		t.Fatal(err)
	}
	return s, admin
}

func isExists(err error) bool {
	return err != nil && bytes.Contains([]byte(err.Error()), []byte("already exists"))
}

// TestRealKubeStore runs the kubernetes backend against a real API server:
// concurrent writers never lose or replace the identity, the journal and
// the agent's documents round-trip, and the mutation lock is exclusive.
func TestRealKubeStore(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{})
	ctx := t.Context()

	t.Run("identity is create-only under concurrency", func(t *testing.T) {
		// Four writers, each with its own client, as four processes would be.
		var writers []*state.KubeStore
		for range 4 {
			w, _ := realStore(t, cp, "state-identity", 0)
			writers = append(writers, w)
		}
		s := writers[0]
		var wg sync.WaitGroup
		wins := make(chan string, len(writers))
		for i, s := range writers {
			wg.Go(func() {
				id := fmt.Sprintf("identity-%d", i)
				err := s.Create(ctx, "clusters/prod-a", state.IdentityFile, []byte(id))
				switch {
				case err == nil:
					wins <- id
				case !errors.Is(err, fs.ErrExist):
					t.Errorf("writer %d: %v", i, err)
				}
				// Other files change at the same time.
				if err := s.Put(ctx, "clusters/prod-a", state.KubeconfigFile, []byte(id)); err != nil {
					t.Errorf("writer %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		close(wins)
		var won []string
		for w := range wins {
			won = append(won, w)
		}
		got, err := s.Get(ctx, "clusters/prod-a", state.IdentityFile)
		if len(won) != 1 || err != nil || string(got) != won[0] {
			t.Fatalf("winners %v, identity %q (%v): want exactly one writer to create it and keep it", won, got, err)
		}
		if _, err := s.Begin(ctx, "clusters/prod-a", state.Entry{Op: "create-vm", Target: "prod-a-cp-01"}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetLastConverged(ctx, "clusters/prod-a", "0123456789abcdef0123456789abcdef01234567"); err != nil {
			t.Fatal(err)
		}
		if open, err := s.Open(ctx, "clusters/prod-a"); err != nil || len(open) != 1 {
			t.Fatalf("open journal entries %v, %v", open, err)
		}
		if last, err := s.LastConverged(ctx, "clusters/prod-a"); err != nil || last != "0123456789abcdef0123456789abcdef01234567" {
			t.Fatalf("last converged %q, %v", last, err)
		}
		if got, err := s.Get(ctx, "clusters/prod-a", state.IdentityFile); err != nil || string(got) != won[0] {
			t.Fatalf("the identity changed to %q (%v)", got, err)
		}
		agentDocsContract(t, s)
	})

	t.Run("mutation lock is exclusive", func(t *testing.T) {
		s, _ := realStore(t, cp, "state-lock", 3*time.Second)
		other, _ := realStore(t, cp, "state-lock", 3*time.Second)
		_, release, err := s.Lock(ctx, "clusters/prod-a", "agent converge", false)
		if err != nil {
			t.Fatal(err)
		}
		var locked *state.LockedError
		if _, _, err := other.Lock(ctx, "clusters/prod-a", "taloscluster converge", false); !errors.As(err, &locked) {
			t.Fatalf("a second run took the held lock: %v", err)
		}
		release()
		_, release2, err := other.Lock(ctx, "clusters/prod-a", "taloscluster converge", false)
		if err != nil {
			t.Fatalf("after release: %v", err)
		}
		release2()
	})
}

// TestRealFleetSharesClustersAndTakesOver: three replicas share six
// clusters, two each, every cluster owned by exactly one; when one replica
// dies without a word, the others take its clusters once its Leases
// expire; when it gives its clusters up on shutdown, at once.
func TestRealFleetSharesClustersAndTakesOver(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{})
	ctx := t.Context()
	clusters := []string{"clusters/a", "clusters/b", "clusters/c", "clusters/d", "clusters/e", "clusters/f"}
	const lease = 3 * time.Second
	var fleets []*state.Fleet
	for i := range 3 {
		s, _ := realStore(t, cp, "fleet", lease)
		f, err := s.NewFleet(fmt.Sprintf("replica-%d", i), lease, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
		if err != nil {
			t.Fatal(err)
		}
		f.SetClusters(clusters)
		fleets = append(fleets, f)
	}
	rounds := func(fs []*state.Fleet, n int) {
		t.Helper()
		for range n {
			for _, f := range fs {
				if err := f.Sync(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	owners := func(fs []*state.Fleet) map[string][]string {
		out := map[string][]string{}
		for _, f := range fs {
			for _, c := range f.Status().Owned {
				out[c] = append(out[c], f.Identity())
			}
		}
		return out
	}
	check := func(fs []*state.Fleet, perReplica int) {
		t.Helper()
		o := owners(fs)
		for _, c := range clusters {
			if len(o[c]) != 1 {
				t.Fatalf("cluster %s owned by %v, want exactly one replica (all: %v)", c, o[c], o)
			}
		}
		for _, f := range fs {
			if st := f.Status(); len(st.Owned) != perReplica || st.Replicas != len(fs) {
				t.Fatalf("replica %s owns %v of %d replicas, want %d clusters (all: %v)", st.Identity, st.Owned, st.Replicas, perReplica, o)
			}
		}
	}
	// The first replica to sync sees only itself and takes every cluster;
	// once it sees the others it gives up its surplus, and they take it.
	rounds(fleets, 3)
	check(fleets, 2)

	// replica-2 dies: it neither renews nor releases. Until its Leases
	// expire its clusters stay unowned by the others; then they are shared.
	dead := fleets[2]
	orphaned := dead.Status().Owned
	alive := fleets[:2]
	rounds(alive, 1)
	for _, c := range orphaned {
		for _, f := range alive {
			if f.Owns(c) {
				t.Fatalf("%s took %s before the dead replica's Lease expired", f.Identity(), c)
			}
		}
	}
	// The live replicas go on with their rounds (every third of the Lease
	// in production) while the dead one's Leases run out.
	for until := time.Now().Add(lease + 500*time.Millisecond); time.Now().Before(until); {
		rounds(alive, 1)
		time.Sleep(lease / 6)
	}
	rounds(alive, 3)
	check(alive, 3)
	if dead.Owns(orphaned[0]) {
		t.Fatal("the dead replica still thinks it owns a cluster after its Lease expired")
	}

	// A replica that shuts down gives its clusters up at once.
	alive[0].Release(ctx)
	rounds(alive[1:], 2)
	check(alive[1:], 6)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// countingTransport counts the requests a client sends.
type countingTransport struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

// TestRealFleetRequestsPerRound measures what sharing costs the API
// server: once the shares settle, a round of a replica is one read and one
// write of its membership, one list, and one write per cluster it owns.
// The figures for 30 clusters and 2 or 3 replicas go to the test log (and
// docs/operations.md).
func TestRealFleetRequestsPerRound(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{})
	ctx := t.Context()
	var clusters []string
	for i := range 30 {
		clusters = append(clusters, fmt.Sprintf("clusters/c%02d", i))
	}
	for _, n := range []int{2, 3} {
		ns := fmt.Sprintf("scale-%d", n)
		var fleets []*state.Fleet
		var counts []*atomic.Int64
		for i := range n {
			realStore(t, cp, ns, 0) // creates the namespace
			cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig(t, "taloscluster-agent", "system:masters"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.QPS, cfg.Burst = state.ClientQPS, state.ClientBurst
			count := &atomic.Int64{}
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, count} }
			s, err := state.NewKubeStore(realkube.Client(t, cfg), state.KubeOptions{Namespace: ns})
			if err != nil {
				t.Fatal(err)
			}
			f, err := s.NewFleet(fmt.Sprintf("replica-%d", i), 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			f.SetClusters(clusters)
			fleets = append(fleets, f)
			counts = append(counts, count)
		}
		// Settle: the first replica takes every cluster, sheds the surplus
		// when it sees the others, and they take it.
		for range 3 {
			for _, f := range fleets {
				if err := f.Sync(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, f := range fleets {
			owned := len(f.Status().Owned)
			if want := 30 / n; owned != want {
				t.Fatalf("%d replicas: replica %d owns %d clusters, want %d", n, i, owned, want)
			}
			before := counts[i].Load()
			if err := f.Sync(ctx, nil); err != nil {
				t.Fatal(err)
			}
			got := counts[i].Load() - before
			if want := int64(3 + owned); got != want {
				t.Errorf("%d replicas: replica %d sent %d requests in a round, want %d (membership read and write, one list, one write per owned cluster)", n, i, got, want)
			}
			t.Logf("%d replicas, 30 clusters: replica %d owns %d and sends %d Kubernetes API requests per round (a round every lease_duration/3, 10s by default)", n, i, owned, got)
		}
	}
}
