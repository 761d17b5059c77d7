package proxmox

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// minMajor is the oldest Proxmox VE major version supported.
const minMajor = 9

// Operations of the provider's steps: each step carries one in its Op, and
// Apply runs exactly that, never planning again.
type (
	// uploadBootISO fetches the boot ISO from the Image Factory and uploads
	// it to the ISO storage of each node that lacks it.
	uploadBootISO struct{ nodes []string }
	// ensurePool creates the resource pool or restores its comment.
	ensurePool struct{}
	// uploadCIData writes a new machine's config ISO on its node.
	uploadCIData struct{ hostname, node string }
	// createVM creates a machine's VM on its node; it expects no VM of
	// that name.
	createVM struct{ hostname, node string }
	// setFirewall sets a VM's firewall options, adds the rules in add and
	// deletes the rules in del (ours, on governed ports); with start it
	// then starts the VM.
	setFirewall struct {
		hostname string
		options  map[string]string
		add, del []fwRule
		start    bool
	}
	// resizeVM sets cores and memory (effective at the VM's next restart).
	resizeVM struct {
		hostname        string
		cores, memoryMB int
	}
	// restartVM reboots a running VM through Proxmox (a power cycle, so
	// that its pending changes take effect): the VM with that id, which
	// must still have that name and run.
	restartVM struct {
		hostname, node string
		id             int
	}
	// growDisk grows the system disk from fromGB to toGB.
	growDisk struct {
		hostname     string
		fromGB, toGB int
	}
	// startVM starts a stopped VM.
	startVM struct{ hostname string }
	// finalize detaches the boot and config ISOs and deletes the config ISO.
	finalize struct{ hostname string }
	// deleteVM stops and deletes a VM with its disks: the owned VM with
	// that id, which must still have that name.
	deleteVM struct {
		hostname string
		id       int
	}
	// deletePool deletes the emptied resource pool.
	deletePool struct{}
	// deleteOrphanISO deletes the config ISO of a machine that has no VM
	// any more and that cluster.yaml does not have (a run was killed
	// between deleting the VM and its config ISO).
	deleteOrphanISO struct{ node, volid, hostname string }
)

// bootISO returns the boot ISO's file name and schematic: one per Talos
// version and base schematic, shared by every machine.
func (p *Provider) bootISO() (string, string, error) {
	id, err := machineconfig.SchematicID(p.c.BootExtensions())
	if err != nil {
		return "", "", err
	}
	return fmt.Sprintf("talos-%s-%s-nocloud-amd64.iso", p.c.Talos.Version, id[:12]), id, nil
}

// legacyBootISO returns the name the Python taloscluster gives the boot ISO
// of the configured Talos version, and whether the engine takes it as its
// own: the Python tool's ISO is the Image Factory's nocloud ISO with
// exactly the qemu-guest-agent and tailscale extensions, so it is the same
// image as the engine's whenever the engine's boot extensions are those.
func (p *Provider) legacyBootISO() (string, bool) {
	want := []string{spec.ExtensionQEMUGuestAgent, spec.ExtensionTailscale}
	slices.Sort(want)
	return fmt.Sprintf("talos-%s-tailscale.iso", p.c.Talos.Version), slices.Equal(p.c.BootExtensions(), want)
}

// hasBootISO reports whether node has a boot ISO of the configured
// version: the engine's, or the Python taloscluster's same image.
func (p *Provider) hasBootISO(inv *inventory, node, name string) bool {
	if inv.isos[node+"/"+p.isoVolume(name)] {
		return true
	}
	legacy, ok := p.legacyBootISO()
	return ok && inv.isos[node+"/"+p.isoVolume(legacy)]
}

func (p *Provider) isoVolume(name string) string {
	return p.c.Proxmox.ISOStorage + ":iso/" + name
}

func cidataName(hostname string) string { return "cidata-" + hostname + ".iso" }

func (p *Provider) cidataVolume(hostname string) string {
	return p.c.Proxmox.CIDataStorage + ":iso/" + cidataName(hostname)
}

// Plan lists the provider's steps for one phase; it does no I/O.
func (p *Provider) Plan(phase plan.Phase, want *reconcile.Desired, have reconcile.Inventory) ([]plan.Change, error) {
	inv, ok := have.(*inventory)
	if !ok {
		return nil, fmt.Errorf("proxmox: an inventory of another provider")
	}
	switch phase {
	case plan.PhaseValidate:
		return p.planValidate(want, inv), nil
	case plan.PhaseImage:
		return p.planImage(want, inv)
	case plan.PhaseNetwork:
		return p.planNetwork(inv), nil
	case plan.PhaseCompute:
		return p.planCompute(want, inv)
	case plan.PhaseHealth:
		return p.planFinalize(want, inv), nil
	case plan.PhaseDestroy:
		return p.planDestroy(inv), nil
	}
	return nil, nil
}

func refuse(kind plan.ResourceKind, name, reason string) plan.Change {
	return plan.Change{Phase: plan.PhaseValidate, Action: plan.ActionRefuse,
		Resource: plan.Resource{Kind: kind, Name: name}, Reason: reason}
}

// planValidate finds every change that cannot be made in place, before
// anything is mutated.
func (p *Provider) planValidate(want *reconcile.Desired, inv *inventory) []plan.Change {
	var out []plan.Change
	px := p.c.Proxmox
	if major, _ := strconv.Atoi(strings.SplitN(inv.version, ".", 2)[0]); !inv.offline && major < minMajor {
		out = append(out, refuse(plan.KindCluster, p.c.Name, fmt.Sprintf("Proxmox VE %s is older than %d.0, the oldest supported", inv.version, minMajor)))
	}
	if !inv.offline && !inv.clusterFirewall {
		out = append(out, refuse(plan.KindFirewallOptions, "datacenter", "the Proxmox datacenter firewall is disabled, so per-VM firewall rules would not be enforced; enable it under Datacenter > Firewall > Options"))
	}
	for _, storage := range slices.Sorted(maps.Keys(inv.missingStorage)) {
		key := "proxmox.iso_storage"
		if storage != px.ISOStorage {
			key = "proxmox.cidata_storage"
		}
		out = append(out, refuse(plan.KindCluster, p.c.Name, fmt.Sprintf("%s %s: Proxmox answers %q; configure the storage or name one that exists", key, storage, inv.missingStorage[storage])))
	}
	if px.Network.SDN != nil {
		out = append(out, refuse(plan.KindVNet, px.Network.SDN.Name, "a managed SDN cluster network (proxmox.network.cluster.sdn) is not supported yet; use a bridge or an existing vnet"))
	}
	for _, name := range slices.Sorted(maps.Keys(inv.duplicates)) {
		dups := inv.duplicates[name]
		ids := make([]string, len(dups))
		for i, v := range dups {
			ids[i] = fmt.Sprintf("%d on %s", v.id, v.node)
		}
		out = append(out, refuse(plan.KindMachine, name, fmt.Sprintf("%d VMs of this cluster are named %s (ids %s): taloscluster cannot tell which one is the machine and changes none of them; delete or rename all but one", len(dups), name, strings.Join(ids, ", "))))
	}
	for _, v := range inv.misplaced {
		out = append(out, refuse(plan.KindMachine, v.name, fmt.Sprintf("VM %d (%s on %s) %s: it is not this cluster's and is left alone; put it back in its own pool or correct its tags", v.id, v.name, v.node, v.reason)))
	}
	for _, m := range want.Machines {
		if f, ok := inv.foreign[m.Hostname]; ok {
			out = append(out, refuse(plan.KindMachine, m.Hostname, p.unowned(m.Hostname, f)))
		}
		v, ok := inv.owned[m.Hostname]
		if !ok {
			continue
		}
		pool := m.Pool
		if v.diskGB > pool.Disk {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("disk shrink from %d GB to %d GB: Proxmox disks can only grow", v.diskGB, pool.Disk)))
		}
		if v.storage != "" && v.storage != px.Storage {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("proxmox.storage changed from %s to %s: moving a disk is not done in place", v.storage, px.Storage)))
		}
		if b := p.clusterBridge(); v.bridge != "" && b != "" && v.bridge != b {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("the cluster NIC would move from %s to %s: not done in place", v.bridge, b)))
		}
		if pool.Node != "" && v.node != pool.Node {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("placement changed: the VM runs on %s but %s.node is %s; relocating a VM is not done in place", v.node, poolKey(pool), pool.Node)))
		}
		if want := p.c.Network.Cluster.VLAN; v.vlan != want {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("network.cluster.vlan changed from %s to %s: moving a NIC to another VLAN is not done in place", vlanText(v.vlan), vlanText(want))))
		}
		if b := px.Network.ExternalBridge; v.extBridge != b {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("the external NIC would change from %q to %q (proxmox.network.external): not done in place", v.extBridge, b)))
		}
		if ext := p.c.Network.External; ext != nil && v.extBridge != "" && v.extBridge == px.Network.ExternalBridge && v.extVLAN != ext.VLAN {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("network.external.vlan changed from %s to %s: moving a NIC to another VLAN is not done in place", vlanText(v.extVLAN), vlanText(ext.VLAN))))
		}
	}
	return out
}

// unowned is the refusal of a VM that has a machine's name but is not this
// cluster's: adopting it could take over someone else's VM, and creating
// the machine next to it would make a second VM of the same name.
func (p *Provider) unowned(hostname string, f foreignVM) string {
	return fmt.Sprintf("refusing to adopt unowned VM %s (id %d) on %s: it carries neither this cluster's ownership tags (taloscluster, cluster_%s) nor sits in its pool %s, and a second VM of the same name is not created next to it; rename or remove it, or tag it (or put it in pool %s) if it is this cluster's machine",
		hostname, f.id, f.node, p.c.Name, p.poolName(), p.poolName())
}

func vlanText(v int) string {
	if v == 0 {
		return "none"
	}
	return strconv.Itoa(v)
}

func poolKey(p spec.Pool) string {
	if p.Role == spec.RoleControlPlane {
		return "controlplane"
	}
	return "workers." + p.Name
}

func (p *Provider) clusterBridge() string {
	if n := p.c.Proxmox.Network; n.ClusterBridge != "" {
		return n.ClusterBridge
	}
	return p.c.Proxmox.Network.ClusterVNet
}

// unplaced is the placement an offline plan shows for a spread machine.
const unplaced = "(chosen at converge)"

// placement assigns each machine that does not exist yet to a Proxmox
// node: its pool's node, or (spread) the candidate with the fewest of the
// cluster's VMs, ties broken by name.
func (p *Provider) placement(want *reconcile.Desired, inv *inventory) (map[string]string, error) {
	candidates := p.c.Proxmox.Nodes
	if len(candidates) == 0 {
		candidates = inv.nodes
	}
	var online []string
	for _, n := range candidates {
		if slices.Contains(inv.nodes, n) {
			online = append(online, n)
		}
	}
	load := map[string]int{}
	for _, v := range inv.owned {
		load[v.node]++
	}
	for _, dups := range inv.duplicates {
		for _, v := range dups {
			load[v.node]++
		}
	}
	out := map[string]string{}
	for _, m := range want.Machines {
		if _, ok := inv.owned[m.Hostname]; ok {
			continue
		}
		if _, ok := inv.duplicates[m.Hostname]; ok {
			continue
		}
		if n, ok := inv.replaced[m.Hostname]; ok && slices.Contains(inv.nodes, n) && (m.Pool.Node == "" || m.Pool.Node == n) {
			// A replacement goes where the machine ran: that node has the
			// boot ISO, and the spread stays as it was.
			out[m.Hostname] = n
			load[n]++
			continue
		}
		if inv.offline {
			out[m.Hostname] = m.Pool.Node
			if out[m.Hostname] == "" {
				out[m.Hostname] = unplaced
			}
			continue
		}
		if m.Pool.Node != "" {
			if !slices.Contains(inv.nodes, m.Pool.Node) {
				return nil, fmt.Errorf("placing %s: %s.node %s is not an online Proxmox node", m.Hostname, poolKey(m.Pool), m.Pool.Node)
			}
			out[m.Hostname] = m.Pool.Node
			load[m.Pool.Node]++
			continue
		}
		if len(online) == 0 {
			return nil, fmt.Errorf("placing %s: no online Proxmox node among %s", m.Hostname, strings.Join(candidates, ", "))
		}
		best := online[0]
		for _, n := range online[1:] {
			if load[n] < load[best] {
				best = n
			}
		}
		out[m.Hostname] = best
		load[best]++
	}
	return out, nil
}

func (p *Provider) planImage(want *reconcile.Desired, inv *inventory) ([]plan.Change, error) {
	name, schematic, err := p.bootISO()
	if err != nil {
		return nil, err
	}
	place, err := p.placement(want, inv)
	if err != nil {
		return nil, err
	}
	// Every node that runs or gets one of the cluster's VMs keeps the boot
	// ISO of the configured version, so a machine can always be created
	// or replaced there.
	nodes := map[string]bool{}
	for _, n := range place {
		nodes[n] = true
	}
	for _, v := range inv.owned {
		nodes[v.node] = true
	}
	var missing []string
	for _, n := range slices.Sorted(maps.Keys(nodes)) {
		if !p.hasBootISO(inv, n, name) {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	return []plan.Change{{Phase: plan.PhaseImage, Domain: plan.DomainProvider, Action: plan.ActionCreate,
		Resource: plan.Resource{Kind: plan.KindImage, Name: name},
		Reason:   "boot ISO from the Image Factory on each node that runs or gets one of the cluster's VMs",
		Expects:  "the Image Factory serves the schematic",
		Attributes: []plan.Attribute{
			{Key: "nodes", Value: strings.Join(missing, ",")},
			{Key: "storage", Value: p.c.Proxmox.ISOStorage},
			{Key: "schematic", Value: schematic},
			{Key: "factory", Value: p.factory},
			{Key: "talos", Value: p.c.Talos.Version},
		},
		Op: uploadBootISO{nodes: missing}}}, nil
}

func (p *Provider) planNetwork(inv *inventory) []plan.Change {
	res := plan.Resource{Kind: plan.KindResourcePool, Name: p.poolName()}
	attrs := []plan.Attribute{{Key: "comment", Value: p.poolComment()}}
	switch {
	case !inv.poolExists:
		return []plan.Change{{Phase: plan.PhaseNetwork, Domain: plan.DomainProvider, Action: plan.ActionCreate, Resource: res,
			Reason: "resource pool that marks the cluster's VMs as owned", Attributes: attrs, Op: ensurePool{}}}
	case inv.poolComment != p.poolComment():
		return []plan.Change{{Phase: plan.PhaseNetwork, Domain: plan.DomainProvider, Action: plan.ActionUpdate, Resource: res,
			Reason: "restore the ownership comment", Attributes: attrs, Op: ensurePool{}}}
	}
	return nil
}

func (p *Provider) planCompute(want *reconcile.Desired, inv *inventory) ([]plan.Change, error) {
	place, err := p.placement(want, inv)
	if err != nil {
		return nil, err
	}
	desiredRules, err := p.desiredRules()
	if err != nil {
		return nil, err
	}
	px := p.c.Proxmox
	var out []plan.Change
	step := func(action plan.Action, kind plan.ResourceKind, name, reason, expects string, op any, attrs ...plan.Attribute) {
		out = append(out, plan.Change{Phase: plan.PhaseCompute, Domain: plan.DomainProvider, Action: action,
			Resource: plan.Resource{Kind: kind, Name: name}, Reason: reason, Expects: expects, Attributes: attrs, Op: op})
	}
	for _, m := range want.Machines {
		if _, dup := inv.duplicates[m.Hostname]; dup {
			continue // refused in the validate phase
		}
		pool := m.Pool
		v, exists := inv.owned[m.Hostname]
		if exists {
			out = append(out, p.planExisting(m, v, desiredRules)...)
			continue
		}
		node := place[m.Hostname]
		// A remediation's replacement says so in each of its steps.
		remedy := ""
		if _, ok := inv.replaced[m.Hostname]; ok {
			remedy = "remediation: "
		}
		step(plan.ActionCreate, plan.KindCIData, m.Hostname, remedy+"config ISO the VM reads its machine config from on first boot",
			"the cluster identity exists", uploadCIData{hostname: m.Hostname, node: node},
			plan.Attribute{Key: "node", Value: node}, plan.Attribute{Key: "storage", Value: px.CIDataStorage})
		what := "new " + string(pool.Role)
		if remedy != "" {
			what = remedy + "a new VM of the same name for the " + string(pool.Role) + " deleted above"
		}
		step(plan.ActionCreate, plan.KindMachine, m.Hostname, what+", started once its firewall is in place",
			"no VM named "+m.Hostname+" exists", createVM{hostname: m.Hostname, node: node},
			plan.Attribute{Key: "node", Value: node},
			plan.Attribute{Key: "cores", Value: strconv.Itoa(pool.Cores)},
			plan.Attribute{Key: "memory", Value: fmt.Sprintf("%d GB", pool.Memory)},
			plan.Attribute{Key: "disk", Value: fmt.Sprintf("%d GB", pool.Disk)},
			plan.Attribute{Key: "storage", Value: px.Storage},
			plan.Attribute{Key: "bridge", Value: p.clusterBridge()},
			plan.Attribute{Key: "mac", Value: m.ClusterMAC},
			plan.Attribute{Key: "tags", Value: strings.Join(p.vmTags(m), ";")},
			plan.Attribute{Key: "talos", Value: p.c.Talos.Version},
			plan.Attribute{Key: "kubernetes", Value: p.c.Kubernetes.Version})
		step(plan.ActionCreate, plan.KindFirewallRule, m.Hostname, remedy+fmt.Sprintf("per-VM firewall: policy in DROP, %d accept rules; then the VM is started", len(desiredRules)),
			"the VM exists", setFirewall{hostname: m.Hostname, options: fwOptions, add: desiredRules, start: true},
			plan.Attribute{Key: "rules", Value: rulesSummary(desiredRules)})
	}
	return out, nil
}

func rulesSummary(rules []fwRule) string {
	parts := make([]string, len(rules))
	for i, r := range rules {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}

// planExisting plans the in-place changes of a VM that exists: size, disk,
// power and firewall. Refused changes were reported in the validate phase.
func (p *Provider) planExisting(m machineconfig.Machine, v *vm, desiredRules []fwRule) []plan.Change {
	var out []plan.Change
	pool := m.Pool
	machine := plan.Resource{Kind: plan.KindMachine, Name: m.Hostname}
	update := func(res plan.Resource, reason string, op any, attrs ...plan.Attribute) {
		out = append(out, plan.Change{Phase: plan.PhaseCompute, Domain: plan.DomainProvider, Action: plan.ActionUpdate,
			Resource: res, Reason: reason, Expects: "the VM exists", Attributes: attrs, Op: op})
	}
	if v.cores != pool.Cores || v.memoryMB != pool.Memory*1024 {
		reason := "resize; Proxmox applies it when the VM starts"
		if v.running {
			reason = "resize; the running VM keeps it pending until it restarts, which converge --reboot does"
		}
		update(machine, reason,
			resizeVM{hostname: m.Hostname, cores: pool.Cores, memoryMB: pool.Memory * 1024},
			plan.Attribute{Key: "cores", Value: fmt.Sprintf("%d -> %d", v.cores, pool.Cores)},
			plan.Attribute{Key: "memory", Value: fmt.Sprintf("%d GB -> %d GB", v.memoryMB/1024, pool.Memory)})
	}
	if v.diskGB < pool.Disk {
		update(machine, "grow the disk online; Talos extends EPHEMERAL at the next reboot",
			growDisk{hostname: m.Hostname, fromGB: v.diskGB, toGB: pool.Disk},
			plan.Attribute{Key: "disk", Value: fmt.Sprintf("%d GB -> %d GB", v.diskGB, pool.Disk)})
	}
	if !v.running {
		update(machine, "the VM is stopped: start it", startVM{hostname: m.Hostname},
			plan.Attribute{Key: "power", Value: "stopped -> running"})
	}
	options := optionsDiff(v.fwOptions)
	add, del, _ := firewallDiff(v.fwRules, desiredRules, v.fwOptions)
	if len(options) > 0 || len(add) > 0 || len(del) > 0 {
		var attrs []plan.Attribute
		for _, k := range slices.Sorted(maps.Keys(options)) {
			attrs = append(attrs, plan.Attribute{Key: k, Value: v.fwOptions[k] + " -> " + options[k]})
		}
		if len(add) > 0 {
			attrs = append(attrs, plan.Attribute{Key: "add", Value: rulesSummary(add)})
		}
		if len(del) > 0 {
			attrs = append(attrs, plan.Attribute{Key: "delete", Value: rulesSummary(del)})
		}
		update(plan.Resource{Kind: plan.KindFirewallRule, Name: m.Hostname},
			"per-VM firewall drifted: missing, stale, duplicate or disabled rules on ports the security policy governs, or options",
			setFirewall{hostname: m.Hostname, options: options, add: add, del: del}, attrs...)
	}
	return out
}

// planFinalize removes the first-boot media after the health barrier: the
// config ISO (it holds the machine config, secrets included) and the boot
// CD-ROM. It runs for a VM this run creates, for one that still has either
// attached, and for one whose config ISO is still on its node although
// nothing attaches it (an earlier run detached the ISOs and stopped before
// it deleted the file). A stopped VM is finalized too: the compute phase of
// the same run starts it, and the health barrier before this step waits
// for it to boot, so its first boot no longer needs the media. (An earlier
// version skipped stopped VMs, so a VM created by a run that then failed
// before starting it was started by the next run and kept its config ISO.)
func (p *Provider) planFinalize(want *reconcile.Desired, inv *inventory) []plan.Change {
	var out []plan.Change
	for _, m := range want.Machines {
		if _, dup := inv.duplicates[m.Hostname]; dup {
			continue
		}
		v, ok := inv.owned[m.Hostname]
		attached := !ok || strings.Contains(v.config["ide3"], cidataName(m.Hostname)) || strings.Contains(v.config["ide2"], ".iso") ||
			inv.isos[v.node+"/"+p.cidataVolume(m.Hostname)]
		if !attached {
			continue
		}
		out = append(out, plan.Change{Phase: plan.PhaseHealth, Domain: plan.DomainProvider, Action: plan.ActionDelete,
			Resource: plan.Resource{Kind: plan.KindCIData, Name: m.Hostname},
			Reason:   "the node is installed: detach the boot and config ISOs and delete the config ISO (it holds the machine config)",
			Expects:  "the VM exists", Op: finalize{hostname: m.Hostname}})
	}
	desired := map[string]bool{}
	for _, m := range want.Machines {
		desired[m.Hostname] = true
	}
	return append(out, p.planOrphanISOs(plan.PhaseHealth, inv, desired)...)
}

// planOrphanISOs deletes the config ISOs of this cluster's machines that
// have no VM and are not desired: they hold a machine config (the
// cluster's keys, for a control plane). A name is the cluster's when it is
// <cluster>-<pool>-NN for one of its pools, so another cluster whose name
// starts with this one's is not touched.
func (p *Provider) planOrphanISOs(phase plan.Phase, inv *inventory, desired map[string]bool) []plan.Change {
	pools := map[string]bool{}
	for _, pool := range p.c.Pools() {
		pools[pool.Name] = true
	}
	prefix := p.c.Proxmox.CIDataStorage + ":iso/cidata-"
	var out []plan.Change
	for _, key := range slices.Sorted(maps.Keys(inv.isos)) {
		node, volid, _ := strings.Cut(key, "/")
		host, ok := strings.CutPrefix(volid, prefix)
		if !ok {
			continue
		}
		host, ok = strings.CutSuffix(host, ".iso")
		if !ok || desired[host] || inv.owned[host] != nil || inv.duplicates[host] != nil {
			continue
		}
		rest, ok := strings.CutPrefix(host, p.c.Name+"-")
		i := strings.LastIndexByte(rest, '-')
		if !ok || i <= 0 || !pools[rest[:i]] {
			continue
		}
		if _, err := strconv.Atoi(rest[i+1:]); err != nil {
			continue
		}
		out = append(out, plan.Change{Phase: phase, Domain: plan.DomainProvider, Action: plan.ActionDelete,
			Resource:   plan.Resource{Kind: plan.KindCIData, Name: host},
			Reason:     "a config ISO left behind by a machine that is gone: it holds a machine config",
			Attributes: []plan.Attribute{{Key: "node", Value: node}, {Key: "volume", Value: volid}},
			Expects:    "no VM named " + host + " exists", Op: deleteOrphanISO{node: node, volid: volid, hostname: host}})
	}
	return out
}

var _ reconcile.Warner = (*Provider)(nil)

// Warnings reports per-VM firewall rules on ports the security policy does
// not govern: they are left alone, but an operator should know they exist.
func (p *Provider) Warnings(have reconcile.Inventory) []string {
	inv, ok := have.(*inventory)
	if !ok {
		return nil
	}
	desired, err := p.desiredRules()
	if err != nil {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(inv.owned)) {
		if nodes := p.c.Proxmox.Nodes; len(nodes) > 0 && !slices.Contains(nodes, inv.owned[name].node) {
			out = append(out, fmt.Sprintf("VM %s runs on %s, which proxmox.nodes does not list; it stays there (VMs are not moved), only new VMs follow proxmox.nodes", name, inv.owned[name].node))
		}
		_, _, foreign := firewallDiff(inv.owned[name].fwRules, desired, inv.owned[name].fwOptions)
		for _, r := range foreign {
			out = append(out, fmt.Sprintf("VM %s has a firewall rule taloscluster does not manage (position %d: %s); it is left alone", name, r.Pos, r))
		}
	}
	return out
}
