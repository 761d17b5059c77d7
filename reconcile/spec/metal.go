package spec

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

var (
	metalGroupKeys     = []string{"role", "redfish", "disk", "network", "interfaces", "bmc", "boot_timeout", "auto_join", "extensions", "servers"}
	metalInterfaceKeys = []string{"role", "ip", "dns", "link_name", "vlan"}
	metalBMCKeys       = []string{"ip", "username", "password", "scheme", "tls_verify"}
	interfaceRoles     = []string{"cluster", "external", "pxe"}
)

// DefaultBootTimeout is the seconds a metal machine has to boot.
const DefaultBootTimeout = 600

// Placeholder is the value init scaffolds for every secret.
const Placeholder = "CHANGE-ME"

// metalFields is the parsed, not yet merged, settings of a group or server.
type metalFields struct {
	role        *Role
	disk        *string
	redfish     *bool
	autoJoin    *bool
	bootTimeout *int
	extensions  []string
	network     *L2
	interfaces  map[string]*MetalInterface
	ifOrder     []string
	bmc         map[string]any
	node        *node
}

// metal reads the metal section (rule 15).
func (v *validator) metal(t *node, c *Cluster) []MetalGroup {
	m := t.get("metal")
	if m.isNull() {
		return nil
	}
	if m.kind != kindMap {
		v.errorf(m, "metal", "metal must be a mapping of group name to group")
		return nil
	}
	var groups []MetalGroup
	seen := map[string]string{} // server -> group
	for _, gname := range m.keys {
		gn := m.vals[gname]
		gpath := "metal." + gname
		if gn.isNull() || gn.kind != kindMap {
			v.errorf(gn, gpath, "%s must be a mapping", gpath)
			continue
		}
		v.unknownKeys(gn, gpath, metalGroupKeys)
		gf := v.metalFields(gn, gpath, c)
		g := MetalGroup{Name: gname}
		servers := gn.get("servers")
		if !servers.isNull() && servers.kind != kindMap {
			v.errorf(servers, gpath+".servers", "%s.servers must be a mapping of server name to settings", gpath)
			servers = nil
		}
		var names []string
		if !servers.isNull() {
			for _, sname := range servers.keys {
				sn := servers.vals[sname]
				spath := gpath + ".servers." + sname
				if !sn.isNull() && sn.kind != kindMap {
					v.errorf(sn, spath, "%s must be a mapping", spath)
					continue
				}
				if sn.isNull() {
					sn = &node{kind: kindMap, vals: map[string]*node{}, file: servers.file, line: servers.line}
				}
				v.unknownKeys(sn, spath, without(metalGroupKeys, "servers"))
				sf := v.metalFields(sn, spath, c)
				if !nameRE.MatchString(sname) || len(sname) > 63 {
					v.errorf(sn, spath, "metal server name '%s' must be a valid hostname (lowercase letters, digits and '-')", sname)
					continue
				}
				srv, ok := v.metalServer(gf, sf, gname, sname, spath, sn, c)
				if ok {
					g.Servers = append(g.Servers, srv)
				}
				names = append(names, sname)
			}
		}
		for _, sname := range names {
			if other, dup := seen[sname]; dup {
				v.errorf(servers.vals[sname], gpath+".servers."+sname, "metal server '%s' is defined in more than one group (%s and %s)", sname, other, gname)
				continue
			}
			seen[sname] = gname
		}
		groups = append(groups, g)
	}
	v.metalCrossChecks(t, c, groups)
	return groups
}

func (v *validator) metalFields(n *node, path string, c *Cluster) metalFields {
	f := metalFields{node: n, interfaces: map[string]*MetalInterface{}, bmc: map[string]any{}}
	if r := n.get("role"); !r.isNull() {
		if r.kind != kindString || (r.str != string(RoleControlPlane) && r.str != string(RoleWorker)) {
			v.errorf(r, path+".role", "%s.role must be controlplane or worker", path)
		} else {
			role := Role(r.str)
			f.role = &role
		}
	}
	if d := n.get("disk"); !d.isNull() {
		if s, ok := v.str(n, "disk", path+".disk"); ok && d.kind == kindString {
			f.disk = &s
		} else if ok {
			v.errorf(d, path+".disk", "%s.disk must be a device path string such as /dev/sda", path)
		}
	}
	if b, ok := v.boolean(n, "redfish", path+".redfish"); ok {
		f.redfish = &b
	}
	if b, ok := v.boolean(n, "auto_join", path+".auto_join"); ok {
		f.autoJoin = &b
	}
	if bt := n.get("boot_timeout"); !bt.isNull() {
		if i, ok := v.intValue(bt, path+".boot_timeout", false); ok {
			if i <= 0 {
				v.errorf(bt, path+".boot_timeout", "%s.boot_timeout must be greater than zero", path)
			} else {
				b := int(min(i, 1<<31-1))
				f.bootTimeout = &b
			}
		}
	}
	f.extensions = v.strList(n, "extensions", path+".extensions")
	if nw := n.get("network"); !nw.isNull() {
		if nw.kind != kindMap {
			v.errorf(nw, path+".network", "%s.network must be a mapping", path)
		} else {
			l2 := v.l2(nw, path+".network", false, false)
			f.network = &l2
		}
	}
	if ifs := n.get("interfaces"); !ifs.isNull() {
		if ifs.kind != kindMap {
			v.errorf(ifs, path+".interfaces", "%s.interfaces must be a mapping of interface name to settings", path)
		} else {
			for _, name := range ifs.keys {
				if in := v.metalInterface(ifs.vals[name], name, path+".interfaces."+name); in != nil {
					f.interfaces[name] = in
					f.ifOrder = append(f.ifOrder, name)
				}
			}
		}
	}
	if b := n.get("bmc"); !b.isNull() {
		v.metalBMC(b, path+".bmc", f.bmc)
	}
	_ = c
	return f
}

func (v *validator) metalInterface(n *node, name, path string) *MetalInterface {
	if n.isNull() || n.kind != kindMap {
		v.errorf(n, path, "%s must be a mapping", path)
		return nil
	}
	v.unknownKeys(n, path, metalInterfaceKeys)
	in := &MetalInterface{Name: name}
	r := n.get("role")
	var roles []*node
	switch {
	case r.isNull():
		// Required after the group and server settings are merged.
	case r.kind == kindList:
		roles = r.items
	default:
		roles = []*node{r}
	}
	for _, rn := range roles {
		if rn.kind != kindString || !slices.Contains(interfaceRoles, rn.str) {
			v.errorf(rn, path+".role", "%s.role must be cluster, external or pxe (or a list of them)", path)
			continue
		}
		if slices.Contains(in.Roles, rn.str) {
			v.errorf(rn, path+".role", "%s.role lists %s twice", path, rn.str)
			continue
		}
		in.Roles = append(in.Roles, rn.str)
	}
	if ip := n.get("ip"); !ip.isNull() {
		text := scalarText(ip)
		p, ok := parseCIDR4(text, false)
		if ip.kind != kindString || !ok {
			v.errorf(ip, path+".ip", "%s.ip '%s' is not an IPv4 address (an optional /prefix is allowed)", path, text)
		} else {
			if !strings.Contains(text, "/") {
				p = netip.PrefixFrom(p.Addr(), 0)
			}
			in.IP = p
		}
	}
	if d := n.get("dns"); !d.isNull() {
		if d.kind != kindList {
			v.errorf(d, path+".dns", "%s.dns must be a list of IP addresses", path)
		} else {
			for i, it := range d.items {
				a, err := netip.ParseAddr(strings.TrimSpace(scalarText(it)))
				if it.kind != kindString || err != nil {
					v.errorf(it, fmt.Sprintf("%s.dns[%d]", path, i), "%s.dns entry %d is not an IP address", path, i+1)
					continue
				}
				in.DNS = append(in.DNS, a)
			}
		}
	}
	external := slices.Contains(in.Roles, "external")
	if ln := n.get("link_name"); !ln.isNull() {
		if s, ok := v.str(n, "link_name", path+".link_name"); ok {
			in.LinkName = s
		}
		if !external {
			v.errorf(ln, path+".link_name", "%s.link_name is only valid on an external-role interface", path)
		}
	}
	if vl := n.get("vlan"); !vl.isNull() {
		if i, ok := v.intValue(vl, path+".vlan", false); ok {
			if i < 1 || i > 4094 {
				v.errorf(vl, path+".vlan", "%s.vlan must be 1-4094", path)
			} else {
				in.VLAN = int(i)
			}
		}
		if !external {
			v.errorf(vl, path+".vlan", "%s.vlan is only valid on an external-role interface", path)
		}
	}
	return in
}

func (v *validator) metalBMC(n *node, path string, into map[string]any) {
	if n.kind != kindMap {
		v.errorf(n, path, "%s must be a mapping", path)
		return
	}
	v.unknownKeys(n, path, metalBMCKeys)
	if ip := n.get("ip"); !ip.isNull() {
		a, ok := parseIPv4(scalarText(ip))
		if ip.kind != kindString || !ok || strings.Contains(ip.str, "/") {
			v.errorf(ip, path+".ip", "%s.ip must be a bare IPv4 address (no /prefix)", path)
		} else {
			into["ip"] = a
		}
	}
	for _, k := range []string{"username", "password"} {
		if s := n.get(k); !s.isNull() {
			if s.kind == kindList || s.kind == kindMap || s.kind == kindBool {
				v.errorf(s, path+"."+k, "%s.%s must be a string", path, k)
			} else {
				into[k] = s.str
			}
		}
	}
	if s := n.get("scheme"); !s.isNull() {
		if s.kind != kindString || (s.str != "https" && s.str != "http") {
			v.errorf(s, path+".scheme", "%s.scheme must be https or http", path)
		} else {
			into["scheme"] = s.str
		}
	}
	if tv := n.get("tls_verify"); !tv.isNull() {
		into["tls_verify"] = v.tlsVerify(tv, path+".tls_verify")
	}
}

// metalServer merges a group's settings with one server's and checks the
// rules that need the merged result.
func (v *validator) metalServer(g, s metalFields, group, name, path string, sn *node, c *Cluster) (MetalServer, bool) {
	srv := MetalServer{Name: name, Group: group, BootTimeout: DefaultBootTimeout, Network: c.Network.Cluster, BMC: BMC{Scheme: "https"}}
	ok := true
	pick := func(gv, sv any) any {
		if !isNilPtr(sv) {
			return sv
		}
		return gv
	}
	if r, _ := pick(g.role, s.role).(*Role); r != nil {
		srv.Role = *r
	} else {
		v.errorf(sn, path+".role", "metal server '%s' has no role; set role: controlplane or worker on the server or its group", name)
		ok = false
	}
	if d, _ := pick(g.disk, s.disk).(*string); d != nil {
		srv.Disk = *d
	} else {
		v.errorf(sn, path+".disk", "metal server '%s' has no disk; set disk (e.g. /dev/sda) on the server or its group", name)
		ok = false
	}
	if b, _ := pick(g.redfish, s.redfish).(*bool); b != nil {
		srv.Redfish = *b
	}
	if b, _ := pick(g.autoJoin, s.autoJoin).(*bool); b != nil {
		srv.AutoJoin = *b
	}
	if b, _ := pick(g.bootTimeout, s.bootTimeout).(*int); b != nil {
		srv.BootTimeout = *b
	}
	srv.Extensions = g.extensions
	if s.extensions != nil {
		srv.Extensions = s.extensions
	}
	if l2, _ := pick(g.network, s.network).(*L2); l2 != nil {
		srv.Network = *l2
	}
	// Interfaces merge per name, key by key.
	merged := map[string]MetalInterface{}
	var order []string
	for _, f := range []metalFields{g, s} {
		for _, name := range f.ifOrder {
			in := *f.interfaces[name]
			if prev, ok := merged[name]; ok {
				if len(in.Roles) == 0 {
					in.Roles = prev.Roles
				}
				if !in.IP.IsValid() {
					in.IP = prev.IP
				}
				if in.DNS == nil {
					in.DNS = prev.DNS
				}
				if in.LinkName == "" {
					in.LinkName = prev.LinkName
				}
				if in.VLAN == 0 {
					in.VLAN = prev.VLAN
				}
			} else {
				order = append(order, name)
			}
			merged[name] = in
		}
	}
	for _, ifname := range order {
		in := merged[ifname]
		if len(in.Roles) == 0 {
			v.errorf(sn, path+".interfaces."+ifname+".role", "metal server '%s': interface %s has no role (cluster, external or pxe)", name, ifname)
			ok = false
		}
		srv.Interfaces = append(srv.Interfaces, in)
	}
	bmc := map[string]any{}
	for k, val := range g.bmc {
		bmc[k] = val
	}
	for k, val := range s.bmc {
		bmc[k] = val
	}
	if a, isAddr := bmc["ip"].(netip.Addr); isAddr {
		srv.BMC.IP = a
	}
	srv.BMC.Username, _ = bmc["username"].(string)
	srv.BMC.Password, _ = bmc["password"].(string)
	if sc, has := bmc["scheme"].(string); has {
		srv.BMC.Scheme = sc
	}
	if tv, has := bmc["tls_verify"].(TLSVerify); has {
		srv.BMC.TLSVerify = tv
	}
	if srv.Redfish {
		if !srv.BMC.IP.IsValid() {
			v.errorf(sn, path+".bmc.ip", "metal server '%s' uses redfish and needs bmc.ip", name)
			ok = false
		}
		for _, k := range []string{"username", "password"} {
			val, _ := bmc[k].(string)
			if strings.TrimSpace(val) == "" || val == Placeholder {
				v.errorf(sn, path+".bmc."+k, "metal server '%s' uses redfish and needs a real bmc.%s (it is empty or still the scaffolded placeholder)", name, k)
				ok = false
			}
		}
	}
	// Cabling.
	var cluster, external []MetalInterface
	for _, in := range srv.Interfaces {
		if slices.Contains(in.Roles, "cluster") {
			cluster = append(cluster, in)
		}
		if slices.Contains(in.Roles, "external") {
			external = append(external, in)
		}
	}
	switch {
	case len(cluster) != 1:
		v.errorf(sn, path+".interfaces", "metal server '%s' needs exactly one interface with role cluster, found %d", name, len(cluster))
		ok = false
	case !cluster[0].IP.IsValid():
		v.errorf(sn, path+".interfaces."+cluster[0].Name+".ip", "metal server '%s': the cluster interface %s needs an ip", name, cluster[0].Name)
		ok = false
	}
	if len(external) > 1 {
		v.errorf(sn, path+".interfaces", "metal server '%s' has %d interfaces with role external; at most one is allowed", name, len(external))
		ok = false
	}
	if len(external) > 0 && c.Network.External == nil {
		v.errorf(sn, path+".interfaces."+external[0].Name, "metal server '%s' has an external interface but there is no network.external block", name)
		ok = false
	}
	return srv, ok
}

func isNilPtr(x any) bool {
	switch p := x.(type) {
	case *Role:
		return p == nil
	case *string:
		return p == nil
	case *bool:
		return p == nil
	case *int:
		return p == nil
	case *L2:
		return p == nil
	}
	return x == nil
}

// metalCrossChecks runs the whole-config metal rules, in the order the
// Python tool evaluates them: kubespan first, then the L2 agreement, then
// the cluster addresses.
func (v *validator) metalCrossChecks(t *node, c *Cluster, groups []MetalGroup) {
	m := t.get("metal")
	clusterL2 := c.Network.Cluster
	for _, g := range groups {
		for _, s := range g.Servers {
			if s.Network.CIDR.IsValid() && clusterL2.CIDR.IsValid() && s.Network.CIDR != clusterL2.CIDR && !c.Talos.KubeSpan {
				v.errorf(m.get(g.Name), "talos.kubespan", "metal server '%s' sits on %s, another L2 than network.cluster.cidr: talos.kubespan must be true", s.Name, s.Network.CIDR)
			}
		}
	}
	for _, g := range groups {
		for _, s := range g.Servers {
			path := fmt.Sprintf("metal.%s.servers.%s", g.Name, s.Name)
			at := m.get(g.Name)
			if !s.Network.Gateway.IsValid() {
				if s.Network == clusterL2 {
					v.errorf(at, "network.cluster.gateway", "metal server '%s' uses the cluster L2, so network.cluster.gateway must be set", s.Name)
				} else {
					v.errorf(at, path+".network.gateway", "metal server '%s' needs network.gateway", s.Name)
				}
			}
			if s.Network.CIDR == clusterL2.CIDR && s.Network != clusterL2 {
				if s.Network.MTU != clusterL2.MTU {
					v.errorf(at, path+".network.mtu", "metal server '%s' is on network.cluster.cidr, so its mtu must match network.cluster.mtu (%d)", s.Name, clusterL2.MTU)
				}
				if s.Network.VLAN != clusterL2.VLAN {
					v.errorf(at, path+".network.vlan", "metal server '%s' is on network.cluster.cidr, so its vlan must match network.cluster.vlan", s.Name)
				}
			}
		}
	}
	vip, _ := c.Network.KubeAPIVIP()
	used := map[netip.Addr]string{}
	for _, g := range groups {
		for _, s := range g.Servers {
			path := fmt.Sprintf("metal.%s.servers.%s", g.Name, s.Name)
			at := m.get(g.Name)
			for _, in := range s.Interfaces {
				if !slices.Contains(in.Roles, "cluster") || !in.IP.IsValid() {
					continue
				}
				ip := in.IP.Addr()
				key := path + ".interfaces." + in.Name + ".ip"
				if s.Network.CIDR.IsValid() {
					if !s.Network.CIDR.Contains(ip) {
						v.errorf(at, key, "metal server '%s': cluster ip %s must be inside %s", s.Name, ip, s.Network.CIDR)
					} else if in.IP.Bits() != 0 && in.IP.Bits() != s.Network.CIDR.Bits() {
						v.errorf(at, key, "metal server '%s': cluster ip %s must carry the prefix /%d of its L2", s.Name, in.IP, s.Network.CIDR.Bits())
					}
				}
				if vip.IsValid() && ip == vip {
					v.errorf(at, key, "metal server '%s': cluster ip %s must not equal the kubeapi_vip", s.Name, ip)
				}
				if other, dup := used[ip]; dup {
					v.errorf(at, key, "metal server '%s': cluster ip %s is already used by %s", s.Name, ip, other)
				}
				used[ip] = s.Name
			}
		}
	}
}
