//go:build unix

package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// A secrets.yaml in the agent's secrets directory that is a named pipe is
// refused at once, naming the file, instead of blocking the run.
func TestClusterFilesRefuseANamedPipeForSecrets(t *testing.T) {
	t.Parallel()
	tree := fstest.MapFS{"clusters/a/cluster.yaml": {Data: []byte("name: a\ninclude: [secrets.yaml]\n")}}
	secrets := t.TempDir()
	if err := os.MkdirAll(filepath.Join(secrets, "clusters", "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(secrets, "clusters", "a", "secrets.yaml"), 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	files, err := agent.ClusterFiles(tree, secrets, "clusters/a")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := spec.LoadFS(files, "clusters/a", spec.Options{})
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("loading the cluster did not return in 5s")
	}
	if err == nil || !strings.Contains(err.Error(), "secrets.yaml") || !strings.Contains(err.Error(), "not a regular file (a named pipe)") {
		t.Fatalf("loading the cluster: %v; want secrets.yaml refused as a named pipe", err)
	}
}
