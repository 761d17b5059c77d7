package openstack

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

func refuse(kind plan.ResourceKind, name, reason string) plan.Change {
	return plan.Change{Phase: plan.PhaseValidate, Action: plan.ActionRefuse,
		Resource: plan.Resource{Kind: kind, Name: name}, Reason: reason}
}

// planValidate refuses, before any mutation, what cannot be done: servers
// are create-only (flavor, disk and availability zone are fixed at
// creation), the external network, flavors and zone must exist, the
// subnet's range is fixed, and resources of the cluster's names that it
// does not own are not taken over.
func (p *Provider) planValidate(want *reconcile.Desired, inv *inventory) []plan.Change {
	if inv.offline || inv.servers == nil {
		return nil
	}
	o := p.c.OpenStack
	var out []plan.Change
	if inv.external == nil {
		out = append(out, refuse(plan.KindNetwork, o.ExternalNet, fmt.Sprintf("openstack.external_net: there is no external network named %q", o.ExternalNet)))
	}
	if !slices.Contains(inv.zones, o.AvailabilityZone) {
		have := strings.Join(inv.zones, ", ")
		if have == "" {
			have = "none available"
		}
		out = append(out, refuse(plan.KindCluster, p.c.Name, fmt.Sprintf("openstack.availability_zone: Nova has no available zone %q (it has %s)", o.AvailabilityZone, have)))
	}
	if inv.router != nil && inv.external != nil && inv.router.GatewayInfo.NetworkID != "" && inv.router.GatewayInfo.NetworkID != inv.external.ID {
		out = append(out, refuse(plan.KindRouter, p.routerName(), fmt.Sprintf("openstack.external_net is %s (%s) but router %s has its gateway on network %s: moving the router, and the floating IPs with it, is not done in place",
			o.ExternalNet, inv.external.ID, p.routerName(), inv.router.GatewayInfo.NetworkID)))
	}
	for _, pool := range p.c.Pools() {
		if _, ok := inv.flavors[pool.Flavor]; inv.flavors != nil && !ok {
			key := "workers." + pool.Name + ".flavor"
			if pool.Role == spec.RoleControlPlane {
				key = "controlplane.flavor"
			}
			out = append(out, refuse(plan.KindCluster, p.c.Name, fmt.Sprintf("%s: Nova has no flavor %q", key, pool.Flavor)))
		}
	}
	if inv.subnet != nil && inv.subnet.CIDR != p.c.Network.Cluster.CIDR.Masked().String() {
		out = append(out, refuse(plan.KindSubnet, p.subnetName(), fmt.Sprintf("network.cluster.cidr is %s but subnet %s has %s: a subnet's range cannot change, and the nodes' addresses are in it",
			p.c.Network.Cluster.CIDR.Masked(), p.subnetName(), inv.subnet.CIDR)))
	}
	for _, d := range inv.duplicates {
		out = append(out, refuse(plan.KindCluster, p.c.Name, d+" shares its name with another of the cluster's: which one is the machine's cannot be told; delete the one that is not in use"))
	}
	for _, f := range inv.foreign {
		out = append(out, refuse(plan.KindCluster, p.c.Name, f+" has one of the cluster's names but not its tags ("+tagManaged+", "+clusterTag(p.c.Name)+"): taloscluster does not take over what it did not create; rename or delete it"))
	}
	for _, m := range want.Machines {
		s, ok := inv.servers[m.Hostname]
		if !ok {
			continue
		}
		if have := serverFlavor(s); have != "" && have != m.Pool.Flavor {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("flavor %s -> %s: servers are create-only on OpenStack; a new flavor needs a new server (scale the pool down and up, or use a new pool)", have, m.Pool.Flavor)))
		}
		if have := serverDisk(s); have != 0 && have != m.Pool.Disk {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("disk %d GB -> %d GB: servers are create-only on OpenStack; its boot volume keeps the size it was created with", have, m.Pool.Disk)))
		}
		if s.AvailabilityZone != "" && s.AvailabilityZone != o.AvailabilityZone {
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("availability zone %s -> %s: servers are create-only on OpenStack; a server cannot move to another zone", s.AvailabilityZone, o.AvailabilityZone)))
		}
		if s.Status == "ERROR" {
			fault := s.Fault.Message
			if fault == "" {
				fault = "no fault recorded"
			}
			out = append(out, refuse(plan.KindMachine, m.Hostname, fmt.Sprintf("the server is in ERROR (%s): delete server %s (%s), then converge creates it again", fault, m.Hostname, s.ID)))
		}
	}
	return out
}

// planCompute creates the servers of the machines that have none.
func (p *Provider) planCompute(want *reconcile.Desired, inv *inventory) ([]plan.Change, error) {
	var out []plan.Change
	for _, m := range want.Machines {
		if s, ok := inv.servers[m.Hostname]; ok {
			if s.Status == "SHUTOFF" {
				out = append(out, p.change(plan.PhaseCompute, plan.ActionUpdate, plan.KindMachine, m.Hostname,
					"the server is stopped: start it", startServer{hostname: m.Hostname, id: s.ID},
					plan.Attribute{Key: "status", Value: "SHUTOFF -> ACTIVE"}))
			}
			continue
		}
		pool := m.Pool
		what := "new " + string(pool.Role)
		if inv.replaced[m.Hostname] {
			// A remediation's replacement says so in each of its steps.
			what = "remediation: a new server of the same name for the " + string(pool.Role) + " deleted above, on its port,"
		}
		out = append(out, p.change(plan.PhaseCompute, plan.ActionCreate, plan.KindMachine, m.Hostname,
			what+" booted from a volume of the boot image, its machine config as user data",
			createServer{hostname: m.Hostname, role: m.Role(), pool: pool.Name, flavor: pool.Flavor, disk: pool.Disk},
			plan.Attribute{Key: "pool", Value: pool.Name},
			plan.Attribute{Key: "flavor", Value: pool.Flavor},
			plan.Attribute{Key: "disk", Value: fmt.Sprintf("%d GB", pool.Disk)},
			plan.Attribute{Key: "availability_zone", Value: p.c.OpenStack.AvailabilityZone},
			plan.Attribute{Key: "port", Value: m.Hostname},
			plan.Attribute{Key: "talos", Value: p.c.Talos.Version},
			plan.Attribute{Key: "kubernetes", Value: p.c.Kubernetes.Version}))
	}
	return out, nil
}

// configDrive asks Nova for a config drive on every server.
var configDrive = true

type createServer struct {
	hostname string
	role     spec.Role
	pool     string
	flavor   string
	disk     int
}

// server reads one of the cluster's servers by name now.
func (p *Provider) server(ctx context.Context, name string) (servers.Server, bool, error) {
	compute, _, _, err := p.clients(ctx)
	if err != nil {
		return servers.Server{}, false, err
	}
	ss, err := call(ctx, func(ctx context.Context) ([]servers.Server, error) {
		// name is a regular expression to Nova: anchor it and match
		// exactly below.
		return all(ctx, servers.List(compute, servers.ListOpts{Name: "^" + regexp.QuoteMeta(name) + "$", Tags: clusterTag(p.c.Name)}), servers.ExtractServers)
	})
	if err != nil {
		return servers.Server{}, false, fmt.Errorf("reading server %s: %w", name, err)
	}
	for _, s := range ss {
		if s.Name == name && owned(tagsOf(s), p.c.Name) {
			return s, true, nil
		}
	}
	return servers.Server{}, false, nil
}

// apply creates the server on its port, booted from a new volume of the
// boot image, and waits until it leaves BUILD: ACTIVE, or ERROR with
// Nova's fault.
func (op createServer) apply(ctx context.Context, p *Provider, want *reconcile.Desired) error {
	config, ok := want.Configs[op.hostname]
	if !ok {
		return fmt.Errorf("%w: no machine config for %s", reconcile.ErrPrecondition, op.hostname)
	}
	if _, found, err := p.server(ctx, op.hostname); err != nil {
		return err
	} else if found {
		return fmt.Errorf("%w: server %s exists now", reconcile.ErrPrecondition, op.hostname)
	}
	port, ok, err := p.port(ctx, op.hostname)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: port %s does not exist", reconcile.ErrPrecondition, op.hostname)
	}
	if port.DeviceID != "" {
		return fmt.Errorf("%w: port %s is attached to %s %s", reconcile.ErrPrecondition, op.hostname, port.DeviceOwner, port.DeviceID)
	}
	compute, _, image, _ := p.clients(ctx)
	inv := &inventory{}
	if err := within(ctx, func(ctx context.Context) error { return p.readImage(ctx, image, inv) }); err != nil {
		return fmt.Errorf("reading the boot image: %w", err)
	}
	if err := within(ctx, func(ctx context.Context) error { return p.readCompute(ctx, compute, inv) }); err != nil {
		return fmt.Errorf("reading the flavors: %w", err)
	}
	if inv.image == nil || inv.image.Status != images.ImageStatusActive {
		return fmt.Errorf("%w: the boot image is not active in Glance", reconcile.ErrPrecondition)
	}
	flavorID, ok := inv.flavors[op.flavor]
	if !ok {
		return fmt.Errorf("%w: Nova has no flavor %q", reconcile.ErrPrecondition, op.flavor)
	}
	opts := servers.CreateOpts{
		Name:             op.hostname,
		FlavorRef:        flavorID,
		AvailabilityZone: p.c.OpenStack.AvailabilityZone,
		Networks:         []servers.Network{{Port: port.ID}},
		// The machine config reaches Talos on the config drive: the
		// security group keeps the metadata service out of reach
		// (openstack.metadata false).
		ConfigDrive: &configDrive,
		// Encoded here, so gophercloud sends it as it is.
		UserData: []byte(base64.StdEncoding.EncodeToString(config)),
		Metadata: map[string]string{metaDisk: strconv.Itoa(op.disk)},
		Tags:     append(p.tags(), "role="+string(op.role), "pool="+op.pool),
		BlockDevice: []servers.BlockDevice{{SourceType: servers.SourceImage, UUID: inv.image.ID, BootIndex: 0,
			DestinationType: servers.DestinationVolume, VolumeSize: op.disk, DeleteOnTermination: true}},
	}
	created, err := call(ctx, func(ctx context.Context) (*servers.Server, error) {
		return servers.Create(ctx, compute, opts, nil).Extract()
	})
	if err != nil {
		return fmt.Errorf("creating server %s: %w", op.hostname, err)
	}
	p.log.Info("created server", "cluster", p.c.Name, "server", op.hostname, "id", created.ID)
	return p.waitServer(ctx, created.ID, op.hostname, "ACTIVE")
}

// waitServer waits, on fresh reads of the one server, until it is in
// status want with no task under way; ERROR ends the wait with Nova's
// fault, and "DELETED" waits until the server is gone.
func (p *Provider) waitServer(ctx context.Context, id, name, want string) error {
	compute, _, _, err := p.clients(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, BuildTimeout)
	defer cancel()
	last := ""
	for {
		s, err := call(ctx, func(ctx context.Context) (*servers.Server, error) { return servers.Get(ctx, compute, id).Extract() })
		switch {
		case err != nil && notFound(err) && want == "DELETED":
			return nil
		case err != nil && notFound(err):
			return fmt.Errorf("server %s (%s) is gone", name, id)
		case err == nil:
			last = s.Status
			if s.Status == want && s.TaskState == "" {
				return nil
			}
			if s.Status == "SOFT_DELETED" && want == "DELETED" {
				// A cloud that defers deletes (reclaim_instance_interval)
				// keeps the server restorable: it goes now.
				if err := ignoreGone(ctx, "server "+name+" ("+id+")", func(ctx context.Context) error {
					return servers.ForceDelete(ctx, compute, id).ExtractErr()
				}); err != nil {
					return err
				}
			}
			if s.Status == "ERROR" && want != "DELETED" {
				return fmt.Errorf("server %s (%s) is in ERROR: %s", name, id, s.Fault.Message)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for server %s (%s) to be %s (it is %s): %w", name, id, want, last, ctx.Err())
		case <-time.After(p.poll):
		}
	}
}

// PlanRemove (reconcile.Remover) deletes a machine's server with its boot
// volume, then its port; the engine drains and resets the node first.
func (p *Provider) PlanRemove(hostname string, have reconcile.Inventory) []plan.Change {
	inv, ok := have.(*inventory)
	if !ok {
		return nil
	}
	s, ok := inv.servers[hostname]
	if !ok {
		return nil
	}
	return []plan.Change{{Phase: plan.PhaseScaleDown, Domain: plan.DomainProvider, Action: plan.ActionDelete,
		Resource:   plan.Resource{Kind: plan.KindMachine, Name: hostname},
		Reason:     "delete the server with its boot volume, then its port",
		Attributes: []plan.Attribute{{Key: "server", Value: s.ID}},
		Expects:    fmt.Sprintf("server %s is still %s, owned by the cluster", s.ID, hostname),
		Op:         deleteServer{hostname: hostname, id: s.ID}}}
}

// deleteServer deletes a machine's server with its boot volume and waits
// until it is gone, then its port unless keepPort (a replacement: the new
// server boots on the same port, with the same address).
type deleteServer struct {
	hostname, id string
	keepPort     bool
}

// PlanReplace (reconcile.Replacer) replaces a machine that stays in
// cluster.yaml: its server is deleted (after the engine drained and reset
// the node) and its port kept, so the compute phase, planned from the
// inventory without the server, boots a new server on the same port and
// address.
func (p *Provider) PlanReplace(hostname string, have reconcile.Inventory) ([]plan.Change, reconcile.Inventory) {
	inv, ok := have.(*inventory)
	if !ok {
		return nil, have
	}
	s, ok := inv.servers[hostname]
	if !ok {
		return nil, have
	}
	after := *inv
	after.servers = maps.Clone(inv.servers)
	delete(after.servers, hostname)
	after.replaced = maps.Clone(inv.replaced)
	if after.replaced == nil {
		after.replaced = map[string]bool{}
	}
	after.replaced[hostname] = true
	return []plan.Change{{Phase: plan.PhaseScaleDown, Domain: plan.DomainProvider, Action: plan.ActionDelete,
		Resource:   plan.Resource{Kind: plan.KindMachine, Name: hostname},
		Reason:     "delete the server with its boot volume; its port stays for the new server",
		Attributes: []plan.Attribute{{Key: "server", Value: s.ID}},
		Expects:    fmt.Sprintf("server %s is still %s, owned by the cluster", s.ID, hostname),
		Op:         deleteServer{hostname: hostname, id: s.ID, keepPort: true}}}, &after
}

func (op deleteServer) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	s, found, err := p.server(ctx, op.hostname)
	if err != nil {
		return err
	}
	if found && s.ID != op.id {
		return fmt.Errorf("%w: server %s is now %s, not %s", reconcile.ErrPrecondition, op.hostname, s.ID, op.id)
	}
	if found {
		compute, _, _, _ := p.clients(ctx)
		p.log.Info("deleting server", "cluster", p.c.Name, "server", op.hostname, "id", op.id)
		if err := ignoreGone(ctx, "server "+op.hostname+" ("+op.id+")", func(ctx context.Context) error {
			return servers.Delete(ctx, compute, op.id).ExtractErr()
		}); err != nil {
			return err
		}
		if err := p.waitServer(ctx, op.id, op.hostname, "DELETED"); err != nil {
			return err
		}
	}
	if op.keepPort {
		return nil
	}
	port, ok, err := p.port(ctx, op.hostname)
	if err != nil || !ok {
		return err
	}
	return p.deletePortID(ctx, op.hostname, port.ID)
}

// startServer starts a stopped server and waits until it runs.
type startServer struct{ hostname, id string }

func (op startServer) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	s, found, err := p.server(ctx, op.hostname)
	if err != nil {
		return err
	}
	switch {
	case !found || s.ID != op.id:
		return fmt.Errorf("%w: server %s is no longer %s", reconcile.ErrPrecondition, op.hostname, op.id)
	case s.Status == "ACTIVE":
		return nil
	case s.Status != "SHUTOFF":
		return fmt.Errorf("%w: server %s is %s, not SHUTOFF", reconcile.ErrPrecondition, op.hostname, s.Status)
	}
	compute, _, _, _ := p.clients(ctx)
	if err := within(ctx, func(ctx context.Context) error { return servers.Start(ctx, compute, op.id).ExtractErr() }); err != nil {
		return fmt.Errorf("starting server %s (%s): %w", op.hostname, op.id, err)
	}
	return p.waitServer(ctx, op.id, op.hostname, "ACTIVE")
}

// PlanRestart (reconcile.Restarter) soft-reboots a running server.
func (p *Provider) PlanRestart(hostname string, have reconcile.Inventory) []plan.Change {
	inv, ok := have.(*inventory)
	if !ok {
		return nil
	}
	s, ok := inv.servers[hostname]
	if !ok || s.Status != "ACTIVE" {
		return nil
	}
	return []plan.Change{{Domain: plan.DomainProvider, Action: plan.ActionRestart,
		Resource:   plan.Resource{Kind: plan.KindMachine, Name: hostname},
		Reason:     "soft reboot through Nova, waited out on fresh reads of the server",
		Attributes: []plan.Attribute{{Key: "server", Value: s.ID}},
		Expects:    fmt.Sprintf("server %s is still %s and ACTIVE", s.ID, hostname),
		Op:         rebootServer{hostname: hostname, id: s.ID}}}
}

type rebootServer struct{ hostname, id string }

func (op rebootServer) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	s, found, err := p.server(ctx, op.hostname)
	if err != nil {
		return err
	}
	if !found || s.ID != op.id || s.Status != "ACTIVE" {
		return fmt.Errorf("%w: server %s is no longer %s and ACTIVE", reconcile.ErrPrecondition, op.hostname, op.id)
	}
	compute, _, _, _ := p.clients(ctx)
	p.log.Info("rebooting server", "cluster", p.c.Name, "server", op.hostname, "id", op.id)
	if err := within(ctx, func(ctx context.Context) error {
		return servers.Reboot(ctx, compute, op.id, servers.RebootOpts{Type: servers.SoftReboot}).ExtractErr()
	}); err != nil {
		return fmt.Errorf("rebooting server %s (%s): %w", op.hostname, op.id, err)
	}
	return p.waitServer(ctx, op.id, op.hostname, "ACTIVE")
}

// Warnings (reconcile.Warner) are what the plan should show of the
// observed cloud.
func (p *Provider) Warnings(reconcile.Inventory) []string {
	if p.c.OpenStack.Metadata {
		return []string{"openstack.metadata is true: the security group allows all egress, so pods and nodes can reach the instance metadata service"}
	}
	return nil
}
