package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The figures of `make bench` (hack/benchtable): each benchmark reports a
// value with its floor, and a target where the issue that asked for it set
// one. They run once (-benchtime 1x), repeat what they measure themselves
// and report the median (or a percentile), with the samples as "runs".

// benchForgeEnv names the directory a forge process started by
// startForgeProcess writes its address to.
const benchForgeEnv = "TALOSCLUSTER_BENCH_FORGE_DIR"

// forgeReady is what the forge process tells the benchmark.
type forgeReady struct {
	URL  string   `json:"url"`
	Dirs []string `json:"dirs"`
	Main string   `json:"main"`
}

// TestBenchForgeProcess is the forge of BenchmarkFigureIdlePoll, run in a
// process of its own so that the benchmark's CPU time is the agent's
// alone: it serves a repository of 1,000 cluster directories and 50 open
// pull requests until its standard input closes. Without its environment
// variable it does nothing.
func TestBenchForgeProcess(t *testing.T) {
	dir := os.Getenv(benchForgeEnv)
	if dir == "" {
		t.Skip("only run by BenchmarkFigureIdlePoll")
	}
	bf := newBenchForge(t, 1000, 50)
	ready, err := json.Marshal(forgeReady{URL: bf.url, Dirs: bf.dirs, Main: bf.main})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), bf.ca.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ready.json"), ready, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startForgeProcess runs TestBenchForgeProcess in a child process, once
// for all the benchmarks of the test binary, and returns what it serves.
// The process ends with the test binary: its standard input closes then.
func startForgeProcess(b *testing.B) (forgeReady, string) {
	b.Helper()
	forgeOnce.Do(func() { forgeProc, forgeCA, forgeErr = runForgeProcess() })
	if forgeErr != nil {
		b.Fatal(forgeErr)
	}
	return forgeProc, forgeCA
}

var (
	forgeOnce sync.Once
	forgeProc forgeReady
	forgeCA   string
	forgeErr  error
	// forgeStdin is the forge process's standard input.
	forgeStdin io.WriteCloser
)

func runForgeProcess() (forgeReady, string, error) {
	dir, err := os.MkdirTemp("", "taloscluster-bench-forge")
	if err != nil {
		return forgeReady{}, "", err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchForgeProcess$", "-test.count=1", "-test.timeout=1h")
	cmd.Env = append(os.Environ(), benchForgeEnv+"="+dir)
	// Kept open (and referenced, so that no finalizer closes it) for the
	// life of the test binary; the child stops at EOF.
	if forgeStdin, err = cmd.StdinPipe(); err != nil {
		return forgeReady{}, "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return forgeReady{}, "", err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		data, err := os.ReadFile(filepath.Join(dir, "ready.json"))
		if err == nil {
			var r forgeReady
			if err := json.Unmarshal(data, &r); err != nil {
				return forgeReady{}, "", err
			}
			return r, filepath.Join(dir, "ca.pem"), nil
		}
		if time.Now().After(deadline) {
			return forgeReady{}, "", errors.New("the forge process did not get ready")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func pool(b *testing.B, caFile string) *x509.CertPool {
	b.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		b.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		b.Fatal("no certificate in " + caFile)
	}
	return p
}

// idlePolls is how many idle polls one run of BenchmarkFigureIdlePoll
// measures, and how many git ls-remote processes its floor.
const idlePolls = 20

// BenchmarkFigureIdlePoll: the agent's idle poll on a repository of 1,000
// cluster directories and 50 open pull requests, the forge in a process
// of its own.
//   - cpu: the agent's CPU time per poll against that of a `git ls-remote`
//     process on the same remote (target: at most half of it);
//   - wire: the bytes of git traffic per poll against the ref advertisement
//     the poll must read, as the same counting transport sees it on a warm
//     connection (target: at most 1.5 times);
//   - charged: GitHub requests per poll that count against the rate limit
//     (target and floor: none); conditional: those answered 304 Not
//     Modified, which do not.
func BenchmarkFigureIdlePoll(b *testing.B) {
	ready, caFile := startForgeProcess(b)
	roots := pool(b, caFile)
	w := newBenchAgent(b, ready.URL, roots, ready.Dirs, ready.Main, 0)
	ctx := context.Background()
	for b.Loop() {
		var cpu, floor, wire, advert, charged, conditional []float64
		for range rounds {
			w.gitWire.Store(0)
			w.github.notModified.Store(0)
			w.github.charged.Store(0)
			start := cpuTime()
			for range idlePolls {
				if err := w.agent.Poll(ctx); err != nil {
					b.Fatal(err)
				}
			}
			cpu = append(cpu, float64(cpuTime()-start)/idlePolls/1e6)
			floor = append(floor, float64(lsRemoteCPU(b, ready.URL+"/org/clusters.git", caFile))/1e6)
			wire = append(wire, float64(w.gitWire.Load())/idlePolls)
			advert = append(advert, float64(refAdvertisement(b, ready.URL+"/org/clusters.git", roots)))
			charged = append(charged, float64(w.github.charged.Load())/idlePolls)
			conditional = append(conditional, float64(w.github.notModified.Load())/idlePolls)
		}
		b.ReportMetric(rounds, "runs")
		reportIdlePoll(b, cpu, floor, wire, advert, charged, conditional)
	}
}

// reportIdlePoll reports the idle poll's figures from their samples, each
// beside its floor and target: CPU against `git ls-remote` (at most half),
// git bytes against the ref advertisement (at most 1.5 times), charged
// GitHub requests (none), and the conditional ones.
func reportIdlePoll(b *testing.B, cpu, floor, wire, advert, charged, conditional []float64) {
	b.ReportMetric(median(cpu), "cpu-ms/poll")
	b.ReportMetric(median(floor), "cpu-ms/poll-floor")
	b.ReportMetric(median(floor)/2, "cpu-ms/poll-target")
	b.ReportMetric(median(wire), "wire-bytes/poll")
	b.ReportMetric(median(advert), "wire-bytes/poll-floor")
	b.ReportMetric(1.5*median(advert), "wire-bytes/poll-target")
	b.ReportMetric(median(charged), "charged-req/poll")
	b.ReportMetric(0, "charged-req/poll-floor")
	b.ReportMetric(0, "charged-req/poll-target")
	b.ReportMetric(median(conditional), "conditional-req/poll")
}

// rounds is how many times a figure benchmark repeats its measure; it
// reports the median.
const rounds = 3

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// lsRemoteCPU is the mean CPU time (user and system) of a `git ls-remote`
// process listing the remote's refs, over idlePolls runs.
func lsRemoteCPU(b *testing.B, url, caFile string) time.Duration {
	b.Helper()
	var total time.Duration
	for range idlePolls {
		cmd := exec.Command("git", "-c", "http.extraHeader=Authorization: token "+benchToken, "ls-remote", url)
		cmd.Env = append(os.Environ(), "GIT_SSL_CAINFO="+caFile, "GIT_TERMINAL_PROMPT=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git ls-remote: %v: %s", err, out)
		}
		ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			b.Fatal("no resource usage of git ls-remote")
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total / idlePolls
}

// refAdvertisement is the bytes on the wire of the ref advertisement
// (GET info/refs of git-upload-pack, protocol v0 as the poll's go-git
// asks it) on a warm connection, counted as the agent's git traffic is.
func refAdvertisement(b *testing.B, url string, roots *x509.CertPool) int64 {
	b.Helper()
	var wire atomic.Int64
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{c, &wire}, nil
		}}}
	get := func() {
		req, err := http.NewRequest(http.MethodGet, url+"/info/refs?service=git-upload-pack", nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "token "+benchToken)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("info/refs: %s", resp.Status)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
	}
	get()
	wire.Store(0)
	get()
	return wire.Load()
}

// memoryPolls is how many polls BenchmarkFigureAgentMemory makes: 30
// minutes of polling at a 1 s interval, without the waits.
const memoryPolls = 1800

// BenchmarkFigureAgentMemory: the agent's resident memory on a repository
// of 1,000 cluster directories and 50 open pull requests over 1,800 polls
// (30 minutes at a 1 s interval, made back to back), the forge in a
// process of its own.
//   - rss: the process's resident set over the last tenth of the polls,
//     against the same process before the agent existed (the test
//     binary's own); target 150 MB.
//   - growth: the resident set over the last tenth less that over the
//     first tenth; floor zero, target 5 MB (the runtime's own noise).
func BenchmarkFigureAgentMemory(b *testing.B) {
	ready, caFile := startForgeProcess(b)
	runtime.GC()
	base := rssMB(b)
	w := newBenchAgent(b, ready.URL, pool(b, caFile), ready.Dirs, ready.Main, 0)
	ctx := context.Background()
	for b.Loop() {
		var samples []float64
		for i := range memoryPolls {
			if err := w.agent.Poll(ctx); err != nil {
				b.Fatal(err)
			}
			if i%30 == 29 {
				samples = append(samples, rssMB(b))
			}
		}
		tenth := max(len(samples)/10, 1)
		first, last := median(samples[:tenth]), median(samples[len(samples)-tenth:])
		b.ReportMetric(float64(len(samples)), "runs")
		b.ReportMetric(last, "rss-MB")
		b.ReportMetric(base, "rss-MB-floor")
		b.ReportMetric(150, "rss-MB-target")
		b.ReportMetric(last-first, "growth-MB")
		b.ReportMetric(0, "growth-MB-floor")
		b.ReportMetric(5, "growth-MB-target")
	}
}

// rssMB is the process's resident set (VmRSS) in MB.
func rssMB(b *testing.B) float64 {
	b.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb float64
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb); err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// latencyEvents is how many pushes or merges a latency figure measures.
const latencyEvents = 20

// p95 is the 95th percentile of ds (nearest rank).
func p95(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (95*len(s)+99)/100 - 1
	return s[max(i, 0)]
}

// BenchmarkFigurePushToPlanComment: the time from a push to a pull
// request's head until its plan comment shows the new head, with the agent
// polling at its shortest interval, at the 95th percentile over 20
// pushes, against the poll interval (target: the interval plus 1 s).
func BenchmarkFigurePushToPlanComment(b *testing.B) {
	bf := newBenchForge(b, 100, 1)
	w := newBenchAgent(b, bf.url, bf.ca.Pool(), bf.dirs, bf.main, minPoll())
	stop := pollLoop(w)
	defer stop()
	pr := bf.repo.PRs()[0]
	for b.Loop() {
		var took []time.Duration
		for i := range latencyEvents {
			head, err := bf.repo.Commit(pr.HeadRef, map[string]string{"clusters/c0000/notes.txt": fmt.Sprint(time.Now().UnixNano(), i)}, "push")
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			waitUntil(b, "the plan comment of "+head[:10], func() bool {
				cs := bf.repo.Comments(pr.Number)
				return len(cs) == 1 && strings.Contains(cs[0].Body, head[:7])
			})
			took = append(took, time.Since(start))
		}
		reportLatency(b, "push", took)
	}
}

// BenchmarkFigureMergeToConvergeStart: the time from a merge until the
// agent's converge of it has begun (its first converge status on the merge
// commit), at the 95th percentile over 20 merges, against the poll
// interval (target: the interval plus 1 s).
func BenchmarkFigureMergeToConvergeStart(b *testing.B) {
	bf := newBenchForge(b, 100, 0)
	w := newBenchAgent(b, bf.url, bf.ca.Pool(), bf.dirs, bf.main, minPoll())
	stop := pollLoop(w)
	defer stop()
	n := 0
	for b.Loop() {
		var took []time.Duration
		for range latencyEvents {
			n++
			dir := bf.dirs[n%len(bf.dirs)]
			branch := fmt.Sprintf("m%d", n)
			if _, err := bf.repo.Commit(branch, map[string]string{dir + "/notes.txt": fmt.Sprint(n)}, "change"); err != nil {
				b.Fatal(err)
			}
			pr, err := bf.repo.OpenPR("alice", branch, "main", branch)
			if err != nil {
				b.Fatal(err)
			}
			merge, err := bf.repo.Merge(pr.Number, "alice")
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			waitUntil(b, "the converge of "+merge[:10], func() bool {
				for _, s := range bf.repo.Statuses(merge) {
					if s.Context == "taloscluster/converge: "+dir {
						return true
					}
				}
				return false
			})
			took = append(took, time.Since(start))
		}
		reportLatency(b, "merge", took)
	}
}

func minPoll() time.Duration { return 2 * time.Second }

func reportLatency(b *testing.B, what string, took []time.Duration) {
	b.ReportMetric(float64(len(took)), "runs")
	b.ReportMetric(p95(took).Seconds(), "p95-s/"+what)
	b.ReportMetric(minPoll().Seconds(), "p95-s/"+what+"-floor")
	b.ReportMetric(minPoll().Seconds()+1, "p95-s/"+what+"-target")
}

// pollLoop runs the agent's poll loop until stop.
func pollLoop(w *benchWorld) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.agent.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

func waitUntil(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
