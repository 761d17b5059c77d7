package kube

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Labels the DaemonSet controller puts on the pods it creates
// (k8s.io/api/apps/v1 types.go: ControllerRevisionHashLabelKey,
// and the pod-template-generation label of pkg/apis/extensions).
const (
	labelRevisionHash       = appsv1.ControllerRevisionHashLabelKey
	labelTemplateGeneration = "pod-template-generation"
)

// defaultDaemonSet fills what the apps/v1 defaulting functions fill
// (pkg/apis/apps/v1/defaults.go SetDefaults_DaemonSet): a RollingUpdate
// strategy with maxUnavailable 1 and maxSurge 0, and a revision history
// of ten.
func defaultDaemonSet(ds *appsv1.DaemonSet) {
	if ds.Spec.UpdateStrategy.Type == "" {
		ds.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if ds.Spec.UpdateStrategy.RollingUpdate == nil {
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		ru := ds.Spec.UpdateStrategy.RollingUpdate
		if ru.MaxUnavailable == nil {
			ru.MaxUnavailable = new(intstr.FromInt32(1))
		}
		if ru.MaxSurge == nil {
			ru.MaxSurge = new(intstr.FromInt32(0))
		}
	}
	if ds.Spec.RevisionHistoryLimit == nil {
		ds.Spec.RevisionHistoryLimit = new(int32(10))
	}
	if ds.Spec.Template.Spec.RestartPolicy == "" {
		ds.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	}
}

// templateHash names a pod template's revision, as the controller's
// ControllerRevision hash does (pkg/controller/history: a hash of the
// template, rendered as a short string).
func templateHash(t *corev1.PodTemplateSpec) string {
	b, _ := json.Marshal(t)
	h := fnv.New32a()
	_, _ = h.Write(b)
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// daemonSetPods returns the pods a DaemonSet controls, by node.
func (st *state) daemonSetPods(ds *appsv1.DaemonSet) map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, p := range st.sortedPods() {
		if ref := controllerOf(p); p.Namespace == ds.Namespace && ref != nil && ref.Kind == kindDaemonSet && ref.UID == ds.UID {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
		}
	}
	return out
}

// runDaemonSets plays the DaemonSet controller
// (pkg/controller/daemon/daemon_controller.go, update.go) for the
// DaemonSet objects of the API: one pod on every node whose taints its
// template tolerates; a failed pod is deleted to be created again; on a
// template change, the RollingUpdate strategy deletes old pods while no
// more than maxUnavailable nodes lack an available (Ready) pod, and
// creates the new one once the old is gone; the status counts what is
// scheduled, ready and updated. Pods of a DaemonSet that is gone are
// removed, as the garbage collector does.
func (st *state) runDaemonSets() bool {
	changed := false
	live := map[string]bool{}
	for _, k := range sortedKeys(st.objs[daemonSetsResource]) {
		ds := st.objs[daemonSetsResource][k].(*appsv1.DaemonSet)
		live[string(ds.UID)] = true
		if st.syncDaemonSet(ds) {
			changed = true
		}
	}
	for _, p := range st.sortedPods() {
		ref := controllerOf(p)
		if ref == nil || ref.Kind != kindDaemonSet || live[string(ref.UID)] || p.DeletionTimestamp != nil {
			continue
		}
		if st.owners[ownerKey(p.Namespace, ref.Kind, ref.Name)] != nil {
			continue // a DaemonSet simulated from its pods (AddPod)
		}
		st.deletePod(p, nil)
		changed = true
	}
	return changed
}

func (st *state) syncDaemonSet(ds *appsv1.DaemonSet) bool {
	changed := false
	hash := templateHash(&ds.Spec.Template)
	tmpl := &corev1.Pod{Spec: *ds.Spec.Template.Spec.DeepCopy()}
	addDaemonTolerations(tmpl)
	byNode := st.daemonSetPods(ds)

	var nodes []*corev1.Node
	for _, name := range sortedKeys(st.objs[nodesResource]) {
		n := st.objs[nodesResource][name].(*corev1.Node)
		if toleratesAll(tmpl, n.Spec.Taints) {
			nodes = append(nodes, n)
		}
	}

	maxUnavailable := 1
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		if v, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, len(nodes), true); err == nil && v > 0 {
			maxUnavailable = v
		}
	}
	rolling := ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType

	var desired, current, ready, updated, available int32
	unavailable := 0
	var old []*corev1.Pod
	for _, n := range nodes {
		desired++
		var live []*corev1.Pod
		for _, p := range byNode[n.Name] {
			if p.Status.Phase == corev1.PodFailed && p.DeletionTimestamp == nil {
				st.deletePod(p, nil)
				changed = true
			}
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
				live = append(live, p)
			}
		}
		if len(live) == 0 {
			// podsShouldBeOnNode: no pod that is not terminating, so one
			// is created.
			unavailable++
			st.createDaemonPod(ds, n.Name, hash)
			changed = true
			continue
		}
		p := live[0]
		current++
		if isPodReady(p) {
			ready++
			available++
		} else {
			unavailable++
		}
		if p.Labels[labelRevisionHash] == hash {
			updated++
		} else {
			old = append(old, p)
		}
	}

	if rolling {
		// Old pods that are not available go first, then available ones
		// while the budget allows.
		for _, p := range old {
			if !isPodReady(p) {
				st.deletePod(p, nil)
				changed = true
			}
		}
		for _, p := range old {
			if isPodReady(p) && unavailable < maxUnavailable {
				st.deletePod(p, nil)
				unavailable++
				changed = true
			}
		}
	}

	status := appsv1.DaemonSetStatus{
		CurrentNumberScheduled: current, DesiredNumberScheduled: desired, NumberReady: ready,
		ObservedGeneration: ds.Generation, UpdatedNumberScheduled: updated,
		NumberAvailable: available, NumberUnavailable: desired - available,
		CollisionCount: ds.Status.CollisionCount, Conditions: ds.Status.Conditions,
	}
	if !apiequality.Semantic.DeepEqual(status, ds.Status) {
		ds.Status = status
		st.store(daemonSetsResource, ds)
		changed = true
	}
	return changed
}

// addDaemonTolerations adds the controller's own tolerations
// (pkg/controller/daemon/util AddOrUpdateDaemonPodTolerations): the
// not-ready and unreachable NoExecute taints, the disk, memory and PID
// pressure and unschedulable NoSchedule taints, and for a host-network
// pod the network-unavailable one.
func addDaemonTolerations(p *corev1.Pod) {
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	}
	for _, key := range []string{corev1.TaintNodeDiskPressure, corev1.TaintNodeMemoryPressure, corev1.TaintNodePIDPressure, corev1.TaintNodeUnschedulable} {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	if p.Spec.HostNetwork {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
}

// createDaemonPod creates a DaemonSet's pod for a node from its template,
// with the controller's labels and tolerations.
func (st *state) createDaemonPod(ds *appsv1.DaemonSet, node, hash string) {
	t := ds.Spec.Template.DeepCopy()
	p := &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	p.Name = ds.Name + "-" + randomSuffix()
	p.Namespace = ds.Namespace
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[labelRevisionHash] = hash
	p.Labels[labelTemplateGeneration] = strconv.FormatInt(ds.Generation, 10)
	p.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: kindDaemonSet, Name: ds.Name, UID: ds.UID,
		Controller: new(true), BlockOwnerDeletion: new(true),
	}}
	addDaemonTolerations(p)
	p.Spec.NodeName = node
	defaultPod(p)
	admitPod(p)
	p.UID = uuid.NewUUID()
	p.CreationTimestamp = st.metaNow()
	p.Generation = 1
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort}
	st.store(podsResource, p)
}

// EnsureDaemonSet creates ds unless a DaemonSet of its namespace and name
// exists, and reports whether it did: an existing one is left as it is, as
// Talos's ManifestApplyController leaves the bootstrap manifests it finds
// in the cluster. The namespace is created if missing.
func (s *Server) EnsureDaemonSet(ds *appsv1.DaemonSet) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if _, err := st.lookup(daemonSetsResource, ds.Namespace, ds.Name); err == nil {
		return false, nil
	}
	if _, err := st.lookup(namespacesResource, "", ds.Namespace); err != nil {
		if _, err := st.create(namespacesResource, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ds.Namespace}}); err != nil {
			return false, fmt.Errorf("daemonset: creating namespace %q: %w", ds.Namespace, err)
		}
	}
	if _, err := st.create(daemonSetsResource, ds.Namespace, ds.DeepCopy()); err != nil {
		return false, fmt.Errorf("daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	return true, nil
}

// DaemonSet returns a DaemonSet object, if there is one.
func (s *Server) DaemonSet(namespace, name string) (*appsv1.DaemonSet, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, err := s.st.lookup(daemonSetsResource, namespace, name)
	if err != nil {
		return nil, false
	}
	return obj.(*appsv1.DaemonSet).DeepCopy(), true
}
