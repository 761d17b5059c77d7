package kube

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Controller kinds the emulator simulates.
const (
	kindReplicaSet  = "ReplicaSet"
	kindStatefulSet = "StatefulSet"
	kindDaemonSet   = "DaemonSet"
)

// owner is a simulated workload controller: it keeps a template of its pods
// and recreates them when they go away.
type owner struct {
	kind, namespace, name string
	uid                   types.UID
	template              *corev1.Pod
	replicas              int32           // ReplicaSet
	ordinals              map[string]bool // StatefulSet: pod names
	nodes                 map[string]bool // DaemonSet: nodes it runs on
}

func ownerKey(ns, kind, name string) string { return ns + "/" + kind + "/" + name }

// adopt registers the controller of a newly created pod, if it is one the
// emulator simulates, and unless the pod is the controller's own
// replacement counts the pod towards its scale.
func (st *state) adopt(p *corev1.Pod, replacement bool) {
	ref := controllerOf(p)
	if ref == nil || (ref.Kind != kindReplicaSet && ref.Kind != kindStatefulSet && ref.Kind != kindDaemonSet) {
		return
	}
	if ref.Kind == kindDaemonSet && st.objs[daemonSetsResource][objKey(p.Namespace, ref.Name)] != nil {
		return // the DaemonSet object's controller (runDaemonSets) runs it
	}
	key := ownerKey(p.Namespace, ref.Kind, ref.Name)
	o := st.owners[key]
	if o == nil {
		o = &owner{kind: ref.Kind, namespace: p.Namespace, name: ref.Name, uid: ref.UID,
			ordinals: map[string]bool{}, nodes: map[string]bool{}}
		st.owners[key] = o
	}
	if replacement {
		return
	}
	o.template = p.DeepCopy()
	switch o.kind {
	case kindReplicaSet:
		o.replicas++
	case kindStatefulSet:
		o.ordinals[p.Name] = true
	case kindDaemonSet:
		if p.Spec.NodeName != "" {
			o.nodes[p.Spec.NodeName] = true
		}
	}
}

// reconcile runs the simulated kubelets, controllers and scheduler until
// nothing changes, then brings every disruption budget's status up to date.
func (st *state) reconcile() {
	// A rolling update takes a few rounds a node.
	for range 100 {
		changed := st.runKubelets()
		changed = st.runControllers() || changed
		changed = st.runDaemonSets() || changed
		changed = st.schedule() || changed
		changed = st.finishNamespaces() || changed
		if !changed {
			break
		}
	}
	st.syncDisruptionBudgets()
}

// runKubelets plays the kubelets of the nodes added with AddNode, and the
// node lifecycle controller's marking of their pods: while a node's kubelet
// runs and the node is Ready, pods bound there run and turn Ready and
// terminating pods there are removed; pods on a node that is not Ready
// turn NotReady (MarkPodsNotReady) and stay until it is back. Where the
// kubelet is stopped, nothing is started or removed and pod statuses stay
// as last posted until the node lifecycle controller marks the node
// Unknown.
func (st *state) runKubelets() bool {
	changed := false
	for _, p := range st.sortedPods() {
		n := st.node(p.Spec.NodeName)
		if n == nil || !st.kubelets[n.Name] {
			continue
		}
		running := !st.stopped[n.Name]
		ready := isNodeReady(n)
		key := objKey(p.Namespace, p.Name)
		switch {
		case p.DeletionTimestamp != nil && ready && running:
			delete(st.objs[podsResource], key)
			delete(st.unready, key)
			changed = true
		case p.DeletionTimestamp != nil:
		case ready && running && p.Status.Phase == corev1.PodPending:
			runPod(p, n, !st.unready[key], st.metaNow())
			st.store(podsResource, p)
			changed = true
		case p.Status.Phase == corev1.PodRunning && !ready && isPodReady(p):
			// The node lifecycle controller marks the pods of a node that
			// is not Ready NotReady, kubelet or not.
			setPodReady(p, false, st.metaNow())
			st.store(podsResource, p)
			changed = true
		case p.Status.Phase == corev1.PodRunning && ready && running && isPodReady(p) == st.unready[key]:
			setPodReady(p, !st.unready[key], st.metaNow())
			st.store(podsResource, p)
			changed = true
		}
	}
	return changed
}

// shutdownPods is the kubelet's graceful node shutdown
// (pkg/kubelet/nodeshutdown): every pod the kubelet runs on the node is
// killed and its final status posted, Failed (unless it had succeeded)
// with reason Terminated and a DisruptionTarget condition of reason
// TerminationByKubelet; a pod that was being deleted is then removed.
func (st *state) shutdownPods(node string) {
	now := st.metaNow()
	for _, p := range st.podsOn(node) {
		if p.Status.Phase != corev1.PodRunning && p.DeletionTimestamp == nil {
			continue
		}
		key := objKey(p.Namespace, p.Name)
		if p.DeletionTimestamp != nil {
			delete(st.objs[podsResource], key)
			delete(st.unready, key)
			continue
		}
		p = p.DeepCopy()
		if p.Status.Phase != corev1.PodSucceeded {
			p.Status.Phase = corev1.PodFailed
		}
		p.Status.Reason = nodeShutdownReason
		p.Status.Message = nodeShutdownMessage
		setPodReady(p, false, now)
		setPodCondition(p, corev1.DisruptionTarget, corev1.ConditionTrue, now)
		for i := range p.Status.Conditions {
			if c := &p.Status.Conditions[i]; c.Type == corev1.DisruptionTarget {
				c.Reason, c.Message = corev1.PodReasonTerminationByKubelet, nodeShutdownMessage
			}
		}
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			started := now
			if cs.State.Running != nil {
				started = cs.State.Running.StartedAt
			}
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: "Error", StartedAt: started, FinishedAt: now,
			}}
			cs.Started = new(false)
		}
		st.store(podsResource, p)
	}
}

// The kubelet's words for a pod its graceful node shutdown terminated
// (pkg/kubelet/nodeshutdown/nodeshutdown_manager.go).
const (
	nodeShutdownReason  = "Terminated"
	nodeShutdownMessage = "Pod was terminated in response to imminent node shutdown."
)

// runPod makes a pod Running on node n, Ready if ready.
func runPod(p *corev1.Pod, n *corev1.Node, ready bool, now metav1.Time) {
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP = nodeIP(n)
	if p.Status.HostIP != "" {
		p.Status.HostIPs = []corev1.HostIP{{IP: p.Status.HostIP}}
	}
	p.Status.StartTime = &now
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	setPodCondition(p, corev1.PodScheduled, corev1.ConditionTrue, now)
	setPodCondition(p, corev1.PodReadyToStartContainers, corev1.ConditionTrue, now)
	setPodCondition(p, corev1.PodInitialized, corev1.ConditionTrue, now)
	setPodReady(p, ready, now)
}

func setPodReady(p *corev1.Pod, ready bool, now metav1.Time) {
	s := corev1.ConditionFalse
	if ready {
		s = corev1.ConditionTrue
	}
	setPodCondition(p, corev1.ContainersReady, s, now)
	setPodCondition(p, corev1.PodReady, s, now)
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = ready
	}
}

func setPodCondition(p *corev1.Pod, t corev1.PodConditionType, s corev1.ConditionStatus, now metav1.Time) {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == t {
			if c.Status != s {
				c.Status, c.LastTransitionTime = s, now
			}
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now})
}

func nodeIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// runControllers plays the ReplicaSet, StatefulSet and DaemonSet
// controllers for the simulated owners.
func (st *state) runControllers() bool {
	keys := make([]string, 0, len(st.owners))
	for k := range st.owners {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	changed := false
	for _, k := range keys {
		o := st.owners[k]
		if o.template == nil {
			continue
		}
		var active, all []*corev1.Pod
		for _, p := range st.sortedPods() {
			if ref := controllerOf(p); p.Namespace == o.namespace && ref != nil && ref.Kind == o.kind && ref.Name == o.name {
				if o.kind != kindReplicaSet && p.Status.Phase == corev1.PodFailed && p.DeletionTimestamp == nil {
					// The StatefulSet and DaemonSet controllers delete a
					// failed pod, to create it again.
					st.deletePod(p, nil)
					changed = true
					if st.objs[podsResource][objKey(p.Namespace, p.Name)] == nil {
						continue
					}
				}
				all = append(all, p)
				// controller.FilterActivePods: neither terminal nor
				// being deleted.
				if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
					active = append(active, p)
				}
			}
		}
		switch o.kind {
		case kindReplicaSet:
			// A terminating pod no longer counts: the replacement starts at once.
			for i := int32(len(active)); i < o.replicas; i++ {
				st.createReplacement(o, o.name+"-"+randomSuffix(), "")
				changed = true
			}
		case kindStatefulSet:
			// A StatefulSet pod comes back under its own name once it is gone.
			present := map[string]bool{}
			for _, p := range all {
				present[p.Name] = true
			}
			for _, name := range sortedKeys(o.ordinals) {
				if !present[name] {
					st.createReplacement(o, name, "")
					changed = true
				}
			}
		case kindDaemonSet:
			onNode := map[string]bool{}
			for _, p := range all {
				onNode[p.Spec.NodeName] = true
			}
			for _, node := range sortedKeys(o.nodes) {
				if st.node(node) == nil {
					delete(o.nodes, node)
					continue
				}
				if !onNode[node] {
					st.createReplacement(o, o.name+"-"+randomSuffix(), node)
					changed = true
				}
			}
		}
	}
	return changed
}

func (st *state) createReplacement(o *owner, name, node string) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: o.namespace, Labels: map[string]string{},
			Annotations:     o.template.Annotations,
			OwnerReferences: o.template.OwnerReferences,
		},
		Spec: *o.template.Spec.DeepCopy(),
	}
	for k, v := range o.template.Labels {
		p.Labels[k] = v
	}
	p.Spec.NodeName = node
	st.adopt(p, true)
	p.UID = uuid.NewUUID()
	p.CreationTimestamp = st.metaNow()
	p.Generation = 1
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort}
	st.store(podsResource, p)
}

// schedule binds pending unbound pods to the nodes with a simulated kubelet
// that are Ready, schedulable and whose taints they tolerate, preferring
// the node with the fewest pods.
func (st *state) schedule() bool {
	changed := false
	for _, p := range st.sortedPods() {
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending {
			continue
		}
		best, bestCount := "", 0
		for _, name := range sortedKeys(st.kubelets) {
			n := st.node(name)
			if n == nil || !isNodeReady(n) || n.Spec.Unschedulable || !toleratesAll(p, n.Spec.Taints) {
				continue
			}
			if c := len(st.podsOn(name)); best == "" || c < bestCount {
				best, bestCount = name, c
			}
		}
		if best == "" {
			continue
		}
		p.Spec.NodeName = best
		setPodCondition(p, corev1.PodScheduled, corev1.ConditionTrue, st.metaNow())
		st.store(podsResource, p)
		changed = true
	}
	return changed
}

// toleratesAll reports whether the pod tolerates every NoSchedule and
// NoExecute taint.
func toleratesAll(p *corev1.Pod, taints []corev1.Taint) bool {
	for _, t := range taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		ok := false
		for _, tol := range p.Spec.Tolerations {
			if tolerates(tol, t) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func tolerates(tol corev1.Toleration, t corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return true
	case corev1.TolerationOpEqual, "":
		return tol.Key != "" && tol.Value == t.Value
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// syncDisruptionBudgets plays the disruption controller: every budget's
// status is recomputed from the pods it selects, and stored with a new
// resourceVersion when it changed.
func (st *state) syncDisruptionBudgets() {
	for _, k := range sortedKeys(st.objs[pdbsResource]) {
		pdb := st.objs[pdbsResource][k].(*policyv1.PodDisruptionBudget)
		next := pdb.DeepCopy()
		st.computeBudget(next)
		if !apiequality.Semantic.DeepEqual(next.Status, pdb.Status) {
			st.store(pdbsResource, next)
		}
	}
}

// computeBudget sets a budget's status the way the disruption controller
// computes it: minAvailable as an integer counts the selected pods;
// maxUnavailable and percentages count the scale of the pods' controllers.
func (st *state) computeBudget(pdb *policyv1.PodDisruptionBudget) {
	pods := st.budgetPods(pdb)
	expected, desired, err := st.expectedPods(pdb, pods)
	if err != nil {
		// The controller's fail-safe: no disruptions, and the reason why.
		pdb.Status.DisruptionsAllowed = 0
		pdb.Status.ObservedGeneration = pdb.Generation
		meta.SetStatusCondition(&pdb.Status.Conditions, metav1.Condition{
			Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
			Reason: policyv1.SyncFailedReason, Message: err.Error(), ObservedGeneration: pdb.Generation,
		})
		return
	}
	healthy := int32(0)
	for _, p := range pods {
		if p.DeletionTimestamp == nil && isPodReady(p) {
			healthy++
		}
	}
	allowed := healthy - desired
	if expected <= 0 || allowed <= 0 {
		allowed = 0
	}
	pdb.Status.CurrentHealthy = healthy
	pdb.Status.DesiredHealthy = desired
	pdb.Status.ExpectedPods = expected
	pdb.Status.DisruptionsAllowed = allowed
	pdb.Status.DisruptedPods = nil
	pdb.Status.ObservedGeneration = pdb.Generation
	cond := metav1.Condition{
		Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
		Reason: policyv1.InsufficientPodsReason, ObservedGeneration: pdb.Generation,
	}
	if allowed > 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, policyv1.SufficientPodsReason
	}
	if pdb.Status.Conditions == nil {
		pdb.Status.Conditions = []metav1.Condition{}
	}
	meta.SetStatusCondition(&pdb.Status.Conditions, cond)
}

// budgetPods returns the pods a budget selects; a nil selector selects none.
func (st *state) budgetPods(pdb *policyv1.PodDisruptionBudget) []*corev1.Pod {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || pdb.Spec.Selector == nil {
		return nil
	}
	var out []*corev1.Pod
	for _, p := range st.sortedPods() {
		if p.Namespace == pdb.Namespace && sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out
}

func (st *state) expectedPods(pdb *policyv1.PodDisruptionBudget, pods []*corev1.Pod) (expected, desired int32, err error) {
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		if expected, err = st.expectedScale(pods); err != nil {
			return 0, 0, err
		}
		maxUnavailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, int(expected), true)
		if err != nil {
			return 0, 0, err
		}
		return expected, max(expected-int32(maxUnavailable), 0), nil
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int:
		return int32(len(pods)), pdb.Spec.MinAvailable.IntVal, nil
	case pdb.Spec.MinAvailable != nil:
		if expected, err = st.expectedScale(pods); err != nil {
			return 0, 0, err
		}
		minAvailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(expected), true)
		if err != nil {
			return 0, 0, err
		}
		return expected, int32(minAvailable), nil
	}
	return 0, 0, nil
}

// expectedScale adds up the scale of the controllers of the pods; pods
// without a controller are left out, as the disruption controller does.
func (st *state) expectedScale(pods []*corev1.Pod) (int32, error) {
	seen := map[types.UID]bool{}
	total := int32(0)
	for _, p := range pods {
		ref := controllerOf(p)
		if ref == nil {
			continue
		}
		o := st.owners[ownerKey(p.Namespace, ref.Kind, ref.Name)]
		if o == nil || o.kind == kindDaemonSet {
			return 0, fmt.Errorf("found no controllers for pod %q", p.Name)
		}
		if seen[o.uid] {
			continue
		}
		seen[o.uid] = true
		if o.kind == kindReplicaSet {
			total += o.replicas
		} else {
			total += int32(len(o.ordinals))
		}
	}
	return total, nil
}
