package kube_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/openapi3"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/taloscluster/taloscluster/lab/kube"
)

// storeWorld starts an emulator and returns its admin configuration with
// a typed client.
func storeWorld(t *testing.T) (*kube.Server, *rest.Config, kubernetes.Interface) {
	t.Helper()
	s, _, _ := startEmulator(t, kube.Options{})
	cfg, err := s.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	return s, cfg, adminClient(t, s)
}

func TestDiscoveryListsGenericKindsAndCustomResources(t *testing.T) {
	ctx := testContext(t)
	_, cfg, c := storeWorld(t)
	want := map[string][]string{
		"v1":                           {"configmaps", "namespaces", "nodes", "pods", "secrets", "serviceaccounts", "services"},
		"apps/v1":                      {"daemonsets", "deployments", "statefulsets"},
		"rbac.authorization.k8s.io/v1": {"clusterrolebindings", "clusterroles", "rolebindings", "roles"},
		"apiextensions.k8s.io/v1":      {"customresourcedefinitions"},
		"policy/v1":                    {"poddisruptionbudgets"},
	}
	for gv, names := range want {
		list, err := c.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Fatalf("discovering %s: %v", gv, err)
		}
		for _, name := range names {
			if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == name }) {
				t.Errorf("%s does not list %s", gv, name)
			}
		}
	}
	core, _ := c.Discovery().ServerResourcesForGroupVersion("v1")
	for _, r := range core.APIResources {
		if r.Name == "services" && (!r.Namespaced || r.Kind != "Service" || r.SingularName != "service" || !slices.Equal(r.ShortNames, []string{"svc"})) {
			t.Errorf("services are listed as %+v", r)
		}
		if r.Name == "namespaces" && !slices.Contains(r.Verbs, "delete") {
			t.Errorf("namespaces lack the delete verb: %v", r.Verbs)
		}
	}

	dyn := dynamicClient(t, cfg)
	group := "metallb.lab.test"
	crd := poolCRD(group)
	created, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(created.Object, "status", "conditions")
	var types []string
	for _, cond := range conds {
		m := cond.(map[string]any)
		if m["status"] != "True" || m["lastTransitionTime"] == nil {
			t.Errorf("condition %v", m)
		}
		types = append(types, m["type"].(string))
	}
	if !slices.Equal(types, []string{"NamesAccepted", "Established"}) {
		t.Errorf("a new definition's conditions are %v", types)
	}
	groups, err := c.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == group && g.PreferredVersion.Version == "v1beta1" }) {
		t.Errorf("groups %+v lack %s", groups.Groups, group)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Discovery()))
	m, err := mapper.RESTMapping(schema.GroupKind{Group: group, Kind: "IPAddressPool"}, "v1beta1")
	if err != nil {
		t.Fatalf("mapping the custom kind: %v", err)
	}
	if m.Resource.Resource != "ipaddresspools" || m.Scope.Name() != "namespace" {
		t.Errorf("mapping %+v", m)
	}

	if _, err := c.CoreV1().Namespaces().Create(ctx, nsObject("metallb-system"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pools := dyn.Resource(m.Resource).Namespace("metallb-system")
	if _, err := pools.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/v1beta1", "kind": "IPAddressPool", "metadata": map[string]any{"name": "p"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	del, err := dyn.Resource(crdGVR).Namespace("").Get(ctx, crd.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(crdGVR).Delete(ctx, del.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Discovery().ServerResourcesForGroupVersion(group + "/v1beta1"); !apierrors.IsNotFound(err) {
		t.Errorf("discovery of the deleted definition's group: %v, want NotFound", err)
	}
	if _, err := pools.Get(ctx, "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a custom object outlived its definition: %v", err)
	}
	// Created again, the definition starts with no objects.
	if _, err := dyn.Resource(crdGVR).Create(ctx, poolCRD(group), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := pools.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("pools after re-creating the definition: %v %d", err, len(list.Items))
	}
}

func TestCustomResourceStatusSubresource(t *testing.T) {
	ctx := testContext(t)
	_, cfg, _ := storeWorld(t)
	dyn := dynamicClient(t, cfg)
	crd := poolCRD("status.lab.test")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	versions[0].(map[string]any)["subresources"] = map[string]any{"status": map[string]any{}}
	_ = unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions")
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pools := dyn.Resource(schema.GroupVersionResource{Group: "status.lab.test", Version: "v1beta1", Resource: "ipaddresspools"}).Namespace("default")
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "status.lab.test/v1beta1", "kind": "IPAddressPool", "metadata": map[string]any{"name": "p"},
		"spec": map[string]any{"a": "1"}, "status": map[string]any{"ready": true},
	}}
	created, err := pools.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := created.Object["status"]; ok {
		t.Errorf("the status was kept on create: %v", created.Object["status"])
	}
	_ = unstructured.SetNestedField(created.Object, true, "status", "ready")
	withStatus, err := pools.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ready, _, _ := unstructured.NestedBool(withStatus.Object, "status", "ready"); !ready || withStatus.GetGeneration() != 1 {
		t.Errorf("after the status update: %v", withStatus.Object)
	}
	_ = unstructured.SetNestedField(withStatus.Object, "2", "spec", "a")
	unstructured.RemoveNestedField(withStatus.Object, "status")
	upd, err := pools.Update(ctx, withStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ready, _, _ := unstructured.NestedBool(upd.Object, "status", "ready"); !ready || upd.GetGeneration() != 2 {
		t.Errorf("a main-resource update changed the status or kept the generation: %v", upd.Object)
	}
}

func TestNamespaceDeletionEmptiesAndRemovesIt(t *testing.T) {
	ctx := testContext(t)
	_, cfg, c := storeWorld(t)
	if _, err := c.CoreV1().Namespaces().Apply(ctx, corev1apply.Namespace("cattle-system"), metav1.ApplyOptions{FieldManager: "rancher"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets("cattle-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppsV1().Deployments("cattle-system").Create(ctx, deployment("agent"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod no node runs goes at once.
	if _, err := c.CoreV1().Pods("cattle-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out corev1.Namespace
	if err := c.CoreV1().RESTClient().Delete().AbsPath("/api/v1/namespaces/cattle-system").Do(ctx).Into(&out); err != nil {
		t.Fatalf("deleting the namespace: %v", err)
	}
	if out.DeletionTimestamp == nil || out.Status.Phase != corev1.NamespaceTerminating {
		t.Errorf("the answer to the deletion is %+v", out)
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, "cattle-system", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the namespace is still there: %v", err)
	}
	if _, err := c.CoreV1().Secrets("default").Get(ctx, "s", metav1.GetOptions{}); err != nil {
		t.Errorf("another namespace's secret went too: %v", err)
	}
	// A namespace of the same name starts empty.
	if _, err := c.CoreV1().Namespaces().Create(ctx, nsObject("cattle-system"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := c.CoreV1().Secrets("cattle-system").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("secrets in the new namespace: %v %d", err, len(list.Items))
	}
	deps, err := c.AppsV1().Deployments("cattle-system").List(ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != 0 {
		t.Errorf("deployments in the new namespace: %v %d", err, len(deps.Items))
	}
	_ = cfg
}

func TestTerminatingNamespaceRefusesNewContent(t *testing.T) {
	ctx := testContext(t)
	_, _, c := storeWorld(t)
	if _, err := c.CoreV1().Namespaces().Create(ctx, nsObject("stuck"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A node without a kubelet never finishes its pods' deletion, so the
	// namespace controller waits.
	if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods("stuck").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{NodeName: "gone", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Namespaces().Delete(ctx, "stuck", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err := c.CoreV1().Namespaces().Get(ctx, "stuck", metav1.GetOptions{})
	if err != nil || ns.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("the namespace is %v %+v, want Terminating", err, ns)
	}
	p, err := c.CoreV1().Pods("stuck").Get(ctx, "p", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil {
		t.Errorf("the pod is %v %v, want terminating", err, p)
	}
	_, err = c.CoreV1().Secrets("stuck").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
	st := wantStatus(t, err, 403, metav1.StatusReasonForbidden,
		`secrets "s" is forbidden: unable to create new content in namespace stuck because it is being terminated`)
	if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != corev1.NamespaceTerminatingCause {
		t.Errorf("details %+v", st.Details)
	}
	_, err = c.CoreV1().Pods("stuck").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}, metav1.CreateOptions{})
	wantStatus(t, err, 403, metav1.StatusReasonForbidden, "")
	// Once the pod is gone, so is the namespace.
	zero := int64(0)
	if err := c.CoreV1().Pods("stuck").Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, "stuck", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the emptied namespace is still there: %v", err)
	}
}

func TestServerSideApplyOfNamespacesAndDryRuns(t *testing.T) {
	ctx := testContext(t)
	_, _, c := storeWorld(t)
	nss := c.CoreV1().Namespaces()
	first, err := nss.Apply(ctx, corev1apply.Namespace("charts").WithLabels(map[string]string{"a": "1", "b": "2"}), metav1.ApplyOptions{FieldManager: "charts"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Labels["a"] != "1" || first.Labels[corev1.LabelMetadataName] != "charts" || first.Status.Phase != corev1.NamespaceActive {
		t.Errorf("applied namespace %+v", first)
	}
	if _, err := nss.Apply(ctx, corev1apply.Namespace("charts").WithLabels(map[string]string{"c": "3"}), metav1.ApplyOptions{FieldManager: "other"}); err != nil {
		t.Fatal(err)
	}
	got, err := nss.Apply(ctx, corev1apply.Namespace("charts").WithLabels(map[string]string{"a": "1"}), metav1.ApplyOptions{FieldManager: "charts"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Labels["b"]; ok || got.Labels["c"] != "3" || got.Labels["a"] != "1" {
		t.Errorf("labels after the re-apply: %v", got.Labels)
	}
	if len(got.ManagedFields) != 2 {
		t.Errorf("managed fields %+v", got.ManagedFields)
	}
	again, err := nss.Apply(ctx, corev1apply.Namespace("charts").WithLabels(map[string]string{"a": "1"}), metav1.ApplyOptions{FieldManager: "charts"})
	if err != nil || again.ResourceVersion != got.ResourceVersion {
		t.Errorf("a re-apply that changes nothing: %v, rv %s then %s", err, got.ResourceVersion, again.ResourceVersion)
	}

	dry := []string{metav1.DryRunAll}
	drift, err := nss.Apply(ctx, corev1apply.Namespace("charts").WithLabels(map[string]string{"a": "9"}),
		metav1.ApplyOptions{FieldManager: "charts", DryRun: dry})
	if err != nil || drift.Labels["a"] != "9" || drift.ResourceVersion != got.ResourceVersion {
		t.Errorf("dry-run apply: %v %+v", err, drift)
	}
	patched, err := nss.Patch(ctx, "charts", types.MergePatchType, []byte(`{"metadata":{"labels":{"d":"4"}}}`), metav1.PatchOptions{DryRun: dry})
	if err != nil || patched.Labels["d"] != "4" {
		t.Errorf("dry-run patch: %v %+v", err, patched)
	}
	if err := nss.Delete(ctx, "charts", metav1.DeleteOptions{DryRun: dry}); err != nil {
		t.Fatal(err)
	}
	after, err := nss.Get(ctx, "charts", metav1.GetOptions{})
	if err != nil || after.ResourceVersion != got.ResourceVersion || after.Labels["a"] != "1" || after.DeletionTimestamp != nil {
		t.Errorf("after the dry runs: %v %+v", err, after)
	}
	// Dry runs take no resourceVersion: the next write takes the next one.
	s, err := c.CoreV1().Secrets("charts").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(mustAtoi(t, got.ResourceVersion) + 1); s.ResourceVersion != want {
		t.Errorf("the write after the dry runs has resourceVersion %s, want %s", s.ResourceVersion, want)
	}
	_, err = c.CoreV1().Secrets("charts").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "t"}}, metav1.CreateOptions{DryRun: []string{"Some"}})
	wantStatus(t, err, 422, metav1.StatusReasonInvalid, "")
}

func TestGenericKindsStrategies(t *testing.T) {
	ctx := testContext(t)
	_, _, c := storeWorld(t)
	deps := c.AppsV1().Deployments("default")
	d, err := deps.Create(ctx, deployment("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation != 1 || *d.Spec.Replicas != 1 || d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("a new deployment %+v", d)
	}
	d.Status.ReadyReplicas, d.Status.Replicas, d.Status.ObservedGeneration = 1, 1, 1
	d, err = deps.UpdateStatus(ctx, d, metav1.UpdateOptions{})
	if err != nil || d.Status.ReadyReplicas != 1 || d.Generation != 1 {
		t.Fatalf("status update: %v %+v", err, d)
	}
	d.Labels = map[string]string{"x": "y"}
	d.Status = appsv1.DeploymentStatus{}
	d, err = deps.Update(ctx, d, metav1.UpdateOptions{})
	if err != nil || d.Generation != 1 || d.Status.ReadyReplicas != 1 {
		t.Errorf("a metadata update changed the generation or the status: %v %+v", err, d)
	}
	d, err = deps.Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"web:2"}]}}}}`), metav1.PatchOptions{})
	if err != nil || d.Generation != 2 || d.Spec.Template.Spec.Containers[0].Image != "web:2" {
		t.Errorf("a strategic merge patch of the template: %v %+v", err, d)
	}
	same, err := deps.Update(ctx, d, metav1.UpdateOptions{})
	if err != nil || same.ResourceVersion != d.ResourceVersion {
		t.Errorf("a no-op update: %v, rv %s then %s", err, d.ResourceVersion, same.ResourceVersion)
	}

	svcs := c.CoreV1().Services("default")
	var ips []string
	for _, name := range []string{"a", "b"} {
		svc, err := svcs.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Ports[0].TargetPort.IntValue() != 443 || svc.Spec.Ports[0].Protocol != corev1.ProtocolTCP {
			t.Errorf("service defaults %+v", svc.Spec)
		}
		ips = append(ips, svc.Spec.ClusterIP)
	}
	if ips[0] == ips[1] || !strings.HasPrefix(ips[0], "10.") {
		t.Errorf("cluster IPs %v", ips)
	}
	for _, name := range []string{"bad_name", "Upper"} {
		_, err = c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		wantStatus(t, err, 422, metav1.StatusReasonInvalid, "")
	}
	gen, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "cm-"}}, metav1.CreateOptions{})
	if err != nil || !strings.HasPrefix(gen.Name, "cm-") || len(gen.Name) != len("cm-")+5 {
		t.Errorf("generateName: %v %q", err, gen.Name)
	}
	_, err = c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: gen.Name}}, metav1.CreateOptions{})
	wantStatus(t, err, 409, metav1.StatusReasonAlreadyExists, fmt.Sprintf(`configmaps "%s" already exists`, gen.Name))
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, rbacRole("system:lab:reader"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a cluster role named like a system role: %v", err)
	}
}

func TestSecretsOverProtobuf(t *testing.T) {
	ctx := testContext(t)
	_, cfg, _ := storeWorld(t)
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"owner": "helm"}}, StringData: map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := c.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil || len(list.Items) != 1 || string(list.Items[0].Data["k"]) != "v" {
		t.Errorf("listing over protobuf: %v %+v", err, list)
	}
}

func deployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: name + ":1"}}},
			},
		},
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func rbacRole(name string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}},
	}
}

// TestOpenAPIV3AnswersTheFieldValidationCheck reads the OpenAPI v3
// documents the way kubectl's and Helm's resource builders do before they
// validate objects: the PATCH operation of each kind must take the
// fieldValidation query parameter.
func TestOpenAPIV3AnswersTheFieldValidationCheck(t *testing.T) {
	ctx := testContext(t)
	_, cfg, c := storeWorld(t)
	if _, err := dynamicClient(t, cfg).Resource(crdGVR).Create(ctx, poolCRD("openapi.lab.test"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root := openapi3.NewRoot(c.Discovery().OpenAPIV3())
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "Secret"}, {Version: "v1", Kind: "Namespace"},
		{Group: "apps", Version: "v1", Kind: "Deployment"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"},
		{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
		{Group: "openapi.lab.test", Version: "v1beta1", Kind: "IPAddressPool"},
	} {
		doc, err := root.GVSpec(gvk.GroupVersion())
		if err != nil {
			t.Fatalf("reading the document of %s: %v", gvk.GroupVersion(), err)
		}
		found := false
		for _, item := range doc.Paths.Paths {
			op := item.Patch
			if op == nil {
				continue
			}
			var got map[string]string
			if err := op.Extensions.GetObject("x-kubernetes-group-version-kind", &got); err != nil || got["kind"] != gvk.Kind || got["group"] != gvk.Group {
				continue
			}
			for _, p := range op.Parameters {
				found = found || (p.Name == "fieldValidation" && p.In == "query")
			}
		}
		if !found {
			t.Errorf("no PATCH operation of %s takes fieldValidation", gvk)
		}
	}
	if _, err := root.GVSpec(schema.GroupVersion{Group: "nope.lab.test", Version: "v1"}); err == nil {
		t.Errorf("a group that is not served has a document")
	}
}

// TestDeploymentsAvailable: with DeploymentsAvailable, a Deployment is
// available as soon as it is written, as the lab's clusters show it;
// without, its status is what clients write.
func TestDeploymentsAvailable(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		s, _, _ := startEmulator(t, kube.Options{DeploymentsAvailable: on})
		c := adminClient(t, s)
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{Replicas: new(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}}}}
		got, err := c.AppsV1().Deployments("default").Create(t.Context(), d, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		availableNow := got.Status.AvailableReplicas == 2 && len(got.Status.Conditions) > 0 &&
			got.Status.Conditions[0].Type == appsv1.DeploymentAvailable && got.Status.Conditions[0].Status == corev1.ConditionTrue
		if availableNow != on {
			t.Errorf("DeploymentsAvailable %v: the new Deployment's status %+v", on, got.Status)
		}
	}
}

// TestNamespaceFinalizeDelay: with a finalize delay, a deleted namespace
// is emptied at once but stays Terminating (refusing new content) until
// the delay has passed, then is gone.
func TestNamespaceFinalizeDelay(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{NamespaceFinalizeDelay: 3 * time.Second})
	c := adminClient(t, s)
	ctx := testContext(t)
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: "apps"}}
	if _, err := c.CoreV1().ConfigMaps("apps").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Namespaces().Delete(ctx, "apps", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err := c.CoreV1().Namespaces().Get(ctx, "apps", metav1.GetOptions{})
	if err != nil || ns.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("the namespace right after its delete: %v %v, want Terminating", ns.Status.Phase, err)
	}
	if _, err := c.CoreV1().ConfigMaps("apps").Get(ctx, "conf", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the namespace's content after its delete: %v, want it gone", err)
	}
	cm.ResourceVersion = ""
	if _, err := c.CoreV1().ConfigMaps("apps").Create(ctx, cm, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("creating in the terminating namespace: %v, want Forbidden", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := c.CoreV1().Namespaces().Get(ctx, "apps", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the namespace is still there 15 s after its delete: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
