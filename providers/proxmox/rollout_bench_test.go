package proxmox_test

import (
	"context"
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

// BenchmarkRolloutTalosUpgrade measures a Talos upgrade (a new schematic,
// back and forth) of 3 control planes and 4 workers with max_unavailable
// 2 in the lab, against its critical path: the control planes' restarts
// one after the other plus, per batch of workers, its slowest restart,
// each from the node leaving to its return (the lab's events). overhead
// is the wall time over the critical path: the engine's own cost (gates,
// drains, applies, installs, polling).
func BenchmarkRolloutTalosUpgrade(b *testing.B) {
	ctx := context.Background()
	l, err := lab.Start(ctx, lab.Options{
		Bridges:      map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix("127.171.0.0/24")},
		TaskDuration: -1, BootDelay: 100 * time.Millisecond, InstallDelay: 100 * time.Millisecond,
		RebootDelay: 300 * time.Millisecond, ReadyDelay: 200 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	dir := b.TempDir()
	if err := l.WriteCluster(dir, lab.Cluster{Name: "bench", Workers: 4, Bridge: "vmbr0"}); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "cluster.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	base := string(data) + "\nrollout:\n  max_unavailable: 2\n"
	write := func(extensions string) {
		text := base
		if extensions != "" {
			text = strings.Replace(text, "  version: v1.13.8\n", "  version: v1.13.8\n  extensions: "+extensions+"\n", 1)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			b.Fatal(err)
		}
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
			Key: "bench", Infra: p, BootTimeout: 2 * time.Minute, PollInterval: 50 * time.Millisecond}
	}
	write("")
	if err := engine().Converge(ctx); err != nil {
		b.Fatalf("first build: %v", err)
	}
	cps := []string{"bench-controlplane-01", "bench-controlplane-02", "bench-controlplane-03"}
	batches := [][]string{{"bench-worker-01", "bench-worker-02"}, {"bench-worker-03", "bench-worker-04"}}
	schematics := []string{"[siderolabs/iscsi-tools]", ""}
	var wall, critical time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		write(schematics[i%2])
		mark := time.Now()
		b.StartTimer()
		if err := engine().Converge(ctx); err != nil {
			b.Fatalf("upgrade %d: %v", i, err)
		}
		b.StopTimer()
		wall += time.Since(mark)
		away := downtimes(l.Log(), mark)
		for _, h := range cps {
			critical += away[h]
		}
		for _, batch := range batches {
			critical += max(away[batch[0]], away[batch[1]])
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(critical.Seconds()/float64(b.N), "critical-s/op")
	b.ReportMetric(wall.Seconds()/critical.Seconds(), "overhead")
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
