package openstack

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// secGroup is a Neutron security group; its rules are in neutron.rules.
type secGroup struct {
	std
	name      string
	stateful  bool
	isDefault bool
}

// secRule is a security group rule. Optional values are nil when unset.
type secRule struct {
	std
	groupID      string
	direction    string
	ethertype    string
	protocol     *string
	portMin      *int
	portMax      *int
	remotePrefix *string
	remoteGroup  *string
	inDefault    bool
}

func (g *secGroup) json(rules []map[string]any) map[string]any {
	return g.std.json(map[string]any{
		"name":                 g.name,
		"stateful":             g.stateful,
		"shared":               false,
		"security_group_rules": rules,
	})
}

func (rl *secRule) json() map[string]any {
	var normalized any
	if rl.remotePrefix != nil {
		normalized = netip.MustParsePrefix(*rl.remotePrefix).Masked().String()
	}
	m := rl.std.json(map[string]any{
		"security_group_id":       rl.groupID,
		"direction":               rl.direction,
		"ethertype":               rl.ethertype,
		"protocol":                strOrNil(rl.protocol),
		"port_range_min":          intOrNil(rl.portMin),
		"port_range_max":          intOrNil(rl.portMax),
		"remote_ip_prefix":        strOrNil(rl.remotePrefix),
		"remote_group_id":         strOrNil(rl.remoteGroup),
		"remote_address_group_id": nil,
		"normalized_cidr":         normalized,
		"belongs_to_default_sg":   rl.inDefault,
	})
	delete(m, "tags") // rules are not taggable
	return m
}

func strOrNil(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func intOrNil(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// groupRules are the group's rules in creation order.
func (s *Server) groupRules(g *secGroup) []map[string]any {
	out := []map[string]any{}
	for _, rl := range bySeq(s.net.rules, func(rl *secRule) int { return rl.seq }) {
		if rl.groupID == g.id {
			out = append(out, rl.json())
		}
	}
	return out
}

// defaultGroup returns the project's "default" group, creating it with
// its rules the first time (securitygroups_db._ensure_default_security_group).
func (s *Server) defaultGroup(project string) *secGroup {
	if id, ok := s.net.defaultSG[project]; ok {
		return s.net.groups[id]
	}
	g := &secGroup{std: s.newStd(project), name: "default", stateful: true, isDefault: true}
	g.description = "Default security group"
	s.net.groups[g.id] = g
	s.net.defaultSG[project] = g.id
	s.addTemplateRules(g)
	return g
}

// addTemplateRules adds the rules of Neutron's default rule templates: any
// egress over IPv4 and IPv6 for every group, and for the default group
// also any ingress from members of the group itself.
func (s *Server) addTemplateRules(g *secGroup) {
	add := func(direction, ethertype string, remoteGroup *string) {
		rl := &secRule{std: s.newStd(g.project), groupID: g.id, direction: direction, ethertype: ethertype,
			remoteGroup: remoteGroup, inDefault: g.isDefault}
		s.net.rules[rl.id] = rl
	}
	add("egress", "IPv4", nil)
	add("egress", "IPv6", nil)
	if g.isDefault {
		self := g.id
		add("ingress", "IPv4", &self)
		add("ingress", "IPv6", &self)
	}
}

func (s *Server) groupFor(id string) (*secGroup, error) {
	g := s.net.groups[id]
	if g == nil || !s.visible(g.project) {
		return nil, nerr(http.StatusNotFound, "SecurityGroupNotFound", "Security group %s does not exist", id)
	}
	return g, nil
}

func (s *Server) listSecGroups(r *http.Request) (int, any, error) {
	q, err := parseList(r, "id", "name", "description", "project_id", "tenant_id", "stateful", "shared",
		"revision_number", "tags", "tags-any", "not-tags", "not-tags-any")
	if err != nil {
		return 0, nil, err
	}
	s.defaultGroup(s.opts.ProjectID)
	var items []map[string]any
	for _, g := range bySeq(s.net.groups, func(g *secGroup) int { return g.seq }) {
		if s.visible(g.project) {
			items = append(items, g.json(s.groupRules(g)))
		}
	}
	return http.StatusOK, s.page(r, "security_groups", q, items), nil
}

func (s *Server) showSecGroup(r *http.Request) (int, any, error) {
	g, err := s.groupFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"security_group": g.json(s.groupRules(g))}, nil
}

// defaultGroupExists is the 409 a group named "default" gets
// (securitygroup._validate_name_not_default).
var defaultGroupExists = &neutronError{http.StatusConflict, "SecurityGroupDefaultAlreadyExists", "Default security group already exists."}

func (s *Server) createSecGroup(r *http.Request) (int, any, error) {
	a, err := readBody(r, "security_group", "name", "description", "stateful", "tenant_id", "project_id", "tags")
	if err != nil {
		return 0, nil, err
	}
	g := &secGroup{std: s.newStd(s.opts.ProjectID), stateful: true}
	for _, f := range []struct {
		k   string
		dst any
	}{{"name", &g.name}, {"description", &g.description}, {"stateful", &g.stateful}, {"tags", &g.tags}} {
		if _, err := a.get(f.k, f.dst); err != nil {
			return 0, nil, err
		}
	}
	if strings.EqualFold(g.name, "default") {
		return 0, nil, defaultGroupExists
	}
	g.tags = uniqueSorted(g.tags)
	s.defaultGroup(g.project)
	s.net.groups[g.id] = g
	s.addTemplateRules(g)
	return http.StatusCreated, map[string]any{"security_group": g.json(s.groupRules(g))}, nil
}

func (s *Server) updateSecGroup(r *http.Request) (int, any, error) {
	g, err := s.groupFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	a, err := readBody(r, "security_group", "name", "description", "stateful")
	if err != nil {
		return 0, nil, err
	}
	if err := checkIfMatch(r, g.revision); err != nil {
		return 0, nil, err
	}
	next := *g
	for _, f := range []struct {
		k   string
		dst any
	}{{"name", &next.name}, {"description", &next.description}, {"stateful", &next.stateful}} {
		if _, err := a.get(f.k, f.dst); err != nil {
			return 0, nil, err
		}
	}
	if a.has("name") && strings.EqualFold(next.name, "default") {
		return 0, nil, defaultGroupExists
	}
	if next.stateful != g.stateful && s.groupInUse(g.id) {
		return 0, nil, nerr(http.StatusConflict, "SecurityGroupInUse", "Security Group %s in use.", g.id)
	}
	if g.isDefault && a.has("name") {
		return 0, nil, nerr(http.StatusConflict, "SecurityGroupCannotUpdateDefault", "Updating default security group not allowed.")
	}
	*g = next
	s.touch(&g.std)
	return http.StatusOK, map[string]any{"security_group": g.json(s.groupRules(g))}, nil
}

func (s *Server) groupInUse(id string) bool {
	for _, p := range s.net.ports {
		for _, gid := range p.groups {
			if gid == id {
				return true
			}
		}
	}
	return false
}

func (s *Server) deleteSecGroup(r *http.Request) (int, any, error) {
	id := r.PathValue("id")
	if s.groupInUse(id) {
		return 0, nil, nerr(http.StatusConflict, "SecurityGroupInUse", "Security Group %s in use.", id)
	}
	g, err := s.groupFor(id)
	if err != nil {
		return 0, nil, err
	}
	if g.isDefault {
		return 0, nil, nerr(http.StatusConflict, "SecurityGroupCannotRemoveDefault", "Insufficient rights for removing default security group.")
	}
	for rid, rl := range s.net.rules {
		if rl.groupID == g.id || (rl.remoteGroup != nil && *rl.remoteGroup == g.id) {
			delete(s.net.rules, rid)
		}
	}
	delete(s.net.groups, g.id)
	return http.StatusNoContent, nil, nil
}

// ipProtocols is neutron_lib.constants.IP_PROTOCOL_MAP, in its order.
var ipProtocols = []struct {
	name string
	num  int
}{
	{"ah", 51}, {"dccp", 33}, {"egp", 8}, {"esp", 50}, {"gre", 47}, {"hopopt", 0}, {"icmp", 1}, {"igmp", 2},
	{"ip", 0}, {"ipip", 4}, {"ipv6-encap", 41}, {"ipv6-frag", 44}, {"ipv6-icmp", 58}, {"icmpv6", 58},
	{"ipv6-nonxt", 59}, {"ipv6-opts", 60}, {"ipv6-route", 43}, {"ospf", 89}, {"pgm", 113}, {"rsvp", 46},
	{"sctp", 132}, {"tcp", 6}, {"udp", 17}, {"udplite", 136}, {"vrrp", 112},
}

// protocolNumber is the number of a protocol name, or the number given.
func protocolNumber(p string) int {
	for _, ip := range ipProtocols {
		if ip.name == p {
			return ip.num
		}
	}
	n, _ := strconv.Atoi(p)
	return n
}

// protocolKey is the (name, number) pair duplicates are compared on
// (_get_ip_proto_name_and_num), "tcp" and "6" being the same rule.
func protocolKey(p *string, ethertype string) string {
	if p == nil {
		return "+"
	}
	v := *p
	if ethertype == "IPv6" {
		if v == "icmp" || v == "icmpv6" {
			v = "ipv6-icmp"
		} else if v == "1" {
			v = "58"
		}
	}
	for _, ip := range ipProtocols {
		if ip.name == v {
			return ip.name + "/" + strconv.Itoa(ip.num)
		}
	}
	for _, ip := range ipProtocols {
		if strconv.Itoa(ip.num) == v && ip.name != "icmpv6" {
			return ip.name + "/" + v
		}
	}
	return v + "/" + v
}

// invalidProtocol is SecurityGroupRuleInvalidProtocol, its values being
// the Python tuple of supported names.
func invalidProtocol(p string) error {
	names := []string{"None", "'any'"}
	for _, ip := range ipProtocols {
		names = append(names, "'"+ip.name+"'")
	}
	return nerr(http.StatusBadRequest, "SecurityGroupRuleInvalidProtocol",
		"Security group rule protocol %s not supported. Only protocol values (%s) and integer representations [0 to 255] are supported.",
		p, strings.Join(names, ", "))
}

// convertProtocol is securitygroup.convert_protocol: nil or "any" is no
// protocol, numbers 0-255 stay numbers (as strings), names are lowered.
func convertProtocol(raw json.RawMessage) (*string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, invalidProtocol(string(raw))
		}
		v = n.String()
	}
	if v == "any" {
		return nil, nil
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 || n > 255 {
			return nil, invalidProtocol(v)
		}
		return &v, nil
	}
	low := strings.ToLower(v)
	for _, ip := range ipProtocols {
		if ip.name == low {
			return &low, nil
		}
	}
	return nil, invalidProtocol(v)
}

// convertPort is convert_validate_port_value: an integer 0-65535.
func convertPort(a attrs, k string) (*int, error) {
	raw, ok := a[k]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	text := strings.Trim(string(raw), `"`)
	n, err := strconv.Atoi(text)
	if err != nil || n < 0 || n > 65535 {
		return nil, nerr(http.StatusBadRequest, "SecurityGroupInvalidPortValue", "Invalid value for port %s", text)
	}
	return &n, nil
}

func (s *Server) ruleFor(id string) (*secRule, error) {
	rl := s.net.rules[id]
	if rl == nil || !s.visible(rl.project) {
		return nil, nerr(http.StatusNotFound, "SecurityGroupRuleNotFound", "Security group rule %s does not exist", id)
	}
	return rl, nil
}

func (s *Server) listSecRules(r *http.Request) (int, any, error) {
	q, err := parseList(r, "id", "security_group_id", "direction", "ethertype", "protocol", "port_range_min",
		"port_range_max", "remote_ip_prefix", "remote_group_id", "project_id", "tenant_id", "description",
		"revision_number", "belongs_to_default_sg")
	if err != nil {
		return 0, nil, err
	}
	var items []map[string]any
	for _, rl := range bySeq(s.net.rules, func(rl *secRule) int { return rl.seq }) {
		if s.visible(rl.project) {
			items = append(items, rl.json())
		}
	}
	return http.StatusOK, s.page(r, "security_group_rules", q, items), nil
}

func (s *Server) showSecRule(r *http.Request) (int, any, error) {
	rl, err := s.ruleFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"security_group_rule": rl.json()}, nil
}

func (s *Server) deleteSecRule(r *http.Request) (int, any, error) {
	rl, err := s.ruleFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	delete(s.net.rules, rl.id)
	return http.StatusNoContent, nil, nil
}

func (s *Server) createSecRule(r *http.Request) (int, any, error) {
	a, err := readBody(r, "security_group_rule", "security_group_id", "direction", "ethertype", "protocol",
		"port_range_min", "port_range_max", "remote_ip_prefix", "remote_group_id", "remote_address_group_id",
		"description", "tenant_id", "project_id")
	if err != nil {
		return 0, nil, err
	}
	for _, k := range []string{"security_group_id", "direction"} {
		if !a.has(k) {
			return 0, nil, httpBadRequest("Failed to parse request. Required attribute '%s' not specified", k)
		}
	}
	rl := &secRule{std: s.newStd(s.opts.ProjectID), ethertype: "IPv4"}
	if _, err := a.get("security_group_id", &rl.groupID); err != nil {
		return 0, nil, err
	}
	if _, err := a.get("direction", &rl.direction); err != nil {
		return 0, nil, err
	}
	if rl.direction != "ingress" && rl.direction != "egress" {
		return 0, nil, httpBadRequest("Invalid input for direction. Reason: '%s' is not in ['ingress', 'egress'].", rl.direction)
	}
	var ethertype string
	if ok, err := a.get("ethertype", &ethertype); err != nil {
		return 0, nil, err
	} else if ok {
		switch strings.ToLower(ethertype) {
		case "ipv4":
			rl.ethertype = "IPv4"
		case "ipv6":
			rl.ethertype = "IPv6"
		default:
			return 0, nil, nerr(http.StatusBadRequest, "SecurityGroupRuleInvalidEtherType",
				"Security group rule for ethertype '%s' not supported. Allowed values are ['IPv4', 'IPv6'].", ethertype)
		}
	}
	if rl.protocol, err = convertProtocol(a["protocol"]); err != nil {
		return 0, nil, err
	}
	if rl.portMin, err = convertPort(a, "port_range_min"); err != nil {
		return 0, nil, err
	}
	if rl.portMax, err = convertPort(a, "port_range_max"); err != nil {
		return 0, nil, err
	}
	var prefix, remoteGroup, remoteAddrGroup string
	if ok, err := a.get("remote_ip_prefix", &prefix); err != nil {
		return 0, nil, err
	} else if ok && prefix != "" {
		p, perr := netip.ParsePrefix(prefix)
		if perr != nil {
			addr, aerr := netip.ParseAddr(prefix)
			if aerr != nil {
				return 0, nil, nerr(http.StatusBadRequest, "InvalidCIDR", "Invalid CIDR %s given as IP prefix.", prefix)
			}
			p = netip.PrefixFrom(addr, addr.BitLen())
		}
		text := p.String()
		rl.remotePrefix = &text
	}
	if ok, err := a.get("remote_group_id", &remoteGroup); err != nil {
		return 0, nil, err
	} else if ok && remoteGroup != "" {
		rl.remoteGroup = &remoteGroup
	}
	if _, err := a.get("remote_address_group_id", &remoteAddrGroup); err != nil {
		return 0, nil, err
	}
	if _, err := a.get("description", &rl.description); err != nil {
		return 0, nil, err
	}
	if err := validateRule(rl, prefix, remoteAddrGroup != ""); err != nil {
		return 0, nil, err
	}
	if rl.remoteGroup != nil {
		if _, err := s.groupFor(*rl.remoteGroup); err != nil {
			return 0, nil, err
		}
	}
	if remoteAddrGroup != "" {
		return 0, nil, nerr(http.StatusNotFound, "AddressGroupNotFound", "Address group %s could not be found.", remoteAddrGroup)
	}
	g, err := s.groupFor(rl.groupID)
	if err != nil {
		return 0, nil, err
	}
	key := ruleKey(rl)
	for _, o := range bySeq(s.net.rules, func(o *secRule) int { return o.seq }) {
		if o.groupID == g.id && ruleKey(o) == key {
			return 0, nil, nerr(http.StatusConflict, "SecurityGroupRuleExists", "Security group rule already exists. Rule id is %s.", o.id)
		}
	}
	rl.project = g.project
	rl.inDefault = g.isDefault
	s.net.rules[rl.id] = rl
	return http.StatusCreated, map[string]any{"security_group_rule": rl.json()}, nil
}

// validateRule is _validate_base_security_group_rule_attributes: the
// canonical IPv6 ICMP name, the full port range turned into none, the
// port range, the prefix's ethertype, IPv6-only protocols and one remote.
func validateRule(rl *secRule, prefixInput string, remoteAddrGroup bool) error {
	if rl.ethertype == "IPv6" && rl.protocol != nil {
		switch *rl.protocol {
		case "icmp", "icmpv6":
			v := "ipv6-icmp"
			rl.protocol = &v
		case "1":
			v := "58"
			rl.protocol = &v
		}
	}
	if rl.portMin != nil && rl.portMax != nil && *rl.portMin == 1 && *rl.portMax == 65535 {
		rl.portMin, rl.portMax = nil, nil
	}
	if rl.portMin != nil || rl.portMax != nil {
		if rl.protocol == nil {
			return nerr(http.StatusBadRequest, "SecurityGroupProtocolRequiredWithPorts", "Must also specify protocol if port range is given.")
		}
		num := protocolNumber(*rl.protocol)
		switch num {
		case 33, 132, 6, 17, 136:
			if (rl.portMin != nil && *rl.portMin == 0) || (rl.portMax != nil && *rl.portMax == 0) {
				return nerr(http.StatusBadRequest, "SecurityGroupInvalidPortValue", "Invalid value for port 0")
			}
			if rl.portMin == nil || rl.portMax == nil || *rl.portMin > *rl.portMax {
				return nerr(http.StatusBadRequest, "SecurityGroupInvalidPortRange", "For TCP/UDP protocols, port_range_min must be <= port_range_max")
			}
		case 1, 58:
			for _, f := range []struct {
				attr, field string
				v           *int
			}{{"port_range_min", "type", rl.portMin}, {"port_range_max", "code", rl.portMax}} {
				if f.v != nil && *f.v > 255 {
					return nerr(http.StatusBadRequest, "SecurityGroupInvalidIcmpValue",
						"Invalid value for ICMP %s (%s) %d. It must be 0 to 255.", f.field, f.attr, *f.v)
				}
			}
			if rl.portMin == nil && rl.portMax != nil {
				return nerr(http.StatusBadRequest, "SecurityGroupMissingIcmpType",
					"ICMP code (port-range-max) %d is provided but ICMP type (port-range-min) is missing.", *rl.portMax)
			}
		default:
			return nerr(http.StatusBadRequest, "SecurityGroupInvalidProtocolForPort",
				"Ports cannot be specified for protocol %d. Ports are only supported for DCCP, SCTP, TCP, UDP, UDPLITE.", num)
		}
	}
	if rl.remotePrefix != nil {
		p := netip.MustParsePrefix(*rl.remotePrefix)
		if (p.Addr().Is4() && rl.ethertype != "IPv4") || (p.Addr().Is6() && rl.ethertype != "IPv6") {
			return nerr(http.StatusBadRequest, "SecurityGroupRuleParameterConflict",
				"Conflicting value ethertype %s for CIDR %s", rl.ethertype, prefixInput)
		}
	}
	if rl.ethertype == "IPv4" && rl.protocol != nil {
		switch *rl.protocol {
		case "ipv6-encap", "ipv6-frag", "ipv6-icmp", "icmpv6", "ipv6-nonxt", "ipv6-opts", "ipv6-route",
			"41", "44", "58", "59", "60", "43":
			return nerr(http.StatusBadRequest, "SecurityGroupEthertypeConflictWithProtocol",
				"Invalid ethertype %s for protocol %s.", rl.ethertype, *rl.protocol)
		}
	}
	remotes := 0
	for _, set := range []bool{rl.remotePrefix != nil, rl.remoteGroup != nil, remoteAddrGroup} {
		if set {
			remotes++
		}
	}
	if remotes > 1 {
		return nerr(http.StatusBadRequest, "SecurityGroupMultipleRemoteEntites",
			"Only one of remote_ip_prefix or remote_group_id or remote_address_group_id may be provided.")
	}
	return nil
}

// ruleKey is _rule_to_key: what two rules must share to be duplicates.
// The prefix is compared as written, the any-address prefixes as none.
func ruleKey(rl *secRule) string {
	opt := func(p *string) string {
		if p == nil {
			return "+"
		}
		return *p
	}
	optInt := func(p *int) string {
		if p == nil {
			return "+"
		}
		return strconv.Itoa(*p)
	}
	prefix := opt(rl.remotePrefix)
	if prefix == "0.0.0.0/0" || prefix == "::/0" {
		prefix = "+"
	}
	return strings.Join([]string{rl.direction, rl.ethertype, optInt(rl.portMax), optInt(rl.portMin),
		protocolKey(rl.protocol, rl.ethertype), opt(rl.remoteGroup), "+", prefix, rl.groupID}, "_")
}
