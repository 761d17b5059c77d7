package kube_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/taloscluster/taloscluster/lab/kube"
)

var addrSeq atomic.Uint32

// testAddr returns a loopback address no other test in this package uses,
// on the Kubernetes API port.
func testAddr() netip.AddrPort {
	n := addrSeq.Add(1)
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 66, byte(n / 250), byte(n%250 + 1)}), 6443)
}

// startEmulator starts an emulator with a fresh CA on a unique address; it
// stops with the test.
func startEmulator(t *testing.T, opts kube.Options) (*kube.Server, []byte, []byte) {
	t.Helper()
	caCert, caKey, err := kube.NewCA("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	opts.CACert, opts.CAKey = caCert, caKey
	if !opts.Addr.IsValid() {
		opts.Addr = testAddr()
	}
	s, err := kube.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, caCert, caKey
}

func adminClient(t *testing.T, s *kube.Server) kubernetes.Interface {
	t.Helper()
	cfg, err := s.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	caCert, caKey, err := kube.NewCA("k")
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]kube.Options{
		"no address":   {CACert: caCert, CAKey: caKey},
		"not loopback": {CACert: caCert, CAKey: caKey, Addr: netip.MustParseAddrPort("10.0.0.1:6443")},
		"bad version":  {CACert: caCert, CAKey: caKey, Addr: testAddr(), Version: "1.36"},
		"no CA":        {Addr: testAddr()},
		"key mismatch": {CACert: caCert, CAKey: []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"), Addr: testAddr()},
	} {
		if _, err := kube.New(opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, opts)
		}
	}
}

func TestNodesTurnReadyAfterDelay(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{ReadyDelay: 300 * time.Millisecond, Version: "v1.35.4"})
	c := adminClient(t, s)
	ctx := testContext(t)
	start := time.Now()
	if err := s.AddNode(kube.Node{Name: "cp-1", Role: kube.RoleControlPlane, Addresses: []netip.Addr{netip.MustParseAddr("127.66.200.1")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNode(kube.Node{Name: "w-1", Role: kube.RoleWorker, Labels: map[string]string{"pool": "a"}, KubeletVersion: "v1.34.2"}); err != nil {
		t.Fatal(err)
	}
	n, err := c.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if isReady(n) {
		t.Fatalf("a new node is Ready before its delay")
	}
	if _, ok := n.Labels[kube.LabelControlPlane]; !ok || n.Status.NodeInfo.KubeletVersion != "v1.35.4" {
		t.Errorf("control plane labels %v, kubelet %s", n.Labels, n.Status.NodeInfo.KubeletVersion)
	}
	if len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Address != "127.66.200.1" {
		t.Errorf("addresses %v", n.Status.Addresses)
	}
	err = poll(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for i := range l.Items {
			if isReady(&l.Items[i]) {
				ready++
			}
		}
		return ready == 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("nodes turned Ready after %v, before the delay", d)
	}
	w, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "pool=a,!" + kube.LabelControlPlane})
	if err != nil || len(w.Items) != 1 || w.Items[0].Status.NodeInfo.KubeletVersion != "v1.34.2" {
		t.Fatalf("listing workers: %v %+v", err, w)
	}
	for _, taint := range w.Items[0].Spec.Taints {
		if taint.Key == corev1.TaintNodeNotReady {
			t.Errorf("a Ready node keeps the not-ready taint")
		}
	}

	if err := s.SetNodeReady("w-1", false); err != nil {
		t.Fatal(err)
	}
	n, err = c.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})
	if err != nil || isReady(n) {
		t.Fatalf("w-1 still Ready after SetNodeReady(false): %v", err)
	}
	if err := s.SetKubeletVersion("w-1", "v1.35.4"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVersion("v1.36.1"); err != nil {
		t.Fatal(err)
	}
	v, err := c.Discovery().ServerVersion()
	if err != nil || v.GitVersion != "v1.36.1" || v.Minor != "36" {
		t.Fatalf("version after SetVersion: %v %+v", err, v)
	}
	if got := s.Nodes(); len(got) != 2 || got[1].Status.NodeInfo.KubeletVersion != "v1.35.4" {
		t.Errorf("Nodes() = %d nodes, w-1 kubelet %s", len(got), got[1].Status.NodeInfo.KubeletVersion)
	}
	if err := s.SetNodeReady("nope", true); !apierrors.IsNotFound(err) {
		t.Errorf("SetNodeReady on a missing node: %v", err)
	}
}

// drainWorld is a Ready cluster with a ReplicaSet, a StatefulSet and a
// DaemonSet on two workers, and budgets over the first two.
func drainWorld(t *testing.T) (*kube.Server, kubernetes.Interface) {
	t.Helper()
	s, _, _ := startEmulator(t, kube.Options{})
	for _, n := range []kube.Node{
		{Name: "cp-1", Role: kube.RoleControlPlane},
		{Name: "w-1", Role: kube.RoleWorker},
		{Name: "w-2", Role: kube.RoleWorker},
	} {
		if err := s.AddNode(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []kube.Pod{
		{Name: "web-a", Node: "w-1", Labels: map[string]string{"app": "web"}, OwnerKind: "ReplicaSet", OwnerName: "web-5d8f"},
		{Name: "web-b", Node: "w-2", Labels: map[string]string{"app": "web"}, OwnerKind: "ReplicaSet", OwnerName: "web-5d8f"},
		{Name: "db-0", Node: "w-1", Labels: map[string]string{"app": "db"}, OwnerKind: "StatefulSet", OwnerName: "db"},
		{Name: "proxy-w1", Namespace: "kube-system", Node: "w-1", Labels: map[string]string{"app": "proxy"}, OwnerKind: "DaemonSet", OwnerName: "proxy"},
		{Name: "proxy-cp1", Namespace: "kube-system", Node: "cp-1", Labels: map[string]string{"app": "proxy"}, OwnerKind: "DaemonSet", OwnerName: "proxy"},
	} {
		if _, err := s.AddPod(p); err != nil {
			t.Fatal(err)
		}
	}
	c := adminClient(t, s)
	ctx := testContext(t)
	one := intstr.FromInt32(1)
	for name, spec := range map[string]policyv1.PodDisruptionBudgetSpec{
		"web": {MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		"db":  {MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	} {
		if _, err := c.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return s, c
}

func TestDrainReschedulesReplicaSetPods(t *testing.T) {
	t.Parallel()
	s, c := drainWorld(t)
	ctx := testContext(t)

	pdb, err := c.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := pdb.Status; st.ExpectedPods != 2 || st.DesiredHealthy != 1 || st.CurrentHealthy != 2 || st.DisruptionsAllowed != 1 || st.ObservedGeneration != 1 {
		t.Fatalf("web budget status %+v", st)
	}

	// Cordon, then evict what runs on w-1 as a drain does.
	if _, err := c.CoreV1().Nodes().Patch(ctx, "w-1", types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=w-1"})
	if err != nil {
		t.Fatal(err)
	}
	if names := podNames(pods.Items); !slices.Equal(names, []string{"db-0", "proxy-w1", "web-a"}) {
		t.Fatalf("pods on w-1: %v", names)
	}
	evict := func(ns, name string) error {
		return c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	}
	if err := evict("default", "web-a"); err != nil {
		t.Fatalf("evicting web-a: %v", err)
	}
	// The replacement runs on w-2, the only schedulable worker (the control
	// plane is tainted), and the budget allows one disruption again.
	pods, err = c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("web pods after eviction: %v", podNames(pods.Items))
	}
	for _, p := range pods.Items {
		if p.Name == "web-a" || p.Spec.NodeName != "w-2" || p.Status.Phase != corev1.PodRunning || !podReady(&p) {
			t.Errorf("web pod %s on %q phase %s ready %v", p.Name, p.Spec.NodeName, p.Status.Phase, podReady(&p))
		}
		if !strings.HasPrefix(p.Name, "web-") {
			t.Errorf("replacement name %q", p.Name)
		}
	}
	pdb, err = c.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || pdb.Status.DisruptionsAllowed != 1 || pdb.Status.CurrentHealthy != 2 {
		t.Fatalf("web budget after the replacement: %v %+v", err, pdb.Status)
	}

	// The StatefulSet's only pod is protected by minAvailable 1.
	err = evict("default", "db-0")
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting db-0: %v, want TooManyRequests", err)
	}
	// A DaemonSet pod evicted anyway comes back on its node.
	if err := evict("kube-system", "proxy-w1"); err != nil {
		t.Fatal(err)
	}
	ds, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=w-1"})
	if err != nil || len(ds.Items) != 1 || ds.Items[0].Name == "proxy-w1" {
		t.Fatalf("DaemonSet pods on w-1: %v %v", err, podNames(ds.Items))
	}

	// Deleting a StatefulSet pod brings it back under its name.
	if err := c.CoreV1().Pods("default").Delete(ctx, "db-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	db, err := c.CoreV1().Pods("default").Get(ctx, "db-0", metav1.GetOptions{})
	if err != nil || db.DeletionTimestamp != nil {
		t.Fatalf("db-0 after deletion: %v %+v", err, db.ObjectMeta)
	}
	if db.Spec.NodeName != "w-2" {
		t.Errorf("db-0 came back on %q, want w-2 (w-1 is cordoned)", db.Spec.NodeName)
	}

	// Removing the node collects its pods.
	if err := s.RemoveNode("w-1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range s.Pods() {
		if p.Spec.NodeName == "w-1" {
			t.Errorf("pod %s/%s still on the removed node", p.Namespace, p.Name)
		}
	}
	if err := s.RemoveNode("w-1"); !apierrors.IsNotFound(err) {
		t.Errorf("removing a removed node: %v", err)
	}
}

func TestPodsOnNotReadyNodesStayTerminating(t *testing.T) {
	t.Parallel()
	s, c := drainWorld(t)
	ctx := testContext(t)
	if err := s.SetNodeReady("w-2", false); err != nil {
		t.Fatal(err)
	}
	p, err := c.CoreV1().Pods("default").Get(ctx, "web-b", metav1.GetOptions{})
	if err != nil || podReady(p) {
		t.Fatalf("web-b on a NotReady node: %v ready %v", err, podReady(p))
	}
	pdb, err := c.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || pdb.Status.CurrentHealthy != 1 || pdb.Status.DisruptionsAllowed != 0 {
		t.Fatalf("web budget with one pod down: %v %+v", err, pdb.Status)
	}
	// An unready pod may be evicted while the healthy ones satisfy the budget.
	if err := c.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "web-b", Namespace: "default"}}); err != nil {
		t.Fatalf("evicting the unready web-b: %v", err)
	}
	p, err = c.CoreV1().Pods("default").Get(ctx, "web-b", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("web-b should be terminating on its NotReady node: %v", err)
	}
	if err := s.SetNodeReady("w-2", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods("default").Get(ctx, "web-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("web-b after its node came back: %v, want NotFound", err)
	}
	// A forced deletion does not wait for the kubelet.
	if err := s.SetNodeReady("w-1", false); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if err := c.CoreV1().Pods("default").Delete(ctx, "web-a", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods("default").Get(ctx, "web-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("web-a after a forced deletion: %v", err)
	}
}

func TestPendingPodsWaitForANode(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{ReadyDelay: time.Hour})
	if err := s.AddNode(kube.Node{Name: "w-1", Role: kube.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	name, err := s.AddPod(kube.Pod{OwnerKind: "ReplicaSet", OwnerName: "app-1", Labels: map[string]string{"app": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Pods(); len(p) != 1 || p[0].Name != name || p[0].Spec.NodeName != "" || p[0].Status.Phase != corev1.PodPending {
		t.Fatalf("pod before any node is Ready: %+v", p)
	}
	if err := s.SetNodeReady("w-1", true); err != nil {
		t.Fatal(err)
	}
	if p := s.Pods(); p[0].Spec.NodeName != "w-1" || p[0].Status.Phase != corev1.PodRunning || !podReady(&p[0]) {
		t.Fatalf("pod after w-1 turned Ready: node %q phase %s", p[0].Spec.NodeName, p[0].Status.Phase)
	}
	unready, err := s.AddPod(kube.Pod{Node: "w-1", NotReady: true, Namespace: "apps"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.Pods() {
		if p.Name == unready && (p.Namespace != "apps" || p.Status.Phase != corev1.PodRunning || podReady(&p)) {
			t.Errorf("NotReady pod: ns %s phase %s ready %v", p.Namespace, p.Status.Phase, podReady(&p))
		}
	}
	for _, bad := range []kube.Pod{
		{Node: "nope"},
		{OwnerKind: "Deployment", OwnerName: "x"},
		{OwnerKind: "DaemonSet", OwnerName: "x"},
		{OwnerName: "x"},
	} {
		if _, err := s.AddPod(bad); err == nil {
			t.Errorf("AddPod(%+v) succeeded", bad)
		}
	}
	if err := s.AddNode(kube.Node{Name: "x", Role: "boss"}); err == nil {
		t.Errorf("AddNode with a bad role succeeded")
	}
}

func TestFaultsAndLog(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{})
	if err := s.AddNode(kube.Node{Name: "n1", Role: kube.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	c := adminClient(t, s)
	ctx := testContext(t)

	s.Fail("get nodes", 2, http.StatusInternalServerError)
	for range 2 {
		_, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if !apierrors.IsInternalError(err) {
			t.Fatalf("injected failure: %v", err)
		}
	}
	if _, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Fatalf("the third get: %v", err)
	}
	s.Fail("* nodes", 1, http.StatusServiceUnavailable)
	if _, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("injected 503: %v", err)
	}
	s.Fail("create pods/eviction", 1, http.StatusConflict)
	err := c.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("injected conflict on eviction: %v", err)
	}

	s.Hang("get version", 1)
	hctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err = c.CoreV1().RESTClient().Get().AbsPath("/version").Do(hctx).Raw()
	cancel()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("hung request: %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("hung request returned after %v", d)
	}
	s.Delay("*", 1, 200*time.Millisecond)
	start = time.Now()
	if _, err := c.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("delayed request took %v", d)
	}

	log := s.Log()
	var keys []string
	for _, op := range log {
		keys = append(keys, fmt.Sprintf("%s %d %s", op.Key(), op.Code, op.Fault))
		if op.User != "admin" {
			t.Errorf("op %s by %q", op.Key(), op.User)
		}
	}
	want := []string{
		"get nodes 500 fail", "get nodes 500 fail", "get nodes 200 ",
		"list nodes 503 fail", "create pods/eviction 409 fail",
		"get version 0 hang", "get version 200 delay",
	}
	if !slices.Equal(keys, want) {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(keys, "\n"), strings.Join(want, "\n"))
	}
	if log[0].Name != "n1" || log[4].Namespace != "default" || log[4].Name != "x" {
		t.Errorf("log entries %+v %+v", log[0], log[4])
	}
	s.ResetLog()
	s.Fail("*", 5, 500)
	s.ClearFaults()
	if _, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(s.Log()) != 1 {
		t.Fatalf("after ClearFaults: %v, %d ops", err, len(s.Log()))
	}
}

func TestHangEndsWhenServerCloses(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{})
	c := adminClient(t, s)
	s.Hang("list nodes", 1)
	done := make(chan error, 1)
	go func() {
		_, err := c.CoreV1().Nodes().List(testContext(t), metav1.ListOptions{})
		done <- err
	}()
	err := poll(testContext(t), 5*time.Second, func(context.Context) (bool, error) {
		return len(s.Log()) == 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a hung request succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a hung request outlived the server")
	}
}

// TestWireFormats checks the encodings client-go does not exercise by
// default, and the answers for what the emulator does not serve.
func TestWireFormats(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{})
	if err := s.AddNode(kube.Node{Name: "n1", Role: kube.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	cfg, err := s.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	do := func(method, path, accept, ctype, body string) (int, string, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	cases := []struct {
		method, path, accept, ctype, body string
		code                              int
		wantType, contains                string
	}{
		{"GET", "/api/v1/nodes/n1", "application/yaml", "", "", 200, "application/yaml", "kind: Node"},
		{"GET", "/api/v1/nodes/n1", "application/vnd.kubernetes.protobuf", "", "", 200, "application/vnd.kubernetes.protobuf", "k8s\x00"},
		{"GET", "/api/v1/nodes/n1", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json", "", "", 200, "application/json", `"kind":"Node"`},
		{"GET", "/api/v1/nodes/n1", "text/html", "", "", 406, "application/json", `"reason":"NotAcceptable"`},
		{"GET", "/api/v1/nodes?watch=true", "", "", "", 501, "application/json", "watch is not implemented"},
		{"GET", "/api/v1/watch/nodes", "", "", "", 501, "application/json", `"code":501`},
		{"GET", "/api/v1/endpoints", "", "", "", 404, "application/json", "the server could not find the requested resource"},
		{"GET", "/apis/apps/v1/replicasets", "", "", "", 404, "application/json", `"reason":"NotFound"`},
		{"DELETE", "/api/v1/nodes", "", "", "", 405, "application/json", `"reason":"MethodNotAllowed"`},
		{"PATCH", "/api/v1/nodes/n1", "", "application/apply-patch+yaml", "{}", 415, "application/json", "server-side apply"},
		{"POST", "/api/v1/nodes", "", "application/json", `{"metadata":{"name":"n2"}}`, 201, "application/json", `"name":"n2"`},
		{"POST", "/api/v1/nodes", "", "application/json", `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"n3"}}`, 400, "application/json", `"reason":"BadRequest"`},
		{"POST", "/api/v1/nodes", "", "text/plain", `x`, 415, "application/json", `"reason":"UnsupportedMediaType"`},
		{"PUT", "/api/v1/nodes/n1", "", "application/json", `{"metadata":{"name":"other"}}`, 400, "application/json", "does not match the name on the URL"},
		{"POST", "/api/v1/namespaces/default/pods/p/eviction", "", "application/json", `{"metadata":{"name":"q"}}`, 400, "application/json", "name in URL does not match"},
		{"GET", "/api/v1/nodes?labelSelector=a%20in", "", "", "", 400, "application/json", `"reason":"BadRequest"`},
		{"GET", "/api/v1/nodes?dryRun=All", "", "", "", 400, "application/json", "dry runs"},
		{"GET", "/healthz", "", "", "", 200, "text/plain; charset=utf-8", "ok"},
		{"GET", "/api", "", "", "", 200, "application/json", `"serverAddress":"` + s.Addr().String()},
		{"GET", "/apis/policy", "", "", "", 200, "application/json", `"preferredVersion":{"groupVersion":"policy/v1"`},
		{"GET", "/api/v1/namespaces/default", "", "", "", 200, "application/json", `"phase":"Active"`},
		{"GET", "/api/v1/namespaces/default/nodes", "", "", "", 404, "application/json", `"reason":"NotFound"`},
		{"GET", "/api/v1/nodes/n1/proxy", "", "", "", 404, "application/json", `"reason":"NotFound"`},
	}
	for _, tc := range cases {
		code, ctype, body := do(tc.method, tc.path, tc.accept, tc.ctype, tc.body)
		if code != tc.code || ctype != tc.wantType || !strings.Contains(body, tc.contains) {
			t.Errorf("%s %s (Accept %q, Content-Type %q): %d %s %.300q, want %d %s containing %q",
				tc.method, tc.path, tc.accept, tc.ctype, code, ctype, body, tc.code, tc.wantType, tc.contains)
		}
	}
	// A plain HTTPS client without a certificate gets 401, also on /version.
	anon := rest.CopyConfig(cfg)
	anon.CertData, anon.KeyData = nil, nil
	ac, err := rest.HTTPClientFor(anon)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/version", nil)
	resp, err := ac.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/version without a certificate: %d", resp.StatusCode)
	}
	if ops := s.Log(); ops[len(ops)-1].User != "" || ops[len(ops)-1].Code != 401 {
		t.Errorf("the unauthenticated request is logged as %+v", ops[len(ops)-1])
	}
}

func TestResourceVersionsAndNoOpUpdates(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{})
	c := adminClient(t, s)
	ctx := testContext(t)
	if err := s.AddNode(kube.Node{Name: "n1", Role: kube.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	n, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	same, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	if err != nil || same.ResourceVersion != n.ResourceVersion {
		t.Fatalf("a no-op update: %v, rv %s -> %s", err, n.ResourceVersion, same.ResourceVersion)
	}
	// A spec update keeps the status; a status update keeps the spec.
	n.Spec.Unschedulable = true
	n.Status.Conditions = nil
	upd, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	if err != nil || !upd.Spec.Unschedulable || !isReady(upd) || !rvAfter(upd.ResourceVersion, n.ResourceVersion) {
		t.Fatalf("a spec update: %v %+v", err, upd)
	}
	upd.Spec.Unschedulable = false
	upd.Status.NodeInfo.KubeletVersion = "v1.99.0"
	st, err := c.CoreV1().Nodes().UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil || !st.Spec.Unschedulable || st.Status.NodeInfo.KubeletVersion != "v1.99.0" {
		t.Fatalf("a status update: %v %+v", err, st)
	}
	// A pod's spec is mostly immutable.
	name, err := s.AddPod(kube.Pod{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.NodeName = "elsewhere"
	_, err = c.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{})
	wantStatus(t, err, 422, metav1.StatusReasonInvalid, "")
	// A namespace keeps its name label.
	ns, err := c.CoreV1().Namespaces().Update(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.UpdateOptions{})
	if err != nil || ns.Labels[corev1.LabelMetadataName] != "default" || ns.Status.Phase != corev1.NamespaceActive {
		t.Fatalf("updating a namespace: %v %+v", err, ns)
	}
	// Deletion preconditions.
	stale := "1"
	err = c.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &stale}})
	wantStatus(t, err, 409, metav1.StatusReasonConflict, "")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
