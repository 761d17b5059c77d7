//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestValidateRefusesAFIFO: a FIFO as cluster.yaml used to block every
// command; it must be refused at once.
func TestValidateRefusesAFIFO(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "cluster.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := cli(t, "validate", "-C", dir)
		done <- result{code, stderr}
	}()
	select {
	case r := <-done:
		if r.code != 1 || r.stderr != "error: cluster.yaml: not a regular file\n" {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("validate blocked on a FIFO")
	}
}
