package pve

import (
	"net/netip"
	"sync"
)

// MachineHooks lets the lab turn a started VM into a simulated machine (for
// example a Talos node booting from the VM's ISO).
//
// PowerOn and PowerOff (and Deleted, see Deletions) are called from one
// goroutine, in the order the VMs changed state, after the change; a reboot
// or reset calls PowerOff then PowerOn. The hooks run without the server's
// lock held, so they may call the Server.
type MachineHooks interface {
	// PowerOn is called when a VM starts.
	PowerOn(vm VM)
	// PowerOff is called when a VM stops, and when it is deleted unless the
	// hooks implement Deletions.
	PowerOff(vmid int)
	// Addresses returns every address the VM's guest holds at the moment
	// of the call, for the guest agent's network-get-interfaces (it is
	// called on every agent request, so an address that moves, such as a
	// Layer-2 VIP, shows on its current holder only). Each address carries
	// the prefix length it is assigned with: the primary address with its
	// network's (e.g. 10.0.0.11/24), a Talos Layer-2 VIP held by this node
	// with the full length (10.0.0.10/32 or fd00::10/128, as Talos's VIP
	// operator assigns it). List the primary address first and secondary
	// ones after it, in the order the guest added them. Leave out loopback
	// and the IPv6 link-local address: the emulator reports lo and derives
	// fe80::/64 from the MAC itself. Empty means the agent does not answer
	// yet ("QEMU guest agent is not running"). Without InterfaceAddresses,
	// every address is reported on the first NIC.
	Addresses(vmid int) []netip.Prefix
}

// InterfaceAddresses is an optional extension of MachineHooks: when the
// hooks implement it, the guest agent reports the addresses per NIC, keyed by
// the NIC's MAC address (any case), instead of all on the first NIC. The
// addresses of each NIC follow the rules of MachineHooks.Addresses (a VIP
// goes on the NIC its Layer2VIPConfig link names); Addresses must still be
// non-empty for the agent to answer.
type InterfaceAddresses interface {
	InterfaceAddresses(vmid int) map[string][]netip.Prefix
}

// Deletions is an optional extension of MachineHooks: when the hooks
// implement it, a deleted VM is reported with Deleted instead of PowerOff,
// so that a VM ID Proxmox hands out again is never mistaken for the old VM.
// Deleted is called in order with the power events, once the destroy task
// removed the VM with its disks (a VM is stopped, and reported so, before
// it can be deleted).
type Deletions interface {
	Deleted(vmid int)
}

// VM describes a VM to MachineHooks.PowerOn. Slices and maps are copies.
type VM struct {
	// ID is the VM ID.
	ID int
	// Node and Name are where the VM runs and its name.
	Node, Name string
	// Tags are the VM's tags.
	Tags []string
	// MACs are the NICs' MAC addresses in NIC order (net0, net1, ...).
	MACs []string
	// Cores is the number of virtual CPUs (cores × sockets); MemoryMB the
	// memory in MiB.
	Cores, MemoryMB int
	// CDROMs maps a drive slot (e.g. "ide2") to the ISO volume inserted in
	// it (e.g. "local:iso/talos.iso").
	CDROMs map[string]string
	// Boot is the boot order setting, e.g. "order=scsi0;ide2;net0".
	Boot string
	// Config is the VM's configuration as Proxmox VE stores it.
	Config map[string]string
	// ReadVolume returns the bytes of an uploaded or downloaded volume
	// (such as an ISO) as seen from the VM's node.
	ReadVolume func(volid string) ([]byte, error)
}

type hookEvent struct {
	on      bool
	deleted bool
	vm      VM
	vmid    int
}

// hookQueue delivers power events in order from a single goroutine that
// exits when the queue is empty.
type hookQueue struct {
	h       MachineHooks
	mu      sync.Mutex
	queue   []hookEvent
	running bool
}

func (q *hookQueue) push(e hookEvent) {
	if q.h == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, e)
	if !q.running {
		q.running = true
		go q.run()
	}
}

func (q *hookQueue) run() {
	for {
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		e := q.queue[0]
		q.queue = q.queue[1:]
		q.mu.Unlock()
		d, hasDeletions := q.h.(Deletions)
		switch {
		case e.on:
			q.h.PowerOn(e.vm)
		case e.deleted && hasDeletions:
			d.Deleted(e.vmid)
		default:
			q.h.PowerOff(e.vmid)
		}
	}
}

// GuestStopped records that the guest of a running VM powered its machine
// off by itself (an ACPI power-off from inside, such as Talos after a
// reset without a reboot): QEMU exits and Proxmox lists the VM stopped,
// with no task (qemu-server's vm status is read from the QEMU process).
// Pending changes stay pending until the next start: qmeventd's "qm
// cleanup" calls vm_stop_cleanup without $apply_pending_changes. A VM that
// is not running or does not exist is left as it is.
func (s *Server) GuestStopped(vmid int) {
	s.lock()
	defer s.mu.Unlock()
	if g, ok := s.vms[vmid]; ok {
		s.stopVM(g)
	}
}
