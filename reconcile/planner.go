package reconcile

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Gate operations: what a wait step waits for.
type (
	// waitAddresses waits until every desired machine reports an address.
	// unread are the running machines of a running cluster whose address
	// could not be read when planning (their guest agent did not answer):
	// they are waited for only as long as the read budget, since nothing
	// they are doing (such as booting) is expected to change it.
	waitAddresses struct{ unread []string }
	// waitHealthy waits until every desired machine is a Ready node and
	// the etcd members are exactly the control planes.
	waitHealthy struct{}
)

// State operations.
type (
	// mintIdentity creates talossecrets.yaml; it expects none to exist and
	// no machine of the cluster to exist.
	mintIdentity struct{}
	// writeTalosconfig writes talosconfig with the control planes'
	// addresses as endpoints.
	writeTalosconfig struct{}
	// writeKubeconfig fetches the admin kubeconfig from the first control
	// plane and stores it.
	writeKubeconfig struct{}

	// deleteState removes a state file once no machine is left.
	deleteState struct{ file string }
)

// Talos operations.
type (
	// bootstrapEtcd bootstraps etcd on the first control plane, unless a
	// control plane's etcd already has data.
	bootstrapEtcd struct{ hostname string }
)

// Plan is the one planner: from what the cluster should be and what was
// observed, the ordered steps converge runs, with refusals and warnings. It
// does no I/O. plan --offline is Plan with Offline's observation.
func Plan(want *Desired, obs *Observation, infra Infra, warnings []spec.Problem) (*plan.Plan, error) {
	c := want.Cluster
	p := plan.New(c.Name)
	for _, w := range warnings {
		p.Warn(w.String())
	}
	add := func(phase plan.Phase) error {
		steps, err := infra.Plan(phase, want, obs.Inventory)
		if err != nil {
			return fmt.Errorf("planning the %s phase: %w", phase, err)
		}
		for _, s := range steps {
			if s.Domain == "" && s.Action != plan.ActionRefuse {
				s.Domain = plan.DomainProvider
			}
			p.Add(s)
		}
		return nil
	}

	if err := add(plan.PhaseValidate); err != nil {
		return nil, err
	}
	refuseIdentity(p, want, obs)
	refuseVersions(p, want, obs)
	refuseUnimplementedTalos(p, want)
	refuseUnreachable(p, obs)
	refuseMaintenance(p, want, obs)

	if err := add(plan.PhaseImage); err != nil {
		return nil, err
	}
	planScaleDown(p, want, obs, infra)
	obs = planRemediation(p, want, obs, infra)
	if err := planRollout(p, want, obs, infra); err != nil {
		return nil, err
	}
	if !obs.State.Secrets && len(obs.Inventory.Machines()) == 0 {
		p.Add(plan.Change{Phase: plan.PhaseSecrets, Domain: plan.DomainState, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindTalosSecrets, Name: TalosSecretsFile},
			Reason:   "new cluster identity (cluster and etcd CAs, join tokens); back it up, it cannot be regenerated",
			Expects:  "no " + TalosSecretsFile + " and no machine of the cluster exists",
			Op:       mintIdentity{}})
	}
	if err := add(plan.PhaseNetwork); err != nil {
		return nil, err
	}
	planConfigs(p, want, obs)
	if err := add(plan.PhaseCompute); err != nil {
		return nil, err
	}
	if err := describeMachines(p, want); err != nil {
		return nil, err
	}
	creating := slices.ContainsFunc(p.Changes, func(ch plan.Change) bool {
		return ch.Resource.Kind == plan.KindMachine && ch.Action == plan.ActionCreate
	})
	planBootstrap(p, want, obs, creating)
	planKubeconfig(p, want, obs)
	if executable(p) > 0 || unhealthy(want, obs) != "" {
		why := "after the changes above"
		if executable(p) == 0 {
			why = "the cluster is not healthy now: " + unhealthy(want, obs)
		}
		p.Add(plan.Change{Phase: plan.PhaseHealth, Domain: plan.DomainGate, Action: plan.ActionWait,
			Resource: plan.Resource{Kind: plan.KindCluster, Name: c.Name},
			Reason:   fmt.Sprintf("health barrier: %s (%s)", healthGate{machines: hostnames(want), controlPlanes: controlPlanes(want)}.describe(), why),
			Expects:  "the Kubernetes API and a control plane's etcd answer",
			Op:       waitHealthy{}})
	}
	if err := add(plan.PhaseHealth); err != nil {
		return nil, err
	}
	if w, ok := infra.(Warner); ok {
		for _, msg := range w.Warnings(obs.Inventory) {
			p.Warn(msg)
		}
	}
	markUnread(p, want, obs)
	if err := planPlugins(p, want, obs, want.Plugins); err != nil {
		return nil, err
	}
	for _, name := range pluginsIdle(c, want.Plugins) {
		p.Warn(fmt.Sprintf("the %s section %s: the %s plugin does not run, and converge will not touch what it registered before", name, idleReason(name), name))
	}
	for _, msg := range pluginWarnings(c, want.Plugins) {
		p.Warn(msg)
	}
	for _, name := range pluginNamesWithout(c, want.Plugins) {
		p.Warn(fmt.Sprintf("the %s section is validated, but the %s plugin does not run here yet; converge will not touch it", name, name))
	}
	for _, msg := range unbuiltWarnings(c) {
		p.Warn(msg)
	}
	p.Sort()
	return p, nil
}

// describeMachines adds to every step that creates a machine what the new
// node is given besides its size: the digest of its redacted machine config
// and its Kubernetes node labels. A review of the plan then covers every
// byte that reaches the node (plan.Differences compares attributes), and
// no secret is in the plan. Before the cluster identity exists the config
// is not known; the digest of its user patches stands for it.
func describeMachines(p *plan.Plan, want *Desired) error {
	for i, ch := range p.Changes {
		if ch.Resource.Kind != plan.KindMachine || ch.Action != plan.ActionCreate {
			continue
		}
		j := slices.IndexFunc(want.Machines, func(m machineconfig.Machine) bool { return m.Hostname == ch.Resource.Name })
		if j < 0 {
			continue
		}
		m := want.Machines[j]
		config := "made from the new identity"
		if !want.API.Known {
			config = "made once the API endpoint is known (after network)"
		}
		if data, ok := want.Configs[m.Hostname]; ok {
			d, err := machineconfig.Digest(data)
			if err != nil {
				return fmt.Errorf("fingerprinting the machine config of %s: %w", m.Hostname, err)
			}
			config = d + " (redacted)"
		} else if d := machineconfig.PatchesDigest(want.Cluster, m.Pool); d != "" {
			config += ", patches " + d
		}
		labels := machineconfig.NodeLabels(want.Cluster, m.Pool)
		pairs := make([]string, 0, len(labels))
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			pairs = append(pairs, k+"="+labels[k])
		}
		attrs := append(slices.Clone(ch.Attributes),
			plan.Attribute{Key: "config", Value: config},
			plan.Attribute{Key: "labels", Value: strings.Join(pairs, ",")})
		p.Changes[i].Attributes = attrs
	}
	return nil
}

// planBootstrap adds the wait for addresses, talosconfig and the bootstrap
// when they are needed.
func planBootstrap(p *plan.Plan, want *Desired, obs *Observation, creating bool) {
	c := want.Cluster
	cps := controlPlanes(want)
	missing := missingAddresses(want, obs)
	if creating || len(missing) > 0 {
		reason := "every machine reports an address through the provider"
		if len(missing) > 0 && !creating {
			reason += "; missing now: " + strings.Join(missing, ", ")
		}
		p.Add(plan.Change{Phase: plan.PhaseBootstrap, Domain: plan.DomainGate, Action: plan.ActionWait,
			Resource: plan.Resource{Kind: plan.KindCluster, Name: c.Name + "/addresses"},
			Reason:   reason, Expects: "the machines run", Op: waitAddresses{unread: unreadAddresses(obs)}})
	}
	cpCreated := slices.ContainsFunc(p.Changes, func(ch plan.Change) bool {
		return ch.Resource.Kind == plan.KindMachine && ch.Action == plan.ActionCreate && slices.Contains(cps, ch.Resource.Name)
	})
	res := plan.Resource{Kind: plan.KindTalosconfig, Name: TalosconfigFile}
	switch {
	case !obs.State.Talosconfig:
		p.Add(plan.Change{Phase: plan.PhaseBootstrap, Domain: plan.DomainState, Action: plan.ActionCreate, Resource: res,
			Reason:  "Talos client config with the control planes' addresses as endpoints, written with mode 0600",
			Expects: "every control plane has an address", Op: writeTalosconfig{}})
	case cpCreated || !slices.Equal(obs.State.TalosconfigEndpoints, cpAddresses(want, obs)):
		p.Add(plan.Change{Phase: plan.PhaseBootstrap, Domain: plan.DomainState, Action: plan.ActionUpdate, Resource: res,
			Reason:     "the control planes' addresses changed",
			Attributes: []plan.Attribute{{Key: "endpoints", Value: strings.Join(obs.State.TalosconfigEndpoints, ",") + " -> " + addressesOrLater(cpAddresses(want, obs), cpCreated)}},
			Expects:    "every control plane has an address", Op: writeTalosconfig{}})
	}
	if yes, known := obs.Bootstrapped(); !yes {
		reason := "bootstrap etcd on the first control plane"
		if !known {
			reason = "bootstrap etcd on the first control plane unless it was bootstrapped before: that could not be read now (" + firstReason(obs) + ")"
		}
		p.Add(plan.Change{Phase: plan.PhaseBootstrap, Domain: plan.DomainTalos, Action: plan.ActionBootstrap,
			Resource: plan.Resource{Kind: plan.KindMachine, Name: cps[0]},
			Reason:   reason,
			Expects:  "no control plane's etcd has data (checked again just before; Talos answering AlreadyExists counts as done)",
			Op:       bootstrapEtcd{hostname: cps[0]}})
	}
}

// executable counts the plan's steps that converge runs (refusals are not
// steps).
func executable(p *plan.Plan) int {
	n := 0
	for _, ch := range p.Changes {
		if ch.Action != plan.ActionRefuse {
			n++
		}
	}
	return n
}

func addressesOrLater(addrs []string, later bool) string {
	if later || len(addrs) == 0 {
		return "(known once the new control planes run)"
	}
	return strings.Join(addrs, ",")
}

func firstReason(obs *Observation) string {
	for _, r := range []string{obs.Etcd.Unknown, obs.Kube.Unknown, obs.TalosUnknown} {
		if r != "" {
			return r
		}
	}
	return "unknown"
}

// cpAddresses returns the observed addresses of the desired control
// planes, in order; empty when one is unknown.
func cpAddresses(want *Desired, obs *Observation) []string {
	var out []string
	for _, h := range controlPlanes(want) {
		m, ok := machineNamed(obs.Inventory, h)
		if !ok || len(m.Addresses) == 0 {
			return nil
		}
		out = append(out, m.Addresses[0].String())
	}
	return out
}

// missingAddresses lists the desired machines that exist but report no
// address.
func missingAddresses(want *Desired, obs *Observation) []string {
	var out []string
	for _, m := range want.Machines {
		if have, ok := machineNamed(obs.Inventory, m.Hostname); ok && len(have.Addresses) == 0 {
			out = append(out, m.Hostname)
		}
	}
	return out
}

// refuseIdentity refuses a missing identity while machines exist, and an
// identity made for a cluster of another name.
func refuseIdentity(p *plan.Plan, want *Desired, obs *Observation) {
	res := plan.Resource{Kind: plan.KindTalosSecrets, Name: TalosSecretsFile}
	if ms := obs.Inventory.Machines(); !obs.State.Secrets && len(ms) > 0 {
		p.Refuse(res, fmt.Sprintf("%s is missing but %d of the cluster's machines exist (e.g. %s): restore talossecrets.yaml from backup; a new identity would not match the running cluster", TalosSecretsFile, len(ms), ms[0].Hostname))
	}
	var foreign []string
	for _, m := range obs.Inventory.Machines() {
		if n, ok := obs.Nodes[m.Hostname]; ok && n.ForeignIdentity {
			foreign = append(foreign, fmt.Sprintf("%s (%s)", m.Hostname, n.Address))
		}
	}
	if len(foreign) > 0 {
		p.Refuse(res, fmt.Sprintf("the running machines were built with another cluster identity: the Talos API of %s serves a certificate that %s here did not sign. Another directory or state copy minted a second identity for this cluster; restore the %s the machines were built with. Nothing is changed",
			strings.Join(foreign, ", "), TalosSecretsFile, TalosSecretsFile))
	}
	if ctx := obs.State.TalosconfigContext; ctx != "" && ctx != want.Cluster.Name {
		p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "name"}, fmt.Sprintf("name %s -> %s: the identity in this directory belongs to cluster %s; renaming a cluster is not supported (it would build a second cluster with the same identity)", ctx, want.Cluster.Name, ctx))
	}
}

// refuseVersions refuses what no rollout does: a Talos downgrade, a
// Talos upgrade of more than one minor release, and a Kubernetes
// downgrade (the API server's version; a component's is checked by the
// rollout).
func refuseVersions(p *plan.Plan, want *Desired, obs *Observation) {
	c := want.Cluster
	target := c.Talos.Version
	for _, m := range obs.Inventory.Machines() {
		n, ok := obs.Nodes[m.Hostname]
		if !isDesired(want, m.Hostname) || !ok || n.Unknown != "" || n.Maintenance {
			continue // a removal, or not read
		}
		switch {
		case older(target, n.Version):
			p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "talos.version"},
				fmt.Sprintf("talos.version %s -> %s on %s: downgrades are not supported", n.Version, target, m.Hostname))
		case minorsApart(n.Version, target) > 1:
			p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "talos.version"},
				fmt.Sprintf("talos.version %s -> %s on %s: Talos is upgraded one minor release at a time; set talos.version to the newest %s release first", n.Version, target, m.Hostname, nextMinor(n.Version)))
		}
	}
	if have := obs.Kube.Version; obs.Kube.Unknown == "" && have != "" && older(c.Kubernetes.Version, have) {
		p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "kubernetes.version"},
			fmt.Sprintf("kubernetes.version %s -> %s: downgrades are not supported", have, c.Kubernetes.Version))
	}
}

// older reports whether version a is older than b; versions that do not
// parse compare as not older.
func older(a, b string) bool {
	va, err1 := version.ParseGeneric(a)
	vb, err2 := version.ParseGeneric(b)
	return err1 == nil && err2 == nil && va.LessThan(vb)
}

func sameVersion(a, b string) bool {
	va, err1 := version.ParseGeneric(a)
	vb, err2 := version.ParseGeneric(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	return va.EqualTo(vb)
}

func onOff(on bool) string {
	if on {
		return "turned on"
	}
	return "turned off"
}

func withWithout(on bool) string {
	if on {
		return "with"
	}
	return "without"
}

// unreachableAPI names the refusal of a bootstrapped cluster whose
// Kubernetes API does not answer.
const unreachableAPI = "kubernetes-api"

// refuseUnreachable refuses to touch a cluster that was bootstrapped but
// whose Kubernetes API does not answer: creating, bootstrapping or checking
// health all need it.
func refuseUnreachable(p *plan.Plan, obs *Observation) {
	if obs.Offline || obs.Kube.Unknown == "" {
		return
	}
	etcdUp := len(obs.Etcd.Members) > 0
	if !obs.State.Kubeconfig && !etcdUp {
		return
	}
	p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: unreachableAPI},
		"the cluster was bootstrapped but its Kubernetes API does not answer ("+obs.Kube.Unknown+"): converge will not create machines, bootstrap or check health; investigate the cluster and run again")
}

// refuseMaintenance refuses nodes that run without their machine config:
// they never read it, and giving it to them is not supported yet.
func refuseMaintenance(p *plan.Plan, want *Desired, obs *Observation) {
	for _, h := range slices.Sorted(maps.Keys(obs.Nodes)) {
		if n := obs.Nodes[h]; n.Maintenance && isDesired(want, h) {
			p.Refuse(plan.Resource{Kind: plan.KindMachine, Name: h},
				fmt.Sprintf("%s (%s) runs Talos %s in maintenance mode: it never read its machine config (check its config ISO); applying a config to a node in maintenance mode is not supported yet", h, n.Address, n.Version))
		}
	}
}

// unhealthy says why the observed cluster is not healthy, "" when it is or
// when that is not known (nothing to compare yet): the health gate's
// predicate on the observation, for the machines that exist.
func unhealthy(want *Desired, obs *Observation) string {
	if obs.Offline || len(obs.Inventory.Machines()) == 0 {
		return ""
	}
	g := healthGate{controlPlanes: controlPlanes(want)}
	f := healthFacts{talos: map[string]error{}, nodes: obs.Kube.Nodes, members: obs.Etcd.Members}
	for _, m := range want.Machines {
		have, ok := machineNamed(obs.Inventory, m.Hostname)
		if !ok {
			continue
		}
		g.machines = append(g.machines, m.Hostname)
		if n, ok := obs.Nodes[m.Hostname]; ok && n.Unknown != "" {
			f.talos[m.Hostname] = errors.New(n.Unknown)
		} else if !ok && have.Running {
			f.talos[m.Hostname] = errors.New("it reports no address")
		} else if !ok {
			f.talos[m.Hostname] = errors.New("it is stopped")
		}
	}
	if obs.Kube.Unknown != "" {
		f.nodesErr = errors.New(obs.Kube.Unknown)
	}
	if obs.Etcd.Unknown != "" {
		f.membersErr = errors.New(obs.Etcd.Unknown)
	}
	why, _ := g.unmet(f)
	return why
}

// markUnread makes the plan incomplete for each fact of the running
// cluster that could not be read and that the plan compares with
// cluster.yaml: a node's Talos API (its version and config), a node's
// running machine config, and the etcd members of a bootstrapped
// cluster. Nothing unread is taken for equal.
func markUnread(p *plan.Plan, want *Desired, obs *Observation) {
	for _, h := range slices.Sorted(maps.Keys(obs.Nodes)) {
		n := obs.Nodes[h]
		if !isDesired(want, h) {
			continue // a removal plans from what it could read
		}
		switch {
		case n.Unknown != "":
			p.Unread(fmt.Sprintf("the Talos API of %s (%s), so its version and machine config", h, n.Address), n.Unknown)
		case n.ConfigUnknown != "":
			p.Unread("the running machine config of "+h, n.ConfigUnknown)
		}
	}
	if yes, _ := obs.Bootstrapped(); !obs.Offline && obs.Etcd.Unknown != "" && yes {
		p.Unread("the etcd members", obs.Etcd.Unknown)
	}
	for _, m := range obs.Inventory.Machines() {
		if slices.Contains(unreadAddresses(obs), m.Hostname) && isDesired(want, m.Hostname) {
			// Not asked anything: its version and config are unknown.
			why := "the provider reports no address for it yet"
			if m.NoAddress != "" {
				why = m.NoAddress
			}
			p.Unread("the address of "+m.Hostname+", so its version and machine config", why)
		}
	}
}

func pluginNames(c *spec.Cluster) []string {
	var out []string
	if c.Plugins.Rancher != nil {
		out = append(out, "rancher")
	}
	if c.Plugins.ArgoCD != nil {
		out = append(out, "argocd")
	}
	if c.Plugins.Charts != nil {
		out = append(out, "charts")
	}
	return out
}

// unbuiltWarnings names the keys that validate but whose feature this
// version does not build yet, so that setting or changing them is never
// silent.
func unbuiltWarnings(c *spec.Cluster) []string {
	var out []string
	if len(c.Metal) > 0 {
		out = append(out, "the metal section is validated, but this version does not manage metal machines yet; converge will not touch them")
	}
	return out
}

// isDesired reports whether cluster.yaml has a machine of that hostname.
func isDesired(want *Desired, hostname string) bool {
	return slices.ContainsFunc(want.Machines, func(m machineconfig.Machine) bool { return m.Hostname == hostname })
}

// unreadAddresses lists the running machines of a running (bootstrapped)
// cluster that report no address: their guest agent could not be read.
func unreadAddresses(obs *Observation) []string {
	if yes, _ := obs.Bootstrapped(); obs.Offline || !yes {
		return nil
	}
	var out []string
	for _, m := range obs.Inventory.Machines() {
		if _, asked := obs.Nodes[m.Hostname]; !asked && m.Running {
			out = append(out, m.Hostname)
		}
	}
	return out
}
