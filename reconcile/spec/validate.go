package spec

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$`)
	versionRE = regexp.MustCompile(`^v?(\d+)\.(\d+)\.(\d+)(?:[-+][0-9A-Za-z.-]+)?$`)
)

// MinTalosVersion is the oldest Talos release the engine supports.
const MinTalosVersion = "v1.13.0"

// kubernetesSupport maps a Talos minor to the Kubernetes minors it runs,
// inclusive at both ends. A Talos minor not listed is not checked.
var kubernetesSupport = map[[2]int][2][2]int{
	{1, 13}: {{1, 31}, {1, 36}},
	{1, 14}: {{1, 33}, {1, 37}},
}

// KubernetesRange returns the Kubernetes minors a Talos version runs,
// inclusive at both ends, as "v1.31" and "v1.36": the table validation
// checks kubernetes.version against. ok is false when the version does not
// parse or its minor is not in the table (unknown, not incompatible).
func KubernetesRange(talosVersion string) (lo, hi string, ok bool) {
	tv, parsed := parseVersion(talosVersion)
	if !parsed {
		return "", "", false
	}
	rng, known := kubernetesSupport[[2]int{tv[0], tv[1]}]
	if !known {
		return "", "", false
	}
	return fmt.Sprintf("v%d.%d", rng[0][0], rng[0][1]), fmt.Sprintf("v%d.%d", rng[1][0], rng[1][1]), true
}

// poolKeys are the keys a pool accepts.
var poolKeys = []string{"count", "flavor", "disk", "cores", "memory", "node", "extensions", "config_patches", "tags"}

func (v *validator) cluster(t *node) *Cluster {
	v.root = t
	c := &Cluster{}
	c.Provider = v.provider(t)
	c.Name = v.name(t)
	c.Tags = v.stringMap(t, "tags", "tags")
	c.Talos = v.talos(t)
	c.Kubernetes = v.kubernetes(t, c.Talos.Version)
	c.Tailscale = v.tailscale(t)
	c.Network = v.network(t, c.Provider)
	c.Security = v.security(t)
	switch c.Provider {
	case ProviderOpenStack:
		c.OpenStack = v.openstack(t)
	case ProviderProxmox:
		c.Proxmox = v.proxmox(t, c)
	}
	c.ControlPlane, c.Workers = v.pools(t, c)
	c.Metal = v.metal(t, c)
	if c.Proxmox != nil {
		v.proxmoxLayout(t, c)
	}
	c.Plugins = v.plugins(t, c)
	c.Rollout = v.rollout(t, c)
	c.Remediation = v.remediation(t, c)
	v.clusterWarnings(t, c)
	return c
}

// provider checks the provider sections (rules 10 and 11's selection).
func (v *validator) provider(t *node) ProviderKind {
	os, px, metal := t.has("openstack"), t.has("proxmox"), t.has("metal")
	switch {
	case os && px:
		v.errorf(t.get("proxmox"), "proxmox", "at most one VM provider section is allowed: openstack or proxmox")
		return ""
	case os:
		return ProviderOpenStack
	case px:
		return ProviderProxmox
	case metal:
		v.errorf(t.get("metal"), "metal", "a metal section requires a VM provider section (openstack or proxmox)")
	default:
		v.errorf(t, "", "one provider section is required: openstack or proxmox")
	}
	return ""
}

func (v *validator) name(t *node) string {
	name, ok := v.requiredStrictStr(t, "name", "name")
	if !ok {
		return ""
	}
	if !nameRE.MatchString(name) {
		v.errorf(t.get("name"), "name", "name %q must be lowercase letters, digits and '-', starting and ending with a letter or digit", name)
		return ""
	}
	return name
}

// version is a parsed major.minor.patch.
type version [3]int

func parseVersion(s string) (version, bool) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return version{}, false
	}
	var out version
	for i := range out {
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return version{}, false
		}
		out[i] = n
	}
	return out, true
}

func (a version) less(b version) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func normalizeVersion(s string) string {
	if strings.HasPrefix(s, "v") {
		return s
	}
	return "v" + s
}

// versionKey reads talos.version or kubernetes.version.
func (v *validator) versionKey(sec *node, path string) (string, version, bool) {
	s, ok := v.requiredStrictStr(sec, "version", path)
	if !ok {
		return "", version{}, false
	}
	ver, ok := parseVersion(s)
	if !ok {
		v.errorf(sec.get("version"), path, "%s %q is not a version like v1.2.3", path, s)
		return "", version{}, false
	}
	return normalizeVersion(s), ver, true
}

func (v *validator) section(t *node, key string, allowed ...string) *node {
	n := t.get(key)
	if n == nil {
		v.errorf(t, key, "missing required section %s", key)
		return nil
	}
	if n.kind == kindNull {
		v.errorf(n, key, "%s must be a mapping with a version", key)
		return nil
	}
	if !v.mapping(n, key, allowed...) {
		return nil
	}
	return n
}

func (v *validator) talos(t *node) Talos {
	var out Talos
	sec := v.section(t, "talos", talosKeys...)
	if sec == nil {
		return out
	}
	if s, ver, ok := v.versionKey(sec, "talos.version"); ok {
		min, _ := parseVersion(MinTalosVersion)
		if ver.less(min) {
			v.errorf(sec.get("version"), "talos.version", "talos.version %s must be %s or newer", s, MinTalosVersion)
		} else {
			out.Version = s
		}
	}
	out.Extensions = v.strList(sec, "extensions", "talos.extensions")
	out.ConfigPatches = v.strList(sec, "config_patches", "talos.config_patches")
	out.KubeSpan, _ = v.boolean(sec, "kubespan", "talos.kubespan")
	return out
}

func (v *validator) kubernetes(t *node, talosVersion string) Kubernetes {
	var out Kubernetes
	sec := v.section(t, "kubernetes", kubernetesKeys...)
	if sec == nil {
		return out
	}
	s, kv, ok := v.versionKey(sec, "kubernetes.version")
	if !ok {
		return out
	}
	out.Version = s
	if talosVersion == "" {
		return out
	}
	tv, _ := parseVersion(talosVersion)
	rng, known := kubernetesSupport[[2]int{tv[0], tv[1]}]
	if !known {
		return out
	}
	minor := [2]int{kv[0], kv[1]}
	if less2(minor, rng[0]) || less2(rng[1], minor) {
		v.errorf(sec.get("version"), "kubernetes.version",
			"kubernetes.version %s is not supported by talos.version %s, which runs kubernetes v%d.%d to v%d.%d",
			s, talosVersion, rng[0][0], rng[0][1], rng[1][0], rng[1][1])
		out.Version = ""
	}
	return out
}

func less2(a, b [2]int) bool {
	if a[0] != b[0] {
		return a[0] < b[0]
	}
	return a[1] < b[1]
}

func (v *validator) tailscale(t *node) *Tailscale {
	n := t.get("tailscale")
	if n.isNull() {
		return nil
	}
	if !v.mapping(n, "tailscale", tailscaleKeys...) {
		return nil
	}
	ts := &Tailscale{}
	if ls := n.get("login_server"); !ls.isNull() {
		if ls.kind != kindString {
			v.errorf(ls, "tailscale.login_server", "tailscale.login_server must be a string")
		} else if ls.str != "" && !strings.HasPrefix(ls.str, "https://") {
			v.errorf(ls, "tailscale.login_server", "tailscale.login_server must start with https://")
		} else {
			ts.LoginServer = ls.str
		}
	}
	// Like the Python tool, the key is only judged when a command uses it
	// (Cluster.Credentials).
	if ak := n.get("auth_key"); !ak.isNull() {
		if ak.kind == kindString && ak.str != "" {
			ts.AuthKey = ak.str
		} else {
			ts.badAuthKey = true
		}
	}
	return ts
}

// pools reads controlplane and workers (rule 16).
func (v *validator) pools(t *node, c *Cluster) (Pool, []Pool) {
	cp := Pool{Name: "controlplane", Role: RoleControlPlane, Index: -1}
	if n := t.get("controlplane"); n.isNull() {
		v.errorf(where(t, "controlplane"), "controlplane", "missing required section controlplane")
	} else {
		cp = v.pool(n, "controlplane", "controlplane", RoleControlPlane, -1, c)
	}
	var workers []Pool
	w := t.get("workers")
	if w.isNull() {
		return cp, nil
	}
	if w.kind != kindMap {
		v.errorf(w, "workers", "workers must be a mapping of pool name to pool")
		return cp, nil
	}
	for i, name := range w.keys {
		path := "workers." + name
		switch {
		case w.keyKinds[name] != kindString:
			v.errorf(w.vals[name], path, "worker pool names must be strings; '%s' is a %s", name, w.keyKinds[name])
			continue
		case name == "controlplane":
			v.errorf(w.vals[name], path, "pool name 'controlplane' is reserved for the control plane; rename the worker pool")
			continue
		case !nameRE.MatchString(name):
			v.errorf(w.vals[name], path, "pool name '%s' must be lowercase letters, digits and '-', starting and ending with a letter or digit", name)
			continue
		}
		workers = append(workers, v.pool(w.vals[name], name, path, RoleWorker, i, c))
	}
	return cp, workers
}

func (v *validator) pool(n *node, name, path string, role Role, index int, c *Cluster) Pool {
	p := Pool{Name: name, Role: role, Index: index, Tags: map[string]string{}}
	if n.isNull() || n.kind != kindMap {
		v.errorf(n, path, "pool '%s' must be a mapping", name)
		return p
	}
	var unknown []string
	for _, k := range n.keys {
		if !slices.Contains(poolKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		v.errorf(n.vals[unknown[0]], path, "pool '%s': unknown key(s): %s", name, strings.Join(unknown, ", "))
	}
	required := []string{"count", "disk"}
	switch c.Provider {
	case ProviderOpenStack:
		required = []string{"count", "flavor", "disk"}
	case ProviderProxmox:
		required = []string{"count", "cores", "memory", "disk"}
	}
	for _, k := range required {
		if n.get(k).isNull() {
			v.errorf(where(n, k), path+"."+k, "pool '%s' missing '%s'", name, k)
		}
	}
	posInt := func(key string) int {
		i, ok := v.integer(n, key, path+"."+key)
		if !ok {
			return 0
		}
		if i <= 0 {
			v.errorf(n.get(key), path+"."+key, "pool '%s': '%s' must be greater than zero", name, key)
			return 0
		}
		return int(min(i, 1<<31-1))
	}
	if i, ok := v.integer(n, "count", path+".count"); ok {
		switch {
		case role == RoleControlPlane && i < 1:
			v.errorf(n.get("count"), path+".count", "pool '%s': 'count' must be 1 or greater", name)
		case i < 0:
			v.errorf(n.get("count"), path+".count", "pool '%s': 'count' must be 0 or greater", name)
		case i > 9999:
			v.errorf(n.get("count"), path+".count", "pool '%s': 'count' must be 9999 or less", name)
		default:
			p.Count = int(i)
		}
	}
	p.Disk = posInt("disk")
	// Each provider judges only the sizing keys it uses; the others are
	// accepted and ignored, as the Python tool does.
	switch c.Provider {
	case ProviderOpenStack:
		if s, ok := v.strictStr(n, "flavor", path+".flavor"); ok {
			p.Flavor = s
		}
		p.Cores, p.Memory = ignoredInt(n.get("cores")), ignoredInt(n.get("memory"))
	case ProviderProxmox:
		p.Cores = posInt("cores")
		p.Memory = posInt("memory")
		if s, ok := v.strictStr(n, "node", path+".node"); ok {
			p.Node = s
		}
	}
	p.Extensions = v.strList(n, "extensions", path+".extensions")
	p.ConfigPatches = v.strList(n, "config_patches", path+".config_patches")
	if tg := n.get("tags"); !tg.isNull() && tg.kind != kindMap {
		v.errorf(tg, path+".tags", "pool '%s': 'tags' must be a mapping", name)
	} else {
		p.Tags = v.stringMap(n, "tags", path+".tags")
	}
	// The widest ordinal is the count itself, two digits at least (a pool of
	// zero is measured as -00, as the Python tool does).
	if c.Name != "" {
		if h := p.Hostname(c.Name, p.Count); len(h) > 63 {
			v.errorf(where(n, "count"), path, "hostname %s would be longer than 63 characters; shorten the cluster or pool name", h)
		}
	}
	return p
}

// ignoredInt reads an integer a provider ignores: no problem is reported.
func ignoredInt(n *node) int {
	if n != nil && n.kind == kindInt && n.num > 0 && n.num < 1<<31 {
		return int(n.num)
	}
	return 0
}

// clusterWarnings adds the load-time warnings (rules 23 to 26).
func (v *validator) clusterWarnings(t *node, c *Cluster) {
	cp := t.get("controlplane")
	switch {
	case c.ControlPlane.Count == 1:
		v.warnf(where(cp, "count"), "controlplane.count", "single controlplane, no HA")
	case c.ControlPlane.Count > 0 && c.ControlPlane.Count%2 == 0:
		v.warnf(where(cp, "count"), "controlplane.count", "even controlplane count (%d), etcd needs a majority", c.ControlPlane.Count)
	}
	if c.Proxmox != nil && c.Proxmox.Network.SDN == nil && len(c.Network.DNS) > 0 {
		v.warnf(where(t.get("network"), "dns"), "network.dns",
			"network.dns is ignored on a Proxmox bridge/vnet (DHCP-backed) network; nodes get their DNS from the DHCP server, so set it there or use dns: []")
	}
	type host struct {
		key  string
		cidr netip.Prefix
		n    *node
	}
	net := t.get("network")
	hosts := []host{{"network.cluster.cidr", c.Network.Cluster.CIDR, where(net.get("cluster"), "cidr")}}
	if ext := c.Network.External; ext != nil {
		hosts = append(hosts,
			host{"network.external.cidr", ext.CIDR, where(net.get("external"), "cidr")},
			host{"network.external.anchor_cidr", ext.AnchorCIDR, where(net.get("external"), "anchor_cidr")})
	}
	// Metal L2s are warned about with the metal rules (metal.go).
	pods := netip.MustParsePrefix("10.244.0.0/16")
	services := netip.MustParsePrefix("10.96.0.0/12")
	for _, h := range hosts {
		if !h.cidr.IsValid() {
			continue
		}
		if h.cidr.Overlaps(pods) {
			v.warnf(h.n, h.key, "%s (%s) overlaps the kubernetes pod network %s: Talos reports an address-overlap diagnostic and pod traffic may be misrouted", h.key, h.cidr, pods)
		}
		if h.cidr.Overlaps(services) {
			v.warnf(h.n, h.key, "%s (%s) overlaps the kubernetes service network %s: Talos reports an address-overlap diagnostic and service traffic may be misrouted", h.key, h.cidr, services)
		}
	}
}
