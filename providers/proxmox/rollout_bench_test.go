package proxmox_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// BenchmarkFigureRollout measures a Talos upgrade (a new schematic) of 3
// control planes and 20 workers in the lab, with simulated reboot times,
// for rollout.max_unavailable 1, 3 and 5, against its critical path: the
// control planes' restarts one after the other plus, per batch of workers,
// its slowest restart, each from the node leaving to its return (the lab's
// events). The target is 1.2 times the critical path; what lies above it
// is the engine's own cost (gates, drains, applies, installs, polling).
// The cluster is built once; each case upgrades it to the other schematic.
//
// A second figure, "nodes", sets the same wall time against the critical
// path of the nodes' own simulated times: each node's install (the lab's
// InstallDelay), its restart as above and its wait to be Ready again (the
// lab's ReadyDelay). What lies above that floor is the engine's alone.
func BenchmarkFigureRollout(b *testing.B) {
	const (
		workers = 20
		install = 100 * time.Millisecond
		ready   = 200 * time.Millisecond
	)
	ctx := context.Background()
	l, dir, engine := benchCluster(b, lab.Options{
		Bridges:      map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix("127.171.0.0/24")},
		TaskDuration: -1, BootDelay: 100 * time.Millisecond, InstallDelay: install,
		RebootDelay: 300 * time.Millisecond, ReadyDelay: ready,
	}, "bench", workers)
	path := filepath.Join(dir, "cluster.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	write := func(extensions string, maxUnavailable int) {
		text := string(data) + fmt.Sprintf("\nrollout:\n  max_unavailable: %d\n", maxUnavailable)
		if extensions != "" {
			text = strings.Replace(text, "  version: v1.13.8\n", "  version: v1.13.8\n  extensions: "+extensions+"\n", 1)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	write("", 1)
	if err := engine().Converge(ctx); err != nil {
		b.Fatalf("first build: %v", err)
	}
	cps := []string{"bench-controlplane-01", "bench-controlplane-02", "bench-controlplane-03"}
	var hosts []string
	for i := 1; i <= workers; i++ {
		hosts = append(hosts, fmt.Sprintf("bench-worker-%02d", i))
	}
	schematics := []string{"[siderolabs/iscsi-tools]", ""}
	upgrade := 0
	for _, maxUnavailable := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("max_unavailable=%d", maxUnavailable), func(b *testing.B) {
			for b.Loop() {
				write(schematics[upgrade%2], maxUnavailable)
				upgrade++
				mark := time.Now()
				if err := engine().Converge(ctx); err != nil {
					b.Fatalf("upgrade: %v", err)
				}
				wall := time.Since(mark)
				away := downtimes(l.Log(), mark)
				var critical time.Duration
				for _, h := range cps {
					if away[h] == 0 {
						b.Fatalf("%s did not restart", h)
					}
					critical += away[h]
				}
				batches := len(cps)
				for start := 0; start < len(hosts); start += maxUnavailable {
					var slowest time.Duration
					for _, h := range hosts[start:min(start+maxUnavailable, len(hosts))] {
						if away[h] == 0 {
							b.Fatalf("%s did not restart", h)
						}
						slowest = max(slowest, away[h])
					}
					critical += slowest
					batches++
				}
				nodes := critical + time.Duration(batches)*(install+ready)
				b.ReportMetric(wall.Seconds(), "wall-s/upgrade")
				b.ReportMetric(critical.Seconds(), "wall-s/upgrade-floor")
				b.ReportMetric(1.2*critical.Seconds(), "wall-s/upgrade-target")
				b.ReportMetric(wall.Seconds(), "nodes-s/upgrade")
				b.ReportMetric(nodes.Seconds(), "nodes-s/upgrade-floor")
				b.ReportMetric(1.2*nodes.Seconds(), "nodes-s/upgrade-target")
			}
		})
	}
}

// downtimes returns, per host, how long it was away (node-left to
// node-joined) after mark.
func downtimes(log []lab.LogEntry, mark time.Time) map[string]time.Duration {
	left := map[string]time.Time{}
	out := map[string]time.Duration{}
	for _, e := range log {
		if e.Source != "lab" || e.Time.Before(mark) {
			continue
		}
		switch e.Op {
		case "node-left":
			left[e.Target] = e.Time
		case "node-joined":
			if t, ok := left[e.Target]; ok {
				out[e.Target] += e.Time.Sub(t)
				delete(left, e.Target)
			}
		}
	}
	return out
}

// benchCluster starts a lab with o, writes a cluster name of 3 control
// planes and workers workers on its vmbr0 into a directory, and returns
// the lab, the directory and a maker of engines for it. The lab closes
// with the benchmark.
func benchCluster(b *testing.B, o lab.Options, name string, workers int) (*lab.Lab, string, func() *reconcile.Engine) {
	b.Helper()
	l, err := lab.Start(context.Background(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	dir := b.TempDir()
	if err := l.WriteCluster(dir, lab.Cluster{Name: name, Workers: workers, Bridge: "vmbr0"}); err != nil {
		b.Fatal(err)
	}
	engine := func() *reconcile.Engine {
		c, warns, err := spec.Load(dir, spec.Options{})
		if err != nil {
			b.Fatal(err)
		}
		p, err := proxmox.New(c, os.DirFS(dir), nil)
		if err != nil {
			b.Fatal(err)
		}
		return &reconcile.Engine{Cluster: c, Warnings: warns, State: state.Local{Dir: dir}, Journal: state.Local{Dir: dir},
			Key: name, Infra: p, BootTimeout: 2 * time.Minute, PollInterval: 50 * time.Millisecond}
	}
	return l, dir, engine
}
