package proxmox

import (
	"context"
	"fmt"
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

// bootISO returns the boot ISO's file name and schematic: one per Talos
// version and base schematic, shared by every machine.
func (p *Provider) bootISO() (string, string, error) {
	id, err := machineconfig.SchematicID(p.c.BootExtensions())
	if err != nil {
		return "", "", err
	}
	return fmt.Sprintf("talos-%s-%s-nocloud-amd64.iso", p.c.Talos.Version, id[:12]), id, nil
}

func (p *Provider) isoVolume(name string) string {
	return p.c.Proxmox.ISOStorage + ":iso/" + name
}

func cidataName(hostname string) string { return "cidata-" + hostname + ".iso" }

func (p *Provider) cidataVolume(hostname string) string {
	return p.c.Proxmox.CIDataStorage + ":iso/" + cidataName(hostname)
}

// Plan lists the provider's changes for one phase.
func (p *Provider) Plan(_ context.Context, phase plan.Phase, want *reconcile.Desired, have reconcile.Inventory) ([]plan.Change, error) {
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
	if major, _ := strconv.Atoi(strings.SplitN(inv.version, ".", 2)[0]); major < minMajor {
		out = append(out, refuse(plan.KindCluster, p.c.Name, fmt.Sprintf("Proxmox VE %s is older than %d.0, the oldest supported", inv.version, minMajor)))
	}
	if !inv.clusterFirewall {
		out = append(out, refuse(plan.KindFirewallOptions, "datacenter", "the Proxmox datacenter firewall is disabled, so per-VM firewall rules would not be enforced; enable it under Datacenter > Firewall > Options"))
	}
	if px.Network.SDN != nil {
		out = append(out, refuse(plan.KindVNet, px.Network.SDN.Name, "a managed SDN cluster network (proxmox.network.cluster.sdn) is not supported yet; use a bridge or an existing vnet"))
	}
	for _, m := range want.Machines {
		if id, ok := inv.foreign[m.Hostname]; ok {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("a VM named %s (id %d) exists but is not owned by this cluster; rename or remove it", m.Hostname, id)))
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
	}
	return out
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
	out := map[string]string{}
	for _, m := range want.Machines {
		if _, ok := inv.owned[m.Hostname]; ok {
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
	nodes := map[string]bool{}
	for _, n := range place {
		nodes[n] = true
	}
	var out []plan.Change
	for _, node := range sortedKeys(nodes) {
		if inv.isos[node+"/"+p.isoVolume(name)] {
			continue
		}
		out = append(out, plan.Change{Phase: plan.PhaseImage, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindImage, Name: node + "/" + name},
			Reason:   "boot ISO from the Image Factory, shared by the cluster's VMs on this node",
			Attributes: []plan.Attribute{
				{Key: "node", Value: node},
				{Key: "storage", Value: p.c.Proxmox.ISOStorage},
				{Key: "schematic", Value: schematic},
				{Key: "factory", Value: p.factory},
			}})
	}
	return out, nil
}

func (p *Provider) planNetwork(inv *inventory) []plan.Change {
	res := plan.Resource{Kind: plan.KindResourcePool, Name: p.poolName()}
	attrs := []plan.Attribute{{Key: "comment", Value: p.poolComment()}}
	switch {
	case !inv.poolExists:
		return []plan.Change{{Phase: plan.PhaseNetwork, Action: plan.ActionCreate, Resource: res,
			Reason: "resource pool that marks the cluster's VMs as owned", Attributes: attrs}}
	case inv.poolComment != p.poolComment():
		return []plan.Change{{Phase: plan.PhaseNetwork, Action: plan.ActionUpdate, Resource: res,
			Reason: "restore the ownership comment", Attributes: attrs}}
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
	for _, m := range want.Machines {
		pool := m.Pool
		v, exists := inv.owned[m.Hostname]
		if !exists {
			out = append(out, plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionCreate,
				Resource:   plan.Resource{Kind: plan.KindCIData, Name: m.Hostname},
				Reason:     "config ISO the VM reads its machine config from on first boot",
				Attributes: []plan.Attribute{{Key: "node", Value: place[m.Hostname]}, {Key: "storage", Value: px.CIDataStorage}}})
			out = append(out, plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionCreate,
				Resource: plan.Resource{Kind: plan.KindMachine, Name: m.Hostname},
				Reason:   "new " + string(pool.Role) + ", started after its firewall is in place",
				Attributes: []plan.Attribute{
					{Key: "node", Value: place[m.Hostname]},
					{Key: "cores", Value: strconv.Itoa(pool.Cores)},
					{Key: "memory", Value: fmt.Sprintf("%d GB", pool.Memory)},
					{Key: "disk", Value: fmt.Sprintf("%d GB", pool.Disk)},
					{Key: "storage", Value: px.Storage},
					{Key: "bridge", Value: p.clusterBridge()},
					{Key: "mac", Value: m.ClusterMAC},
				}})
			out = append(out, plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionCreate,
				Resource:   plan.Resource{Kind: plan.KindFirewallRule, Name: m.Hostname},
				Reason:     fmt.Sprintf("per-VM firewall: policy in DROP, %d accept rules", len(desiredRules)),
				Attributes: []plan.Attribute{{Key: "rules", Value: rulesSummary(desiredRules)}}})
			continue
		}
		out = append(out, p.planExisting(m, v, desiredRules)...)
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

// planExisting plans in-place changes of a VM that exists: size and
// firewall. Refused changes were reported in the validate phase.
func (p *Provider) planExisting(m machineconfig.Machine, v *vm, desiredRules []fwRule) []plan.Change {
	var out []plan.Change
	pool := m.Pool
	machine := plan.Resource{Kind: plan.KindMachine, Name: m.Hostname}
	if v.cores != pool.Cores || v.memoryMB != pool.Memory*1024 {
		out = append(out, plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionUpdate, Resource: machine,
			Reason: "resize; takes effect at the next restart of the VM (converge --reboot)",
			Attributes: []plan.Attribute{
				{Key: "cores", Value: fmt.Sprintf("%d -> %d", v.cores, pool.Cores)},
				{Key: "memory", Value: fmt.Sprintf("%d GB -> %d GB", v.memoryMB/1024, pool.Memory)},
			}})
	}
	if v.diskGB < pool.Disk {
		out = append(out, plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionUpdate, Resource: machine,
			Reason:     "grow the disk online; Talos extends EPHEMERAL at the next reboot",
			Attributes: []plan.Attribute{{Key: "disk", Value: fmt.Sprintf("%d GB -> %d GB", v.diskGB, pool.Disk)}}})
	}
	if !v.running {
		out = append(out, plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionUpdate, Resource: machine,
			Reason: "the VM is stopped: start it", Attributes: []plan.Attribute{{Key: "power", Value: "start"}}})
	}
	if diff := optionsDiff(v.fwOptions); len(diff) > 0 {
		var attrs []plan.Attribute
		for _, k := range sortedKeys(diff) {
			attrs = append(attrs, plan.Attribute{Key: k, Value: diff[k]})
		}
		out = append(out, plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionUpdate,
			Resource: plan.Resource{Kind: plan.KindFirewallOptions, Name: m.Hostname},
			Reason:   "per-VM firewall options drifted", Attributes: attrs})
	}
	add, del, _ := firewallDiff(v.fwRules, desiredRules)
	for _, r := range add {
		out = append(out, plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindFirewallRule, Name: m.Hostname + "/" + r.String()},
			Reason:   "missing per-VM firewall rule " + r.Comment})
	}
	for _, r := range del {
		out = append(out, plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionDelete,
			Resource: plan.Resource{Kind: plan.KindFirewallRule, Name: fmt.Sprintf("%s/%s", m.Hostname, r)},
			Reason:   "stale, duplicate or disabled rule on a port the security policy governs"})
	}
	return out
}

// planFinalize removes the first-boot media once a VM runs: the config ISO
// (it holds the machine config, secrets included) and the boot CD-ROM.
func (p *Provider) planFinalize(want *reconcile.Desired, inv *inventory) []plan.Change {
	var out []plan.Change
	for _, m := range want.Machines {
		v, ok := inv.owned[m.Hostname]
		if !ok || !v.running {
			continue
		}
		if strings.Contains(v.config["ide3"], cidataName(m.Hostname)) || strings.Contains(v.config["ide2"], ".iso") {
			out = append(out, plan.Change{Phase: plan.PhaseHealth, Action: plan.ActionDelete,
				Resource: plan.Resource{Kind: plan.KindCIData, Name: m.Hostname},
				Reason:   "the node is installed: detach the boot and config ISOs and delete the config ISO"})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
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
	for _, name := range sortedKeys(inv.owned) {
		_, _, foreign := firewallDiff(inv.owned[name].fwRules, desired)
		for _, r := range foreign {
			out = append(out, fmt.Sprintf("VM %s has a firewall rule taloscluster does not manage (position %d: %s); it is left alone", name, r.Pos, r))
		}
	}
	return out
}
