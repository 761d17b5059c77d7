package proxmox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// planDestroy deletes every owned VM (its disks with it), the config ISOs
// left behind, and then the resource pool. The shared boot ISO stays.
func (p *Provider) planDestroy(inv *inventory) []plan.Change {
	var out []plan.Change
	for _, name := range slices.Sorted(maps.Keys(inv.owned)) {
		v := inv.owned[name]
		out = append(out, plan.Change{Phase: plan.PhaseDestroy, Domain: plan.DomainProvider, Action: plan.ActionDelete,
			Resource:   plan.Resource{Kind: plan.KindMachine, Name: name},
			Reason:     "destroy: the VM and its disks are deleted",
			Attributes: []plan.Attribute{{Key: "node", Value: v.node}, {Key: "vmid", Value: fmt.Sprint(v.id)}},
			Op:         deleteVM{hostname: name}})
	}
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
	if ok, err := p.hasVolume(ctx, v.node, storage, volid); err == nil && ok {
		if err := taskDone(p.api.DeleteWithTask(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", v.node, storage, volid))); err != nil {
			return fmt.Errorf("deleting the config ISO of %s: %w", v.name, err)
		}
	}
	return nil
}

// deletePool removes the cluster's pool; a pool already gone is fine.
func (p *Provider) deletePool(ctx context.Context) error {
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	if _, err := p.api.New().Pool.Delete(ctx, proxmox.PoolName(p.poolName())); err != nil && !strings.Contains(err.Error(), "does not exist") {
		return fmt.Errorf("deleting pool %s: %w", p.poolName(), err)
	}
	return nil
}
