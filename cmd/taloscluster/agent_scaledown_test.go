package main

import (
	"strings"
	"testing"
)

// twoWorkers starts an agent world on net whose default branch has two
// workers, converged.
func twoWorkers(t *testing.T, net string) *agentWorld {
	t.Helper()
	w := newAgentWorld(t, net)
	two := strings.Replace(w.cluster, "count: 1\n", "count: 2\n", 1)
	main, err := w.repo.Commit("main", map[string]string{"clusters/demo/cluster.yaml": two}, "two workers")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	if n := len(w.lab.PVE.VMs()); n != 5 {
		t.Fatalf("%d VMs after the first converge, want 5", n)
	}
	return w
}

// TestScenarioAgentScaleDownPullRequest: a pull request that lowers a pool's
// count shows the removal first in its plan comment, before the steps;
// its merge is converged without a question (the review was the
// confirmation), and the status says so.
func TestScenarioAgentScaleDownPullRequest(t *testing.T) {
	t.Parallel()
	w := twoWorkers(t, "127.79.0.0/24")
	head, err := w.repo.Commit("shrink", map[string]string{"clusters/demo/cluster.yaml": w.cluster}, "one worker")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "shrink", "main", "One worker is enough")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the plan status", func() bool {
		return w.status(head, "taloscluster/plan: clusters/demo") == "success"
	})
	comments := w.repo.Comments(pr.Number)
	if len(comments) != 1 {
		t.Fatalf("%d plan comments, want 1", len(comments))
	}
	body := comments[0].Body
	removes, details := strings.Index(body, "removes 1 machine"), strings.Index(body, "<details>")
	if removes < 0 || details < 0 || removes > details || !strings.Contains(body[removes:details], "demo-worker-02") {
		t.Fatalf("the plan comment does not list the removal before the steps:\n%s", body)
	}
	merge, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the converge of the merge", func() bool {
		return w.status(merge, "taloscluster/converge: clusters/demo") == "success"
	})
	for _, v := range w.lab.PVE.VMs() {
		if v.Name == "demo-worker-02" {
			t.Fatal("the merge was converged but demo-worker-02 is still there")
		}
	}
	if n := len(w.lab.PVE.VMs()); n != 4 {
		t.Fatalf("%d VMs after the merge, want 4", n)
	}
}

// TestScenarioAgentWaitsOnABudget: a merge whose drain a
// PodDisruptionBudget blocks is pending with the reason, not failed, and
// nothing was reset or deleted.
func TestScenarioAgentWaitsOnABudget(t *testing.T) {
	t.Parallel()
	w := twoWorkers(t, "127.80.0.0/24")
	k, ok := w.lab.Kube("demo")
	if !ok {
		t.Fatal("no Kubernetes API")
	}
	guardedIn(t, k, "demo-worker-02")
	shrink, err := w.repo.Commit("main", map[string]string{"clusters/demo/cluster.yaml": w.cluster}, "one worker")
	if err != nil {
		t.Fatal(err)
	}
	var desc string
	w.pollUntil(t, "a pending status that names the budget", func() bool {
		for _, s := range w.repo.Statuses(shrink) {
			if s.Context == "taloscluster/converge: clusters/demo" && s.State == "pending" && strings.Contains(s.Description, "PodDisruptionBudget") {
				desc = s.Description
				return true
			}
		}
		return false
	})
	if !strings.HasPrefix(desc, "waiting: ") {
		t.Errorf("pending status %q, want it to start with \"waiting: \"", desc)
	}
	if st := w.status(shrink, "taloscluster/converge: clusters/demo"); st == "failure" {
		t.Fatal("a converge waiting on a budget was reported as failed")
	}
	for _, e := range w.lab.Log() {
		if e.Source == "talos" && e.Op == "Reset" || e.Source == "proxmox" && e.Op == "qemu.delete" {
			t.Fatal("a converge waiting on a drain reset or deleted a machine")
		}
	}
}
