package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/taloscluster/taloscluster/lab/kube/realkube"
)

// TestAgentRegistersWithArgoCD: the agent reads a cluster's Argo CD
// kubeconfig from its secrets directory only: the pull request also
// commits a file of that name, which would not even parse, and the plan is
// made with the secrets directory's. A pull request that adds an argocd
// section to a built cluster is planned with the registration's steps and
// nothing else; its merge converges them, and the cluster's Application is
// on Argo CD.
func TestAgentRegistersWithArgoCD(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{})
	cp.InstallArgoCD(t)
	w := newAgentWorld(t, "127.183.65.0/24")
	w.convergedFirst(t)
	// argocd.git.url is where Argo CD sends the repository's token: the
	// operators allow it (the endpoint policy).
	w.cfg.AllowedEndpoints = []string{"https://git.example.org/"}
	w.restart(t)
	secrets := filepath.Join(w.cfg.SecretsDir, "clusters", "demo")
	if err := os.WriteFile(filepath.Join(secrets, "argocd.kubeconfig"), cp.AdminKubeconfig(), 0o600); err != nil {
		t.Fatal(err)
	}

	section := "\nargocd:\n  kubeconfig: argocd.kubeconfig\n  admins: [ops@example.org]\n  git: {url: https://git.example.org/apps.git}\n  infra: {url: https://git.example.org/infra.git}\n"
	head, err := w.repo.Commit("argo", map[string]string{
		"clusters/demo/cluster.yaml":      w.cluster + section,
		"clusters/demo/argocd.kubeconfig": "not a kubeconfig: the repository's file is never read\n",
	}, "register with Argo CD")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "argo", "main", "Register with Argo CD")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the plan comment", func() bool { return w.status(head, "taloscluster/plan: clusters/demo") == "success" })
	comments := w.repo.Comments(pr.Number)
	if len(comments) != 1 {
		t.Fatalf("%d plan comments", len(comments))
	}
	body := comments[0].Body
	for _, want := range []string{"application", "argocd:argocd/demo-cluster", "appproject"} {
		if !strings.Contains(body, want) {
			t.Errorf("the plan comment does not show %q:\n%s", want, body)
		}
	}
	for _, unwanted := range []string{"machine ", "does not run here"} {
		if strings.Contains(body, unwanted) {
			t.Errorf("the plan comment shows %q:\n%s", unwanted, body)
		}
	}

	merged, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the converge of the merge", func() bool {
		return w.status(merged, "taloscluster/converge: clusters/demo") == "success"
	})
	dyn, err := dynamic.NewForConfig(cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	apps := dyn.Resource(schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}).Namespace("argocd")
	if _, err := apps.Get(t.Context(), "demo-cluster", metav1.GetOptions{}); err != nil {
		t.Errorf("the cluster's Application after the merge: %v", err)
	}
}
