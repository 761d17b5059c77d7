package proxmox

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// planDestroy deletes every owned VM (its disks with it), each of the VMs
// that share a hostname included, the config ISOs left behind, and then
// the resource pool. The shared boot ISO stays, and so does a VM whose
// pool and tags disagree about the cluster: it is not this cluster's.
func (p *Provider) planDestroy(inv *inventory) []plan.Change {
	var out []plan.Change
	var vms []*vm
	for _, name := range slices.Sorted(maps.Keys(inv.owned)) {
		vms = append(vms, inv.owned[name])
	}
	for _, name := range slices.Sorted(maps.Keys(inv.duplicates)) {
		vms = append(vms, inv.duplicates[name]...)
	}
	for _, v := range vms {
		out = append(out, plan.Change{Phase: plan.PhaseDestroy, Domain: plan.DomainProvider, Action: plan.ActionDelete,
			Resource:   plan.Resource{Kind: plan.KindMachine, Name: v.name},
			Reason:     "destroy: the VM and its disks are deleted",
			Attributes: []plan.Attribute{{Key: "node", Value: v.node}, {Key: "vmid", Value: fmt.Sprint(v.id)}},
			Op:         deleteVM{hostname: v.name, id: v.id}})
	}
	out = append(out, p.planOrphanISOs(plan.PhaseDestroy, inv, nil)...)
	if inv.poolExists {
		out = append(out, plan.Change{Phase: plan.PhaseDestroy, Domain: plan.DomainProvider, Action: plan.ActionDelete,
			Resource: plan.Resource{Kind: plan.KindResourcePool, Name: p.poolName()},
			Reason:   "destroy: the ownership pool is removed once empty", Op: deletePool{}})
	}
	return out
}

// deleteVM stops a VM and deletes it with its disks and config ISO.
func (p *Provider) deleteVM(ctx context.Context, v *vm) error {
	if v.running {
		if err := p.ref(v).Stop(ctx, p.api); err != nil && !warningsOnly(err) {
			return fmt.Errorf("stopping VM %s (id %d): %w", v.name, v.id, err)
		}
	}
	params := map[string]any{"purge": 1, "destroy-unreferenced-disks": 1}
	if err := taskDone(p.api.DeleteVmParams(ctx, p.ref(v), params)); err != nil {
		return fmt.Errorf("deleting VM %s (id %d): %w", v.name, v.id, err)
	}
	storage := p.c.Proxmox.CIDataStorage
	volid := p.cidataVolume(v.name)
	ok, err := p.hasVolume(ctx, v.node, storage, volid)
	if err != nil {
		return fmt.Errorf("VM %s is deleted, but whether its config ISO is left could not be read (the next run deletes it): %w", v.name, err)
	}
	if ok {
		if err := taskDone(p.api.DeleteWithTask(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", v.node, storage, volid))); err != nil {
			return fmt.Errorf("deleting the config ISO of %s: %w", v.name, err)
		}
	}
	return nil
}

// deleteOrphanISO deletes a config ISO whose machine is gone. Its
// precondition, read again now: no VM of that name exists.
func (p *Provider) deleteOrphanISO(ctx context.Context, op deleteOrphanISO) error {
	obs, err := p.Observe(ctx)
	if err != nil {
		return err
	}
	inv := obs.(*inventory)
	if inv.owned[op.hostname] != nil || inv.duplicates[op.hostname] != nil {
		return fmt.Errorf("%w: VM %s exists now; its config ISO is its own", reconcile.ErrPrecondition, op.hostname)
	}
	if !inv.isos[op.node+"/"+op.volid] {
		return nil // gone meanwhile
	}
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	if err := taskDone(p.api.DeleteWithTask(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", op.node, p.c.Proxmox.CIDataStorage, op.volid))); err != nil {
		return fmt.Errorf("deleting the config ISO %s left by %s: %w", op.volid, op.hostname, err)
	}
	return nil
}

// deletePool removes the cluster's pool; a pool already gone is fine. A
// pool that still holds a VM of another cluster is kept, and so is one
// Proxmox finds not empty: the pool is deleted as it is, never emptied
// first, so nothing that is not this cluster's is moved.
func (p *Provider) deletePool(ctx context.Context) error {
	obs, err := p.Observe(ctx)
	if err != nil {
		return err
	}
	for _, v := range obs.(*inventory).misplaced {
		if v.pool == p.poolName() {
			return fmt.Errorf("%w: pool %s holds VM %d (%s), which %s; the pool is kept", reconcile.ErrPrecondition, p.poolName(), v.id, v.name, v.reason)
		}
	}
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	if err := p.api.Delete(ctx, "/pools/"+url.PathEscape(p.poolName())); err != nil && !strings.Contains(err.Error(), "does not exist") {
		return fmt.Errorf("deleting pool %s: %w", p.poolName(), err)
	}
	return nil
}
