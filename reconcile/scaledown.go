package reconcile

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// Scale-down operations, each one step of a removal.
type (
	// cordonNode marks a node unschedulable, with the engine's mark and
	// why ("" for a removal).
	cordonNode struct{ hostname, why string }
	// uncordonNode makes a node the engine cordoned schedulable again: it
	// stays in the cluster after all, and Talos never uncordons a node it
	// did not cordon itself.
	uncordonNode struct {
		hostname string
		// bestEffort makes a failure a warning: the end of a rollout.
		bestEffort bool
	}
	// drainNode evicts the node's pods; phase is the phase it reports in
	// ("" for scale-down).
	drainNode struct {
		hostname string
		phase    plan.Phase
	}
	// resetMachine resets a node gracefully through Talos; on a control
	// plane that makes it leave etcd, and a failure is fatal.
	resetMachine struct {
		hostname     string
		controlPlane bool
		// evidence is set for a control plane whose Node is gone (a prior
		// run reset it and its VM delete failed): a reset that fails is
		// then not fatal, and the etcd check that follows decides.
		evidence bool
	}
	// leftEtcd checks, on a surviving member, that the removed control
	// plane is no etcd member any more; with remove, a member that is
	// still listed is removed by its id first (its node cannot leave by
	// itself).
	leftEtcd struct {
		hostname string
		remove   bool
	}
	// etcdSafe is the health gate before a control plane goes: etcd
	// answers from a surviving member; every control plane that stays is
	// a voting member and runs a healthy etcd; no other member is there
	// but those being removed (now or later), and no learner but theirs.
	etcdSafe struct {
		removing string
		stay     []string
		queued   []string
	}
	// deleteNode deletes the Kubernetes Node object.
	deleteNode struct{ hostname string }
)

// removal is one machine of the cluster that cluster.yaml does not have:
// an owned VM, a Kubernetes node named like the cluster's machines, or an
// etcd member, or several of them for one hostname.
type removal struct {
	hostname string
	role     spec.Role
	number   int
	vm       *Machine
	node     *kube.Node
	member   *talos.Member
	facts    NodeFacts
	asked    bool
	resumes  []state.Entry
	// where says what the machine is, for the reasons of its steps, and
	// cordonWhy why it is cordoned, for the node's annotation; empty for a
	// machine cluster.yaml no longer has.
	where, cordonWhy string
}

// answers reports whether the machine's Talos API answers with its
// machine config applied: it can be reset.
func (r removal) answers() bool {
	return r.asked && r.facts.Unknown == "" && !r.facts.Maintenance
}

// nodeName splits a machine name of the cluster, <cluster>-<pool>-NN,
// into its pool and number; ok is false for other names.
func nodeName(cluster, name string) (pool string, n int, ok bool) {
	rest, found := strings.CutPrefix(name, cluster+"-")
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil || n <= 0 {
		return "", 0, false
	}
	return rest[:i], n, true
}

// removals finds what cluster.yaml no longer has: the owned machines, the
// Kubernetes nodes and the etcd members named like the cluster's machines
// that are not desired. It returns them in the order they go: workers,
// then control planes whose node cannot take part in its own removal
// (their member is removed through the others, which restores etcd's
// health), then the other control planes; highest numbers first within
// each. Nodes it cannot attribute are warnings.
func removals(want *Desired, obs *Observation) (out []removal, warnings []string) {
	c := want.Cluster
	desired := map[string]bool{}
	for _, m := range want.Machines {
		desired[m.Hostname] = true
	}
	byName := map[string]*removal{}
	get := func(name string) *removal {
		if r, ok := byName[name]; ok {
			return r
		}
		_, n, _ := nodeName(c.Name, name)
		r := &removal{hostname: name, role: spec.RoleWorker, number: n}
		byName[name] = r
		return r
	}
	for _, m := range obs.Inventory.Machines() {
		if desired[m.Hostname] {
			continue
		}
		r := get(m.Hostname)
		m := m
		r.vm, r.role = &m, m.Role
	}
	// Names left alone: a Ready Node of no owned VM runs somewhere; its
	// etcd member, if any, is not the engine's to remove.
	alone := map[string]bool{}
	for _, n := range obs.Kube.Nodes {
		if desired[n.Name] {
			continue
		}
		if _, _, ok := nodeName(c.Name, n.Name); !ok {
			continue
		}
		r, hasVM := byName[n.Name] // only VMs are in byName yet
		if !hasVM && n.Ready {
			alone[n.Name] = true
			warnings = append(warnings, fmt.Sprintf("Kubernetes node %s is named like a machine of the cluster but is neither in cluster.yaml nor a VM of the cluster, and it is Ready (its kubelet runs somewhere): left alone, with its etcd member if it has one; remove it by hand if it should not be there", n.Name))
			continue
		}
		if r == nil {
			r = get(n.Name)
		}
		n := n
		r.node = &n
		if _, cp := n.Labels["node-role.kubernetes.io/control-plane"]; cp {
			r.role = spec.RoleControlPlane
		}
	}
	for _, m := range obs.Etcd.Members {
		if m.Hostname == "" {
			// A learner that has not started: whose it is, its peer
			// address tells.
			for _, r := range byName {
				if r.vm != nil && len(r.vm.Addresses) > 0 && m.Is(r.hostname, r.vm.Addresses[0].String()) {
					m := m
					r.member, r.role = &m, spec.RoleControlPlane
				}
			}
			continue
		}
		if desired[m.Hostname] || alone[m.Hostname] {
			continue
		}
		if _, _, ok := nodeName(c.Name, m.Hostname); !ok {
			warnings = append(warnings, fmt.Sprintf("etcd member %s (id %x) is not named like a control plane of the cluster: left alone; the health barrier will wait for it to go", m.Hostname, m.ID))
			continue
		}
		m := m
		r := get(m.Hostname)
		r.member, r.role = &m, spec.RoleControlPlane
	}
	for _, r := range byName {
		r.facts, r.asked = obs.Nodes[r.hostname]
		for _, en := range obs.Journal {
			if en.Target == r.hostname {
				r.resumes = append(r.resumes, en)
			}
		}
		out = append(out, *r)
	}
	// The order of the groups removals go in.
	const (
		workers = iota
		unreachableControlPlanes
		liveControlPlanes
	)
	group := func(r removal) int {
		switch {
		case r.role != spec.RoleControlPlane:
			return workers
		case !r.answers():
			return unreachableControlPlanes
		}
		return liveControlPlanes
	}
	slices.SortFunc(out, func(a, b removal) int {
		if c := cmp.Compare(group(a), group(b)); c != 0 {
			return c
		}
		if c := cmp.Compare(b.number, a.number); c != 0 {
			return c
		}
		return cmp.Compare(b.hostname, a.hostname)
	})
	return out, warnings
}

// planScaleDown plans the removal of every machine cluster.yaml no longer
// has, each as its own group of steps, and the uncordon of desired nodes
// the engine cordoned earlier. It refuses what cannot be removed safely.
func planScaleDown(p *plan.Plan, want *Desired, obs *Observation, infra Infra) {
	for _, n := range obs.Kube.Nodes {
		if n.CordonedBy == kube.CordonedByUs && slices.ContainsFunc(want.Machines, func(m machineconfig.Machine) bool { return m.Hostname == n.Name }) {
			p.Add(plan.Change{Phase: plan.PhaseScaleDown, Domain: plan.DomainKube, Action: plan.ActionUpdate,
				Resource:   plan.Resource{Kind: plan.KindNode, Name: n.Name},
				Reason:     "uncordon: an earlier run cordoned this node (to remove or restart it) and did not finish; cluster.yaml keeps it, and Talos never uncordons a node it did not cordon itself",
				Attributes: []plan.Attribute{{Key: "unschedulable", Value: "true -> false"}},
				Expects:    "the node exists", Op: uncordonNode{hostname: n.Name, bestEffort: true}})
		}
	}
	rs, warnings := removals(want, obs)
	for _, w := range warnings {
		p.Warn(w)
	}
	if len(rs) == 0 {
		return
	}
	remover, ok := infra.(Remover)
	if !ok {
		for _, r := range rs {
			p.Refuse(plan.Resource{Kind: plan.KindMachine, Name: r.hostname}, fmt.Sprintf("%s %s is not in cluster.yaml any more, and this provider cannot remove machines yet; restore its pool's count", r.role, r.hostname))
		}
		return
	}
	if refuseQuorum(p, want, obs, rs) {
		return
	}
	// The control planes that stay and exist now: one created by this
	// run comes later, in the compute phase.
	var stay []string
	for _, h := range controlPlanes(want) {
		if _, ok := machineNamed(obs.Inventory, h); ok {
			stay = append(stay, h)
		}
	}
	for i, r := range rs {
		var later []string
		for _, o := range rs[i+1:] {
			if o.role == spec.RoleControlPlane {
				later = append(later, o.hostname)
			}
		}
		planRemoval(p, r, stay, later, remover, obs)
	}
}

// refuseQuorum refuses control-plane counts that etcd cannot survive
// being brought to: an even count lower than today's, or two members.
func refuseQuorum(p *plan.Plan, want *Desired, obs *Observation, rs []removal) bool {
	target := want.Cluster.ControlPlane.Count
	current := target
	for _, r := range rs {
		if r.role == spec.RoleControlPlane {
			current++
		}
	}
	if current <= target {
		return false
	}
	res := plan.Resource{Kind: plan.KindCluster, Name: "controlplane.count"}
	switch {
	case target == 2:
		p.Refuse(res, fmt.Sprintf("controlplane.count %d -> 2 would leave two etcd members, which cannot lose one: choose 3 or 1", current))
		return true
	case target%2 == 0:
		p.Refuse(res, fmt.Sprintf("controlplane.count %d -> %d: an even number of etcd members tolerates no more failures than one fewer; choose %d", current, target, target-1))
		return true
	}
	return false
}

// planRemoval adds the steps that remove one machine, in order: cordon,
// drain, reset, the etcd check, the Node, the VM. stay are the desired
// control planes that exist; queued the control planes removed after this
// one.
func planRemoval(p *plan.Plan, r removal, stay, queued []string, remover Remover, obs *Observation) {
	name := r.hostname
	cp := r.role == spec.RoleControlPlane
	add := func(ch plan.Change) {
		ch.Phase = plan.PhaseScaleDown
		if len(r.resumes) > 0 {
			var ops []string
			for _, en := range r.resumes {
				ops = append(ops, en.Op+" (started "+en.Started.UTC().Format("2006-01-02 15:04:05Z")+")")
			}
			ch.Attributes = append(ch.Attributes, plan.Attribute{Key: "resumes", Value: "interrupted " + strings.Join(ops, ", ")})
		}
		p.Add(ch)
	}
	where := "a " + string(r.role) + " cluster.yaml no longer has"
	if r.where != "" {
		where = r.where
	}
	ready := ""
	if r.node != nil {
		ready = r.node.Condition
	}
	addressless := r.vm != nil && len(r.vm.Addresses) == 0 && r.vm.Running
	// A Node still Ready (or of unknown readiness) for a machine that
	// cannot be reached is not a dead node: its address was not found,
	// or it went down less than the node-monitor grace period ago. That
	// changes on its own; until it does, nothing of it is removed.
	notReady := r.node != nil && (r.node.Condition == "False" || r.node.Condition == "Unknown")
	switch {
	case r.node != nil && addressless && !notReady:
		p.RefuseForNow(plan.Resource{Kind: plan.KindMachine, Name: name}, fmt.Sprintf("%s reports no address but its Node is %s: that is a failure to discover its address, not a dead node; it is not removed until its address is known or its Node is NotReady", name, readyText(ready)))
		return
	case r.node != nil && r.vm != nil && r.vm.Running && !addressless && !r.answers() && !notReady:
		p.RefuseForNow(plan.Resource{Kind: plan.KindMachine, Name: name}, fmt.Sprintf("%s is %s in Kubernetes but its Talos API does not answer (%s): it cannot be reset safely; it is not removed until it answers or its Node is NotReady", name, readyText(ready), r.facts.Unknown))
		return
	}
	if cp && r.answers() {
		add(plan.Change{Domain: plan.DomainGate, Action: plan.ActionWait,
			Resource: plan.Resource{Kind: plan.KindCluster, Name: "etcd"},
			Reason:   fmt.Sprintf("before %s goes: etcd answers from a surviving member and %s run a healthy etcd as voting members, with no other member or learner but those being removed (the Kubernetes API answering is not enough)", name, strings.Join(stay, ", ")),
			Expects:  "etcd is healthy", Op: etcdSafe{removing: name, stay: stay, queued: queued}})
	}
	if r.node != nil {
		if !r.node.Unschedulable {
			add(plan.Change{Domain: plan.DomainKube, Action: plan.ActionUpdate,
				Resource:   plan.Resource{Kind: plan.KindNode, Name: name},
				Reason:     "cordon: " + where + " takes no new pods",
				Attributes: []plan.Attribute{{Key: "unschedulable", Value: "false -> true"}},
				Expects:    "the node exists", Op: cordonNode{hostname: name, why: r.cordonWhy}})
		}
		reason := "evict its pods through the eviction API, honouring PodDisruptionBudgets; a budget that still blocks after the drain timeout stops the run as waiting"
		if !r.node.Ready {
			reason = "evict its pods; the node is " + readyText(ready) + ", so a drain that does not finish does not stop the removal"
		}
		add(plan.Change{Domain: plan.DomainKube, Action: plan.ActionDrain,
			Resource: plan.Resource{Kind: plan.KindNode, Name: name}, Reason: reason,
			Attributes: []plan.Attribute{{Key: "ready", Value: readyText(ready)}},
			Expects:    "the node exists", Op: drainNode{hostname: name}})
	}
	if r.answers() {
		reason := "graceful Talos reset: Talos drains, stops the kubelet, wipes the disk and powers off"
		if cp {
			reason = "graceful Talos reset: Talos drains, leaves etcd (a failure is fatal: the run stops and the VM is kept), wipes the disk and powers off"
		}
		evidence := cp && r.node == nil
		if evidence {
			reason = "graceful Talos reset of a control plane whose Node is gone; should it fail, the etcd check that follows decides: the VM goes only if a surviving member shows it left etcd"
		}
		add(plan.Change{Domain: plan.DomainTalos, Action: plan.ActionReset,
			Resource: plan.Resource{Kind: plan.KindMachine, Name: name}, Reason: reason,
			Attributes: []plan.Attribute{{Key: "address", Value: r.facts.Address}},
			Expects:    "the node's Talos API answers", Op: resetMachine{hostname: name, controlPlane: cp, evidence: evidence}})
	}
	if cp {
		reason := "a surviving member's etcd member list shows that it left"
		if !r.answers() {
			reason = "its node cannot leave etcd by itself: a surviving member's etcd member list must show it gone, and a member still listed is removed by its id through the survivors (etcd refuses it when the rest could not keep a majority); the list unread stops the run"
		}
		add(plan.Change{Domain: plan.DomainTalos, Action: plan.ActionDelete,
			Resource: plan.Resource{Kind: plan.KindEtcdMember, Name: name}, Reason: reason,
			Expects: "a surviving control plane's etcd answers", Op: leftEtcd{hostname: name, remove: !r.answers()}})
	}
	if r.node != nil {
		add(plan.Change{Domain: plan.DomainKube, Action: plan.ActionDelete,
			Resource: plan.Resource{Kind: plan.KindNode, Name: name},
			Reason:   "delete the Node object", Op: deleteNode{hostname: name}})
	}
	if r.vm != nil {
		for _, ch := range remover.PlanRemove(name, obs.Inventory) {
			if ch.Domain == "" {
				ch.Domain = plan.DomainProvider
			}
			add(ch)
		}
	}
}

func readyText(condition string) string {
	switch condition {
	case "True":
		return "Ready"
	case "False":
		return "NotReady"
	case "Unknown":
		return "NotReady (status unknown: its kubelet stopped reporting)"
	}
	return "of unknown readiness"
}
