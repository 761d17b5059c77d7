package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/talos"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// What the plan could not read is never "No changes": each world below
// breaks one read of a converged lab cluster; plan exits 1, names what it
// could not read in text and JSON, and converge changes nothing and exits
// non-zero naming it.
func TestPlanIsIncompleteWhenAReadFails(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, net string
		// breakIt breaks the read; nodes are the cluster's Talos nodes.
		breakIt func(l *lab.Lab, nodes []talos.NodeState)
		// says is what plan must name (text, as an incomplete reason or
		// an error).
		says string
		// converge: converge must fail too, changing nothing.
		converge bool
	}{
		{"etcd members on every control plane", "127.66.0.0/24", func(l *lab.Lab, nodes []talos.NodeState) {
			for _, n := range nodes {
				if n.Role == talos.RoleControlPlane {
					l.Talos.FailCalls(n.Addr, "EtcdMemberList", 1000, codes.Unavailable)
				}
			}
		}, "incomplete: the etcd members could not be read", true},
		{"a worker's Talos version", "127.67.0.0/24", func(l *lab.Lab, nodes []talos.NodeState) {
			for _, n := range nodes {
				if n.Role == talos.RoleWorker {
					l.Talos.FailCalls(n.Addr, "Version", 1000, codes.Internal)
				}
			}
		}, "incomplete: the Talos API of unread-worker-01", false},
		{"a running machine config", "127.68.0.0/24", func(l *lab.Lab, nodes []talos.NodeState) {
			l.Talos.FailCalls(nodes[0].Addr, "/cosi.resource.State/Get", 1000, codes.Internal)
		}, "incomplete: the running machine config of unread-", true},
		{"a guest agent", "127.218.0.0/24", func(l *lab.Lab, _ []talos.NodeState) {
			l.PVE.Fail("qemu.agent.interfaces", 1000, 500, "QEMU guest agent is not running")
		}, "incomplete: the address of unread-", true},
		{"the ISO listing", "127.69.0.0/24", func(l *lab.Lab, _ []talos.NodeState) {
			l.PVE.Fail("storage.content.list", 1000, 500, "storage is busy")
		}, "listing the ISOs of storage", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l, dir := labCluster(t, c.net, "unread", 1)
			if code, stdout, stderr := cli(t, "converge", "-C", dir, "--yes"); code != 0 {
				t.Fatalf("first converge exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			var nodes []talos.NodeState
			for _, n := range l.Talos.Nodes() {
				if n.Cluster == "unread" {
					nodes = append(nodes, n)
				}
			}
			c.breakIt(l, nodes)

			code, stdout, stderr := cli(t, "plan", "-C", dir)
			if code != 1 || !strings.Contains(stdout+stderr, c.says) || strings.Contains(stdout, "No changes") {
				t.Fatalf("plan exit %d, want 1 saying %q and never No changes\nstdout:\n%s\nstderr:\n%s", code, c.says, stdout, stderr)
			}
			if strings.HasPrefix(c.says, "incomplete: ") {
				code, stdout, _ = cli(t, "plan", "-C", dir, "-o", "json")
				var p plan.Plan
				if err := json.Unmarshal([]byte(stdout), &p); err != nil || code != 1 || !p.Incomplete || len(p.IncompleteReasons) == 0 {
					t.Fatalf("plan -o json exit %d, incomplete %v %q (%v)\n%s", code, p.Incomplete, p.IncompleteReasons, err, stdout)
				}
			}
			if !c.converge {
				return
			}
			logged := len(l.PVE.Log())
			// The engine as converge runs it, with a short read budget: a
			// health gate waits on an API that keeps failing no longer.
			out := &triggerWriter{}
			e := faultEngine(t, dir, out, 5*time.Minute)
			e.ReadBudget = 2 * time.Second
			err := e.Converge(t.Context())
			what := strings.TrimPrefix(c.says, "incomplete: ")
			if c.name == "etcd members on every control plane" {
				what = "the etcd members could not be"
			}
			if err == nil || !strings.Contains(err.Error(), what) {
				t.Fatalf("converge ended with %v, want a failure naming %q\n%s", err, what, out.String())
			}
			for _, op := range l.PVE.Log()[logged:] {
				if op.Method != "GET" {
					t.Errorf("converge changed Proxmox: %s %s", op.Method, op.Path)
				}
			}
		})
	}
}

// A plan with warnings and nothing to change lists them under "Nothing to
// change", never "No changes".
func TestPlanWithOnlyWarningsSaysSo(t *testing.T) {
	t.Parallel()
	_, dir := labCluster(t, "127.70.0.0/24", "warned", 0)
	if code, stdout, stderr := cli(t, "converge", "-C", dir, "--yes"); code != 0 {
		t.Fatalf("first converge exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// A plugin section validates but does nothing yet: a warning.
	f, err := os.OpenFile(filepath.Join(dir, "cluster.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("\nrancher:\n  admins: [alice]\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	code, stdout, stderr := cli(t, "plan", "-C", dir)
	if code != 0 || !strings.Contains(stdout, "Nothing to change; 1 warning:\nwarning: the rancher section") || strings.Contains(stdout, "No changes") {
		t.Fatalf("plan exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = cli(t, "converge", "-C", dir, "--yes")
	if code != 0 || !strings.Contains(stdout+stderr, "warning: the rancher section") || !strings.Contains(stdout+stderr, "nothing to change; 1 warning(s) above") {
		t.Fatalf("converge exit %d, want the warning printed\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// The health barrier waits for what changes on its own, not for an API
// that keeps answering with errors: with the etcd member list failing on
// every control plane, converge ends within its read budget, far before
// its boot timeout, naming what it could not read.
func TestHealthGateEndsWhenAnAPIKeepsFailing(t *testing.T) {
	t.Parallel()
	l, dir := labCluster(t, "127.217.0.0/24", "failing", 0)
	if code, stdout, stderr := cli(t, "converge", "-C", dir, "--yes"); code != 0 {
		t.Fatalf("first converge exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	grown := strings.Replace(string(readFile(t, filepath.Join(dir, "cluster.yaml"))), "count: 0\n", "count: 1\n", 1)
	write(t, dir, "cluster.yaml", grown)
	for _, n := range l.Talos.Nodes() {
		if n.Cluster == "failing" && n.Role == talos.RoleControlPlane {
			l.Talos.FailCalls(n.Addr, "EtcdMemberList", 100000, codes.Internal)
		}
	}
	out := &triggerWriter{}
	e := faultEngine(t, dir, out, 5*time.Minute)
	e.ReadBudget = 2 * time.Second
	started := time.Now()
	err := e.Converge(t.Context())
	took := time.Since(started)
	if err == nil || !strings.Contains(err.Error(), "could not be read for 2s") || !strings.Contains(err.Error(), "the etcd members could not be listed") {
		t.Fatalf("converge ended with %v, want the health gate to give up naming the etcd members\n%s", err, out.String())
	}
	if took > time.Minute {
		t.Fatalf("converge took %s, want it to end within its read budget", took)
	}
}
