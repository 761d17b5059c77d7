package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/forge"
	"github.com/taloscluster/taloscluster/lab/kube/realkube"
	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// replicaWorld is a lab with two clusters (demo on vmbr0, other on
// vmbr1), a forge holding their repository, a real kube-apiserver for the
// state, and two agent replicas.
type replicaWorld struct {
	lab      *lab.Lab
	forge    *forge.Forge
	repo     *forge.Repo
	cfg      *agent.Config
	replicas []*agent.Agent
	pages    []http.Handler
	logs     *syncBuffer
	yaml     map[string]string // cluster path -> cluster.yaml as committed
}

func newReplicaWorld(t *testing.T) *replicaWorld {
	t.Helper()
	return newReplicaWorldOn(t, "127.96.0.0/24", "127.97.0.0/24", 2)
}

// newReplicaWorldOn is newReplicaWorld on two networks of the caller's,
// with n replicas started in this process.
func newReplicaWorldOn(t *testing.T, net0, net1 string, n int) *replicaWorld {
	t.Helper()
	cp := realkube.Start(t, realkube.Options{})
	admin := realkube.Client(t, cp.Admin)
	if _, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "taloscluster"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := lab.Start(t.Context(), lab.Options{
		Bridges: map[string]netip.Prefix{
			"vmbr0": netip.MustParsePrefix(net0), "vmbr1": netip.MustParsePrefix(net1),
		},
		TaskDuration: -1, BootDelay: 20 * time.Millisecond, InstallDelay: 20 * time.Millisecond,
		RebootDelay: 20 * time.Millisecond, ReadyDelay: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	f, srv := startForge(t, l, forge.User{Login: "taloscluster-bot", Token: agentToken}, forge.User{Login: "alice", Token: aliceToken})
	repo := clustersRepo(t, f)
	w := &replicaWorld{lab: l, forge: f, repo: repo, logs: &syncBuffer{}, yaml: map[string]string{}}
	files := map[string]string{"README.md": "clusters\n"}
	dir, write := fileWriter(t)
	for name, bridge := range map[string]string{"demo": "vmbr0", "other": "vmbr1"} {
		y, err := l.ClusterYAML(lab.Cluster{Name: name, Workers: 1, Bridge: bridge})
		if err != nil {
			t.Fatal(err)
		}
		path := "clusters/" + name
		w.yaml[path] = y
		files[path+"/cluster.yaml"] = y
		files[path+"/ca.pem"] = string(l.CA.PEM())
		write("secrets/"+path+"/secrets.yaml", fmt.Sprintf("proxmox:\n  token_id: %q\n  token_secret: %q\n", l.TokenID, l.TokenSecret))
	}
	if _, err := repo.Commit("main", files, "add two clusters"); err != nil {
		t.Fatal(err)
	}
	w.cfg = &agent.Config{
		Repository: agent.Repository{URL: srv.URL + "/org/clusters.git", TokenFile: write("repo-token", agentToken),
			CAFile: write("ca.pem", string(l.CA.PEM())), PollInterval: agent.Duration(time.Second)},
		GitHub: agent.GitHub{APIURL: srv.URL + "/", Repo: "org/clusters", TokenFile: write("gh-token", agentToken),
			CAFile: filepath.Join(dir, "ca.pem"), MutationSpacing: agent.Duration(time.Millisecond)},
		SecretsDir:  filepath.Join(dir, "secrets"),
		Concurrency: 4, DriftInterval: agent.Duration(time.Hour), PublicURL: "http://agent.example",
		State: agent.State{Backend: "kubernetes", Namespace: "taloscluster",
			Kubeconfig: cp.Kubeconfig(t, "taloscluster-agent", "system:masters"), LeaseDuration: agent.Duration(3 * time.Second)},
		Listen: "127.0.0.1:0",
	}
	w.cfg.RunRetry = retry.Policy{Initial: 500 * time.Millisecond, Max: time.Second, Attempts: agent.RetryAttempts}
	w.cfg.Defaults()
	for i := range n {
		w.start(t, i)
	}
	return w
}

// start starts replica i with a data directory (its clone) of its own.
func (w *replicaWorld) start(t *testing.T, i int) {
	t.Helper()
	cfg := *w.cfg
	cfg.DataDir = t.TempDir()
	a, h, err := buildAgent(t.Context(), &cfg, w.logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	if i < len(w.replicas) {
		w.replicas[i], w.pages[i] = a, h
	} else {
		w.replicas, w.pages = append(w.replicas, a), append(w.pages, h)
	}
}

// pollUntil polls every live replica until cond holds.
func (w *replicaWorld) pollUntil(t *testing.T, what string, live []int, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			for _, i := range live {
				st := w.replicas[i].Status()
				t.Logf("replica %d: queue %+v clusters %+v", i, st.Queue, st.Clusters)
			}
			t.Fatalf("timed out waiting for %s\nagent log:\n%s", what, w.logs.String())
		}
		for _, i := range live {
			if err := w.replicas[i].Poll(t.Context()); err != nil {
				t.Logf("replica %d poll: %v", i, err)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (w *replicaWorld) statuses(sha, context, state string) int {
	n := 0
	for _, s := range w.repo.Statuses(sha) {
		if s.Context == context && s.State == state {
			n++
		}
	}
	return n
}

// oneVMPerName fails unless every VM name is used once and there are want
// VMs.
func (w *replicaWorld) oneVMPerName(t *testing.T, want int) {
	t.Helper()
	names := map[string]int{}
	for _, v := range w.lab.PVE.VMs() {
		names[v.Name]++
	}
	for n, c := range names {
		if c != 1 {
			t.Errorf("VM %s exists %d times", n, c)
		}
	}
	if len(names) != want {
		t.Errorf("%d VMs %v, want %d", len(names), names, want)
	}
}

// Two replicas share two clusters: each cluster is converged by exactly
// one of them and reported once. When the replica converging a merge shuts
// down mid-run (a rolling update), the other takes the cluster over,
// resumes, and the merge ends with one final status and one comment.
func TestAgentReplicasShareClustersAndHandOver(t *testing.T) {
	t.Parallel()
	w := newReplicaWorld(t)
	main, _ := w.repo.Branch("main")
	both := []int{0, 1}
	converged := func(sha string) func() bool {
		return func() bool {
			return w.statuses(sha, "taloscluster/converge: clusters/demo", "success") > 0 &&
				w.statuses(sha, "taloscluster/converge: clusters/other", "success") > 0
		}
	}
	w.pollUntil(t, "both clusters built", both, converged(main))
	for _, a := range w.replicas {
		a.Wait()
	}
	w.oneVMPerName(t, 8)
	for _, c := range []string{"clusters/demo", "clusters/other"} {
		if n := w.statuses(main, "taloscluster/converge: "+c, "success"); n != 1 {
			t.Errorf("%s: %d success statuses on the first commit, want exactly 1 (one replica reports)", c, n)
		}
	}
	if n := strings.Count(w.logs.String(), `msg="cluster taken"`); n < 2 {
		t.Errorf("clusters taken %d times, want each cluster owned", n)
	}

	// Each replica's status page says which share it has.
	for i := range w.replicas {
		rec := httptest.NewRecorder()
		w.pages[i].ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if body := rec.Body.String(); !strings.Contains(body, "one of 2; it plans and converges 1 of the clusters") ||
			strings.Count(body, "handled by another replica") != 1 {
			t.Errorf("replica %d's status page does not show its share:\n%s", i, body)
		}
	}

	// What an idle poll costs each replica at the forge: the git fetch and
	// the pull-request listing (answered 304 from its ETag, free of the
	// rate limit), whatever the number of replicas.
	for i, a := range w.replicas {
		before := len(w.forge.Log())
		if err := a.Poll(t.Context()); err != nil {
			t.Fatal(err)
		}
		var ops []string
		for _, r := range w.forge.Log()[before:] {
			ops = append(ops, fmt.Sprintf("%s %d", r.Op, r.Status))
		}
		t.Logf("replica %d: an idle poll sent %d requests to the forge: %v", i, len(ops), ops)
		if len(ops) > 4 {
			t.Errorf("replica %d: an idle poll sent %d requests to the forge, want at most 4: %v", i, len(ops), ops)
		}
	}

	// A merge grows both clusters; creating VMs is slowed so that the
	// replicas are mid-converge when replica 0 shuts down.
	grow := map[string]string{}
	for path, y := range w.yaml {
		grow[path+"/cluster.yaml"] = strings.Replace(y, "count: 1\n", "count: 2\n", 1)
	}
	head, err := w.repo.Commit("grow", grow, "grow both")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "grow", "main", "Grow both")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the plans", both, func() bool {
		return w.statuses(head, "taloscluster/plan: clusters/demo", "success") > 0 &&
			w.statuses(head, "taloscluster/plan: clusters/other", "success") > 0
	})
	if n := len(w.repo.Comments(pr.Number)); n != 1 {
		t.Fatalf("%d plan comments, want one for the pull request (one replica plans it)", n)
	}
	w.lab.PVE.SetLatency("qemu.create", 1500*time.Millisecond)
	merge, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "both converges running", both, func() bool {
		return w.statuses(merge, "taloscluster/converge: clusters/demo", "pending") > 0 &&
			w.statuses(merge, "taloscluster/converge: clusters/other", "pending") > 0
	})
	w.replicas[0].Close() // a rolling update: its runs stop, its Leases are given up
	w.lab.PVE.SetLatency("qemu.create", 0)
	w.pollUntil(t, "the merge converged by the remaining replica", []int{1}, converged(merge))
	w.replicas[1].Wait()
	w.oneVMPerName(t, 10)
	for _, c := range []string{"clusters/demo", "clusters/other"} {
		if n := w.statuses(merge, "taloscluster/converge: "+c, "success"); n != 1 {
			t.Errorf("%s: %d success statuses on the merge, want exactly 1", c, n)
		}
	}
	comments := 0
	for _, c := range w.repo.Comments(pr.Number) {
		if strings.Contains(c.Body, "taloscluster converge") {
			comments++
		}
	}
	if comments != 2 {
		t.Errorf("%d converge comments on the merged pull request, want one per cluster", comments)
	}
}

// An agent process that holds both clusters is killed (SIGKILL) in the
// middle of a converge: it releases nothing. A replica started afterwards
// takes both clusters once the dead one's Leases expire, resumes from the
// journal, and the merge ends converged once, with one VM per hostname and
// one final status per cluster.
func TestAgentProcessKilledMidConvergeIsTakenOver(t *testing.T) {
	t.Parallel()
	w := newReplicaWorldOn(t, "127.98.0.0/24", "127.99.0.0/24", 0)
	main, _ := w.repo.Branch("main")

	// The first replica is the real command in a process of its own.
	dir, write := fileWriter(t)
	c := w.cfg
	config := write("agent.yaml", fmt.Sprintf(`repository:
  url: %s
  token_file: %s
  ca_file: %s
  poll_interval: 2s
github:
  api_url: %s
  repo: %s
  token_file: %s
  ca_file: %s
  mutation_spacing: 1ms
secrets_dir: %s
data_dir: %s
state:
  backend: kubernetes
  namespace: %s
  kubeconfig: %s
  lease_duration: 3s
drift_interval: 1h
listen: 127.0.0.1:0
public_url: http://agent.example
`, c.Repository.URL, c.Repository.TokenFile, c.Repository.CAFile, c.GitHub.APIURL, c.GitHub.Repo, c.GitHub.TokenFile,
		c.GitHub.CAFile, c.SecretsDir, filepath.Join(dir, "data"), c.State.Namespace, c.State.Kubeconfig))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	proc := exec.Command(exe, "agent", "--config", config)
	proc.Env = append(os.Environ(), envRunMain+"=1", "POD_NAME=killed")
	proc.Stdout, proc.Stderr = &out, &out
	// Slow VM creation so the process is mid-converge when it dies.
	w.lab.PVE.SetLatency("qemu.create", 2*time.Second)
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	t.Cleanup(func() {
		_ = proc.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("the killed agent's output:\n%s", out.String())
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for w.statuses(main, "taloscluster/converge: clusters/demo", "pending") == 0 ||
		w.statuses(main, "taloscluster/converge: clusters/other", "pending") == 0 || len(w.lab.PVE.VMs()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the agent process never started converging both clusters:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	exited <- nil // for the cleanup
	w.lab.PVE.SetLatency("qemu.create", 0)
	if !strings.Contains(out.String(), "cluster taken") {
		t.Fatalf("the killed agent never held a cluster:\n%s", out.String())
	}

	// A new replica in this process takes over.
	w.start(t, 0)
	w.pollUntil(t, "both clusters converged by the new replica", []int{0}, func() bool {
		return w.statuses(main, "taloscluster/converge: clusters/demo", "success") > 0 &&
			w.statuses(main, "taloscluster/converge: clusters/other", "success") > 0
	})
	w.replicas[0].Wait()
	w.oneVMPerName(t, 8)
	for _, c := range []string{"clusters/demo", "clusters/other"} {
		if n := w.statuses(main, "taloscluster/converge: "+c, "success"); n != 1 {
			t.Errorf("%s: %d success statuses, want exactly 1", c, n)
		}
	}
}
