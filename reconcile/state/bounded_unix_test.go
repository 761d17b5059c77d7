//go:build unix

package state_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// A state file that is a named pipe or a device is refused at once, with
// one line naming the file, never waited on or read without end.
func TestStateFilesAreReadBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	root := t.TempDir()
	dirs := state.NewDirStore(root)
	dir, err := dirs.Dir(prodA)
	if err != nil {
		t.Fatal(err)
	}
	local := state.Local{Dir: t.TempDir()}
	for _, d := range []string{dir, filepath.Join(root, ".agent")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	fifo := func(path string) {
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Skipf("no named pipes here: %v", err)
		}
	}
	link := func(path string) {
		if err := os.Symlink("/dev/zero", path); err != nil {
			t.Fatal(err)
		}
	}
	fifo(filepath.Join(dir, state.IdentityFile))
	link(filepath.Join(dir, state.JournalFile))
	fifo(filepath.Join(root, ".agent", "outbox.json"))
	fifo(filepath.Join(local.Dir, state.IdentityFile))

	cases := []struct {
		name string
		file string
		read func() error
	}{
		{"dir identity", filepath.Join(dir, state.IdentityFile), func() error { _, err := dirs.Get(ctx, prodA, state.IdentityFile); return err }},
		{"dir journal", filepath.Join(dir, state.JournalFile), func() error { _, err := dirs.Open(ctx, prodA); return err }},
		{"dir journal update", filepath.Join(dir, state.JournalFile), func() error {
			_, err := dirs.Begin(ctx, prodA, state.Entry{Op: "create-vm", Target: "x"})
			return err
		}},
		{"agent document", filepath.Join(root, ".agent", "outbox.json"), func() error { _, err := dirs.GetAgentDoc(ctx, "outbox.json"); return err }},
		{"local identity", filepath.Join(local.Dir, state.IdentityFile), func() error { _, err := local.Get(ctx, "", state.IdentityFile); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- c.read() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("reading did not return in 5s")
			}
			if !errors.Is(err, boundedfile.ErrNotRegular) {
				t.Fatalf("error %v; want one saying it is not a regular file", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "reading "+c.file+": not a regular file") || strings.Contains(msg, "\n") {
				t.Errorf("error %q does not name %s on one line", msg, c.file)
			}
		})
	}
}
