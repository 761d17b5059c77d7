package openstack

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/availabilityzones"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"github.com/taloscluster/taloscluster/reconcile"
)

// Observe reads, without changing anything, what the cluster owns: its
// network objects, ports, floating IPs, servers and the boot image, plus
// the flavors and zones the validation checks against.
func (p *Provider) Observe(ctx context.Context) (reconcile.Inventory, error) {
	compute, network, image, err := p.clients(ctx)
	if err != nil {
		return nil, err
	}
	inv := &inventory{ports: map[string]ports.Port{}, fips: map[string]floatingips.FloatingIP{}, servers: map[string]servers.Server{}}
	reads := []struct {
		what string
		f    func(ctx context.Context) error
	}{
		{"the external network " + p.c.OpenStack.ExternalNet, func(ctx context.Context) error { return p.readExternal(ctx, network, inv) }},
		{"the cluster network", func(ctx context.Context) error { return p.readNetwork(ctx, network, inv) }},
		{"the cluster router", func(ctx context.Context) error { return p.readRouter(ctx, network, inv) }},
		{"the security group", func(ctx context.Context) error { return p.readGroup(ctx, network, inv) }},
		{"the cluster's ports", func(ctx context.Context) error { return p.readPorts(ctx, network, inv) }},
		{"the floating IPs", func(ctx context.Context) error { return p.readFloatingIPs(ctx, network, inv) }},
		{"the servers", func(ctx context.Context) error { return p.readServers(ctx, compute, inv) }},
		{"the flavors and availability zones", func(ctx context.Context) error { return p.readCompute(ctx, compute, inv) }},
		{"the boot image", func(ctx context.Context) error { return p.readImage(ctx, image, inv) }},
	}
	for _, r := range reads {
		if err := within(ctx, r.f); err != nil {
			return nil, fmt.Errorf("reading %s: %w", r.what, p.clean(err))
		}
	}
	return inv, nil
}

// ReadMachines (reconcile.MachineReader) reads the cluster's servers and
// ports only (two lists, whatever the number of machines) and returns the
// named machines.
func (p *Provider) ReadMachines(ctx context.Context, hostnames []string) ([]reconcile.Machine, error) {
	compute, network, _, err := p.clients(ctx)
	if err != nil {
		return nil, err
	}
	inv := &inventory{ports: map[string]ports.Port{}, servers: map[string]servers.Server{}}
	if err := within(ctx, func(ctx context.Context) error { return p.readServers(ctx, compute, inv) }); err != nil {
		return nil, fmt.Errorf("reading the servers: %w", p.clean(err))
	}
	if err := within(ctx, func(ctx context.Context) error { return p.readPorts(ctx, network, inv) }); err != nil {
		return nil, fmt.Errorf("reading the cluster's ports: %w", p.clean(err))
	}
	var out []reconcile.Machine
	for _, m := range inv.Machines() {
		if slices.Contains(hostnames, m.Hostname) {
			out = append(out, m)
		}
	}
	return out, nil
}

// all reads every page of a list.
func all[T any](ctx context.Context, pager pagination.Pager, extract func(pagination.Page) ([]T, error)) ([]T, error) {
	page, err := pager.AllPages(ctx)
	if err != nil {
		return nil, err
	}
	return extract(page)
}

func (p *Provider) readExternal(ctx context.Context, network *gophercloud.ServiceClient, inv *inventory) error {
	yes := true
	nets, err := all(ctx, networks.List(network, external.ListOptsExt{
		ListOptsBuilder: networks.ListOpts{Name: p.c.OpenStack.ExternalNet}, External: &yes}), networks.ExtractNetworks)
	if err != nil {
		return err
	}
	if len(nets) > 0 {
		inv.external = &nets[0]
	}
	return nil
}

func (p *Provider) readNetwork(ctx context.Context, network *gophercloud.ServiceClient, inv *inventory) error {
	nets, err := all(ctx, networks.List(network, networks.ListOpts{Name: p.netName(), ProjectID: p.project}), networks.ExtractNetworks)
	if err != nil {
		return err
	}
	for i := range nets {
		if owned(nets[i].Tags, p.c.Name) {
			inv.network = &nets[i]
		} else {
			inv.foreign = append(inv.foreign, "network "+nets[i].Name+" ("+nets[i].ID+")")
		}
	}
	if inv.network == nil {
		return nil
	}
	subs, err := all(ctx, subnets.List(network, subnets.ListOpts{NetworkID: inv.network.ID, ProjectID: p.project}), subnets.ExtractSubnets)
	if err != nil {
		return err
	}
	for i := range subs {
		if subs[i].Name == p.subnetName() && owned(subs[i].Tags, p.c.Name) {
			inv.subnet = &subs[i]
		}
	}
	return nil
}

func (p *Provider) readRouter(ctx context.Context, network *gophercloud.ServiceClient, inv *inventory) error {
	rs, err := all(ctx, routers.List(network, routers.ListOpts{Name: p.routerName(), ProjectID: p.project}), routers.ExtractRouters)
	if err != nil {
		return err
	}
	for i := range rs {
		if owned(rs[i].Tags, p.c.Name) {
			inv.router = &rs[i]
		} else {
			inv.foreign = append(inv.foreign, "router "+rs[i].Name+" ("+rs[i].ID+")")
		}
	}
	if inv.router == nil || inv.subnet == nil {
		return nil
	}
	// Any of the router's ports with an address on the subnet: its owner
	// is network:router_interface, or network:router_interface_distributed
	// (DVR), or network:ha_router_replicated_interface (L3 HA).
	ifaces, err := all(ctx, ports.List(network, ports.ListOpts{DeviceID: inv.router.ID}), ports.ExtractPorts)
	if err != nil {
		return err
	}
	for i := range ifaces {
		if slices.ContainsFunc(ifaces[i].FixedIPs, func(ip ports.IP) bool { return ip.SubnetID == inv.subnet.ID }) {
			inv.routerInterface = &ifaces[i]
		}
	}
	return nil
}

func (p *Provider) readGroup(ctx context.Context, network *gophercloud.ServiceClient, inv *inventory) error {
	gs, err := all(ctx, groups.List(network, groups.ListOpts{Name: p.groupName(), ProjectID: p.project}), groups.ExtractGroups)
	if err != nil {
		return err
	}
	for i := range gs {
		if owned(gs[i].Tags, p.c.Name) {
			inv.group = &gs[i]
		} else {
			inv.foreign = append(inv.foreign, "security group "+gs[i].Name+" ("+gs[i].ID+")")
		}
	}
	return nil
}

func (p *Provider) readPorts(ctx context.Context, network *gophercloud.ServiceClient, inv *inventory) error {
	ps, err := all(ctx, ports.List(network, ports.ListOpts{Tags: clusterTag(p.c.Name), ProjectID: p.project}), ports.ExtractPorts)
	if err != nil {
		return err
	}
	for _, port := range ps {
		if !owned(port.Tags, p.c.Name) {
			continue
		}
		if _, dup := inv.ports[port.Name]; dup {
			inv.duplicates = append(inv.duplicates, "port "+port.Name+" ("+port.ID+")")
			continue
		}
		inv.ports[port.Name] = port
	}
	return nil
}

func (p *Provider) readFloatingIPs(ctx context.Context, network *gophercloud.ServiceClient, inv *inventory) error {
	fs, err := all(ctx, floatingips.List(network, floatingips.ListOpts{Tags: clusterTag(p.c.Name), ProjectID: p.project}), floatingips.ExtractFloatingIPs)
	if err != nil {
		return err
	}
	for _, fip := range fs {
		if !owned(fip.Tags, p.c.Name) {
			continue
		}
		// The description names the reserved port the address is for,
		// so an address whose association was lost is found again.
		if _, dup := inv.fips[fip.Description]; dup {
			inv.duplicates = append(inv.duplicates, "floating IP "+fip.FloatingIP+" of "+fip.Description)
			continue
		}
		inv.fips[fip.Description] = fip
	}
	return nil
}

func (p *Provider) readServers(ctx context.Context, compute *gophercloud.ServiceClient, inv *inventory) error {
	ss, err := all(ctx, servers.List(compute, servers.ListOpts{Tags: clusterTag(p.c.Name)}), servers.ExtractServers)
	if err != nil {
		return err
	}
	for _, s := range ss {
		if !owned(tagsOf(s), p.c.Name) {
			continue
		}
		if _, dup := inv.servers[s.Name]; dup {
			inv.duplicates = append(inv.duplicates, "server "+s.Name+" ("+s.ID+")")
			continue
		}
		inv.servers[s.Name] = s
	}
	return nil
}

func (p *Provider) readCompute(ctx context.Context, compute *gophercloud.ServiceClient, inv *inventory) error {
	fl, err := all(ctx, flavors.ListDetail(compute, nil), flavors.ExtractFlavors)
	if err != nil {
		return err
	}
	inv.flavors = map[string]string{}
	for _, f := range fl {
		inv.flavors[f.Name] = f.ID
	}
	zs, err := all(ctx, availabilityzones.List(compute), availabilityzones.ExtractAvailabilityZones)
	if err != nil {
		return err
	}
	for _, z := range zs {
		if z.ZoneState.Available {
			inv.zones = append(inv.zones, z.ZoneName)
		}
	}
	return nil
}

func (p *Provider) readImage(ctx context.Context, image *gophercloud.ServiceClient, inv *inventory) error {
	name, err := p.imageName()
	if err != nil {
		return err
	}
	// Only the project's own images made by taloscluster: an image of
	// that name someone else published is not trusted to boot from.
	imgs, err := all(ctx, images.List(image, images.ListOpts{Name: name, Owner: p.project, Tags: []string{tagManaged}}), images.ExtractImages)
	if err != nil {
		return err
	}
	for i := range imgs {
		switch imgs[i].Status {
		case images.ImageStatusKilled, images.ImageStatusDeactivated:
			inv.failedImages = append(inv.failedImages, imgs[i])
			continue
		}
		// An active image wins over one still being uploaded.
		if inv.image == nil || (imgs[i].Status == images.ImageStatusActive && inv.image.Status != images.ImageStatusActive) {
			inv.image = &imgs[i]
		}
	}
	return nil
}

// APIEndpoint (reconcile.Endpointer) is the kubeapi port's fixed address,
// the VIP the control planes share, with its floating IP in front.
func (p *Provider) APIEndpoint(have reconcile.Inventory) (vip, public netip.Addr, ok bool) {
	return portEndpoint(have, p.kubeapiName())
}

// IngressEndpoint (reconcile.Ingresser) is the ingress port's fixed
// address and its floating IP.
func (p *Provider) IngressEndpoint(have reconcile.Inventory) (vip, public netip.Addr, ok bool) {
	return portEndpoint(have, p.ingressName())
}

// portEndpoint is a reserved port's fixed address and the floating IP in
// front of it (invalid while it has none). A floating IP that came off
// its port is still the port's address: the network phase puts it back.
func portEndpoint(have reconcile.Inventory, name string) (vip, public netip.Addr, ok bool) {
	inv, isOurs := have.(*inventory)
	if !isOurs {
		return netip.Addr{}, netip.Addr{}, false
	}
	port, found := inv.ports[name]
	if !found {
		return netip.Addr{}, netip.Addr{}, false
	}
	vip, ok = fixedAddr(port)
	if fip, found := inv.fips[name]; found {
		public, _ = netip.ParseAddr(fip.FloatingIP)
	}
	return vip, public, ok
}

// ProjectName (reconcile.Projecter) is the name of the application
// credential's project, as Keystone's token gave it; "" before the provider
// authenticated.
func (p *Provider) ProjectName() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.projectName
}

// Names of the cluster's OpenStack objects.
func (p *Provider) netName() string     { return p.c.Name + "-net" }
func (p *Provider) subnetName() string  { return p.c.Name + "-subnet" }
func (p *Provider) routerName() string  { return p.c.Name + "-router" }
func (p *Provider) groupName() string   { return p.c.Name }
func (p *Provider) kubeapiName() string { return p.c.Name + "-kubeapi" }
func (p *Provider) ingressName() string { return p.c.Name + "-ingress" }

// tags are the ownership tags of a cluster object.
func (p *Provider) tags() []string { return []string{tagManaged, clusterTag(p.c.Name)} }
