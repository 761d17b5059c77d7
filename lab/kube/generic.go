package kube

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// The kinds kept by the generic object store: no controller acts on them
// (but the CustomResourceDefinition one), they are stored as clients write
// them, with the defaults and strategies listed in genericPrepare.
var (
	secretsResource = &resource{
		name: "secrets", singular: "secret", kind: "Secret", gv: corev1.SchemeGroupVersion, namespaced: true,
		generic: true, fields: []string{"metadata.name", "metadata.namespace", "type"},
	}
	configMapsResource = &resource{
		name: "configmaps", singular: "configmap", kind: "ConfigMap", gv: corev1.SchemeGroupVersion, namespaced: true,
		shortNames: []string{"cm"}, generic: true, fields: []string{"metadata.name", "metadata.namespace"},
	}
	serviceAccountsResource = &resource{
		name: "serviceaccounts", singular: "serviceaccount", kind: "ServiceAccount", gv: corev1.SchemeGroupVersion,
		namespaced: true, shortNames: []string{"sa"}, generic: true, returnsDeleted: true,
		fields: []string{"metadata.name", "metadata.namespace"},
	}
	servicesResource = &resource{
		name: "services", singular: "service", kind: "Service", gv: corev1.SchemeGroupVersion, namespaced: true,
		shortNames: []string{"svc"}, categories: []string{"all"}, subs: []string{"status"}, generic: true,
		returnsDeleted: true, fields: []string{"metadata.name", "metadata.namespace"},
	}
	deploymentsResource = &resource{
		name: "deployments", singular: "deployment", kind: "Deployment", gv: appsv1.SchemeGroupVersion, namespaced: true,
		shortNames: []string{"deploy"}, categories: []string{"all"}, subs: []string{"status"}, generic: true,
		generation: true, fields: []string{"metadata.name", "metadata.namespace"},
	}
	statefulSetsResource = &resource{
		name: "statefulsets", singular: "statefulset", kind: "StatefulSet", gv: appsv1.SchemeGroupVersion, namespaced: true,
		shortNames: []string{"sts"}, categories: []string{"all"}, subs: []string{"status"}, generic: true,
		generation: true, fields: []string{"metadata.name", "metadata.namespace"},
	}
	clusterRolesResource = &resource{
		name: "clusterroles", singular: "clusterrole", kind: "ClusterRole", gv: rbacv1.SchemeGroupVersion,
		generic: true, pathNames: true, fields: []string{"metadata.name"},
	}
	clusterRoleBindingsResource = &resource{
		name: "clusterrolebindings", singular: "clusterrolebinding", kind: "ClusterRoleBinding", gv: rbacv1.SchemeGroupVersion,
		generic: true, pathNames: true, fields: []string{"metadata.name"},
	}
	rolesResource = &resource{
		name: "roles", singular: "role", kind: "Role", gv: rbacv1.SchemeGroupVersion, namespaced: true,
		generic: true, pathNames: true, fields: []string{"metadata.name", "metadata.namespace"},
	}
	roleBindingsResource = &resource{
		name: "rolebindings", singular: "rolebinding", kind: "RoleBinding", gv: rbacv1.SchemeGroupVersion, namespaced: true,
		generic: true, pathNames: true, fields: []string{"metadata.name", "metadata.namespace"},
	}
	crdsResource = &resource{
		name: "customresourcedefinitions", singular: "customresourcedefinition", kind: "CustomResourceDefinition",
		gv: schema.GroupVersion{Group: "apiextensions.k8s.io", Version: "v1"}, shortNames: []string{"crd", "crds"},
		categories: []string{"api-extensions"}, subs: []string{"status"}, generic: true, generation: true,
		fields: []string{"metadata.name"},
	}
	genericResources = []*resource{
		secretsResource, configMapsResource, serviceAccountsResource, servicesResource,
		deploymentsResource, statefulSetsResource,
		clusterRolesResource, clusterRoleBindingsResource, rolesResource, roleBindingsResource,
		crdsResource,
	}
)

// storage is the resource whose map keeps the objects: a custom resource
// served at several versions keeps one set of objects.
func (r *resource) storage() *resource {
	if r.stored != nil {
		return r.stored
	}
	return r
}

// typed returns an empty object of the resource's Go type, or nil for the
// kinds known only as unstructured data (CustomResourceDefinitions and
// custom resources).
func (r *resource) typed() runtime.Object {
	obj, err := scheme.New(r.gvk())
	if err != nil {
		return nil
	}
	return obj
}

// genericOpts are the options of a write to the generic store.
type genericOpts struct {
	dryRun  bool
	manager string // the field manager of a write that is not an apply
}

// toTyped converts a stored object to the resource's Go type for
// answering (so protobuf works); custom kinds stay unstructured, with
// the requested version.
func toTyped(r *resource, u *unstructured.Unstructured) (runtime.Object, error) {
	typed := r.typed()
	if typed == nil {
		out := u.DeepCopy()
		out.SetAPIVersion(r.gv.String())
		out.SetKind(r.kind)
		return out, nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return typed, nil
}

// normalized round-trips an object through its Go type, as decoding and
// encoding in kube-apiserver do: fields the type does not have are dropped.
func normalized(r *resource, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	typed := r.typed()
	if typed == nil {
		return u, nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out := &unstructured.Unstructured{Object: m}
	out.SetAPIVersion(r.gv.String())
	out.SetKind(r.kind)
	return out, nil
}

// decodeGeneric decodes a create or update body: through the Go type for
// built-in kinds (any media type), as JSON or YAML for custom ones.
func decodeGeneric(req *http.Request, body []byte, r *resource) (*unstructured.Unstructured, error) {
	if typed := r.typed(); typed != nil {
		if err := decodeInto(req, body, r.gvk(), typed); err != nil {
			return nil, err
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion(r.gv.String())
		u.SetKind(r.kind)
		return u, nil
	}
	if ct := req.Header.Get("Content-Type"); ct != "" && mediaOf(ct) == mediaProtobuf {
		return nil, unsupportedMediaType(mediaProtobuf)
	}
	u, err := unstructuredFrom(body)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if u.GetAPIVersion() == "" && u.GetKind() == "" {
		u.SetAPIVersion(r.gv.String())
		u.SetKind(r.kind)
	}
	if u.GetAPIVersion() != r.gv.String() || u.GetKind() != r.kind {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %s", r.kind, u.GroupVersionKind()))
	}
	return u, nil
}

// unstructuredFrom parses a JSON or YAML object.
func unstructuredFrom(body []byte) (*unstructured.Unstructured, error) {
	js, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// genericGet returns a copy of a stored object.
func (st *state) genericGet(r *resource, ns, name string) (*unstructured.Unstructured, error) {
	obj, ok := st.objs[r.storage()][objKey(ns, name)]
	if !ok {
		return nil, apierrors.NewNotFound(r.groupResource(), name)
	}
	return obj.(*unstructured.Unstructured).DeepCopy(), nil
}

// genericList returns the objects of r in ns (all namespaces when empty)
// that match the selectors, sorted by key as etcd returns them, in the
// list type of the kind.
func (st *state) genericList(r *resource, ns string, lsel labels.Selector, fsel fields.Selector) (runtime.Object, error) {
	store := st.objs[r.storage()]
	keys := matching(store, ns, lsel, fsel)
	items := make([]any, 0, len(keys))
	for _, k := range keys {
		u := store[k].(*unstructured.Unstructured).DeepCopy()
		u.SetAPIVersion(r.gv.String())
		u.SetKind(r.kind)
		items = append(items, u.Object)
	}
	list := map[string]any{
		"apiVersion": r.gv.String(), "kind": r.kind + "List",
		"metadata": map[string]any{"resourceVersion": strconv.FormatUint(st.rv, 10)},
		"items":    items,
	}
	typed, err := scheme.New(r.gv.WithKind(r.kind + "List"))
	if err != nil {
		return (&unstructured.Unstructured{Object: list}).ToList()
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list, typed); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return typed, nil
}

// genericName validates an object's name the way the kind's validation
// does: RBAC objects take any path segment, services a DNS label,
// everything else a DNS subdomain.
func genericName(r *resource, name string) field.ErrorList {
	p := field.NewPath("metadata", "name")
	if name == "" {
		return field.ErrorList{field.Required(p, "name or generateName is required")}
	}
	var msgs []string
	switch {
	case r.pathNames:
		msgs = pathSegmentName(name)
	case r == servicesResource:
		msgs = validation.IsDNS1035Label(name)
	default:
		msgs = validation.IsDNS1123Subdomain(name)
	}
	var errs field.ErrorList
	for _, m := range msgs {
		errs = append(errs, field.Invalid(p, name, m))
	}
	return errs
}

// pathSegmentName refuses the names that cannot be a URL path segment.
func pathSegmentName(name string) []string {
	if name == "." || name == ".." {
		return []string{fmt.Sprintf("may not be '%s'", name)}
	}
	for _, c := range []string{"/", "%"} {
		for i := range name {
			if string(name[i]) == c {
				return []string{fmt.Sprintf("may not contain '%s'", c)}
			}
		}
	}
	return nil
}

// genericCreate stores a new object the way kube-apiserver's create
// strategies of the generic kinds prepare it.
func (st *state) genericCreate(r *resource, ns string, u *unstructured.Unstructured, o genericOpts) (*unstructured.Unstructured, error) {
	if err := placeNew(r, ns, u); err != nil {
		return nil, err
	}
	if r.namespaced {
		if err := st.admitNamespace(r, ns, u.GetName()); err != nil {
			return nil, err
		}
	}
	errs := genericName(r, u.GetName())
	if len(errs) == 0 {
		errs = genericValidate(r, u, nil)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(r.gvk().GroupKind(), u.GetName(), errs)
	}
	if _, exists := st.objs[r.storage()][objKey(u.GetNamespace(), u.GetName())]; exists {
		return nil, apierrors.NewAlreadyExists(r.groupResource(), u.GetName())
	}
	u.SetUID(uuid.NewUUID())
	u.SetCreationTimestamp(st.metaNow())
	u.SetDeletionTimestamp(nil)
	u.SetDeletionGracePeriodSeconds(nil)
	u.SetGeneration(0)
	u.SetResourceVersion("")
	if r.generation {
		u.SetGeneration(1)
	}
	if r.hasSub("status") {
		unstructured.RemoveNestedField(u.Object, "status")
	}
	u, err := st.genericPrepare(r, u, nil)
	if err != nil {
		return nil, err
	}
	if o.manager != "" {
		if err := trackUpdate(r, nil, u, o.manager); err != nil {
			return nil, err
		}
	}
	if o.dryRun {
		return st.answer(r, u), nil
	}
	st.storeGeneric(r, u)
	st.afterGenericWrite(r, u)
	return st.genericGet(r, u.GetNamespace(), u.GetName())
}

// answer is what a write returns: the object with the requested version.
func (st *state) answer(r *resource, u *unstructured.Unstructured) *unstructured.Unstructured {
	out := u.DeepCopy()
	out.SetAPIVersion(r.gv.String())
	out.SetKind(r.kind)
	return out
}

// storeGeneric saves an object under a new resourceVersion.
func (st *state) storeGeneric(r *resource, u *unstructured.Unstructured) {
	u.SetResourceVersion(st.nextRV())
	st.objs[r.storage()][objKey(u.GetNamespace(), u.GetName())] = u
}

// afterGenericWrite runs what a write starts: the apiextensions
// controllers for a CustomResourceDefinition.
func (st *state) afterGenericWrite(r *resource, u *unstructured.Unstructured) {
	if r == crdsResource {
		st.syncCRDs()
	}
}

// genericUpdate replaces an object (sub "") or its status (sub "status"),
// keeping what the update strategies keep; an update that changes
// nothing keeps the resourceVersion.
func (st *state) genericUpdate(r *resource, ns, name, sub string, upd *unstructured.Unstructured, o genericOpts) (*unstructured.Unstructured, error) {
	cur, err := st.genericGet(r, ns, name)
	if err != nil {
		return nil, err
	}
	if upd.GetName() != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", upd.GetName(), name))
	}
	if r.namespaced && upd.GetNamespace() != "" && upd.GetNamespace() != ns {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if rv := upd.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
		return nil, conflict(r, name)
	}
	next := mergeForUpdate(r, cur, upd, sub)
	if errs := genericValidate(r, next, cur); len(errs) > 0 {
		return nil, apierrors.NewInvalid(r.gvk().GroupKind(), name, errs)
	}
	if next, err = st.genericPrepare(r, next, cur); err != nil {
		return nil, err
	}
	if r.generation && specChanged(r, cur, next) {
		next.SetGeneration(cur.GetGeneration() + 1)
	}
	if o.manager != "" {
		if err := trackUpdate(r, cur, next, o.manager); err != nil {
			return nil, err
		}
	}
	return st.commitUpdate(r, cur, next, o)
}

// mergeForUpdate builds the object an update stores: a status update
// changes only the status; a main-resource update keeps the status of
// kinds with a status subresource, and the identity and managed fields of
// the stored object.
func mergeForUpdate(r *resource, cur, upd *unstructured.Unstructured, sub string) *unstructured.Unstructured {
	if sub == "status" {
		next := cur.DeepCopy()
		if status, ok := upd.Object["status"]; ok {
			next.Object["status"] = status
		} else {
			delete(next.Object, "status")
		}
		return next
	}
	next := upd.DeepCopy()
	next.SetNamespace(cur.GetNamespace())
	next.SetUID(cur.GetUID())
	next.SetCreationTimestamp(cur.GetCreationTimestamp())
	next.SetDeletionTimestamp(cur.GetDeletionTimestamp())
	next.SetDeletionGracePeriodSeconds(cur.GetDeletionGracePeriodSeconds())
	next.SetGeneration(cur.GetGeneration())
	next.SetResourceVersion(cur.GetResourceVersion())
	if _, ok := upd.Object["metadata"].(map[string]any)["managedFields"]; !ok {
		next.SetManagedFields(cur.GetManagedFields())
	}
	if r.hasSub("status") {
		if status, ok := cur.Object["status"]; ok {
			next.Object["status"] = status
		} else {
			delete(next.Object, "status")
		}
	}
	return next
}

// commitUpdate stores next unless it equals cur (etcd keeps a no-op
// update's resourceVersion) or the write is a dry run.
func (st *state) commitUpdate(r *resource, cur, next *unstructured.Unstructured, o genericOpts) (*unstructured.Unstructured, error) {
	if apiequality.Semantic.DeepEqual(withoutManagedTimes(cur), withoutManagedTimes(next)) || o.dryRun {
		if o.dryRun {
			return st.answer(r, next), nil
		}
		return st.answer(r, cur), nil
	}
	st.storeGeneric(r, next)
	st.afterGenericWrite(r, next)
	return st.genericGet(r, next.GetNamespace(), next.GetName())
}

// withoutManagedTimes drops the times of managed fields entries, which a
// no-op write would otherwise change.
func withoutManagedTimes(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	mf := c.GetManagedFields()
	for i := range mf {
		mf[i].Time = nil
	}
	c.SetManagedFields(mf)
	return c
}

// specChanged reports whether an update changed more than metadata and
// status, which is what bumps metadata.generation.
func specChanged(r *resource, cur, next *unstructured.Unstructured) bool {
	strip := func(u *unstructured.Unstructured) map[string]any {
		m := map[string]any{}
		for k, v := range u.Object {
			if k != "metadata" && k != "status" && k != "apiVersion" && k != "kind" {
				m[k] = v
			}
		}
		return m
	}
	return !apiequality.Semantic.DeepEqual(strip(cur), strip(next))
}

// genericPatch patches an object with a JSON patch, a JSON merge patch or
// (for kinds with a Go type) a strategic merge patch, then updates it.
func (st *state) genericPatch(r *resource, ns, name, sub, contentType string, body []byte, o genericOpts) (*unstructured.Unstructured, error) {
	if contentType == string(types.StrategicMergePatchType) && r.typed() == nil {
		return nil, unsupportedPatch(r)
	}
	cur, err := st.genericGet(r, ns, name)
	if err != nil {
		return nil, err
	}
	curJSON, err := json.Marshal(cur.Object)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	patched, handled, err := patchBytes(curJSON, contentType, body, r.typed())
	if err != nil {
		return nil, err
	}
	if !handled {
		return nil, unsupportedPatch(r)
	}
	upd, err := unstructuredFrom(patched)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding the patched object: %v", err))
	}
	if upd, err = normalized(r, upd); err != nil {
		return nil, err
	}
	return st.genericUpdate(r, ns, name, sub, upd, o)
}

// unsupportedPatch is kube-apiserver's answer to a patch type the
// resource does not take; custom resources take no strategic merge patch.
func unsupportedPatch(r *resource) error {
	accepted := []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.ApplyYAMLPatchType)}
	if r.typed() != nil {
		accepted = append(accepted, string(types.StrategicMergePatchType))
	}
	accepted = append(accepted, string(types.ApplyCBORPatchType))
	msg := "the body of the request was in an unknown format - accepted media types include: "
	for i, a := range accepted {
		if i > 0 {
			msg += ", "
		}
		msg += a
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
		Reason: metav1.StatusReasonUnsupportedMediaType, Message: msg,
	}}
}

// genericDelete deletes an object at once (no finalizers but the CRD's,
// see deleteCRD); services and service accounts answer the deleted
// object, the others a Success status, as their registries do.
func (st *state) genericDelete(r *resource, ns, name string, opts *metav1.DeleteOptions, dryRun bool) (runtime.Object, error) {
	cur, err := st.genericGet(r, ns, name)
	if err != nil {
		return nil, err
	}
	if err := preconditions(r.groupResource().String(), cur, opts); err != nil {
		return nil, err
	}
	if r == crdsResource {
		return st.deleteCRD(cur, dryRun)
	}
	if !dryRun {
		delete(st.objs[r.storage()], objKey(ns, name))
	}
	if r.returnsDeleted {
		return toTyped(r, st.answer(r, cur))
	}
	return &metav1.Status{Status: metav1.StatusSuccess, Details: &metav1.StatusDetails{
		Name: name, Group: r.gv.Group, Kind: r.name, UID: cur.GetUID(),
	}}, nil
}
