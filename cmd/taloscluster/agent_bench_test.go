package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/check"
	"github.com/taloscluster/taloscluster/gitsync"
	"github.com/taloscluster/taloscluster/lab/forge"
	"github.com/taloscluster/taloscluster/lab/labca"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/state"
	gh "github.com/taloscluster/taloscluster/report/github"
)

// emptyRunner plans nothing: the benchmarks measure the agent's loop, not
// the engine.
type emptyRunner struct{}

func (emptyRunner) Plan(context.Context, string, fs.FS) (*plan.Plan, error) {
	return plan.New("bench"), nil
}
func (emptyRunner) Converge(context.Context, string, string, fs.FS, agent.ConvergeHooks) error {
	return nil
}
func (emptyRunner) Endpoints(string, fs.FS) (agent.Endpoints, error) { return agent.Endpoints{}, nil }

// Describe names each cluster after its directory, so none share a name.
func (emptyRunner) Describe(cluster string, _ fs.FS) (agent.ClusterInfo, error) {
	return agent.ClusterInfo{Name: cluster, Files: []string{"cluster.yaml"}}, nil
}
func (emptyRunner) Check(context.Context, string, fs.FS) (*agent.CheckResult, error) {
	return &agent.CheckResult{Report: &check.Report{}}, nil
}

// countingConn counts the bytes a connection reads and writes.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// benchWorld is an agent of the benchmarks with the counters of its
// traffic.
type benchWorld struct {
	agent   *agent.Agent
	gitWire *atomic.Int64
	github  *statusCounter
}

// benchForge is a forge serving a repository of clusters cluster
// directories (clusters/cNNNN) and prs open pull requests, each changing
// one of them.
type benchForge struct {
	forge *forge.Forge
	repo  *forge.Repo
	url   string
	ca    *labca.CA
	dirs  []string
	main  string
}

func newBenchForge(tb testing.TB, clusters, prs int) *benchForge {
	tb.Helper()
	ca, err := labca.New("bench CA")
	if err != nil {
		tb.Fatal(err)
	}
	f, err := forge.New(forge.Options{Dir: tb.TempDir(), RateLimit: 1 << 30, Users: []forge.User{{Login: "bot", Token: benchToken}, {Login: "alice", Token: "ghp_benchalice0123456789"}}})
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f.Handler())
	if srv.TLS, err = ca.ServerTLS("127.0.0.1"); err != nil {
		tb.Fatal(err)
	}
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	repo, err := f.CreateRepo("org", "clusters", "main")
	if err != nil {
		tb.Fatal(err)
	}
	repo.Grant("bot", forge.PermissionWrite)
	repo.Grant("alice", forge.PermissionWrite)
	files := map[string]string{}
	var dirs []string
	for i := range clusters {
		d := fmt.Sprintf("clusters/c%04d", i)
		dirs = append(dirs, d)
		files[d+"/cluster.yaml"] = fmt.Sprintf("name: c%04d\n", i)
	}
	main, err := repo.Commit("main", files, "many clusters")
	if err != nil {
		tb.Fatal(err)
	}
	for i := range prs {
		branch := fmt.Sprintf("pr%d", i)
		if _, err := repo.Commit(branch, map[string]string{dirs[i] + "/cluster.yaml": fmt.Sprintf("name: c%04d\n# change\n", i)}, "change"); err != nil {
			tb.Fatal(err)
		}
		if _, err := repo.OpenPR("alice", branch, "main", "change "+branch); err != nil {
			tb.Fatal(err)
		}
	}
	return &benchForge{forge: f, repo: repo, url: srv.URL, ca: ca, dirs: dirs, main: main}
}

// benchToken is the agent's GitHub token in the benchmarks.
const benchToken = "ghp_benchbot0123456789"

// newBenchAgent starts an agent on the forge at url (its certificate
// signed by a CA of roots), with every cluster of dirs converged at main,
// and makes its first poll, which plans every open pull request; later
// polls are idle. interval, when set, is its poll interval.
func newBenchAgent(b *testing.B, url string, roots *x509.CertPool, dirs []string, main string, interval time.Duration) *benchWorld {
	b.Helper()
	dir := b.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(benchToken), 0o600); err != nil {
		b.Fatal(err)
	}
	tlsCfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	wire := &atomic.Int64{}
	tr := &http.Transport{TLSClientConfig: tlsCfg, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, wire}, nil
	}}
	ctx := context.Background()
	grepo, err := gitsync.Open(ctx, gitsync.Options{URL: url + "/org/clusters.git", Dir: filepath.Join(dir, "repo"),
		Auth: gitsync.Auth{TokenFile: tokenFile}, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		b.Fatal(err)
	}
	github := &statusCounter{base: &http.Transport{TLSClientConfig: tlsCfg}}
	client, err := gh.New(gh.Options{APIURL: url + "/", Repo: "org/clusters", Token: benchToken, HTTPClient: &http.Client{Transport: github}})
	if err != nil {
		b.Fatal(err)
	}
	store := state.NewDirStore(filepath.Join(dir, "state"))
	for _, d := range dirs {
		if err := store.SetLastConverged(ctx, d, main); err != nil {
			b.Fatal(err)
		}
	}
	cfg := &agent.Config{Repository: agent.Repository{URL: "x", DefaultBranch: "main", PollInterval: agent.Duration(interval)},
		GitHub: agent.GitHub{Repo: "org/clusters", TokenFile: tokenFile}, SecretsDir: dir, DataDir: dir}
	cfg.Defaults()
	a := agent.New(cfg, agent.Deps{Repo: grepo, Forge: client, Runner: emptyRunner{}, Progress: store, Log: nil})
	b.Cleanup(a.Close)
	if err := a.Poll(ctx); err != nil {
		b.Fatal(err)
	}
	a.Wait()
	return &benchWorld{agent: a, gitWire: wire, github: github}
}

// statusCounter counts GitHub's answers: 304 Not Modified to a
// conditional request does not count against the rate limit; every other
// answer does.
type statusCounter struct {
	base                 http.RoundTripper
	notModified, charged atomic.Int64
}

func (s *statusCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(r)
	if err == nil {
		if resp.StatusCode == http.StatusNotModified {
			s.notModified.Add(1)
		} else {
			s.charged.Add(1)
		}
	}
	return resp, err
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
