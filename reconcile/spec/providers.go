package spec

import (
	"crypto/sha256"
	"fmt"
	"math/big"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// DefaultImageFactory is the Talos Image Factory used unless
// proxmox.image_factory says otherwise.
const DefaultImageFactory = "https://factory.talos.dev"

var sdnIDRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9]{1,7}$`)

func (v *validator) openstack(t *node) *OpenStack {
	n := t.get("openstack")
	if !v.mapping(n, "openstack", openstackKeys...) {
		return nil
	}
	o := &OpenStack{Region: "RegionOne", TLSVerify: TLSVerify{Verify: true}, ImageFactory: DefaultImageFactory, notText: map[string]bool{}}
	o.URL, _ = v.requiredStrictStr(n, "url", "openstack.url")
	o.AvailabilityZone, _ = v.requiredStrictStr(n, "availability_zone", "openstack.availability_zone")
	o.ExternalNet, _ = v.requiredStrictStr(n, "external_net", "openstack.external_net")
	// Any region is taken as written; an empty one means the default.
	if r := n.get("region"); pyTruthy(r) {
		o.Region = pyText(r)
	}
	o.Metadata, _ = v.boolean(n, "metadata", "openstack.metadata")
	if tv := n.get("tls_verify"); !tv.isNull() {
		o.TLSVerify = v.tlsVerify(tv, "openstack.tls_verify")
	}
	o.ImageFactory = v.imageFactory(n, "openstack.image_factory", o.ImageFactory)
	o.CredentialID = secretString(n, "credential_id", "openstack.credential_id", o.notText)
	o.CredentialSecret = secretString(n, "credential_secret", "openstack.credential_secret", o.notText)
	return o
}

// secretString reads a credential without judging it: credentials are
// checked when a command needs them (Cluster.Credentials), so a value of the
// wrong type is only recorded in notText, never reported or echoed here.
func secretString(parent *node, key, path string, notText map[string]bool) string {
	n := parent.get(key)
	if n.isNull() {
		return ""
	}
	if n.kind != kindString {
		notText[path] = true
		return ""
	}
	return n.str
}

func (v *validator) proxmox(t *node, c *Cluster) *Proxmox {
	n := t.get("proxmox")
	if !v.mapping(n, "proxmox", proxmoxKeys...) {
		return nil
	}
	p := &Proxmox{CIDataStorage: "local", PlacementStrategy: "spread", TLSVerify: TLSVerify{Verify: true}, ImageFactory: DefaultImageFactory, notText: map[string]bool{}}
	p.URL, _ = v.requiredStrictStr(n, "url", "proxmox.url")
	p.Storage, _ = v.proxmoxStorage(n, "storage")
	p.ISOStorage, _ = v.proxmoxStorage(n, "iso_storage")
	if cd := n.get("cidata_storage"); !cd.isNull() {
		if s, ok := v.proxmoxStorage(n, "cidata_storage"); ok {
			p.CIDataStorage = s
		}
	}
	// An empty placement_strategy means the default, as in the Python tool.
	if ps := n.get("placement_strategy"); pyTruthy(ps) {
		if ps.kind != kindString || ps.str != "spread" {
			v.errorf(ps, "proxmox.placement_strategy", "proxmox.placement_strategy only supports 'spread'")
		}
	}
	p.Nodes = v.strList(n, "nodes", "proxmox.nodes")
	if tv := n.get("tls_verify"); !tv.isNull() {
		p.TLSVerify = v.tlsVerify(tv, "proxmox.tls_verify")
	}
	p.ImageFactory = v.imageFactory(n, "proxmox.image_factory", p.ImageFactory)
	p.TokenID = secretString(n, "token_id", "proxmox.token_id", p.notText)
	p.TokenSecret = secretString(n, "token_secret", "proxmox.token_secret", p.notText)
	v.proxmoxNetwork(t, n, c, p)
	return p
}

// imageFactory reads a provider section's optional image_factory, an
// http(s) base URL; def when it is absent or refused.
func (v *validator) imageFactory(section *node, path, def string) string {
	f := section.get("image_factory")
	if f.isNull() {
		return def
	}
	s, ok := v.str(section, "image_factory", path)
	if !ok {
		return def
	}
	if !strings.HasPrefix(s, "https://") && !strings.HasPrefix(s, "http://") {
		v.errorf(f, path, "%s must be an http(s) URL", path)
		return def
	}
	return strings.TrimRight(s, "/")
}

// proxmoxStorage reads a Proxmox storage name. Like the Python tool, which takes
// str() of any value that is not false-like, a number is a name; a missing,
// empty or false-like value is refused.
func (v *validator) proxmoxStorage(px *node, key string) (string, bool) {
	path := "proxmox." + key
	n := px.get(key)
	switch {
	case n == nil:
		v.errorf(px, path, "missing required key %s", path)
	case !pyTruthy(n) || strings.TrimSpace(pyText(n)) == "":
		v.errorf(n, path, "%s must be a non-empty string", path)
	default:
		return pyText(n), true
	}
	return "", false
}

func (v *validator) tlsVerify(n *node, path string) TLSVerify {
	switch {
	case n.kind == kindBool:
		return TLSVerify{Verify: n.bool}
	case n.kind == kindString && strings.TrimSpace(n.str) != "":
		return TLSVerify{Verify: true, CAFile: n.str}
	}
	v.errorf(n, path, "%s must be true, false or the path of a CA bundle", path)
	return TLSVerify{Verify: true}
}

func (v *validator) proxmoxNetwork(t, px *node, c *Cluster, p *Proxmox) {
	pn := px.get("network")
	if pn.isNull() {
		v.errorf(where(px, "network"), "proxmox.network.cluster", "missing required key proxmox.network.cluster (one of bridge, vnet or sdn)")
		return
	}
	if !v.mapping(pn, "proxmox.network", proxmoxNetworkKeys...) {
		return
	}
	cl := pn.get("cluster")
	if cl.isNull() || cl.kind != kindMap {
		v.errorf(where(pn, "cluster"), "proxmox.network.cluster", "proxmox.network.cluster must be a mapping with exactly one of bridge, vnet or sdn")
	} else {
		v.unknownKeys(cl, "proxmox.network.cluster", proxmoxClusterNetworkKeys)
		// As in the Python tool, a bridge or vnet counts when its value is
		// not false-like; an empty one is no choice at all.
		bridge, hasBridge := v.proxmoxLink(cl, "bridge")
		vnet, hasVNet := v.proxmoxLink(cl, "vnet")
		sdn := cl.get("sdn")
		hasSDN := sdn != nil && (sdn.kind == kindMap || sdn.kind == kindNull)
		if sdn != nil && !hasSDN {
			v.errorf(sdn, "proxmox.network.cluster.sdn", "proxmox.network.cluster.sdn must be a mapping (it may be {})")
		}
		switch {
		case hasSDN && (hasBridge || hasVNet):
			v.errorf(sdn, "proxmox.network.cluster.sdn", "proxmox.network.cluster.sdn cannot be combined with bridge or vnet")
		case hasBridge && hasVNet:
			v.errorf(cl, "proxmox.network.cluster", "proxmox.network.cluster needs exactly one of bridge, vnet or sdn, not both bridge and vnet")
		case !hasBridge && !hasVNet && !hasSDN:
			v.errorf(cl, "proxmox.network.cluster", "proxmox.network.cluster needs exactly one of bridge, vnet or sdn")
		case hasSDN:
			if vl := t.get("network").get("cluster").get("vlan"); !vl.isNull() {
				v.errorf(vl, "network.cluster.vlan", "network.cluster.vlan cannot be combined with proxmox.network.cluster.sdn")
			}
			p.Network.SDN = v.sdn(sdn, c, p)
		case hasBridge:
			p.Network.ClusterBridge = bridge
		default:
			p.Network.ClusterVNet = vnet
		}
	}
	ext := pn.get("external")
	switch {
	case !ext.isNull():
		if !v.mapping(ext, "proxmox.network.external", proxmoxExternalNetworkKeys...) {
			break
		}
		if c.Network.External == nil {
			// An empty block describes nothing and is let be.
			if len(ext.keys) > 0 {
				v.errorf(ext, "proxmox.network.external", "proxmox.network.external needs a network.external block (cidr, gateway, anchor_cidr)")
			}
			break
		}
		if b, ok := v.requiredStrictStr(ext, "bridge", "proxmox.network.external.bridge"); ok {
			p.Network.ExternalBridge = b
		}
	case c.Network.External != nil:
		v.errorf(t.get("network").get("external"), "proxmox.network.external.bridge", "network.external needs proxmox.network.external.bridge on Proxmox")
	}
	if vip, _ := c.Network.KubeAPIVIP(); !vip.IsValid() {
		netNode := t.get("network")
		if netNode.get("cluster").has("kubeapi_vip") || (netNode.get("external").has("kubeapi_vip")) {
			return // already reported as invalid
		}
		v.errorf(where(netNode, "cluster"), "network.cluster.kubeapi_vip", "a Proxmox cluster needs kubeapi_vip in network.cluster or network.external")
	}
}

// proxmoxLink reads proxmox.network.cluster.bridge or .vnet: set when its value is
// not false-like. Lists and mappings are refused.
func (v *validator) proxmoxLink(cl *node, key string) (string, bool) {
	n := cl.get(key)
	if !pyTruthy(n) {
		return "", false
	}
	if n.kind == kindList || n.kind == kindMap {
		path := "proxmox.network.cluster." + key
		v.errorf(n, path, "%s must be a string, not a %s", path, n.describe())
		return "", false
	}
	return pyText(n), true
}

func (v *validator) sdn(n *node, c *Cluster, p *Proxmox) *SDN {
	const path = "proxmox.network.cluster.sdn"
	s := &SDN{Zone: "evpn", Controller: "evpnctl", ASN: 65000}
	if n.kind == kindNull {
		n = &node{kind: kindMap, vals: map[string]*node{}, file: n.file, line: n.line}
	}
	v.unknownKeys(n, path, sdnKeys)
	id := c.Name
	if name, ok := v.str(n, "name", path+".name"); ok {
		id = name
	}
	if id != "" && !sdnIDRE.MatchString(id) {
		v.errorf(where(n, "name"), path+".name", "SDN id '%s' must be 2-8 letters or digits starting with a letter (no '-'); set %s.name", id, path)
	}
	s.Name = id
	if z := n.get("zone"); !z.isNull() && (z.kind != kindString || z.str != "evpn") {
		v.errorf(z, path+".zone", "%s.zone only supports 'evpn'", path)
	}
	if name, ok := v.strictStr(n, "controller", path+".controller"); ok {
		s.Controller = name
	}
	ranged := func(key string, lo, hi int64) (int64, bool) {
		i, ok := v.integer(n, key, path+"."+key)
		if !ok {
			return 0, false
		}
		if i < lo || i > hi {
			v.errorf(n.get(key), path+"."+key, "%s.%s must be %d-%d", path, key, lo, hi)
			return 0, false
		}
		return i, true
	}
	if a, ok := ranged("asn", 0, 4294967295); ok {
		s.ASN = a
	}
	s.VRFTag = defaultVRFTag(c.Name)
	if t, ok := ranged("vrf_tag", 1, 16777215); ok {
		s.VRFTag = t
	}
	if t, ok := ranged("tag", 1, 16777215); ok {
		s.Tag = t
	} else if n.get("tag").isNull() {
		s.Tag = s.VRFTag + 1
		if s.Tag > 16777215 {
			v.errorf(where(n, "vrf_tag"), path+".tag", "%s.tag defaults to vrf_tag+1 = %d, which is above 16777215; set %s.tag", path, s.Tag, path)
		}
	}
	if s.Tag != 0 && s.Tag == s.VRFTag {
		v.errorf(where(n, "tag"), path+".tag", "%s.tag must differ from %s.vrf_tag", path, path)
	}
	if m, ok := v.integer(n, "mtu", path+".mtu"); ok {
		if m < int64(c.Network.Cluster.MTU) || m <= 0 {
			v.errorf(n.get("mtu"), path+".mtu", "%s.mtu must be %d or higher", path, c.Network.Cluster.MTU)
		} else {
			s.MTU = int(m)
		}
	}
	s.Nodes = v.strList(n, "nodes", path+".nodes")
	s.ExitNodes = v.strList(n, "exit_nodes", path+".exit_nodes")
	if len(s.Nodes) > 0 {
		if missing := notIn(s.ExitNodes, s.Nodes); len(missing) > 0 {
			v.errorf(where(n, "exit_nodes"), path+".exit_nodes", "%s.exit_nodes must be inside %s.nodes: %s", path, path, strings.Join(missing, ", "))
		}
		if missing := notIn(p.Nodes, s.Nodes); len(missing) > 0 {
			v.errorf(where(n, "nodes"), path+".nodes", "%s.nodes must include every proxmox.nodes entry: %s", path, strings.Join(missing, ", "))
		}
	}
	exits := s.ExitNodes
	switch {
	case len(exits) == 0 && len(s.Nodes) > 0:
		exits = s.Nodes
	case len(exits) == 0:
		exits = p.Nodes
	}
	if pe, ok := v.str(n, "primary_exit_node", path+".primary_exit_node"); ok {
		if len(exits) > 0 && !slices.Contains(exits, pe) {
			v.errorf(n.get("primary_exit_node"), path+".primary_exit_node", "%s.primary_exit_node '%s' must be one of the exit nodes: %s", path, pe, strings.Join(exits, ", "))
		}
		s.PrimaryExitNode = pe
	} else if len(exits) > 0 {
		s.PrimaryExitNode = exits[0]
	}
	if len(s.ExitNodes) == 0 {
		s.ExitNodes = exits
	}
	return s
}

// defaultVRFTag derives the EVPN VRF tag from the cluster name:
// 10000 + 2*(sha256(name) mod 8,000,000).
func defaultVRFTag(cluster string) int64 {
	sum := sha256.Sum256([]byte(cluster))
	h := new(big.Int).SetBytes(sum[:])
	h.Mod(h, big.NewInt(8_000_000))
	return 10000 + 2*h.Int64()
}

func notIn(list, set []string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(set, s) {
			out = append(out, s)
		}
	}
	return out
}

// SDN static address layout inside network.cluster.cidr.
const (
	sdnGatewayHost   = 1
	sdnCPBase        = 10 // controlplane NN is host 10+NN; hosts 10-59 are reserved
	sdnWorkerBase    = 60 // worker pool i, node NN is host 60+50*i+NN
	sdnBlockSize     = 50
	sdnMaxPerPool    = 49
	sdnFirstReserved = sdnCPBase
)

// StaticAddress returns the SDN static address of the n-th machine of pool
// p, and false when it does not fit inside cidr.
func StaticAddress(cidr netip.Prefix, p Pool, n int) (netip.Addr, bool) {
	host := sdnCPBase + n
	if p.Role != RoleControlPlane {
		host = sdnWorkerBase + sdnBlockSize*p.Index + n
	}
	return hostAddr(cidr, host)
}

// hostAddr returns host number h of cidr, and false when it is the
// broadcast address or outside the network.
func hostAddr(cidr netip.Prefix, h int) (netip.Addr, bool) {
	base := cidr.Masked().Addr().As4()
	size := uint64(1) << (32 - cidr.Bits())
	if uint64(h) >= size-1 {
		return netip.Addr{}, false
	}
	u := uint64(base[0])<<24 | uint64(base[1])<<16 | uint64(base[2])<<8 | uint64(base[3])
	u += uint64(h)
	return netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)}), true
}

// hostIndex returns a's host number inside cidr.
func hostIndex(cidr netip.Prefix, a netip.Addr) int {
	b, x := cidr.Masked().Addr().As4(), a.As4()
	ub := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	ux := uint32(x[0])<<24 | uint32(x[1])<<16 | uint32(x[2])<<8 | uint32(x[3])
	return int(ux - ub)
}

// proxmoxLayout checks the rules that need the pools: pool placement nodes
// and the SDN static layout.
func (v *validator) proxmoxLayout(t *node, c *Cluster) {
	p := c.Proxmox
	for _, pool := range c.Pools() {
		if pool.Node != "" && len(p.Nodes) > 0 && !slices.Contains(p.Nodes, pool.Node) {
			path := poolPath(pool)
			v.errorf(where(poolNode(t, pool), "node"), path+".node", "pool '%s': node '%s' is not in proxmox.nodes", pool.Name, pool.Node)
		}
	}
	s := p.Network.SDN
	if s == nil {
		return
	}
	net := t.get("network")
	if len(c.Network.DNS) == 0 && !v.hasErrorFor("network.dns") {
		v.errorf(where(net, "dns"), "network.dns", "network.dns must not be empty with proxmox.network.cluster.sdn: the SDN has no DHCP server")
	}
	cidr := c.Network.Cluster.CIDR
	if !cidr.IsValid() {
		return
	}
	for _, pool := range c.Pools() {
		if pool.Count > sdnMaxPerPool {
			v.errorf(where(poolNode(t, pool), "count"), poolPath(pool)+".count", "pool '%s': 'count' must be %d or less on a managed SDN (each pool has a block of 50 addresses)", pool.Name, sdnMaxPerPool)
			continue
		}
		if pool.Count == 0 {
			continue
		}
		if _, ok := StaticAddress(cidr, pool, pool.Count); !ok {
			v.errorf(where(poolNode(t, pool), "count"), poolPath(pool), "pool '%s' does not fit inside network.cluster.cidr %s: its static addresses would pass the broadcast address", pool.Name, cidr)
		}
	}
	vip := c.Network.Cluster.KubeAPIVIP
	if !vip.IsValid() {
		return
	}
	vipNode := where(net.get("cluster"), "kubeapi_vip")
	const key = "network.cluster.kubeapi_vip"
	h := hostIndex(cidr, vip)
	switch {
	case h == sdnGatewayHost:
		v.errorf(vipNode, key, "%s %s collides with the SDN anycast gateway", key, vip)
		return
	}
	for _, pool := range c.Pools() {
		for i := 1; i <= min(pool.Count, sdnMaxPerPool); i++ {
			if a, ok := StaticAddress(cidr, pool, i); ok && a == vip {
				v.errorf(vipNode, key, "%s %s collides with the static address of %s", key, vip, pool.Hostname(c.Name, i))
				return
			}
		}
	}
	end := sdnWorkerBase + sdnBlockSize*len(c.Workers)
	if h >= sdnFirstReserved && h < end {
		v.errorf(vipNode, key, "%s %s sits inside the SDN static address layout (hosts %d-%d are reserved for machines); use a host from 2 to 9", key, vip, sdnFirstReserved, end-1)
	}
}

func poolPath(p Pool) string {
	if p.Role == RoleControlPlane {
		return "controlplane"
	}
	return "workers." + p.Name
}

func poolNode(t *node, p Pool) *node {
	if p.Role == RoleControlPlane {
		return t.get("controlplane")
	}
	return t.get("workers").get(p.Name)
}

func (v *validator) hasErrorFor(key string) bool {
	for _, p := range v.errs {
		if p.Key == key {
			return true
		}
	}
	return false
}

var _ = fmt.Sprintf
