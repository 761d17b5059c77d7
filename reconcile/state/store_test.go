package state_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/state"
)

const (
	prodA = "clusters/prod-a"
	sha1  = "0123456789abcdef0123456789abcdef01234567"
	sha2  = "89abcdef0123456789abcdef0123456789abcdef"
)

// backend opens a state backend for a test; every call of open returns a
// new handle on the same state, as a restarted process would have.
type backend struct {
	name  string
	setup func(t *testing.T) (open func() state.Backend)
}

func backends() []backend {
	return []backend{
		{name: "dir", setup: func(t *testing.T) func() state.Backend {
			root := t.TempDir()
			return func() state.Backend { return state.NewDirStore(root) }
		}},
		{name: "kube", setup: func(t *testing.T) func() state.Backend {
			api := newSecretsAPI(t)
			return func() state.Backend { return newKubeStore(t, api) }
		}},
	}
}

func newKubeStore(t *testing.T, api *secretsAPI) *state.KubeStore {
	t.Helper()
	s, err := state.NewKubeStore(api.client(t), state.KubeOptions{Namespace: "taloscluster"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// forEachBackend runs test against every backend, in parallel.
func forEachBackend(t *testing.T, test func(t *testing.T, open func() state.Backend)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b.setup(t))
		})
	}
}

func TestGetAbsent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		s := open()
		if _, err := s.Get(t.Context(), prodA, state.KubeconfigFile); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("get from no state: %v, want fs.ErrNotExist", err)
		}
		if err := s.Put(t.Context(), prodA, state.TalosconfigFile, []byte("tc")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(t.Context(), prodA, state.KubeconfigFile); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("get of an absent file: %v, want fs.ErrNotExist", err)
		}
	})
}

func TestIdentityIsCreateOnly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		s := open()
		ctx := t.Context()
		if err := s.Create(ctx, prodA, state.IdentityFile, []byte("first identity")); err != nil {
			t.Fatal(err)
		}
		if err := s.Create(ctx, prodA, state.IdentityFile, []byte("second identity")); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("second create: %v, want fs.ErrExist", err)
		}
		if err := s.Put(ctx, prodA, state.IdentityFile, []byte("replaced")); !errors.Is(err, state.ErrCreateOnly) {
			t.Fatalf("put of the identity: %v, want ErrCreateOnly", err)
		}
		if err := open().Create(ctx, prodA, state.IdentityFile, []byte("after restart")); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("create after reopening: %v, want fs.ErrExist", err)
		}
		got, err := open().Get(ctx, prodA, state.IdentityFile)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "first identity" {
			t.Fatalf("identity is %q, want the first one", got)
		}
	})
}

func TestPutReplaces(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		s := open()
		ctx := t.Context()
		if err := s.Create(ctx, prodA, state.IdentityFile, []byte("identity")); err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{"one", "two", "two", ""} {
			if err := s.Put(ctx, prodA, state.KubeconfigFile, []byte(body)); err != nil {
				t.Fatal(err)
			}
			got, err := open().Get(ctx, prodA, state.KubeconfigFile)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != body {
				t.Fatalf("read %q, want %q", got, body)
			}
		}
		if got, _ := s.Get(ctx, prodA, state.IdentityFile); string(got) != "identity" {
			t.Fatalf("identity changed by a put of another file: %q", got)
		}
		if err := s.Create(ctx, prodA, state.KubeconfigFile, []byte("x")); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("create over a derived file: %v, want fs.ErrExist", err)
		}
	})
}

func TestDelete(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		s := open()
		ctx := t.Context()
		for _, name := range []string{state.IdentityFile, state.TalosconfigFile, state.KubeconfigFile} {
			if err := s.Create(ctx, prodA, name, []byte(name)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Delete(ctx, prodA, state.KubeconfigFile); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, prodA, state.KubeconfigFile); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("get after delete: %v, want fs.ErrNotExist", err)
		}
		if got, _ := s.Get(ctx, prodA, state.TalosconfigFile); string(got) != state.TalosconfigFile {
			t.Fatalf("delete took another file along: %q", got)
		}
		if err := s.Delete(ctx, prodA, state.KubeconfigFile); err != nil {
			t.Fatalf("deleting an absent file: %v", err)
		}
		// destroy removes the identity too; then a new one may be created.
		for _, name := range []string{state.IdentityFile, state.TalosconfigFile} {
			if err := s.Delete(ctx, prodA, name); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Create(ctx, prodA, state.IdentityFile, []byte("new")); err != nil {
			t.Fatalf("create after destroy: %v", err)
		}
	})
}

func TestClustersAreIsolated(t *testing.T) {
	t.Parallel()
	// Paths that read alike must not share state.
	clusters := []string{"clusters/prod-a", "clusters/prod_a", "clusters/Prod-A", "clusters/prod/a", "prod-a"}
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		s := open()
		ctx := t.Context()
		for _, c := range clusters {
			if err := s.Create(ctx, c, state.IdentityFile, []byte(c)); err != nil {
				t.Fatalf("create for %s: %v", c, err)
			}
			if _, err := s.Begin(ctx, c, state.Entry{Op: "create-vm", Target: c}); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range clusters {
			got, err := s.Get(ctx, c, state.IdentityFile)
			if err != nil || string(got) != c {
				t.Errorf("identity of %s: %q, %v", c, got, err)
			}
			open, err := s.Open(ctx, c)
			if err != nil || len(open) != 1 || open[0].Target != c {
				t.Errorf("journal of %s: %+v, %v", c, open, err)
			}
		}
	})
}

func TestInvalidNames(t *testing.T) {
	t.Parallel()
	badClusters := []string{"", "/clusters/prod-a", "../prod-a", "clusters/../etc", "clusters//prod-a", "clusters/prod-a/", ".", "clusters/.hidden", "clusters/prod a", "clusters/prod-a\n"}
	badNames := []string{"", "../talossecrets.yaml", "a/b", ".hidden", "sp ace", state.JournalFile}
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		s := open()
		ctx := t.Context()
		for _, c := range badClusters {
			if err := s.Put(ctx, c, state.KubeconfigFile, []byte("x")); !errors.Is(err, state.ErrInvalidName) {
				t.Errorf("put for cluster %q: %v, want ErrInvalidName", c, err)
			}
			if _, err := s.Begin(ctx, c, state.Entry{Op: "x"}); !errors.Is(err, state.ErrInvalidName) {
				t.Errorf("begin for cluster %q: %v, want ErrInvalidName", c, err)
			}
		}
		for _, n := range badNames {
			if err := s.Create(ctx, prodA, n, []byte("x")); !errors.Is(err, state.ErrInvalidName) {
				t.Errorf("create of %q: %v, want ErrInvalidName", n, err)
			}
			if _, err := s.Get(ctx, prodA, n); !errors.Is(err, state.ErrInvalidName) {
				t.Errorf("get of %q: %v, want ErrInvalidName", n, err)
			}
		}
	})
}

func TestJournalSurvivesReopening(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		ctx := t.Context()
		s := open()
		if got, err := s.Open(ctx, prodA); err != nil || len(got) != 0 {
			t.Fatalf("empty journal: %+v, %v", got, err)
		}
		vm4, err := s.Begin(ctx, prodA, state.Entry{Op: "create-vm", Target: "prod-a-worker-04", Commit: sha1})
		if err != nil {
			t.Fatal(err)
		}
		vm5, err := s.Begin(ctx, prodA, state.Entry{Op: "create-vm", Target: "prod-a-worker-05", Commit: sha1})
		if err != nil {
			t.Fatal(err)
		}
		reset, err := s.Begin(ctx, prodA, state.Entry{Op: "reset-node", Target: "prod-a-worker-01", Commit: sha1})
		if err != nil {
			t.Fatal(err)
		}
		if vm4 == vm5 || vm4 == "" {
			t.Fatalf("entry ids %q and %q", vm4, vm5)
		}
		if err := s.Done(ctx, prodA, vm5, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Done(ctx, prodA, reset, errors.New("resetting prod-a-worker-01: node unreachable\nstack trace line")); err != nil {
			t.Fatal(err)
		}

		// A restart: only the entry whose outcome is unknown is open.
		r := open()
		got, err := r.Open(ctx, prodA)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].ID != vm4 || got[0].Op != "create-vm" || got[0].Target != "prod-a-worker-04" || got[0].Commit != sha1 || got[0].Started.IsZero() || !got[0].Finished.IsZero() {
			t.Fatalf("open entries after reopening: %+v", got)
		}
		all, err := r.Entries(ctx, prodA)
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, e := range all {
			ids = append(ids, e.ID)
		}
		if !slices.Equal(ids, []string{vm4, vm5, reset}) {
			t.Fatalf("entries %v, want %v", ids, []string{vm4, vm5, reset})
		}
		if all[2].Error != "resetting prod-a-worker-01: node unreachable" || all[2].Finished.IsZero() {
			t.Fatalf("failed entry %+v", all[2])
		}

		if err := r.Done(ctx, prodA, vm4, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.Done(ctx, prodA, vm4, errors.New("late")); err != nil {
			t.Fatalf("finishing an entry twice: %v", err)
		}
		if err := r.Done(ctx, prodA, "no-such-id", nil); !errors.Is(err, state.ErrNoEntry) {
			t.Fatalf("finishing an unknown entry: %v, want ErrNoEntry", err)
		}
		if got, _ := open().Open(ctx, prodA); len(got) != 0 {
			t.Fatalf("open entries after finishing all: %+v", got)
		}
		if all, _ := open().Entries(ctx, prodA); all[0].Error != "" {
			t.Fatalf("a second Done changed the outcome: %+v", all[0])
		}
		if _, err := r.Begin(ctx, prodA, state.Entry{}); err == nil {
			t.Fatal("begin without an op succeeded")
		}
		if _, err := r.Begin(ctx, prodA, state.Entry{Op: "create-vm", Target: "a\nb"}); err == nil {
			t.Fatal("begin with a multi-line target succeeded")
		}
	})
}

func TestJournalKeepsFinishedEntriesBounded(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		ctx := t.Context()
		s := open()
		first, err := s.Begin(ctx, prodA, state.Entry{Op: "create-vm", Target: "kept-open"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 40 {
			id, err := s.Begin(ctx, prodA, state.Entry{Op: "apply-config", Target: fmt.Sprintf("node-%02d", i)})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Done(ctx, prodA, id, nil); err != nil {
				t.Fatal(err)
			}
		}
		all, err := open().Entries(ctx, prodA)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 33 || all[0].ID != first || all[1].Target != "node-08" || all[32].Target != "node-39" {
			t.Fatalf("kept %d entries, first %+v, want the open one and the last 32 finished", len(all), all[0])
		}
	})
}

func TestLastConverged(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		ctx := t.Context()
		s := open()
		if got, err := s.LastConverged(ctx, prodA); err != nil || got != "" {
			t.Fatalf("last converged of a new cluster: %q, %v", got, err)
		}
		for _, c := range []string{sha1, sha2, sha2} {
			if err := s.SetLastConverged(ctx, prodA, c); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := open().LastConverged(ctx, prodA); err != nil || got != sha2 {
			t.Fatalf("last converged after reopening: %q, %v, want %s", got, err, sha2)
		}
		if err := s.SetLastConverged(ctx, prodA, "main; rm -rf /"); err == nil {
			t.Fatal("recording a commit that is not a SHA succeeded")
		}
	})
}

func TestConcurrentCreateHasOneWinner(t *testing.T) {
	t.Parallel()
	for _, existing := range []bool{false, true} {
		name := "no state yet"
		if existing {
			name = "state exists"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			concurrentCreate(t, existing)
		})
	}
}

func concurrentCreate(t *testing.T, existing bool) {
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		ctx := t.Context()
		if existing {
			// The cluster already has state, so the race is between
			// updates of one object rather than creates.
			if err := open().Put(ctx, prodA, state.TalosconfigFile, []byte("tc")); err != nil {
				t.Fatal(err)
			}
		}
		const writers = 8
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			s := open() // each writer as a process of its own
			wg.Go(func() {
				errs[i] = s.Create(ctx, prodA, state.IdentityFile, []byte{byte('a' + i)})
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Errorf("writers %d and %d both won", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, fs.ErrExist):
				t.Errorf("writer %d: %v, want fs.ErrExist", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no writer won")
		}
		got, err := open().Get(ctx, prodA, state.IdentityFile)
		if err != nil || !bytes.Equal(got, []byte{byte('a' + winner)}) {
			t.Fatalf("identity %q, %v, want the winner's %q", got, err, string(rune('a'+winner)))
		}
		if existing {
			if got, _ := open().Get(ctx, prodA, state.TalosconfigFile); string(got) != "tc" {
				t.Fatalf("talosconfig lost in the race: %q", got)
			}
		}
	})
}

func TestConcurrentJournalWriters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, open func() state.Backend) {
		ctx := t.Context()
		const writers = 4
		ids := make([]string, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			s := open()
			wg.Go(func() {
				ids[i], errs[i] = s.Begin(ctx, prodA, state.Entry{Op: "create-vm", Target: fmt.Sprintf("vm-%d", i)})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("writer %d: %v", i, err)
			}
		}
		got, err := open().Open(ctx, prodA)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != writers {
			t.Fatalf("%d open entries, want %d: an update was lost", len(got), writers)
		}
	})
}
