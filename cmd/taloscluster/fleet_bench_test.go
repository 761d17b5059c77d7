package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// The fleet of BenchmarkFigureDriftSweep: fleetSize single-node clusters,
// built in one lab (in a process of its own) before the sweep.
const (
	fleetSize = 1000
	fleetEnv  = "TALOSCLUSTER_BENCH_FLEET_DIR"
	sizeEnv   = "TALOSCLUSTER_BENCH_FLEET_SIZE"
	// fleetBuilders is how many clusters the fleet process builds at once.
	fleetBuilders = 12
)

// fleetNet is the lab network of the fleet, one Proxmox bridge shared by
// every cluster as in a real datacenter: the lab leases machine addresses
// from its 101st address up, and the clusters' API VIPs are taken from
// its second half.
var fleetNet = netip.MustParsePrefix("127.171.16.0/20")

// fleetReady is what the fleet process tells the benchmark.
type fleetReady struct {
	Repo  string   `json:"repo"`  // the directory holding the cluster directories
	State string   `json:"state"` // the state.DirStore root of their state
	Dirs  []string `json:"dirs"`  // the cluster directories, relative to Repo
	Build float64  `json:"build"` // seconds the fleet took to build
}

// fleetCounts is the lab's requests by source since the last count.
type fleetCounts map[string]int

// TestBenchFleetProcess is the lab of BenchmarkFigureDriftSweep, run in a
// process of its own so that the sweep's CPU time is the engine's alone.
// It builds the fleet, writes ready.json, then answers each line "count"
// on its standard input with the lab's requests since the previous one
// ("COUNTS {json}" on its standard output), until its standard input
// closes. Without its environment variable it does nothing.
func TestBenchFleetProcess(t *testing.T) {
	dir := os.Getenv(fleetEnv)
	if dir == "" {
		t.Skip("only run by BenchmarkFigureDriftSweep")
	}
	n, err := strconv.Atoi(os.Getenv(sizeEnv))
	if err != nil || n < 1 || n > 2000 {
		t.Fatalf("%s: want a number of clusters from 1 to 2000", sizeEnv)
	}
	ctx := context.Background()
	l, err := lab.Start(ctx, lab.Options{
		Bridges:      map[string]netip.Prefix{"vmbr0": fleetNet},
		TaskDuration: -1, BootDelay: 10 * time.Millisecond, InstallDelay: 10 * time.Millisecond,
		RebootDelay: 10 * time.Millisecond, ReadyDelay: 10 * time.Millisecond, StatsInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ready := fleetReady{Repo: filepath.Join(dir, "repo"), State: filepath.Join(dir, "state")}
	store := state.NewDirStore(ready.State)
	for i := range n {
		d := fmt.Sprintf("fleet/c%04d", i)
		if err := writeFleetCluster(l, filepath.Join(ready.Repo, filepath.FromSlash(d)), i); err != nil {
			t.Fatal(err)
		}
		ready.Dirs = append(ready.Dirs, d)
	}
	// The clusters share the identity's keys and each has a cluster ID
	// and secret of its own (by which Talos nodes find their cluster):
	// minting 1,000 identities takes about 11 minutes of RSA key
	// generation on two cores, and nothing a plan reads depends on a key
	// being another cluster's too.
	bundle, err := machineconfig.NewSecrets("v1.13.8")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ready.Dirs {
		id, secret := make([]byte, 32), make([]byte, 32)
		_, _ = rand.Read(id)
		_, _ = rand.Read(secret)
		bundle.Cluster.ID, bundle.Cluster.Secret = base64.StdEncoding.EncodeToString(id), base64.StdEncoding.EncodeToString(secret)
		identity, err := machineconfig.EncodeSecrets(bundle)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Create(ctx, d, reconcile.TalosSecretsFile, identity); err != nil {
			t.Fatal(err)
		}
	}
	started := time.Now()
	work := make(chan string)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range fleetBuilders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				errs <- buildFleetCluster(ctx, store, ready.Repo, d)
			}
		}()
	}
	for _, d := range ready.Dirs {
		work <- d
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ready.Build = time.Since(started).Seconds()
	data, err := json.Marshal(ready)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ready.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	seen := len(l.Log())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "count" {
			continue
		}
		log := l.Log()
		counts := fleetCounts{}
		for _, e := range log[min(seen, len(log)):] {
			counts[e.Source]++
		}
		seen = len(log)
		data, err := json.Marshal(counts)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("COUNTS %s\n", data)
	}
}

// writeFleetCluster writes the directory of fleet cluster i: one control
// plane on the shared bridge, its VIP in the network's second half.
func writeFleetCluster(l *lab.Lab, dir string, i int) error {
	name := fmt.Sprintf("c%04d", i)
	if err := l.WriteCluster(dir, lab.Cluster{Name: name, Bridge: "vmbr0"}); err != nil {
		return err
	}
	file := filepath.Join(dir, "cluster.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	base := fleetNet.Masked().Addr().As4()
	vip := netip.AddrFrom4([4]byte{base[0], base[1], base[2] + 8 + byte(i/256), byte(i % 256)})
	text := string(data)
	for _, r := range [][2]string{
		{"  count: 3\n", "  count: 1\n"},
		{"    kubeapi_vip: " + fleetHost(5).String() + "\n", "    kubeapi_vip: " + vip.String() + "\n"},
	} {
		if !strings.Contains(text, r[0]) {
			return fmt.Errorf("the lab's cluster.yaml has no %q", strings.TrimSpace(r[0]))
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	return os.WriteFile(file, []byte(text), 0o644)
}

// fleetHost is the n-th address of the fleet's network.
func fleetHost(n int) netip.Addr {
	a := fleetNet.Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a
}

// buildFleetCluster converges one fleet cluster, its state in store under
// its directory's path, as the agent keeps it.
func buildFleetCluster(ctx context.Context, store *state.DirStore, repo, d string) error {
	dir := filepath.Join(repo, filepath.FromSlash(d))
	c, warns, err := spec.Load(dir, spec.Options{})
	if err != nil {
		return err
	}
	p, err := proxmox.New(c, os.DirFS(dir), nil)
	if err != nil {
		return err
	}
	e := &reconcile.Engine{Cluster: c, Warnings: warns, State: store, Journal: store, Key: d, Infra: p,
		BootTimeout: 2 * time.Minute, PollInterval: 50 * time.Millisecond}
	if err := e.Converge(ctx); err != nil {
		return fmt.Errorf("building %s: %w", d, err)
	}
	return nil
}

// fleetProcess is the running fleet process.
type fleetProcess struct {
	ready  fleetReady
	in     io.WriteCloser
	counts chan fleetCounts
}

// count asks the fleet process for the lab's requests since the last
// count.
func (f *fleetProcess) count() (fleetCounts, error) {
	if _, err := io.WriteString(f.in, "count\n"); err != nil {
		return nil, err
	}
	select {
	case c, ok := <-f.counts:
		if !ok {
			return nil, errors.New("the fleet process ended without counting")
		}
		return c, nil
	case <-time.After(time.Minute):
		return nil, errors.New("the fleet process did not count within a minute")
	}
}

// startFleetProcess runs TestBenchFleetProcess with n clusters in a child
// process that ends with the benchmark. What the child prints besides its
// counts (its test's failure) goes to standard error.
func startFleetProcess(b *testing.B, n int) *fleetProcess {
	b.Helper()
	dir := b.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchFleetProcess$", "-test.count=1", "-test.timeout=1h")
	cmd.Env = append(os.Environ(), fleetEnv+"="+dir, sizeEnv+"="+strconv.Itoa(n))
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	f := &fleetProcess{in: in, counts: make(chan fleetCounts)}
	ended := make(chan error, 1)
	go func() {
		defer close(f.counts)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "COUNTS ")
			if !ok {
				fmt.Fprintln(os.Stderr, "fleet process:", sc.Text())
				continue
			}
			var c fleetCounts
			if err := json.Unmarshal([]byte(line), &c); err != nil {
				fmt.Fprintln(os.Stderr, "fleet process:", err)
				return
			}
			f.counts <- c
		}
		ended <- cmd.Wait()
	}()
	b.Cleanup(func() {
		_ = in.Close()
		<-ended
	})
	deadline := time.Now().Add(20 * time.Minute)
	for {
		data, err := os.ReadFile(filepath.Join(dir, "ready.json"))
		if err == nil {
			if err := json.Unmarshal(data, &f.ready); err != nil {
				b.Fatal(err)
			}
			return f
		}
		select {
		case err := <-ended:
			ended <- err
			b.Fatalf("the fleet process ended before it was ready: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatal("the fleet process did not get ready")
		}
	}
}

// BenchmarkFigureDriftSweep is the agent's drift sweep of a fleet of
// 1,000 clusters: a plan of each, in turn, against the lab, as the agent's
// drift check makes it (its engine runner, the cluster's files, its state
// in the agent's store). The lab runs in a process of its own, so the CPU
// time is the engine's alone, and it answers at once: the provider's
// latency is left out of the wall time and reported apart, as the
// requests each plan waits for one after the other (a sweep against a
// real Proxmox takes about their number times its latency more). Every
// cluster is built and in sync, so each plan must come out empty.
func BenchmarkFigureDriftSweep(b *testing.B) {
	n := fleetSize
	if s := os.Getenv(sizeEnv); s != "" {
		// A smaller fleet, to try the benchmark quickly.
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatalf("%s: %v", sizeEnv, err)
		}
	}
	f := startFleetProcess(b, n)
	runner := &agentRunner{store: state.NewDirStore(f.ready.State), log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	for b.Loop() {
		if _, err := f.count(); err != nil {
			b.Fatal(err)
		}
		cpu, start := cpuTime(), time.Now()
		for _, d := range f.ready.Dirs {
			pl, err := runner.Plan(ctx, d, os.DirFS(path.Join(f.ready.Repo, d)))
			if err != nil {
				b.Fatalf("planning %s: %v", d, err)
			}
			if pl.Incomplete || !pl.Empty() {
				b.Fatalf("%s is built and in sync, but its plan says %s %v", d, pl.Summary(), pl.IncompleteReasons)
			}
		}
		wall, used := time.Since(start), cpuTime()-cpu
		counts, err := f.count()
		if err != nil {
			b.Fatal(err)
		}
		n := float64(len(f.ready.Dirs))
		b.ReportMetric(f.ready.Build, "build-s/fleet")
		b.ReportMetric(wall.Seconds(), "wall-s/sweep")
		b.ReportMetric(used.Seconds(), "cpu-s/sweep")
		b.ReportMetric(float64(used.Milliseconds())/n, "clustercpu-ms/cluster")
		for _, src := range []string{"proxmox", "talos", "kubernetes"} {
			b.ReportMetric(float64(counts[src])/n, strings.ReplaceAll(src, "kubernetes", "kube")+"-req/cluster")
		}
	}
}
