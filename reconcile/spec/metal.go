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

// metalIface is one parsed interface of a group or server, before merging.
type metalIface struct {
	MetalInterface
	// hasRole is set when the interface states a role (valid or not).
	hasRole bool
}

// metalFields is the parsed, not yet merged, settings of a group or server.
type metalFields struct {
	role          *Role
	disk          *string
	redfish       *bool
	autoJoin      *bool
	bootTimeout   *int
	extensions    []string
	hasExtensions bool
	network       *L2
	interfaces    map[string]*metalIface
	ifOrder       []string
	bmc           map[string]any
}

// metalNet is an L2 a metal group or server sits on, for the whole-config
// rules. path is the group or server (metal.<group>[.servers.<server>]).
type metalNet struct {
	path  string
	label string
	l2    L2
	at    *node
	// stated is false for a group that rides network.cluster.
	stated bool
}

// metalMachine is a merged server with where it was written.
type metalMachine struct {
	srv  MetalServer
	path string
	at   *node
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
	var (
		groups   []MetalGroup
		nets     []metalNet
		machines []metalMachine
	)
	seen := map[string]string{} // server -> group
	for _, gname := range m.keys {
		gn := m.vals[gname]
		gpath := "metal." + gname
		if kk, ok := m.keyKinds[gname]; (ok && kk != kindString) || gname == "" {
			v.errorf(gn, "metal", "metal group names must be non-empty strings; %q is not one", gname)
			continue
		}
		if gn.isNull() || gn.kind != kindMap {
			v.errorf(gn, gpath, "%s must be a mapping", gpath)
			continue
		}
		v.unknownKeys(gn, gpath, metalGroupKeys)
		gf := v.metalFields(gn, gpath, true)
		gnet := metalNet{path: gpath, label: "metal group " + gname, l2: c.Network.Cluster, at: gn}
		if gf.network != nil {
			gnet.l2, gnet.stated, gnet.at = *gf.network, true, gn.get("network")
		}
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
				if kk, ok := servers.keyKinds[sname]; (ok && kk != kindString) || sname == "" {
					v.errorf(sn, gpath+".servers", "%s.servers: server names must be non-empty strings; %q is not one", gpath, sname)
					continue
				}
				if !nameRE.MatchString(sname) || len(sname) > 63 {
					v.errorf(sn, spath, "metal server name '%s' is not a valid hostname component (lowercase letters, digits and '-')", sname)
					continue
				}
				if !sn.isNull() && sn.kind != kindMap {
					v.errorf(sn, spath, "%s must be a mapping", spath)
					continue
				}
				if sn.isNull() {
					sn = &node{kind: kindMap, vals: map[string]*node{}, keyKinds: map[string]kind{}, file: servers.file, line: servers.line}
				}
				v.unknownKeys(sn, spath, without(metalGroupKeys, "servers"))
				sf := v.metalFields(sn, spath, false)
				names = append(names, sname)
				if sf.network != nil {
					nets = append(nets, metalNet{path: spath, label: "metal server " + gname + "/" + sname, l2: *sf.network, at: sn.get("network"), stated: true})
				}
				if srv, ok := v.metalServer(gf, sf, gname, sname, spath, sn, c); ok {
					g.Servers = append(g.Servers, srv)
					machines = append(machines, metalMachine{srv: srv, path: spath, at: sn})
				}
			}
		}
		nets = append(nets, gnet)
		for _, sname := range names {
			if other, dup := seen[sname]; dup {
				v.errorf(servers.vals[sname], gpath+".servers."+sname, "metal server '%s' is defined in more than one group (%s and %s)", sname, other, gname)
				continue
			}
			seen[sname] = gname
		}
		groups = append(groups, g)
	}
	v.metalCrossChecks(c, nets, machines)
	return groups
}

// metalFields parses the settings of a group (group is true) or of one
// server. A group must name its role and disk, and every interface it lists
// its role; a server only overrides.
func (v *validator) metalFields(n *node, path string, group bool) metalFields {
	f := metalFields{interfaces: map[string]*metalIface{}, bmc: map[string]any{}}
	if r := n.get("role"); r.isNull() {
		if group {
			v.errorf(where(n, "role"), path+".role", "%s: missing 'role' (controlplane or worker)", path)
		}
	} else if r.kind != kindString || (r.str != string(RoleControlPlane) && r.str != string(RoleWorker)) {
		v.errorf(r, path+".role", "%s.role must be 'controlplane' or 'worker'", path)
	} else {
		role := Role(r.str)
		f.role = &role
	}
	if d := n.get("disk"); d.isNull() {
		if group {
			v.errorf(where(n, "disk"), path+".disk", "%s: missing 'disk' (the install device, e.g. /dev/sda)", path)
		}
	} else if !isText(d) {
		v.errorf(d, path+".disk", "%s.disk must be a non-empty string (a device path such as /dev/sda)", path)
	} else {
		f.disk = &d.str
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
				v.errorf(bt, path+".boot_timeout", "%s.boot_timeout must be a positive whole number of seconds", path)
			} else {
				b := int(min(i, 1<<31-1))
				f.bootTimeout = &b
			}
		}
	}
	if !n.get("extensions").isNull() {
		f.hasExtensions = true
		f.extensions = v.strList(n, "extensions", path+".extensions")
	}
	if nw := n.get("network"); !nw.isNull() {
		switch {
		case nw.kind != kindMap:
			v.errorf(nw, path+".network", "%s.network must be a mapping", path)
		case len(nw.keys) == 0:
			// An empty block is no block: the cluster L2 applies.
		default:
			l2 := v.l2(nw, path+".network", false, false)
			f.network = &l2
		}
	}
	if ifs := n.get("interfaces"); !ifs.isNull() {
		if ifs.kind != kindMap {
			v.errorf(ifs, path+".interfaces", "%s.interfaces must be a mapping of interface name to settings", path)
		} else {
			for _, name := range ifs.keys {
				ipath := path + ".interfaces." + name
				if kk, ok := ifs.keyKinds[name]; (ok && kk != kindString) || name == "" {
					v.errorf(ifs.vals[name], path+".interfaces", "%s.interfaces: interface names must be non-empty strings; %q is not one", path, name)
					continue
				}
				if in := v.metalInterface(ifs.vals[name], name, ipath, group); in != nil {
					f.interfaces[name] = in
					f.ifOrder = append(f.ifOrder, name)
				}
			}
		}
	}
	if b := n.get("bmc"); !b.isNull() {
		v.metalBMC(b, path+".bmc", f.bmc)
	}
	return f
}

func (v *validator) metalInterface(n *node, name, path string, group bool) *metalIface {
	if n.isNull() {
		at := &node{file: ClusterFile}
		if n != nil {
			at = n
		}
		n = &node{kind: kindMap, vals: map[string]*node{}, keyKinds: map[string]kind{}, file: at.file, line: at.line}
	}
	if n.kind != kindMap {
		v.errorf(n, path, "%s must be a mapping", path)
		return nil
	}
	v.unknownKeys(n, path, metalInterfaceKeys)
	in := &metalIface{MetalInterface: MetalInterface{Name: name}}
	r := n.get("role")
	switch {
	case r.isNull():
		if group {
			v.errorf(where(n, "role"), path+".role", "%s: missing 'role' (cluster, external or pxe)", path)
		}
	default:
		in.hasRole = true
		roles := []*node{r}
		if r.kind == kindList {
			roles = r.items
		}
		valid := len(roles) > 0
		for _, rn := range roles {
			valid = valid && rn.kind == kindString && slices.Contains(interfaceRoles, rn.str)
		}
		if !valid {
			v.errorf(r, path+".role", "%s.role must be 'cluster', 'external', 'pxe', or a list of those", path)
			break
		}
		for _, rn := range roles {
			if slices.Contains(in.Roles, rn.str) {
				v.errorf(rn, path+".role", "%s.role must not repeat a role (%s is listed twice)", path, rn.str)
				in.Roles = nil
				break
			}
			in.Roles = append(in.Roles, rn.str)
		}
	}
	if ip := n.get("ip"); !ip.isNull() {
		text := scalarText(ip)
		p, ok := parseCIDR4(text, false)
		if ip.kind != kindString || !ok {
			v.errorf(ip, path+".ip", "%s.ip is invalid: '%s' is not an IPv4 address (an optional /prefix is allowed)", path, text)
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
					v.errorf(it, fmt.Sprintf("%s.dns[%d]", path, i), "%s.dns contains an invalid address (entry %d)", path, i+1)
					continue
				}
				in.DNS = append(in.DNS, a)
			}
		}
	}
	if ln := n.get("link_name"); !ln.isNull() {
		if !isText(ln) {
			v.errorf(ln, path+".link_name", "%s.link_name must be a non-empty string", path)
		} else {
			in.LinkName = ln.str
		}
	}
	if vl := n.get("vlan"); !vl.isNull() {
		i, ok := int64(0), vl.kind == kindInt
		if ok {
			i = vl.num
		}
		if !ok || i < 1 || i > 4094 {
			v.errorf(vl, path+".vlan", "%s.vlan must be 1-4094", path)
		} else {
			in.VLAN = int(i)
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
			v.errorf(ip, path+".ip", "%s.ip is invalid: it must be a bare IPv4 address (no /prefix)", path)
		} else {
			into["ip"] = a
		}
	}
	for _, k := range []string{"username", "password"} {
		if s := n.get(k); !s.isNull() {
			if s.kind != kindString || s.str == "" {
				v.errorf(s, path+"."+k, "%s.%s must be a non-empty string", path, k)
			} else {
				into[k] = s.str
			}
		}
	}
	if s := n.get("scheme"); !s.isNull() {
		if s.kind != kindString || (s.str != "https" && s.str != "http") {
			v.errorf(s, path+".scheme", "%s.scheme must be one of: https, http", path)
		} else {
			into["scheme"] = s.str
		}
	}
	// A present tls_verify must say something: null is refused like any
	// other value that is not a bool or a CA bundle path.
	if tv := n.get("tls_verify"); tv != nil {
		if tv.kind == kindNull {
			v.errorf(tv, path+".tls_verify", "%s.tls_verify must be true, false, or a CA bundle path", path)
		} else {
			into["tls_verify"] = v.tlsVerify(tv, path+".tls_verify")
		}
	}
}

// metalServer merges a group's settings with one server's and checks the
// rules that need the merged result.
func (v *validator) metalServer(g, s metalFields, group, name, path string, sn *node, c *Cluster) (MetalServer, bool) {
	srv := MetalServer{Name: name, Group: group, BootTimeout: DefaultBootTimeout, Network: c.Network.Cluster, BMC: BMC{Scheme: "https"}}
	ok := true
	// The group reports a missing role or disk; a server only lacks one
	// when its group does.
	switch {
	case s.role != nil:
		srv.Role = *s.role
	case g.role != nil:
		srv.Role = *g.role
	default:
		ok = false
	}
	switch {
	case s.disk != nil:
		srv.Disk = *s.disk
	case g.disk != nil:
		srv.Disk = *g.disk
	default:
		ok = false
	}
	for _, b := range []struct {
		into     *bool
		grp, own *bool
	}{{&srv.Redfish, g.redfish, s.redfish}, {&srv.AutoJoin, g.autoJoin, s.autoJoin}} {
		switch {
		case b.own != nil:
			*b.into = *b.own
		case b.grp != nil:
			*b.into = *b.grp
		}
	}
	switch {
	case s.bootTimeout != nil:
		srv.BootTimeout = *s.bootTimeout
	case g.bootTimeout != nil:
		srv.BootTimeout = *g.bootTimeout
	}
	srv.Extensions = g.extensions
	if s.hasExtensions {
		srv.Extensions = s.extensions
	}
	switch {
	case s.network != nil:
		srv.Network = *s.network
	case g.network != nil:
		srv.Network = *g.network
	}

	// Interfaces merge per name, key by key.
	merged := map[string]metalIface{}
	var order []string
	for _, f := range []metalFields{g, s} {
		for _, ifname := range f.ifOrder {
			in := *f.interfaces[ifname]
			if prev, seen := merged[ifname]; seen {
				if !in.hasRole {
					in.Roles, in.hasRole = prev.Roles, prev.hasRole
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
				order = append(order, ifname)
			}
			merged[ifname] = in
		}
	}
	for _, ifname := range order {
		in := merged[ifname]
		ipath := path + ".interfaces." + ifname
		switch {
		case !in.hasRole:
			// A group interface without a role is reported on the group.
			if _, inGroup := g.interfaces[ifname]; !inGroup {
				v.errorf(sn, ipath+".role", "%s: missing 'role' (cluster, external or pxe)", ipath)
			}
			ok = false
		case len(in.Roles) == 0:
			ok = false // an invalid role, already reported
		default:
			external := slices.Contains(in.Roles, "external")
			if in.LinkName != "" && !external {
				v.errorf(sn, ipath+".link_name", "metal server '%s': interface %s sets link_name but has no external role; link_name is only valid on an external-role interface", name, ifname)
				ok = false
			}
			if in.VLAN != 0 && !external {
				v.errorf(sn, ipath+".vlan", "metal server '%s': interface %s sets vlan but has no external role; vlan is only valid on an external-role interface", name, ifname)
				ok = false
			}
		}
		srv.Interfaces = append(srv.Interfaces, in.MetalInterface)
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
		for _, k := range []string{"username", "password"} {
			val, _ := bmc[k].(string)
			switch val {
			case "":
				v.errorf(sn, path+".bmc."+k, "%s: bmc.%s must be a non-empty string (the server uses redfish)", path, k)
				ok = false
			case Placeholder:
				v.errorf(sn, path+".bmc."+k, "%s: bmc.%s is still the scaffolded 'CHANGE-ME' placeholder; set the real credential", path, k)
				ok = false
			}
		}
		if !srv.BMC.IP.IsValid() {
			v.errorf(sn, path+".bmc.ip", "metal server '%s' uses redfish but has no bmc.ip", name)
			ok = false
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
		got := "none"
		if len(cluster) > 1 {
			var ns []string
			for _, in := range cluster {
				ns = append(ns, in.Name)
			}
			got = strings.Join(ns, ", ")
		}
		v.errorf(sn, path+".interfaces", "metal server '%s': exactly one interface with the cluster role is required (got %s)", name, got)
		ok = false
	case !cluster[0].IP.IsValid():
		v.errorf(sn, path+".interfaces."+cluster[0].Name+".ip", "metal server '%s': the cluster interface %s has no static address; it needs an ip", name, cluster[0].Name)
		ok = false
	}
	if len(external) > 1 {
		v.errorf(sn, path+".interfaces", "metal server '%s' has %d interfaces with the external role; at most one is supported", name, len(external))
		ok = false
	}
	if len(external) > 0 && c.Network.External == nil {
		v.errorf(sn, path+".interfaces."+external[0].Name, "metal server '%s': interface %s has the external role but cluster.yaml has no network.external block", name, external[0].Name)
		ok = false
	}
	return srv, ok
}

// metalCrossChecks runs the whole-config metal rules, in the order the
// Python tool evaluates them: kubespan first, then the L2 gateway and the
// agreement with network.cluster, then the cluster addresses.
func (v *validator) metalCrossChecks(c *Cluster, nets []metalNet, machines []metalMachine) {
	clusterL2 := c.Network.Cluster
	for _, n := range nets {
		if n.stated && n.l2.CIDR.IsValid() && clusterL2.CIDR.IsValid() && n.l2.CIDR != clusterL2.CIDR && !c.Talos.KubeSpan {
			v.errorf(n.at, "talos.kubespan", "%s sits on %s, another L2 than network.cluster.cidr: talos.kubespan must be true (KubeSpan is the only path between the two)", n.label, n.l2.CIDR)
		}
	}
	for _, n := range nets {
		switch {
		case !n.stated:
			if !clusterL2.Gateway.IsValid() && !v.hasErrorFor("network.cluster.gateway") {
				v.errorf(n.at, "network.cluster.gateway", "%s rides network.cluster, whose gateway is unset: every metal link is static, so set network.cluster.gateway", n.path)
			}
		case n.at.get("gateway").isNull():
			v.errorf(n.at, n.path+".network.gateway", "%s.network.gateway is required: every metal link is static, so its L2 needs a default gateway", n.path)
		}
		if n.stated && n.l2.CIDR.IsValid() && n.l2.CIDR == clusterL2.CIDR {
			if n.l2.MTU != clusterL2.MTU {
				v.errorf(where(n.at, "mtu"), n.path+".network.mtu", "%s.network.mtu must be %d to agree with network.cluster (the same cidr is the same wire)", n.path, clusterL2.MTU)
			}
			if n.l2.VLAN != clusterL2.VLAN {
				want := "unset"
				if clusterL2.VLAN != 0 {
					want = fmt.Sprint(clusterL2.VLAN)
				}
				v.errorf(where(n.at, "vlan"), n.path+".network.vlan", "%s.network.vlan must agree with network.cluster (vlan %s; the same cidr is the same wire)", n.path, want)
			}
		}
		if n.stated && n.l2.CIDR.IsValid() && n.l2.CIDR != clusterL2.CIDR {
			v.metalOverlapWarnings(n)
		}
	}
	vip, _ := c.Network.KubeAPIVIP()
	sdn := c.Proxmox != nil && c.Proxmox.Network.SDN != nil
	used := map[netip.Addr]string{}
	for _, m := range machines {
		s := m.srv
		l2 := s.Network
		for _, in := range s.Interfaces {
			if !slices.Contains(in.Roles, "cluster") || !in.IP.IsValid() {
				continue
			}
			ip := in.IP.Addr()
			key := m.path + ".interfaces." + in.Name + ".ip"
			if l2.CIDR.IsValid() {
				size := uint64(1) << (32 - l2.CIDR.Bits())
				h := uint64(hostIndex(l2.CIDR, ip))
				switch {
				case !l2.CIDR.Contains(ip):
					v.errorf(m.at, key, "metal server '%s': cluster ip %s must be inside its L2 %s", s.Name, ip, l2.CIDR)
				case in.IP.Bits() != 0 && in.IP.Bits() != l2.CIDR.Bits():
					v.errorf(m.at, key, "metal server '%s': cluster ip %s must be inside its L2 %s with the same prefix /%d", s.Name, in.IP, l2.CIDR, l2.CIDR.Bits())
				case l2.CIDR.Bits() <= 30 && (h == 0 || h == size-1):
					v.errorf(m.at, key, "metal server '%s': cluster ip %s is the network or broadcast address of %s", s.Name, ip, l2.CIDR)
				case ip == l2.Gateway || (l2.CIDR == clusterL2.CIDR && ip == clusterL2.Gateway):
					v.errorf(m.at, key, "metal server '%s': cluster ip %s is the L2's gateway", s.Name, ip)
				case sdn && l2.CIDR == clusterL2.CIDR:
					end := sdnWorkerBase + sdnBlockSize*len(c.Workers)
					if hi := int(h); hi >= sdnFirstReserved && hi < end {
						v.errorf(m.at, key, "metal server '%s': cluster ip %s sits inside the SDN static address layout (hosts %d-%d are reserved for machines); use a free host", s.Name, ip, sdnFirstReserved, end-1)
					}
				}
			}
			if vip.IsValid() && ip == vip {
				v.errorf(m.at, key, "metal server '%s': cluster ip %s collides with the kubeapi_vip; it must not equal the kubeapi_vip", s.Name, ip)
			}
			if other, dup := used[ip]; dup {
				v.errorf(m.at, key, "metal server '%s': cluster ip %s is also the cluster address of %s", s.Name, ip, other)
			}
			used[ip] = s.Name
		}
	}
}

// metalOverlapWarnings warns when a stated metal L2 (a group's network, or a
// server's own) overlaps the pod or service network, naming the key that
// states it.
func (v *validator) metalOverlapWarnings(n metalNet) {
	key := n.path + ".network.cidr"
	at := where(n.at, "cidr")
	for _, k := range []struct{ what, cidr, traffic string }{
		{"pod", "10.244.0.0/16", "pod"},
		{"service", "10.96.0.0/12", "service"},
	} {
		if n.l2.CIDR.Overlaps(netip.MustParsePrefix(k.cidr)) {
			v.warnf(at, key, "%s (%s) overlaps the kubernetes %s network %s: Talos reports an address-overlap diagnostic and %s traffic may be misrouted", key, n.l2.CIDR, k.what, k.cidr, k.traffic)
		}
	}
}
