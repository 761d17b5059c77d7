package openstack

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// planNetwork lists the network phase: network, subnet, router and its
// interface, the security group and its rules, the reserved ports with
// their floating IPs, a port per machine, and the reclaim of machine
// ports whose machine is no longer wanted and never became a server.
func (p *Provider) planNetwork(want *reconcile.Desired, inv *inventory) ([]plan.Change, error) {
	c := p.c
	var out []plan.Change
	add := func(action plan.Action, kind plan.ResourceKind, name, reason string, op step, attrs ...plan.Attribute) {
		out = append(out, p.change(plan.PhaseNetwork, action, kind, name, reason, op, attrs...))
	}
	if inv.network == nil {
		add(plan.ActionCreate, plan.KindNetwork, p.netName(), "cluster network", createNetwork{})
	}
	dns := p.nameServers()
	switch {
	case inv.subnet == nil:
		add(plan.ActionCreate, plan.KindSubnet, p.subnetName(), "cluster subnet with DHCP", createSubnet{},
			plan.Attribute{Key: "cidr", Value: c.Network.Cluster.CIDR.Masked().String()},
			plan.Attribute{Key: "dns", Value: strings.Join(dns, ",")})
	case !slices.Equal(inv.subnet.DNSNameservers, dns):
		add(plan.ActionUpdate, plan.KindSubnet, p.subnetName(), "the DHCP name servers follow network.dns", updateSubnetDNS{dns: dns},
			plan.Attribute{Key: "dns", Value: strings.Join(inv.subnet.DNSNameservers, ",") + " -> " + strings.Join(dns, ",")})
	}
	if inv.router == nil {
		add(plan.ActionCreate, plan.KindRouter, p.routerName(), "router to the external network", createRouter{},
			plan.Attribute{Key: "external_net", Value: c.OpenStack.ExternalNet})
	}
	if inv.routerInterface == nil {
		add(plan.ActionCreate, plan.KindRouter, p.routerName()+"/"+p.subnetName(), "the router's interface on the cluster subnet (its gateway address)", addRouterInterface{})
	}
	out = append(out, p.planGroup(inv)...)
	vips := map[string]string{}
	for _, r := range []struct{ name, what, sharedBy string }{
		{p.kubeapiName(), "Kubernetes API", "control planes"},
		{p.ingressName(), "ingress", "workers"},
	} {
		name, what := r.name, r.what
		port, ok := inv.ports[name]
		switch {
		case !ok:
			add(plan.ActionCreate, plan.KindPort, name, "reserved port whose fixed address is the "+what+" VIP, shared by the "+r.sharedBy+" through allowed address pairs", createPort{name: name})
			vips[name] = reconcile.UnknownEndpoint
		default:
			addr, _ := fixedAddr(port)
			vips[name] = addr.String()
			if !slices.Contains(port.SecurityGroups, groupID(inv)) || inv.group == nil {
				add(plan.ActionUpdate, plan.KindPort, name, "the cluster security group on the reserved port", updatePort{name: name})
			}
		}
		fip, ok := inv.fips[name]
		switch {
		case !ok:
			add(plan.ActionCreate, plan.KindFloatingIP, name, "public address of the "+what+", in front of its VIP", createFloatingIP{port: name},
				plan.Attribute{Key: "pool", Value: c.OpenStack.ExternalNet})
		case fip.PortID != port.ID || port.ID == "":
			add(plan.ActionUpdate, plan.KindFloatingIP, name, "the floating IP "+fip.FloatingIP+" goes back onto its reserved port", associateFloatingIP{port: name},
				plan.Attribute{Key: "address", Value: fip.FloatingIP})
		}
	}
	for _, m := range want.Machines {
		pair := p.ingressName()
		if m.Role() == spec.RoleControlPlane {
			pair = p.kubeapiName()
		}
		port, ok := inv.ports[m.Hostname]
		if !ok {
			add(plan.ActionCreate, plan.KindPort, m.Hostname, "machine port with the cluster security group",
				createPort{name: m.Hostname, machine: true, role: m.Role(), pool: m.Pool.Name, mac: m.ClusterMAC, pair: pair},
				plan.Attribute{Key: "network", Value: p.netName()},
				plan.Attribute{Key: "allowed_address_pairs", Value: pairText(pair, vips[pair])})
			continue
		}
		if why := p.portDrift(port, inv, vips[pair]); why != "" {
			add(plan.ActionUpdate, plan.KindPort, m.Hostname, why,
				updatePort{name: m.Hostname, pair: pair},
				plan.Attribute{Key: "allowed_address_pairs", Value: pairText(pair, vips[pair])})
		}
	}
	for _, name := range p.strayPorts(want, inv) {
		add(plan.ActionDelete, plan.KindPort, name, "machine port of a machine that is no longer in cluster.yaml and never became a server", deletePort{name: name})
	}
	return out, nil
}

// pairText shows the reserved port whose address a machine port may
// carry, with that address.
func pairText(port, addr string) string {
	if addr == reconcile.UnknownEndpoint {
		return port + " " + addr
	}
	return port + " (" + addr + ")"
}

// nameServers are network.dns as the subnet's DHCP name servers.
func (p *Provider) nameServers() []string {
	out := make([]string, len(p.c.Network.DNS))
	for i, d := range p.c.Network.DNS {
		out[i] = d.String()
	}
	return out
}

// portDrift says why a machine port needs an update: the security group
// or the allowed address pair of its VIP is missing.
func (p *Provider) portDrift(port ports.Port, inv *inventory, vip string) string {
	var why []string
	if inv.group == nil || !slices.Contains(port.SecurityGroups, inv.group.ID) {
		why = append(why, "the cluster security group")
	}
	if _, err := netip.ParseAddr(vip); err == nil && !slices.ContainsFunc(port.AllowedAddressPairs, func(ap ports.AddressPair) bool { return ap.IPAddress == vip }) {
		why = append(why, "the allowed address pair of its VIP "+vip)
	}
	if len(why) == 0 {
		return ""
	}
	return "the machine port gets " + strings.Join(why, " and ")
}

// strayPorts are the machine ports whose machine is not desired and has
// no server: their create failed, or the pool shrank before the compute
// phase ran. A port whose machine has a server is scale-down's (the node
// is drained and reset before the server and its port go).
func (p *Provider) strayPorts(want *reconcile.Desired, inv *inventory) []string {
	var out []string
	for name, port := range inv.ports {
		if tagValue(port.Tags, "role") == "" {
			continue // reserved ports
		}
		if slices.ContainsFunc(want.Machines, func(m machineconfig.Machine) bool { return m.Hostname == name }) {
			continue
		}
		if _, ok := inv.servers[name]; ok {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func groupID(inv *inventory) string {
	if inv.group == nil {
		return ""
	}
	return inv.group.ID
}

// planGroup lists the security group and its rules: the missing ones
// created before the stale ones are deleted, so that nothing allowed is
// ever blocked in between.
func (p *Provider) planGroup(inv *inventory) []plan.Change {
	var out []plan.Change
	wantRules := securityRules(p.c)
	if inv.group == nil {
		egress := "all egress except the instance metadata service"
		if p.c.OpenStack.Metadata {
			egress = "all egress"
		}
		out = append(out, p.change(plan.PhaseNetwork, plan.ActionCreate, plan.KindSecurityGroup, p.groupName(),
			"security group on every port, the reserved ones included", createGroup{}, plan.Attribute{Key: "egress", Value: egress}))
		for _, r := range wantRules {
			out = append(out, p.change(plan.PhaseNetwork, plan.ActionCreate, plan.KindSecurityRule, p.groupName()+"/"+r.String(), "rule of the cluster security group", createRule{rule: r}))
		}
		return out
	}
	have := map[rule][]string{}
	for _, r := range inv.group.Rules {
		k := ruleOf(r, inv.group.ID)
		have[k] = append(have[k], r.ID)
	}
	for _, r := range wantRules {
		if _, ok := have[r]; !ok {
			out = append(out, p.change(plan.PhaseNetwork, plan.ActionCreate, plan.KindSecurityRule, p.groupName()+"/"+r.String(), "rule of the cluster security group", createRule{rule: r}))
		}
	}
	var stale []plan.Change
	for r, ids := range have {
		keep := slices.Contains(wantRules, r)
		for i, id := range ids {
			if keep && i == 0 {
				continue
			}
			reason := "not in the security section (the group is the cluster's own: every rule in it is reconciled)"
			if keep {
				reason = "a duplicate of another rule"
			}
			stale = append(stale, p.change(plan.PhaseNetwork, plan.ActionDelete, plan.KindSecurityRule, p.groupName()+"/"+r.String(), reason, deleteRule{id: id, rule: r}))
		}
	}
	slices.SortFunc(stale, func(a, b plan.Change) int { return strings.Compare(a.Resource.Name, b.Resource.Name) })
	return append(out, stale...)
}

// fresh reads the cluster's network objects now, for a step's
// precondition.
func (p *Provider) fresh(ctx context.Context) (*inventory, error) {
	_, network, _, err := p.clients(ctx)
	if err != nil {
		return nil, err
	}
	inv := &inventory{ports: map[string]ports.Port{}, fips: map[string]floatingips.FloatingIP{}}
	for _, read := range []func(context.Context) error{
		func(ctx context.Context) error { return p.readNetwork(ctx, network, inv) },
		func(ctx context.Context) error { return p.readGroup(ctx, network, inv) },
	} {
		if err := within(ctx, read); err != nil {
			return nil, err
		}
	}
	return inv, nil
}

// port reads one of the cluster's ports by name now; ok is false when it
// does not exist.
func (p *Provider) port(ctx context.Context, name string) (ports.Port, bool, error) {
	_, network, _, err := p.clients(ctx)
	if err != nil {
		return ports.Port{}, false, err
	}
	ps, err := call(ctx, func(ctx context.Context) ([]ports.Port, error) {
		return all(ctx, ports.List(network, ports.ListOpts{Name: name, Tags: clusterTag(p.c.Name)}), ports.ExtractPorts)
	})
	if err != nil {
		return ports.Port{}, false, fmt.Errorf("reading port %s: %w", name, err)
	}
	for _, port := range ps {
		if port.Name == name && owned(port.Tags, p.c.Name) {
			return port, true, nil
		}
	}
	return ports.Port{}, false, nil
}

type (
	createNetwork      struct{}
	createSubnet       struct{}
	updateSubnetDNS    struct{ dns []string }
	createRouter       struct{}
	addRouterInterface struct{}
	createGroup        struct{}
	createRule         struct{ rule rule }
	deleteRule         struct {
		id   string
		rule rule
	}
	// createPort creates a reserved port (machine false) or a machine
	// port with the allowed address pair of the reserved port pair.
	createPort struct {
		name    string
		machine bool
		role    spec.Role
		pool    string
		mac     string
		pair    string
	}
	// updatePort puts the security group (and, for a machine port, the
	// allowed address pair of pair) on a port.
	updatePort          struct{ name, pair string }
	deletePort          struct{ name string }
	createFloatingIP    struct{ port string }
	associateFloatingIP struct{ port string }
)

func (createNetwork) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	inv, err := p.fresh(ctx)
	if err != nil {
		return err
	}
	if inv.network != nil {
		return fmt.Errorf("%w: network %s exists now", reconcile.ErrPrecondition, p.netName())
	}
	_, network, _, _ := p.clients(ctx)
	up := true
	_, err = call(ctx, func(ctx context.Context) (*networks.Network, error) {
		return networks.Create(ctx, network, taggedNetwork{networks.CreateOpts{Name: p.netName(), AdminStateUp: &up}, p.tags()}).Extract()
	})
	if err != nil {
		return fmt.Errorf("creating network %s: %w", p.netName(), err)
	}
	return nil
}

func (createSubnet) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	inv, err := p.fresh(ctx)
	if err != nil {
		return err
	}
	switch {
	case inv.network == nil:
		return fmt.Errorf("%w: network %s does not exist", reconcile.ErrPrecondition, p.netName())
	case inv.subnet != nil:
		return fmt.Errorf("%w: subnet %s exists now", reconcile.ErrPrecondition, p.subnetName())
	}
	_, network, _, _ := p.clients(ctx)
	dhcp := true
	dns := p.nameServers()
	_, err = call(ctx, func(ctx context.Context) (*subnets.Subnet, error) {
		return subnets.Create(ctx, network, taggedSubnet{subnets.CreateOpts{NetworkID: inv.network.ID, Name: p.subnetName(),
			CIDR: p.c.Network.Cluster.CIDR.Masked().String(), IPVersion: 4, EnableDHCP: &dhcp, DNSNameservers: dns}, p.tags()}).Extract()
	})
	if err != nil {
		return fmt.Errorf("creating subnet %s: %w", p.subnetName(), err)
	}
	return nil
}

func (op updateSubnetDNS) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	inv, err := p.fresh(ctx)
	if err != nil {
		return err
	}
	if inv.subnet == nil {
		return fmt.Errorf("%w: subnet %s does not exist", reconcile.ErrPrecondition, p.subnetName())
	}
	_, network, _, _ := p.clients(ctx)
	dns := op.dns
	_, err = call(ctx, func(ctx context.Context) (*subnets.Subnet, error) {
		return subnets.Update(ctx, network, inv.subnet.ID, subnets.UpdateOpts{DNSNameservers: &dns}).Extract()
	})
	if err != nil {
		return fmt.Errorf("updating the name servers of subnet %s: %w", p.subnetName(), err)
	}
	return nil
}

func (createRouter) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	_, network, _, _ := p.clients(ctx)
	probe := &inventory{}
	if err := within(ctx, func(ctx context.Context) error { return p.readExternal(ctx, network, probe) }); err != nil {
		return fmt.Errorf("reading the external network %s: %w", p.c.OpenStack.ExternalNet, err)
	}
	if probe.external == nil {
		return fmt.Errorf("%w: the external network %s does not exist", reconcile.ErrPrecondition, p.c.OpenStack.ExternalNet)
	}
	if err := within(ctx, func(ctx context.Context) error { return p.readRouter(ctx, network, probe) }); err != nil {
		return fmt.Errorf("reading router %s: %w", p.routerName(), err)
	}
	if probe.router != nil {
		return fmt.Errorf("%w: router %s exists now", reconcile.ErrPrecondition, p.routerName())
	}
	_, err := call(ctx, func(ctx context.Context) (*routers.Router, error) {
		return routers.Create(ctx, network, taggedRouter{routers.CreateOpts{Name: p.routerName(),
			GatewayInfo: &routers.GatewayInfo{NetworkID: probe.external.ID}}, p.tags()}).Extract()
	})
	if err != nil {
		return fmt.Errorf("creating router %s: %w", p.routerName(), err)
	}
	return nil
}

func (addRouterInterface) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	inv, err := p.fresh(ctx)
	if err != nil {
		return err
	}
	_, network, _, _ := p.clients(ctx)
	if err := within(ctx, func(ctx context.Context) error { return p.readRouter(ctx, network, inv) }); err != nil {
		return fmt.Errorf("reading router %s: %w", p.routerName(), err)
	}
	switch {
	case inv.router == nil || inv.subnet == nil:
		return fmt.Errorf("%w: router %s or subnet %s does not exist", reconcile.ErrPrecondition, p.routerName(), p.subnetName())
	case inv.routerInterface != nil:
		return nil // the interface exists: nothing to do
	}
	_, err = call(ctx, func(ctx context.Context) (*routers.InterfaceInfo, error) {
		return routers.AddInterface(ctx, network, inv.router.ID, routers.AddInterfaceOpts{SubnetID: inv.subnet.ID}).Extract()
	})
	if err != nil {
		return fmt.Errorf("adding the interface of router %s on subnet %s: %w", p.routerName(), p.subnetName(), err)
	}
	return nil
}

func (createGroup) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	inv, err := p.fresh(ctx)
	if err != nil {
		return err
	}
	if inv.group != nil {
		return fmt.Errorf("%w: security group %s exists now", reconcile.ErrPrecondition, p.groupName())
	}
	_, network, _, _ := p.clients(ctx)
	g, err := call(ctx, func(ctx context.Context) (*groups.SecGroup, error) {
		return groups.Create(ctx, network, taggedGroup{groups.CreateOpts{Name: p.groupName(),
			Description: "taloscluster: cluster " + p.c.Name}, p.tags()}).Extract()
	})
	if err != nil {
		return fmt.Errorf("creating security group %s: %w", p.groupName(), err)
	}
	// Neutron gives a new group its default egress rules; the rules the
	// plan lists are the whole set, so the defaults that are not in it
	// go at once.
	wantRules := securityRules(p.c)
	for _, r := range g.Rules {
		if slices.Contains(wantRules, ruleOf(r, g.ID)) {
			continue
		}
		if err := deleteRuleID(ctx, p, r.ID); err != nil {
			return err
		}
	}
	return nil
}

func (op createRule) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	inv, err := p.fresh(ctx)
	if err != nil {
		return err
	}
	if inv.group == nil {
		return fmt.Errorf("%w: security group %s does not exist", reconcile.ErrPrecondition, p.groupName())
	}
	for _, r := range inv.group.Rules {
		if ruleOf(r, inv.group.ID) == op.rule {
			return nil // there already (Neutron's defaults, or a rule added meanwhile)
		}
	}
	_, network, _, _ := p.clients(ctx)
	_, err = call(ctx, func(ctx context.Context) (*rules.SecGroupRule, error) {
		return rules.Create(ctx, network, op.rule.createOpts(inv.group.ID)).Extract()
	})
	if err != nil {
		return fmt.Errorf("adding the rule %q to security group %s: %w", op.rule, p.groupName(), err)
	}
	return nil
}

func (op deleteRule) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	return deleteRuleID(ctx, p, op.id)
}

func deleteRuleID(ctx context.Context, p *Provider, id string) error {
	_, network, _, _ := p.clients(ctx)
	return ignoreGone(ctx, "security group rule "+id, func(ctx context.Context) error { return rules.Delete(ctx, network, id).ExtractErr() })
}
