package kube_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/taloscluster/taloscluster/lab/kube/realkube"
)

// crdGVR is where CustomResourceDefinitions are served.
var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func init() {
	conformanceCases = append(conformanceCases, storeCases...)
}

// storeCases cover the generic object store, server-side apply and dry
// runs: the kinds the plugins write at the end of a converge.
var storeCases = []conformanceCase{
	{"a Secret created with stringData", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, f fixtures) {
		ns := f.namespace(ctx, t)
		s, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "cattle-credentials-abc"},
			Data:       map[string][]byte{"url": []byte("https://rancher.lab")},
			StringData: map[string]string{"token": "t0ken", "url": "https://other.lab"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating a secret: %v", err)
		}
		want := map[string]string{"token": "t0ken", "url": "https://other.lab"}
		for _, got := range []*corev1.Secret{s, getSecret(ctx, t, c, ns, s.Name)} {
			if got.Type != corev1.SecretTypeOpaque || len(got.StringData) != 0 || len(got.Data) != 2 {
				t.Fatalf("secret type %q, stringData %v, data %v", got.Type, got.StringData, got.Data)
			}
			for k, v := range want {
				if string(got.Data[k]) != v {
					t.Errorf("data[%s] = %q, want %q", k, got.Data[k], v)
				}
			}
		}
		if s.UID == "" || s.ResourceVersion == "" || s.CreationTimestamp.IsZero() {
			t.Errorf("a new secret lacks uid, resourceVersion or creationTimestamp: %+v", s.ObjectMeta)
		}
		s.StringData = map[string]string{"extra": "x"}
		upd, err := c.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
		if err != nil || string(upd.Data["extra"]) != "x" || len(upd.Data) != 3 || !rvAfter(upd.ResourceVersion, s.ResourceVersion) {
			t.Fatalf("updating with stringData: %v %+v", err, upd)
		}
		_, err = c.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
		wantStatus(t, err, 409, metav1.StatusReasonConflict, "")
		if err := c.CoreV1().Secrets(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting the secret: %v", err)
		}
		_, err = c.CoreV1().Secrets(ns).Get(ctx, s.Name, metav1.GetOptions{})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, fmt.Sprintf(`secrets "%s" not found`, s.Name))
	}},
	{"server-side apply creates, then a re-apply drops a field", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, f fixtures) {
		ns := f.namespace(ctx, t)
		cms := c.CoreV1().ConfigMaps(ns)
		first := corev1apply.ConfigMap("settings", ns).WithLabels(map[string]string{"app": "lab"}).
			WithData(map[string]string{"a": "1", "b": "2"})
		created, err := cms.Apply(ctx, first, metav1.ApplyOptions{FieldManager: "lab-a"})
		if err != nil {
			t.Fatalf("applying: %v", err)
		}
		if created.Data["a"] != "1" || created.Data["b"] != "2" || created.Labels["app"] != "lab" {
			t.Fatalf("applied configmap %+v", created)
		}
		if len(created.ManagedFields) != 1 || created.ManagedFields[0].Manager != "lab-a" ||
			created.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply || created.ManagedFields[0].FieldsType != "FieldsV1" {
			t.Errorf("managed fields %+v", created.ManagedFields)
		}
		// Another manager's field stays when the first one re-applies.
		other := corev1apply.ConfigMap("settings", ns).WithData(map[string]string{"c": "3"})
		if _, err := cms.Apply(ctx, other, metav1.ApplyOptions{FieldManager: "lab-b"}); err != nil {
			t.Fatalf("applying as another manager: %v", err)
		}
		second := corev1apply.ConfigMap("settings", ns).WithData(map[string]string{"a": "1"})
		got, err := cms.Apply(ctx, second, metav1.ApplyOptions{FieldManager: "lab-a"})
		if err != nil {
			t.Fatalf("re-applying: %v", err)
		}
		if _, ok := got.Data["b"]; ok || got.Data["a"] != "1" || got.Data["c"] != "3" {
			t.Errorf("after the re-apply data is %v, want a and c", got.Data)
		}
		if _, ok := got.Labels["app"]; ok {
			t.Errorf("the label the manager no longer applies is still there: %v", got.Labels)
		}
		if len(got.ManagedFields) != 2 {
			t.Errorf("managed fields %+v, want lab-a and lab-b", got.ManagedFields)
		}
		// Taking a field another manager owns conflicts, unless forced.
		steal := corev1apply.ConfigMap("settings", ns).WithData(map[string]string{"c": "4"})
		_, err = cms.Apply(ctx, steal, metav1.ApplyOptions{FieldManager: "lab-a"})
		st := wantStatus(t, err, 409, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "lab-b": .data.c`)
		if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != metav1.CauseTypeFieldManagerConflict {
			t.Errorf("conflict details %+v", st.Details)
		}
		forced, err := cms.Apply(ctx, steal, metav1.ApplyOptions{FieldManager: "lab-a", Force: true})
		if err != nil || forced.Data["c"] != "4" || forced.Data["a"] != "" {
			t.Errorf("forced apply: %v %v", err, forced)
		}
		// An apply without a field manager is invalid.
		_, err = cms.Patch(ctx, "settings", types.ApplyPatchType, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings"}}`), metav1.PatchOptions{})
		wantStatus(t, err, 422, metav1.StatusReasonInvalid, "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
	}},
	{"dry runs change nothing", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, f fixtures) {
		ns := f.namespace(ctx, t)
		dry := []string{metav1.DryRunAll}
		s, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "dry"}, StringData: map[string]string{"k": "v"},
		}, metav1.CreateOptions{DryRun: dry})
		if err != nil {
			t.Fatalf("dry-run create: %v", err)
		}
		if s.Name != "dry" || string(s.Data["k"]) != "v" || s.Type != corev1.SecretTypeOpaque {
			t.Errorf("dry-run answer %+v", s)
		}
		_, err = c.CoreV1().Secrets(ns).Get(ctx, "dry", metav1.GetOptions{})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, `secrets "dry" not found`)

		cm, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		applied, err := c.CoreV1().ConfigMaps(ns).Apply(ctx, corev1apply.ConfigMap("kept", ns).WithData(map[string]string{"k": "w"}),
			metav1.ApplyOptions{FieldManager: "drift", DryRun: dry, Force: true})
		if err != nil || applied.Data["k"] != "w" {
			t.Fatalf("dry-run apply: %v %+v", err, applied)
		}
		if applied.ResourceVersion != cm.ResourceVersion {
			t.Errorf("a dry-run apply answered resourceVersion %s, the object has %s", applied.ResourceVersion, cm.ResourceVersion)
		}
		if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, "kept", metav1.DeleteOptions{DryRun: dry}); err != nil {
			t.Fatalf("dry-run delete: %v", err)
		}
		after, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{})
		if err != nil || after.Data["k"] != "v" || after.ResourceVersion != cm.ResourceVersion {
			t.Errorf("after dry runs: %v %+v", err, after)
		}
		nsDry, err := c.CoreV1().Namespaces().Create(ctx, nsObject(unique("dry")), metav1.CreateOptions{DryRun: dry})
		if err != nil {
			t.Fatalf("dry-run namespace create: %v", err)
		}
		_, err = c.CoreV1().Namespaces().Get(ctx, nsDry.Name, metav1.GetOptions{})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, "")
	}},
	{"secrets listed by label selector", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, f fixtures) {
		ns := f.namespace(ctx, t)
		for name, labels := range map[string]map[string]string{
			"sh.helm.release.v1.web.v1": {"owner": "helm", "name": "web", "status": "superseded"},
			"sh.helm.release.v1.web.v2": {"owner": "helm", "name": "web", "status": "deployed"},
			"sh.helm.release.v1.db.v1":  {"owner": "helm", "name": "db", "status": "deployed"},
			"unrelated":                 {"name": "web"},
		} {
			if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Type: "helm.sh/release.v1",
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for sel, want := range map[string][]string{
			"owner=helm,name=web":               {"sh.helm.release.v1.web.v1", "sh.helm.release.v1.web.v2"},
			"owner=helm":                        {"sh.helm.release.v1.db.v1", "sh.helm.release.v1.web.v1", "sh.helm.release.v1.web.v2"},
			"owner=helm,status in (deployed)":   {"sh.helm.release.v1.db.v1", "sh.helm.release.v1.web.v2"},
			"!owner":                            {"unrelated"},
			"owner=helm,name!=web,status":       {"sh.helm.release.v1.db.v1"},
			"owner=helm,name=web,status=failed": nil,
		} {
			list, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				t.Fatalf("listing %q: %v", sel, err)
			}
			var names []string
			for _, s := range list.Items {
				names = append(names, s.Name)
			}
			if !slices.Equal(names, want) || list.ResourceVersion == "" {
				t.Errorf("secrets matching %q: %v (rv %q), want %v", sel, names, list.ResourceVersion, want)
			}
		}
		byType, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=helm.sh/release.v1"})
		if err != nil || len(byType.Items) != 4 {
			t.Errorf("secrets by type: %v, %d", err, len(byType.Items))
		}
		_, err = c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner in"})
		wantStatus(t, err, 400, metav1.StatusReasonBadRequest, "")
	}},
	{"creating in a missing namespace is NotFound", func(ctx context.Context, t *testing.T, _ backend, c kubernetes.Interface, _ fixtures) {
		missing := unique("missing")
		_, err := c.CoreV1().Secrets(missing).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
		st := wantStatus(t, err, 404, metav1.StatusReasonNotFound, fmt.Sprintf(`namespaces "%s" not found`, missing))
		if st.Details == nil || st.Details.Kind != "namespaces" || st.Details.Name != missing {
			t.Errorf("details %+v", st.Details)
		}
		_, err = c.CoreV1().ServiceAccounts(missing).Apply(ctx, corev1apply.ServiceAccount("sa", missing), metav1.ApplyOptions{FieldManager: "lab"})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, fmt.Sprintf(`namespaces "%s" not found`, missing))
	}},
	{"a CustomResourceDefinition, then one of its objects", func(ctx context.Context, t *testing.T, b backend, _ kubernetes.Interface, f fixtures) {
		ns := f.namespace(ctx, t)
		dyn := dynamicClient(t, b.admin)
		group := unique("g") + ".lab.test"
		crd := poolCRD(group)
		if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the definition: %v", err)
		}
		waitEstablished(ctx, t, dyn, crd.GetName())

		pools := dyn.Resource(schema.GroupVersionResource{Group: group, Version: "v1beta1", Resource: "ipaddresspools"}).Namespace(ns)
		pool := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/v1beta1", "kind": "IPAddressPool",
			"metadata": map[string]any{"name": "lab", "labels": map[string]any{"app": "metallb"}},
			"spec":     map[string]any{"addresses": []any{"10.5.0.10-10.5.0.20"}},
		}}
		created, err := pools.Create(ctx, pool, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating a pool: %v", err)
		}
		if created.GetGeneration() != 1 || created.GetUID() == "" || created.GetNamespace() != ns {
			t.Errorf("created pool %+v", created.Object)
		}
		got, err := pools.Get(ctx, "lab", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting the pool: %v", err)
		}
		addrs, _, _ := unstructured.NestedStringSlice(got.Object, "spec", "addresses")
		if !slices.Equal(addrs, []string{"10.5.0.10-10.5.0.20"}) || got.GetAPIVersion() != group+"/v1beta1" || got.GetKind() != "IPAddressPool" {
			t.Errorf("got pool %+v", got.Object)
		}
		list, err := pools.List(ctx, metav1.ListOptions{LabelSelector: "app=metallb"})
		if err != nil || len(list.Items) != 1 || list.GetKind() != "IPAddressPoolList" {
			t.Errorf("listing pools: %v %+v", err, list)
		}
		patched, err := pools.Patch(ctx, "lab", types.MergePatchType, []byte(`{"spec":{"autoAssign":false}}`), metav1.PatchOptions{})
		if err != nil || patched.GetGeneration() != 2 {
			t.Errorf("merge patch: %v, generation %d", err, patched.GetGeneration())
		}
		_, err = pools.Patch(ctx, "lab", types.StrategicMergePatchType, []byte(`{"spec":{"autoAssign":true}}`), metav1.PatchOptions{})
		wantStatus(t, err, 415, metav1.StatusReasonUnsupportedMediaType, "")
		applied, err := pools.Apply(ctx, "lab", &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/v1beta1", "kind": "IPAddressPool", "metadata": map[string]any{"name": "lab"},
			"spec": map[string]any{"addresses": []any{"10.5.0.30-10.5.0.40"}},
		}}, metav1.ApplyOptions{FieldManager: "lab", Force: true})
		if err != nil {
			t.Fatalf("applying a pool: %v", err)
		}
		if addrs, _, _ := unstructured.NestedStringSlice(applied.Object, "spec", "addresses"); !slices.Equal(addrs, []string{"10.5.0.30-10.5.0.40"}) {
			t.Errorf("applied addresses %v", addrs)
		}
		_, err = pools.Get(ctx, "nope", metav1.GetOptions{})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, fmt.Sprintf(`ipaddresspools.%s "nope" not found`, group))

		if err := dyn.Resource(crdGVR).Delete(ctx, crd.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting the definition: %v", err)
		}
		err = poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("the definition is not gone: %v", err)
		}
		_, err = pools.Get(ctx, "lab", metav1.GetOptions{})
		wantStatus(t, err, 404, metav1.StatusReasonNotFound, "")
	}},
}

func getSecret(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string) *corev1.Secret {
	t.Helper()
	s, err := c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting secret %s/%s: %v", ns, name, err)
	}
	return s
}

func dynamicClient(t *testing.T, cfg *rest.Config) dynamic.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// poolCRD is a namespaced definition like MetalLB's IPAddressPool, in
// group.
func poolCRD(group string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "ipaddresspools." + group},
		"spec": map[string]any{
			"group": group, "scope": "Namespaced",
			"names": map[string]any{"plural": "ipaddresspools", "singular": "ipaddresspool", "kind": "IPAddressPool", "listKind": "IPAddressPoolList"},
			"versions": []any{map[string]any{
				"name": "v1beta1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
}

// waitEstablished polls a definition until its Established condition is
// True.
func waitEstablished(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) {
	t.Helper()
	err := poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return realkube.Established(crd), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s to be established: %v", name, err)
	}
}
