package proxmox_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
)

// costSources are the APIs whose requests a converge's cost counts.
var costSources = []string{"proxmox", "talos", "kubernetes"}

// talosWrites are the Talos methods that change a node.
var talosWrites = []string{"ApplyConfiguration", "Bootstrap", "Reset", "Reboot", "Upgrade", "Pull", "EtcdRemoveMemberByID", "EtcdLeaveCluster"}

// requests counts the lab log's requests after mark by source, and those
// of them that change something.
func requests(l *lab.Lab, mark time.Time) (all, writes map[string]int) {
	all, writes = map[string]int{}, map[string]int{}
	for _, e := range l.Log() {
		if e.Time.Before(mark) || !slices.Contains(costSources, e.Source) {
			continue
		}
		all[e.Source]++
		var write bool
		switch e.Source {
		case "proxmox":
			write = !strings.HasPrefix(e.Target, "GET ")
		case "kubernetes":
			verb, _, _ := strings.Cut(e.Op, " ")
			write = verb != "get" && verb != "list" && verb != "watch"
		case "talos":
			write = slices.Contains(talosWrites, e.Op)
		}
		if write {
			writes[e.Source]++
		}
	}
	return all, writes
}

// BenchmarkFigureConvergeCost: the Proxmox, Talos and Kubernetes requests
// of a converge of a 3 + 20 cluster in the lab, against the least it
// could make:
//   - noop: a converge with nothing to do, against one observation (the
//     reads the plan is made of);
//   - grow: one more worker, against one observation plus the requests that
//     change something in that run (what a run whose every step shared
//     the observation's reads would make). The rest are the steps' fresh
//     reads, the task polls of Proxmox and the waits.
func BenchmarkFigureConvergeCost(b *testing.B) {
	const workers = 20
	ctx := context.Background()
	l, dir, engine := benchCluster(b, lab.Options{
		Bridges:      map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix("127.183.0.0/24")},
		TaskDuration: -1, BootDelay: 50 * time.Millisecond, InstallDelay: 50 * time.Millisecond,
		RebootDelay: 50 * time.Millisecond, ReadyDelay: 100 * time.Millisecond, StatsInterval: -1,
	}, "cost", workers)
	if err := engine().Converge(ctx); err != nil {
		b.Fatalf("first build: %v", err)
	}
	observe := func() map[string]int {
		mark := time.Now()
		if _, err := engine().Observe(ctx); err != nil {
			b.Fatal(err)
		}
		all, _ := requests(l, mark)
		return all
	}
	report := func(what string, all, floor map[string]int) {
		for _, src := range costSources {
			unit := what + "_" + strings.ReplaceAll(src, "kubernetes", "kube") + "-requests"
			b.ReportMetric(float64(all[src]), unit)
			b.ReportMetric(float64(floor[src]), unit+"-floor")
		}
	}
	path := filepath.Join(dir, "cluster.yaml")
	for b.Loop() {
		floor := observe()
		mark := time.Now()
		if err := engine().Converge(ctx); err != nil {
			b.Fatalf("no-op converge: %v", err)
		}
		all, _ := requests(l, mark)
		report("noop", all, floor)

		data, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		grown := strings.Replace(string(data), fmt.Sprintf("count: %d\n", workers), fmt.Sprintf("count: %d\n", workers+1), 1)
		if grown == string(data) {
			b.Fatalf("no worker count %d in cluster.yaml", workers)
		}
		if err := os.WriteFile(path, []byte(grown), 0o600); err != nil {
			b.Fatal(err)
		}
		floor = observe()
		mark = time.Now()
		if err := engine().Converge(ctx); err != nil {
			b.Fatalf("growing: %v", err)
		}
		all, writes := requests(l, mark)
		for src, n := range writes {
			floor[src] += n
		}
		report("grow", all, floor)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}
