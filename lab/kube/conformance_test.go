package kube_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
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

// conformanceVersion is the release the conformance test pins: the
// kube-apiserver that .ci/kube-binaries.sh builds, and the version the
// emulator is told to report.
const conformanceVersion = "v1.37.2"

// backend is one API server the conformance cases run against.
type backend struct {
	name string
	// admin is an administrator's client configuration.
	admin *rest.Config
	// caCert and caKey are the cluster CA, for foreign-certificate cases.
	caCert, caKey []byte
	// version is the GitVersion /version must report.
	version string
}

func (b backend) client(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(b.admin)
	cfg.QPS = -1 // no client-side rate limit: the cases run in parallel
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating a client for %s: %v", b.name, err)
	}
	return c
}

// fixtures creates test objects through the API, the same way on every
// backend: there is no kubelet, so the status a kubelet would post is
// written through the status subresource.
type fixtures struct {
	c kubernetes.Interface
}

var fixtureSeq atomic.Int64

// unique returns a name no other case uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1_000_000, fixtureSeq.Add(1))
}

func (f fixtures) namespace(ctx context.Context, t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: unique("ns")}}
	if _, err := f.c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// node creates a node and posts a Ready status for it.
func (f fixtures) node(ctx context.Context, t *testing.T, name string, labels map[string]string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	n, err := f.c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	n.Status.NodeInfo.KubeletVersion = conformanceVersion
	n, err = f.c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("posting the status of node %s: %v", name, err)
	}
	return n
}

// pod creates a pod bound to node and posts a Running status, Ready or not.
func (f fixtures) pod(ctx context.Context, t *testing.T, ns, name, node string, labels map[string]string, ready bool) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	p, err := f.c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Fatalf("a new pod's phase is %q, want Pending", p.Status.Phase)
	}
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &now
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
	}
	p, err = f.c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("posting the status of pod %s/%s: %v", ns, name, err)
	}
	return p
}

// budget creates a disruption budget and waits until the disruption
// controller has computed its status over the expected number of pods.
func (f fixtures) budget(ctx context.Context, t *testing.T, ns, name string, spec policyv1.PodDisruptionBudgetSpec, pods int32) *policyv1.PodDisruptionBudget {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	pdb, err := f.c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating budget %s/%s: %v", ns, name, err)
	}
	if pdb.Generation != 1 {
		t.Errorf("a new budget's generation is %d, want 1", pdb.Generation)
	}
	return f.waitBudget(ctx, t, ns, name, func(p *policyv1.PodDisruptionBudget) bool {
		return p.Status.ObservedGeneration >= p.Generation && p.Status.ExpectedPods == pods
	})
}

// waitBudget polls a budget until ok accepts it.
func (f fixtures) waitBudget(ctx context.Context, t *testing.T, ns, name string, ok func(*policyv1.PodDisruptionBudget) bool) *policyv1.PodDisruptionBudget {
	t.Helper()
	var last *policyv1.PodDisruptionBudget
	err := poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := f.c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return ok(p), nil
	})
	if err != nil {
		t.Fatalf("waiting for budget %s/%s (last status %+v): %v", ns, name, statusOf(last), err)
	}
	return last
}

func statusOf(p *policyv1.PodDisruptionBudget) any {
	if p == nil {
		return nil
	}
	return p.Status
}

// poll calls cond every 50ms until it returns true or an error, or the
// timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := cond(ctx)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("polling: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// statusOfError returns the metav1.Status of an API error, failing the test
// if err is not one.
func statusOfError(t *testing.T, err error) metav1.Status {
	t.Helper()
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not an API status", err, err)
	}
	return se.Status()
}

func wantStatus(t *testing.T, err error, code int32, reason metav1.StatusReason, message string) metav1.Status {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %d %s", code, reason)
	}
	st := statusOfError(t, err)
	if st.Code != code || st.Reason != reason || st.Status != metav1.StatusFailure {
		t.Fatalf("status %d %s %q, want %d %s", st.Code, st.Reason, st.Status, code, reason)
	}
	if message != "" && st.Message != message {
		t.Fatalf("message %q, want %q", st.Message, message)
	}
	return st
}

type conformanceCase struct {
	name string
	run  func(ctx context.Context, t *testing.T, b backend, c kubernetes.Interface, f fixtures)
}

// conformanceCases is the table both the emulator and a real kube-apiserver
// must pass unchanged.
var conformanceCases = []conformanceCase{
	{"server version", func(ctx context.Context, t *testing.T, b backend, c kubernetes.Interface, _ fixtures) {
		v, err := c.Discovery().ServerVersion()
		if err != nil {
			t.Fatalf("reading the server version: %v", err)
		}
		if v.GitVersion != b.version || v.Major != "1" || v.Minor != strings.Split(b.version, ".")[1] {
			t.Errorf("version %s (major %q, minor %q), want %s", v.GitVersion, v.Major, v.Minor, b.version)
		}
		if v.Platform == "" || v.GoVersion == "" {
			t.Errorf("version %+v lacks the platform or Go version", v)
		}
	}},
	{"discovery lists the eviction subresource", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, _ fixtures) {
		core, err := c.Discovery().ServerResourcesForGroupVersion("v1")
		if err != nil {
			t.Fatalf("discovering v1: %v", err)
		}
		found := map[string]metav1.APIResource{}
		for _, r := range core.APIResources {
			found[r.Name] = r
		}
		ev, ok := found["pods/eviction"]
		if !ok || ev.Group != "policy" || ev.Version != "v1" || ev.Kind != "Eviction" || !slices.Contains(ev.Verbs, "create") {
			t.Errorf("pods/eviction is %+v", ev)
		}
		for _, name := range []string{"nodes", "pods", "namespaces", "nodes/status", "pods/status"} {
			if _, ok := found[name]; !ok {
				t.Errorf("v1 does not list %s", name)
			}
		}
		if !found["pods"].Namespaced || found["nodes"].Namespaced {
			t.Errorf("pods namespaced %v, nodes namespaced %v", found["pods"].Namespaced, found["nodes"].Namespaced)
		}
		for _, verb := range []string{"get", "list", "create", "update", "patch", "delete"} {
			if !slices.Contains(found["nodes"].Verbs, verb) {
				t.Errorf("nodes lack the verb %s: %v", verb, found["nodes"].Verbs)
			}
		}
		groups, err := c.Discovery().ServerGroups()
		if err != nil {
			t.Fatalf("discovering groups: %v", err)
		}
		var policy *metav1.APIGroup
		for i := range groups.Groups {
			if groups.Groups[i].Name == "policy" {
				policy = &groups.Groups[i]
			}
		}
		if policy == nil || policy.PreferredVersion.GroupVersion != "policy/v1" {
			t.Fatalf("group policy is %+v", policy)
		}
		pol, err := c.Discovery().ServerResourcesForGroupVersion("policy/v1")
		if err != nil {
			t.Fatalf("discovering policy/v1: %v", err)
		}
		ok = false
		for _, r := range pol.APIResources {
			ok = ok || (r.Name == "poddisruptionbudgets" && r.Namespaced && r.Kind == "PodDisruptionBudget")
		}
		if !ok {
			t.Errorf("policy/v1 does not list poddisruptionbudgets: %+v", pol.APIResources)
		}
	}},
	{"node create, list, get, cordon, uncordon, conflict, delete", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, f fixtures) {
		name := unique("node")
		role := unique("role")
		created := f.node(ctx, t, name, map[string]string{"lab.test/role": role})
		if !slices.ContainsFunc(created.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady }) {
			t.Errorf("a new node has taints %v, want the not-ready taint", created.Spec.Taints)
		}
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "lab.test/role=" + role})
		if err != nil {
			t.Fatalf("listing nodes: %v", err)
		}
		if len(list.Items) != 1 || list.Items[0].Name != name || list.ResourceVersion == "" {
			t.Fatalf("listing by label found %d nodes (rv %q), want %s", len(list.Items), list.ResourceVersion, name)
		}
		byName, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil || len(byName.Items) != 1 {
			t.Fatalf("listing by name: %v, %d nodes", err, len(byName.Items))
		}
		got, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting node: %v", err)
		}
		if got.UID != created.UID || got.ResourceVersion != created.ResourceVersion || !isReady(got) {
			t.Errorf("got node uid %s rv %s ready %v, want %s %s true", got.UID, got.ResourceVersion, isReady(got), created.UID, created.ResourceVersion)
		}

		cordoned, err := c.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType,
			[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("cordoning: %v", err)
		}
		if !cordoned.Spec.Unschedulable || !rvAfter(cordoned.ResourceVersion, got.ResourceVersion) {
			t.Errorf("cordoned node unschedulable %v rv %s (was %s)", cordoned.Spec.Unschedulable, cordoned.ResourceVersion, got.ResourceVersion)
		}
		if !isReady(cordoned) {
			t.Errorf("patching the spec changed the status")
		}
		unsched, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{
			LabelSelector: "lab.test/role=" + role, FieldSelector: "spec.unschedulable=true"})
		if err != nil || len(unsched.Items) != 1 {
			t.Errorf("listing unschedulable nodes: %v, %d", err, len(unsched.Items))
		}

		// A stale update conflicts.
		got.Labels["lab.test/extra"] = "x"
		_, err = c.CoreV1().Nodes().Update(ctx, got, metav1.UpdateOptions{})
		st := wantStatus(t, err, 409, metav1.StatusReasonConflict,
			fmt.Sprintf(`Operation cannot be fulfilled on nodes "%s": the object has been modified; please apply your changes to the latest version and try again`, name))
		if st.Details == nil || st.Details.Name != name || st.Details.Kind != "nodes" {
			t.Errorf("conflict details %+v", st.Details)
		}
		// So does a patch that carries a stale resourceVersion.
		_, err = c.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"unschedulable":false}}`, got.ResourceVersion)), metav1.PatchOptions{})
		wantStatus(t, err, 409, metav1.StatusReasonConflict, "")

		uncordoned, err := c.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType,
			[]byte(`{"spec":{"unschedulable":null}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("uncordoning: %v", err)
		}
		if uncordoned.Spec.Unschedulable {
			t.Errorf("node is still unschedulable")
		}
		uncordoned.Labels["lab.test/extra"] = "y"
		updated, err := c.CoreV1().Nodes().Update(ctx, uncordoned, metav1.UpdateOptions{})
		if err != nil || updated.Labels["lab.test/extra"] != "y" || !rvAfter(updated.ResourceVersion, uncordoned.ResourceVersion) {
			t.Fatalf("updating with the current resourceVersion: %v", err)
		}
		jp, err := c.CoreV1().Nodes().Patch(ctx, name, types.JSONPatchType,
			[]byte(`[{"op":"test","path":"/metadata/labels/lab.test~1extra","value":"y"},{"op":"remove","path":"/metadata/labels/lab.test~1extra"}]`), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("JSON patch: %v", err)
		}
		if _, ok := jp.Labels["lab.test/extra"]; ok {
			t.Errorf("JSON patch left the label")
		}

		if err := c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting node: %v", err)
		}
		_, err = c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, fmt.Sprintf(`nodes "%s" not found`, name))
		err = c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, fmt.Sprintf(`nodes "%s" not found`, name))
	}},
	{"a missing node is NotFound", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, _ fixtures) {
		_, err := c.CoreV1().Nodes().Get(ctx, "no-such-node", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("error %v, want NotFound", err)
		}
		st := wantStatus(t, err, 404, metav1.StatusReasonNotFound, `nodes "no-such-node" not found`)
		if st.Details == nil || st.Details.Name != "no-such-node" || st.Details.Kind != "nodes" || st.Details.Group != "" {
			t.Errorf("details %+v", st.Details)
		}
		_, err = c.CoreV1().Nodes().Patch(ctx, "no-such-node", types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, `nodes "no-such-node" not found`)
	}},
	{"creating an existing node is AlreadyExists, a bad name Invalid", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, f fixtures) {
		name := unique("node")
		f.node(ctx, t, name, nil)
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}) })
		_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		wantStatus(t, err, 409, metav1.StatusReasonAlreadyExists, fmt.Sprintf(`nodes "%s" already exists`, name))
		_, err = c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "Bad_Name"}}, metav1.CreateOptions{})
		st := wantStatus(t, err, 422, metav1.StatusReasonInvalid, "")
		if st.Details == nil || st.Details.Kind != "Node" || len(st.Details.Causes) == 0 || st.Details.Causes[0].Field != "metadata.name" {
			t.Errorf("invalid details %+v", st.Details)
		}
	}},
	{"pods listed by node name", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, f fixtures) {
		ns, ns2 := f.namespace(ctx, t), f.namespace(ctx, t)
		a, b := unique("node-a"), unique("node-b")
		f.node(ctx, t, a, nil)
		f.node(ctx, t, b, nil)
		f.pod(ctx, t, ns, "p1", a, nil, true)
		f.pod(ctx, t, ns, "p2", b, nil, true)
		f.pod(ctx, t, ns2, "p3", a, nil, true)
		onA, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + a})
		if err != nil {
			t.Fatalf("listing pods on %s: %v", a, err)
		}
		if names := podNames(onA.Items); !slices.Equal(names, []string{"p1"}) {
			t.Errorf("pods in %s on %s: %v, want [p1]", ns, a, names)
		}
		all, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + a})
		if err != nil {
			t.Fatalf("listing pods on %s in all namespaces: %v", a, err)
		}
		if names := podNames(all.Items); !slices.Equal(names, []string{"p1", "p3"}) {
			t.Errorf("pods on %s: %v, want [p1 p3]", a, names)
		}
		running, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + b + ",status.phase=Running"})
		if err != nil || !slices.Equal(podNames(running.Items), []string{"p2"}) {
			t.Errorf("running pods on %s: %v %v", b, err, podNames(running.Items))
		}
		_, err = c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.color=blue"})
		wantStatus(t, err, 400, metav1.StatusReasonBadRequest, "field label not supported: spec.color")
		_, err = c.CoreV1().Pods(ns).Get(ctx, "p9", metav1.GetOptions{})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, `pods "p9" not found`)
		_, err = c.CoreV1().Pods(unique("missing-ns")).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		}, metav1.CreateOptions{})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, "")
	}},
	{"a budget with minAvailable blocks eviction with 429", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, f fixtures) {
		ns := f.namespace(ctx, t)
		node := unique("node")
		f.node(ctx, t, node, nil)
		sel := map[string]string{"app": "web"}
		f.pod(ctx, t, ns, "web-1", node, sel, true)
		f.pod(ctx, t, ns, "web-2", node, sel, true)
		two := intstr.FromInt32(2)
		f.budget(ctx, t, ns, "web", policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: sel}}, 2)
		// The disruption controller may count the pods' readiness a
		// moment after their number.
		pdb := f.waitBudget(ctx, t, ns, "web", func(p *policyv1.PodDisruptionBudget) bool { return p.Status.CurrentHealthy == 2 })
		if s := pdb.Status; s.CurrentHealthy != 2 || s.DesiredHealthy != 2 || s.DisruptionsAllowed != 0 || s.ExpectedPods != 2 {
			t.Fatalf("budget status %+v, want healthy 2, desired 2, allowed 0, expected 2", s)
		}
		cond := findCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != policyv1.InsufficientPodsReason {
			t.Errorf("DisruptionAllowed condition %+v", cond)
		}
		err := c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns}})
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("eviction error %v, want TooManyRequests", err)
		}
		st := wantStatus(t, err, 429, metav1.StatusReasonTooManyRequests, "Cannot evict pod as it would violate the pod's disruption budget.")
		if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != policyv1.DisruptionBudgetCause ||
			st.Details.Causes[0].Message != "The disruption budget web needs 2 healthy pods and has 2 currently" || st.Details.RetryAfterSeconds != 0 {
			t.Errorf("eviction details %+v", st.Details)
		}
		p, err := c.CoreV1().Pods(ns).Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			t.Errorf("the refused eviction touched the pod: %v %v", err, p.DeletionTimestamp)
		}
		// The older client path, through the pods client, answers the same.
		err = c.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: ns}})
		wantStatus(t, err, 429, metav1.StatusReasonTooManyRequests, "Cannot evict pod as it would violate the pod's disruption budget.")
	}},
	{"an allowed eviction deletes the pod and uses up the budget", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, f fixtures) {
		ns := f.namespace(ctx, t)
		node := unique("node")
		f.node(ctx, t, node, nil)
		sel := map[string]string{"app": "api"}
		f.pod(ctx, t, ns, "api-1", node, sel, true)
		f.pod(ctx, t, ns, "api-2", node, sel, true)
		one := intstr.FromInt32(1)
		pdb := f.budget(ctx, t, ns, "api", policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: sel}}, 2)
		if s := pdb.Status; s.CurrentHealthy != 2 || s.DesiredHealthy != 1 || s.DisruptionsAllowed != 1 {
			t.Fatalf("budget status %+v, want healthy 2, desired 1, allowed 1", s)
		}
		cond := findCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != policyv1.SufficientPodsReason {
			t.Errorf("DisruptionAllowed condition %+v", cond)
		}
		var code int
		res := c.CoreV1().RESTClient().Post().AbsPath("/api/v1/namespaces", ns, "pods", "api-1", "eviction").
			Body(&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "api-1", Namespace: ns}}).Do(ctx)
		if err := res.StatusCode(&code).Error(); err != nil {
			t.Fatalf("evicting api-1: %v", err)
		}
		if code != http.StatusCreated {
			t.Errorf("eviction answered %d, want 201", code)
		}
		gone(ctx, t, c, ns, "api-1", func(p *corev1.Pod) {
			dt := findPodCondition(p.Status.Conditions, corev1.DisruptionTarget)
			if dt == nil || dt.Status != corev1.ConditionTrue || dt.Reason != "EvictionByEvictionAPI" {
				t.Errorf("the evicted pod's DisruptionTarget condition is %+v", dt)
			}
		})
		f.waitBudget(ctx, t, ns, "api", func(p *policyv1.PodDisruptionBudget) bool {
			return p.Status.CurrentHealthy == 1 && p.Status.DisruptionsAllowed == 0
		})
		err := c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "api-2", Namespace: ns}})
		st := wantStatus(t, err, 429, metav1.StatusReasonTooManyRequests, "Cannot evict pod as it would violate the pod's disruption budget.")
		if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Message != "The disruption budget api needs 1 healthy pods and has 1 currently" {
			t.Errorf("eviction details %+v", st.Details)
		}
	}},
	{"evictions without a budget, of unready and missing pods", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, f fixtures) {
		ns := f.namespace(ctx, t)
		node := unique("node")
		f.node(ctx, t, node, nil)
		f.pod(ctx, t, ns, "free", node, map[string]string{"app": "free"}, true)
		if err := c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "free", Namespace: ns}}); err != nil {
			t.Fatalf("evicting a pod no budget covers: %v", err)
		}
		gone(ctx, t, c, ns, "free", nil)

		// An unready pod may go while the budget's healthy pods suffice.
		sel := map[string]string{"app": "db"}
		f.pod(ctx, t, ns, "db-1", node, sel, true)
		f.pod(ctx, t, ns, "db-2", node, sel, true)
		f.pod(ctx, t, ns, "db-3", node, sel, false)
		two := intstr.FromInt32(2)
		pdb := f.budget(ctx, t, ns, "db", policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: sel}}, 3)
		if s := pdb.Status; s.CurrentHealthy != 2 || s.DesiredHealthy != 2 || s.DisruptionsAllowed != 0 || s.ExpectedPods != 3 {
			t.Fatalf("budget status %+v", s)
		}
		if err := c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "db-3", Namespace: ns}}); err != nil {
			t.Fatalf("evicting an unready pod: %v", err)
		}
		gone(ctx, t, c, ns, "db-3", nil)

		err := c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "nope", Namespace: ns}})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, `pods "nope" not found`)

		_, err = c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "nope", metav1.GetOptions{})
		st := wantStatus(t, err, 404, metav1.StatusReasonNotFound, `poddisruptionbudgets.policy "nope" not found`)
		if st.Details == nil || st.Details.Group != "policy" || st.Details.Kind != "poddisruptionbudgets" {
			t.Errorf("details %+v", st.Details)
		}
		one := intstr.FromInt32(1)
		_, err = c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "both"},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, MaxUnavailable: &one, Selector: &metav1.LabelSelector{}},
		}, metav1.CreateOptions{})
		st = wantStatus(t, err, 422, metav1.StatusReasonInvalid, "")
		if st.Details == nil || st.Details.Kind != "PodDisruptionBudget" || st.Details.Group != "policy" || len(st.Details.Causes) == 0 || st.Details.Causes[0].Field != "spec" {
			t.Errorf("invalid details %+v", st.Details)
		}
		list, err := c.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 || list.Items[0].Name != "db" {
			t.Errorf("listing budgets: %v %+v", err, list)
		}
	}},
	{"requests without a valid client certificate are Unauthorized", func(ctx context.Context, t *testing.T, b backend, _ kubernetes.Interface, _ fixtures) {
		anon := rest.CopyConfig(b.admin)
		anon.CertData, anon.KeyData = nil, nil
		other, otherKey, err := kube.NewCA("other")
		if err != nil {
			t.Fatal(err)
		}
		foreignCert, foreignKey, err := kube.ClientCert(other, otherKey, "admin", "system:masters")
		if err != nil {
			t.Fatal(err)
		}
		foreign := rest.CopyConfig(b.admin)
		foreign.CertData, foreign.KeyData = foreignCert, foreignKey
		for name, cfg := range map[string]*rest.Config{"no certificate": anon, "foreign CA": foreign} {
			c, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if !apierrors.IsUnauthorized(err) {
				t.Errorf("%s: error %v, want Unauthorized", name, err)
				continue
			}
			wantStatus(t, err, 401, metav1.StatusReasonUnauthorized, "Unauthorized")
		}
		// Verified TLS: the server's certificate is the cluster CA's.
		tc, err := rest.TLSConfigFor(b.admin)
		if err != nil {
			t.Fatal(err)
		}
		host := strings.TrimPrefix(b.admin.Host, "https://")
		conn, err := (&tls.Dialer{Config: tc}).DialContext(ctx, "tcp", host)
		if err != nil {
			t.Fatalf("dialing with verification: %v", err)
		}
		_ = conn.Close()
	}},
}

func rvAfter(a, b string) bool {
	var x, y uint64
	_, errA := fmt.Sscan(a, &x)
	_, errB := fmt.Sscan(b, &y)
	return errA == nil && errB == nil && x > y
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

func findPodCondition(cs []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// gone checks that a deleted pod is terminating (no kubelet finishes the
// deletion of a pod bound to a node) or gone; check, if any, looks at a pod
// that is still there.
func gone(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, check func(*corev1.Pod)) {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatalf("getting pod %s: %v", name, err)
	case p.DeletionTimestamp == nil:
		t.Fatalf("pod %s is neither gone nor terminating", name)
	case check != nil:
		check(p)
	}
}

// runConformance runs the table against one backend, the cases in parallel.
func runConformance(t *testing.T, b backend) {
	c := b.client(t)
	f := fixtures{c: c}
	for _, tc := range conformanceCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			tc.run(ctx, t, b, c, f)
		})
	}
}

func TestConformanceEmulator(t *testing.T) {
	t.Parallel()
	s, caCert, caKey := startEmulator(t, kube.Options{Version: conformanceVersion})
	admin, err := s.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	runConformance(t, backend{name: "emulator", admin: admin, caCert: caCert, caKey: caKey, version: conformanceVersion})
}
