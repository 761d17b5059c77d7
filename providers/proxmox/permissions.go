package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// Preflight: before the first change of a converge or destroy, the token's
// privileges are read (GET /access/permissions, nothing else but GETs)
// and every step of the plan is matched against the privileges Proxmox VE
// 9 checks for the calls the step may make. The table of those checks is
// this provider's own, read from Proxmox's sources (pve-manager
// PVE/API2/Pool.pm, pve-storage PVE/API2/Storage/{Status,Content}.pm and
// PVE/Storage.pm check_volume_access, qemu-server PVE/API2/Qemu.pm
// create_vm, update_vm_api, resize_vm, vm_start, vm_stop, vm_reboot, destroy_vm and
// $check_vm_modify_config_perm, pve-guest-common PVE/GuestHelpers.pm
// check_vnet_access and assert_tag_permissions, pve-firewall
// PVE/Firewall.pm rules_modify_permissions and PVE/API2/Firewall/VM.pm).

var _ reconcile.Preflighter = (*Provider)(nil)

// newVMPath stands for the ACL path of a VM this run creates: its ID is
// only known when /cluster/nextid hands it out, and no ACL names it, so it
// holds what /vms (or /) propagates.
const newVMPath = "/vms/<new id>"

// need is one privilege check Proxmox makes for a step: privs (all of
// them, or with anyOf one of them) on the first of paths that has them
// (check_vm_perm tries a VM's pool before the VM). why and of say what for
// ("create VM", "demo-worker-03").
type need struct {
	privs   []string
	anyOf   bool
	paths   []string
	why, of string
}

// grants are the privileges GET /access/permissions reports: path ->
// privilege -> propagation flag.
type grants map[string]map[string]bool

// holds reports whether priv is held on path as Proxmox resolves it
// (AccessControl.pm roles, RPCEnvironment.pm compile_acl_path). A path the
// answer lists was computed by Proxmox for exactly that path (pool
// membership included) and is taken as it is. Any other path has no ACL
// entry of its own and is in no pool, so it holds what the nearest
// ancestor with an ACL propagates: the privileges flagged 1 on the
// nearest listed ancestor that flags any (an ancestor whose entries do not
// propagate leaves what comes from above it).
func (g grants) holds(path, priv string) bool {
	if m, ok := g[path]; ok {
		_, held := m[priv]
		return held
	}
	for q := parentPath(path); ; q = parentPath(q) {
		if m, ok := g[q]; ok && propagates(m) {
			return m[priv]
		}
		if q == "/" {
			return false
		}
	}
}

// propagates reports whether any privilege of a path is flagged 1.
func propagates(m map[string]bool) bool {
	for _, flag := range m {
		if flag {
			return true
		}
	}
	return false
}

func parentPath(p string) string {
	i := strings.LastIndex(p, "/")
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// met reports whether a need is met on one of its paths.
func (g grants) met(n need) bool {
	for _, path := range n.paths {
		held := 0
		for _, priv := range n.privs {
			if g.holds(path, priv) {
				held++
			}
		}
		if (n.anyOf && held > 0) || (!n.anyOf && held == len(n.privs)) {
			return true
		}
	}
	return false
}

// readGrants reads the token's privileges with GET /access/permissions.
// proxmox-api-go has no exported call that returns them as Proxmox answers
// them: GetUserPermissions first lists /access/users (GET
// /access/users?full=1), exits the process (log.Fatal) when the GET fails
// and keeps only "/"; CheckPermissions caches the answer for the client's
// life and takes a path the answer does not list for allowed. So its
// generic GET is used.
func (p *Provider) readGrants(ctx context.Context) (grants, error) {
	raw, err := p.api.GetItemConfigMapStringInterface(ctx, "/access/permissions", "the token's", "permissions")
	if err != nil {
		return nil, err
	}
	out := grants{}
	for path, v := range raw {
		privs, _ := v.(map[string]any)
		m := map[string]bool{}
		for priv, flag := range privs {
			m[priv] = str(flag) == "1"
		}
		out[path] = m
	}
	return out, nil
}

// Preflight checks, with GET calls only, that the API token holds every
// privilege Proxmox will check for the provider's steps of the plan. It
// returns nil when it does, an error naming each missing privilege, its
// path and the step that needs it otherwise, and a transient error when
// Proxmox could not be read.
func (p *Provider) Preflight(ctx context.Context, pl *plan.Plan) error {
	var steps []plan.Change
	for _, ch := range pl.Changes {
		if ch.Domain == plan.DomainProvider && ch.Op != nil {
			steps = append(steps, ch)
		}
	}
	if len(steps) == 0 {
		return nil
	}
	if p.api == nil {
		return fmt.Errorf("proxmox: an offline provider checks no permissions")
	}
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	g, err := p.readGrants(ctx)
	if err != nil {
		return p.readError("reading the token's privileges (GET /access/permissions)", err)
	}
	ids, err := p.vmIDsByName(ctx, steps)
	if err != nil {
		return p.readError("listing the cluster's VMs", err)
	}
	zone, err := p.clusterZone(ctx, steps)
	if err != nil {
		return err
	}
	var needs []need
	for _, ch := range steps {
		needs = append(needs, p.stepNeeds(ch, ids, zone)...)
	}
	return missingError(g, needs, p.c.Proxmox.TokenID)
}

// readError classifies a failed read: no answer or a server error is
// transient, a refused token is not.
func (p *Provider) readError(what string, err error) error {
	err = fmt.Errorf("%s at %s: %w", what, p.c.Proxmox.APIURL(), err)
	if refused(err) {
		return retry.Terminal(fmt.Errorf("%w (check proxmox.token_id and proxmox.token_secret)", err))
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	var code int
	var ptr *proxmox.ApiError
	var val proxmox.ApiError
	switch {
	case errors.As(err, &ptr):
		code, _ = strconv.Atoi(ptr.Code)
	case errors.As(err, &val):
		code, _ = strconv.Atoi(val.Code)
	default:
		return retry.Transient(err) // no answer
	}
	if code >= 500 {
		return retry.Transient(err)
	}
	return err
}

// missingError names every need that is not met: the missing privileges
// with the paths they are missing on and what needs them, e.g. "the
// Proxmox token lacks VM.Allocate on /vms/104 (needed to delete VM
// demo-worker-03)". Privileges missing on the same paths for the same
// steps are named together.
func missingError(g grants, needs []need, tokenID string) error {
	type want struct{ privs, paths, why string }
	var wants []want
	subjects := map[want][]string{}
	for _, n := range needs {
		if g.met(n) {
			continue
		}
		privs := n.privs
		if !n.anyOf && len(privs) > 1 {
			// Name only what is held on none of the paths.
			var lacking []string
			for _, priv := range privs {
				if !g.met(need{privs: []string{priv}, paths: n.paths}) {
					lacking = append(lacking, priv)
				}
			}
			if len(lacking) > 0 {
				privs = lacking
			}
		}
		sep := ", "
		if n.anyOf {
			sep = " or "
		}
		w := want{strings.Join(privs, sep), strings.Join(n.paths, " or "), n.why}
		if _, seen := subjects[w]; !seen {
			wants = append(wants, w)
		}
		if n.of != "" && !slices.Contains(subjects[w], n.of) {
			subjects[w] = append(subjects[w], n.of)
		}
	}
	if len(wants) == 0 {
		return nil
	}
	// The reasons of each privilege on its paths, then the privileges
	// that share paths and reasons.
	type held struct{ privs, paths string }
	var order []held
	reasons := map[held][]string{}
	for _, w := range wants {
		h := held{w.privs, w.paths}
		if _, seen := reasons[h]; !seen {
			order = append(order, h)
		}
		reasons[h] = append(reasons[h], strings.TrimSpace(w.why+" "+joinAnd(subjects[w])))
	}
	type line struct{ paths, reasons string }
	var lines []line
	privsOf := map[line][]string{}
	for _, h := range order {
		l := line{h.paths, strings.Join(reasons[h], ", and to ")}
		if _, seen := privsOf[l]; !seen {
			lines = append(lines, l)
		}
		privsOf[l] = append(privsOf[l], h.privs)
	}
	parts := make([]string, len(lines))
	newVM := false
	for i, l := range lines {
		parts[i] = fmt.Sprintf("%s on %s (needed to %s)", strings.Join(privsOf[l], ", "), l.paths, l.reasons)
		newVM = newVM || strings.Contains(l.paths, newVMPath)
	}
	hint := ""
	if newVM {
		hint = fmt.Sprintf(" (%s is the ID Proxmox gives a new VM: it holds what /vms propagates)", newVMPath)
	}
	return fmt.Errorf("the Proxmox token lacks %s; grant them to %s%s and run again", strings.Join(parts, "; "), tokenID, hint)
}

// joinAnd joins names as "a", "a and b", "a, b and c".
func joinAnd(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// vmIDsByName maps the hostnames of the steps that name a VM by hostname
// to the IDs of the cluster's VMs of that name, read as Observe does
// (/cluster/resources, the config for a VM listed without a name yet). A
// hostname missing from the map is a VM this run creates.
func (p *Provider) vmIDsByName(ctx context.Context, steps []plan.Change) (map[string]int, error) {
	wanted := false
	for _, ch := range steps {
		switch ch.Op.(type) {
		case setFirewall, resizeVM, growDisk, startVM, finalize:
			wanted = true
		}
	}
	ids := map[string]int{}
	if !wanted {
		return ids, nil
	}
	list, err := p.api.GetResourceList(ctx, "vm")
	if err != nil {
		return nil, err
	}
	for _, item := range list {
		m, _ := item.(map[string]any)
		if str(m["type"]) != "qemu" || str(m["lock"]) == "create" {
			continue
		}
		if ours, conflict := p.claim(str(m["pool"]), splitTags(str(m["tags"]))); !ours || conflict != "" {
			continue
		}
		id, name := num(m["vmid"]), str(m["name"])
		if name == "" {
			conf, err := p.api.GetVmConfig(ctx, p.ref(&vm{id: id, node: str(m["node"])}))
			if vmGone(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			name = str(conf["name"])
		}
		ids[name] = id
	}
	return ids, nil
}

// clusterZone is the SDN zone of the cluster network, which a create
// checks SDN.Use in (GuestHelpers check_vnet_access: SDN.Use on
// /sdn/zones/<zone>/<vnet>): localnetwork for a bridge, the vnet's zone
// for an existing vnet, read with GET /cluster/sdn/vnets/<vnet>. When
// Proxmox refuses that read (it needs SDN.Audit), the zone is "" and the
// vnet's SDN.Use is not checked: not knowing is no reason to refuse.
func (p *Provider) clusterZone(ctx context.Context, steps []plan.Change) (string, error) {
	vnet := p.c.Proxmox.Network.ClusterVNet
	if p.c.Proxmox.Network.ClusterBridge != "" || vnet == "" {
		return "localnetwork", nil
	}
	creates := slices.ContainsFunc(steps, func(ch plan.Change) bool {
		_, ok := ch.Op.(createVM)
		return ok
	})
	if !creates {
		return "", nil
	}
	conf, err := p.api.GetItemConfigMapStringInterface(ctx, "/cluster/sdn/vnets/"+url.PathEscape(vnet), "vnet", vnet)
	if err != nil {
		err = p.readError("reading the zone of vnet "+vnet, err)
		if retry.IsTransient(err) || refused(err) {
			return "", err
		}
		p.log.Debug("the vnet's zone cannot be read; its SDN.Use is not checked", "vnet", vnet, "error", err)
		return "", nil
	}
	if z := str(conf["zone"]); z != "" {
		return z, nil
	}
	return "localnetwork", nil
}

// vmPaths are the paths a step on the named VM is checked on: its own
// /vms/<id>, or for a VM this run creates the new ID's path and the pool,
// whose roles a member holds (compile_acl_path).
func (p *Provider) vmPaths(hostname string, ids map[string]int) []string {
	if id, ok := ids[hostname]; ok {
		return []string{"/vms/" + strconv.Itoa(id)}
	}
	return []string{newVMPath, "/pool/" + p.poolName()}
}

// stepNeeds maps one step to the checks Proxmox makes for every call it
// may make (a VM that may be running is stopped first, a config ISO that
// may be there is deleted), whether or not that call turns out to be
// needed when the step runs.
func (p *Provider) stepNeeds(ch plan.Change, ids map[string]int, zone string) []need {
	px := p.c.Proxmox
	pool := []string{"/pool/" + p.poolName()}
	storage := func(name, priv, why, of string) need {
		return need{privs: []string{priv}, paths: []string{"/storage/" + name}, why: why, of: of}
	}
	onVM := func(hostname, why, priv string) need {
		return need{privs: []string{priv}, paths: p.vmPaths(hostname, ids), why: why, of: hostname}
	}
	switch op := ch.Op.(type) {
	case uploadBootISO:
		// Status.pm upload: Datastore.AllocateTemplate on the storage.
		name, _, _ := p.bootISO()
		var out []need
		for _, node := range op.nodes {
			out = append(out, storage(px.ISOStorage, "Datastore.AllocateTemplate",
				fmt.Sprintf("upload the boot ISO %s to %s on", name, px.ISOStorage), node))
		}
		return out
	case ensurePool:
		// proxmox-api-go reads GET /pools/{pool}, then creates (POST
		// /pools) or updates (PUT /pools/{pool}): Pool.Audit, then
		// Pool.Allocate on /pool/{pool} (Pool.pm).
		verb := "create pool"
		if ch.Action == plan.ActionUpdate {
			verb = "restore the comment of pool"
		}
		return []need{
			{privs: []string{"Pool.Audit"}, paths: pool, why: "read pool", of: p.poolName()},
			{privs: []string{"Pool.Allocate"}, paths: pool, why: verb, of: p.poolName()},
		}
	case deletePool:
		// Pool.pm delete_pool_deprecated (DELETE /pools/{pool}).
		return []need{{privs: []string{"Pool.Allocate"}, paths: pool, why: "delete pool", of: p.poolName()}}
	case uploadCIData:
		// Status.pm upload; a config ISO left by an interrupted run is
		// deleted first (Content.pm delete: Datastore.Allocate).
		return []need{
			storage(px.CIDataStorage, "Datastore.AllocateTemplate", "upload the config ISO of", op.hostname),
			storage(px.CIDataStorage, "Datastore.Allocate", "delete the config ISO of", op.hostname),
		}
	case createVM:
		return p.createNeeds(op.hostname, zone)
	case setFirewall:
		// Firewall options and rules: VM.Config.Network
		// (rules_modify_permissions, Firewall/VM.pm set_options); the
		// start: VM.PowerMgmt (vm_start).
		var out []need
		if len(op.options) > 0 || len(op.add) > 0 || len(op.del) > 0 {
			out = append(out, onVM(op.hostname, "set the firewall of", "VM.Config.Network"))
		}
		if op.start {
			out = append(out, onVM(op.hostname, "start", "VM.PowerMgmt"))
		}
		return out
	case resizeVM:
		// update_vm_async with cores and memory: VM.Config.CPU and
		// VM.Config.Memory ($check_vm_modify_config_perm).
		return []need{onVM(op.hostname, "resize", "VM.Config.CPU"), onVM(op.hostname, "resize", "VM.Config.Memory")}
	case growDisk:
		// resize_vm: VM.Config.Disk on the VM, and in its worker
		// Datastore.AllocateSpace on the disk's storage.
		return []need{
			onVM(op.hostname, "grow the disk of", "VM.Config.Disk"),
			storage(px.Storage, "Datastore.AllocateSpace", "grow the disk of", op.hostname),
		}
	case startVM:
		return []need{onVM(op.hostname, "start", "VM.PowerMgmt")}
	case restartVM:
		// vm_reboot: VM.PowerMgmt on /vms/{vmid}.
		return []need{{privs: []string{"VM.PowerMgmt"}, paths: []string{"/vms/" + strconv.Itoa(op.id)}, why: "restart", of: op.hostname}}
	case finalize:
		// Detaching CD-ROMs: VM.Config.CDROM for the old and the new
		// value of each drive (update_vm_api's $check_drive_perms, in the
		// qmconfig worker); the config ISO's deletion:
		// Datastore.Allocate (Content.pm delete).
		return []need{
			onVM(op.hostname, "detach the ISOs of", "VM.Config.CDROM"),
			storage(px.CIDataStorage, "Datastore.Allocate", "delete the config ISO of", op.hostname),
		}
	case deleteVM:
		// vm_stop: VM.PowerMgmt; destroy_vm: VM.Allocate; the config
		// ISO: Datastore.Allocate.
		path := []string{"/vms/" + strconv.Itoa(op.id)}
		return []need{
			{privs: []string{"VM.PowerMgmt"}, paths: path, why: "stop VM", of: op.hostname},
			{privs: []string{"VM.Allocate"}, paths: path, why: "delete VM", of: op.hostname},
			storage(px.CIDataStorage, "Datastore.Allocate", "delete the config ISO of", op.hostname),
		}
	case deleteOrphanISO:
		return []need{storage(px.CIDataStorage, "Datastore.Allocate", "delete the config ISO left by", op.hostname)}
	}
	return nil
}

// configPrivs is the privilege qemu-server's
// $check_vm_modify_config_perm checks for each option the provider sets on
// create, from its option tables ($cpuoptions, $memoryoptions,
// $hwtypeoptions, $generaloptions, $diskoptions, net\d+).
var configPrivs = map[string]string{
	"cores": "VM.Config.CPU", "cpu": "VM.Config.CPU", "sockets": "VM.Config.CPU",
	"memory": "VM.Config.Memory", "balloon": "VM.Config.Memory",
	"scsihw": "VM.Config.HWType", "machine": "VM.Config.HWType", "vga": "VM.Config.HWType",
	"name": "VM.Config.Options", "ostype": "VM.Config.Options", "agent": "VM.Config.Options",
	"onboot": "VM.Config.Options", "description": "VM.Config.Options", "protection": "VM.Config.Options",
	"boot": "VM.Config.Disk",
}

var (
	driveKeyRE = regexp.MustCompile(`^(ide|sata|scsi|virtio)\d+$|^efidisk0$|^tpmstate0$`)
	netKeyRE   = regexp.MustCompile(`^net\d+$`)
	newDiskRE  = regexp.MustCompile(`^(([^/:\s]+):)?(\d+(\.\d+)?)$`)
)

// createNeeds are create_vm's checks for the parameters the provider
// sends (vmParams): VM.Allocate on the new VM or the pool; for a new disk
// Datastore.AllocateSpace on its storage; for an ISO
// (check_volume_access) Datastore.Allocate, Datastore.AllocateSpace or
// Datastore.Audit on its storage; each option's privilege on the pool or
// the new VM; a socket serial port VM.Config.HWType; SDN.Use on each NIC's
// bridge or VLAN; and in the worker, for the tags, VM.Config.Options on
// the new VM alone (assert_tag_permissions passes no pool).
func (p *Provider) createNeeds(hostname, zone string) []need {
	var m machineconfig.Machine
	for _, mm := range machineconfig.Machines(p.c) {
		if mm.Hostname == hostname {
			m = mm
		}
	}
	name, _, _ := p.bootISO()
	params := p.vmParams(m, 0, name)
	vmOrPool := []string{newVMPath, "/pool/" + p.poolName()}
	create := func(paths []string, privs ...string) need {
		return need{privs: privs, anyOf: len(privs) > 1, paths: paths, why: "create VM", of: hostname}
	}
	out := []need{create(vmOrPool, "VM.Allocate")}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := fmt.Sprint(params[k])
		switch {
		case k == "vmid" || k == "pool":
		case k == "tags":
			out = append(out, need{privs: []string{"VM.Config.Options"}, paths: []string{newVMPath}, why: "set the tags of VM", of: hostname})
		case driveKeyRE.MatchString(k):
			file, _, _ := strings.Cut(v, ",")
			store, _, _ := strings.Cut(file, ":")
			if strings.Contains(v, "media=cdrom") {
				out = append(out, create([]string{"/storage/" + store}, "Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.Audit"))
			} else if newDiskRE.MatchString(file) {
				out = append(out, create([]string{"/storage/" + store}, "Datastore.AllocateSpace"))
			}
		case netKeyRE.MatchString(k):
			out = append(out, create(vmOrPool, "VM.Config.Network"))
			bridge, tag := propOf(v, "bridge"), propOf(v, "tag")
			z := "localnetwork"
			if bridge == p.clusterBridge() {
				z = zone
			}
			if z == "" {
				continue // a vnet whose zone could not be read
			}
			path := "/sdn/zones/" + z + "/" + bridge
			if tag != "" {
				path += "/" + tag
			}
			out = append(out, create([]string{path}, "SDN.Use"))
		case strings.HasPrefix(k, "serial"):
			out = append(out, create(vmOrPool, "VM.Config.HWType"))
		default:
			if priv, ok := configPrivs[k]; ok {
				out = append(out, create(vmOrPool, priv))
			}
		}
	}
	return out
}
