package state_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/state"
)

// TestDataDirLockNamesItsHolderAndDiesWithIt takes a data directory's lock
// in another process: a second agent is refused, naming that process;
// once it is killed the kernel drops the lock and the next agent takes it.
func TestDataDirLockNamesItsHolderAndDiesWithIt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/data" // created by the lock
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestDataDirLockHelperProcess$")
	cmd.Env = append(os.Environ(), "STATE_DATADIR_HELPER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	_, err = state.LockDataDir(dir, "taloscluster agent")
	var inUse *state.DataDirInUseError
	if !errors.As(err, &inUse) || inUse.Holder.PID != cmd.Process.Pid || inUse.Holder.Since.IsZero() {
		t.Fatalf("second agent: %v (%+v); want a DataDirInUseError naming pid %d", err, inUse, cmd.Process.Pid)
	}
	host, _ := os.Hostname()
	for _, want := range []string{dir, fmt.Sprintf("pid %d on %s", cmd.Process.Pid, host), "taloscluster agent --helper", "one agent per data directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	release, err := state.LockDataDir(dir, "taloscluster agent")
	if err != nil {
		t.Fatalf("lock after the holder died: %v", err)
	}
	// Within one process too, a second holder is refused until release.
	if _, err := state.LockDataDir(dir, "taloscluster agent"); !errors.As(err, &inUse) || inUse.Holder.PID != os.Getpid() {
		t.Fatalf("second lock in the same process: %v", err)
	}
	release()
	release() // twice is harmless
	again, err := state.LockDataDir(dir, "taloscluster agent")
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again()
}

// TestDataDirLockHelperProcess is the other process of
// TestDataDirLockNamesItsHolderAndDiesWithIt.
func TestDataDirLockHelperProcess(t *testing.T) {
	dir := os.Getenv("STATE_DATADIR_HELPER_DIR")
	if dir == "" {
		t.Skip("run by TestDataDirLockNamesItsHolderAndDiesWithIt")
	}
	if _, err := state.LockDataDir(dir, "taloscluster agent --helper"); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute)
	os.Exit(0)
}
