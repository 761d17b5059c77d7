package proxmox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// Apply runs one step Plan returned, exactly as planned. Each operation
// first looks up what it acts on: a step whose precondition no longer holds
// (the VM it creates exists, the VM it changes is gone) fails with
// reconcile.ErrPrecondition instead of acting on a world that changed.
func (p *Provider) Apply(ctx context.Context, want *reconcile.Desired, ch plan.Change) error {
	if p.api == nil {
		return fmt.Errorf("proxmox: an offline provider changes nothing")
	}
	switch op := ch.Op.(type) {
	case uploadBootISO:
		for _, node := range op.nodes {
			if err := p.uploadBootISO(ctx, node); err != nil {
				return err
			}
		}
		return nil
	case ensurePool:
		return p.ensurePool(ctx)
	case deletePool:
		return p.deletePool(ctx)
	case uploadCIData:
		return p.uploadCIData(ctx, want, op.hostname, op.node)
	case createVM:
		return p.createVM(ctx, want, op.hostname, op.node)
	case setFirewall:
		return p.withVM(ctx, op.hostname, func(ctx context.Context, v *vm) error { return p.setFirewall(ctx, v, op) })
	case resizeVM:
		return p.withVM(ctx, op.hostname, func(ctx context.Context, v *vm) error {
			params := map[string]any{"cores": op.cores, "memory": op.memoryMB}
			if err := taskDone(p.api.PostWithTask(ctx, params, fmt.Sprintf("/nodes/%s/qemu/%d/config", v.node, v.id))); err != nil {
				return fmt.Errorf("resizing VM %s: %w", v.name, err)
			}
			return nil
		})
	case growDisk:
		return p.withVM(ctx, op.hostname, func(ctx context.Context, v *vm) error {
			switch {
			case v.diskGB >= op.toGB:
				return nil // grown meanwhile: done
			case v.diskGB != op.fromGB:
				return fmt.Errorf("%w: the disk of %s is %d GB, the plan expected %d GB", reconcile.ErrPrecondition, v.name, v.diskGB, op.fromGB)
			}
			if _, err := p.api.ResizeQemuDisk(ctx, p.ref(v), "scsi0", op.toGB-v.diskGB); err != nil && !warningsOnly(err) {
				return fmt.Errorf("growing the disk of %s: %w", v.name, err)
			}
			return nil
		})
	case startVM:
		return p.withVM(ctx, op.hostname, p.start)
	case restartVM:
		return p.restart(ctx, op)
	case finalize:
		return p.withVM(ctx, op.hostname, p.finalize)
	case deleteVM:
		return p.withVMID(ctx, op.hostname, op.id, p.deleteVM)
	case deleteOrphanISO:
		return p.deleteOrphanISO(ctx, op)
	}
	return fmt.Errorf("proxmox: no operation for %s %s", ch.Action, ch.Resource)
}

// withVM looks an owned VM up by hostname and runs f on it; a VM that is
// gone, or that has a twin of the same name now, fails the precondition.
func (p *Provider) withVM(ctx context.Context, hostname string, f func(context.Context, *vm) error) error {
	inv, err := p.readVMs(ctx, hostname)
	if err != nil {
		return err
	}
	if own, ok := p.createdByThisRun(hostname); ok && inv.duplicates[hostname] != nil {
		// Another run created a twin of the VM this run created: the
		// newer of the two is removed by the run that created it.
		if err := p.keepOne(ctx, hostname, own); err != nil {
			return err
		}
		if inv, err = p.readVMs(ctx, hostname); err != nil {
			return err
		}
	}
	if dups, ok := inv.duplicates[hostname]; ok {
		return fmt.Errorf("%w: %d VMs are named %s now (ids %s); none of them is changed", reconcile.ErrPrecondition, len(dups), hostname, vmIDs(dups))
	}
	v, ok := inv.owned[hostname]
	if !ok {
		return fmt.Errorf("%w: VM %s does not exist", reconcile.ErrPrecondition, hostname)
	}
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	return f(ctx, v)
}

// withVMID looks an owned VM up by id and runs f on it; a VM that is gone
// or renamed fails the precondition.
func (p *Provider) withVMID(ctx context.Context, hostname string, id int, f func(context.Context, *vm) error) error {
	inv, err := p.readVMs(ctx, hostname)
	if err != nil {
		return err
	}
	v, ok := inv.vmByID(id)
	if !ok || v.name != hostname {
		return fmt.Errorf("%w: VM %d (%s) is not one of the cluster's VMs any more", reconcile.ErrPrecondition, id, hostname)
	}
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	return f(ctx, v)
}

func vmIDs(vms []*vm) string {
	ids := make([]string, len(vms))
	for i, v := range vms {
		ids[i] = strconv.Itoa(v.id)
	}
	return strings.Join(ids, ", ")
}

// warningsOnly reports whether a task error is a Proxmox task that ended
// with warnings: the change took effect.
func warningsOnly(err error) bool {
	return err != nil && strings.Contains(err.Error(), "WARNINGS:")
}

// taskDone checks a task exit status: OK and "WARNINGS: N" both mean the
// change took effect.
func taskDone(status string, err error) error {
	if err != nil && !warningsOnly(err) {
		return err
	}
	if status != "" && status != "OK" && !strings.HasPrefix(status, "WARNINGS:") {
		return errors.New("task ended with " + status)
	}
	return nil
}

func (p *Provider) ensurePool(ctx context.Context) error {
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	comment := p.poolComment()
	pool := proxmox.ConfigPool{Name: proxmox.PoolName(p.poolName()), Comment: &comment}
	if err := p.api.New().Pool.Set(ctx, pool); err != nil {
		return fmt.Errorf("writing pool %s: %w", p.poolName(), err)
	}
	return nil
}

// hasVolume reports whether a node's storage holds a volume.
func (p *Provider) hasVolume(ctx context.Context, node, storage, volid string) (bool, error) {
	list, err := p.api.GetItemListInterfaceArray(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content", node, storage))
	if err != nil {
		return false, fmt.Errorf("listing %s on %s: %w", storage, node, err)
	}
	for _, item := range list {
		if m, _ := item.(map[string]any); str(m["volid"]) == volid {
			return true, nil
		}
	}
	return false, nil
}

// upload stores an ISO; a task that ended with warnings counts when the
// file is there afterwards.
func (p *Provider) upload(ctx context.Context, node, storage, name string, data []byte) error {
	err := p.api.Upload(ctx, node, storage, "iso", name, bytes.NewReader(data))
	if err == nil {
		return nil
	}
	if warningsOnly(err) {
		if ok, lerr := p.hasVolume(ctx, node, storage, storage+":iso/"+name); lerr == nil && ok {
			p.log.Warn("upload ended with warnings but the file is there", "node", node, "file", name)
			return nil
		}
	}
	return fmt.Errorf("uploading %s to %s on %s: %w", name, storage, node, err)
}

// uploadBootISO fetches the boot ISO from the Image Factory and uploads it.
func (p *Provider) uploadBootISO(ctx context.Context, node string) error {
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	name, schematic, err := p.bootISO()
	if err != nil {
		return err
	}
	if ok, err := p.hasVolume(ctx, node, p.c.Proxmox.ISOStorage, p.isoVolume(name)); err != nil {
		return err
	} else if ok {
		return nil
	}
	body, err := machineconfig.SchematicYAML(p.c.BootExtensions())
	if err != nil {
		return err
	}
	if err := p.factoryRequest(ctx, http.MethodPost, "/schematics", body, nil); err != nil {
		return err
	}
	var iso bytes.Buffer
	path := fmt.Sprintf("/image/%s/%s/nocloud-amd64.iso", schematic, p.c.Talos.Version)
	if err := p.factoryRequest(ctx, http.MethodGet, path, nil, &iso); err != nil {
		return err
	}
	return p.upload(ctx, node, p.c.Proxmox.ISOStorage, name, iso.Bytes())
}

func (p *Provider) factoryRequest(ctx context.Context, method, path string, body []byte, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, method, p.factory+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("asking the Image Factory: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/yaml")
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return fmt.Errorf("asking the Image Factory %s: %w", p.factory, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("asking the Image Factory %s%s: %s", p.factory, path, resp.Status)
	}
	if out != nil {
		if _, err := io.Copy(out, resp.Body); err != nil {
			return fmt.Errorf("downloading %s%s: %w", p.factory, path, err)
		}
	}
	return nil
}

// uploadCIData writes a machine's config ISO, replacing an old one left by
// an interrupted run (its config may be stale).
func (p *Provider) uploadCIData(ctx context.Context, want *reconcile.Desired, hostname, node string) error {
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	config, ok := want.Configs[hostname]
	if !ok {
		return fmt.Errorf("no machine config for %s", hostname)
	}
	iso, err := CIDataISO(hostname, config)
	if err != nil {
		return err
	}
	storage := p.c.Proxmox.CIDataStorage
	volid := p.cidataVolume(hostname)
	if ok, err := p.hasVolume(ctx, node, storage, volid); err != nil {
		return err
	} else if ok {
		if err := taskDone(p.api.DeleteWithTask(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", node, storage, volid))); err != nil {
			return fmt.Errorf("replacing the stale config ISO of %s: %w", hostname, err)
		}
	}
	return p.upload(ctx, node, storage, cidataName(hostname), iso)
}

// createVM creates a machine's VM unless a VM of that name exists: the
// precondition is checked before every attempt, a retry with a fresh id
// included, and once the VM exists keepOne makes sure it has no twin that
// another run (another copy of the cluster's state) created meanwhile.
func (p *Provider) createVM(ctx context.Context, want *reconcile.Desired, hostname, node string) error {
	i := slices.IndexFunc(want.Machines, func(m machineconfig.Machine) bool { return m.Hostname == hostname })
	if i < 0 {
		return fmt.Errorf("%s is not a desired machine", hostname)
	}
	m := want.Machines[i]
	bootName, err := p.bootISOOn(ctx, node)
	if err != nil {
		return err
	}
	// /cluster/nextid reserves nothing: another client (a second agent
	// replica, a person in the web UI) may take the same id between the
	// two calls, and Proxmox then refuses the create with "VM <id> already
	// exists", having created nothing. A fresh id is asked for then, after
	// the precondition is checked again: the other client may be another
	// run creating this very machine.
	for attempt := 1; ; attempt++ {
		if err := p.absent(ctx, hostname); err != nil {
			return err
		}
		id, err := p.createOnce(ctx, m, node, bootName)
		if err != nil && attempt < idAttempts && strings.Contains(err.Error(), fmt.Sprintf("VM %d already exists", id)) {
			p.log.Info("VM id taken meanwhile; checking again and asking for another", "cluster", p.c.Name, "vm", hostname, "id", id)
			// Runs that keep asking at the same moment keep getting the
			// same id: each waits a random while, longer every time.
			if err := retry.Sleep(ctx, time.Duration(rand.Int64N(int64(attempt)*int64(idBackoff)))); err != nil {
				return fmt.Errorf("creating VM %s: %w", hostname, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("creating VM %s (id %d) on %s: %w", hostname, id, node, err)
		}
		p.log.Info("created vm", "cluster", p.c.Name, "vm", hostname, "id", id, "node", node)
		p.remember(hostname, id)
		return p.keepOne(ctx, hostname, id)
	}
}

// bootISOOn returns the boot ISO a new VM on node boots from: the
// engine's, or, when only that is on the node, the Python taloscluster's
// same image (see legacyBootISO).
func (p *Provider) bootISOOn(ctx context.Context, node string) (string, error) {
	name, _, err := p.bootISO()
	if err != nil {
		return "", err
	}
	legacy, ok := p.legacyBootISO()
	if !ok {
		return name, nil
	}
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	storage := p.c.Proxmox.ISOStorage
	if have, err := p.hasVolume(ctx, node, storage, p.isoVolume(name)); err != nil || have {
		return name, err
	}
	if have, err := p.hasVolume(ctx, node, storage, p.isoVolume(legacy)); err != nil || !have {
		return name, err
	}
	return legacy, nil
}

// createOnce asks for a VM id and creates the VM with it, under one call's
// deadline.
func (p *Provider) createOnce(ctx context.Context, m machineconfig.Machine, node, bootName string) (int, error) {
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	id, err := p.api.GetNextID(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("allocating a VM id: %w", err)
	}
	params := p.vmParams(m, int(id), bootName)
	status, err := p.api.PostWithTask(ctx, params, fmt.Sprintf("/nodes/%s/qemu", node))
	return int(id), taskDone(status, err)
}

// idAttempts bounds the VM ids tried for one create when others take them
// first: the agent creates the machines of many clusters at once, each
// asking /cluster/nextid, so a busy Proxmox hands one id to several.
// idBackoff is the most the first retry waits, a random part of it.
const (
	idAttempts = 10
	idBackoff  = 100 * time.Millisecond
)

// vmParams are the Proxmox create parameters of a machine's VM.
func (p *Provider) vmParams(m machineconfig.Machine, id int, bootISO string) map[string]any {
	px := p.c.Proxmox
	net0 := fmt.Sprintf("virtio=%s,bridge=%s,firewall=1", strings.ToUpper(m.ClusterMAC), p.clusterBridge())
	if vlan := p.c.Network.Cluster.VLAN; vlan > 0 {
		net0 += ",tag=" + strconv.Itoa(vlan)
	}
	params := map[string]any{
		"vmid":    id,
		"name":    m.Hostname,
		"pool":    p.poolName(),
		"tags":    strings.Join(p.vmTags(m), ";"),
		"cores":   m.Pool.Cores,
		"memory":  m.Pool.Memory * 1024,
		"cpu":     "host",
		"ostype":  "l26",
		"agent":   "1",
		"scsihw":  "virtio-scsi-single",
		"scsi0":   fmt.Sprintf("%s:%d,iothread=1,discard=on", px.Storage, m.Pool.Disk),
		"ide2":    p.isoVolume(bootISO) + ",media=cdrom",
		"ide3":    p.cidataVolume(m.Hostname) + ",media=cdrom",
		"boot":    "order=scsi0;ide2",
		"net0":    net0,
		"onboot":  1,
		"serial0": "socket",
	}
	if b := px.Network.ExternalBridge; b != "" && m.ExternalMAC != "" {
		net1 := fmt.Sprintf("virtio=%s,bridge=%s,firewall=1", strings.ToUpper(m.ExternalMAC), b)
		if ext := p.c.Network.External; ext != nil && ext.VLAN > 0 {
			net1 += ",tag=" + strconv.Itoa(ext.VLAN)
		}
		params["net1"] = net1
	}
	return params
}

func (p *Provider) ref(v *vm) *proxmox.VmRef {
	r := proxmox.NewVmRef(proxmox.GuestID(v.id))
	r.SetNode(v.node)
	r.SetVmType(proxmox.GuestQemu)
	return r
}

// setFirewall sets the options and adds and deletes the rules the step
// names; a rule to add that is there already, or one to delete that is
// gone, is done. With start it then starts the VM.
func (p *Provider) setFirewall(ctx context.Context, v *vm, op setFirewall) error {
	if len(op.options) > 0 {
		params := map[string]any{}
		for k, val := range op.options {
			params[k] = val
		}
		if err := p.api.Put(ctx, params, fmt.Sprintf("/nodes/%s/qemu/%d/firewall/options", v.node, v.id)); err != nil {
			return fmt.Errorf("setting the firewall options of %s: %w", v.name, err)
		}
	}
	observed, err := p.rules(ctx, v)
	if err != nil {
		return err
	}
	for _, r := range op.add {
		if slices.ContainsFunc(observed, func(o fwRule) bool { return o.Enable && o.key() == r.key() }) {
			continue
		}
		if err := p.addRule(ctx, v, r); err != nil {
			return err
		}
	}
	if len(op.del) > 0 {
		// Positions moved with the additions: look the rules up again,
		// and delete from the bottom so the others keep their place.
		if observed, err = p.rules(ctx, v); err != nil {
			return err
		}
		slices.SortFunc(observed, func(a, b fwRule) int { return b.Pos - a.Pos })
		for _, r := range op.del {
			i := slices.IndexFunc(observed, func(o fwRule) bool { return o.same(r) })
			if i < 0 {
				continue
			}
			if err := p.deleteRule(ctx, v, observed[i]); err != nil {
				return err
			}
			observed = slices.Delete(observed, i, i+1)
		}
	}
	if op.start {
		return p.start(ctx, v)
	}
	return nil
}

// start starts a VM that is not running.
func (p *Provider) start(ctx context.Context, v *vm) error {
	if v.running {
		return nil
	}
	if err := taskDone(p.api.StartVm(ctx, p.ref(v))); err != nil {
		return fmt.Errorf("starting VM %s: %w", v.name, err)
	}
	return nil
}

// finalize detaches the boot and config ISOs and deletes the config ISO,
// which holds the machine config. The VM's config is changed only when
// something is still attached: after a detach whose answer was lost, only
// the file is left to delete.
func (p *Provider) finalize(ctx context.Context, v *vm) error {
	if strings.Contains(v.config["ide2"], ".iso") || v.config["ide3"] != "" {
		params := map[string]any{"ide2": "none,media=cdrom", "delete": "ide3"}
		if err := taskDone(p.api.PostWithTask(ctx, params, fmt.Sprintf("/nodes/%s/qemu/%d/config", v.node, v.id))); err != nil {
			return fmt.Errorf("detaching the ISOs of %s: %w", v.name, err)
		}
	}
	storage := p.c.Proxmox.CIDataStorage
	volid := p.cidataVolume(v.name)
	if ok, err := p.hasVolume(ctx, v.node, storage, volid); err != nil {
		return err
	} else if ok {
		if err := taskDone(p.api.DeleteWithTask(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", v.node, storage, volid))); err != nil {
			return fmt.Errorf("deleting the config ISO of %s: %w", v.name, err)
		}
	}
	return nil
}
