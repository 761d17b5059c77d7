//go:build unix

package spec_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestFIFOIsRefusedWithoutBlocking: a FIFO as cluster.yaml or as an include
// must be reported, never opened (opening one blocks until a writer comes).
func TestFIFOIsRefusedWithoutBlocking(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, fifo string
		extra      map[string]string
		want       string
	}{
		{name: "cluster.yaml", fifo: "cluster.yaml", want: "cluster.yaml: not a regular file"},
		{name: "secrets.yaml", fifo: "secrets.yaml", extra: map[string]string{"cluster.yaml": minimalCluster},
			want: "cluster.yaml:1: include[0]: include secrets.yaml is not a file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, body := range tc.extra {
				writeFile(t, dir, name, body)
			}
			fifo := filepath.Join(dir, tc.fifo)
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			done := make(chan error, 1)
			go func() {
				_, _, err := spec.Load(dir, spec.Options{})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || err.Error() != tc.want {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				// Unblock the reader so the goroutine ends, then fail.
				if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatal("Load blocked on a FIFO")
			}
		})
	}
	t.Run("a symbolic link to a FIFO", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		if err := os.Symlink("pipe", filepath.Join(dir, "cluster.yaml")); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := spec.Load(dir, spec.Options{})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("error %v", err)
			}
		case <-time.After(10 * time.Second):
			if w, err := os.OpenFile(filepath.Join(dir, "pipe"), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			t.Fatal("Load blocked on a FIFO")
		}
	})
}
