package state_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/state"
)

func TestDirStoreLayoutAndModes(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "state")
	s := state.NewDirStore(root)
	ctx := t.Context()
	if err := s.Create(ctx, prodA, state.IdentityFile, []byte("identity")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, prodA, state.KubeconfigFile, []byte("kc")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, prodA, state.Entry{Op: "create-vm", Target: "prod-a-worker-04", Commit: sha1}); err != nil {
		t.Fatal(err)
	}
	dir, err := s.Dir(prodA)
	if err != nil {
		t.Fatal(err)
	}
	slug, _ := state.Slug(prodA)
	if dir != filepath.Join(root, slug) || !strings.HasPrefix(slug, "clusters-prod-a-") {
		t.Fatalf("directory %s (slug %s)", dir, slug)
	}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", st.Mode().Perm())
	}
	for _, name := range []string{state.IdentityFile, state.KubeconfigFile, state.JournalFile} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", name, st.Mode().Perm())
		}
	}
	assertNoTemp(t, dir)

	raw, err := os.ReadFile(filepath.Join(dir, state.JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Version int           `json:"version"`
		Entries []state.Entry `json:"entries"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("journal is not JSON: %v\n%s", err, raw)
	}
	if doc.Version != 1 || len(doc.Entries) != 1 || doc.Entries[0].Target != "prod-a-worker-04" {
		t.Fatalf("journal document %s", raw)
	}
}

func TestDirStoreRefusesCorruptJournal(t *testing.T) {
	t.Parallel()
	s := state.NewDirStore(t.TempDir())
	ctx := t.Context()
	dir, _ := s.Dir(prodA)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, state.JournalFile), []byte(`{"version": 1, "entries": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, prodA); err == nil {
		t.Fatal("reading a truncated journal succeeded")
	}
	if _, err := s.Begin(ctx, prodA, state.Entry{Op: "create-vm"}); err == nil {
		t.Fatal("beginning an entry over a truncated journal succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, state.JournalFile)); string(b) != `{"version": 1, "entries": [` {
		t.Fatalf("the corrupt journal was overwritten: %s", b)
	}
}

func TestDirStoreHonoursCancellation(t *testing.T) {
	t.Parallel()
	s := state.NewDirStore(t.TempDir())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Put(ctx, prodA, state.KubeconfigFile, []byte("kc")); !errors.Is(err, context.Canceled) {
		t.Fatalf("put with a cancelled context: %v", err)
	}
	if _, err := s.Begin(ctx, prodA, state.Entry{Op: "x"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("begin with a cancelled context: %v", err)
	}
}
