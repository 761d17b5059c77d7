package openstack

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/types/network"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// ErrNotImplemented is returned by every call that would talk to
// OpenStack.
var ErrNotImplemented = errors.New("the openstack provider only plans offline so far")

// Provider plans a cluster on OpenStack.
type Provider struct {
	c *spec.Cluster
}

var _ reconcile.Infra = (*Provider)(nil)

// Offline returns a provider that plans a cluster of which nothing exists.
func Offline(c *spec.Cluster) (*Provider, error) {
	if c.OpenStack == nil {
		return nil, fmt.Errorf("cluster %s has no openstack section", c.Name)
	}
	return &Provider{c: c}, nil
}

// inventory is the (always empty) inventory of an offline plan.
type inventory struct{}

func (inventory) Machines() []reconcile.Machine { return nil }

// Empty returns the inventory of a cluster of which nothing exists.
func (p *Provider) Empty() reconcile.Inventory { return inventory{} }

// Observe is not implemented yet.
func (p *Provider) Observe(context.Context) (reconcile.Inventory, error) {
	return nil, ErrNotImplemented
}

// Apply is not implemented yet.
func (p *Provider) Apply(context.Context, *reconcile.Desired, plan.Change) error {
	return ErrNotImplemented
}

// Plan lists the steps of a first build for one phase.
func (p *Provider) Plan(phase plan.Phase, want *reconcile.Desired, _ reconcile.Inventory) ([]plan.Change, error) {
	switch phase {
	case plan.PhaseImage:
		return p.planImage()
	case plan.PhaseNetwork:
		return p.planNetwork(want)
	case plan.PhaseCompute:
		return p.planCompute(want), nil
	}
	return nil, nil
}

func (p *Provider) step(phase plan.Phase, kind plan.ResourceKind, name, reason string, attrs ...plan.Attribute) plan.Change {
	return plan.Change{Phase: phase, Domain: plan.DomainProvider, Action: plan.ActionCreate,
		Resource: plan.Resource{Kind: kind, Name: name}, Reason: reason, Attributes: attrs}
}

func (p *Provider) planImage() ([]plan.Change, error) {
	id, err := machineconfig.SchematicID(p.c.BootExtensions())
	if err != nil {
		return nil, fmt.Errorf("computing the boot image schematic: %w", err)
	}
	return []plan.Change{p.step(plan.PhaseImage, plan.KindImage, fmt.Sprintf("talos-%s-%s", p.c.Talos.Version, id[:12]),
		"boot image from the Image Factory, uploaded to Glance and shared by every machine",
		plan.Attribute{Key: "factory", Value: spec.DefaultImageFactory},
		plan.Attribute{Key: "schematic", Value: id},
		plan.Attribute{Key: "talos", Value: p.c.Talos.Version})}, nil
}

func (p *Provider) planNetwork(want *reconcile.Desired) ([]plan.Change, error) {
	c := p.c
	var out []plan.Change
	add := func(kind plan.ResourceKind, name, reason string, attrs ...plan.Attribute) {
		out = append(out, p.step(plan.PhaseNetwork, kind, name, reason, attrs...))
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
	}
	add(plan.KindSecurityGroup, c.Name, "security group on every port", plan.Attribute{Key: "egress", Value: egress})
	add(plan.KindSecurityRule, c.Name+"/members", "ICMP, TCP and UDP between members of the group")
	docs, err := machineconfig.Firewall(c)
	if err != nil {
		return nil, fmt.Errorf("building the host firewall: %w", err)
	}
	for _, d := range docs {
		rc, ok := d.(*network.RuleConfigV1Alpha1)
		if !ok || strings.HasPrefix(rc.MetaName, "cluster-") {
			continue // the members rule covers traffic between nodes
		}
		var ports, sources []string
		for _, pr := range rc.PortSelector.Ports {
			if pr.Lo == pr.Hi {
				ports = append(ports, strconv.Itoa(int(pr.Lo)))
			} else {
				ports = append(ports, pr.String())
			}
		}
		for _, in := range rc.Ingress {
			sources = append(sources, in.Subnet.String())
		}
		add(plan.KindSecurityRule, c.Name+"/"+rc.MetaName, "ingress rule",
			plan.Attribute{Key: "protocol", Value: rc.PortSelector.Protocol.String()},
			plan.Attribute{Key: "ports", Value: strings.Join(ports, ",")},
			plan.Attribute{Key: "sources", Value: strings.Join(sources, ",")})
	}
	for _, m := range want.Machines {
		pair := c.Name + "-ingress"
		if m.Role() == spec.RoleControlPlane {
			pair = c.Name + "-kubeapi"
		}
		add(plan.KindPort, m.Hostname, "machine port",
			plan.Attribute{Key: "network", Value: c.Name + "-net"},
			plan.Attribute{Key: "allowed_address_pairs", Value: pair})
	}
	return out, nil
}

func (p *Provider) planCompute(want *reconcile.Desired) []plan.Change {
	var out []plan.Change
	for _, m := range want.Machines {
		pool := m.Pool
		out = append(out, p.step(plan.PhaseCompute, plan.KindMachine, m.Hostname, "new "+string(pool.Role)+" with its machine config as user data",
			plan.Attribute{Key: "pool", Value: pool.Name},
			plan.Attribute{Key: "flavor", Value: pool.Flavor},
			plan.Attribute{Key: "disk", Value: fmt.Sprintf("%d GB", pool.Disk)},
			plan.Attribute{Key: "availability_zone", Value: p.c.OpenStack.AvailabilityZone},
			plan.Attribute{Key: "talos", Value: p.c.Talos.Version},
			plan.Attribute{Key: "kubernetes", Value: p.c.Kubernetes.Version}))
	}
	return out
}
