package proxmox

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

var _ reconcile.Restarter = (*Provider)(nil)

// PlanRestart reboots the owned, running VM of a machine through Proxmox:
// POST status/reboot shuts the VM down and starts it again, and Proxmox
// applies the VM's pending changes in between (qemu-server vm_reboot), as
// a reboot from inside the guest does not. A VM that is stopped (its start
// applies them), missing, or one of several of that name (refused in the
// validate phase) gets no step. The caller sets the step's phase.
func (p *Provider) PlanRestart(hostname string, have reconcile.Inventory) []plan.Change {
	inv, ok := have.(*inventory)
	if !ok {
		return nil
	}
	v, ok := inv.owned[hostname]
	if !ok || !v.running {
		return nil
	}
	reason := "power-cycle the VM through Proxmox: shut down and started again"
	attrs := []plan.Attribute{{Key: "node", Value: v.node}, {Key: "vmid", Value: strconv.Itoa(v.id)}}
	if len(v.restartPending) > 0 {
		pending := strings.Join(v.restartPending, ", ")
		reason = "power-cycle the VM through Proxmox so that its pending changes take effect: " + pending
		attrs = append(attrs, plan.Attribute{Key: "pending", Value: pending})
	}
	return []plan.Change{{Domain: plan.DomainProvider, Action: plan.ActionRestart,
		Resource:   plan.Resource{Kind: plan.KindMachine, Name: hostname},
		Reason:     reason,
		Attributes: attrs,
		Expects:    fmt.Sprintf("VM %d on %s exists, is still named %s and runs", v.id, v.node, hostname),
		Op:         restartVM{hostname: hostname, node: v.node, id: v.id}}}
}

// restart carries out a restartVM step. Its fresh read is the one VM's
// status (GET status/current: its name and power state, current, unlike
// /cluster/resources): the VM must still exist on its node with the
// planned id and name, and run. Then one POST status/reboot, and its task
// is waited for; the Talos node's return is the engine's to wait for.
//
// The reboot is posted once, not with proxmox-api-go's RebootVm: that goes
// through StatusChangeVm, which posts again (up to three times) after any
// error, a failed task or a lost answer included, and a reboot is not
// idempotent.
func (p *Provider) restart(ctx context.Context, op restartVM) error {
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	ref := proxmox.NewVmRef(proxmox.GuestID(op.id))
	ref.SetNode(op.node)
	ref.SetVmType(proxmox.GuestQemu)
	st, err := ref.GetRawGuestStatus(ctx, p.api)
	switch {
	case vmGone(err):
		return fmt.Errorf("restarting VM %d (%s): %w: the VM no longer exists on %s", op.id, op.hostname, reconcile.ErrPrecondition, op.node)
	case err != nil:
		return fmt.Errorf("restarting VM %d (%s): reading its status: %w", op.id, op.hostname, err)
	}
	if name := string(st.GetName()); name != op.hostname {
		return fmt.Errorf("restarting VM %d (%s): %w: the VM is named %s now", op.id, op.hostname, reconcile.ErrPrecondition, name)
	}
	if state := st.GetState(); state != proxmox.PowerStateRunning {
		return fmt.Errorf("restarting VM %d (%s): %w: the VM is not running (%s)", op.id, op.hostname, reconcile.ErrPrecondition, state)
	}
	p.log.Info("restarting vm", "cluster", p.c.Name, "vm", op.hostname, "id", op.id, "node", op.node)
	path := fmt.Sprintf("/nodes/%s/qemu/%d/status/reboot", op.node, op.id)
	if err := taskDone(p.api.PostWithTask(ctx, nil, path)); err != nil {
		return fmt.Errorf("restarting VM %d (%s): %w", op.id, op.hostname, err)
	}
	return nil
}
