package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/state"
)

// TestSecondAgentOnADataDirIsRefused starts a second agent on the data
// directory of a running one: it is refused, naming the first, before it
// touches the directory; once the first is closed, an agent starts there.
func TestSecondAgentOnADataDirIsRefused(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.231.0.0/24")
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	second, _, err := buildAgent(t.Context(), w.cfg, w.logs)
	if err == nil {
		second.Close()
		t.Fatal("a second agent started on the data directory of a running one")
	}
	var inUse *state.DataDirInUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("second agent: %v; want a DataDirInUseError", err)
	}
	host, _ := os.Hostname()
	for _, want := range []string{w.cfg.DataDir, fmt.Sprintf("taloscluster agent (pid %d on %s)", os.Getpid(), host), "one agent per data directory", "replicas"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	// Closing the first agent drops its lock: a new one starts there.
	w.restart(t)
	if err := w.agent.Poll(t.Context()); err != nil {
		t.Fatalf("poll by the agent started after the first closed: %v", err)
	}
}
