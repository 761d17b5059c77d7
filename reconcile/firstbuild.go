package reconcile

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/types/network"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// FirstBuild returns the plan of a cluster of which nothing exists yet:
// every create of the first converge, derived from the configuration alone.
// It is what `plan --offline` shows; no provider is asked anything.
func FirstBuild(c *spec.Cluster, warnings []spec.Problem) (*plan.Plan, error) {
	p := plan.New(c.Name)
	for _, w := range warnings {
		p.Warn(w.String())
	}
	machines := machineconfig.Machines(c)
	if err := imageChanges(p, c); err != nil {
		return nil, err
	}
	p.Add(plan.Change{
		Phase: plan.PhaseSecrets, Action: plan.ActionCreate,
		Resource: plan.Resource{Kind: plan.KindTalosSecrets, Name: "talossecrets.yaml"},
		Reason:   "new cluster identity (cluster and etcd CAs, join tokens); back it up, it cannot be regenerated",
	})
	rules, err := hostFirewall(c)
	if err != nil {
		return nil, err
	}
	switch c.Provider {
	case spec.ProviderProxmox:
		proxmoxNetwork(p, c, machines, rules)
	case spec.ProviderOpenStack:
		openstackNetwork(p, c, machines, rules)
	}
	for _, r := range rules {
		p.Add(plan.Change{
			Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
			Resource:   plan.Resource{Kind: plan.KindFirewallRule, Name: "talos/" + r.name},
			Reason:     "Talos host firewall rule on every node",
			Attributes: r.attributes(),
		})
	}
	p.Add(plan.Change{
		Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
		Resource:   plan.Resource{Kind: plan.KindFirewallRule, Name: "talos/default-ingress"},
		Reason:     "Talos host firewall blocks any other inbound traffic",
		Attributes: []plan.Attribute{{Key: "action", Value: "block"}},
	})
	for _, m := range machines {
		machineChanges(p, c, m)
	}
	if len(machines) > 0 {
		p.Add(plan.Change{
			Phase: plan.PhaseBootstrap, Action: plan.ActionBootstrap,
			Resource: plan.Resource{Kind: plan.KindMachine, Name: machines[0].Hostname},
			Reason:   "bootstrap etcd on the first control plane",
		})
	}
	p.Add(plan.Change{
		Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
		Resource: plan.Resource{Kind: plan.KindTalosconfig, Name: "talosconfig"},
		Reason:   "Talos client config for the control planes, written with mode 0600",
	})
	p.Add(plan.Change{
		Phase: plan.PhaseKubeconfig, Action: plan.ActionCreate,
		Resource: plan.Resource{Kind: plan.KindKubeconfig, Name: "kubeconfig"},
		Reason:   "fetched from the first control plane after bootstrap, written with mode 0600",
	})
	for _, name := range pluginNames(c) {
		p.Warn(fmt.Sprintf("the %s section is validated, but this version does not run plugins yet; converge will not touch it", name))
	}
	p.Sort()
	return p, nil
}

// imageChanges adds the boot image and one installer schematic per distinct
// extension set.
func imageChanges(p *plan.Plan, c *spec.Cluster) error {
	factory := spec.DefaultImageFactory
	if c.Proxmox != nil {
		factory = c.Proxmox.ImageFactory
	}
	type schematic struct {
		exts  []string
		pools []string
	}
	byID := map[string]*schematic{}
	var ids []string
	for _, pool := range c.Pools() {
		exts := c.Extensions(pool)
		id, err := machineconfig.SchematicID(exts)
		if err != nil {
			return fmt.Errorf("computing the schematic of pool %s: %w", pool.Name, err)
		}
		if byID[id] == nil {
			byID[id] = &schematic{exts: exts}
			ids = append(ids, id)
		}
		byID[id].pools = append(byID[id].pools, pool.Name)
	}
	// The boot image always carries tailscale, so one image serves every
	// machine whatever its installer.
	bootID, err := machineconfig.SchematicID(c.BootExtensions())
	if err != nil {
		return fmt.Errorf("computing the boot image schematic: %w", err)
	}
	boot := plan.Change{
		Phase: plan.PhaseImage, Action: plan.ActionCreate,
		Resource: plan.Resource{Kind: plan.KindImage, Name: bootImageName(c, bootID)},
		Reason:   "boot image from the Image Factory, shared by every machine",
		Attributes: []plan.Attribute{
			{Key: "factory", Value: factory},
			{Key: "schematic", Value: bootID},
			{Key: "talos", Value: c.Talos.Version},
		},
	}
	if c.Proxmox != nil {
		boot.Attributes = append(boot.Attributes, plan.Attribute{Key: "storage", Value: c.Proxmox.ISOStorage})
	}
	p.Add(boot)
	for _, id := range ids {
		s := byID[id]
		p.Add(plan.Change{
			Phase: plan.PhaseImage, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindImage, Name: "installer/" + id[:12]},
			Reason:   "installer schematic registered with the Image Factory",
			Attributes: []plan.Attribute{
				{Key: "extensions", Value: strings.Join(s.exts, ",")},
				{Key: "pools", Value: strings.Join(s.pools, ",")},
			},
		})
	}
	return nil
}

// bootImageName is the shared boot image's name: Talos version plus the
// schematic it was built from.
func bootImageName(c *spec.Cluster, schematic string) string {
	name := fmt.Sprintf("talos-%s-%s", c.Talos.Version, schematic[:12])
	if c.Provider == spec.ProviderProxmox {
		return name + ".iso"
	}
	return name
}

// rule is one inbound allowance of the cluster's host policy.
type rule struct {
	name    string
	proto   string
	ports   string
	sources []string
}

func (r rule) attributes() []plan.Attribute {
	return []plan.Attribute{
		{Key: "protocol", Value: r.proto},
		{Key: "ports", Value: r.ports},
		{Key: "sources", Value: strings.Join(r.sources, ",")},
	}
}

// hostFirewall reads the Talos host firewall documents the machine configs
// carry, so the plan shows exactly what the nodes will enforce and the
// provider firewalls mirror it.
func hostFirewall(c *spec.Cluster) ([]rule, error) {
	docs, err := machineconfig.Firewall(c)
	if err != nil {
		return nil, fmt.Errorf("building the host firewall: %w", err)
	}
	var out []rule
	for _, d := range docs {
		rc, ok := d.(*network.RuleConfigV1Alpha1)
		if !ok {
			continue
		}
		r := rule{name: rc.MetaName, proto: rc.PortSelector.Protocol.String()}
		var ports []string
		for _, pr := range rc.PortSelector.Ports {
			if pr.Lo == pr.Hi {
				ports = append(ports, strconv.Itoa(int(pr.Lo)))
			} else {
				ports = append(ports, pr.String())
			}
		}
		r.ports = strings.Join(ports, ",")
		for _, in := range rc.Ingress {
			r.sources = append(r.sources, in.Subnet.String())
		}
		out = append(out, r)
	}
	return out, nil
}

func proxmoxNetwork(p *plan.Plan, c *spec.Cluster, machines []machineconfig.Machine, rules []rule) {
	px := c.Proxmox
	p.Add(plan.Change{
		Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
		Resource:   plan.Resource{Kind: plan.KindResourcePool, Name: "taloscluster-" + c.Name},
		Reason:     "resource pool that marks the cluster's VMs as owned",
		Attributes: []plan.Attribute{{Key: "comment", Value: "managed-by=taloscluster cluster=" + c.Name}},
	})
	if s := px.Network.SDN; s != nil {
		p.Add(plan.Change{
			Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindSDNZone, Name: s.Name},
			Reason:   "managed EVPN zone for the cluster network",
			Attributes: []plan.Attribute{
				{Key: "controller", Value: s.Controller},
				{Key: "vrf_tag", Value: strconv.FormatInt(s.VRFTag, 10)},
				{Key: "exit_nodes", Value: strings.Join(s.ExitNodes, ",")},
			},
		})
		p.Add(plan.Change{
			Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindVNet, Name: s.Name},
			Reason:   "managed VNet with the cluster subnet",
			Attributes: []plan.Attribute{
				{Key: "tag", Value: strconv.FormatInt(s.Tag, 10)},
				{Key: "cidr", Value: c.Network.Cluster.CIDR.String()},
			},
		})
	}
	vip, external := c.Network.KubeAPIVIP()
	if vip.IsValid() {
		where := "cluster network"
		if external {
			where = "external network"
		}
		p.Add(plan.Change{
			Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
			Resource:   plan.Resource{Kind: plan.KindVIP, Name: vip.String()},
			Reason:     "Kubernetes API address shared by the control planes on the " + where + " (exists once etcd is bootstrapped)",
			Attributes: []plan.Attribute{{Key: "endpoint", Value: "https://" + vip.String() + ":6443"}},
		})
	}
	for _, m := range machines {
		p.Add(plan.Change{
			Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindFirewallOptions, Name: m.Hostname},
			Reason:   "per-VM firewall on",
			Attributes: []plan.Attribute{
				{Key: "enable", Value: "1"},
				{Key: "policy_in", Value: "DROP"},
				{Key: "policy_out", Value: "ACCEPT"},
			},
		})
	}
	p.Add(plan.Change{
		Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
		Resource:   plan.Resource{Kind: plan.KindFirewallRule, Name: "proxmox/icmp"},
		Reason:     fmt.Sprintf("per-VM firewall rule on all %d VMs", len(machines)),
		Attributes: []plan.Attribute{{Key: "protocol", Value: "icmp"}},
	})
	for _, r := range rules {
		p.Add(plan.Change{
			Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
			Resource:   plan.Resource{Kind: plan.KindFirewallRule, Name: "proxmox/" + r.name},
			Reason:     fmt.Sprintf("per-VM firewall rule on all %d VMs, comment taloscluster:%s", len(machines), r.name),
			Attributes: r.attributes(),
		})
	}
}

func openstackNetwork(p *plan.Plan, c *spec.Cluster, machines []machineconfig.Machine, rules []rule) {
	add := func(kind plan.ResourceKind, name, reason string, attrs ...plan.Attribute) {
		p.Add(plan.Change{Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: kind, Name: name}, Reason: reason, Attributes: attrs})
	}
	dns := make([]string, len(c.Network.DNS))
	for i, d := range c.Network.DNS {
		dns[i] = d.String()
	}
	add(plan.KindNetwork, c.Name+"-net", "cluster network")
	add(plan.KindSubnet, c.Name+"-subnet", "cluster subnet with DHCP",
		plan.Attribute{Key: "cidr", Value: c.Network.Cluster.CIDR.String()},
		plan.Attribute{Key: "dns", Value: strings.Join(dns, ",")})
	add(plan.KindRouter, c.Name+"-router", "router to the external network",
		plan.Attribute{Key: "external_net", Value: c.OpenStack.ExternalNet})
	add(plan.KindPort, c.Name+"-kubeapi", "reserved port whose fixed address is the Kubernetes API VIP")
	add(plan.KindPort, c.Name+"-ingress", "reserved port whose fixed address is the ingress VIP")
	add(plan.KindFloatingIP, c.Name+"-kubeapi", "public address of the Kubernetes API",
		plan.Attribute{Key: "pool", Value: c.OpenStack.ExternalNet})
	add(plan.KindFloatingIP, c.Name+"-ingress", "public address for ingress",
		plan.Attribute{Key: "pool", Value: c.OpenStack.ExternalNet})
	add(plan.KindVIP, c.Name+"-kubeapi", "Kubernetes API VIP on the reserved port, shared by the control planes")
	egress := "all egress except the instance metadata service"
	if c.OpenStack.Metadata {
		egress = "all egress"
		p.Warn("openstack.metadata is true: nodes can reach the instance metadata service")
	}
	add(plan.KindSecurityGroup, c.Name, "security group on every port",
		plan.Attribute{Key: "egress", Value: egress})
	add(plan.KindSecurityRule, c.Name+"/members", "ICMP, TCP and UDP between members of the group")
	for _, r := range rules {
		if strings.HasPrefix(r.name, "cluster-") {
			continue // covered by the members rule
		}
		add(plan.KindSecurityRule, c.Name+"/"+r.name, "ingress rule", r.attributes()...)
	}
	for _, m := range machines {
		attrs := []plan.Attribute{{Key: "network", Value: c.Name + "-net"}}
		if m.Role() == spec.RoleControlPlane {
			attrs = append(attrs, plan.Attribute{Key: "allowed_address_pairs", Value: c.Name + "-kubeapi"})
		} else {
			attrs = append(attrs, plan.Attribute{Key: "allowed_address_pairs", Value: c.Name + "-ingress"})
		}
		add(plan.KindPort, m.Hostname, "machine port", attrs...)
	}
}

func machineChanges(p *plan.Plan, c *spec.Cluster, m machineconfig.Machine) {
	pool := m.Pool
	schematic, _ := machineconfig.SchematicID(c.Extensions(pool))
	attrs := []plan.Attribute{
		{Key: "role", Value: string(pool.Role)},
		{Key: "pool", Value: pool.Name},
		{Key: "disk", Value: fmt.Sprintf("%d GB", pool.Disk)},
		{Key: "talos", Value: c.Talos.Version},
		{Key: "kubernetes", Value: c.Kubernetes.Version},
		{Key: "installer", Value: schematic[:12]},
	}
	switch c.Provider {
	case spec.ProviderProxmox:
		placement := "spread"
		if pool.Node != "" {
			placement = pool.Node
		}
		attrs = append(attrs,
			plan.Attribute{Key: "cores", Value: strconv.Itoa(pool.Cores)},
			plan.Attribute{Key: "memory", Value: fmt.Sprintf("%d GB", pool.Memory)},
			plan.Attribute{Key: "node", Value: placement},
			plan.Attribute{Key: "storage", Value: c.Proxmox.Storage},
			plan.Attribute{Key: "mac", Value: m.ClusterMAC},
		)
		if c.Proxmox.Network.SDN != nil {
			if a, ok := spec.StaticAddress(c.Network.Cluster.CIDR, pool, m.Number); ok {
				attrs = append(attrs, plan.Attribute{Key: "address", Value: a.String()})
			}
		}
		p.Add(plan.Change{
			Phase: plan.PhaseCompute, Action: plan.ActionCreate,
			Resource:   plan.Resource{Kind: plan.KindCIData, Name: m.Hostname},
			Reason:     "config ISO the VM reads its machine config from on first boot",
			Attributes: []plan.Attribute{{Key: "storage", Value: c.Proxmox.CIDataStorage}},
		})
	case spec.ProviderOpenStack:
		attrs = append(attrs,
			plan.Attribute{Key: "flavor", Value: pool.Flavor},
			plan.Attribute{Key: "availability_zone", Value: c.OpenStack.AvailabilityZone},
		)
	}
	p.Add(plan.Change{
		Phase: plan.PhaseCompute, Action: plan.ActionCreate,
		Resource:   plan.Resource{Kind: plan.KindMachine, Name: m.Hostname},
		Reason:     "new " + string(pool.Role),
		Attributes: attrs,
	})
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
