package spec

import "slices"

// Extension names the engine itself adds to every VM's installer.
const (
	ExtensionTailscale      = "siderolabs/tailscale"
	ExtensionQEMUGuestAgent = "siderolabs/qemu-guest-agent"
)

// Extensions returns the sorted, de-duplicated system extensions of a
// machine in pool p: the base set (qemu-guest-agent, plus tailscale when the
// tailscale section is opted in) with talos.extensions and the pool's own.
func (c *Cluster) Extensions(p Pool) []string {
	set := []string{ExtensionQEMUGuestAgent}
	if c.Tailscale != nil {
		set = append(set, ExtensionTailscale)
	}
	set = append(set, c.Talos.Extensions...)
	set = append(set, p.Extensions...)
	slices.Sort(set)
	return slices.Compact(set)
}

// BootExtensions returns the extensions of the shared boot image: the base
// set with tailscale always in it, so one image boots every machine.
func (c *Cluster) BootExtensions() []string {
	set := []string{ExtensionQEMUGuestAgent, ExtensionTailscale}
	slices.Sort(set)
	return set
}
