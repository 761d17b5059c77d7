package proxmox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/internal/factoryhttp"
	"github.com/taloscluster/taloscluster/internal/tlstrust"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// CallTimeout bounds one Proxmox API call (a task wait included).
const CallTimeout = 2 * time.Minute

// Provider runs a cluster's machines on Proxmox VE.
type Provider struct {
	c       *spec.Cluster
	api     *proxmox.Client
	http    *http.Client // for the Image Factory
	log     *slog.Logger
	factory string

	mu sync.Mutex
	// created holds the VM this run created for each machine, by
	// hostname, so a twin another run created is told from it.
	created map[string]int
}

var (
	_ reconcile.Infra         = (*Provider)(nil)
	_ reconcile.MachineReader = (*Provider)(nil)
)

// New connects to the Proxmox API of cluster c. files is the cluster
// directory (on disk or in a commit's tree): a relative tls_verify CA path
// is read from it, an absolute one from the host unless NoHostFiles. Every API request is bounded by RequestTimeout (see
// WithRequestTimeout), every call by CallTimeout.
func New(c *spec.Cluster, files fs.FS, log *slog.Logger, opts ...Option) (*Provider, error) {
	if c.Proxmox == nil {
		return nil, fmt.Errorf("cluster %s has no proxmox section", c.Name)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	px := c.Proxmox
	o := options{requestTimeout: RequestTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	tlsCfg, err := tlstrust.Config(px.TLSVerify, "proxmox.tls_verify", files, !o.noHostFiles)
	if err != nil {
		return nil, err
	}
	hc := apiClient(&http.Transport{TLSClientConfig: tlsCfg}, o.requestTimeout)
	api, err := proxmox.NewClient(px.APIURL(), hc, "", tlsCfg, "", int(CallTimeout/time.Second), false)
	if err != nil {
		return nil, fmt.Errorf("creating the Proxmox client for %s: %w", px.APIURL(), err)
	}
	var id proxmox.ApiTokenID
	if err := id.Parse(px.TokenID); err != nil {
		return nil, fmt.Errorf("reading proxmox.token_id: it must look like user@realm!tokenname")
	}
	api.SetAPIToken(id, proxmox.ApiTokenSecret(px.TokenSecret))
	return &Provider{
		c:       c,
		api:     api,
		http:    factoryhttp.Client(tlsCfg, 10*time.Minute),
		log:     log,
		factory: px.ImageFactory,
	}, nil
}

// Offline returns a provider that only plans: it has no API client, so
// Observe and Apply fail. plan --offline uses it with Empty.
func Offline(c *spec.Cluster) (*Provider, error) {
	if c.Proxmox == nil {
		return nil, fmt.Errorf("cluster %s has no proxmox section", c.Name)
	}
	return &Provider{c: c, log: slog.New(slog.DiscardHandler), factory: c.Proxmox.ImageFactory}, nil
}

func (p *Provider) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, CallTimeout)
}

// Names of the cluster's Proxmox objects.
func (p *Provider) poolName() string { return "taloscluster-" + p.c.Name }

func (p *Provider) poolComment() string {
	return "managed-by=taloscluster cluster=" + p.c.Name
}

// vmTags are the ownership tags of a machine.
func (p *Provider) vmTags(m machineconfig.Machine) []string {
	return []string{"taloscluster", "cluster_" + p.c.Name, "role_" + string(m.Role()), "pool_" + m.Pool.Name}
}

// vm is an owned VM as observed.
type vm struct {
	id        int
	node      string
	name      string
	running   bool
	tags      []string
	cores     int
	memoryMB  int
	diskGB    int
	storage   string
	bridge    string
	vlan      int    // the cluster NIC's VLAN tag, 0 for none
	extBridge string // the external NIC's bridge, "" without one
	extVLAN   int    // the external NIC's VLAN tag, 0 for none
	config    map[string]string
	addresses []netip.Addr
	noAddress string // why a running VM reports no address
	fwOptions map[string]string
	fwRules   []fwRule
	// restartPending lists, for a running VM, the changes of its size
	// that Proxmox keeps pending until the VM restarts, such as
	// "cores 2 -> 4"; config holds them applied, as GET config does.
	restartPending []string
}

// inventory is what Observe found.
type inventory struct {
	// offline is set on the inventory of a plan that asked nothing.
	offline         bool
	version         string
	nodes           []string
	clusterFirewall bool
	poolExists      bool
	poolComment     string
	owned           map[string]*vm // by hostname, when exactly one owned VM has it
	// duplicates are owned VMs that share a hostname, by hostname (two or
	// more each, by id): none of them is taken for the machine.
	duplicates map[string][]*vm
	// misplaced are VMs whose tags and pool disagree about their cluster:
	// not this cluster's, and never touched.
	misplaced []misplacedVM
	// foreign are the VMs that carry a desired hostname but are not this
	// cluster's (no ownership tags, or in a pool that is not its own), by
	// name: never adopted, and no second VM of that name is made.
	foreign map[string]foreignVM
	// isos are the boot and config ISOs present, by "node/volid".
	isos map[string]bool
	// missingStorage are the ISO storages Proxmox does not have, with its
	// answer.
	missingStorage map[string]string
	// replaced are the machines a remediation deletes before this plan
	// creates them anew, with the Proxmox node each ran on (PlanReplace).
	replaced map[string]string
}

// foreignVM is a VM that is not this cluster's but has the name of one of
// its machines.
type foreignVM struct {
	id   int
	node string
}

// misplacedVM is a VM that carries this cluster's ownership tags but sits
// in another pool, or sits in this cluster's pool with another cluster's
// tags.
type misplacedVM struct {
	id               int
	name, node, pool string
	reason           string // how its pool and tags disagree
}

// Empty returns the inventory of a cluster of which nothing exists, for an
// offline plan: no node, pool, VM or ISO is known.
func (p *Provider) Empty() reconcile.Inventory {
	return newInventory(true)
}

func newInventory(offline bool) *inventory {
	return &inventory{offline: offline, owned: map[string]*vm{}, duplicates: map[string][]*vm{}, foreign: map[string]foreignVM{}, isos: map[string]bool{}, missingStorage: map[string]string{}}
}

// Machines lists the owned VMs by hostname; the VMs that share a hostname
// are each listed, so none of them passes for the machine and every one
// counts as existing.
func (inv *inventory) Machines() []reconcile.Machine {
	var vms []*vm
	for _, v := range inv.owned {
		vms = append(vms, v)
	}
	for _, dups := range inv.duplicates {
		vms = append(vms, dups...)
	}
	slices.SortFunc(vms, func(a, b *vm) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return a.id - b.id
	})
	out := make([]reconcile.Machine, 0, len(vms))
	for _, v := range vms {
		role := spec.RoleWorker
		if slices.Contains(v.tags, "role_controlplane") {
			role = spec.RoleControlPlane
		}
		out = append(out, reconcile.Machine{Hostname: v.name, Role: role, Running: v.running, Addresses: v.addresses, NoAddress: v.noAddress,
			RestartPending: slices.Clone(v.restartPending)})
	}
	return out
}

// vmByID returns the owned VM with id, duplicates included.
func (inv *inventory) vmByID(id int) (*vm, bool) {
	for _, v := range inv.owned {
		if v.id == id {
			return v, true
		}
	}
	for _, dups := range inv.duplicates {
		for _, v := range dups {
			if v.id == id {
				return v, true
			}
		}
	}
	return nil, false
}

// Observe reads the pool, the owned VMs with their config, firewall and
// addresses, and the boot ISOs present.
func (p *Provider) Observe(ctx context.Context) (reconcile.Inventory, error) {
	if p.api == nil {
		return nil, fmt.Errorf("proxmox: an offline provider observes nothing")
	}
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	inv := newInventory(false)
	v, err := p.api.GetVersion(ctx)
	if err != nil {
		if refused(err) {
			return nil, fmt.Errorf("reading the Proxmox version at %s: the API token %s was refused (check proxmox.token_id and proxmox.token_secret): %w", p.c.Proxmox.APIURL(), p.c.Proxmox.TokenID, err)
		}
		return nil, fmt.Errorf("reading the Proxmox version at %s: %w", p.c.Proxmox.APIURL(), err)
	}
	inv.version = v.String()
	nodes, err := p.api.GetResourceList(ctx, "node")
	if err != nil {
		return nil, fmt.Errorf("listing Proxmox nodes: %w", err)
	}
	for _, n := range nodes {
		m, _ := n.(map[string]any)
		if str(m["status"]) == "online" {
			inv.nodes = append(inv.nodes, str(m["node"]))
		}
	}
	slices.Sort(inv.nodes)
	fw, err := p.api.GetItemConfigMapStringInterface(ctx, "/cluster/firewall/options", "cluster firewall", "options")
	if err != nil {
		return nil, fmt.Errorf("reading the datacenter firewall options: %w", err)
	}
	inv.clusterFirewall = str(fw["enable"]) == "1"
	pools, err := p.api.New().Pool.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing Proxmox pools: %w", err)
	}
	if pool, ok := pools.AsMap()[proxmox.PoolName(p.poolName())]; ok {
		inv.poolExists, inv.poolComment = true, pool.GetComment()
	}
	if err := p.observeVMs(ctx, inv, nil); err != nil {
		return nil, err
	}
	if err := p.observeISOs(ctx, inv); err != nil {
		return nil, err
	}
	return inv, nil
}

// ReadMachines (reconcile.MachineReader) reads the named machines only:
// the VM list, then each of those VMs, as Observe reads them.
func (p *Provider) ReadMachines(ctx context.Context, hostnames []string) ([]reconcile.Machine, error) {
	if p.api == nil {
		return nil, fmt.Errorf("proxmox: an offline provider observes nothing")
	}
	inv, err := p.readVMs(ctx, hostnames...)
	if err != nil {
		return nil, err
	}
	return inv.Machines(), nil
}

// readVMs is a step's fresh read of the machines it acts on: the VM list
// (which also shows twins, unowned VMs and misplaced ones of any name) and
// the details of the named VMs only, never the whole inventory.
func (p *Provider) readVMs(ctx context.Context, hostnames ...string) (*inventory, error) {
	if p.api == nil {
		return nil, fmt.Errorf("proxmox: an offline provider observes nothing")
	}
	ctx, cancel := p.callCtx(ctx)
	defer cancel()
	inv := newInventory(false)
	if err := p.observeVMs(ctx, inv, hostnames); err != nil {
		return nil, err
	}
	return inv, nil
}

// observeVMs reads the cluster's VMs into inv: every one, or those named
// in only when it is not nil.
func (p *Provider) observeVMs(ctx context.Context, inv *inventory, only []string) error {
	list, err := p.api.GetResourceList(ctx, "vm")
	if err != nil {
		return fmt.Errorf("listing Proxmox VMs: %w", err)
	}
	desired := map[string]bool{}
	for _, m := range machineconfig.Machines(p.c) {
		desired[m.Hostname] = true
	}
	byName := map[string][]*vm{}
	for _, item := range list {
		m, _ := item.(map[string]any)
		if str(m["type"]) != "qemu" {
			continue
		}
		name, node := str(m["name"]), str(m["node"])
		tags := splitTags(str(m["tags"]))
		id := num(m["vmid"])
		ours, conflict := p.claim(str(m["pool"]), tags)
		if !ours && name == "" {
			// pvestatd has not broadcast this VM yet: read its name
			// from its config, or an unowned VM created moments ago
			// would pass for no VM of that name.
			if name, err = p.nameOf(ctx, id, node); err != nil {
				return err
			}
		}
		switch {
		case conflict != "":
			inv.misplaced = append(inv.misplaced, misplacedVM{id: id, name: name, node: node, pool: str(m["pool"]), reason: conflict})
			continue
		case !ours:
			if desired[name] {
				inv.foreign[name] = foreignVM{id: id, node: node}
			}
			continue
		}
		// A VM the list shows without a name yet (pvestatd's broadcast
		// lags) is read, as its config has the name.
		if only != nil && name != "" && !slices.Contains(only, name) {
			continue
		}
		v := &vm{id: id, node: node, name: name, tags: tags}
		if err := p.observeVM(ctx, v); vmGone(err) {
			// Deleted since the list was made (another run removed its
			// twin, a person deleted it): it is not there.
			continue
		} else if err != nil {
			return err
		}
		if only != nil && !slices.Contains(only, v.name) {
			continue
		}
		byName[v.name] = append(byName[v.name], v)
	}
	for name, vms := range byName {
		if len(vms) == 1 {
			inv.owned[name] = vms[0]
			continue
		}
		slices.SortFunc(vms, func(a, b *vm) int { return a.id - b.id })
		inv.duplicates[name] = vms
	}
	slices.SortFunc(inv.misplaced, func(a, b misplacedVM) int { return a.id - b.id })
	return nil
}

// namePatience bounds how long Observe waits for the name of a VM that is
// being created: its config holds only `lock: create` until its create
// task ends.
const namePatience = 30 * time.Second

// nameOf reads a VM's name from its config, which is current, for a VM
// that /cluster/resources lists without one: /cluster/resources takes
// names from pvestatd's broadcast, up to 10 s late (see lab/FIDELITY.md).
// Only such VMs are read, so a large Proxmox cluster does not cost a
// config read per VM. A VM being created has a placeholder config holding
// only `lock: create` (pve-guest-common create_and_lock_config) until its
// create task writes the real one, so its name is read again until then;
// a name that still cannot be read is an error, never taken for no name.
// A config without a name and without a lock is a VM that has no name.
func (p *Provider) nameOf(ctx context.Context, id int, node string) (string, error) {
	ref := proxmox.NewVmRef(proxmox.GuestID(id))
	ref.SetNode(node)
	ref.SetVmType(proxmox.GuestQemu)
	deadline := time.Now().Add(namePatience)
	for {
		conf, err := p.api.GetVmConfig(ctx, ref)
		if vmGone(err) {
			return "", nil // deleted since the list was made: no VM, no name
		}
		if err != nil {
			return "", fmt.Errorf("reading the name of VM %d on %s, which /cluster/resources lists without one yet: %w", id, node, err)
		}
		name, lock := str(conf["name"]), str(conf["lock"])
		if name != "" || lock != "create" {
			return name, nil
		}
		if time.Now().After(deadline) {
			return "", retry.Transient(fmt.Errorf("reading the name of VM %d on %s: it has been being created for over %s (its config holds only lock: create), so whether it takes the name of one of the cluster's machines is not known yet", id, node, namePatience))
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("reading the name of VM %d on %s, which is being created: %w", id, node, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// claim decides from a VM's pool and tags whether it is this cluster's:
// it is when it is in the cluster's pool and no tag names another cluster,
// or carries the cluster's tags (taloscluster, cluster_<name>) and is in
// no pool (a VM that left its pool is still found). A VM whose pool and
// tags disagree about this cluster (the cluster's tags in another pool, or
// another cluster's tags in this cluster's pool) is not this cluster's
// either: conflict says why, and the VM is refused, never adopted.
func (p *Provider) claim(pool string, tags []string) (ours bool, conflict string) {
	managed := slices.Contains(tags, "taloscluster")
	ourTags := managed && slices.Contains(tags, "cluster_"+p.c.Name)
	other := ""
	if managed {
		for _, t := range tags {
			if c, ok := strings.CutPrefix(t, "cluster_"); ok && c != p.c.Name {
				other = c
				break
			}
		}
	}
	switch {
	case pool == p.poolName() && other == "":
		return true, ""
	case pool == p.poolName():
		return false, fmt.Sprintf("is in this cluster's pool %s but its tags name cluster %s", pool, other)
	case ourTags && pool == "":
		return true, ""
	case ourTags && strings.HasPrefix(pool, "taloscluster-"):
		return false, fmt.Sprintf("carries this cluster's tags but is in pool %s, another cluster's", pool)
	case ourTags:
		return false, fmt.Sprintf("carries this cluster's tags but is in pool %s, not %s", pool, p.poolName())
	}
	return false, ""
}

func (p *Provider) observeVM(ctx context.Context, v *vm) error {
	ref := proxmox.NewVmRef(proxmox.GuestID(v.id))
	ref.SetNode(v.node)
	ref.SetVmType(proxmox.GuestQemu)
	cfg, err := p.readConfig(ctx, v.node, v.id)
	if err != nil {
		return fmt.Errorf("reading the config of VM %d (%s): %w", v.id, v.name, err)
	}
	v.config = cfg.effective()
	// /cluster/resources takes a VM's name and power state from pvestatd,
	// which reports them up to 10 s late; the config and the VM's own
	// status are current.
	if n := v.config["name"]; n != "" {
		v.name = n
	}
	st, err := ref.GetRawGuestStatus(ctx, p.api)
	if err != nil {
		return fmt.Errorf("reading the power state of VM %d (%s): %w", v.id, v.name, err)
	}
	v.running = st.GetState() == proxmox.PowerStateRunning
	if v.running {
		v.restartPending = cfg.restartPending()
	}
	v.cores, _ = strconv.Atoi(v.config["cores"])
	v.memoryMB = memoryMB(v.config["memory"])
	v.storage, v.diskGB = diskOf(v.config["scsi0"])
	v.bridge = propOf(v.config["net0"], "bridge")
	v.vlan, _ = strconv.Atoi(propOf(v.config["net0"], "tag"))
	v.extBridge = propOf(v.config["net1"], "bridge")
	v.extVLAN, _ = strconv.Atoi(propOf(v.config["net1"], "tag"))
	opts, err := p.api.GetItemConfigMapStringInterface(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/firewall/options", v.node, v.id), "firewall", "options")
	if err != nil {
		return fmt.Errorf("reading the firewall options of %s: %w", v.name, err)
	}
	v.fwOptions = map[string]string{}
	for k, val := range opts {
		v.fwOptions[k] = str(val)
	}
	if v.fwRules, err = p.rules(ctx, v); err != nil {
		return err
	}
	if v.running {
		ifaces, err := p.api.GetVmAgentNetworkInterfaces(ctx, ref)
		switch {
		case err == nil:
			v.addresses = nodeAddresses(ifaces, p.c.Network.Cluster.CIDR, vipOf(p.c))
		case ctx.Err() != nil:
			// The call ended because the run did, not because the guest
			// agent is not up yet: stop here rather than go on reading.
			return fmt.Errorf("reading the addresses of %s: %w", v.name, ctx.Err())
		default:
			v.noAddress = "guest agent: " + err.Error()
			p.log.Debug("guest agent not answering yet", "vm", v.name, "error", err)
		}
	}
	return nil
}

// vipOf returns the cluster's configured Kubernetes API VIP, if any.
func vipOf(c *spec.Cluster) netip.Addr {
	vip, _ := c.Network.KubeAPIVIP()
	return vip
}

// nodeAddresses picks a VM's own IPv4 addresses from what its guest agent
// reports, the first one on the cluster network first. The API VIP is left
// out: the node that holds it reports it too (Talos adds it to the link),
// but it is the cluster's address, not the node's.
func nodeAddresses(ifaces []proxmox.AgentNetworkInterface, cluster netip.Prefix, vip netip.Addr) []netip.Addr {
	var inCluster, other []netip.Addr
	for _, in := range ifaces {
		for _, ip := range in.IpAddresses {
			a, ok := netip.AddrFromSlice(ip)
			if !ok {
				continue
			}
			a = a.Unmap()
			switch {
			case a == vip:
			case cluster.Contains(a):
				inCluster = append(inCluster, a)
			case !a.Is4(), a.IsLoopback(), a.IsLinkLocalUnicast():
			default:
				other = append(other, a)
			}
		}
	}
	return append(inCluster, other...)
}

// observeISOs lists the ISOs of every node: the boot ISOs on iso_storage,
// and the config ISOs on cidata_storage when that is another storage (a
// config ISO left behind holds a machine config, so finalize must see it).
func (p *Provider) observeISOs(ctx context.Context, inv *inventory) error {
	px := p.c.Proxmox
	storages := []string{px.ISOStorage}
	if px.CIDataStorage != "" && px.CIDataStorage != px.ISOStorage {
		storages = append(storages, px.CIDataStorage)
	}
	for _, node := range inv.nodes {
		for _, storage := range storages {
			list, err := p.api.GetItemListInterfaceArray(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content?content=iso", node, storage))
			if ctx.Err() != nil {
				// The observation was cancelled or ran out of time: an ISO
				// list that could not be read must not pass for an empty
				// one. (Going on would also cost proxmox-api-go's retry
				// sleeps, which do not watch the context, for every node.)
				return fmt.Errorf("listing ISOs on %s: %w", node, ctx.Err())
			}
			if notOnNode(err) {
				// A storage that is not on this node holds no ISO here.
				p.log.Debug("listing ISOs", "node", node, "storage", storage, "error", err)
				continue
			}
			if msg, ok := noSuchStorage(err); ok {
				// Nothing can be on it: the plan refuses the key.
				inv.missingStorage[storage] = msg
				continue
			}
			if err != nil {
				// Unread is not empty: a config ISO left there holds a
				// machine config, and its deletion must not be dropped.
				return fmt.Errorf("listing the ISOs of storage %s on %s: %w", storage, node, err)
			}
			for _, item := range list {
				m, _ := item.(map[string]any)
				inv.isos[node+"/"+str(m["volid"])] = true
			}
		}
	}
	return nil
}

// vmGone reports whether err is Proxmox's answer for a VM whose config
// no longer exists, as for a VM deleted since it was listed (qemu-server
// load_config: "Configuration file '<path>' does not exist").
func vmGone(err error) bool {
	var ae proxmox.ApiError
	var ptr *proxmox.ApiError
	switch {
	case errors.As(err, &ptr):
		ae = *ptr
	case !errors.As(err, &ae):
		return false
	}
	return strings.HasPrefix(ae.Message, "Configuration file '") && strings.HasSuffix(ae.Message, "' does not exist")
}

// notOnNode reports whether err is Proxmox's answer for a storage that is
// not available on the node asked (pve-storage storage_check_enabled:
// "storage '<s>' is not available on node '<n>'").
func notOnNode(err error) bool {
	var ptr *proxmox.ApiError
	if errors.As(err, &ptr) {
		return strings.Contains(ptr.Message, "is not available on node")
	}
	var val proxmox.ApiError
	return errors.As(err, &val) && strings.Contains(val.Message, "is not available on node")
}

// noSuchStorage reports whether err is Proxmox's answer for a storage that
// is not configured at all (pve-storage storage_config: "storage '<s>'
// does not exist"), with that message.
func noSuchStorage(err error) (string, bool) {
	var ae proxmox.ApiError
	var ptr *proxmox.ApiError
	switch {
	case errors.As(err, &ptr):
		ae = *ptr
	case !errors.As(err, &ae):
		return "", false
	}
	if strings.HasPrefix(ae.Message, "storage '") && strings.HasSuffix(ae.Message, "' does not exist") {
		return ae.Message, true
	}
	return "", false
}

// refused reports whether the API refused the credentials (401).
func refused(err error) bool {
	var ptr *proxmox.ApiError
	if errors.As(err, &ptr) {
		return ptr.Code == "401"
	}
	var val proxmox.ApiError
	return errors.As(err, &val) && val.Code == "401"
}

func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	default:
		return fmt.Sprint(x)
	}
}

func num(v any) int {
	n, _ := strconv.Atoi(str(v))
	return n
}

func splitTags(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

// propOf returns one key of a Proxmox property string (k=v,k=v).
func propOf(s, key string) string {
	for _, part := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(part, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// diskOf reads the storage and size in GB of a disk property string such
// as "local-lvm:vm-100-disk-0,size=40G".
func diskOf(s string) (string, int) {
	if s == "" {
		return "", 0
	}
	storage, _, _ := strings.Cut(strings.Split(s, ",")[0], ":")
	size := propOf(s, "size")
	switch {
	case strings.HasSuffix(size, "G"):
		n, _ := strconv.Atoi(strings.TrimSuffix(size, "G"))
		return storage, n
	case strings.HasSuffix(size, "T"):
		n, _ := strconv.Atoi(strings.TrimSuffix(size, "T"))
		return storage, n * 1024
	case strings.HasSuffix(size, "M"):
		n, _ := strconv.Atoi(strings.TrimSuffix(size, "M"))
		return storage, n / 1024
	}
	return storage, 0
}
