package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
)

// setExtensions rewrites the talos section's extensions of a lab
// cluster.yaml: a new schematic, so a Talos upgrade of every node.
func setExtensions(t *testing.T, dir string, extensions string) {
	t.Helper()
	path := filepath.Join(dir, "cluster.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "  extensions:") && len(out) > 0 && strings.HasPrefix(out[len(out)-1], "  version: v1.13") {
			continue
		}
		out = append(out, l)
		if strings.HasPrefix(l, "  version: v1.13") && extensions != "" {
			out = append(out, "  extensions: "+extensions)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// bootWatch samples the lab's nodes and notes every boot that did not
// come with a new image or config: a reboot without need.
type bootWatch struct {
	mu       sync.Mutex
	needless []string
	boots    int
}

func watchBoots(l *lab.Lab, name string) (stop func() *bootWatch) {
	w := &bootWatch{}
	type seen struct {
		boots int
		image string
	}
	last := map[string]seen{}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			for _, n := range l.Talos.Nodes() {
				if n.Cluster != name || !n.Up {
					continue
				}
				prev, ok := last[n.Hostname]
				last[n.Hostname] = seen{boots: n.Boots, image: n.Image}
				if ok && n.Boots > prev.boots {
					w.mu.Lock()
					w.boots++
					if n.Image == prev.image {
						w.needless = append(w.needless, n.Hostname+" booted again into "+n.Image)
					}
					w.mu.Unlock()
				}
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() *bootWatch {
		close(done)
		<-finished
		return w
	}
}

// TestScenarioKilledUpgradesResume kills converge (SIGKILL, a process of
// its own) at twenty random moments of Talos upgrades (a new schematic,
// back and forth) of 3 control planes and 4 workers with max_unavailable
// 2. Every run after a kill resumes: at the end every node runs the last
// schematic, no node is left cordoned, no node booted again into the
// image it already ran, etcd never had two members down or lost its
// majority, and never more than two workers were down at once.
func TestScenarioKilledUpgradesResume(t *testing.T) {
	t.Parallel()
	l, dir := labCluster(t, "127.229.0.0/24", "rolls", 4)
	path := filepath.Join(dir, "cluster.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, []byte("\nrollout:\n  max_unavailable: 2\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli(t, "converge", "--yes", "-C", dir); code != 0 {
		t.Fatalf("build of 3 + 4: exit %d:\n%s\n%s", code, out, errOut)
	}
	built := time.Now()
	for _, n := range l.Talos.Nodes() {
		l.Talos.Latency(n.Addr, 20*time.Millisecond)
	}
	stop := watchBoots(l, "rolls")
	schematics := []string{"[siderolabs/iscsi-tools]", ""}
	goal := 0
	setExtensions(t, dir, schematics[goal])
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	var outputs []string
	kills, upgrades := 0, 0
	for try := 0; kills < 20; try++ {
		if try == 80 {
			t.Fatalf("only %d kills landed in 80 runs", kills)
		}
		after := time.Duration(300+rng.IntN(3000)) * time.Millisecond
		out, killed, err := convergeKilledAfter(t, exe, dir, after)
		if err != nil {
			t.Fatalf("a converge that was not killed failed: %v\n%s\nearlier runs:\n%s", err, out, strings.Join(outputs, "\n---\n"))
		}
		outputs = append(outputs, out)
		if !quorum(l, "rolls") {
			t.Fatalf("etcd lost its majority at kill point %d (after %s); the run said:\n%s", kills, after, out)
		}
		if killed {
			kills++
			lines := strings.Split(strings.TrimSpace(out), "\n")
			t.Logf("kill %d after %s: the run last said %q", kills, after, lines[len(lines)-1])
			continue
		}
		upgrades++
		checkUpgraded(t, l, "rolls", dir)
		if t.Failed() {
			t.Fatalf("earlier runs:\n%s", strings.Join(outputs, "\n---\n"))
		}
		goal = 1 - goal
		setExtensions(t, dir, schematics[goal])
	}
	code, out, errOut := cli(t, "converge", "--yes", "-C", dir)
	if code != 0 {
		t.Fatalf("the converge after the kills: exit %d\n%s\n%s\nearlier runs:\n%s", code, out, errOut, strings.Join(outputs, "\n---\n"))
	}
	checkUpgraded(t, l, "rolls", dir)
	w := stop()
	for _, msg := range w.needless {
		t.Errorf("a reboot without need: %s", msg)
	}
	moments := 0
	for _, s := range l.Talos.EtcdHistory("rolls") {
		if s.Time.Before(built) {
			continue
		}
		moments++
		if !s.Quorum() || len(s.Voters)-len(s.StartedVoters) > 1 {
			t.Errorf("at %s (%s %s) etcd had %d voters of which %d started (%v): a majority lost or two members down", s.Time.Format("15:04:05.000"), s.Event, s.Member, len(s.Voters), len(s.StartedVoters), s.StartedVoters)
		}
	}
	var events []lab.LogEntry
	for _, e := range l.Log() {
		if e.Time.After(built) {
			events = append(events, e)
		}
	}
	workers := []string{"rolls-worker-01", "rolls-worker-02", "rolls-worker-03", "rolls-worker-04"}
	cps := []string{"rolls-controlplane-01", "rolls-controlplane-02", "rolls-controlplane-03"}
	maxDown(t, events, cps, 1)
	maxDown(t, events, workers, 2)
	t.Logf("%d kills, %d upgrades completed between them, %d boots, %d moments of etcd's history checked", kills, upgrades+1, w.boots, moments)
}

// checkUpgraded checks that every node runs the schematic cluster.yaml
// names now (the plan is empty), is up, and is schedulable.
func checkUpgraded(t *testing.T, l *lab.Lab, name, dir string) {
	t.Helper()
	code, out, errOut := cli(t, "plan", "-C", dir)
	if code != 0 || !strings.Contains(out, "No changes") {
		t.Errorf("plan after a finished upgrade: exit %d\n%s\n%s", code, out, errOut)
	}
	k, ok := l.Kube(name)
	if !ok {
		t.Fatal("no Kubernetes API")
	}
	for _, n := range k.Nodes() {
		if n.Spec.Unschedulable {
			t.Errorf("%s is left cordoned", n.Name)
		}
	}
}

// maxDown checks from the lab's events that at most limit of hosts were
// down at once.
func maxDown(t *testing.T, log []lab.LogEntry, hosts []string, limit int) {
	t.Helper()
	down := map[string]bool{}
	for _, e := range log {
		if e.Source != "lab" {
			continue
		}
		in := false
		for _, h := range hosts {
			in = in || e.Target == h
		}
		if !in {
			continue
		}
		switch e.Op {
		case "node-left":
			down[e.Target] = true
		case "node-joined":
			delete(down, e.Target)
		}
		if len(down) > limit {
			t.Errorf("at %s, %d of %v were down at once: %v", e.Time.Format("15:04:05.000"), len(down), hosts, down)
			return
		}
	}
}
