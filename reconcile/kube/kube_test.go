package kube_test

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	labkube "github.com/taloscluster/taloscluster/lab/kube"
	"github.com/taloscluster/taloscluster/reconcile/kube"
)

var seq atomic.Int32

// cluster starts a Kubernetes API emulator with two Ready workers.
func cluster(t *testing.T) (*labkube.Server, *kube.Client, kubernetes.Interface) {
	t.Helper()
	caCert, caKey, err := labkube.NewCA("test cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(fmt.Sprintf("127.55.%d.5:6443", seq.Add(1)))
	srv, err := labkube.New(labkube.Options{CACert: caCert, CAKey: caKey, Addr: addr, Version: "v1.36.1", ReadyDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	for _, n := range []string{"w1", "w2"} {
		if err := srv.AddNode(labkube.Node{Name: n, Role: labkube.RoleWorker}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := srv.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := kube.NewFromInterface(cs)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nodes, err := c.Nodes(t.Context())
		if err == nil && len(nodes) == 2 && nodes[0].Ready && nodes[1].Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes never Ready: %v %v", nodes, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return srv, c, cs
}

func TestVersionAndCordon(t *testing.T) {
	t.Parallel()
	_, c, _ := cluster(t)
	v, err := c.Version(t.Context())
	if err != nil || v != "v1.36.1" {
		t.Fatalf("version %q, %v", v, err)
	}
	if err := c.Cordon(t.Context(), "w1", "test"); err != nil {
		t.Fatal(err)
	}
	nodes, err := c.Nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !nodes[0].Unschedulable || nodes[1].Unschedulable {
		t.Fatalf("cordon: %+v", nodes)
	}
	if err := c.DeleteNode(t.Context(), "w1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteNode(t.Context(), "w1"); err != nil {
		t.Fatalf("deleting a node that is gone: %v", err)
	}
}

func TestDrainHonoursDisruptionBudgets(t *testing.T) {
	t.Parallel()
	srv, c, cs := cluster(t)
	for i := 0; i < 2; i++ {
		if _, err := srv.AddPod(labkube.Pod{Node: "w1", Labels: map[string]string{"app": "web"}, OwnerKind: "ReplicaSet", OwnerName: "web"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.AddPod(labkube.Pod{Node: "w1", Labels: map[string]string{"app": "db"}, OwnerKind: "StatefulSet", OwnerName: "db"}); err != nil {
		t.Fatal(err)
	}
	minAvailable := intstr.FromInt32(1)
	_, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(t.Context(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cordon(t.Context(), "w1", "test"); err != nil {
		t.Fatal(err)
	}
	err = c.Drain(t.Context(), "w1", 3*time.Second)
	var de *kube.DrainError
	if !errors.Is(err, kube.ErrDrainTimeout) || !errors.As(err, &de) || len(de.Blocked) != 1 {
		t.Fatalf("drain with a blocking budget: %v, want a DrainError naming the one blocked pod", err)
	}
	pods, err := cs.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=w1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Labels["app"] != "db" {
		t.Fatalf("pods left on w1: %d, want only the budget-protected one", len(pods.Items))
	}
	nodes, _ := c.Nodes(t.Context())
	if !nodes[0].Unschedulable || nodes[0].CordonedBy != kube.CordonedByUs {
		t.Fatalf("cordon: %+v, want unschedulable and marked as ours", nodes[0])
	}
	if err := c.Uncordon(t.Context(), "w1"); err != nil {
		t.Fatal(err)
	}
	nodes, _ = c.Nodes(t.Context())
	if nodes[0].Unschedulable || nodes[0].CordonedBy != "" {
		t.Fatalf("uncordon: %+v", nodes[0])
	}
}
