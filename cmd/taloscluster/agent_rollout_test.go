package main

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAgentRollsOutTwoKubernetesHopsFromAPullRequest: a cluster converged
// at Kubernetes v1.34.2 gets a pull request that pins v1.36.1. Its plan
// comment shows both hops (v1.34.2 -> v1.35.0 -> v1.36.1); while the merge
// is converged the status page shows the step each node is in; after it
// every API server and kubelet runs v1.36.1, and the converge comment lists
// the steps each node went through, both hops' among them.
func TestAgentRollsOutTwoKubernetesHopsFromAPullRequest(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.220.0.0/24")
	const pinned = "kubernetes:\n  version: v1.36.1\n"
	if !strings.Contains(w.cluster, pinned) {
		t.Fatalf("the lab's cluster.yaml does not pin Kubernetes as expected:\n%s", w.cluster)
	}
	older := strings.Replace(w.cluster, pinned, "kubernetes:\n  version: v1.34.2\n", 1)
	first, err := w.repo.Commit("main", map[string]string{"clusters/demo/cluster.yaml": older}, "start at Kubernetes v1.34.2")
	if err != nil {
		t.Fatal(err)
	}
	const converge = "taloscluster/converge: clusters/demo"
	w.pollUntil(t, "the first converge, at v1.34.2", func() bool { return w.status(first, converge) == "success" })
	w.checkKubernetes(t, "v1.34.2")

	head, err := w.repo.Commit("kubernetes-1.36", map[string]string{"clusters/demo/cluster.yaml": w.cluster}, "Kubernetes v1.36.1")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "kubernetes-1.36", "main", "Kubernetes v1.36.1")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the plan of the pull request", func() bool { return w.status(head, "taloscluster/plan: clusters/demo") == "success" })
	comments := w.repo.Comments(pr.Number)
	if len(comments) != 1 {
		t.Fatalf("%d comments on the pull request, want the plan's", len(comments))
	}
	for _, hop := range []string{"hop 1 of 2 (v1.34.2 -", "v1.35.0)", "hop 2 of 2 (v1.35.0 -", "v1.36.1)"} {
		if !strings.Contains(comments[0].Body, hop) {
			t.Errorf("the plan comment lacks %q:\n%s", hop, comments[0].Body)
		}
	}

	merge, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// The page is read between polls: a converge of two hops takes many
	// of them, so it is seen in progress.
	var live string
	w.pollUntil(t, "the converge of the merge", func() bool {
		rec := httptest.NewRecorder()
		w.http.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if page := rec.Body.String(); live == "" && strings.Contains(page, `<tr data-rollout-node="demo-`) {
			live = page
		}
		return w.status(merge, converge) == "success"
	})
	if live == "" {
		t.Error("the status page never showed a node's step during the converge")
	} else if !strings.Contains(live, "<td>upgrade</td>") || !strings.Contains(live, "upgrade-kubernetes (") {
		t.Errorf("the status page during the converge shows no Kubernetes step:\n%s", live)
	}
	w.checkKubernetes(t, "v1.36.1")

	var comment string
	for _, c := range w.repo.Comments(pr.Number) {
		if strings.Contains(c.Body, "taloscluster converge") {
			comment = c.Body
		}
	}
	for _, want := range []string{
		"<details><summary>Steps per node: 4 nodes, ",
		"- `demo-controlplane-01`: upgrade-kubernetes (kube-apiserver → v1.35.0) ",
		"upgrade-kubernetes (kube-apiserver → v1.36.1) ",
		"- `demo-worker-01`: upgrade-kubernetes (kubelet → v1.35.0) ",
		"upgrade-kubernetes (kubelet → v1.36.1) ",
		"- the whole cluster: ",
	} {
		if !strings.Contains(comment, want) {
			t.Errorf("the converge comment lacks %q:\n%s", want, comment)
		}
	}
	rec := httptest.NewRecorder()
	w.http.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if strings.Contains(rec.Body.String(), "data-rollout-node") {
		t.Error("the status page still shows the rollout after the converge")
	}
	var out strings.Builder
	for _, c := range w.repo.Comments(pr.Number) {
		out.WriteString(c.Body)
	}
	out.WriteString(live + rec.Body.String() + w.logs.String())
	for _, s := range w.secrets {
		if strings.Contains(out.String(), s) {
			t.Fatal("a secret leaked into a comment, the status page or the log")
		}
	}
}

// checkKubernetes fails unless every API server and kubelet of the demo
// cluster runs version, as the lab sees them.
func (w *agentWorld) checkKubernetes(t *testing.T, version string) {
	t.Helper()
	v := w.lab.World()
	seen := 0
	for _, c := range v.Clusters {
		if c.Name != "demo" {
			continue
		}
		for _, cp := range c.ControlPlane {
			seen++
			if cp.APIServer != version {
				t.Errorf("the API server of %s runs %s, want %s", cp.Node, cp.APIServer, version)
			}
		}
		for _, n := range c.KubeNodes {
			seen++
			if n.Kubelet != version {
				t.Errorf("the kubelet of %s runs %s, want %s", n.Name, n.Kubelet, version)
			}
		}
	}
	if seen != 3+4 {
		t.Errorf("%d API servers and kubelets seen, want 3 and 4", seen)
	}
}
