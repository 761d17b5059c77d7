package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// startLab starts a fast lab whose bridge vmbr0 is on net; the test
// closes it.
func startLab(t *testing.T, net string) *lab.Lab {
	t.Helper()
	l, err := lab.Start(t.Context(), lab.Options{
		Bridges:      map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix(net)},
		TaskDuration: -1, BootDelay: 20 * time.Millisecond, InstallDelay: 20 * time.Millisecond,
		RebootDelay: 20 * time.Millisecond, ReadyDelay: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// labCluster starts a lab on net and writes a cluster directory for it.
func labCluster(t *testing.T, net, name string, workers int) (*lab.Lab, string) {
	t.Helper()
	l := startLab(t, net)
	dir := t.TempDir()
	if err := l.WriteCluster(dir, lab.Cluster{Name: name, Workers: workers, Bridge: "vmbr0"}); err != nil {
		t.Fatal(err)
	}
	return l, dir
}

// TestStatusFailsWhenProxmoxCannotBeRead: status prints what it could
// read and exits 1 with the reason when Proxmox does not answer or refuses
// the token.
func TestStatusFailsWhenProxmoxCannotBeRead(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, net string
		breakIt   func(t *testing.T, l *lab.Lab, dir string)
		reason    string
	}{
		{"unreachable", "127.91.0.0/24", func(_ *testing.T, l *lab.Lab, _ string) { l.Close() }, "connect"},
		{"token rejected", "127.92.0.0/24", func(t *testing.T, l *lab.Lab, dir string) {
			write(t, dir, "secrets.yaml", "proxmox:\n  token_id: \""+l.TokenID+"\"\n  token_secret: \"00000000-0000-0000-0000-000000000000\"\n")
		}, "401"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l, dir := labCluster(t, c.net, "seen", 0)
			c.breakIt(t, l, dir)
			code, stdout, stderr := cli(t, "status", "-C", dir)
			if code != 1 {
				t.Fatalf("status exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if !strings.Contains(stdout, "Cluster seen (proxmox)") {
				t.Errorf("status printed nothing of what it could read:\n%s", stdout)
			}
			if !regexp.MustCompile(`(?m)^error: reading the cluster: .*Proxmox.*` + c.reason).MatchString(stderr) {
				t.Errorf("stderr does not give the reason (%s):\n%s", c.reason, stderr)
			}
			if strings.Contains(stdout+stderr, l.TokenSecret) {
				t.Error("the token secret was printed")
			}
			code, stdout, _ = cli(t, "status", "-C", dir, "-o", "json")
			var st clusterStatus
			if err := json.Unmarshal([]byte(stdout), &st); err != nil || len(st.Problems) == 0 {
				t.Errorf("status -o json: %v, problems %v\n%s", err, st.Problems, stdout)
			}
			if code != 1 {
				t.Errorf("status -o json exit %d, want 1", code)
			}
		})
	}
}

// TestConvergeAndDestroyTakeTheClusterLock holds the cluster's lock as
// another run would: converge and destroy fail at once naming it, and
// with --wait run once it is released.
func TestConvergeAndDestroyTakeTheClusterLock(t *testing.T) {
	t.Parallel()
	_, dir := labCluster(t, "127.93.0.0/24", "held", 0)
	_, release, err := state.Local{Dir: dir}.Lock(t.Context(), dir, "taloscluster converge", false)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	busy := regexp.MustCompile(`(?m)^error: cluster held is being converged by taloscluster converge \(pid ` + strconv.Itoa(os.Getpid()) +
		` on ` + regexp.QuoteMeta(host) + `\) since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)
	for _, args := range [][]string{{"converge", "--yes"}, {"destroy", "--yes"}} {
		code, _, stderr := cli(t, append(args, "-C", dir)...)
		if code != 1 || !busy.MatchString(stderr) {
			t.Errorf("%s while the cluster is held: exit %d\n%s", args[0], code, stderr)
		}
	}
	// Plans do not lock.
	if code, _, stderr := cli(t, "plan", "-C", dir); code != 0 {
		t.Errorf("plan while the cluster is held: exit %d\n%s", code, stderr)
	}

	// converge --wait waits for the holder, saying whom it waits for, and
	// runs once the lock is released.
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(t.Context(), []string{"converge", "--yes", "--wait", "-C", dir}, &stdout, &stderr) }()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(stdout.String(), "waiting for it to finish") {
		select {
		case code := <-done:
			t.Fatalf("converge --wait did not wait: exit %d\n%s%s", code, stdout.String(), stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("converge --wait does not say it waits:\n%s%s", stdout.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stdout.String(), "cluster held is being converged by taloscluster converge (pid ") {
		t.Errorf("converge --wait does not name the holder:\n%s", stdout.String())
	}
	release()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("converge --wait: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("converge --wait did not finish")
	}
	if code, stdout, stderr := cli(t, "status", "-C", dir); code != 0 {
		t.Errorf("status of a healthy cluster: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := cli(t, "destroy", "--yes", "-C", dir); code != 0 {
		t.Fatalf("destroy: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, state.LockFile)); !os.IsNotExist(err) {
		t.Errorf("the lock file is left behind: %v", err)
	}
}
