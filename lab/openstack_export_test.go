package lab

import (
	"net/netip"

	"github.com/taloscluster/taloscluster/lab/openstack"
)

// OpenStackHooks returns the hooks the lab gives the OpenStack emulator,
// for tests that play Nova's part.
func OpenStackHooks(l *Lab) openstack.MachineHooks { return (*openstackHooks)(l) }

// SetFloatingIPs hands the lab a table of associated floating IPs, for
// tests that play Neutron's part.
func SetFloatingIPs(l *Lab, table map[netip.Addr]netip.Addr) { l.setFloatingIPs(table) }
