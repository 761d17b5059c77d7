package reconcile

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// nodeRef names a running node for the steps of a rollout: its address,
// and the control planes' addresses the Talos API is reached through.
type nodeRef struct {
	hostname, addr string
	controlPlane   bool
	endpoints      []string
}

// Rollout operations.
type (
	// clusterHealthy is the health gate before a node (or a batch of
	// workers) is taken down: every machine that exists answers the
	// Talos API and is a Ready node, and the etcd members are the
	// control planes, all voters.
	clusterHealthy struct {
		gate      healthGate
		addrs     map[string]string
		endpoints []string
		before    []string
	}
	// applyConfig gives a running node its new machine config: live, or
	// staged for the next boot, which a later step of the node causes.
	applyConfig struct {
		nodeRef
		config []byte
		staged bool
	}
	// installTalos pulls the installer image of the node's schematic and
	// installs it for the next boot.
	installTalos struct {
		nodeRef
		image, version string
	}
	// rebootNode reboots a node through Talos.
	rebootNode struct{ nodeRef }
	// nodeBack waits until a node that was asked to restart went down
	// (within the reboot grace) and came back: Talos answers with a new
	// boot ID (and the Talos version it must run), its services are up,
	// its node is Ready, and a control plane is a healthy etcd voter with
	// the whole cluster passing the health gate.
	nodeBack struct {
		nodeRef
		version string
		// boot is the boot ID before the restart, when an earlier run
		// asked for it; "" means the one this run read.
		boot string
		// gate is the cluster's health gate, checked after a control
		// plane came back.
		gate  healthGate
		addrs map[string]string
	}
	// setComponent moves one control-plane component of one node to
	// another Kubernetes version, live, and waits until its pod runs it
	// and is Ready.
	setComponent struct {
		nodeRef
		component, version string
		config             []byte
	}
	// moveEndpoint waits until the new API endpoint answers with the
	// kubeconfig a control plane serves, then stores that kubeconfig.
	moveEndpoint struct {
		endpoint  string
		endpoints []string
	}
	// prePull pulls a hop's images onto the nodes before the first
	// component moves, so that each one restarts at once: the control
	// planes' components into the CRI's namespace, each node's kubelet
	// into Talos's own.
	prePull struct {
		nodes []pullOn
	}
	// setKubeProxy moves kube-proxy's DaemonSet to another version and
	// waits for its rollout.
	setKubeProxy struct{ image, version string }
	// setKubelet gives a node its config at another Kubernetes version,
	// live, and waits until its kubelet reports that version and is
	// Ready.
	setKubelet struct {
		nodeRef
		version string
		config  []byte
	}
)

// errSkip leaves a node out of the rollout: what it needs is not known.
var errSkip = errors.New("not planned")

// pullOn is what a pre-pull pulls onto one node.
type pullOn struct {
	nodeRef
	images  []string
	kubelet string
}

// rebootGrace is how long a node has to go down once its restart was
// asked for: one that still runs the same boot after it never went down,
// and the rollout stops rather than move on past it.
const rebootGrace = 120 * time.Second

// roll is what a rollout does to one running node.
type roll struct {
	nodeRef
	facts NodeFacts
	// apply is the config to give the node at the versions it runs, nil
	// when it has it; applyRestart lists the changed paths that take
	// effect only at a restart.
	apply        []byte
	applyRestart []string
	applyDiff    string
	// upgradeTo is the Talos version to install (the same one for a new
	// schematic), with its installer; "" for none.
	upgradeTo, image string
	// after is the config at the new Talos version, given once the node
	// runs it; nil when it is the same as apply's.
	after        []byte
	afterRestart []string
	afterDiff    string
	// pending lists the provider's changes that wait for a restart, when
	// converge --reboot restarts it.
	pending []string
	// resumeBoot is the boot ID an interrupted run recorded when it asked
	// for the node's restart; rebooted says it restarted since.
	resumeBoot string
	rebooted   bool
	// owed is set when an interrupted restart never happened and nothing
	// else would restart the node.
	owed bool
}

// down reports whether the roll takes the node down.
func (r roll) down() bool {
	return len(r.applyRestart) > 0 || r.upgradeTo != "" || len(r.pending) > 0 || len(r.afterRestart) > 0 || r.owed
}

// rollout gathers what the rollout planner needs of the cluster.
type rollout struct {
	want *Desired
	obs  *Observation
	// rolls are the running desired nodes whose facts were read, control
	// planes first, by number.
	rolls []roll
	// gate is the health gate over the desired machines that exist.
	gate      healthGate
	addrs     map[string]string
	endpoints []string
	restarter Restarter
	// phase is the phase of every step of the rollout but the Kubernetes
	// hops.
	phase plan.Phase
}

// downs reports whether the rollout takes a node down.
func (ro *rollout) downs() bool {
	for _, r := range ro.rolls {
		if r.down() {
			return true
		}
	}
	return false
}

// planRollout plans the changes to running nodes: config applies, Talos
// upgrades, restarts and Kubernetes upgrades, one node at a time for
// control planes and in batches of rollout.max_unavailable for workers,
// each gated by the cluster's health. What cannot be done is refused.
func planRollout(p *plan.Plan, want *Desired, obs *Observation, infra Infra) error {
	if obs.Offline || want.ConfigAt == nil {
		return nil
	}
	if want.API.PublicPending {
		// The configs would drop the old public address from the
		// certificates and the next converge would add the new one: the
		// rollout waits for the address the network phase makes (see
		// planConfigs' warning).
		return nil
	}
	ro := &rollout{want: want, obs: obs, addrs: map[string]string{}}
	ro.restarter, _ = infra.(Restarter)
	refused := len(p.Refusals)
	if err := ro.read(p); err != nil {
		return err
	}
	if len(p.Refusals) > refused {
		return nil
	}
	// One phase for the whole rollout, so that sorting the plan by phase
	// keeps its order: upgrade when a node's Talos is upgraded.
	ro.phase = plan.PhaseApplyConfig
	var cps, workers []roll
	for _, r := range ro.rolls {
		if r.upgradeTo != "" {
			ro.phase = plan.PhaseUpgrade
		}
		if r.controlPlane {
			cps = append(cps, r)
		} else {
			workers = append(workers, r)
		}
	}
	// A node an interrupted run restarted is checked through the gate
	// before anything else is touched.
	for _, r := range ro.rolls {
		if r.resumeBoot != "" && r.rebooted {
			ro.back(p, r, 0, "", r.resumeBoot, "an interrupted run restarted this node; it must be back and healthy before anything else is touched")
		}
	}
	for _, r := range cps {
		ro.planNode(p, r, 0)
	}
	// The kubeconfig moves to a new endpoint once every control plane has
	// it, before anything else talks to the Kubernetes API.
	ro.planEndpoint(p)
	batch := 0
	var queue []roll
	flush := func() {
		if len(queue) == 0 {
			return
		}
		batch++
		ro.gateBefore(p, ro.phase, queue)
		for _, r := range queue {
			ro.planNode(p, r, batch)
		}
		queue = nil
	}
	for _, r := range workers {
		if !r.down() {
			ro.planNode(p, r, 0)
			continue
		}
		queue = append(queue, r)
		if len(queue) == want.Cluster.MaxUnavailable() {
			flush()
		}
	}
	flush()
	return ro.planKubernetes(p)
}

// planEndpoint rewrites the kubeconfig to a new API endpoint (a new
// kubeapi_vip) once the control planes got their configs, one at a time,
// and the new endpoint answers.
func (ro *rollout) planEndpoint(p *plan.Plan) {
	endpoint := ro.want.API.Kubeconfig()
	have := ro.obs.State.KubeconfigServer
	if !ro.want.API.Known || ro.want.API.PublicPending || have == "" || have == endpoint || len(ro.endpoints) == 0 {
		return
	}
	if ro.downs() || ro.phase == plan.PhaseUpgrade || !sameVersion(ro.obs.Kube.Version, ro.want.Cluster.Kubernetes.Version) {
		p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "network.cluster.kubeapi_vip"},
			fmt.Sprintf("the Kubernetes API endpoint moves (%s -> %s) in the same converge as changes that restart nodes or upgrade them: every Kubernetes call of those steps would go to an endpoint that stops answering half-way. Move the endpoint on its own first, then make the other changes", have, endpoint))
		return
	}
	p.Add(plan.Change{Phase: ro.phase, Domain: plan.DomainState, Action: plan.ActionUpdate,
		Resource:   plan.Resource{Kind: plan.KindKubeconfig, Name: KubeconfigFile},
		Reason:     "the Kubernetes API endpoint changed: the kubeconfig is rewritten once the new endpoint answers, right after every control plane has its new config; talosconfig names the nodes, not the endpoint, and stays",
		Attributes: []plan.Attribute{{Key: "server", Value: have + " -> " + endpoint}},
		Expects:    "a control plane answers the Talos API",
		Op:         moveEndpoint{endpoint: ro.want.API.URL, endpoints: ro.endpoints}})
}

// read works out each running node's roll, refusing what cannot be done.
func (ro *rollout) read(p *plan.Plan) error {
	want, obs := ro.want, ro.obs
	for _, m := range want.Machines {
		have, exists := machineNamed(obs.Inventory, m.Hostname)
		if !exists {
			continue
		}
		ro.gate.machines = append(ro.gate.machines, m.Hostname)
		if m.Role() == spec.RoleControlPlane {
			ro.gate.controlPlanes = append(ro.gate.controlPlanes, m.Hostname)
		}
		// The gates read every machine that exists, from the address the
		// provider reports, also one that did not answer when planning.
		if len(have.Addresses) > 0 {
			ro.addrs[m.Hostname] = have.Addresses[0].String()
			if m.Role() == spec.RoleControlPlane {
				ro.endpoints = append(ro.endpoints, have.Addresses[0].String())
			}
		}
		n, known := obs.nodeFacts(m.Hostname)
		if !known {
			continue // unread: the plan is incomplete for it
		}
		r := roll{nodeRef: nodeRef{hostname: m.Hostname, addr: n.Address, controlPlane: m.Role() == spec.RoleControlPlane},
			facts: n, pending: have.RestartPending}
		if !want.Restart && len(have.RestartPending) > 0 {
			p.Warn(fmt.Sprintf("%s: restart pending (%s): the change takes effect at the machine's next restart; converge --reboot restarts it", m.Hostname, strings.Join(have.RestartPending, ", ")))
			r.pending = nil
		} else if len(r.pending) > 0 && ro.restarter == nil {
			p.Refuse(plan.Resource{Kind: plan.KindMachine, Name: m.Hostname}, fmt.Sprintf("restart pending (%s), and this provider cannot restart machines", strings.Join(r.pending, ", ")))
			r.pending = nil
		}
		if err := ro.readNode(p, &r); errors.Is(err, errSkip) {
			continue
		} else if err != nil {
			return err
		}
		ro.rolls = append(ro.rolls, r)
	}
	for i := range ro.rolls {
		ro.rolls[i].endpoints = ro.endpoints
	}
	return nil
}

// readNode fills one roll from the node's facts and its desired configs.
func (ro *rollout) readNode(p *plan.Plan, r *roll) error {
	want, c := ro.want, ro.want.Cluster
	n := r.facts
	desired := want.Configs[r.hostname]
	if refuseTailscale(p, r.hostname, n.Config, desired) {
		return nil
	}
	if !bytes.Equal(n.Config, desired) {
		diff, err := machineconfig.DiffBytes(n.Config, desired)
		if err != nil {
			return fmt.Errorf("comparing the machine config of %s: %w", r.hostname, err)
		}
		if diff != "" {
			restart, err := machineconfig.RestartPaths(n.Config, desired)
			if err != nil {
				return fmt.Errorf("comparing the machine config of %s: %w", r.hostname, err)
			}
			r.apply, r.applyRestart, r.applyDiff = desired, restart, diff
		}
	}
	target := c.Talos.Version
	if older(target, n.Version) || minorsApart(n.Version, target) > 1 {
		return nil // refused by refuseVersions
	}
	if !sameVersion(n.Version, target) || ro.newSchematic(r.hostname, n, installerOf(desired)) {
		_, kv := runningVersions(ro.obs, r.hostname)
		after, err := want.ConfigAt(r.hostname, target, kv)
		if err != nil {
			return fmt.Errorf("generating the machine config of %s at Talos %s: %w", r.hostname, target, err)
		}
		if r.controlPlane {
			if after, err = keepNewerComponents(after, n.Config); err != nil {
				return err
			}
		}
		r.upgradeTo, r.image = target, installerOf(after)
		if r.apply == nil || !bytes.Equal(after, r.apply) {
			base := desired
			if !bytes.Equal(after, base) {
				restart, err := machineconfig.RestartPaths(base, after)
				if err != nil {
					return err
				}
				diff, err := machineconfig.DiffBytes(base, after)
				if err != nil {
					return err
				}
				if diff != "" {
					r.after, r.afterRestart, r.afterDiff = after, restart, diff
				}
			}
		}
	}
	for _, en := range ro.obs.Journal {
		if en.Target != r.hostname || en.Boot == "" {
			continue
		}
		if n.BootID == "" {
			// Whether it restarted is not known: nothing is planned for
			// it, and the plan says why.
			p.Unread("the boot ID of "+r.hostname+", which an interrupted run restarted", "it could not be read")
			return errSkip
		}
		r.resumeBoot = en.Boot
		r.rebooted = n.BootID != en.Boot
		r.owed = !r.rebooted && strings.HasPrefix(en.Op, string(plan.ActionRestart)) && r.apply == nil && r.upgradeTo == "" && len(r.pending) == 0
	}
	return nil
}

// refuseTailscale refuses switching tailscale on or off on a running
// node; it reports whether it did.
func refuseTailscale(p *plan.Plan, hostname string, running, desired []byte) bool {
	on, want := machineconfig.RunsTailscale(running), machineconfig.RunsTailscale(desired)
	if on == want {
		return false
	}
	p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "tailscale"}, fmt.Sprintf("tailscale %s on a running cluster (%s runs %s it): switching it is not done in place; a tailscale section without auth_key leaves the extension idle", onOff(want), hostname, withWithout(on)))
	return true
}

// gateBefore adds the health gate before rs are taken down.
func (ro *rollout) gateBefore(p *plan.Plan, phase plan.Phase, rs []roll) {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.hostname
	}
	p.Add(plan.Change{Phase: phase, Domain: plan.DomainGate, Action: plan.ActionWait,
		Resource: plan.Resource{Kind: plan.KindCluster, Name: ro.want.Cluster.Name},
		Reason:   fmt.Sprintf("health gate before %s goes down: %s", strings.Join(names, ", "), ro.gate.describe()),
		Expects:  "the cluster's machines answer",
		Op:       clusterHealthy{gate: ro.gate, addrs: ro.addrs, endpoints: ro.endpoints, before: names}})
}

// planNode adds one node's steps, marked with batch (0 for none).
func (ro *rollout) planNode(p *plan.Plan, r roll, batch int) {
	phase := ro.phase
	add := func(ch plan.Change) {
		ch.Phase, ch.Batch = phase, batch
		p.Add(ch)
	}
	machine := plan.Resource{Kind: plan.KindMachine, Name: r.hostname}
	back := func(version, boot, why string) {
		ro.back(p, r, batch, version, boot, why)
	}
	if !r.down() {
		if r.apply != nil {
			add(ro.applyStep(r, r.apply, r.applyDiff, nil, false))
		}
		return
	}
	if r.controlPlane && batch == 0 {
		ro.gateBefore(p, phase, []roll{r})
	}
	node := plan.Resource{Kind: plan.KindNode, Name: r.hostname}
	add(plan.Change{Domain: plan.DomainKube, Action: plan.ActionUpdate, Resource: node,
		Reason:     "cordon before the node restarts",
		Attributes: []plan.Attribute{{Key: "unschedulable", Value: "false -> true"}},
		Expects:    "the node exists", Op: cordonNode{hostname: r.hostname, why: "restarting for a rollout"}})
	add(plan.Change{Domain: plan.DomainKube, Action: plan.ActionDrain, Resource: node,
		Reason:  "evict its pods, honouring PodDisruptionBudgets, before it restarts",
		Expects: "the node exists", Op: drainNode{hostname: r.hostname, phase: phase}})
	if r.apply != nil {
		add(ro.applyStep(r, r.apply, r.applyDiff, r.applyRestart, len(r.applyRestart) > 0))
	}
	if r.upgradeTo != "" {
		add(plan.Change{Domain: plan.DomainTalos, Action: plan.ActionUpgradeTalos, Resource: machine,
			Reason:     fmt.Sprintf("install Talos %s for the next boot (the installer of its schematic)", r.upgradeTo),
			Attributes: []plan.Attribute{{Key: "talos", Value: r.facts.Version + " -> " + r.upgradeTo}, {Key: "installer", Value: r.image}},
			Expects:    "the node answers", Op: installTalos{nodeRef: r.nodeRef, image: r.image, version: r.upgradeTo}})
	}
	ro.restartStep(add, r)
	back(r.upgradeTo, "", fmt.Sprintf("wait until it went down within %d s and came back", int(rebootGrace.Seconds())))
	if r.after != nil {
		restart := len(r.afterRestart) > 0
		add(ro.applyStep(r, r.after, r.afterDiff, r.afterRestart, restart))
		if restart {
			add(plan.Change{Domain: plan.DomainTalos, Action: plan.ActionRestart, Resource: machine,
				Reason: "reboot into the config made for Talos " + r.upgradeTo, Expects: "the node answers", Op: rebootNode{r.nodeRef}})
			back(r.upgradeTo, "", "wait until it went down and came back")
		}
	}
	ro.uncordon(add, r)
}

// back adds the wait until a node that was asked to restart went down and
// came back healthy.
func (ro *rollout) back(p *plan.Plan, r roll, batch int, version, boot, why string) {
	p.Add(plan.Change{Phase: ro.phase, Batch: batch, Domain: plan.DomainGate, Action: plan.ActionWait,
		Resource: plan.Resource{Kind: plan.KindMachine, Name: r.hostname},
		Reason:   why + ": " + ro.backText(r),
		Expects:  "its restart was asked for",
		Op:       nodeBack{nodeRef: r.nodeRef, version: version, boot: boot, gate: ro.gate, addrs: ro.addrs}})
}

// restartStep adds the step that restarts the node: the provider's power
// cycle when changes wait for it, a Talos reboot otherwise.
func (ro *rollout) restartStep(add func(plan.Change), r roll) {
	if len(r.pending) > 0 {
		for _, ch := range ro.restarter.PlanRestart(r.hostname, ro.obs.Inventory) {
			if ch.Domain == "" {
				ch.Domain = plan.DomainProvider
			}
			add(ch)
		}
		return
	}
	why := "reboot"
	switch {
	case r.upgradeTo != "":
		why += " into Talos " + r.upgradeTo
	case len(r.applyRestart) > 0:
		why += " so that the staged config takes effect (" + strings.Join(r.applyRestart, ", ") + ")"
	case r.owed:
		why += ": an interrupted run asked for it and it did not happen"
	}
	add(plan.Change{Domain: plan.DomainTalos, Action: plan.ActionRestart, Resource: plan.Resource{Kind: plan.KindMachine, Name: r.hostname},
		Reason: why, Expects: "the node answers", Op: rebootNode{r.nodeRef}})
}

func (ro *rollout) uncordon(add func(plan.Change), r roll) {
	add(plan.Change{Domain: plan.DomainKube, Action: plan.ActionUpdate, Resource: plan.Resource{Kind: plan.KindNode, Name: r.hostname},
		Reason:     "uncordon: it is back and healthy (a failed uncordon is a warning, not a failure)",
		Attributes: []plan.Attribute{{Key: "unschedulable", Value: "true -> false"}},
		Expects:    "the node exists", Op: uncordonNode{hostname: r.hostname, bestEffort: true}})
}

// applyStep is the step that gives a node a config.
func (ro *rollout) applyStep(r roll, config []byte, diff string, restart []string, staged bool) plan.Change {
	how := "live: every change applies without a restart"
	if staged {
		how = "staged for the next boot: " + strings.Join(restart, ", ") + " take effect only at a restart"
	}
	return plan.Change{Domain: plan.DomainTalos, Action: plan.ActionApplyConfig,
		Resource: plan.Resource{Kind: plan.KindMachine, Name: r.hostname},
		Reason:   "the running machine config differs from the one cluster.yaml gives this node (see the diff); " + how,
		Diff:     diff, Expects: "the node answers",
		Op: applyConfig{nodeRef: r.nodeRef, config: config, staged: staged}}
}

func (ro *rollout) backText(r roll) string {
	if r.controlPlane {
		return "its Talos API answers with a new boot, its etcd and kubelet run, its node is Ready, it is an etcd voter, and " + ro.gate.describe()
	}
	return "its Talos API answers with a new boot, its kubelet runs and its node is Ready"
}

// minorsApart returns how many minor releases b is ahead of a (same
// major); 0 when it is not ahead or a version does not parse.
func minorsApart(a, b string) int {
	va, err1 := version.ParseGeneric(a)
	vb, err2 := version.ParseGeneric(b)
	if err1 != nil || err2 != nil || va.Major() != vb.Major() || vb.Minor() <= va.Minor() {
		return 0
	}
	return int(vb.Minor() - va.Minor())
}

// nextMinor names the minor release line after v's, such as v1.14.
func nextMinor(v string) string {
	pv, err := version.ParseGeneric(v)
	if err != nil {
		return "next"
	}
	return fmt.Sprintf("v%d.%d", pv.Major(), pv.Minor()+1)
}

// installerOf returns the installer image a machine config names.
func installerOf(config []byte) string {
	cfg, err := machineconfig.Parse(config)
	if err != nil || cfg.Machine() == nil {
		return ""
	}
	return cfg.Machine().Install().Image()
}

// newSchematic reports whether a node runs another Image Factory
// schematic than its desired installer's: as Talos annotates its Node
// with the schematic of the image it booted, or, without that, as its
// running config's installer names it (which an interrupted upgrade may
// not have changed yet).
func (ro *rollout) newSchematic(hostname string, n NodeFacts, installer string) bool {
	want := schematicID(installer)
	if want == "" {
		return false
	}
	for _, kn := range ro.obs.Kube.Nodes {
		if kn.Name == hostname && kn.Schematic != "" {
			return kn.Schematic != want
		}
	}
	have := schematicID(n.Installer)
	return have != "" && have != want
}

// schematicID returns the schematic of an Image Factory installer image
// (<host>/installer/<schematic>:<version>), "" for another image.
func schematicID(image string) string {
	if t := kube.ImageTag(image); t != "" {
		image = strings.TrimSuffix(image, ":"+t)
	}
	parts := strings.Split(image, "/")
	if len(parts) < 3 || !strings.HasSuffix(parts[len(parts)-2], "installer") {
		return ""
	}
	return parts[len(parts)-1]
}
