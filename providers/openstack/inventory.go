package openstack

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Ownership tags, as plain key=value strings.
const (
	tagManaged     = "managed-by=taloscluster"
	tagManagedCAPI = "managed-by=clusterctl"
)

// metaDisk is the server metadata key that records the boot volume's size
// in GB at creation (servers are create-only, so it stays true).
const metaDisk = "taloscluster-disk"

func clusterTag(name string) string { return "cluster=" + name }

// owned reports whether tags mark a resource of the cluster.
func owned(tags []string, cluster string) bool {
	return slices.Contains(tags, clusterTag(cluster)) &&
		(slices.Contains(tags, tagManaged) || slices.Contains(tags, tagManagedCAPI))
}

// tagValue returns the value of the key=value tag with key, "" without.
func tagValue(tags []string, key string) string {
	for _, t := range tags {
		if len(t) > len(key) && t[:len(key)] == key && t[len(key)] == '=' {
			return t[len(key)+1:]
		}
	}
	return ""
}

// inventory is what Observe read of the cluster's resources.
type inventory struct {
	// external is the external network named by openstack.external_net,
	// nil when it does not exist.
	external *networks.Network
	network  *networks.Network
	subnet   *subnets.Subnet
	router   *routers.Router
	// routerInterface is the router's port on the cluster subnet, nil
	// without.
	routerInterface *ports.Port
	group           *groups.SecGroup
	// ports are the cluster's ports by name: the reserved ones and one
	// per machine.
	ports map[string]ports.Port
	// fips are the floating IPs on the reserved ports, by port name.
	fips map[string]floatingips.FloatingIP
	// servers are the cluster's servers by name.
	servers map[string]servers.Server
	// image is the boot image, nil when Glance has none of that name.
	image *images.Image
	// flavors maps flavor names to IDs; zones lists the availability
	// zones. Both nil for an offline plan.
	flavors map[string]string
	zones   []string
	// failedImages are boot images of that name whose upload failed
	// (killed) or that were deactivated: replaced and deleted.
	failedImages []images.Image
	// foreign names resources of a cluster name that are not ours.
	foreign []string
	// duplicates names owned resources that share a name (or, for a
	// floating IP, a reserved port) with another.
	duplicates []string
	// replaced are the machines a remediation deletes before this plan's
	// compute phase creates them again (PlanReplace).
	replaced map[string]bool
	// offline is set for the empty inventory of a plan that asked no one.
	offline bool
}

// Machines lists the cluster's servers.
func (inv *inventory) Machines() []reconcile.Machine {
	out := make([]reconcile.Machine, 0, len(inv.servers))
	for _, name := range slices.Sorted(maps.Keys(inv.servers)) {
		s := inv.servers[name]
		m := reconcile.Machine{Hostname: name, Role: spec.Role(tagValue(tagsOf(s), "role")), Running: s.Status == "ACTIVE"}
		switch {
		case s.Status == "ACTIVE":
			if port, ok := inv.ports[name]; ok {
				for _, ip := range port.FixedIPs {
					if a, err := netip.ParseAddr(ip.IPAddress); err == nil {
						m.Addresses = append(m.Addresses, a)
					}
				}
			}
			if len(m.Addresses) == 0 {
				m.NoAddress = "the server has no port " + name + " with a fixed address"
			}
		case s.Status == "ERROR" && s.Fault.Message != "":
			m.NoAddress = "the server is in ERROR: " + s.Fault.Message
		default:
			m.NoAddress = "the server is " + s.Status
		}
		out = append(out, m)
	}
	return out
}

func tagsOf(s servers.Server) []string {
	if s.Tags == nil {
		return nil
	}
	return *s.Tags
}

// serverFlavor is the flavor name a server was created with (the
// embedded flavor of microversion 2.47 and later).
func serverFlavor(s servers.Server) string {
	if n, ok := s.Flavor["original_name"].(string); ok {
		return n
	}
	return ""
}

// serverDisk is the boot volume size the server was created with, 0 when
// not recorded.
func serverDisk(s servers.Server) int {
	n, _ := strconv.Atoi(s.Metadata[metaDisk])
	return n
}

// fixedAddr is the first fixed IPv4 address of a port.
func fixedAddr(p ports.Port) (netip.Addr, bool) {
	for _, ip := range p.FixedIPs {
		if a, err := netip.ParseAddr(ip.IPAddress); err == nil && a.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}
