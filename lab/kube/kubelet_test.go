package kube_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/taloscluster/taloscluster/lab/kube"
)

func readyCondition(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

func nodeNamed(t *testing.T, s *kube.Server, name string) *corev1.Node {
	t.Helper()
	for _, n := range s.Nodes() {
		if n.Name == name {
			return &n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

func podNamed(s *kube.Server, ns, name string) *corev1.Pod {
	for _, p := range s.Pods() {
		if p.Namespace == ns && p.Name == name {
			return &p
		}
	}
	return nil
}

// TestStoppedKubeletTurnsUnknownAfterTheGracePeriod: a kubelet that stops
// without a shutdown (power cut) leaves its node Ready until the node
// monitor grace period has passed; then the node lifecycle controller
// marks its conditions Unknown, taints it unreachable and its pods
// NotReady.
func TestStoppedKubeletTurnsUnknownAfterTheGracePeriod(t *testing.T) {
	t.Parallel()
	const grace = 400 * time.Millisecond
	s, _, _ := startEmulator(t, kube.Options{NodeMonitorGracePeriod: grace})
	if err := s.AddNode(kube.Node{Name: "w-1", Role: kube.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddPod(kube.Pod{Name: "web-a", Node: "w-1", OwnerKind: "ReplicaSet", OwnerName: "web"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.StopKubelet("w-1", false); err != nil {
		t.Fatal(err)
	}
	if s.KubeletRunning("w-1") {
		t.Error("the kubelet still runs")
	}
	if c := readyCondition(nodeNamed(t, s, "w-1")); c.Status != corev1.ConditionTrue {
		t.Fatalf("Ready right after the kubelet stopped: %+v, want True until the grace period ends", c)
	}
	// Nothing finishes terminating without a kubelet.
	c := adminClient(t, s)
	ctx := testContext(t)
	if err := c.CoreV1().Pods("default").Delete(ctx, "web-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := podNamed(s, "default", "web-a"); p == nil || p.DeletionTimestamp == nil {
		t.Fatalf("web-a deleted on a node without a kubelet: %+v, want it terminating", p)
	}
	for time.Since(start) < 5*time.Second {
		if readyCondition(nodeNamed(t, s, "w-1")).Status == corev1.ConditionUnknown {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(start); d < grace {
		t.Errorf("Unknown after %v, before the grace period", d)
	}
	n := nodeNamed(t, s, "w-1")
	cond := readyCondition(n)
	if cond.Status != corev1.ConditionUnknown || cond.Reason != "NodeStatusUnknown" || cond.Message != "Kubelet stopped posting node status." {
		t.Fatalf("Ready after the grace period: %+v", cond)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeMemoryPressure && c.Status != corev1.ConditionUnknown {
			t.Errorf("MemoryPressure %+v, want Unknown", c)
		}
	}
	effects := map[corev1.TaintEffect]bool{}
	for _, taint := range n.Spec.Taints {
		if taint.Key == corev1.TaintNodeUnreachable {
			effects[taint.Effect] = true
		}
	}
	if !effects[corev1.TaintEffectNoSchedule] || !effects[corev1.TaintEffectNoExecute] {
		t.Errorf("taints %+v, want unreachable NoSchedule and NoExecute", n.Spec.Taints)
	}
	// The kubelet registers again: Ready after its delay, the deletion ends.
	if err := s.AddNode(kube.Node{Name: "w-1", Role: kube.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	if readyCondition(nodeNamed(t, s, "w-1")).Status != corev1.ConditionTrue || podNamed(s, "default", "web-a") != nil {
		t.Errorf("after the kubelet came back: node %+v, web-a %v", readyCondition(nodeNamed(t, s, "w-1")), podNamed(s, "default", "web-a"))
	}
}

// TestKubeletShutdown: a kubelet stopped through a machine shutdown posts
// its node NotReady at once and fails its pods, which their controllers
// replace; the node turns Unknown after the grace period.
func TestKubeletShutdown(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{NodeMonitorGracePeriod: 200 * time.Millisecond})
	for _, name := range []string{"w-1", "w-2"} {
		if err := s.AddNode(kube.Node{Name: name, Role: kube.RoleWorker}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []kube.Pod{
		{Name: "web-a", Node: "w-1", OwnerKind: "ReplicaSet", OwnerName: "web"},
		{Name: "db-0", Node: "w-1", OwnerKind: "StatefulSet", OwnerName: "db"},
		{Name: "bare", Node: "w-1"},
	} {
		if _, err := s.AddPod(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.StopKubelet("w-1", true); err != nil {
		t.Fatal(err)
	}
	cond := readyCondition(nodeNamed(t, s, "w-1"))
	if cond.Status != corev1.ConditionFalse || cond.Reason != "KubeletNotReady" || cond.Message != "node is shutting down" {
		t.Fatalf("Ready after a shutdown: %+v", cond)
	}
	bare := podNamed(s, "default", "bare")
	if bare == nil || bare.Status.Phase != corev1.PodFailed || bare.Status.Reason != "Terminated" {
		t.Fatalf("bare pod after the shutdown: %+v", bare)
	}
	target := false
	for _, c := range bare.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonTerminationByKubelet {
			target = true
		}
	}
	if !target {
		t.Errorf("bare pod conditions %+v, want DisruptionTarget TerminationByKubelet", bare.Status.Conditions)
	}
	running := map[string]string{}
	for _, p := range s.Pods() {
		if p.Status.Phase == corev1.PodRunning {
			running[p.Name] = p.Spec.NodeName
		}
	}
	if running["db-0"] != "w-2" || len(running) != 2 {
		t.Errorf("running pods after the shutdown %v, want the ReplicaSet's replacement and db-0 on w-2", running)
	}
	deadline := time.Now().Add(5 * time.Second)
	for readyCondition(nodeNamed(t, s, "w-1")).Status != corev1.ConditionUnknown {
		if time.Now().After(deadline) {
			t.Fatalf("w-1 never turned Unknown: %+v", readyCondition(nodeNamed(t, s, "w-1")))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSetServing: a server that stops serving refuses connections, and
// serves the same state again afterwards.
func TestSetServing(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{})
	c := adminClient(t, s)
	ctx := testContext(t)
	if err := s.AddNode(kube.Node{Name: "w-1", Role: kube.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetServing(false); err != nil {
		t.Fatal(err)
	}
	if s.Serving() {
		t.Error("Serving after SetServing(false)")
	}
	conn, err := net.DialTimeout("tcp", s.Addr().String(), time.Second)
	if err == nil {
		conn.Close()
		t.Fatal("a connection was accepted while not serving")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dialing while not serving: %v, want connection refused", err)
	}
	if _, err := c.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{}); err == nil || apierrors.ReasonForError(err) != metav1.StatusReasonUnknown {
		t.Errorf("get while not serving: %v", err)
	}
	if err := s.SetServing(true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{}); err != nil {
		t.Errorf("get after serving again: %v", err)
	}
}

// TestSetEndpoints: the server answers at exactly the endpoints given, each
// with a certificate for its own hosts; dropping one refuses connections
// there and leaves the others serving.
func TestSetEndpoints(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{})
	first, second := testAddr(), testAddr()
	if err := s.SetEndpoints([]kube.Endpoint{
		{Addr: first, Hosts: []string{first.Addr().String()}},
		{Addr: second, Hosts: []string{second.Addr().String(), "localhost"}},
	}); err != nil {
		t.Fatal(err)
	}
	if got := s.Addrs(); !slices.Equal(got, []netip.AddrPort{first, second}) || s.Addr() != first {
		t.Fatalf("addresses %v, primary %s", got, s.Addr())
	}
	version := func(at netip.AddrPort) error {
		cfg, err := s.AdminConfig()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Host = "https://" + at.String()
		// A dialer of its own keeps client-go from sharing a cached
		// transport, so every call makes a new TLS handshake.
		cfg.Dial = (&net.Dialer{}).DialContext
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.Discovery().ServerVersion()
		return err
	}
	for _, at := range []netip.AddrPort{first, second} {
		if err := version(at); err != nil {
			t.Errorf("/version at %s: %v", at, err)
		}
	}
	if err := s.SetEndpoints([]kube.Endpoint{{Addr: second, Hosts: []string{second.Addr().String()}}}); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", first.String(), time.Second); err == nil {
		conn.Close()
		t.Error("a dropped endpoint accepted a connection")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dialing a dropped endpoint: %v, want connection refused", err)
	}
	if err := version(second); err != nil || s.Addr() != second {
		t.Errorf("/version at %s after dropping %s: %v (primary %s)", second, first, err, s.Addr())
	}
	// A certificate that does not name the address fails verification.
	if err := s.SetEndpoints([]kube.Endpoint{{Addr: second, Hosts: []string{"localhost"}}}); err != nil {
		t.Fatal(err)
	}
	if err := version(second); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("/version with a certificate for other hosts: %v", err)
	}
	if err := s.SetEndpoints(nil); err != nil {
		t.Fatal(err)
	}
	if s.Serving() || s.Addr() != second {
		t.Errorf("serving %v at %s with no endpoints", s.Serving(), s.Addr())
	}
}
