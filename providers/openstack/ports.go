package openstack

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"

	"github.com/taloscluster/taloscluster/reconcile"
)

// notFound reports whether err is OpenStack's 404.
func notFound(err error) bool {
	return gophercloud.ResponseCodeIs(err, http.StatusNotFound)
}

func (op createPort) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	inv, err := p.fresh(ctx)
	if err != nil {
		return err
	}
	switch {
	case inv.network == nil || inv.subnet == nil:
		return fmt.Errorf("%w: network %s or subnet %s does not exist", reconcile.ErrPrecondition, p.netName(), p.subnetName())
	case inv.group == nil:
		return fmt.Errorf("%w: security group %s does not exist", reconcile.ErrPrecondition, p.groupName())
	}
	if _, ok, err := p.port(ctx, op.name); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("%w: port %s exists now", reconcile.ErrPrecondition, op.name)
	}
	opts := ports.CreateOpts{NetworkID: inv.network.ID, Name: op.name, Description: "taloscluster: cluster " + p.c.Name,
		FixedIPs: []ports.IP{{SubnetID: inv.subnet.ID}}, SecurityGroups: &[]string{inv.group.ID}, MACAddress: op.mac}
	tags := p.tags()
	if op.machine {
		vip, err := p.vipOf(ctx, op.pair)
		if err != nil {
			return err
		}
		opts.AllowedAddressPairs = []ports.AddressPair{{IPAddress: vip}}
		tags = append(tags, "role="+string(op.role), "pool="+op.pool)
	}
	_, network, _, _ := p.clients(ctx)
	_, err = call(ctx, func(ctx context.Context) (*ports.Port, error) {
		return ports.Create(ctx, network, taggedPort{opts, tags}).Extract()
	})
	if err != nil {
		return fmt.Errorf("creating port %s: %w", op.name, err)
	}
	return nil
}

// vipOf is the fixed address of a reserved port, read now.
func (p *Provider) vipOf(ctx context.Context, reserved string) (string, error) {
	port, ok, err := p.port(ctx, reserved)
	if err != nil {
		return "", err
	}
	addr, hasAddr := fixedAddr(port)
	if !ok || !hasAddr {
		return "", fmt.Errorf("%w: the reserved port %s does not exist or has no fixed address", reconcile.ErrPrecondition, reserved)
	}
	return addr.String(), nil
}

func (op updatePort) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	inv, err := p.fresh(ctx)
	if err != nil {
		return err
	}
	if inv.group == nil {
		return fmt.Errorf("%w: security group %s does not exist", reconcile.ErrPrecondition, p.groupName())
	}
	port, ok, err := p.port(ctx, op.name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: port %s does not exist", reconcile.ErrPrecondition, op.name)
	}
	groups := port.SecurityGroups
	if !slices.Contains(groups, inv.group.ID) {
		groups = append(groups, inv.group.ID)
	}
	opts := ports.UpdateOpts{SecurityGroups: &groups}
	if op.pair != "" {
		vip, err := p.vipOf(ctx, op.pair)
		if err != nil {
			return err
		}
		pairs := port.AllowedAddressPairs
		found := false
		for _, ap := range pairs {
			found = found || ap.IPAddress == vip
		}
		if !found {
			pairs = append(pairs, ports.AddressPair{IPAddress: vip})
		}
		opts.AllowedAddressPairs = &pairs
	}
	_, network, _, _ := p.clients(ctx)
	_, err = call(ctx, func(ctx context.Context) (*ports.Port, error) {
		return ports.Update(ctx, network, port.ID, opts).Extract()
	})
	if err != nil {
		return fmt.Errorf("updating port %s: %w", op.name, err)
	}
	return nil
}

// apply deletes a machine port whose machine has no server, checked now.
func (op deletePort) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	port, ok, err := p.port(ctx, op.name)
	if err != nil || !ok {
		return err
	}
	if s, found, err := p.server(ctx, op.name); err != nil {
		return err
	} else if found {
		return fmt.Errorf("%w: server %s (%s) exists now; its port goes with it in a scale-down", reconcile.ErrPrecondition, op.name, s.ID)
	}
	if port.DeviceID != "" {
		return fmt.Errorf("%w: port %s is attached to %s %s", reconcile.ErrPrecondition, op.name, port.DeviceOwner, port.DeviceID)
	}
	return p.deletePortID(ctx, op.name, port.ID)
}

func (p *Provider) deletePortID(ctx context.Context, name, id string) error {
	_, network, _, _ := p.clients(ctx)
	return ignoreGone(ctx, "port "+name, func(ctx context.Context) error { return ports.Delete(ctx, network, id).ExtractErr() })
}

// floatingIP reads the cluster's floating IP of a reserved port now.
func (p *Provider) floatingIP(ctx context.Context, port string) (floatingips.FloatingIP, bool, error) {
	_, network, _, err := p.clients(ctx)
	if err != nil {
		return floatingips.FloatingIP{}, false, err
	}
	inv := &inventory{fips: map[string]floatingips.FloatingIP{}}
	if err := within(ctx, func(ctx context.Context) error { return p.readFloatingIPs(ctx, network, inv) }); err != nil {
		return floatingips.FloatingIP{}, false, fmt.Errorf("reading the floating IP of %s: %w", port, err)
	}
	fip, ok := inv.fips[port]
	return fip, ok, nil
}

func (op createFloatingIP) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	if _, ok, err := p.floatingIP(ctx, op.port); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("%w: the floating IP of %s exists now", reconcile.ErrPrecondition, op.port)
	}
	port, ok, err := p.port(ctx, op.port)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: the reserved port %s does not exist", reconcile.ErrPrecondition, op.port)
	}
	_, network, _, _ := p.clients(ctx)
	probe := &inventory{}
	if err := within(ctx, func(ctx context.Context) error { return p.readExternal(ctx, network, probe) }); err != nil {
		return fmt.Errorf("reading the external network %s: %w", p.c.OpenStack.ExternalNet, err)
	}
	if probe.external == nil {
		return fmt.Errorf("%w: the external network %s does not exist", reconcile.ErrPrecondition, p.c.OpenStack.ExternalNet)
	}
	_, err = call(ctx, func(ctx context.Context) (*floatingips.FloatingIP, error) {
		return floatingips.Create(ctx, network, taggedFloatingIP{floatingips.CreateOpts{FloatingNetworkID: probe.external.ID,
			PortID: port.ID, Description: op.port}, p.tags()}).Extract()
	})
	if err != nil {
		return fmt.Errorf("creating the floating IP of %s on %s: %w", op.port, p.c.OpenStack.ExternalNet, err)
	}
	return nil
}

func (op associateFloatingIP) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	fip, ok, err := p.floatingIP(ctx, op.port)
	if err != nil {
		return err
	}
	port, portOK, err := p.port(ctx, op.port)
	if err != nil {
		return err
	}
	if !ok || !portOK {
		return fmt.Errorf("%w: the floating IP of %s or the port itself does not exist", reconcile.ErrPrecondition, op.port)
	}
	if fip.PortID == port.ID {
		return nil
	}
	_, network, _, _ := p.clients(ctx)
	id := port.ID
	_, err = call(ctx, func(ctx context.Context) (*floatingips.FloatingIP, error) {
		return floatingips.Update(ctx, network, fip.ID, floatingips.UpdateOpts{PortID: &id}).Extract()
	})
	if err != nil {
		return fmt.Errorf("associating the floating IP %s with %s: %w", fip.FloatingIP, op.port, err)
	}
	return nil
}
