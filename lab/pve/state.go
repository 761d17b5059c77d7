package pve

import "maps"

// VMState is a snapshot of a VM for the lab's control API and tests.
type VMState struct {
	// ID, Node, Name and Pool identify the VM.
	ID               int
	Node, Name, Pool string
	// Running reports the power state.
	Running bool
	// Tags are the VM's tags, sorted as Proxmox VE stores them.
	Tags []string
	// MACs are the NICs' MAC addresses in NIC order.
	MACs []string
	// Cores is the number of virtual CPUs; MemoryMB the memory in MiB.
	Cores, MemoryMB int
	// CDROMs maps drive slots to inserted ISO volumes.
	CDROMs map[string]string
	// Disks maps drive slots (and efidisk0, tpmstate0) to disk sizes in
	// bytes.
	Disks map[string]int64
	// Config is the current configuration; Pending the changes that apply
	// at the next start, with PendingDelete the keys to remove then.
	Config, Pending map[string]string
	PendingDelete   []string
	// FirewallOptions are the VM's firewall options as set (Proxmox VE
	// defaults apply to unset ones: disabled, policy_in DROP, policy_out
	// ACCEPT); FirewallRules its rules in order.
	FirewallOptions map[string]string
	FirewallRules   []FirewallRule
}

// Volume is a snapshot of a storage volume.
type Volume struct {
	// Node is the node holding the volume, empty for a shared storage.
	Node string
	// VolID is the volume ID, e.g. "local:iso/talos.iso".
	VolID string
	// Content is iso, vztmpl, images...; Size the size in bytes.
	Content string
	Size    int64
	// VMID owns disk images; zero otherwise.
	VMID int
}

// VMs returns a snapshot of every VM, ordered by ID.
func (s *Server) VMs() []VMState {
	s.lock()
	defer s.mu.Unlock()
	out := make([]VMState, 0, len(s.vms))
	for _, id := range s.sortedVMIDs() {
		g := s.vms[id]
		st := VMState{
			ID:              g.id,
			Node:            g.node,
			Name:            g.conf["name"],
			Pool:            g.pool,
			Running:         g.running,
			Tags:            splitTags(g.conf["tags"]),
			MACs:            g.macs(),
			Cores:           g.vcpus(),
			MemoryMB:        g.memoryMB(),
			CDROMs:          g.cdroms(),
			Disks:           map[string]int64{},
			Config:          maps.Clone(g.conf),
			Pending:         maps.Clone(g.pending),
			PendingDelete:   sortedKeys(g.pendingDel),
			FirewallOptions: maps.Clone(g.fwOptions),
		}
		for k, v := range g.conf {
			if k := kindOf(k); k != kindDrive && k != kindVolume {
				continue
			}
			p, err := parseProp(v, "file")
			if err != nil || p.kv["media"] == "cdrom" {
				continue
			}
			st.Disks[k] = parseFormattedSize(p.kv["size"])
		}
		for i, r := range g.fwRules {
			st.FirewallRules = append(st.FirewallRules, r.export(i))
		}
		out = append(out, st)
	}
	return out
}

// Volumes returns a snapshot of every storage volume, ordered by node and
// volume ID.
func (s *Server) Volumes() []Volume {
	s.lock()
	defer s.mu.Unlock()
	var out []Volume
	for _, n := range append([]*node{{name: ""}}, s.nodes...) {
		for i := range s.storages {
			st := &s.storages[i]
			if st.Shared != (n.name == "") || (!st.Shared && !st.onNode(n.name)) {
				continue
			}
			for _, v := range s.volumesOf(st, n.name) {
				out = append(out, Volume{Node: n.name, VolID: v.volid, Content: v.content, Size: v.size, VMID: v.vmid})
			}
		}
	}
	return out
}

// ClusterFirewall reports whether the datacenter firewall is enabled.
func (s *Server) ClusterFirewall() bool {
	s.lock()
	defer s.mu.Unlock()
	return s.clusterFW["enable"] == "1"
}
