package kube

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Node roles, as Talos names machine types.
const (
	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

// Label and taint keys the emulated kubelets register nodes with.
const (
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
	pauseImage        = "registry.k8s.io/pause:3.10"
)

// Node is a machine whose kubelet registers with the API.
type Node struct {
	// Name is the node name (the machine's hostname).
	Name string
	// Addresses are the node's internal IP addresses.
	Addresses []netip.Addr
	// Role is RoleControlPlane or RoleWorker; a control plane carries the
	// control-plane role label and a NoSchedule taint, as Talos configures
	// it by default.
	Role string
	// Labels are added to the kubelet's own labels.
	Labels map[string]string
	// KubeletVersion is the kubelet's version; empty means the server's.
	KubeletVersion string
	// Annotations are set on the Node (Talos's node annotations), over
	// what it has.
	Annotations map[string]string
}

// Pod is a workload pod placed by AddPod.
type Pod struct {
	// Namespace defaults to "default"; it is created if missing.
	Namespace string
	// Name defaults to the owner's name (or "pod") and a random suffix.
	Name string
	// Node binds the pod to a node; empty lets the emulated scheduler pick
	// a Ready, schedulable node whose taints the pod tolerates.
	Node string
	// Labels are the pod's labels, which disruption budgets select on.
	Labels map[string]string
	// OwnerKind and OwnerName name the pod's controller: "ReplicaSet" pods
	// are replaced on another node when they are evicted or deleted,
	// "StatefulSet" pods are recreated under their own name once gone,
	// "DaemonSet" pods are recreated on their node (and tolerate every
	// taint). Empty means a bare pod, which nothing recreates.
	OwnerKind, OwnerName string
	// NotReady makes the pod run without ever passing its readiness probe.
	NotReady bool
	// Tolerations are added to the pod's spec.
	Tolerations []corev1.Toleration
}

// AddNode registers a node as its kubelet would: NotReady (with the
// not-ready taint) at first, Ready after Options.ReadyDelay. Adding a node
// that exists registers it again, as a rebooted machine's kubelet does.
func (s *Server) AddNode(n Node) error {
	if n.Name == "" {
		return errors.New("adding a node: no name")
	}
	if n.Role != RoleControlPlane && n.Role != RoleWorker {
		return fmt.Errorf("adding node %q: role %q is neither %q nor %q", n.Name, n.Role, RoleControlPlane, RoleWorker)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return fmt.Errorf("adding node %q: the server is closed", n.Name)
	}
	st := s.st
	now := st.metaNow()
	version := n.KubeletVersion
	if version == "" {
		version = s.version
	}
	lbls := map[string]string{
		"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
		corev1.LabelArchStable: "amd64", corev1.LabelOSStable: "linux", corev1.LabelHostname: n.Name,
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
	if old := st.node(n.Name); old != nil {
		node = old.DeepCopy()
	} else {
		node.UID = uuid.NewUUID()
		node.CreationTimestamp = now
		node.Annotations = map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}
	}
	var taints []corev1.Taint
	if n.Role == RoleControlPlane {
		lbls[LabelControlPlane] = ""
		taints = append(taints, corev1.Taint{Key: LabelControlPlane, Effect: corev1.TaintEffectNoSchedule})
	}
	for k, v := range n.Labels {
		lbls[k] = v
	}
	if old := st.node(n.Name); old != nil {
		// A kubelet registering again finds its Node: it updates its
		// default labels and leaves the rest, taints included, as they
		// are (kubelet_node_status.go, tryRegisterWithAPIServer); the node
		// lifecycle controller's readiness taints follow the new status.
		for k, v := range old.Labels {
			if _, ok := lbls[k]; !ok {
				lbls[k] = v
			}
		}
		taints = nil
		for _, t := range old.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
				taints = append(taints, t)
			}
		}
	}
	node.Labels = lbls
	for k, v := range n.Annotations {
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[k] = v
	}
	node.Spec.Taints = append(taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now})
	node.Status.Addresses = nil
	for _, a := range n.Addresses {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.String()})
	}
	node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name})
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              apiresource.MustParse("4"),
		corev1.ResourceMemory:           apiresource.MustParse("8Gi"),
		corev1.ResourceEphemeralStorage: apiresource.MustParse("40Gi"),
		corev1.ResourcePods:             apiresource.MustParse("110"),
	}
	node.Status.Capacity, node.Status.Allocatable = capacity, capacity.DeepCopy()
	node.Status.NodeInfo = corev1.NodeSystemInfo{
		MachineID: string(node.UID), SystemUUID: string(node.UID), BootID: string(uuid.NewUUID()),
		KernelVersion: "6.12.0-talos", OSImage: "Talos", ContainerRuntimeVersion: "containerd://2.1.0",
		KubeletVersion: version, OperatingSystem: "linux", Architecture: "amd64",
	}
	node.Status.Conditions = []corev1.NodeCondition{
		nodeCondition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", now),
		nodeCondition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", now),
		nodeCondition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available", now),
		nodeCondition(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady",
			"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized", now),
	}
	st.kubelets[n.Name] = true
	delete(st.stopped, n.Name)
	if t := s.lost[n.Name]; t != nil {
		t.Stop()
		delete(s.lost, n.Name)
	}
	st.store(nodesResource, node)
	st.reconcile()
	s.scheduleReady(n.Name)
	return nil
}

func nodeCondition(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string, now metav1.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
}

// scheduleReady arms the timer that turns a new node Ready. s.mu is held.
func (s *Server) scheduleReady(name string) {
	if t := s.timers[name]; t != nil {
		t.Stop()
	}
	fire := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.timers, name)
		if s.closing || !s.st.kubelets[name] || s.st.stopped[name] {
			return
		}
		s.setReady(name, true)
	}
	if s.opts.ReadyDelay <= 0 {
		s.setReady(name, true)
		return
	}
	s.timers[name] = time.AfterFunc(s.opts.ReadyDelay, fire)
}

// setReady sets a node's Ready condition and the matching taints, and lets
// the world react. Ready is what the kubelet posts; not ready is what the
// node lifecycle controller of kube-controller-manager writes when the
// kubelet has stopped posting (tryUpdateNodeHealth): Ready and the
// pressure conditions turn Unknown with reason NodeStatusUnknown, and the
// node is tainted unreachable (NoSchedule by the tainting pass, NoExecute
// by taint-based eviction). s.mu is held.
func (s *Server) setReady(name string, ready bool) {
	st := s.st
	n := st.node(name)
	if n == nil {
		return
	}
	n = n.DeepCopy()
	now := st.metaNow()
	taints := withoutReadinessTaints(n.Spec.Taints)
	if ready {
		cond := nodeCondition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status", now)
		for i := range n.Status.Conditions {
			if c := &n.Status.Conditions[i]; c.Type == corev1.NodeReady {
				if c.Status == cond.Status {
					cond.LastTransitionTime = c.LastTransitionTime
				}
				*c = cond
			}
		}
		for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
			for i := range n.Status.Conditions {
				if c := &n.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionUnknown {
					*c = kubeletPressureCondition(t, now)
				}
			}
		}
	} else {
		for i := range n.Status.Conditions {
			c := &n.Status.Conditions[i]
			switch c.Type {
			case corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure:
				if c.Status != corev1.ConditionUnknown {
					c.Status, c.Reason, c.Message = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
					c.LastTransitionTime = now
				}
			}
		}
		taints = append(taints,
			corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now},
			corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now})
	}
	n.Spec.Taints = taints
	st.store(nodesResource, n)
	st.reconcile()
}

// kubeletPressureCondition is a pressure condition as a healthy kubelet
// posts it.
func kubeletPressureCondition(t corev1.NodeConditionType, now metav1.Time) corev1.NodeCondition {
	switch t {
	case corev1.NodeMemoryPressure:
		return nodeCondition(t, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", now)
	case corev1.NodeDiskPressure:
		return nodeCondition(t, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", now)
	default:
		return nodeCondition(t, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available", now)
	}
}

// withoutReadinessTaints returns taints without the not-ready and
// unreachable taints the node lifecycle controller manages.
func withoutReadinessTaints(taints []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
			out = append(out, t)
		}
	}
	return out
}

// postShuttingDown is the node status a kubelet posts once its shutdown
// manager has seen the machine's shutdown: Ready False with reason
// KubeletNotReady and the message "node is shutting down", which the node
// lifecycle controller answers with the not-ready taints. s.mu is held.
func (s *Server) postShuttingDown(name string) {
	st := s.st
	n := st.node(name)
	if n == nil {
		return
	}
	n = n.DeepCopy()
	now := st.metaNow()
	taints := withoutReadinessTaints(n.Spec.Taints)
	n.Spec.Taints = append(taints,
		corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now},
		corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now})
	for i := range n.Status.Conditions {
		if c := &n.Status.Conditions[i]; c.Type == corev1.NodeReady {
			cond := nodeCondition(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady", "node is shutting down", now)
			if c.Status == cond.Status {
				cond.LastTransitionTime = c.LastTransitionTime
			}
			*c = cond
		}
	}
	st.store(nodesResource, n)
}

// SetNodeReady turns a node Ready (its kubelet posts status again) or not
// (at once, as the node lifecycle controller does once the kubelet has
// stopped posting for the grace period: the Ready condition turns Unknown,
// the node is tainted unreachable, its pods turn NotReady, and pods deleted
// there stay Terminating). It cancels a pending ReadyDelay. StopKubelet is
// the kubelet stopping, with the grace period.
func (s *Server) SetNodeReady(name string, ready bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.node(name) == nil {
		return fmt.Errorf("setting node %q ready: %w", name, apierrors.NewNotFound(nodesResource.groupResource(), name))
	}
	if t := s.timers[name]; t != nil {
		t.Stop()
		delete(s.timers, name)
	}
	s.setReady(name, ready)
	return nil
}

// StopKubelet stops the simulated kubelet of a node added with AddNode, as
// when its machine goes down; AddNode registers it again when the machine
// is back. With shutdown, the kubelet first runs its graceful node
// shutdown, as it does when the machine announces the shutdown through
// logind (Talos does so before it stops the kubelet when it reboots, shuts
// down, upgrades or resets a machine): it posts the node NotReady ("node is
// shutting down") and terminates every pod it runs, which turn Failed.
// Without shutdown (power cut, crash, deleted machine) the node's status
// stays as the kubelet last posted it. Either way nothing runs, starts or
// finishes terminating on the node any more, and after
// Options.NodeMonitorGracePeriod the node lifecycle controller turns the
// node's conditions Unknown, taints it unreachable and marks its pods
// NotReady. Stopping a stopped kubelet does nothing.
func (s *Server) StopKubelet(name string, shutdown bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if st.node(name) == nil || !st.kubelets[name] {
		return fmt.Errorf("stopping the kubelet of node %q: %w", name, apierrors.NewNotFound(nodesResource.groupResource(), name))
	}
	if st.stopped[name] {
		return nil
	}
	if t := s.timers[name]; t != nil {
		t.Stop()
		delete(s.timers, name)
	}
	if shutdown {
		s.postShuttingDown(name)
		st.shutdownPods(name)
	}
	st.stopped[name] = true
	st.reconcile()
	if s.closing {
		return nil
	}
	grace := s.opts.NodeMonitorGracePeriod
	if grace <= 0 {
		s.setReady(name, false)
		return nil
	}
	s.lost[name] = time.AfterFunc(grace, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.lost, name)
		if s.closing || !s.st.stopped[name] {
			return
		}
		s.setReady(name, false)
	})
	return nil
}

// KubeletRunning reports whether the simulated kubelet of a node runs: it
// was added with AddNode and not stopped since.
func (s *Server) KubeletRunning(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.kubelets[name] && !s.st.stopped[name] && s.st.node(name) != nil
}

// SetKubeletVersion changes the kubelet version a node reports, as a
// kubelet upgrade does.
func (s *Server) SetKubeletVersion(name, version string) error {
	if _, _, err := parseVersion(version); err != nil {
		return fmt.Errorf("setting the kubelet version of node %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.st.node(name)
	if n == nil {
		return fmt.Errorf("setting the kubelet version of node %q: %w", name, apierrors.NewNotFound(nodesResource.groupResource(), name))
	}
	n = n.DeepCopy()
	n.Status.NodeInfo.KubeletVersion = version
	s.st.store(nodesResource, n)
	return nil
}

// RemoveNode deletes a node object, as `kubectl delete node` does; its pods
// are garbage-collected and their controllers replace them elsewhere. A
// machine that merely stops is SetNodeReady(name, false) instead.
func (s *Server) RemoveNode(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.timers[name]; t != nil {
		t.Stop()
		delete(s.timers, name)
	}
	if t := s.lost[name]; t != nil {
		t.Stop()
		delete(s.lost, name)
	}
	if _, err := s.st.remove(nodesResource, "", name, &metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("removing node %q: %w", name, err)
	}
	return nil
}

// AddPod places a running workload pod and returns its name. A pod bound
// to a Ready node with a kubelet runs at once; otherwise it is Pending until
// its node is Ready or the scheduler finds it one.
func (s *Server) AddPod(p Pod) (string, error) {
	ns := p.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	if (p.OwnerKind == "") != (p.OwnerName == "") {
		return "", errors.New("adding a pod: OwnerKind and OwnerName go together")
	}
	switch p.OwnerKind {
	case "", kindReplicaSet, kindStatefulSet, kindDaemonSet:
	default:
		return "", fmt.Errorf("adding a pod: owner kind %q is not simulated", p.OwnerKind)
	}
	if p.OwnerKind == kindDaemonSet && p.Node == "" {
		return "", errors.New("adding a pod: a DaemonSet pod needs a node")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if p.Node != "" && st.node(p.Node) == nil {
		return "", fmt.Errorf("adding a pod: %w", apierrors.NewNotFound(nodesResource.groupResource(), p.Node))
	}
	if _, err := st.lookup(namespacesResource, "", ns); err != nil {
		if _, err := st.create(namespacesResource, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return "", fmt.Errorf("adding a pod: creating namespace %q: %w", ns, err)
		}
	}
	name := p.Name
	if name == "" {
		prefix := p.OwnerName
		if prefix == "" {
			prefix = "pod"
		}
		name = prefix + "-" + randomSuffix()
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			NodeName:    p.Node,
			Containers:  []corev1.Container{{Name: "app", Image: pauseImage}},
			Tolerations: append([]corev1.Toleration(nil), p.Tolerations...),
		},
	}
	for k, v := range p.Labels {
		pod.Labels[k] = v
	}
	if p.OwnerKind != "" {
		uid := uuid.NewUUID()
		if o := st.owners[ownerKey(ns, p.OwnerKind, p.OwnerName)]; o != nil {
			uid = o.uid
		}
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: p.OwnerKind, Name: p.OwnerName, UID: uid,
			Controller: new(true), BlockOwnerDeletion: new(true),
		}}
	}
	if p.OwnerKind == kindDaemonSet {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
	}
	if p.NotReady {
		st.unready[objKey(ns, name)] = true
	}
	if _, err := st.create(podsResource, ns, pod); err != nil {
		delete(st.unready, objKey(ns, name))
		return "", fmt.Errorf("adding pod %s/%s: %w", ns, name, err)
	}
	return name, nil
}

// Nodes returns the node objects, by name.
func (s *Server) Nodes() []corev1.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.list(nodesResource, "", labels.Everything(), fields.Everything()).(*corev1.NodeList).Items
}

// Pods returns the pod objects of every namespace, by namespace and name.
func (s *Server) Pods() []corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.list(podsResource, "", labels.Everything(), fields.Everything()).(*corev1.PodList).Items
}

// StaticPod is a static pod the kubelet of a node runs from a manifest, as
// Talos renders the control-plane components: its mirror pod
// "<Component>-<node>" in kube-system carries the labels tier=control-plane
// and k8s-app=<Component> and the annotation talos.dev/config-version.
type StaticPod struct {
	Component     string
	Image         string
	ConfigVersion string
}

// Annotations and labels of Talos's control-plane static pods
// (pkg/machinery/constants, controllers/k8s/control_plane_static_pod.go).
const (
	AnnotationStaticPodConfigVersion = "talos.dev/config-version"
	annotationConfigMirror           = "kubernetes.io/config.mirror"
	annotationConfigSource           = "kubernetes.io/config.source"
)

// SetStaticPods makes the mirror pods of a node's static pods match pods:
// a pod whose manifest changed (image or config version) is replaced, as
// the kubelet kills the old static pod and posts a new mirror pod, which
// runs and turns Ready like any pod on a Ready node with a kubelet.
func (s *Server) SetStaticPods(node string, pods []StaticPod) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	n := st.node(node)
	if n == nil {
		return fmt.Errorf("static pods of node %q: %w", node, apierrors.NewNotFound(nodesResource.groupResource(), node))
	}
	const ns = metav1.NamespaceSystem
	if _, err := st.lookup(namespacesResource, "", ns); err != nil {
		if _, err := st.create(namespacesResource, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("static pods: creating namespace %q: %w", ns, err)
		}
	}
	for _, sp := range pods {
		name := sp.Component + "-" + node
		if obj, err := st.lookup(podsResource, ns, name); err == nil {
			old := obj.(*corev1.Pod)
			if old.Annotations[AnnotationStaticPodConfigVersion] == sp.ConfigVersion && len(old.Spec.Containers) == 1 && old.Spec.Containers[0].Image == sp.Image && old.DeletionTimestamp == nil && old.Status.Phase != corev1.PodFailed {
				continue
			}
			st.deletePod(old, new(int64(0)))
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: ns,
				Labels: map[string]string{"tier": "control-plane", "k8s-app": sp.Component},
				Annotations: map[string]string{
					AnnotationStaticPodConfigVersion: sp.ConfigVersion,
					annotationConfigMirror:           string(uuid.NewUUID()),
					annotationConfigSource:           "file",
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID, Controller: new(true)}},
			},
			Spec: corev1.PodSpec{
				NodeName:          node,
				PriorityClassName: "system-cluster-critical",
				Containers:        []corev1.Container{{Name: sp.Component, Image: sp.Image}},
				Tolerations:       []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			},
		}
		if _, err := st.create(podsResource, ns, pod); err != nil {
			return fmt.Errorf("static pod %s/%s: %w", ns, name, err)
		}
	}
	st.reconcile()
	return nil
}
