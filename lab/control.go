package lab

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/taloscluster/taloscluster/lab/kube"
)

// controlEndpoints documents the control API; GET /lab/v1/ lists it.
var controlEndpoints = map[string]string{
	"GET /lab/v1/world":    "everything below in one answer",
	"GET /lab/v1/vms":      "the Proxmox VMs: id, name, node, pool, power, tags, size, firewall",
	"GET /lab/v1/nodes":    "the simulated Talos nodes: address, hostname, cluster, role, version, mode, held VIPs, talos_version, config_kubernetes_version (kubelet image tag of the config last received), kubelet_version (its Node's nodeInfo)",
	"GET /lab/v1/clusters": "each cluster: bootstrapped, etcd members, Kubernetes version (/version), API (kubernetes_api; kubernetes_api_addresses: every address it answers at now) and nodes, control_plane (per node: kube-apiserver, kube-controller-manager, kube-scheduler image tags of their mirror pods) and kube_proxy (the DaemonSet's image tag)",
	"GET /lab/v1/log":      "the ordered operation log of every emulator",
	"POST /lab/v1/faults":  "inject a fault: JSON {kind, op, n, status, warnings, millis, addr, cluster}; openstack-* faults take op as an operation (compute.server.create), a service (compute or network.*: every operation of it) or *",
}

// ControlHandler serves the lab's control API under /lab/v1/ (see
// controlEndpoints). It is plain JSON over HTTP on a loopback address.
func (l *Lab) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /lab/v1/{$}", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"endpoints": controlEndpoints, "fault_kinds": faultKinds})
	})
	mux.HandleFunc("GET /lab/v1/world", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, l.World()) })
	mux.HandleFunc("GET /lab/v1/vms", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, l.World().VMs) })
	mux.HandleFunc("GET /lab/v1/nodes", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, l.World().Nodes) })
	mux.HandleFunc("GET /lab/v1/clusters", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, l.World().Clusters) })
	mux.HandleFunc("GET /lab/v1/log", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, l.Log()) })
	mux.HandleFunc("POST /lab/v1/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Fault
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&f); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "reading the fault: " + err.Error()})
			return
		}
		if err := l.Inject(f); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"injected": f.Kind})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": fmt.Sprintf("%s %s is not part of the lab control API", r.Method, r.URL.Path)})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WorldView is a snapshot of the lab.
type WorldView struct {
	VMs      []VMView      `json:"vms"`
	Nodes    []NodeView    `json:"nodes"`
	Clusters []ClusterView `json:"clusters"`
}

// VMView is one Proxmox VM.
type VMView struct {
	ID       int      `json:"id"`
	Name     string   `json:"name"`
	Node     string   `json:"node"`
	Pool     string   `json:"pool"`
	Running  bool     `json:"running"`
	Tags     []string `json:"tags"`
	Cores    int      `json:"cores"`
	MemoryMB int      `json:"memory_mb"`
	Firewall bool     `json:"firewall"`
	Rules    int      `json:"firewall_rules"`
}

// NodeView is one simulated Talos node.
type NodeView struct {
	Addr     string `json:"addr"`
	Hostname string `json:"hostname"`
	Cluster  string `json:"cluster"`
	Role     string `json:"role"`
	Version  string `json:"version"`
	Mode     string `json:"mode"`
	Up       bool   `json:"up"`
	// VIPs are the Layer-2 VIPs the node holds now.
	VIPs []string `json:"vips,omitempty"`
	// Talos is the Talos version the node runs (as Version).
	Talos string `json:"talos_version"`
	// ConfigKubernetes is the Kubernetes version of the machine config the
	// node last received (tag of .machine.kubelet.image).
	ConfigKubernetes string `json:"config_kubernetes_version,omitempty"`
	// Kubelet is the kubelet version its Node reports, when registered.
	Kubelet string `json:"kubelet_version,omitempty"`
}

// ClusterView is one cluster's etcd and Kubernetes state.
type ClusterView struct {
	Name         string   `json:"name"`
	Bootstrapped bool     `json:"bootstrapped"`
	EtcdMembers  []string `json:"etcd_members"`
	Kubernetes   string   `json:"kubernetes_version,omitempty"`
	// KubeAPI is the address of the cluster's Kubernetes API: where it
	// answers, the endpoint most of its control planes' configs name first
	// (the last one it answered at while it answers nowhere).
	KubeAPI string `json:"kubernetes_api,omitempty"`
	// KubeAPIs are all the addresses it answers at now (each VIP a control
	// plane holds), KubeAPI first; more than one while a change of VIP
	// rolls through the control planes.
	KubeAPIs  []string       `json:"kubernetes_api_addresses,omitempty"`
	KubeNodes []KubeNodeView `json:"kubernetes_nodes"`
	// ControlPlane is, per control-plane node, the version (image tag) of
	// each control-plane component's mirror pod.
	ControlPlane []ControlPlaneView `json:"control_plane,omitempty"`
	// KubeProxy is the image tag of the kube-proxy DaemonSet's template.
	KubeProxy string `json:"kube_proxy,omitempty"`
}

// ControlPlaneView is the control-plane components one node runs.
type ControlPlaneView struct {
	Node              string `json:"node"`
	APIServer         string `json:"kube_apiserver,omitempty"`
	ControllerManager string `json:"kube_controller_manager,omitempty"`
	Scheduler         string `json:"kube_scheduler,omitempty"`
}

// KubeNodeView is one Kubernetes node.
type KubeNodeView struct {
	Name    string `json:"name"`
	Ready   bool   `json:"ready"`
	Kubelet string `json:"kubelet"`
}

// World returns a snapshot of the lab.
func (l *Lab) World() WorldView {
	v := WorldView{VMs: []VMView{}, Nodes: []NodeView{}, Clusters: []ClusterView{}}
	for _, vm := range l.PVE.VMs() {
		v.VMs = append(v.VMs, VMView{ID: vm.ID, Name: vm.Name, Node: vm.Node, Pool: vm.Pool, Running: vm.Running, Tags: vm.Tags,
			Cores: vm.Cores, MemoryMB: vm.MemoryMB, Firewall: vm.FirewallOptions["enable"] == "1", Rules: len(vm.FirewallRules)})
	}
	kubelets := map[string]string{}
	for _, c := range l.Talos.Clusters() {
		if k, ok := l.Kube(c.Name); ok {
			for _, n := range k.Nodes() {
				kubelets[c.Name+"/"+n.Name] = n.Status.NodeInfo.KubeletVersion
			}
		}
	}
	for _, n := range l.Talos.Nodes() {
		nv := NodeView{Addr: n.Addr.String(), Hostname: n.Hostname, Cluster: n.Cluster, Role: string(n.Role),
			Version: n.Version, Mode: string(n.Mode), Up: n.Up, Talos: n.Version, ConfigKubernetes: n.KubernetesVersion}
		if n.Cluster != "" {
			nv.Kubelet = kubelets[n.Cluster+"/"+n.Hostname]
		}
		for _, vip := range n.VIPs {
			nv.VIPs = append(nv.VIPs, vip.String())
		}
		v.Nodes = append(v.Nodes, nv)
	}
	for _, c := range l.Talos.Clusters() {
		cv := ClusterView{Name: c.Name, Bootstrapped: c.Bootstrapped, EtcdMembers: []string{}, KubeNodes: []KubeNodeView{}}
		for _, m := range c.Members {
			name := m.Hostname
			if m.Learner {
				name += " (learner)"
			}
			cv.EtcdMembers = append(cv.EtcdMembers, name)
		}
		if k, ok := l.Kube(c.Name); ok {
			cv.Kubernetes, cv.KubeAPI = k.Version(), k.URL()
			for _, a := range k.Addrs() {
				cv.KubeAPIs = append(cv.KubeAPIs, "https://"+a.String())
			}
			for _, n := range k.Nodes() {
				ready := false
				for _, cond := range n.Status.Conditions {
					if cond.Type == "Ready" {
						ready = cond.Status == "True"
					}
				}
				cv.KubeNodes = append(cv.KubeNodes, KubeNodeView{Name: n.Name, Ready: ready, Kubelet: n.Status.NodeInfo.KubeletVersion})
			}
			cv.ControlPlane, cv.KubeProxy = controlPlaneViews(k)
		}
		v.Clusters = append(v.Clusters, cv)
	}
	return v
}

// controlPlaneViews reads the versions of the control-plane mirror pods,
// by node, and of the kube-proxy DaemonSet from the cluster's API state.
func controlPlaneViews(k *kube.Server) ([]ControlPlaneView, string) {
	byNode := map[string]*ControlPlaneView{}
	var order []string
	for _, p := range k.Pods() {
		if p.Namespace != "kube-system" || p.DeletionTimestamp != nil || len(p.Spec.Containers) == 0 || p.Annotations[kube.AnnotationStaticPodConfigVersion] == "" {
			continue
		}
		v := byNode[p.Spec.NodeName]
		if v == nil {
			v = &ControlPlaneView{Node: p.Spec.NodeName}
			byNode[p.Spec.NodeName] = v
			order = append(order, p.Spec.NodeName)
		}
		tag := imageTag(p.Spec.Containers[0].Image)
		switch p.Labels["k8s-app"] {
		case "kube-apiserver":
			v.APIServer = tag
		case "kube-controller-manager":
			v.ControllerManager = tag
		case "kube-scheduler":
			v.Scheduler = tag
		}
	}
	slices.Sort(order)
	var out []ControlPlaneView
	for _, n := range order {
		out = append(out, *byNode[n])
	}
	proxy := ""
	if ds, ok := k.DaemonSet("kube-system", "kube-proxy"); ok && len(ds.Spec.Template.Spec.Containers) > 0 {
		proxy = imageTag(ds.Spec.Template.Spec.Containers[0].Image)
	}
	return out, proxy
}

// imageTag is the tag of an image reference (after the last colon that
// follows the last slash), or the whole reference when it has none.
func imageTag(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		return ref[i+1:]
	}
	return ref
}

// LogEntry is one operation of any emulator.
type LogEntry struct {
	Time   time.Time `json:"time"`
	Source string    `json:"source"` // proxmox, openstack, talos, kubernetes, factory, etcd or lab
	Op     string    `json:"op"`
	// Service is, for a Talos call, the gRPC service of Op without its
	// package (MachineService, LifecycleService, ImageService, ...).
	Service string `json:"service,omitempty"`
	Target  string `json:"target,omitempty"`
	Result  string `json:"result"`
}

// Log returns every emulator's operations in time order (a Talos call is
// named by its method, "ApplyConfiguration", "Upgrade", "Pull", with its
// service apart: "MachineService", "LifecycleService", "ImageService"), with the lab's
// own events (Source "lab"; among them the steps of Talos's sequences:
// "reset-cordon", "reset-drain", "kubelet-stopped", "etcd-leave", "wipe",
// with Target the node's hostname and Result "OK" or the step's error) and
// every change of each cluster's etcd membership and of its members' etcd
// running (Source "etcd", Op the talos.EtcdSnapshot event, Target
// "CLUSTER HOSTNAME", Result the membership after it, such as "voters=3
// started=2 learners=0 [a b c] started [a b]").
func (l *Lab) Log() []LogEntry {
	var out []LogEntry
	for _, op := range l.PVE.Log() {
		out = append(out, LogEntry{Time: op.Time, Source: "proxmox", Op: op.Name, Target: op.Method + " " + op.Path, Result: FaultResult(fmt.Sprint(op.Status), op.Fault)})
	}
	for _, op := range l.OpenStack.Log() {
		res := fmt.Sprint(op.Status)
		if op.Status == 0 {
			res = "no answer"
		}
		out = append(out, LogEntry{Time: op.Time, Source: "openstack", Op: op.Name, Target: op.Method + " " + op.Path, Result: FaultResult(res, op.Fault)})
	}
	for _, op := range l.Talos.Log() {
		res := "OK"
		if op.Code != codes.OK {
			res = op.Code.String() + ": " + op.Err
		}
		out = append(out, LogEntry{Time: op.Time, Source: "talos", Op: op.Short(), Service: op.Service(), Target: op.Node.String(), Result: FaultResult(res, op.Fault)})
	}
	for _, op := range l.Factory.Log() {
		out = append(out, LogEntry{Time: op.Time, Source: "factory", Op: op.Op, Target: op.Method + " " + op.Path, Result: fmt.Sprint(op.Status)})
	}
	l.mu.Lock()
	names := make([]string, 0, len(l.kubes))
	for n := range l.kubes {
		names = append(names, n)
	}
	l.mu.Unlock()
	for _, name := range names {
		if k, ok := l.Kube(name); ok {
			for _, op := range k.Log() {
				out = append(out, LogEntry{Time: op.Time, Source: "kubernetes", Op: op.Key(), Target: name + " " + op.Name, Result: FaultResult(fmt.Sprint(op.Code), op.Fault)})
			}
		}
	}
	for _, e := range l.Events() {
		out = append(out, LogEntry{Time: e.Time, Source: "lab", Op: e.What, Target: e.Subject, Result: e.Detail})
	}
	for _, st := range l.Talos.Steps() {
		res := "OK"
		if st.Err != "" {
			res = st.Err
		}
		out = append(out, LogEntry{Time: st.Time, Source: "lab", Op: st.Step, Target: st.Hostname, Result: res})
	}
	for _, c := range l.Talos.Clusters() {
		key := c.ID
		if key == "" {
			key = c.Name
		}
		for _, h := range l.Talos.EtcdHistory(key) {
			out = append(out, LogEntry{Time: h.Time, Source: "etcd", Op: h.Event, Target: c.Name + " " + h.Member,
				Result: fmt.Sprintf("voters=%d started=%d learners=%d %v started %v", len(h.Voters), len(h.StartedVoters), len(h.Learners), h.Voters, h.StartedVoters)})
		}
	}
	slices.SortStableFunc(out, func(a, b LogEntry) int { return a.Time.Compare(b.Time) })
	return out
}

// FaultResult is the Result of a log entry whose answer was the given one
// (a status) unless the fault named kept it from the client: "hang" and
// "reset" mean no answer was sent, "lost-reply" that the answer was made
// and not sent. Other faults (fail, delay) shape an answer that was sent.
func FaultResult(answer, fault string) string {
	switch fault {
	case "hang", "reset":
		return "no answer (" + fault + ")"
	case "lost-reply":
		return answer + " not sent (lost-reply)"
	}
	return answer
}

// Fault is a fault to inject through the control API.
type Fault struct {
	// Kind is one of:
	//
	//	proxmox-fail           the next N calls of Op answer Status
	//	proxmox-task-warnings  the next N tasks of Op end "WARNINGS: Warnings"
	//	proxmox-latency        Op takes Millis longer
	//	proxmox-hang           the next N calls of Op never answer
	//	proxmox-reset          the next N calls of Op get their connection
	//	                       reset, without effect
	//	proxmox-lost-reply     the next N calls of Op take effect (a task
	//	                       starts), then their connection is reset
	//	talos-never-boot       the node at Addr never comes up
	//	talos-never-reboot     the node at Addr accepts every restart and
	//	                       never goes down: an apply that needs a
	//	                       reboot (answers "Applied configuration
	//	                       with a reboot", persists the config, refuses
	//	                       later applies), a Reboot (answered with its
	//	                       actor ID) and the reboot of a legacy Upgrade
	//	talos-reset-fails      the next N resets of Addr fail after their
	//	                       cleanup: the Node stays cordoned and
	//	                       drained, the kubelet stopped, the etcd
	//	                       member in place, the Talos API up
	//	talos-stuck-member     the etcd member of Addr cannot be removed
	//	                       (removals time out), so a graceful reset
	//	                       fails at its etcd leave
	//	talos-fail             the next N calls of method Op on Addr fail
	//	talos-hang             the next N calls of Op on Addr hang until the
	//	                       client gives up
	//	talos-reset            the next N calls of Op on Addr get their
	//	                       connection reset, without effect
	//	talos-lost-reply       the next N calls of Op on Addr take effect,
	//	                       then their connection is reset
	//	kube-fail              the next N requests matching Op answer Status
	//	                       in cluster Cluster
	//	kube-hang              the next N requests matching Op hang
	//	kube-reset             the next N requests matching Op get their
	//	                       connection reset, without effect
	//	kube-lost-reply        the next N requests matching Op take effect,
	//	                       then their connection is reset
	//	openstack-fail         the next N calls of Op answer Status (default
	//	                       500) with the service's error body, without
	//	                       effect
	//	openstack-latency      calls of Op take Millis longer (0 removes it)
	//	openstack-hang         the next N calls of Op never answer, without
	//	                       effect, until the client gives up or the lab
	//	                       closes
	//
	// A reset is a TCP RST: the client sees its connection fail and no
	// answer. Op is a Proxmox operation name (qemu.create, or * for any), a
	// Talos API method (Bootstrap, its log name such as
	// LifecycleService.Upgrade, or a full gRPC method name) or a
	// Kubernetes "VERB RESOURCE" pattern (create pods/eviction, * nodes, or
	// * for any) or an OpenStack operation of the emulator's log
	// (compute.server.create, network.port.create, image.image.upload,
	// identity.token.create), a service meaning every operation of it
	// (compute, network.*; likewise a deeper prefix such as
	// compute.server.*), or * for any.
	Kind     string `json:"kind"`
	Op       string `json:"op,omitempty"`
	N        int    `json:"n,omitempty"`
	Status   int    `json:"status,omitempty"`
	Warnings int    `json:"warnings,omitempty"`
	Millis   int    `json:"millis,omitempty"`
	Addr     string `json:"addr,omitempty"`
	Cluster  string `json:"cluster,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Inject applies a fault.
func (l *Lab) Inject(f Fault) error {
	if f.N <= 0 {
		f.N = 1
	}
	var err error
	switch {
	case strings.HasPrefix(f.Kind, "proxmox-"):
		err = l.injectProxmox(f)
	case strings.HasPrefix(f.Kind, "talos-"):
		err = l.injectTalos(f)
	case strings.HasPrefix(f.Kind, "kube-"):
		err = l.injectKube(f)
	case strings.HasPrefix(f.Kind, "openstack-"):
		err = l.injectOpenStack(f)
	default:
		err = unknownKind(f.Kind)
	}
	if err != nil {
		return err
	}
	l.event("fault", f.Kind, fmt.Sprintf("op=%s n=%d addr=%s cluster=%s", f.Op, f.N, f.Addr, f.Cluster))
	return nil
}

func unknownKind(kind string) error {
	return fmt.Errorf("unknown fault kind %q; kinds: %s", kind, strings.Join(faultKinds, ", "))
}

// needOp refuses a fault without an operation, which would match nothing.
func needOp(f Fault, what string) error {
	if strings.TrimSpace(f.Op) == "" {
		return fmt.Errorf("fault %s needs op, %s", f.Kind, what)
	}
	return nil
}

func (l *Lab) injectProxmox(f Fault) error {
	const what = "a Proxmox operation name such as qemu.create, or * for any"
	switch f.Kind {
	case "proxmox-fail":
		status := f.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		msg := f.Message
		if msg == "" {
			msg = "injected failure"
		}
		l.PVE.Fail(f.Op, f.N, status, msg)
	case "proxmox-task-warnings":
		w := f.Warnings
		if w == 0 {
			w = 1
		}
		l.PVE.TaskWarnings(f.Op, f.N, w)
	case "proxmox-latency":
		l.PVE.SetLatency(f.Op, time.Duration(f.Millis)*time.Millisecond)
	case "proxmox-hang":
		l.PVE.Hang(f.Op, f.N)
	case "proxmox-reset":
		if err := needOp(f, what); err != nil {
			return err
		}
		l.PVE.ResetConn(f.Op, f.N)
	case "proxmox-lost-reply":
		if err := needOp(f, what); err != nil {
			return err
		}
		l.PVE.LoseReply(f.Op, f.N)
	default:
		return unknownKind(f.Kind)
	}
	return nil
}

func (l *Lab) injectTalos(f Fault) error {
	if !slices.Contains(faultKinds, f.Kind) {
		return unknownKind(f.Kind)
	}
	a, err := netip.ParseAddr(f.Addr)
	if err != nil {
		return fmt.Errorf("fault %s needs addr, a node address such as 127.42.0.100", f.Kind)
	}
	switch f.Kind {
	case "talos-never-boot":
		l.Talos.NeverBoot(a)
		return nil
	case "talos-never-reboot":
		l.Talos.NeverReboot(a)
		return nil
	case "talos-reset-fails":
		l.Talos.FailReset(a, f.N)
		return nil
	case "talos-stuck-member":
		l.Talos.StuckEtcdMember(a)
		return nil
	}
	if err := needOp(f, "a Talos API method such as Bootstrap or ApplyConfiguration"); err != nil {
		return err
	}
	switch f.Kind {
	case "talos-fail":
		l.Talos.FailCalls(a, f.Op, f.N, codes.Unavailable)
	case "talos-hang":
		l.Talos.HangCalls(a, f.Op, f.N)
	case "talos-reset":
		l.Talos.ResetCalls(a, f.Op, f.N)
	case "talos-lost-reply":
		l.Talos.LoseReplies(a, f.Op, f.N)
	}
	return nil
}

func (l *Lab) injectKube(f Fault) error {
	if !slices.Contains(faultKinds, f.Kind) {
		return unknownKind(f.Kind)
	}
	if f.Cluster == "" {
		return fmt.Errorf("fault %s needs cluster, the name of a cluster whose Kubernetes API is up", f.Kind)
	}
	k, ok := l.Kube(f.Cluster)
	if !ok {
		return fmt.Errorf("fault %s: cluster %q has no Kubernetes API yet", f.Kind, f.Cluster)
	}
	switch f.Kind {
	case "kube-fail":
		status := f.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		k.Fail(f.Op, f.N, status)
	case "kube-hang":
		k.Hang(f.Op, f.N)
	case "kube-reset", "kube-lost-reply":
		if err := needOp(f, `a "VERB RESOURCE" pattern such as "create pods/eviction", or * for any`); err != nil {
			return err
		}
		if f.Kind == "kube-reset" {
			k.ResetConn(f.Op, f.N)
		} else {
			k.LoseReply(f.Op, f.N)
		}
	}
	return nil
}

var faultKinds = []string{"proxmox-fail", "proxmox-task-warnings", "proxmox-latency", "proxmox-hang",
	"proxmox-reset", "proxmox-lost-reply",
	"talos-never-boot", "talos-never-reboot", "talos-reset-fails", "talos-stuck-member", "talos-fail", "talos-hang", "talos-reset", "talos-lost-reply",
	"kube-fail", "kube-hang", "kube-reset", "kube-lost-reply",
	"openstack-fail", "openstack-latency", "openstack-hang"}
