package openstack

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// planDestroy deletes, in this order, every server of the cluster with
// its boot volume and port, the ports left, the floating IPs, the router's
// interface and the router, the subnet and network, and the security
// group. The boot image is shared by other clusters and stays.
func (p *Provider) planDestroy(inv *inventory) []plan.Change {
	var out []plan.Change
	add := func(kind plan.ResourceKind, name, reason string, op step) {
		out = append(out, p.change(plan.PhaseDestroy, plan.ActionDelete, kind, name, "destroy: "+reason, op))
	}
	for _, name := range slices.Sorted(maps.Keys(inv.servers)) {
		add(plan.KindMachine, name, "the server, its boot volume and its port are deleted", deleteServer{hostname: name, id: inv.servers[name].ID})
	}
	for _, name := range slices.Sorted(maps.Keys(inv.ports)) {
		if _, ok := inv.servers[name]; ok {
			continue
		}
		add(plan.KindPort, name, "the port is deleted", destroyPort{name: name})
	}
	for _, name := range slices.Sorted(maps.Keys(inv.fips)) {
		fip := inv.fips[name]
		add(plan.KindFloatingIP, name, "the floating IP "+fip.FloatingIP+" is released", deleteFloatingIP{id: fip.ID, name: name})
	}
	if inv.router != nil {
		if inv.routerInterface != nil && inv.subnet != nil {
			add(plan.KindRouter, p.routerName()+"/"+p.subnetName(), "the router's interface on the cluster subnet is removed", removeRouterInterface{router: inv.router.ID, subnet: inv.subnet.ID})
		}
		add(plan.KindRouter, p.routerName(), "the router is deleted", deleteRouter{id: inv.router.ID})
	}
	if inv.network != nil {
		if inv.subnet != nil {
			add(plan.KindSubnet, p.subnetName(), "the subnet is deleted", deleteSubnet{id: inv.subnet.ID})
		}
		add(plan.KindNetwork, p.netName(), "the network is deleted", deleteNetwork{id: inv.network.ID})
	}
	if inv.group != nil {
		add(plan.KindSecurityGroup, p.groupName(), "the security group is deleted", deleteGroup{id: inv.group.ID})
	}
	return out
}

type (
	destroyPort           struct{ name string }
	deleteFloatingIP      struct{ id, name string }
	removeRouterInterface struct{ router, subnet string }
	deleteRouter          struct{ id string }
	deleteSubnet          struct{ id string }
	deleteNetwork         struct{ id string }
	deleteGroup           struct{ id string }
)

// ignoreGone runs a delete and takes "not found" for done.
func ignoreGone(ctx context.Context, what string, del func(ctx context.Context) error) error {
	if err := within(ctx, del); err != nil && !notFound(err) {
		return fmt.Errorf("deleting %s: %w", what, err)
	}
	return nil
}

func (op destroyPort) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	port, ok, err := p.port(ctx, op.name)
	if err != nil || !ok {
		return err
	}
	return p.deletePortID(ctx, op.name, port.ID)
}

func (op deleteFloatingIP) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	_, network, _, _ := p.clients(ctx)
	return ignoreGone(ctx, "the floating IP of "+op.name, func(ctx context.Context) error {
		return floatingips.Delete(ctx, network, op.id).ExtractErr()
	})
}

func (op removeRouterInterface) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	_, network, _, _ := p.clients(ctx)
	return ignoreGone(ctx, "the interface of router "+p.routerName(), func(ctx context.Context) error {
		_, err := routers.RemoveInterface(ctx, network, op.router, routers.RemoveInterfaceOpts{SubnetID: op.subnet}).Extract()
		return err
	})
}

func (op deleteRouter) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	_, network, _, _ := p.clients(ctx)
	return ignoreGone(ctx, "router "+p.routerName(), func(ctx context.Context) error { return routers.Delete(ctx, network, op.id).ExtractErr() })
}

func (op deleteSubnet) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	_, network, _, _ := p.clients(ctx)
	return ignoreGone(ctx, "subnet "+p.subnetName(), func(ctx context.Context) error { return subnets.Delete(ctx, network, op.id).ExtractErr() })
}

func (op deleteNetwork) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	_, network, _, _ := p.clients(ctx)
	return ignoreGone(ctx, "network "+p.netName(), func(ctx context.Context) error { return networks.Delete(ctx, network, op.id).ExtractErr() })
}

func (op deleteGroup) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	_, network, _, _ := p.clients(ctx)
	return ignoreGone(ctx, "security group "+p.groupName(), func(ctx context.Context) error { return groups.Delete(ctx, network, op.id).ExtractErr() })
}
