package proxmox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// Two runs of one cluster that do not share a lock (two copies of its
// state: a checkout and the agent, two checkouts) may both find a machine
// missing and both create it. Proxmox cannot refuse the second VM: names
// are not unique, and a VM being created is listed with only "lock:
// create" and no name until its create task ends (qemu-server create_vm,
// create_and_lock_config), so a check before the create cannot see a create
// in flight. Each run therefore checks again after its VM exists: of two
// VMs of one name, the one with the higher VM id (the id /cluster/nextid
// handed out later) is the twin, and the run that created it removes it and
// stops; the run that created the older one waits until the twin is gone
// and goes on.

// Bounds of the waits for other runs' creates.
var (
	// settleWait bounds the wait for VMs being created (locked, their
	// names unknown) to be created before names are compared.
	settleWait = 2 * time.Minute
	// twinWait bounds the wait of the run that created the older VM for
	// the run that created the newer one to remove it.
	twinWait = 2 * time.Minute
	// twinPoll is how often the VM list is read while waiting.
	twinPoll = 500 * time.Millisecond
)

// listed is a VM of the cluster as /cluster/resources lists it, with its
// name from its config when the list does not have it yet.
type listed struct {
	id         int
	node, name string
	running    bool
}

// named lists the cluster's VMs named hostname and whether a VM other
// than own is still being created (its name is not known yet).
func (p *Provider) named(ctx context.Context, hostname string, own int) ([]listed, bool, error) {
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	list, err := p.api.GetResourceList(ctx, "vm")
	if err != nil {
		return nil, false, fmt.Errorf("listing Proxmox VMs: %w", err)
	}
	var out []listed
	creating := false
	for _, item := range list {
		m, _ := item.(map[string]any)
		if str(m["type"]) != "qemu" {
			continue
		}
		id := num(m["vmid"])
		if str(m["lock"]) == "create" && id != own {
			creating = true
			continue
		}
		if ours, conflict := p.claim(str(m["pool"]), splitTags(str(m["tags"]))); !ours || conflict != "" {
			continue
		}
		v := listed{id: id, node: str(m["node"]), name: str(m["name"]), running: str(m["status"]) == "running"}
		if v.name == "" {
			// pvestatd has not broadcast it yet: its config has the name.
			conf, err := p.api.GetVmConfig(ctx, p.ref(&vm{id: v.id, node: v.node}))
			if vmGone(err) {
				continue // deleted since the list was made
			}
			if err != nil {
				return nil, false, fmt.Errorf("reading the config of VM %d: %w", v.id, err)
			}
			v.name = str(conf["name"])
		}
		if v.name == hostname {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b listed) int { return a.id - b.id })
	return out, creating, nil
}

// settled is named once no other VM is being created, or once settleWait
// has passed (a VM whose create never ended keeps its lock for good; its
// name is unknown either way).
func (p *Provider) settled(ctx context.Context, hostname string, own int) ([]listed, error) {
	deadline := time.Now().Add(settleWait)
	for {
		vms, creating, err := p.named(ctx, hostname, own)
		if err != nil || !creating {
			return vms, err
		}
		if time.Now().After(deadline) {
			p.log.Warn("a VM is still being created; comparing names without it", "cluster", p.c.Name, "vm", hostname)
			return vms, nil
		}
		if err := retry.Sleep(ctx, twinPoll); err != nil {
			return nil, err
		}
	}
}

// absent checks the precondition of a create: no VM named hostname exists,
// owned or not, once the creates in flight have ended.
func (p *Provider) absent(ctx context.Context, hostname string) error {
	if _, err := p.settled(ctx, hostname, 0); err != nil {
		return err
	}
	inv, err := p.readVMs(ctx, hostname)
	if err != nil {
		return err
	}
	if v, ok := inv.owned[hostname]; ok {
		return fmt.Errorf("%w: VM %s exists now (id %d on %s); another run created it", reconcile.ErrPrecondition, hostname, v.id, v.node)
	}
	if dups, ok := inv.duplicates[hostname]; ok {
		return fmt.Errorf("%w: %d VMs named %s exist now (ids %s); another run created them", reconcile.ErrPrecondition, len(dups), hostname, vmIDs(dups))
	}
	if f, ok := inv.foreign[hostname]; ok {
		return fmt.Errorf("%w: %s", reconcile.ErrPrecondition, p.unowned(hostname, f))
	}
	for _, v := range inv.misplaced {
		if v.name == hostname {
			return fmt.Errorf("%w: a VM named %s (id %d) exists now and %s", reconcile.ErrPrecondition, hostname, v.id, v.reason)
		}
	}
	return nil
}

// keepOne runs after this run created VM own named hostname. When another
// run created a VM of that name too, the newer of the two is removed by
// the run that created it: this run removes own and fails the precondition
// when own is the newer; when own is the older it waits (at most twinWait)
// for the other run to remove its twin.
func (p *Provider) keepOne(ctx context.Context, hostname string, own int) error {
	deadline := time.Now().Add(twinWait)
	for {
		vms, err := p.settled(ctx, hostname, own)
		if err != nil {
			return err
		}
		var mine *listed
		var older, newer []int
		for i, v := range vms {
			switch {
			case v.id == own:
				mine = &vms[i]
			case v.id < own:
				older = append(older, v.id)
			default:
				newer = append(newer, v.id)
			}
		}
		switch {
		case mine == nil:
			return fmt.Errorf("%w: VM %s (id %d), which this run created, is gone", reconcile.ErrPrecondition, hostname, own)
		case len(older) > 0:
			if err := p.removeTwin(ctx, *mine); err != nil {
				return fmt.Errorf("VM %s (id %d) was created by another run meanwhile; removing the twin this run created (id %d): %w", hostname, older[0], own, err)
			}
			p.forget(hostname)
			p.log.Warn("removed the twin this run created", "cluster", p.c.Name, "vm", hostname, "id", own, "kept", older[0])
			return fmt.Errorf("%w: VM %s (id %d) was created by another run meanwhile, so this run removed VM %d, the twin it had created, and stops; the other run goes on with the machine", reconcile.ErrPrecondition, hostname, older[0], own)
		case len(newer) == 0:
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: VM %s has a twin created by another run (ids %d and %v), which that run did not remove within %s", reconcile.ErrPrecondition, hostname, own, newer, twinWait)
		}
		p.log.Info("another run created a twin of this VM; waiting for it to remove it", "cluster", p.c.Name, "vm", hostname, "id", own, "twin", newer[0])
		if err := retry.Sleep(ctx, twinPoll); err != nil {
			return err
		}
	}
}

// removeTwin deletes a VM this run created and never started, with its
// disks. The machine's config ISO is left: the VM that is kept boots from
// it.
func (p *Provider) removeTwin(ctx context.Context, v listed) error {
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	ref := p.ref(&vm{id: v.id, node: v.node, name: v.name})
	if v.running {
		if err := ref.Stop(ctx, p.api); err != nil && !warningsOnly(err) {
			return fmt.Errorf("stopping VM %d: %w", v.id, err)
		}
	}
	params := map[string]any{"purge": 1, "destroy-unreferenced-disks": 1}
	if err := taskDone(p.api.DeleteVmParams(ctx, ref, params)); err != nil {
		return fmt.Errorf("deleting VM %d: %w", v.id, err)
	}
	return nil
}

// remember records the VM this run created for a machine; forget drops it.
func (p *Provider) remember(hostname string, id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.created == nil {
		p.created = map[string]int{}
	}
	p.created[hostname] = id
}

func (p *Provider) forget(hostname string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.created, hostname)
}

// createdByThisRun returns the id of the VM this run created for a
// machine.
func (p *Provider) createdByThisRun(hostname string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.created[hostname]
	return id, ok
}
