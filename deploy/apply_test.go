package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/taloscluster/taloscluster/lab/kube/realkube"
)

// fieldManager owns what the tests apply.
const fieldManager = "taloscluster-test"

// warnings collects the Warning headers the API server sends (Pod
// Security admission warns through them).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// applier applies unstructured objects with server-side apply.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func (a *applier) apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = a.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Apply(ctx, o.GetName(), o, opts)
	return err
}

// readObjects reads a multi-document YAML file of Kubernetes objects.
func readObjects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if m != nil {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// installCRDs creates the CustomResourceDefinitions of testdata and waits
// until they are established and served.
func installCRDs(ctx context.Context, t *testing.T, dyn dynamic.Interface, disc discovery.DiscoveryInterface) {
	t.Helper()
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	crds := readObjects(t, "testdata/monitoring-crds.yaml")
	for _, crd := range crds {
		if _, err := dyn.Resource(crdGVR).Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			t.Fatalf("creating CRD %s: %v", crd.GetName(), err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, crd := range crds {
		for {
			got, err := dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err == nil && realkube.Established(got) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not established: %v", crd.GetName(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for {
		res, err := disc.ServerResourcesForGroupVersion("monitoring.coreos.com/v1")
		if err == nil && len(res.APIResources) == len(crds) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("monitoring.coreos.com/v1 not served: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServerSideDryRunApply applies the rendered example overlay to a real
// kube-apiserver with server-side apply in dry-run mode: every object must
// be accepted (schema, defaulting, admission), with no warning, in a
// namespace that enforces the restricted Pod Security Standard; a Pod made
// from the Deployment's template must be admitted there too. Then, with
// the ServiceAccount, Role and RoleBinding applied for real, the API
// server's authorizer must allow the agent exactly what its state backend
// does and deny the rest.
func TestServerSideDryRunApply(t *testing.T) {
	cp := realkube.Start(t, realkube.Options{})
	ctx := t.Context()
	warn := &warnings{}
	cfg := rest.CopyConfig(cp.Admin)
	cfg.WarningHandler = warn
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	installCRDs(ctx, t, dyn, client.Discovery())
	groups, err := restmapper.GetAPIGroupResources(client.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	a := &applier{dyn: dyn, mapper: restmapper.NewDiscoveryRESTMapper(groups)}

	objs := render(t, overlayDir)
	// Objects in a namespace can be dry-run only once it exists.
	ns := find(t, objs, "Namespace", namespace)
	if err := a.apply(ctx, ns, false); err != nil {
		t.Fatalf("creating the namespace: %v", err)
	}
	warn.take()

	clean := true
	for _, o := range objs {
		if err := a.apply(ctx, o, true); err != nil {
			clean = false
			t.Errorf("server-side dry-run apply of %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		if w := warn.take(); len(w) > 0 {
			clean = false
			t.Errorf("%s %s: the API server warned: %q", o.GetKind(), o.GetName(), w)
		}
	}
	if clean {
		t.Logf("server-side dry-run apply of the %d objects of %s (field manager %s): clean, no error, no warning",
			len(objs), overlayDir, fieldManager)
	}

	// Pod Security admission enforces on Pods, not Deployments: dry-run a
	// Pod of the Deployment's template.
	d, _ := deployment(t, objs)
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "taloscluster-pod-security", Namespace: namespace, Labels: d.Spec.Template.Labels},
		Spec:       d.Spec.Template.Spec,
	}
	if _, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a Pod of the Deployment's template is refused in a namespace enforcing the restricted Pod Security Standard: %v", err)
	}
	if w := warn.take(); len(w) > 0 {
		t.Errorf("the Pod of the Deployment's template: the API server warned: %q", w)
	}

	// The agent's access, as the API server's authorizer decides it.
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding":
			if err := a.apply(ctx, o, false); err != nil {
				t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	checkAccess(ctx, t, client)
}

// checkAccess asks the authorizer what the agent's ServiceAccount may do.
func checkAccess(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	user := "system:serviceaccount:" + namespace + ":taloscluster"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	type access struct {
		group, resource, verb, namespace string
	}
	var allowed, denied []access
	for _, v := range []string{"get", "list", "watch", "create", "update", "delete"} {
		allowed = append(allowed,
			access{"", "secrets", v, namespace},
			access{"coordination.k8s.io", "leases", v, namespace})
	}
	for _, v := range []string{"create", "patch"} {
		allowed = append(allowed, access{"", "events", v, namespace}, access{"events.k8s.io", "events", v, namespace})
	}
	denied = []access{
		{"", "secrets", "patch", namespace},
		{"", "secrets", "deletecollection", namespace},
		{"", "secrets", "get", "default"},
		{"", "secrets", "list", ""},
		{"coordination.k8s.io", "leases", "get", "kube-system"},
		{"", "pods", "list", namespace},
		{"", "configmaps", "get", namespace},
		{"", "events", "delete", namespace},
		{"apps", "deployments", "update", namespace},
		{"rbac.authorization.k8s.io", "roles", "update", namespace},
		{"", "namespaces", "get", ""},
	}
	check := func(a access, want bool) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: a.group, Resource: a.resource, Verb: a.verb, Namespace: a.namespace},
		}}
		got, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		if got.Status.Allowed != want {
			t.Errorf("%s may %s %s.%s in %q: %v, want %v (%s)", user, a.verb, a.resource, a.group, a.namespace, got.Status.Allowed, want, got.Status.Reason)
		}
	}
	// The authorizer sees a new Role and RoleBinding through its informers,
	// a moment after they were created: wait until the first access is
	// granted (bounded) before asking the rest.
	deadline := time.Now().Add(15 * time.Second)
	for {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: allowed[0].group, Resource: allowed[0].resource, Verb: allowed[0].verb, Namespace: allowed[0].namespace},
		}}
		got, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, a := range allowed {
		check(a, true)
	}
	for _, a := range denied {
		check(a, false)
	}
	t.Logf("%s: %d accesses allowed and %d denied as expected", user, len(allowed), len(denied))
}
