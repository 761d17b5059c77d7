package proxmox

import (
	"fmt"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

var _ reconcile.Remover = (*Provider)(nil)

// PlanRemove deletes the owned VM of a machine that cluster.yaml no
// longer has, with its disks and its config ISO; a VM that has twins is
// refused in the validate phase and is not deleted here.
func (p *Provider) PlanRemove(hostname string, have reconcile.Inventory) []plan.Change {
	inv, ok := have.(*inventory)
	if !ok {
		return nil
	}
	v, ok := inv.owned[hostname]
	if !ok {
		return nil
	}
	return []plan.Change{{Phase: plan.PhaseScaleDown, Domain: plan.DomainProvider, Action: plan.ActionDelete,
		Resource:   plan.Resource{Kind: plan.KindMachine, Name: hostname},
		Reason:     "delete the VM with its disks and its config ISO",
		Attributes: []plan.Attribute{{Key: "node", Value: v.node}, {Key: "vmid", Value: fmt.Sprint(v.id)}},
		Expects:    fmt.Sprintf("VM %d is still %s, owned by the cluster", v.id, hostname),
		Op:         deleteVM{hostname: hostname, id: v.id}}}
}
