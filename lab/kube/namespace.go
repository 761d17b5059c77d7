package kube

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// immortalNamespaces are the namespaces the NamespaceLifecycle admission
// plugin refuses to delete.
var immortalNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic}

// admitNamespace is the NamespaceLifecycle admission plugin's check of a
// create in a namespace: a missing namespace is NotFound, a terminating
// one Forbidden.
func (st *state) admitNamespace(r *resource, ns, name string) error {
	obj, err := st.lookup(namespacesResource, "", ns)
	if err != nil {
		return err
	}
	if obj.(*corev1.Namespace).DeletionTimestamp == nil {
		return nil
	}
	e := apierrors.NewForbidden(r.groupResource(), name,
		fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	e.ErrStatus.Details.Causes = append(e.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: corev1.NamespaceTerminatingCause, Message: fmt.Sprintf("namespace %s is being terminated", ns),
		Field: "metadata.namespace",
	})
	return e
}

// deleteNamespace marks a namespace for deletion, as the namespace
// registry does (deletionTimestamp, phase Terminating); the namespace
// controller (finishNamespaces) then empties it before the answer is
// sent, and removes it once Options.NamespaceFinalizeDelay has passed
// (the server reconciles again then). The answer is the namespace as
// marked.
func (st *state) deleteNamespace(name string, opts *metav1.DeleteOptions, dryRun bool) (runtime.Object, error) {
	obj, err := st.lookup(namespacesResource, "", name)
	if err != nil {
		return nil, err
	}
	ns := obj.(*corev1.Namespace).DeepCopy()
	if err := preconditions(namespacesResource.name, ns, opts); err != nil {
		return nil, err
	}
	if slices.Contains(immortalNamespaces, name) {
		return nil, apierrors.NewForbidden(namespacesResource.groupResource(), name, fmt.Errorf("this namespace may not be deleted"))
	}
	if ns.DeletionTimestamp != nil {
		return ns, nil
	}
	now := st.metaNow()
	ns.DeletionTimestamp = &now
	ns.DeletionGracePeriodSeconds = new(int64(0))
	ns.Status.Phase = corev1.NamespaceTerminating
	if dryRun {
		return ns, nil
	}
	st.store(namespacesResource, ns)
	if st.deleted == nil {
		st.deleted = map[string]time.Time{}
	}
	st.deleted[name] = st.now()
	out := ns.DeepCopy()
	st.reconcile()
	return out, nil
}

// finishNamespaces plays the namespace controller of
// kube-controller-manager: every object in a terminating namespace is
// deleted (pods gracefully, so a pod on a node whose kubelet does not
// finish it keeps the namespace), and a namespace left empty is removed.
// It reports whether it changed anything.
func (st *state) finishNamespaces() bool {
	changed := false
	for _, name := range sortedKeys(st.objs[namespacesResource]) {
		ns := st.objs[namespacesResource][name].(*corev1.Namespace)
		if ns.DeletionTimestamp == nil {
			continue
		}
		if st.emptyNamespace(name) && !st.now().Before(st.deleted[name].Add(st.namespaceLinger)) {
			delete(st.objs[namespacesResource], name)
			delete(st.deleted, name)
			changed = true
		}
	}
	return changed
}

// emptyNamespace deletes what is left in a namespace and reports whether
// nothing is.
func (st *state) emptyNamespace(ns string) bool {
	empty := true
	// The controllers that would recreate what is deleted go with it.
	for key, o := range st.owners {
		if o.namespace == ns {
			delete(st.owners, key)
		}
	}
	for r, objs := range st.objs {
		if r == namespacesResource || r == nodesResource {
			continue
		}
		for _, k := range sortedKeys(objs) {
			obj := objs[k]
			m, _ := metaOf(obj)
			if m.GetNamespace() != ns {
				continue
			}
			if p, ok := obj.(*corev1.Pod); ok {
				if p.DeletionTimestamp == nil {
					st.deletePod(p, nil)
				}
				if _, still := objs[k]; still {
					empty = false
				}
				continue
			}
			delete(objs, k)
		}
	}
	return empty
}

// metaOf is the object metadata of a stored object.
func metaOf(obj runtime.Object) (metav1.Object, bool) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return o, true
	case metav1.ObjectMetaAccessor:
		return o.GetObjectMeta(), true
	}
	return &metav1.ObjectMeta{}, false
}

// namespaceApply applies a configuration to a namespace, creating it when
// absent; the answer's code is 201 for a creation.
func (st *state) namespaceApply(name string, body []byte, manager string, force bool) (runtime.Object, int, error) {
	var live *unstructured.Unstructured
	if obj, err := st.lookup(namespacesResource, "", name); err == nil {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, 0, apierrors.NewInternalError(err)
		}
		live = &unstructured.Unstructured{Object: m}
		live.SetAPIVersion("v1")
		live.SetKind("Namespace")
	}
	applied, err := applyPatch(namespacesResource, live, name, "", body, manager, force)
	if err != nil {
		return nil, 0, err
	}
	ns := &corev1.Namespace{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(applied.Object, ns); err != nil {
		return nil, 0, apierrors.NewBadRequest(err.Error())
	}
	if live == nil {
		out, err := st.create(namespacesResource, "", ns)
		if err != nil {
			return nil, 0, err
		}
		stored := st.objs[namespacesResource][name].(*corev1.Namespace)
		stored.ManagedFields = applied.GetManagedFields()
		out.(*corev1.Namespace).ManagedFields = applied.GetManagedFields()
		return out, http.StatusCreated, nil
	}
	out, err := st.update(namespacesResource, "", name, "", ns)
	return out, http.StatusOK, err
}

// snapshot saves the stored objects and the resourceVersion counter; the
// function it returns puts them back, undoing a dry run.
func (st *state) snapshot() func() {
	rv := st.rv
	objs := make(map[*resource]map[string]runtime.Object, len(st.objs))
	for r, m := range st.objs {
		c := make(map[string]runtime.Object, len(m))
		for k, o := range m {
			c[k] = o.DeepCopyObject()
		}
		objs[r] = c
	}
	custom := slices.Clone(st.custom)
	stores := make(map[string]*resource, len(st.crdStores))
	for k, v := range st.crdStores {
		stores[k] = v
	}
	return func() {
		st.rv, st.objs, st.custom, st.crdStores = rv, objs, custom, stores
	}
}
