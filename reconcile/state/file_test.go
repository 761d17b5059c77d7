package state_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/state"
)

func TestCreateFileNeverOverwrites(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "talossecrets.yaml")
	if err := state.CreateFile(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := state.CreateFile(path, []byte("second"), 0o600)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second create: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "first" {
		t.Fatalf("file overwritten: %q", b)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	assertNoTemp(t, filepath.Dir(path))
}

func TestCreateFileRaceHasOneWinner(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "id")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = state.CreateFile(path, []byte{byte('a' + i)}, 0o600)
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, fs.ErrExist):
			t.Errorf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d writers won, want exactly 1", wins)
	}
	assertNoTemp(t, filepath.Dir(path))
}

func TestWriteFileReplaces(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	for _, body := range []string{"one", "two"} {
		if err := state.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != body {
			t.Fatalf("read %q, want %q", b, body)
		}
	}
	assertNoTemp(t, filepath.Dir(path))
}

func TestWriteFileMissingDirFails(t *testing.T) {
	t.Parallel()
	err := state.WriteFile(filepath.Join(t.TempDir(), "nope", "kubeconfig"), []byte("x"), 0o600)
	if err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".tmp" {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}
