package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/taloscluster/taloscluster/check"
	"github.com/taloscluster/taloscluster/lab/kube/realkube"
)

// TestConvergeRegistersWithArgoCD: with an argocd section (its kubeconfig
// beside the cluster directory, as ../argocd-kubeconfig), plan shows the
// registration deferred until the cluster is built; converge builds the
// cluster and then registers it with Argo CD (a real kube-apiserver with
// Argo CD's kinds); the next plan has no changes; destroy removes the
// registration and the cluster.
func TestConvergeRegistersWithArgoCD(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{})
	cp.InstallArgoCD(t)
	_, dir := labCluster(t, "127.183.64.0/24", "argo", 0)
	kubeconfig, err := os.ReadFile(cp.Kubeconfig(t, "argocd-admin", "system:masters"))
	if err != nil {
		t.Fatal(err)
	}
	// Beside the cluster directory, as the Python tool's examples keep it.
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "argocd-kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := filepath.Join(dir, "cluster.yaml")
	data, err := os.ReadFile(yaml)
	if err != nil {
		t.Fatal(err)
	}
	section := "\nargocd:\n  kubeconfig: ../argocd-kubeconfig\n  admins: [ops@example.org]\n  git: {url: https://git.example.org/apps.git}\n  infra: {url: https://git.example.org/infra.git}\n"
	if err := os.WriteFile(yaml, append(data, section...), 0o644); err != nil {
		t.Fatal(err)
	}

	if code, out, errOut := cli(t, "plan", "--offline", "-C", dir); code != 0 || !strings.Contains(out, "deferred: plan --offline reads nothing") {
		t.Fatalf("plan --offline (exit %d):\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := cli(t, "plan", "-C", dir)
	if code != 0 || !strings.Contains(out, "deferred: ") || strings.Contains(out, "does not run plugins") {
		t.Fatalf("plan before the first build (exit %d):\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := cli(t, "converge", "-C", dir, "--yes"); code != 0 || !strings.Contains(out, "argocd [5/5]") {
		t.Fatalf("converge (exit %d):\n%s\n%s", code, out, errOut)
	}
	dyn, err := dynamic.NewForConfig(cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	apps := dyn.Resource(schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}).Namespace("argocd")
	app, err := apps.Get(t.Context(), "argo-cluster", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the cluster's Application after converge: %v", err)
	}
	values, _, _ := unstructured.NestedString(app.Object, "spec", "source", "helm", "values")
	if !strings.Contains(values, "url: https://127.183.64.5:6443") {
		t.Errorf("the cluster's Application does not name the cluster's API:\n%s", values)
	}
	if code, out, errOut := cli(t, "plan", "-C", dir); code != 0 || !strings.Contains(out, "No changes") {
		t.Fatalf("plan after converge (exit %d):\n%s\n%s", code, out, errOut)
	}
	if r := checkPlugins(t, dir); len(r.Plugins) != 1 || r.Plugins[0].Name != "argocd" || r.Plugins[0].State != check.StateInSync {
		t.Errorf("check after converge: plugins %+v, want argocd in sync", r.Plugins)
	}
	// Someone edits the AppProject on Argo CD's side: check finds it.
	projects := dyn.Resource(schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}).Namespace("argocd")
	if _, err := projects.Patch(t.Context(), "argo", types.MergePatchType, []byte(`{"spec":{"description":"edited by hand"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r := checkPlugins(t, dir)
	if len(r.Plugins) != 1 || r.Plugins[0].State != check.StateDrift || len(r.Plugins[0].Steps) != 1 || !strings.Contains(r.Plugins[0].Steps[0], "argo") {
		t.Errorf("check after the AppProject was edited: plugins %+v, want argocd drift with one step", r.Plugins)
	}
	if !slices.ContainsFunc(r.Findings, func(f check.Finding) bool { return f.Kind == check.KindDrift && f.Subject == "plugin argocd" }) {
		t.Errorf("check after the AppProject was edited: no drift finding for the plugin: %+v", r.Findings)
	}
	if code, out, errOut := cli(t, "destroy", "-C", dir, "--yes"); code != 0 {
		t.Fatalf("destroy (exit %d):\n%s\n%s", code, out, errOut)
	}
	if _, err := apps.Get(t.Context(), "argo-cluster", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the cluster's Application after destroy: %v", err)
	}
}

// checkPlugins runs check -o json on dir with no release source to read
// (the releases are then unknown and the check incomplete) and returns
// its report, for what it says of the cluster and its plugins.
func checkPlugins(t *testing.T, dir string) *check.Report {
	t.Helper()
	_, out, errOut := cli(t, "check", "-C", dir, "-o", "json", "--github-api", "https://127.0.0.1:1/")
	return decodeCheck(t, out, errOut)
}

// decodeCheck decodes the report of check -o json.
func decodeCheck(t *testing.T, out, errOut string) *check.Report {
	t.Helper()
	var r check.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("check -o json: %v\n%s\n%s", err, out, errOut)
	}
	return &r
}
