package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/taloscluster/taloscluster/lab/openstack"
	"github.com/taloscluster/taloscluster/lab/talos"
)

// DefaultOpenStackExternalCIDR is Options.OpenStackExternalCIDR when it is
// not set: the OpenStack emulator's own default for its external network.
var DefaultOpenStackExternalCIDR = netip.MustParsePrefix("127.44.0.0/24")

// OpenStackExternalNet is the name of the lab cloud's external network,
// the one floating IPs come from.
const OpenStackExternalNet = "ext-net"

// startOpenStack starts the OpenStack emulator on the lab's listen address
// with a certificate from the lab's CA, its servers booting into Talos
// nodes (openstackHooks) and its floating IPs forwarded (setFloatingIPs).
func (l *Lab) startOpenStack() error {
	build := l.opts.OpenStackBuildDelay
	if build == 0 && l.opts.TaskDuration > 0 {
		build = l.opts.TaskDuration
	}
	l.OpenStackCredential = openstack.DefaultCredential
	l.OpenStackRegion = l.opts.OpenStackRegion
	l.OpenStackExternalNet = OpenStackExternalNet
	l.OpenStackExternalCIDR = l.opts.OpenStackExternalCIDR.Masked()
	srv, err := openstack.New(openstack.Options{
		Region:            l.OpenStackRegion,
		Credentials:       []openstack.Credential{l.OpenStackCredential},
		CA:                l.CA,
		Addr:              netip.AddrPortFrom(l.opts.Listen, 0).String(),
		ExternalNetworks:  []openstack.ExternalNetwork{{Name: l.OpenStackExternalNet, CIDR: l.OpenStackExternalCIDR}},
		BuildDelay:        build,
		AvailabilityZones: l.opts.OpenStackZones,
		Machines:          (*openstackHooks)(l),
		FloatingIPs:       l.setFloatingIPs,
	})
	if err != nil {
		return fmt.Errorf("starting the OpenStack emulator: %w", err)
	}
	l.OpenStack = srv
	l.OpenStackURL = srv.URL() + "/identity/v3"
	return nil
}

// openstackHooks turns OpenStack servers into Talos nodes, as machineHooks
// does Proxmox VMs. A server's node lives at its first fixed address, which
// Neutron's port holds for the server's whole life.
type openstackHooks Lab

var _ openstack.MachineHooks = (*openstackHooks)(nil)

func (h *openstackHooks) lab() *Lab { return (*Lab)(h) }

// ServerUp boots the server's Talos node. Talos's openstack platform reads
// the machine config from the server's user data (the metadata service's
// openstack/latest/user_data, or the config drive's); without user data
// the node boots into maintenance mode.
func (h *openstackHooks) ServerUp(s openstack.ServerInfo) {
	l := h.lab()
	l.mu.Lock()
	l.osName[s.ID] = s.Name
	l.mu.Unlock()
	if len(s.Addrs) == 0 {
		l.event("boot-failed", s.Name, fmt.Sprintf("server %s has no fixed address", s.ID))
		return
	}
	addr := s.Addrs[0]
	l.mu.Lock()
	l.osNode[s.ID] = addr
	l.osAddr[s.ID] = addr
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Talos.Boot(ctx, addr, s.UserData); err != nil {
		l.event("boot-failed", s.Name, err.Error())
		return
	}
	detail := "maintenance mode"
	switch {
	case len(s.UserData) > 0:
		detail = "config from its user data"
	case s.UserDataUnreachable:
		detail = "maintenance mode: no config drive, and its security groups keep the metadata service out of reach"
	}
	l.event("power-on", s.Name, fmt.Sprintf("server %s at %s, %s", s.ID, addr, detail))
}

// ServerDown powers the server's node off; its disk stays.
func (h *openstackHooks) ServerDown(id string) {
	l := h.lab()
	l.mu.Lock()
	addr, ok := l.osAddr[id]
	delete(l.osAddr, id)
	name := l.osName[id]
	l.mu.Unlock()
	if !ok {
		return
	}
	_ = l.Talos.PowerOff(addr)
	l.event("power-off", serverSubject(name, id), fmt.Sprintf("server %s at %s", id, addr))
}

// ServerDeleted forgets a deleted server's machine: its Talos node goes
// with its boot volume (installed system, machine config, etcd data), so
// that a new server, even of the same name and address, boots as a new
// machine. The etcd member the node had stays in its cluster, as when a
// real machine is deleted.
func (h *openstackHooks) ServerDeleted(id string) {
	l := h.lab()
	l.mu.Lock()
	addr, ok := l.osNode[id]
	name := l.osName[id]
	delete(l.osNode, id)
	delete(l.osAddr, id)
	delete(l.osName, id)
	l.mu.Unlock()
	if !ok {
		return
	}
	if err := l.Talos.Destroy(addr); err != nil && !errors.Is(err, talos.ErrUnknownNode) {
		l.event("destroy-failed", serverSubject(name, id), err.Error())
		return
	}
	l.event("destroyed", serverSubject(name, id), fmt.Sprintf("server %s at %s", id, addr))
}

// serverSubject names a server in lab events: by its name, or its ID when
// the name is not known.
func serverSubject(name, id string) string {
	if name == "" {
		return id
	}
	return name
}

// guestStopper is what the OpenStack emulator offers, once Nova has it, to
// learn that a server's guest powered its machine off by itself: libvirt
// reports the domain shut off and Nova's power-state sync records the
// server SHUTOFF (its task state unchanged), with no API call.
type guestStopper interface {
	GuestStopped(id string)
}

// openStackGuestPowerOff handles a Talos node at addr that powered itself
// off (a reset without a reboot): when the node is an OpenStack server's,
// the server is told it is SHUTOFF if the emulator can be, and the node is
// in any case no longer running.
func (l *Lab) openStackGuestPowerOff(addr netip.Addr) {
	l.mu.Lock()
	id, found := "", false
	for sid, a := range l.osAddr {
		if a == addr {
			id, found = sid, true
		}
	}
	name := l.osName[id]
	l.mu.Unlock()
	if !found || l.OpenStack == nil {
		return
	}
	if g, ok := any(l.OpenStack).(guestStopper); ok {
		g.GuestStopped(id)
	}
	// ServerDown may have come through GuestStopped already.
	l.mu.Lock()
	delete(l.osAddr, id)
	l.mu.Unlock()
	l.event("guest-power-off", serverSubject(name, id), fmt.Sprintf("server %s at %s", id, addr))
}
