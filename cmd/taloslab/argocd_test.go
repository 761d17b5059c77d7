package main

import (
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/lab/kube/realkube"
)

// TestArgoCDSide: with the real kube-apiserver named, up starts the Argo
// CD side and lab.env names its kubeconfig, through which Argo CD's
// Application and AppProject kinds are served in the argocd namespace.
func TestArgoCDSide(t *testing.T) {
	t.Parallel()
	realkube.Binaries(t) // skips without them
	l := startUp(t, "--subnet", "127.201.0.0/24", "--argocd=true")
	path := l.env["TALOSLAB_ARGOCD_KUBECONFIG"]
	if path == "" {
		t.Fatal("lab.env names no TALOSLAB_ARGOCD_KUBECONFIG")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{"applications", "appprojects"} {
		gvr := schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: res}
		if _, err := dyn.Resource(gvr).Namespace("argocd").List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Errorf("listing %s in argocd: %v", res, err)
		}
	}
}
