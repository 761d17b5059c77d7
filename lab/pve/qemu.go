package pve

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// vm is a QEMU guest. conf is the current configuration; pending holds
// changes made while the VM runs that apply at its next start.
type vm struct {
	id         int
	node       string
	conf       map[string]string
	pending    map[string]string
	pendingDel map[string]bool
	running    bool
	startedAt  time.Time
	pool       string
	fwOptions  map[string]string
	fwRules    []fwRule
}

func newVM(id int, node string) *vm {
	return &vm{
		id:         id,
		node:       node,
		conf:       map[string]string{},
		pending:    map[string]string{},
		pendingDel: map[string]bool{},
		fwOptions:  map[string]string{},
	}
}

// effective is the configuration with pending changes applied, which is
// what GET config answers by default.
func (g *vm) effective() map[string]string {
	m := make(map[string]string, len(g.conf)+len(g.pending))
	for k, v := range g.conf {
		if !g.pendingDel[k] {
			m[k] = v
		}
	}
	for k, v := range g.pending {
		m[k] = v
	}
	return m
}

func (g *vm) digest() string {
	var b strings.Builder
	for _, k := range sortedKeys(g.conf) {
		fmt.Fprintf(&b, "%s: %s\n", k, g.conf[k])
	}
	b.WriteString("[PENDING]\n")
	for _, k := range sortedKeys(g.pending) {
		fmt.Fprintf(&b, "%s: %s\n", k, g.pending[k])
	}
	for _, k := range sortedKeys(g.pendingDel) {
		fmt.Fprintf(&b, "delete: %s\n", k)
	}
	return digestOf(b.String())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

var keyIndexRE = regexp.MustCompile(`^([a-z_\-]+?)(\d+)$`)

// compareKeys orders configuration keys by name, with numeric suffixes in
// numeric order (net2 before net10).
func compareKeys(a, b string) int {
	ma, mb := keyIndexRE.FindStringSubmatch(a), keyIndexRE.FindStringSubmatch(b)
	if ma != nil && mb != nil && ma[1] == mb[1] {
		na, _ := strconv.Atoi(ma[2])
		nb, _ := strconv.Atoi(mb[2])
		return na - nb
	}
	return strings.Compare(a, b)
}

// driveVolume returns the volume a drive value holds, or "" for CD-ROMs,
// empty drives and pass-through devices. Cloud-init drives are volumes.
func driveVolume(v string) string {
	p, err := parseProp(v, "file")
	if err != nil {
		return ""
	}
	if p.head == "none" || p.head == "cdrom" || strings.HasPrefix(p.head, "/") || !strings.Contains(p.head, ":") {
		return ""
	}
	if p.kv["media"] == "cdrom" && !strings.Contains(p.head, "-cloudinit") {
		return ""
	}
	return p.head
}

// references reports whether a volume is used by the VM's configuration.
func (g *vm) references(volid string) bool {
	for _, m := range []map[string]string{g.conf, g.pending} {
		for k, v := range m {
			if isVolumeKey(k) && driveVolume(v) == volid {
				return true
			}
		}
	}
	return false
}

func (g *vm) macs() []string {
	var out []string
	conf := g.conf
	for i := 0; i <= 31; i++ {
		if v, ok := conf["net"+strconv.Itoa(i)]; ok {
			_, mac, _ := netParts(v)
			out = append(out, mac)
		}
	}
	return out
}

func (g *vm) cdroms() map[string]string {
	out := map[string]string{}
	for k, v := range g.conf {
		if kindOf(k) != kindDrive {
			continue
		}
		p, err := parseProp(v, "file")
		if err != nil || p.kv["media"] != "cdrom" || p.head == "none" || p.head == "cdrom" || strings.Contains(p.head, "-cloudinit") {
			continue
		}
		out[k] = p.head
	}
	return out
}

func confInt(conf map[string]string, key string, def int) int {
	if n, err := strconv.Atoi(conf[key]); err == nil {
		return n
	}
	return def
}

func (g *vm) vcpus() int { return confInt(g.conf, "cores", 1) * confInt(g.conf, "sockets", 1) }

func (g *vm) memoryMB() int {
	if m := memoryRE.FindStringSubmatch(g.conf["memory"]); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 512
}

func (g *vm) agentEnabled() bool {
	p, err := parseProp(g.conf["agent"], "enabled")
	return err == nil && p.head == "1"
}

// bootDiskSize is the size of the first disk, reported as maxdisk.
func (g *vm) bootDiskSize() int64 {
	for _, prefix := range driveOrder {
		for i := 0; i <= 30; i++ {
			v, ok := g.conf[prefix+strconv.Itoa(i)]
			if !ok {
				continue
			}
			p, err := parseProp(v, "file")
			if err != nil || p.kv["media"] == "cdrom" {
				continue
			}
			return parseFormattedSize(p.kv["size"])
		}
	}
	return 0
}

func (g *vm) uptime() int64 {
	if !g.running {
		return 0
	}
	return int64(time.Since(g.startedAt) / time.Second)
}

func (g *vm) status() string {
	if g.running {
		return "running"
	}
	return "stopped"
}

// resource is the VM's entry in /cluster/resources.
func (g *vm) resource() map[string]any {
	m := map[string]any{
		"id":        "qemu/" + strconv.Itoa(g.id),
		"type":      "qemu",
		"vmid":      g.id,
		"name":      g.displayName(),
		"node":      g.node,
		"status":    g.status(),
		"template":  boolInt(g.conf["template"] == "1"),
		"maxcpu":    g.vcpus(),
		"maxmem":    int64(g.memoryMB()) * mib,
		"maxdisk":   g.bootDiskSize(),
		"mem":       0,
		"cpu":       0,
		"disk":      0,
		"uptime":    g.uptime(),
		"netin":     0,
		"netout":    0,
		"diskread":  0,
		"diskwrite": 0,
	}
	if g.running {
		m["mem"] = int64(g.memoryMB()) * mib / 2
		m["cpu"] = 0.01
	}
	if g.pool != "" {
		m["pool"] = g.pool
	}
	if t := g.conf["tags"]; t != "" {
		m["tags"] = t
	}
	if l := g.conf["lock"]; l != "" {
		m["lock"] = l
	}
	return m
}

// rrdKeys are the /cluster/resources fields of a VM that Proxmox VE takes
// from the RRD data pvestatd broadcasts (PVE::API2Tools::extract_vm_stats).
var rrdKeys = []string{
	"uptime", "name", "status", "template", "maxcpu", "cpu", "maxmem", "mem",
	"maxdisk", "disk", "netin", "netout", "diskread", "diskwrite",
}

// vmResource is a VM's entry in /cluster/resources: with StatsInterval
// set, its RRD fields are those of the last broadcast. The caller holds
// s.mu.
func (s *Server) vmResource(g *vm) map[string]any {
	m := g.resource()
	every := s.opts.StatsInterval
	if every <= 0 {
		return m
	}
	s.broadcastStats()
	for _, k := range rrdKeys {
		delete(m, k)
	}
	stats, ok := s.rrd[g.id]
	if !ok {
		m["status"] = "unknown"
		return m
	}
	for k, v := range stats {
		m[k] = v
	}
	return m
}

// broadcastStats takes pvestatd's broadcast when one is due: the first
// read after each multiple of StatsInterval since the server started takes
// the VMs' state at that read. The caller holds s.mu.
func (s *Server) broadcastStats() {
	every := s.opts.StatsInterval
	if every <= 0 {
		return
	}
	tick := int64(time.Since(s.started) / every)
	if tick == s.rrdTick && s.rrd != nil {
		return
	}
	s.rrdTick = tick
	s.rrd = map[int]map[string]any{}
	for id, g := range s.vms {
		live := g.resource()
		stats := map[string]any{}
		for _, k := range rrdKeys {
			if v, ok := live[k]; ok {
				stats[k] = v
			}
		}
		s.rrd[id] = stats
	}
}

func (s *Server) sortedVMIDs() []int {
	ids := make([]int, 0, len(s.vms))
	for id := range s.vms {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// lookupVM finds the VM named by the request path on the node named by it.
// The caller holds s.mu.
func (s *Server) lookupVM(r *http.Request) (*vm, error) {
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	raw := r.PathValue("vmid")
	id, err := strconv.Atoi(raw)
	if err != nil {
		return nil, paramErr("vmid", fmt.Sprintf("type check ('integer') failed - got '%s'", raw))
	}
	g, ok := s.vms[id]
	if !ok || g.node != nodeName {
		return nil, errorf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", nodeName, id)
	}
	return g, nil
}

// vmidParam checks the request's node and parses its VM ID without
// requiring the VM to exist, for calls whose worker loads the
// configuration. The caller holds s.mu.
func (s *Server) vmidParam(r *http.Request) (int, error) {
	if _, err := s.lookupNode(r.PathValue("node")); err != nil {
		return 0, err
	}
	raw := r.PathValue("vmid")
	id, err := strconv.Atoi(raw)
	if err != nil {
		return 0, paramErr("vmid", fmt.Sprintf("type check ('integer') failed - got '%s'", raw))
	}
	return id, nil
}

func (s *Server) qemuRoutes() {
	s.route("GET", "/nodes/{node}/qemu", "qemu.list", s.listVMs)
	s.route("POST", "/nodes/{node}/qemu", "qemu.create", s.createVM)
	s.route("GET", "/nodes/{node}/qemu/{vmid}", "qemu.get", s.getVMIndex)
	s.route("DELETE", "/nodes/{node}/qemu/{vmid}", "qemu.delete", s.deleteVM)
	s.route("GET", "/nodes/{node}/qemu/{vmid}/config", "qemu.config.get", s.getConfig)
	s.route("POST", "/nodes/{node}/qemu/{vmid}/config", "qemu.config.update", func(r *http.Request) (any, error) { return s.updateConfig(r, true) })
	s.route("PUT", "/nodes/{node}/qemu/{vmid}/config", "qemu.config.set", func(r *http.Request) (any, error) { return s.updateConfig(r, false) })
	s.route("GET", "/nodes/{node}/qemu/{vmid}/pending", "qemu.pending", s.getPending)
	s.route("PUT", "/nodes/{node}/qemu/{vmid}/resize", "qemu.resize", s.resize)
	s.route("GET", "/nodes/{node}/qemu/{vmid}/status", "qemu.status.index", s.getStatusIndex)
	s.route("GET", "/nodes/{node}/qemu/{vmid}/status/current", "qemu.status", s.getStatus)
	for _, action := range []string{"start", "stop", "shutdown", "reboot", "reset"} {
		s.route("POST", "/nodes/{node}/qemu/{vmid}/status/"+action, "qemu."+action, func(r *http.Request) (any, error) { return s.power(r, action) })
	}
	s.route("GET", "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces", "qemu.agent.interfaces", s.agentInterfaces)
	s.route("POST", "/nodes/{node}/qemu/{vmid}/agent/ping", "qemu.agent.ping", s.agentPing)
}

func (s *Server) listVMs(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, id := range s.sortedVMIDs() {
		g := s.vms[id]
		if g.node != nodeName {
			continue
		}
		// vmlist: only VMs with VM.Audit.
		if s.check(caller(r), "/vms/"+strconv.Itoa(id), "VM.Audit") != nil {
			continue
		}
		m := g.resource()
		for _, k := range []string{"id", "type", "node", "pool", "template"} {
			delete(m, k)
		}
		m["cpus"] = m["maxcpu"]
		delete(m, "maxcpu")
		if g.running {
			m["pid"] = 10000 + g.id
		}
		out = append(out, m)
	}
	return out, nil
}

func (s *Server) getVMIndex(r *http.Request) (any, error) {
	return s.vmIndex(r, "subdir", "agent", "config", "firewall", "pending", "resize", "status")
}

// vmIndex answers a directory index under a VM: one entry per name, keyed
// by key, once the VM is known to exist.
func (s *Server) vmIndex(r *http.Request, key string, names ...string) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	if _, err := s.lookupVM(r); err != nil {
		return nil, err
	}
	out := make([]map[string]string, 0, len(names))
	for _, n := range names {
		out = append(out, map[string]string{key: n})
	}
	return out, nil
}

var (
	createControl = map[string]bool{
		"vmid": true, "pool": true, "start": true, "unique": true, "force": true,
		"storage": true, "archive": true, "live-restore": true, "bwlimit": true,
	}
	updateControl = map[string]bool{
		"delete": true, "revert": true, "digest": true, "skiplock": true, "force": true, "background_delay": true,
	}
)

// checkParams validates configuration parameters. Empty values mean
// "delete" and are returned in deletes.
func checkParams(q url.Values, control map[string]bool) (changes map[string]string, deletes []string, errs map[string]string) {
	changes, errs = map[string]string{}, map[string]string{}
	for k, vs := range q {
		if control[k] {
			continue
		}
		v := vs[len(vs)-1]
		if v == "" && kindOf(k) != kindUnknown {
			deletes = append(deletes, k)
			continue
		}
		n, err := normalizeValue(k, v)
		if err != nil {
			errs[k] = err.Error()
			continue
		}
		changes[k] = n
	}
	slices.Sort(deletes)
	return changes, deletes, errs
}

// allocRE matches a volume value that asks for a new volume
// ("storage:size" or "storage:cloudinit").
var allocRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9\-_.]*:(\d+(?:\.\d+)?|cloudinit)$`)

// precheck checks the storages of new volumes before a change is accepted,
// like the storage access checks Proxmox VE makes before starting a worker.
func (s *Server) precheck(nodeName string, changes map[string]string) error {
	for _, k := range sortedKeys(changes) {
		if !isVolumeKey(k) {
			continue
		}
		p, _ := parseProp(changes[k], "file")
		if p.head == "none" || p.head == "cdrom" || strings.HasPrefix(p.head, "/") {
			continue
		}
		store, _, ok := strings.Cut(p.head, ":")
		if !ok {
			return paramErr(k, fmt.Sprintf("unable to parse volume ID '%s'", p.head))
		}
		if _, err := s.nodeStorage(nodeName, store); err != nil {
			return err
		}
		if _, ok := p.kv["import-from"]; ok {
			return &apiError{status: http.StatusNotImplemented, msg: "import-from is not implemented by the emulator"}
		}
	}
	return nil
}

// allocVolume creates a VM disk volume. The caller holds s.mu.
func (s *Server) allocVolume(nodeName, store string, vmid int, size int64, format, name string) (*volume, error) {
	st, err := s.nodeStorage(nodeName, store)
	if err != nil {
		return nil, err
	}
	if !st.has("images") {
		return nil, errorf("storage '%s' does not support content-type 'images'", store)
	}
	if format == "" {
		format = "raw"
	}
	if !st.fileBased() && format != "raw" {
		return nil, errorf("unsupported format '%s'", format)
	}
	if name == "" {
		for n := 0; ; n++ {
			name = fmt.Sprintf("vm-%d-disk-%d", vmid, n)
			if !s.volumeNameUsed(st, nodeName, name) {
				break
			}
		}
	}
	if st.fileBased() {
		size = (size + kib - 1) / kib * kib
	} else {
		size = (size + 4*mib - 1) / (4 * mib) * (4 * mib)
	}
	volname := name
	if st.fileBased() {
		volname = fmt.Sprintf("%d/%s.%s", vmid, name, format)
	}
	v := &volume{
		volid:   store + ":" + volname,
		storage: store,
		content: "images",
		format:  format,
		size:    size,
		vmid:    vmid,
		ctime:   time.Now().Unix(),
	}
	s.volumes[s.volKeyFor(st, nodeName, v.volid)] = v
	return v, nil
}

func (s *Server) volumeNameUsed(st *Storage, nodeName, name string) bool {
	for _, v := range s.volumesOf(st, nodeName) {
		_, volname, _ := strings.Cut(v.volid, ":")
		base := volname[strings.LastIndex(volname, "/")+1:]
		if i := strings.IndexByte(base, '.'); i >= 0 {
			base = base[:i]
		}
		if base == name {
			return true
		}
	}
	return false
}

func (s *Server) freeVolume(nodeName, volid string) {
	store, _, _ := strings.Cut(volid, ":")
	st := s.findStorage(store)
	if st == nil {
		return
	}
	delete(s.volumes, s.volKeyFor(st, nodeName, volid))
}

// resolveVolume turns a validated drive value into the value stored in the
// configuration: new volumes are allocated, CD-ROM images checked and sizes
// filled in. Allocated volumes are appended to allocs.
func (s *Server) resolveVolume(g *vm, key, value string, allocs *[]string) (string, error) {
	p, err := parseProp(value, "file")
	if err != nil {
		return "", paramErr(key, err.Error())
	}
	kind := kindOf(key)
	if p.head == "none" || p.head == "cdrom" || strings.HasPrefix(p.head, "/") {
		return p.String(), nil
	}
	store, rest, _ := strings.Cut(p.head, ":")
	if allocRE.MatchString(p.head) && kind != kindUnused {
		if rest == "cloudinit" {
			v, err := s.allocVolume(g.node, store, g.id, 4*mib, p.kv["format"], fmt.Sprintf("vm-%d-cloudinit", g.id))
			if err != nil {
				return "", err
			}
			*allocs = append(*allocs, v.volid)
			delete(p.kv, "format")
			p.head = v.volid
			p.kv["media"] = "cdrom"
			return p.String(), nil
		}
		var size int64
		switch key {
		case "efidisk0":
			size = 128 * kib
			if p.kv["efitype"] == "4m" {
				size = 528 * kib
			}
		case "tpmstate0":
			size = 4 * mib
		default:
			gb, _ := strconv.ParseFloat(rest, 64)
			size = int64(gb * float64(gib))
		}
		v, err := s.allocVolume(g.node, store, g.id, size, p.kv["format"], "")
		if err != nil {
			return "", err
		}
		*allocs = append(*allocs, v.volid)
		delete(p.kv, "format")
		p.head = v.volid
		p.kv["size"] = formatSize(v.size)
		return p.String(), nil
	}
	v, _, err := s.lookupVolume(g.node, p.head)
	if err != nil {
		return "", err
	}
	if kind == kindUnused {
		return p.head, nil
	}
	if p.kv["media"] == "cdrom" && v.content != "iso" {
		return "", errorf("volume '%s' is not an ISO image", p.head)
	}
	if p.kv["media"] != "cdrom" && v.content != "images" {
		return "", errorf("volume '%s' is not a disk image", p.head)
	}
	delete(p.kv, "format")
	p.kv["size"] = formatSize(v.size)
	return p.String(), nil
}

// resolveChanges resolves every change in a fixed order and returns the
// values to store; on error, the volumes it allocated are freed.
func (s *Server) resolveChanges(g *vm, changes map[string]string) (map[string]string, error) {
	out := map[string]string{}
	var allocs []string
	for _, k := range sortedKeys(changes) {
		v := changes[k]
		switch kindOf(k) {
		case kindNet:
			model, mac, kv := netParts(v)
			if mac == "" {
				if old, ok := g.effective()[k]; ok {
					_, mac, _ = netParts(old)
				}
			}
			if mac == "" {
				mac = generatedMAC(fmt.Sprintf("%s/%d/%s", g.node, g.id, k))
			}
			if kv["bridge"] == "" {
				return nil, paramErr(k, "missing property - 'bridge' requires this property")
			}
			v = prop{head: model + "=" + mac, kv: kv}.String()
		case kindDrive, kindVolume, kindUnused:
			rv, err := s.resolveVolume(g, k, v, &allocs)
			if err != nil {
				for _, volid := range allocs {
					s.freeVolume(g.node, volid)
				}
				return nil, err
			}
			v = rv
		}
		out[k] = v
	}
	return out, nil
}

// liveKey reports whether a change applies at once to a running VM (Proxmox
// VE's hot-plug); other changes become pending. It follows qemu-server's
// vmconfig_hotplug_pending: the "fast plug" options apply at once; cores
// and sockets never do (only vcpus is hot-plugged, with the cpu feature);
// memory would with the memory feature, which the default hotplug value
// "network,disk,usb" lacks and which the lab does not model (memory
// always pends); everything not named there is skipped and stays pending.
func (g *vm) liveKey(key, value string) bool {
	switch key {
	case "name", "description", "tags", "onboot", "protection", "startup", "hookscript", "lock":
		return true
	}
	hotplug := "network,disk,usb"
	if v, ok := g.conf["hotplug"]; ok {
		hotplug = v
	}
	switch hotplug {
	case "1":
		hotplug = "network,disk,usb"
	case "0":
		hotplug = ""
	}
	hp := strings.Split(hotplug, ",")
	switch kindOf(key) {
	case kindNet:
		return slices.Contains(hp, "network")
	case kindUnused:
		return true
	case kindDrive:
		isCD := func(v string) bool {
			p, err := parseProp(v, "file")
			return err == nil && p.kv["media"] == "cdrom"
		}
		old, had := g.conf[key]
		if (value == "" || isCD(value)) && (!had || isCD(old)) {
			return true // CD-ROM media change
		}
		if strings.HasPrefix(key, "scsi") || strings.HasPrefix(key, "virtio") {
			return slices.Contains(hp, "disk")
		}
		return false
	}
	if strings.HasPrefix(key, "usb") {
		return slices.Contains(hp, "usb")
	}
	return false
}

// setKey stores a resolved value, as a pending change when the VM runs and
// the key cannot be hot-plugged.
func (s *Server) setKey(g *vm, key, value string) {
	if g.running && !g.liveKey(key, value) {
		g.pending[key] = value
		delete(g.pendingDel, key)
		return
	}
	s.commit(g, key, &value)
	delete(g.pending, key)
	delete(g.pendingDel, key)
}

func (s *Server) deleteKey(g *vm, key string) {
	if _, ok := g.conf[key]; !ok {
		delete(g.pending, key)
		return
	}
	if g.running && !g.liveKey(key, "") {
		g.pendingDel[key] = true
		delete(g.pending, key)
		return
	}
	s.commit(g, key, nil)
	delete(g.pending, key)
	delete(g.pendingDel, key)
}

// commit changes the current configuration. A disk that is replaced or
// removed becomes an unused disk; an unused disk that is removed, or a
// removed cloud-init drive, is destroyed.
func (s *Server) commit(g *vm, key string, value *string) {
	old, had := g.conf[key]
	if value == nil {
		delete(g.conf, key)
	} else {
		g.conf[key] = *value
	}
	if !had || !isVolumeKey(key) {
		return
	}
	oldVol := driveVolume(old)
	if kindOf(key) == kindUnused {
		oldVol = old
	}
	if oldVol == "" {
		return
	}
	newVol := ""
	if value != nil {
		newVol = driveVolume(*value)
		if kindOf(key) == kindUnused {
			newVol = *value
		}
	}
	if newVol == oldVol || g.references(oldVol) {
		return
	}
	if kindOf(key) == kindUnused || strings.Contains(oldVol, "-cloudinit") {
		s.freeVolume(g.node, oldVol)
		return
	}
	for i := 0; ; i++ {
		k := "unused" + strconv.Itoa(i)
		if _, used := g.conf[k]; !used {
			g.conf[k] = oldVol
			return
		}
	}
}

// cleanupPending is pve-guest-common's cleanup_pending, which update_vm_api
// runs after writing the changes: a pending value equal to the current one
// is no change and is dropped, and so is a pending delete of a key the
// configuration does not have.
func (g *vm) cleanupPending() {
	for k, v := range g.pending {
		if cur, ok := g.conf[k]; ok && cur == v {
			delete(g.pending, k)
		}
	}
	for k := range g.pendingDel {
		if _, ok := g.conf[k]; !ok {
			delete(g.pendingDel, k)
		}
	}
}

func (s *Server) applyPending(g *vm) {
	for _, k := range sortedKeys(g.pendingDel) {
		s.commit(g, k, nil)
	}
	for _, k := range sortedKeys(g.pending) {
		v := g.pending[k]
		s.commit(g, k, &v)
	}
	clear(g.pending)
	clear(g.pendingDel)
}

// lockErr is qemu-server's check_lock (PVE::AbstractConfig): a VM whose
// configuration holds a lock (such as "create" while its create task runs)
// refuses changes.
func (g *vm) lockErr() error {
	if l := g.conf["lock"]; l != "" {
		return fmt.Errorf("VM is locked (%s)", l)
	}
	return nil
}

// skiplockErr refuses the skiplock parameter the way qemu-server does for
// any user but root@pam; an API token (user@realm!name) is never root@pam.
func skiplockErr(q url.Values) error {
	if b, _ := normalizeBool(q.Get("skiplock")); b == "1" {
		return paramErr("skiplock", "Only root may use this option.")
	}
	return nil
}

// taskVM finds a VM again when its task's worker runs: the VM may have been
// destroyed (or destroyed and created anew on another node) since the
// request. The caller holds s.mu.
func (s *Server) taskVM(nodeName string, vmid int) (*vm, error) {
	g, ok := s.vms[vmid]
	if !ok || g.node != nodeName {
		//lint:ignore ST1005 Proxmox's own message, word for word
		return nil, fmt.Errorf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", nodeName, vmid)
	}
	return g, nil
}

// createVM is qemu-server's create_vm. Before forking it checks the
// parameters, the pool and the storages and writes a placeholder
// configuration holding only "lock: create" (create_and_lock_config), so the
// VM ID is taken and the VM is listed, locked, while the worker runs. The
// worker allocates the disks, writes the real configuration (which drops the
// lock), adds the VM to its pool and, with start=1, starts it (a start
// failure is only a warning). A failed worker frees what it allocated and
// removes the configuration.
func (s *Server) createVM(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	changes, _, errs := checkParams(q, createControl) // empty values set nothing
	raw := q.Get("vmid")
	vmid, convErr := strconv.Atoi(raw)
	switch {
	case raw == "":
		errs["vmid"] = "property is missing and it is not optional"
	case convErr != nil:
		errs["vmid"] = fmt.Sprintf("type check ('integer') failed - got '%s'", raw)
	case vmid < 100 || vmid > 999999999:
		errs["vmid"] = "value must have a minimum value of 100 and a maximum value of 999999999"
	}
	if _, ok := changes["meta"]; ok {
		// json_config_properties leaves meta out of the parameter schema.
		errs["meta"] = "property is not defined in schema and the schema does not allow additional properties"
	}
	if len(errs) > 0 {
		return nil, paramError(errs)
	}
	if q.Get("archive") != "" {
		return nil, &apiError{status: http.StatusNotImplemented, msg: "restoring a VM is not implemented by the emulator"}
	}
	start, _ := normalizeBool(q.Get("start"))

	s.lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	poolName := q.Get("pool")
	if poolName != "" {
		if _, ok := s.pools[poolName]; !ok {
			// check_pool_exist raises a permission exception.
			return nil, permError(fmt.Sprintf("pool '%s' does not exist", poolName))
		}
	}
	authid := caller(r)
	if err := s.createPerms(authid, vmid, poolName, q.Get("storage"), start == "1", changes); err != nil {
		return nil, err
	}
	if err := s.precheck(nodeName, changes); err != nil {
		return nil, err
	}
	if old, exists := s.vms[vmid]; exists {
		return nil, errorf("unable to create VM %d - VM %d already exists on node '%s'", vmid, vmid, old.node)
	}
	g := newVM(vmid, nodeName)
	g.conf["lock"] = "create"
	s.vms[vmid] = g

	t := s.newTask(r, nodeName, "qmcreate", strconv.Itoa(vmid))
	t.abort = func() { s.dropPlaceholder(g) }
	t.work = func(t *task) error {
		if s.vms[vmid] != g {
			return fmt.Errorf("unable to create VM %d - Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", vmid, nodeName, vmid)
		}
		conf, err := s.resolveChanges(g, changes)
		if err != nil {
			s.dropPlaceholder(g)
			return fmt.Errorf("unable to create VM %d - %s", vmid, err.Error())
		}
		if _, ok := conf["boot"]; !ok {
			if order := defaultBootOrder(conf); order != "" {
				conf["boot"] = "order=" + order
			}
		}
		if _, ok := conf["smbios1"]; !ok {
			conf["smbios1"] = "uuid=" + uuidFrom(fmt.Sprintf("smbios/%s/%d", nodeName, vmid))
		}
		if _, ok := conf["vmgenid"]; !ok {
			conf["vmgenid"] = uuidFrom(fmt.Sprintf("vmgenid/%s/%d", nodeName, vmid))
		}
		conf["meta"] = fmt.Sprintf("creation-qemu=9.2.0,ctime=%d", time.Now().Unix())
		if _, ok := conf["tags"]; ok {
			// assert_tag_permissions, on the VM alone (no pool).
			if err := s.check(authid, "/vms/"+strconv.Itoa(vmid), "VM.Config.Options"); err != nil {
				s.dropPlaceholder(g)
				return fmt.Errorf("unable to create VM %d - %s", vmid, err.Error())
			}
		}
		g.conf = conf
		if _, ok := s.pools[poolName]; ok {
			g.pool = poolName
		}
		t.logf("created VM %d", vmid)
		if start == "1" {
			t.logf("Execute autostart")
			if err := s.startVM(g); err != nil {
				t.warnf("%s", err.Error())
			}
		}
		return nil
	}
	s.launch(t)
	return t.upid, nil
}

// dropPlaceholder removes a VM whose create did not complete, with any disk
// its worker allocated. The caller holds s.mu.
func (s *Server) dropPlaceholder(g *vm) {
	if s.vms[g.id] != g {
		return
	}
	for k, v := range s.volumes {
		if v.vmid == g.id && (k.node == "" || k.node == g.node) && v.content == "images" {
			delete(s.volumes, k)
		}
	}
	delete(s.vms, g.id)
}

// defaultBootOrder is the first disk, the first CD-ROM and the first NIC,
// as Proxmox VE chooses when no boot order is given.
func defaultBootOrder(conf map[string]string) string {
	var disk, cd, nic string
	for _, prefix := range driveOrder {
		for i := 0; i <= 30; i++ {
			k := prefix + strconv.Itoa(i)
			v, ok := conf[k]
			if !ok {
				continue
			}
			p, _ := parseProp(v, "file")
			if p.kv["media"] == "cdrom" {
				if cd == "" && !strings.Contains(p.head, "-cloudinit") {
					cd = k
				}
			} else if disk == "" {
				disk = k
			}
		}
	}
	for i := 0; i <= 31; i++ {
		if _, ok := conf["net"+strconv.Itoa(i)]; ok {
			nic = "net" + strconv.Itoa(i)
			break
		}
	}
	var order []string
	for _, d := range []string{disk, cd, nic} {
		if d != "" {
			order = append(order, d)
		}
	}
	return strings.Join(order, ";")
}

func (s *Server) getConfig(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	conf := g.effective()
	if b, _ := normalizeBool(q.Get("current")); b == "1" {
		conf = g.conf
	}
	out := map[string]any{"digest": g.digest()}
	for k, v := range conf {
		out[k] = jsonValue(k, v)
	}
	return out, nil
}

func (s *Server) getPending(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for _, m := range []map[string]string{g.conf, g.pending} {
		for k := range m {
			keys[k] = true
		}
	}
	out := []map[string]any{{"key": "digest", "value": g.digest()}}
	for _, k := range sortedKeys(keys) {
		e := map[string]any{"key": k}
		if v, ok := g.conf[k]; ok {
			e["value"] = jsonValue(k, v)
		}
		if v, ok := g.pending[k]; ok {
			e["pending"] = jsonValue(k, v)
		}
		if g.pendingDel[k] {
			e["delete"] = 1
		}
		out = append(out, e)
	}
	return out, nil
}

// updateConfig is qemu-server's update_vm (PUT, synchronous) and
// update_vm_async (POST, a qmconfig task). Both check the digest and the
// config lock before answering; the POST worker checks them again and only
// then changes the configuration, so a POST's change is visible when its
// task ends.
func (s *Server) updateConfig(r *http.Request, async bool) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	changes, deletes, errs := checkParams(q, updateControl)
	for _, k := range splitList(q.Get("delete")) {
		if kindOf(k) == kindUnknown {
			errs["delete"] = fmt.Sprintf("invalid format - invalid configuration ID '%s'", k)
			continue
		}
		if _, ok := changes[k]; ok {
			errs[k] = "conflicting options: the key is set and deleted"
			continue
		}
		deletes = append(deletes, k)
	}
	revert := splitList(q.Get("revert"))
	for _, k := range []string{"vmid", "pool", "meta"} {
		if _, ok := changes[k]; ok {
			errs[k] = "property is not defined in schema and the schema does not allow additional properties"
		}
	}
	if len(errs) > 0 {
		return nil, paramError(errs)
	}
	if err := skiplockErr(q); err != nil {
		return nil, err
	}
	if len(changes) == 0 && len(deletes) == 0 && len(revert) == 0 {
		return nil, errorf("no options specified")
	}
	digest := q.Get("digest")

	s.lock()
	defer s.mu.Unlock()
	authid := caller(r)
	vmid, err := s.vmidParam(r)
	if err != nil {
		return nil, err
	}
	if err := s.updatePerms(authid, vmid, changes, deletes); err != nil {
		return nil, err
	}
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	if err := g.checkDigestAndLock(digest); err != nil {
		return nil, errorf("%s", err.Error())
	}
	if err := s.precheck(g.node, changes); err != nil {
		return nil, err
	}
	apply := func(g *vm) error {
		if err := s.updateWorkerPerms(authid, g, changes, deletes); err != nil {
			return err
		}
		resolved, err := s.resolveChanges(g, changes)
		if err != nil {
			return err
		}
		for _, k := range revert {
			delete(g.pending, k)
			delete(g.pendingDel, k)
		}
		for _, k := range deletes {
			s.deleteKey(g, k)
		}
		for _, k := range sortedKeys(resolved) {
			s.setKey(g, k, resolved[k])
		}
		g.cleanupPending()
		return nil
	}
	if !async {
		return nil, apply(g)
	}
	nodeName := g.node
	t := s.newTask(r, nodeName, "qmconfig", strconv.Itoa(vmid))
	t.work = func(t *task) error {
		g, err := s.taskVM(nodeName, vmid)
		if err != nil {
			return err
		}
		if err := g.checkDigestAndLock(digest); err != nil {
			return err
		}
		if err := apply(g); err != nil {
			return err
		}
		t.logf("update VM %d: %s", vmid, strings.Join(sortedKeys(changes), ","))
		return nil
	}
	s.launch(t)
	return t.upid, nil
}

// checkDigestAndLock makes qemu-server's load_and_check_config checks: the
// digest a client read must still be the configuration's, and no lock may
// be held.
func (g *vm) checkDigestAndLock(digest string) error {
	if digest != "" && digest != g.digest() {
		return fmt.Errorf("checksum mismatch (file change by other user?)")
	}
	return g.lockErr()
}

// resize is qemu-server's resize_vm: every check (digest, lock, disk,
// CD-ROM, shrinking) is made by its resize task's worker, which then grows
// the volume and the drive's size.
func (s *Server) resize(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	errs := map[string]string{}
	disk, size := q.Get("disk"), q.Get("size")
	if disk == "" {
		errs["disk"] = "property is missing and it is not optional"
	} else if k := kindOf(disk); k != kindDrive && k != kindVolume {
		errs["disk"] = fmt.Sprintf("value '%s' does not have a value in the enumeration", disk)
	}
	n, relative, sizeErr := parseSize(size)
	if size == "" {
		errs["size"] = "property is missing and it is not optional"
	} else if sizeErr != nil {
		errs["size"] = sizeErr.Error()
	}
	if len(errs) > 0 {
		return nil, paramError(errs)
	}
	if err := skiplockErr(q); err != nil {
		return nil, err
	}
	digest := q.Get("digest")

	s.lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	vmid, err := s.vmidParam(r)
	if err != nil {
		return nil, err
	}
	authid := caller(r)
	t := s.newTask(r, nodeName, "resize", strconv.Itoa(vmid))
	t.work = func(t *task) error {
		g, err := s.taskVM(nodeName, vmid)
		if err != nil {
			return err
		}
		if err := g.checkDigestAndLock(digest); err != nil {
			return err
		}
		value, ok := g.conf[disk]
		if !ok {
			return fmt.Errorf("disk '%s' does not exist", disk)
		}
		p, _ := parseProp(value, "file")
		if p.kv["media"] == "cdrom" {
			return fmt.Errorf("you can't resize a cdrom")
		}
		v, st, err := s.lookupVolume(g.node, p.head)
		if err != nil {
			return err
		}
		if err := s.check(authid, "/storage/"+st.Name, "Datastore.AllocateSpace"); err != nil {
			return err
		}
		newSize := n
		if relative {
			newSize = v.size + n
		}
		if newSize < v.size {
			return fmt.Errorf("shrinking disks is not supported")
		}
		if newSize == v.size {
			return nil
		}
		t.logf("resizing %s from %d to %d bytes", disk, v.size, newSize)
		v.size = newSize
		p.kv["size"] = formatSize(newSize)
		g.conf[disk] = p.String()
		return nil
	}
	s.launch(t)
	return t.upid, nil
}

func (s *Server) getStatusIndex(r *http.Request) (any, error) {
	return s.vmIndex(r, "subdir", "current", "reboot", "reset", "shutdown", "start", "stop")
}

// displayName is the name qemu-server reports for a VM: its configured
// name, or "VM <id>" (a VM being created has none yet).
func (g *vm) displayName() string {
	if n := g.conf["name"]; n != "" {
		return n
	}
	return "VM " + strconv.Itoa(g.id)
}

func (s *Server) getStatus(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	m := map[string]any{
		"vmid":      g.id,
		"name":      g.displayName(),
		"status":    g.status(),
		"qmpstatus": g.status(),
		"uptime":    g.uptime(),
		"cpus":      g.vcpus(),
		"maxmem":    int64(g.memoryMB()) * mib,
		"mem":       0,
		"maxdisk":   g.bootDiskSize(),
		"disk":      0,
		"cpu":       0,
		"netin":     0,
		"netout":    0,
		"diskread":  0,
		"diskwrite": 0,
		"ha":        map[string]any{"managed": 0},
	}
	if g.agentEnabled() {
		m["agent"] = 1
	}
	if g.running {
		m["pid"] = 10000 + g.id
		m["mem"] = int64(g.memoryMB()) * mib / 2
		m["running-machine"] = "pc-q35-9.2+pve1"
		m["running-qemu"] = "9.2.0"
	}
	if t := g.conf["tags"]; t != "" {
		m["tags"] = t
	}
	if l := g.conf["lock"]; l != "" {
		m["lock"] = l
	}
	if g.conf["template"] == "1" {
		m["template"] = 1
	}
	for k := range g.conf {
		if strings.HasPrefix(k, "serial") && kindOf(k) == kindString {
			m["serial"] = 1
		}
	}
	return m, nil
}

// checkBridges fails like a VM start on Proxmox VE when a NIC names a bridge
// the node does not have.
func (s *Server) checkBridges(conf map[string]string) error {
	for _, k := range sortedKeys(conf) {
		if kindOf(k) != kindNet {
			continue
		}
		_, _, kv := netParts(conf[k])
		if !slices.Contains(s.opts.Bridges, kv["bridge"]) {
			return fmt.Errorf("bridge '%s' does not exist", kv["bridge"])
		}
	}
	return nil
}

// startVM starts a stopped VM the way qemu-server's vm_start does in its
// worker: templates and locked VMs refuse, pending changes apply, then the
// machine powers on. The caller holds s.mu.
func (s *Server) startVM(g *vm) error {
	if g.conf["template"] == "1" {
		return fmt.Errorf("you can't start a vm if it's a template")
	}
	if err := g.lockErr(); err != nil {
		return err
	}
	if g.running {
		return fmt.Errorf("VM %d already running", g.id)
	}
	if err := s.checkBridges(g.effective()); err != nil {
		return err
	}
	s.applyPending(g)
	g.running = true
	g.startedAt = time.Now()
	s.hooks.push(hookEvent{on: true, vm: s.vmInfo(g)})
	return nil
}

func (s *Server) stopVM(g *vm) {
	if !g.running {
		return
	}
	g.running = false
	s.hooks.push(hookEvent{vmid: g.id})
}

// power is qemu-server's vm_start, vm_stop, vm_shutdown, vm_reboot and
// vm_reset. Reboot and reset refuse a stopped VM before forking; every
// other check (the config lock, "already running") and the power change
// itself happen in the task's worker. Stopping a stopped VM succeeds
// without a change, as _do_vm_stop returns early.
func (s *Server) power(r *http.Request, action string) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	if err := skiplockErr(q); err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	if (action == "reboot" || action == "reset") && !g.running {
		return nil, errorf("VM %d not running", g.id)
	}
	nodeName, vmid := g.node, g.id
	t := s.newTask(r, nodeName, "qm"+action, strconv.Itoa(vmid))
	t.work = func(t *task) error {
		g, err := s.taskVM(nodeName, vmid)
		if err != nil {
			return err
		}
		switch action {
		case "start":
			return s.startVM(g)
		case "stop", "shutdown":
			if !g.running {
				return nil
			}
			if err := g.lockErr(); err != nil {
				return err
			}
			// _do_vm_stop ends with vm_stop_cleanup with
			// $apply_pending_changes set: pending changes are written
			// into the configuration as the VM stops.
			s.stopVM(g)
			s.applyPending(g)
		case "reboot", "reset":
			if !g.running {
				return fmt.Errorf("VM %d not running", vmid)
			}
			if err := g.lockErr(); err != nil {
				return err
			}
			// vm_reboot: a reboot request, then _do_vm_stop as a
			// shutdown, whose vm_stop_cleanup applies the pending
			// changes; qmeventd's "qm cleanup" sees the request and
			// starts the VM again (vm_start). A reset is QMP
			// system_reset: QEMU keeps running and nothing applies.
			s.stopVM(g)
			if action == "reboot" {
				s.applyPending(g)
			}
			g.running = true
			g.startedAt = time.Now()
			s.hooks.push(hookEvent{on: true, vm: s.vmInfo(g)})
		}
		return nil
	}
	s.launch(t)
	return t.upid, nil
}

// deleteVM is qemu-server's destroy_vm: protection and power state are
// checked before forking and again by the qmdestroy worker, which also
// refuses a locked VM and then removes the disks and the configuration.
func (s *Server) deleteVM(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	if err := skiplockErr(q); err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	if err := g.destroyErr(); err != nil {
		return nil, errorf("%s", err.Error())
	}
	nodeName, vmid := g.node, g.id
	t := s.newTask(r, nodeName, "qmdestroy", strconv.Itoa(vmid))
	t.work = func(t *task) error {
		g, err := s.taskVM(nodeName, vmid)
		if err != nil {
			return err
		}
		if err := g.destroyErr(); err != nil {
			return err
		}
		if err := g.lockErr(); err != nil {
			return err
		}
		for k, v := range s.volumes {
			if v.vmid == g.id && (k.node == "" || k.node == g.node) && v.content == "images" {
				delete(s.volumes, k)
			}
		}
		delete(s.vms, g.id)
		s.access.removeVMACLs(g.id) // remove_vm_access
		s.hooks.push(hookEvent{vmid: g.id, deleted: true})
		t.logf("destroyed VM %d", g.id)
		return nil
	}
	s.launch(t)
	return t.upid, nil
}

// destroyErr is destroy_vm's early checks.
func (g *vm) destroyErr() error {
	if g.conf["protection"] == "1" {
		return fmt.Errorf("can't remove VM %d - protection mode enabled", g.id)
	}
	if g.running {
		return fmt.Errorf("VM %d is running - destroy failed", g.id)
	}
	return nil
}

// vmInfo describes a VM to the machine hooks. The caller holds s.mu.
func (s *Server) vmInfo(g *vm) VM {
	conf := make(map[string]string, len(g.conf))
	for k, v := range g.conf {
		conf[k] = v
	}
	nodeName := g.node
	return VM{
		ID:       g.id,
		Node:     g.node,
		Name:     g.conf["name"],
		Tags:     splitTags(g.conf["tags"]),
		MACs:     g.macs(),
		Cores:    g.vcpus(),
		MemoryMB: g.memoryMB(),
		CDROMs:   g.cdroms(),
		Boot:     g.conf["boot"],
		Config:   conf,
		ReadVolume: func(volid string) ([]byte, error) {
			s.lock()
			defer s.mu.Unlock()
			v, _, err := s.lookupVolume(nodeName, volid)
			if err != nil {
				return nil, fmt.Errorf("reading volume %s: %w", volid, err)
			}
			if v.data == nil {
				return nil, fmt.Errorf("reading volume %s: the volume holds no uploaded content", volid)
			}
			return append([]byte(nil), v.data...), nil
		},
	}
}
