package machineconfig

import (
	"crypto/sha256"
	"fmt"
	"net"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// NIC indexes used by MAC: the cluster NIC and the external NIC.
const (
	NICCluster  = 0
	NICExternal = 1
)

// Link aliases the generated config gives the NICs it can identify by MAC.
// Other documents (the Layer-2 VIP, provider patches) refer to these names
// instead of kernel interface names.
const (
	LinkCluster  = "cluster"
	LinkExternal = "external"
)

// Machine is one VM the cluster wants.
type Machine struct {
	// Hostname is <cluster>-<pool>-NN.
	Hostname string
	// Pool is the pool the machine belongs to.
	Pool spec.Pool
	// Number is the machine's number inside its pool, starting at 1.
	Number int
	// ClusterMAC is the MAC address of the cluster NIC, empty when not known.
	// Machines sets it on Proxmox; an OpenStack provider may fill in its
	// port's address.
	ClusterMAC string
	// ExternalMAC is the MAC address of the external NIC, empty when the
	// machine has none or it is not known.
	ExternalMAC string
}

// Role returns the machine's role.
func (m Machine) Role() spec.Role {
	return m.Pool.Role
}

// Machines lists every machine the cluster wants, control planes first and
// then each worker pool in file order, numbered from 01 in each pool. On
// Proxmox and OpenStack the deterministic NIC MACs are filled in. Metal machines are not
// listed.
func Machines(c *spec.Cluster) []Machine {
	var out []Machine

	for _, pool := range c.Pools() {
		for n := 1; n <= pool.Count; n++ {
			m := Machine{
				Hostname: pool.Hostname(c.Name, n),
				Pool:     pool,
				Number:   n,
			}

			switch c.Provider {
			case spec.ProviderOpenStack:
				// The machine's port is created with this MAC.
				m.ClusterMAC = MAC(c.Name, m.Hostname, NICCluster)
			case spec.ProviderProxmox:
				m.ClusterMAC = MAC(c.Name, m.Hostname, NICCluster)

				if c.Proxmox != nil && c.Proxmox.Network.ExternalBridge != "" {
					m.ExternalMAC = MAC(c.Name, m.Hostname, NICExternal)
				}
			}

			out = append(out, m)
		}
	}

	return out
}

// MAC returns the deterministic, locally administered MAC address of a VM's
// NIC: "02:" followed by the first five bytes of
// sha256("<cluster>/<hostname>/<index>"), lowercase and colon-separated.
// Index 0 is the cluster NIC and 1 the external NIC.
func MAC(cluster, hostname string, index int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", cluster, hostname, index))
	addr := append(net.HardwareAddr{0x02}, sum[:5]...)

	return addr.String()
}
