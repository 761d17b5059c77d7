package main

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/taloscluster/taloscluster/lab"
	labkube "github.com/taloscluster/taloscluster/lab/kube"
)

// setCounts rewrites the control-plane and worker counts of a lab
// cluster.yaml.
func setCounts(t *testing.T, dir string, controlPlanes, workers int) {
	t.Helper()
	path := filepath.Join(dir, "cluster.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	section := ""
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "controlplane:"):
			section = "cp"
		case strings.HasPrefix(l, "workers:"):
			section = "workers"
		case strings.HasPrefix(l, "  count:") && section == "cp":
			lines[i] = "  count: " + itoa(controlPlanes)
		case strings.HasPrefix(l, "    count:") && section == "workers":
			lines[i] = "    count: " + itoa(workers)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// quorum reports whether the lab cluster's etcd has a majority of its
// voting members started.
func quorum(l *lab.Lab, name string) bool {
	voters, started := 0, 0
	for _, m := range l.Talos.EtcdMembers(name) {
		if m.Learner {
			continue
		}
		voters++
		if m.Started {
			started++
		}
	}
	return voters > 0 && started*2 > voters
}

// TestScenarioKilledScaleDownsResume kills converge (SIGKILL, a process of its
// own) at twenty random moments of a scale-down from 5 control planes and
// 4 workers to 3 and 1; a run that finishes before its kill leaves the
// cluster shrunk (checked), and the cluster is grown back for the next.
// At the end no machine is duplicated or left behind, etcd has exactly the
// desired members, and at no kill point had etcd lost its majority.
func TestScenarioKilledScaleDownsResume(t *testing.T) {
	t.Parallel()
	l, dir := labCluster(t, "127.94.0.0/24", "kills", 4)
	grow := func() {
		t.Helper()
		setCounts(t, dir, 5, 4)
		if code, out, errOut := cli(t, "converge", "--yes", "-C", dir); code != 0 {
			t.Fatalf("build of 5 + 4: exit %d:\n%s\n%s", code, out, errOut)
		}
		k, _ := l.Kube("kills")
		for i := 2; i <= 4; i++ {
			if _, err := k.AddPod(labkube.Pod{Node: "kills-worker-0" + itoa(i), OwnerKind: "ReplicaSet", OwnerName: "web"}); err != nil {
				t.Fatal(err)
			}
		}
		setCounts(t, dir, 3, 1)
	}
	grow()
	built := time.Now()
	// Slow enough that a kill lands inside a step rather than between runs.
	l.PVE.SetLatency("qemu.delete", 300*time.Millisecond)
	for _, n := range l.Talos.Nodes() {
		l.Talos.Latency(n.Addr, 20*time.Millisecond)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var outputs []string
	kills, shrunk := 0, 0
	for try := 0; kills < 20; try++ {
		if try == 60 {
			t.Fatalf("only %d kills landed in 60 runs", kills)
		}
		after := time.Duration(300+rng.IntN(2500)) * time.Millisecond
		out, killed, err := convergeKilledAfter(t, exe, dir, after)
		if err != nil {
			t.Fatalf("a converge that was not killed failed: %v\n%s", err, out)
		}
		outputs = append(outputs, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !quorum(l, "kills") {
			t.Fatalf("etcd lost its majority at kill point %d (after %s); the run said:\n%s", kills, after, out)
		}
		if killed {
			kills++
			t.Logf("kill %d after %s: the run last said %q", kills, after, lines[len(lines)-1])
			continue
		}
		shrunk++
		checkShrunk(t, l, "kills", 3, 1)
		if t.Failed() {
			t.Fatalf("earlier runs:\n%s", strings.Join(outputs, "\n---\n"))
		}
		grow()
	}
	code, out, errOut := cli(t, "converge", "--yes", "-C", dir)
	if code != 0 {
		t.Fatalf("the converge after the kills: exit %d\n%s\n%s\nearlier runs:\n%s", code, out, errOut, strings.Join(outputs, "\n---\n"))
	}
	checkShrunk(t, l, "kills", 3, 1)
	// At every moment of etcd's history since the first build: a majority
	// of the voting members healthy, and never two of them down at once.
	moments := 0
	for _, s := range l.Talos.EtcdHistory("kills") {
		if s.Time.Before(built) {
			continue
		}
		moments++
		if !s.Quorum() || len(s.Voters)-len(s.StartedVoters) > 1 {
			t.Errorf("at %s (%s %s) etcd had %d voters of which %d started (%v): a majority lost or two members down", s.Time.Format("15:04:05.000"), s.Event, s.Member, len(s.Voters), len(s.StartedVoters), s.StartedVoters)
		}
	}
	if moments == 0 {
		t.Error("the lab recorded no etcd history during the scale-downs")
	}
	t.Logf("%d kills, %d scale-downs completed between them, %d moments of etcd's history checked", kills, shrunk+1, moments)
}

// convergeKilledAfter runs converge -C dir in a process of its own and
// kills it (SIGKILL) after the given time unless it ended before; err is
// the error of a run that ended by itself.
func convergeKilledAfter(t *testing.T, exe, dir string, after time.Duration) (out string, killed bool, err error) {
	t.Helper()
	proc := exec.Command(exe, "converge", "--yes", "-C", dir)
	proc.Env = append(os.Environ(), envRunMain+"=1")
	var buf syncBuffer
	proc.Stdout, proc.Stderr = &buf, &buf
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(after):
		_ = proc.Process.Signal(syscall.SIGKILL)
		<-exited
		killed = true
	}
	return buf.String(), killed, err
}

// checkShrunk checks that exactly the desired machines are left: one VM
// each, no config ISO of a removed machine, a Node each, and the etcd
// members are the control planes.
func checkShrunk(t *testing.T, l *lab.Lab, name string, controlPlanes, workers int) {
	t.Helper()
	var want []string
	for i := 1; i <= controlPlanes; i++ {
		want = append(want, name+"-controlplane-0"+itoa(i))
	}
	for i := 1; i <= workers; i++ {
		want = append(want, name+"-worker-0"+itoa(i))
	}
	var vms []string
	for _, v := range l.PVE.VMs() {
		vms = append(vms, v.Name)
	}
	slices.Sort(vms)
	if !slices.Equal(vms, want) {
		t.Errorf("VMs %v, want %v", vms, want)
	}
	for _, v := range l.PVE.Volumes() {
		if strings.Contains(v.VolID, "cidata-") && !slices.ContainsFunc(want, func(h string) bool { return strings.Contains(v.VolID, h+".iso") }) {
			t.Errorf("orphaned config ISO %s", v.VolID)
		}
	}
	var members []string
	for _, m := range l.Talos.EtcdMembers(name) {
		members = append(members, m.Hostname)
	}
	slices.Sort(members)
	if !slices.Equal(members, want[:controlPlanes]) {
		t.Errorf("etcd members %v, want %v", members, want[:controlPlanes])
	}
	k, ok := l.Kube(name)
	if !ok {
		t.Fatal("no Kubernetes API")
	}
	var nodes []string
	for _, n := range k.Nodes() {
		nodes = append(nodes, n.Name)
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, want) {
		t.Errorf("Kubernetes nodes %v, want %v", nodes, want)
	}
}

// TestScenarioBlockedDrainExitsThree: a budget that blocks a drain makes
// converge exit 3 with the reason, and without a terminal a scale-down
// needs --yes.
func TestScenarioBlockedDrainExitsThree(t *testing.T) {
	t.Parallel()
	l, dir := labCluster(t, "127.95.0.0/24", "waits", 2)
	if code, out, errOut := cli(t, "converge", "--yes", "-C", dir); code != 0 {
		t.Fatalf("first build exit %d:\n%s\n%s", code, out, errOut)
	}
	setCounts(t, dir, 3, 1)
	code, _, errOut := cli(t, "converge", "-C", dir)
	if code != 1 || !strings.Contains(errOut, "waits-worker-02") || !strings.Contains(errOut, "--yes") {
		t.Fatalf("converge of a scale-down without a terminal or --yes: exit %d\n%s", code, errOut)
	}
	k, _ := l.Kube("waits")
	guardedIn(t, k, "waits-worker-02")
	code, _, errOut = cli(t, "converge", "--yes", "--drain-timeout", "2s", "-C", dir)
	if code != 3 || !strings.Contains(errOut, "PodDisruptionBudget") {
		t.Fatalf("converge blocked by a budget: exit %d, want 3 naming the budget\n%s", code, errOut)
	}
}

// guardedIn puts a StatefulSet pod on node with a PodDisruptionBudget that
// lets none of its pods go: its eviction is refused (429) for good.
func guardedIn(t *testing.T, k *labkube.Server, node string) {
	t.Helper()
	if _, err := k.AddPod(labkube.Pod{Node: node, Labels: map[string]string{"app": "db"}, OwnerKind: "StatefulSet", OwnerName: "db"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := k.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(t.Context(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestScenarioConfirmationOnATerminal: on a terminal, converge shows the
// plan with its removals first and asks; any answer but "yes" changes
// nothing, "yes" goes on.
func TestScenarioConfirmationOnATerminal(t *testing.T) {
	t.Parallel()
	l, dir := labCluster(t, "127.56.0.0/24", "asks", 2)
	if code, out, errOut := cli(t, "converge", "--yes", "-C", dir); code != 0 {
		t.Fatalf("first build exit %d:\n%s\n%s", code, out, errOut)
	}
	setCounts(t, dir, 3, 1)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ask := func(answer string) (int, string) {
		t.Helper()
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pseudo-terminal here: %v", err)
		}
		defer ptmx.Close()
		proc := exec.Command(exe, "converge", "-C", dir)
		proc.Env = append(os.Environ(), envRunMain+"=1")
		var out syncBuffer
		proc.Stdin, proc.Stdout, proc.Stderr = tty, &out, &out
		if err := proc.Start(); err != nil {
			t.Fatal(err)
		}
		tty.Close()
		// The terminal echoes and is read by nobody else: drain it.
		go func() { _, _ = io.Copy(io.Discard, ptmx) }()
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(out.String(), "Type yes to go on") {
			if time.Now().After(deadline) {
				_ = proc.Process.Kill()
				t.Fatalf("converge never asked:\n%s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := ptmx.Write([]byte(answer + "\n")); err != nil {
			t.Fatal(err)
		}
		err = proc.Wait()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return proc.ProcessState.ExitCode(), out.String()
	}
	before := len(l.PVE.Log())
	code, out := ask("no")
	if code != 1 || !strings.Contains(out, "not confirmed: nothing was changed") {
		t.Fatalf("answer no: exit %d\n%s", code, out)
	}
	removes, steps := strings.Index(out, "Removes 1 machine"), strings.Index(out, "scale-down:")
	if removes < 0 || steps < 0 || removes > steps || !strings.Contains(out, "asks-worker-02") {
		t.Errorf("the question does not show the removal before the steps:\n%s", out)
	}
	for _, op := range l.PVE.Log()[before:] {
		if op.Method != "GET" {
			t.Errorf("an unconfirmed converge called %s %s", op.Method, op.Path)
		}
	}
	if code, out := ask("yes"); code != 0 {
		t.Fatalf("answer yes: exit %d\n%s", code, out)
	}
	checkShrunk(t, l, "asks", 3, 1)
}
