package spec

import (
	"fmt"
	"net/netip"
	"strings"
)

var (
	clusterL2Keys  = []string{"cidr", "gateway", "vlan", "mtu", "kubeapi_vip"}
	externalL2Keys = []string{"cidr", "gateway", "vlan", "mtu", "kubeapi_vip", "anchor_cidr", "ingress_pool"}
	linkLocal      = netip.MustParsePrefix("169.254.0.0/16")
)

// DefaultMTU is the MTU of an L2 block that sets none.
const DefaultMTU = 1500

// network reads the network section (rules 7, 8, 9 and 17).
func (v *validator) network(t *node, provider ProviderKind) Network {
	var out Network
	net := t.get("network")
	if net.isNull() {
		v.errorf(where(t, "network"), "network", "missing required section network (it needs cluster.cidr, dns and ntp)")
		return out
	}
	if !v.mapping(net, "network", networkKeys...) {
		return out
	}
	// dns: the key must exist; [] (or null) is fine.
	if d := net.get("dns"); d == nil {
		v.errorf(net, "network.dns", "missing required key network.dns (a list of IP addresses; [] for none)")
	} else if d.kind != kindList && d.kind != kindNull {
		v.errorf(d, "network.dns", "network.dns must be a list of IP addresses")
	} else {
		for i, it := range d.items {
			a, err := netip.ParseAddr(it.str)
			if it.kind != kindString || err != nil {
				v.errorf(it, fmt.Sprintf("network.dns[%d]", i), "network.dns entry %d is not an IP address", i+1)
				continue
			}
			out.DNS = append(out.DNS, a)
		}
	}
	if n := net.get("ntp"); n == nil {
		v.errorf(net, "network.ntp", "missing required key network.ntp (a list of NTP servers)")
	} else if n.kind != kindList && n.kind != kindNull {
		v.errorf(n, "network.ntp", "network.ntp must be a list of non-empty strings")
	} else {
		out.NTP = v.strList(net, "ntp", "network.ntp")
	}

	cl := net.get("cluster")
	if cl.isNull() {
		v.errorf(where(net, "cluster"), "network.cluster", "missing required key network.cluster.cidr")
	} else if cl.kind != kindMap {
		v.errorf(cl, "network.cluster", "network.cluster must be a mapping")
	} else {
		for _, k := range []string{"anchor_cidr", "ingress_pool"} {
			if n := cl.get(k); n != nil {
				v.errorf(n, "network.cluster."+k, "network.cluster.%s is not allowed; set them under network.external", k)
				cl.remove(k)
			}
		}
		out.Cluster = v.l2(cl, "network.cluster", false, true)
	}

	if ext := net.get("external"); !ext.isNull() {
		switch {
		case ext.kind != kindMap:
			v.errorf(ext, "network.external", "network.external must be a mapping")
		case allNull(ext):
			// A block whose keys are all null is absent, but its keys must
			// still be known ones.
			v.unknownKeys(ext, "network.external", externalL2Keys)
		case provider == ProviderOpenStack:
			v.unknownKeys(ext, "network.external", externalL2Keys)
			v.errorf(ext, "network.external", "network.external is not valid with openstack: the API and ingress addresses come from reserved ports with floating IPs")
		default:
			e := v.l2(ext, "network.external", true, true)
			out.External = &e
		}
	}
	if provider == ProviderOpenStack && cl != nil && cl.kind == kindMap {
		if n := cl.get("kubeapi_vip"); !n.isNull() {
			v.errorf(n, "network.cluster.kubeapi_vip", "network.cluster.kubeapi_vip is not valid with openstack: the API VIP is a reserved port's address")
			out.Cluster.KubeAPIVIP = netip.Addr{}
		}
		if n := cl.get("vlan"); !n.isNull() {
			v.errorf(n, "network.cluster.vlan", "network.cluster.vlan is not valid with openstack: the cluster network is a Neutron network")
			out.Cluster.VLAN = 0
		}
	}

	// Relations between the two blocks.
	if ext := out.External; ext != nil {
		extNode := net.get("external")
		if ext.CIDR.IsValid() && out.Cluster.CIDR.IsValid() && ext.CIDR.Overlaps(out.Cluster.CIDR) {
			v.errorf(where(extNode, "cidr"), "network.external.cidr", "network.external.cidr must not overlap network.cluster.cidr")
		}
		if ext.KubeAPIVIP.IsValid() && out.Cluster.KubeAPIVIP.IsValid() {
			v.errorf(where(extNode, "kubeapi_vip"), "network.external.kubeapi_vip",
				"kubeapi_vip is set in both network.cluster and network.external; set it in exactly one")
		}
	}
	return out
}

// allNull reports whether every key of a mapping is null (such a block
// counts as absent).
func allNull(n *node) bool {
	if n.kind != kindMap {
		return false
	}
	for _, k := range n.keys {
		if !n.vals[k].isNull() {
			return false
		}
	}
	return true
}

// l2 reads one L2 block. external selects the external rules (gateway and
// anchor required, host bits allowed in cidr); vip allows kubeapi_vip.
func (v *validator) l2(n *node, path string, external, vip bool) L2 {
	out := L2{MTU: DefaultMTU}
	allowed := clusterL2Keys
	if external {
		allowed = externalL2Keys
	}
	if !vip {
		allowed = without(allowed, "kubeapi_vip")
		if k := n.get("kubeapi_vip"); !k.isNull() {
			v.errorf(k, path+".kubeapi_vip", "%s.kubeapi_vip is not allowed here; the API VIP belongs to network.cluster or network.external", path)
			n.remove("kubeapi_vip")
		}
	}
	v.unknownKeys(n, path, allowed)

	// A bare address is its /32, as Python's ip_network reads it.
	if c := n.get("cidr"); c.isNull() {
		v.errorf(where(n, "cidr"), path+".cidr", "missing required key %s.cidr", path)
	} else if c.kind != kindString || strings.TrimSpace(c.str) == "" {
		v.errorf(c, path+".cidr", "%s.cidr must be an IPv4 network like 10.0.0.0/24", path)
	} else if p, ok := parseNetwork4(c.str, false); !ok {
		v.errorf(c, path+".cidr", "%s.cidr '%s' is not an IPv4 network like 10.0.0.0/24", path, c.str)
	} else if !external && p.Masked() != p {
		v.errorf(c, path+".cidr", "%s.cidr '%s' has host bits set; use the network address %s", path, c.str, p.Masked())
	} else {
		out.CIDR = p
	}
	addr := func(key string) netip.Addr {
		k := n.get(key)
		if k.isNull() {
			return netip.Addr{}
		}
		a, ok := parseIPv4(scalarText(k))
		if k.kind != kindString || !ok {
			v.errorf(k, path+"."+key, "%s.%s is not an IPv4 address", path, key)
			return netip.Addr{}
		}
		if out.CIDR.IsValid() && !out.CIDR.Contains(a) {
			v.errorf(k, path+"."+key, "%s.%s must be inside %s.cidr", path, key, path)
		}
		return a
	}
	out.Gateway = addr("gateway")
	if external && n.get("gateway").isNull() {
		v.errorf(where(n, "gateway"), path+".gateway", "missing required key %s.gateway", path)
	}
	if vip {
		out.KubeAPIVIP = addr("kubeapi_vip")
	}
	if i, ok := v.integer(n, "vlan", path+".vlan"); ok {
		if i < 1 || i > 4094 {
			v.errorf(n.get("vlan"), path+".vlan", "%s.vlan must be 1-4094", path)
		} else {
			out.VLAN = int(i)
		}
	}
	if i, ok := v.integer(n, "mtu", path+".mtu"); ok {
		if i < 1280 {
			v.errorf(n.get("mtu"), path+".mtu", "%s.mtu must be 1280 or greater", path)
		} else {
			out.MTU = int(min(i, 1<<31-1))
		}
	}
	if !external {
		return out
	}
	if a := n.get("anchor_cidr"); a.isNull() {
		v.errorf(where(n, "anchor_cidr"), path+".anchor_cidr", "missing required key %s.anchor_cidr (an IPv4 network inside 169.254.0.0/16, e.g. 169.254.32.0/20)", path)
	} else if p, ok := parseNetwork4(a.str, false); a.kind != kindString || !ok {
		v.errorf(a, path+".anchor_cidr", "%s.anchor_cidr is not an IPv4 network like 169.254.32.0/20", path)
	} else if !linkLocal.Contains(p.Addr()) || p.Bits() < linkLocal.Bits() {
		v.errorf(a, path+".anchor_cidr", "%s.anchor_cidr must be inside 169.254.0.0/16", path)
	} else {
		// Host bits are allowed and dropped, as Python's non-strict
		// ip_network does.
		out.AnchorCIDR = p.Masked()
	}
	if ip := n.get("ingress_pool"); !ip.isNull() {
		out.IngressPool = v.ingressPool(ip, path, out)
	}
	if out.IngressPool != nil && out.KubeAPIVIP.IsValid() && out.IngressPool.Contains(out.KubeAPIVIP) {
		v.errorf(where(n, "kubeapi_vip"), path+".kubeapi_vip", "%s.kubeapi_vip must not be inside ingress_pool", path)
	}
	return out
}

func (v *validator) ingressPool(n *node, path string, l2 L2) *AddrRange {
	key := path + ".ingress_pool"
	s := scalarText(n)
	parts := strings.Split(s, "-")
	if n.kind != kindString || len(parts) != 2 {
		v.errorf(n, key, "%s must be 'start-end', got '%s'", key, s)
		return nil
	}
	start, okS := parseIPv4(parts[0])
	end, okE := parseIPv4(parts[1])
	if !okS {
		v.errorf(n, key, "%s start is invalid", key)
	}
	if !okE {
		v.errorf(n, key, "%s end is invalid", key)
	}
	if !okS || !okE {
		return nil
	}
	if end.Less(start) {
		v.errorf(n, key, "%s start must be <= end", key)
		return nil
	}
	if l2.CIDR.IsValid() && (!l2.CIDR.Contains(start) || !l2.CIDR.Contains(end)) {
		v.errorf(n, key, "%s must be inside %s.cidr", key, path)
		return nil
	}
	return &AddrRange{Start: start, End: end}
}

func without(list []string, drop string) []string {
	out := make([]string, 0, len(list))
	for _, s := range list {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}
