package proxmox

import (
	"maps"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

var _ reconcile.Replacer = (*Provider)(nil)

// PlanReplace plans the replacement of a machine that stays in
// cluster.yaml: the steps that delete its VM (PlanRemove's) and the
// inventory without that VM. The compute phase planned from that inventory
// creates the machine anew, with the same hostname, on the Proxmox node its
// VM ran on (a new VM, config ISO and firewall, as for any new machine),
// and the health phase removes its first-boot media. A machine without
// exactly one owned VM gets no steps and the inventory unchanged.
func (p *Provider) PlanReplace(hostname string, have reconcile.Inventory) ([]plan.Change, reconcile.Inventory) {
	inv, ok := have.(*inventory)
	if !ok {
		return nil, have
	}
	v, ok := inv.owned[hostname]
	if !ok {
		return nil, have
	}
	after := *inv
	after.owned = maps.Clone(inv.owned)
	delete(after.owned, hostname)
	after.replaced = maps.Clone(inv.replaced)
	if after.replaced == nil {
		after.replaced = map[string]string{}
	}
	after.replaced[hostname] = v.node
	return p.PlanRemove(hostname, have), &after
}
