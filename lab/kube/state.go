package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// resource describes one resource kind the emulator serves.
type resource struct {
	name       string // plural, as in URLs
	singular   string
	kind       string
	gv         schema.GroupVersion
	namespaced bool
	shortNames []string
	subs       []string // subresources
	fields     []string // supported field selector labels
	categories []string

	// The generic object store's kinds (generic.go).
	generic        bool
	generation     bool      // metadata.generation counts spec changes
	pathNames      bool      // names are path segments (RBAC), not DNS subdomains
	returnsDeleted bool      // delete answers the deleted object, not a Status
	stored         *resource // where a custom resource's objects are kept
	crd            string    // the CustomResourceDefinition serving it
}

var (
	nodesResource = &resource{
		name: "nodes", singular: "node", kind: "Node", gv: corev1.SchemeGroupVersion,
		shortNames: []string{"no"}, subs: []string{"status"},
		fields: []string{"metadata.name", "spec.unschedulable"},
	}
	podsResource = &resource{
		name: "pods", singular: "pod", kind: "Pod", gv: corev1.SchemeGroupVersion, namespaced: true,
		shortNames: []string{"po"}, subs: []string{"eviction", "status"}, categories: []string{"all"},
		fields: []string{"metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
			"spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
			"status.podIP", "status.nominatedNodeName"},
	}
	namespacesResource = &resource{
		name: "namespaces", singular: "namespace", kind: "Namespace", gv: corev1.SchemeGroupVersion,
		shortNames: []string{"ns"}, subs: []string{"status"},
		fields: []string{"metadata.name", "status.phase"},
	}
	pdbsResource = &resource{
		name: "poddisruptionbudgets", singular: "poddisruptionbudget", kind: "PodDisruptionBudget",
		gv: policyv1.SchemeGroupVersion, namespaced: true, shortNames: []string{"pdb"}, subs: []string{"status"},
		fields: []string{"metadata.name", "metadata.namespace"},
	}
	daemonSetsResource = &resource{
		name: "daemonsets", singular: "daemonset", kind: "DaemonSet",
		gv: appsv1.SchemeGroupVersion, namespaced: true, shortNames: []string{"ds"}, subs: []string{"status"}, categories: []string{"all"},
		fields: []string{"metadata.name", "metadata.namespace"},
	}
	resources = append([]*resource{namespacesResource, nodesResource, podsResource, pdbsResource, daemonSetsResource},
		genericResources...)
)

func (r *resource) groupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.gv.Group, Resource: r.name}
}

func (r *resource) gvk() schema.GroupVersionKind { return r.gv.WithKind(r.kind) }

func (r *resource) newObject() runtime.Object {
	switch r {
	case nodesResource:
		return &corev1.Node{}
	case podsResource:
		return &corev1.Pod{}
	case namespacesResource:
		return &corev1.Namespace{}
	case daemonSetsResource:
		return &appsv1.DaemonSet{}
	default:
		return &policyv1.PodDisruptionBudget{}
	}
}

func (r *resource) hasSub(sub string) bool {
	for _, s := range r.subs {
		if s == sub {
			return true
		}
	}
	return false
}

// state is the emulated cluster's data and the simulated controllers that
// act on it. It is guarded by Server.mu.
type state struct {
	rv   uint64
	objs map[*resource]map[string]runtime.Object
	// kubelets are the nodes added with AddNode: they have a simulated
	// kubelet.
	kubelets map[string]bool
	// stopped are the nodes whose kubelet was stopped (StopKubelet) and
	// has not registered again: nothing runs or terminates there.
	stopped map[string]bool
	// unready are pods whose readiness probe fails (AddPod with NotReady):
	// the kubelet never reports them Ready.
	unready map[string]bool
	// owners are the simulated controllers, by namespace/kind/name.
	owners map[string]*owner
	// custom are the resources the CustomResourceDefinitions serve, and
	// crdStores where their objects are kept, by definition name.
	custom    []*resource
	crdStores map[string]*resource
	now       func() time.Time
	// deploymentsAvailable is Options.DeploymentsAvailable.
	deploymentsAvailable bool
	// namespaceLinger is Options.NamespaceFinalizeDelay; deleted holds
	// when each terminating namespace was deleted (its deletionTimestamp
	// keeps whole seconds only).
	namespaceLinger time.Duration
	deleted         map[string]time.Time
}

func newState() *state {
	st := &state{
		objs:      map[*resource]map[string]runtime.Object{},
		kubelets:  map[string]bool{},
		stopped:   map[string]bool{},
		unready:   map[string]bool{},
		owners:    map[string]*owner{},
		crdStores: map[string]*resource{},
		now:       time.Now,
	}
	for _, r := range resources {
		st.objs[r] = map[string]runtime.Object{}
	}
	// kube-apiserver creates these itself.
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease} {
		_, _ = st.create(namespacesResource, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	return st
}

func objKey(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func (st *state) nextRV() string {
	st.rv++
	return strconv.FormatUint(st.rv, 10)
}

func (st *state) metaNow() metav1.Time {
	return metav1.NewTime(st.now().Truncate(time.Second))
}

// lookup returns the stored object (not a copy) or NotFound.
func (st *state) lookup(r *resource, ns, name string) (runtime.Object, error) {
	obj, ok := st.objs[r][objKey(ns, name)]
	if !ok {
		return nil, apierrors.NewNotFound(r.groupResource(), name)
	}
	return obj, nil
}

func (st *state) get(r *resource, ns, name string) (runtime.Object, error) {
	obj, err := st.lookup(r, ns, name)
	if err != nil {
		return nil, err
	}
	return obj.DeepCopyObject(), nil
}

// fieldSet returns the fields an object can be selected by.
func fieldSet(obj runtime.Object) fields.Set {
	switch o := obj.(type) {
	case *corev1.Node:
		return fields.Set{"metadata.name": o.Name, "spec.unschedulable": strconv.FormatBool(o.Spec.Unschedulable)}
	case *corev1.Pod:
		return fields.Set{
			"metadata.name": o.Name, "metadata.namespace": o.Namespace, "spec.nodeName": o.Spec.NodeName,
			"spec.restartPolicy": string(o.Spec.RestartPolicy), "spec.schedulerName": o.Spec.SchedulerName,
			"spec.serviceAccountName": o.Spec.ServiceAccountName, "spec.hostNetwork": strconv.FormatBool(o.Spec.HostNetwork),
			"status.phase": string(o.Status.Phase), "status.podIP": o.Status.PodIP,
			"status.nominatedNodeName": o.Status.NominatedNodeName,
		}
	case *corev1.Namespace:
		return fields.Set{"metadata.name": o.Name, "status.phase": string(o.Status.Phase)}
	case *policyv1.PodDisruptionBudget:
		return fields.Set{"metadata.name": o.Name, "metadata.namespace": o.Namespace}
	case *appsv1.DaemonSet:
		return fields.Set{"metadata.name": o.Name, "metadata.namespace": o.Namespace}
	case *unstructured.Unstructured:
		set := fields.Set{"metadata.name": o.GetName(), "metadata.namespace": o.GetNamespace()}
		if o.GetKind() == "Secret" && o.GetAPIVersion() == "v1" {
			set["type"], _, _ = unstructured.NestedString(o.Object, "type")
		}
		return set
	}
	return fields.Set{}
}

// list returns the objects of r in ns (all namespaces when empty) that match
// the selectors, sorted by namespace and name as etcd returns them.
func (st *state) list(r *resource, ns string, lsel labels.Selector, fsel fields.Selector) runtime.Object {
	keys := matching(st.objs[r], ns, lsel, fsel)
	lm := metav1.ListMeta{ResourceVersion: strconv.FormatUint(st.rv, 10)}
	switch r {
	case nodesResource:
		l := &corev1.NodeList{ListMeta: lm, Items: []corev1.Node{}}
		for _, k := range keys {
			l.Items = append(l.Items, *st.objs[r][k].(*corev1.Node).DeepCopy())
		}
		return l
	case podsResource:
		l := &corev1.PodList{ListMeta: lm, Items: []corev1.Pod{}}
		for _, k := range keys {
			l.Items = append(l.Items, *st.objs[r][k].(*corev1.Pod).DeepCopy())
		}
		return l
	case namespacesResource:
		l := &corev1.NamespaceList{ListMeta: lm, Items: []corev1.Namespace{}}
		for _, k := range keys {
			l.Items = append(l.Items, *st.objs[r][k].(*corev1.Namespace).DeepCopy())
		}
		return l
	case daemonSetsResource:
		l := &appsv1.DaemonSetList{ListMeta: lm, Items: []appsv1.DaemonSet{}}
		for _, k := range keys {
			l.Items = append(l.Items, *st.objs[r][k].(*appsv1.DaemonSet).DeepCopy())
		}
		return l
	default:
		l := &policyv1.PodDisruptionBudgetList{ListMeta: lm, Items: []policyv1.PodDisruptionBudget{}}
		for _, k := range keys {
			l.Items = append(l.Items, *st.objs[r][k].(*policyv1.PodDisruptionBudget).DeepCopy())
		}
		return l
	}
}

// store saves obj under a new resourceVersion.
func (st *state) store(r *resource, obj runtime.Object) {
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(st.nextRV())
	st.objs[r][objKey(m.GetNamespace(), m.GetName())] = obj
}

// create validates and stores a new object the way kube-apiserver's create
// strategies prepare them.
func (st *state) create(r *resource, ns string, obj runtime.Object) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if err := placeNew(r, ns, m); err != nil {
		return nil, err
	}
	if errs := validate(r, obj); len(errs) > 0 {
		return nil, apierrors.NewInvalid(r.gvk().GroupKind(), m.GetName(), errs)
	}
	if r.namespaced {
		if err := st.admitNamespace(r, ns, m.GetName()); err != nil {
			return nil, err
		}
	}
	if _, exists := st.objs[r][objKey(m.GetNamespace(), m.GetName())]; exists {
		return nil, apierrors.NewAlreadyExists(r.groupResource(), m.GetName())
	}
	m.SetUID(uuid.NewUUID())
	m.SetCreationTimestamp(st.metaNow())
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetManagedFields(nil)
	m.SetGeneration(0)
	switch o := obj.(type) {
	case *corev1.Pod:
		o.Generation = 1
		defaultPod(o)
		admitPod(o)
		o.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort}
		if len(o.Spec.Containers) > 0 && len(o.Spec.Containers[0].Resources.Requests) > 0 {
			o.Status.QOSClass = corev1.PodQOSBurstable
		}
		st.adopt(o, false)
	case *policyv1.PodDisruptionBudget:
		o.Generation = 1
		o.Status = policyv1.PodDisruptionBudgetStatus{}
	case *appsv1.DaemonSet:
		o.Generation = 1
		o.Status = appsv1.DaemonSetStatus{}
		defaultDaemonSet(o)
	case *corev1.Node:
		// The TaintNodesByCondition admission plugin: a new node is not ready
		// until its kubelet says otherwise.
		if !hasTaint(o.Spec.Taints, corev1.TaintNodeNotReady) {
			o.Spec.Taints = append(o.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
		}
	case *corev1.Namespace:
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels[corev1.LabelMetadataName] = o.Name
		o.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
		o.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	}
	st.store(r, obj)
	st.reconcile()
	return st.get(r, m.GetNamespace(), m.GetName())
}

// update replaces an object (sub "") or its status (sub "status") with upd,
// keeping what the real update strategies keep.
func (st *state) update(r *resource, ns, name, sub string, upd runtime.Object) (runtime.Object, error) {
	curObj, err := st.lookup(r, ns, name)
	if err != nil {
		return nil, err
	}
	um, err := meta.Accessor(upd)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if um.GetName() != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", um.GetName(), name))
	}
	if r.namespaced && um.GetNamespace() != "" && um.GetNamespace() != ns {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	cm, _ := meta.Accessor(curObj)
	if rv := um.GetResourceVersion(); rv != "" && rv != cm.GetResourceVersion() {
		return nil, conflict(r, name)
	}
	if sub == "status" {
		// Status updates change nothing but the status.
		switch o := upd.(type) {
		case *corev1.Node:
			c := curObj.(*corev1.Node)
			o.ObjectMeta, o.Spec = c.ObjectMeta, c.Spec
		case *corev1.Pod:
			c := curObj.(*corev1.Pod)
			o.ObjectMeta, o.Spec = c.ObjectMeta, c.Spec
		case *corev1.Namespace:
			c := curObj.(*corev1.Namespace)
			o.ObjectMeta, o.Spec = c.ObjectMeta, c.Spec
		case *policyv1.PodDisruptionBudget:
			c := curObj.(*policyv1.PodDisruptionBudget)
			o.ObjectMeta, o.Spec = c.ObjectMeta, c.Spec
		case *appsv1.DaemonSet:
			c := curObj.(*appsv1.DaemonSet)
			o.ObjectMeta, o.Spec = c.ObjectMeta, c.Spec
		}
		um.SetResourceVersion(cm.GetResourceVersion())
	} else {
		um.SetNamespace(cm.GetNamespace())
		um.SetUID(cm.GetUID())
		um.SetCreationTimestamp(cm.GetCreationTimestamp())
		um.SetDeletionTimestamp(cm.GetDeletionTimestamp())
		um.SetDeletionGracePeriodSeconds(cm.GetDeletionGracePeriodSeconds())
		um.SetGeneration(cm.GetGeneration())
		if r != namespacesResource {
			um.SetManagedFields(nil)
		} else if um.GetManagedFields() == nil {
			// Namespaces keep the managed fields server-side apply wrote.
			um.SetManagedFields(cm.GetManagedFields())
		}
		um.SetResourceVersion(cm.GetResourceVersion())
		switch o := upd.(type) {
		case *corev1.Node:
			o.Status = curObj.(*corev1.Node).Status
		case *corev1.Pod:
			c := curObj.(*corev1.Pod)
			o.Status = c.Status
			defaultPod(o)
			if errs := validatePodUpdate(o, c); len(errs) > 0 {
				return nil, apierrors.NewInvalid(r.gvk().GroupKind(), name, errs)
			}
			if !apiequality.Semantic.DeepEqual(o.Spec, c.Spec) {
				o.Generation = c.Generation + 1
			}
		case *corev1.Namespace:
			o.Status = curObj.(*corev1.Namespace).Status
			if o.Labels == nil {
				o.Labels = map[string]string{}
			}
			o.Labels[corev1.LabelMetadataName] = o.Name
		case *policyv1.PodDisruptionBudget:
			c := curObj.(*policyv1.PodDisruptionBudget)
			o.Status = c.Status
			if !apiequality.Semantic.DeepEqual(o.Spec, c.Spec) {
				o.Generation = c.Generation + 1
			}
		case *appsv1.DaemonSet:
			c := curObj.(*appsv1.DaemonSet)
			o.Status = c.Status
			defaultDaemonSet(o)
			if !apiequality.Semantic.DeepEqual(o.Spec, c.Spec) {
				o.Generation = c.Generation + 1
			}
		}
	}
	if errs := validate(r, upd); len(errs) > 0 {
		return nil, apierrors.NewInvalid(r.gvk().GroupKind(), name, errs)
	}
	upd.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	if apiequality.Semantic.DeepEqual(upd, curObj) {
		// etcd keeps a no-op update's resourceVersion.
		return curObj.DeepCopyObject(), nil
	}
	st.store(r, upd)
	st.reconcile()
	return st.get(r, ns, name)
}

// patch applies a patch of the given content type to an object or its
// status, then updates it as update does. A resourceVersion the patch sets
// is a precondition.
func (st *state) patch(r *resource, ns, name, sub, contentType string, body []byte) (runtime.Object, error) {
	curObj, err := st.lookup(r, ns, name)
	if err != nil {
		return nil, err
	}
	cur, err := json.Marshal(curObj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	patched, handled, err := patchBytes(cur, contentType, body, r.newObject())
	switch {
	case err != nil:
		return nil, err
	case handled:
	case contentType == string(types.ApplyPatchType) || contentType == string(types.ApplyCBORPatchType):
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: 415, Reason: metav1.StatusReasonUnsupportedMediaType,
			Message: "server-side apply is not supported by the Kubernetes API emulator",
		}}
	default:
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: 415, Reason: metav1.StatusReasonUnsupportedMediaType,
			Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s, %s",
				types.JSONPatchType, types.MergePatchType, types.ApplyPatchType, types.StrategicMergePatchType),
		}}
	}
	upd := r.newObject()
	if err := json.Unmarshal(patched, upd); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding the patched object: %v", err))
	}
	um, _ := meta.Accessor(upd)
	if um.GetName() != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", um.GetName(), name))
	}
	return st.update(r, ns, name, sub, upd)
}

// remove deletes an object. Pods are deleted gracefully: a pod bound to a
// node is marked terminating and its kubelet removes it.
func (st *state) remove(r *resource, ns, name string, opts *metav1.DeleteOptions) (runtime.Object, error) {
	obj, err := st.lookup(r, ns, name)
	if err != nil {
		return nil, err
	}
	m, _ := meta.Accessor(obj)
	if err := preconditions(r.kind, m, opts); err != nil {
		return nil, err
	}
	switch r {
	case podsResource:
		out := st.deletePod(obj.(*corev1.Pod), opts.GracePeriodSeconds)
		st.reconcile()
		return out, nil
	case nodesResource:
		delete(st.objs[r], name)
		delete(st.kubelets, name)
		delete(st.stopped, name)
		// The pod garbage collector removes the pods of a node that is gone.
		for _, p := range st.podsOn(name) {
			zero := int64(0)
			st.deletePod(p, &zero)
		}
	default:
		delete(st.objs[r], objKey(ns, name))
	}
	st.reconcile()
	return &metav1.Status{Status: metav1.StatusSuccess, Details: &metav1.StatusDetails{
		Name: name, Group: r.gv.Group, Kind: r.name, UID: m.GetUID(),
	}}, nil
}

// deletePod deletes a pod with the given grace period (nil: the pod's own).
// It returns the pod as last seen.
func (st *state) deletePod(p *corev1.Pod, grace *int64) *corev1.Pod {
	g := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if p.Spec.TerminationGracePeriodSeconds != nil {
		g = *p.Spec.TerminationGracePeriodSeconds
	}
	if grace != nil {
		g = *grace
	}
	if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		g = 0
	}
	if g < 0 {
		g = 0
	}
	if g == 0 {
		delete(st.objs[podsResource], objKey(p.Namespace, p.Name))
		delete(st.unready, objKey(p.Namespace, p.Name))
		return p.DeepCopy()
	}
	if p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds <= g {
		return p.DeepCopy()
	}
	at := metav1.NewTime(st.now().Add(time.Duration(g) * time.Second).Truncate(time.Second))
	p.DeletionTimestamp = &at
	p.DeletionGracePeriodSeconds = &g
	// A pod's generation counts its graceful deletion too.
	p.Generation++
	st.store(podsResource, p)
	return p.DeepCopy()
}

func conflict(r *resource, name string) error {
	return apierrors.NewConflict(r.groupResource(), name,
		errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

// podsOn returns the stored pods bound to a node, by name.
func (st *state) podsOn(node string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range st.objs[podsResource] {
		if p := obj.(*corev1.Pod); p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return objKey(out[i].Namespace, out[i].Name) < objKey(out[j].Namespace, out[j].Name)
	})
	return out
}

// sortedPods returns every stored pod in key order.
func (st *state) sortedPods() []*corev1.Pod {
	keys := make([]string, 0, len(st.objs[podsResource]))
	for k := range st.objs[podsResource] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*corev1.Pod, len(keys))
	for i, k := range keys {
		out[i] = st.objs[podsResource][k].(*corev1.Pod)
	}
	return out
}

func (st *state) node(name string) *corev1.Node {
	if obj, ok := st.objs[nodesResource][name]; ok {
		return obj.(*corev1.Node)
	}
	return nil
}

// defaultPod applies the pod defaults of kube-apiserver that the engine's
// drain logic reads.
func defaultPod(p *corev1.Pod) {
	if p.Spec.RestartPolicy == "" {
		p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if p.Spec.DNSPolicy == "" {
		p.Spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if p.Spec.SchedulerName == "" {
		p.Spec.SchedulerName = corev1.DefaultSchedulerName
	}
	if p.Spec.TerminationGracePeriodSeconds == nil {
		g := int64(corev1.DefaultTerminationGracePeriodSeconds)
		p.Spec.TerminationGracePeriodSeconds = &g
	}
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if p.Spec.EnableServiceLinks == nil {
		p.Spec.EnableServiceLinks = new(true)
	}
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if c.TerminationMessagePath == "" {
			c.TerminationMessagePath = corev1.TerminationMessagePathDefault
		}
		if c.TerminationMessagePolicy == "" {
			c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
		}
		if c.ImagePullPolicy == "" {
			c.ImagePullPolicy = defaultPullPolicy(c.Image)
		}
	}
}

// admitPod does what kube-apiserver's default admission plugins do to a
// new pod: Priority sets its priority and preemption policy,
// DefaultTolerationSeconds lets it stay five minutes on a node that is not
// ready or unreachable.
func admitPod(p *corev1.Pod) {
	if p.Spec.Priority == nil {
		p.Spec.Priority = new(int32(0))
	}
	if p.Spec.PreemptionPolicy == nil {
		policy := corev1.PreemptLowerPriority
		p.Spec.PreemptionPolicy = &policy
	}
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		tolerated := false
		for _, t := range p.Spec.Tolerations {
			if (t.Key == key || (t.Key == "" && t.Operator == corev1.TolerationOpExists)) &&
				(t.Effect == corev1.TaintEffectNoExecute || t.Effect == "") {
				tolerated = true
			}
		}
		if !tolerated {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{
				Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
				TolerationSeconds: new(int64(300)),
			})
		}
	}
}

// podSpecsEqualForUpdate reports whether two pod specs are equal once the fields a
// pod update may change are blanked.
func podSpecsEqualForUpdate(a, b corev1.PodSpec) bool {
	a, b = *a.DeepCopy(), *b.DeepCopy()
	for _, s := range []*corev1.PodSpec{&a, &b} {
		for i := range s.Containers {
			s.Containers[i].Image = ""
		}
		for i := range s.InitContainers {
			s.InitContainers[i].Image = ""
		}
		s.ActiveDeadlineSeconds = nil
		s.Tolerations = nil
		s.TerminationGracePeriodSeconds = nil
	}
	return reflect.DeepEqual(a, b)
}

func hasTaint(taints []corev1.Taint, key string) bool {
	for _, t := range taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// defaultPullPolicy is Always for an image without a tag or digest, or
// tagged latest, and IfNotPresent otherwise.
func defaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(name, ":")
	if i < 0 || name[i+1:] == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// patchBytes applies a JSON patch, a JSON merge patch or a strategic
// merge patch (with typed's Go type; nil takes none) to cur, with
// kube-apiserver's errors. handled is false for any other content type.
func patchBytes(cur []byte, contentType string, body []byte, typed runtime.Object) (patched []byte, handled bool, err error) {
	switch contentType {
	case string(types.JSONPatchType):
		ops, err := decodeJSONPatch(body)
		if err != nil {
			return nil, true, apierrors.NewBadRequest(err.Error())
		}
		if patched, err = applyJSONPatch(cur, ops); err != nil {
			// kube-apiserver says no more than this about a failed JSON patch.
			return nil, true, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid,
				Message: "the server rejected our request due to an error in our request", Details: &metav1.StatusDetails{},
			}}
		}
		return patched, true, nil
	case string(types.MergePatchType):
		if patched, err = mergePatch(cur, body); err != nil {
			return nil, true, apierrors.NewBadRequest(err.Error())
		}
		return patched, true, nil
	case string(types.StrategicMergePatchType):
		if typed == nil {
			return nil, false, nil
		}
		if patched, err = strategicpatch.StrategicMergePatch(cur, body, typed); err != nil {
			return nil, true, apierrors.NewBadRequest(err.Error())
		}
		return patched, true, nil
	}
	return nil, false, nil
}

// placeNew puts a new object in the request's namespace (none for a
// cluster-scoped kind), refusing one that names another, and names it
// from its generateName when it has no name, as kube-apiserver's create
// does.
func placeNew(r *resource, ns string, m metav1.Object) error {
	if r.namespaced {
		if m.GetNamespace() != "" && m.GetNamespace() != ns {
			return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		m.SetNamespace(ns)
	} else {
		m.SetNamespace("")
	}
	if m.GetName() == "" && m.GetGenerateName() != "" {
		m.SetName(m.GetGenerateName() + randomSuffix())
	}
	return nil
}

// matching returns the keys of the objects of store in ns (all
// namespaces when empty) that match the selectors, sorted as etcd
// returns them.
func matching(store map[string]runtime.Object, ns string, lsel labels.Selector, fsel fields.Selector) []string {
	keys := make([]string, 0, len(store))
	for k, obj := range store {
		m, _ := meta.Accessor(obj)
		if ns != "" && m.GetNamespace() != ns {
			continue
		}
		if !lsel.Matches(labels.Set(m.GetLabels())) || !fsel.Matches(fieldSet(obj)) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
