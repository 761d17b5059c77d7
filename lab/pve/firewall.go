package pve

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// FirewallRule is a per-VM firewall rule.
type FirewallRule struct {
	// Pos is the rule's position, 0 being the first rule.
	Pos int
	// Type is in, out, forward or group; Action is ACCEPT, DROP, REJECT
	// (or a security group for type group).
	Type, Action string
	// Macro, Proto, Dport, Sport, Source, Dest, Iface, Log, IcmpType and
	// Comment are the optional rule fields, empty when unset.
	Macro, Proto, Dport, Sport, Source, Dest, Iface, Log, IcmpType, Comment string
	// Enable reports whether the rule is active.
	Enable bool
}

type fwRule struct {
	fields map[string]string
	enable bool
}

var ruleFields = []string{"type", "action", "macro", "proto", "dport", "sport", "source", "dest", "iface", "log", "icmp-type", "comment"}

var (
	vmFirewallOptions = map[string]string{
		"enable": "bool", "dhcp": "bool", "ipfilter": "bool", "macfilter": "bool", "ndp": "bool", "radv": "bool",
		"policy_in": "policy", "policy_out": "policy", "log_level_in": "log", "log_level_out": "log",
	}
	clusterFirewallOptions = map[string]string{
		"enable": "bool", "ebtables": "bool", "policy_in": "policy", "policy_out": "policy",
		"policy_forward": "policy", "log_ratelimit": "string",
	}
	logLevels       = []string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug", "nolog"}
	portProtocols   = []string{"tcp", "udp", "udplite", "sctp", "dccp"}
	ruleActions     = []string{"ACCEPT", "DROP", "REJECT"}
	portNameRE      = regexp.MustCompile(`^[a-z][a-z0-9\-]*$`)
	protoNameRE     = regexp.MustCompile(`^[a-z][a-z0-9\-]*$`)
	macroRE         = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
	addressNameRE   = regexp.MustCompile(`^(?:(?:dc|guest)/)?[A-Za-z][A-Za-z0-9\-_]+$`)
	ifaceRE         = regexp.MustCompile(`^net\d+$`)
	firewallControl = map[string]bool{"digest": true, "delete": true, "pos": true, "moveto": true, "node": true, "vmid": true}
)

func (s *Server) firewallRoutes() {
	base := "/nodes/{node}/qemu/{vmid}/firewall"
	s.route("GET", base, "firewall.index", s.firewallIndex)
	s.route("GET", base+"/options", "firewall.options.get", s.getFirewallOptions)
	s.route("PUT", base+"/options", "firewall.options.set", s.setFirewallOptions)
	s.route("GET", base+"/rules", "firewall.rules.list", s.listRules)
	s.route("POST", base+"/rules", "firewall.rules.create", s.createRule)
	s.route("GET", base+"/rules/{pos}", "firewall.rules.get", s.getRule)
	s.route("PUT", base+"/rules/{pos}", "firewall.rules.update", s.updateRule)
	s.route("DELETE", base+"/rules/{pos}", "firewall.rules.delete", s.deleteRule)
	s.route("GET", "/cluster/firewall/options", "cluster.firewall.options.get", s.getClusterFirewallOptions)
	s.route("PUT", "/cluster/firewall/options", "cluster.firewall.options.set", s.setClusterFirewallOptions)
}

// firewallDigest is the digest of a VM's firewall file.
func (g *vm) firewallDigest() string {
	var b strings.Builder
	b.WriteString("[OPTIONS]\n")
	for _, k := range sortedKeys(g.fwOptions) {
		fmt.Fprintf(&b, "%s: %s\n", k, g.fwOptions[k])
	}
	b.WriteString("[RULES]\n")
	for _, r := range g.fwRules {
		fmt.Fprintf(&b, "%v %v\n", r.enable, prop{kv: r.fields}.String())
	}
	return digestOf(b.String())
}

func (s *Server) firewallIndex(r *http.Request) (any, error) {
	return s.vmIndex(r, "name", "aliases", "ipset", "log", "options", "refs", "rules")
}

func optionsJSON(opts map[string]string, schema map[string]string, digest string) map[string]any {
	out := map[string]any{"digest": digest}
	for k, v := range opts {
		if schema[k] == "bool" {
			n, _ := strconv.Atoi(v)
			out[k] = n
			continue
		}
		out[k] = v
	}
	return out
}

// applyOptions validates and applies a firewall options update.
func applyOptions(opts map[string]string, schema map[string]string, q url.Values) error {
	errs := map[string]string{}
	set := map[string]string{}
	for k, vs := range q {
		if k == "digest" || k == "delete" {
			continue
		}
		v := vs[len(vs)-1]
		typ, ok := schema[k]
		if !ok {
			errs[k] = "property is not defined in schema and the schema does not allow additional properties"
			continue
		}
		switch typ {
		case "bool":
			b, ok := normalizeBool(v)
			if !ok {
				errs[k] = fmt.Sprintf("type check ('boolean') failed - got '%s'", v)
				continue
			}
			v = b
		case "policy":
			if !slices.Contains(ruleActions, v) {
				errs[k] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'ACCEPT, REJECT, DROP'", v)
				continue
			}
		case "log":
			if !slices.Contains(logLevels, v) {
				errs[k] = fmt.Sprintf("value '%s' does not have a value in the enumeration '%s'", v, strings.Join(logLevels, ", "))
				continue
			}
		}
		set[k] = v
	}
	var dels []string
	for _, k := range splitList(q.Get("delete")) {
		if _, ok := schema[k]; !ok {
			errs["delete"] = fmt.Sprintf("invalid format - unknown option '%s'", k)
			continue
		}
		dels = append(dels, k)
	}
	if len(errs) > 0 {
		return paramError(errs)
	}
	for _, k := range dels {
		delete(opts, k)
	}
	for k, v := range set {
		opts[k] = v
	}
	return nil
}

func (s *Server) getFirewallOptions(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	return optionsJSON(g.fwOptions, vmFirewallOptions, g.firewallDigest()), nil
}

func (s *Server) setFirewallOptions(r *http.Request) (any, error) {
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
	if d := q.Get("digest"); d != "" && d != g.firewallDigest() {
		return nil, errorf("detected modified configuration - file changed by other user? Try again.")
	}
	return nil, applyOptions(g.fwOptions, vmFirewallOptions, q)
}

func (s *Server) clusterFirewallDigest() string {
	var b strings.Builder
	for _, k := range sortedKeys(s.clusterFW) {
		fmt.Fprintf(&b, "%s: %s\n", k, s.clusterFW[k])
	}
	return digestOf(b.String())
}

func (s *Server) getClusterFirewallOptions(*http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	return optionsJSON(s.clusterFW, clusterFirewallOptions, s.clusterFirewallDigest()), nil
}

func (s *Server) setClusterFirewallOptions(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	if d := q.Get("digest"); d != "" && d != s.clusterFirewallDigest() {
		return nil, errorf("detected modified configuration - file changed by other user? Try again.")
	}
	return nil, applyOptions(s.clusterFW, clusterFirewallOptions, q)
}

func (rule fwRule) json(pos int, digest string) map[string]any {
	m := map[string]any{"pos": pos, "enable": boolInt(rule.enable), "digest": digest}
	for k, v := range rule.fields {
		m[k] = v
	}
	for _, k := range []string{"source", "dest"} {
		if v := rule.fields[k]; v != "" {
			first, _, _ := strings.Cut(v, ",")
			first, _, _ = strings.Cut(first, "-")
			if p, err := parseAddress(first); err == nil {
				m["ipversion"] = map[bool]int{true: 4, false: 6}[p.Addr().Is4()]
			}
		}
	}
	return m
}

func parseAddress(v string) (netip.Prefix, error) {
	if strings.Contains(v, "/") {
		return netip.ParsePrefix(v)
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func validPorts(v string) bool {
	for _, part := range strings.Split(v, ",") {
		for _, p := range strings.SplitN(part, ":", 2) {
			if n, err := strconv.Atoi(p); err == nil {
				if n < 0 || n > 65535 {
					return false
				}
				continue
			}
			if !portNameRE.MatchString(p) {
				return false
			}
		}
	}
	return v != ""
}

func validAddresses(v string) bool {
	for _, part := range strings.Split(v, ",") {
		switch {
		case strings.HasPrefix(part, "+"):
			if !addressNameRE.MatchString(part[1:]) {
				return false
			}
		case addressNameRE.MatchString(part):
		default:
			lo, hi, isRange := strings.Cut(part, "-")
			if _, err := parseAddress(lo); err != nil {
				return false
			}
			if isRange {
				if _, err := netip.ParseAddr(hi); err != nil {
					return false
				}
			}
		}
	}
	return v != ""
}

// ruleParams validates the rule fields of a create or update request and
// returns the fields to set (empty values mean "remove").
func ruleParams(q url.Values) (map[string]string, *bool, map[string]string) {
	set := map[string]string{}
	errs := map[string]string{}
	var enable *bool
	for k, vs := range q {
		if firewallControl[k] {
			continue
		}
		v := vs[len(vs)-1]
		if k == "enable" {
			b, ok := normalizeBool(v)
			if !ok {
				errs[k] = fmt.Sprintf("type check ('boolean') failed - got '%s'", v)
				continue
			}
			on := b == "1"
			enable = &on
			continue
		}
		if !slices.Contains(ruleFields, k) {
			errs[k] = "property is not defined in schema and the schema does not allow additional properties"
			continue
		}
		if v == "" || v == "-" {
			set[k] = ""
			continue
		}
		var bad bool
		switch k {
		case "type":
			bad = !slices.Contains([]string{"in", "out", "forward", "group"}, v)
		case "proto":
			if n, err := strconv.Atoi(v); err == nil {
				bad = n < 0 || n > 255
			} else {
				bad = !protoNameRE.MatchString(v)
			}
		case "dport", "sport":
			bad = !validPorts(v)
		case "source", "dest":
			bad = !validAddresses(v)
		case "log":
			bad = !slices.Contains(logLevels, v)
		case "iface":
			bad = !ifaceRE.MatchString(v)
		case "macro":
			bad = !macroRE.MatchString(v)
		}
		if bad {
			errs[k] = fmt.Sprintf("invalid format - value '%s' is not valid for %s", v, k)
			continue
		}
		set[k] = v
	}
	return set, enable, errs
}

// verifyRule checks a complete rule the way the Proxmox VE firewall does.
func verifyRule(fields map[string]string) map[string]string {
	errs := map[string]string{}
	switch fields["type"] {
	case "":
		errs["type"] = "property is missing and it is not optional"
	case "group":
		if fields["action"] != "" {
			errs["action"] = fmt.Sprintf("no such security group '%s'", fields["action"])
		}
	default:
		if fields["action"] == "" {
			errs["action"] = "property is missing and it is not optional"
		} else if !slices.Contains(ruleActions, fields["action"]) {
			errs["action"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'ACCEPT, DROP, REJECT'", fields["action"])
		}
	}
	proto := fields["proto"]
	for _, k := range []string{"dport", "sport"} {
		if fields[k] == "" {
			continue
		}
		if proto == "" {
			errs["proto"] = fmt.Sprintf("missing property - '%s' requires this property", k)
		} else if !slices.Contains(portProtocols, proto) {
			errs[k] = fmt.Sprintf("protocol '%s' does not support ports", proto)
		}
	}
	if fields["icmp-type"] != "" && proto != "icmp" && proto != "icmpv6" && proto != "ipv6-icmp" {
		errs["icmp-type"] = "proto must be icmp or icmpv6 to use icmp-type"
	}
	if fields["macro"] != "" && (fields["dport"] != "" || fields["sport"] != "") && proto == "" {
		delete(errs, "proto")
	}
	return errs
}

func rulePos(r *http.Request, n int) (int, error) {
	raw := r.PathValue("pos")
	pos, err := strconv.Atoi(raw)
	if err != nil || pos < 0 {
		return 0, paramErr("pos", fmt.Sprintf("type check ('integer') failed - got '%s'", raw))
	}
	if pos >= n {
		return 0, errorf("no rule at position %d", pos)
	}
	return pos, nil
}

func (s *Server) listRules(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	digest := g.firewallDigest()
	out := []map[string]any{}
	for i, rule := range g.fwRules {
		out = append(out, rule.json(i, digest))
	}
	return out, nil
}

func (s *Server) getRule(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	pos, err := rulePos(r, len(g.fwRules))
	if err != nil {
		return nil, err
	}
	return g.fwRules[pos].json(pos, g.firewallDigest()), nil
}

func (s *Server) createRule(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	set, enable, errs := ruleParams(q)
	if len(errs) > 0 {
		return nil, paramError(errs)
	}
	fields := map[string]string{}
	for k, v := range set {
		if v != "" {
			fields[k] = v
		}
	}
	if errs := verifyRule(fields); len(errs) > 0 {
		return nil, paramError(errs)
	}
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	if d := q.Get("digest"); d != "" && d != g.firewallDigest() {
		return nil, errorf("detected modified configuration - file changed by other user? Try again.")
	}
	// Like Proxmox VE, a new rule goes first (the pos parameter is not
	// used), and a rule created without "enable" is disabled.
	rule := fwRule{fields: fields, enable: enable != nil && *enable}
	g.fwRules = slices.Insert(g.fwRules, 0, rule)
	return nil, nil
}

func (s *Server) updateRule(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	set, enable, errs := ruleParams(q)
	moveto := -1
	if v := q.Get("moveto"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs["moveto"] = fmt.Sprintf("type check ('integer') failed - got '%s'", v)
		}
		moveto = n
	}
	dels := splitList(q.Get("delete"))
	for _, k := range dels {
		if !slices.Contains(ruleFields, k) || k == "type" || k == "action" {
			errs["delete"] = fmt.Sprintf("invalid format - cannot delete '%s'", k)
		}
	}
	if len(errs) > 0 {
		return nil, paramError(errs)
	}
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return nil, err
	}
	pos, err := rulePos(r, len(g.fwRules))
	if err != nil {
		return nil, err
	}
	if d := q.Get("digest"); d != "" && d != g.firewallDigest() {
		return nil, errorf("detected modified configuration - file changed by other user? Try again.")
	}
	if moveto >= 0 {
		// The rule goes before the rule that was at moveto, or last.
		n := len(g.fwRules)
		rule := g.fwRules[pos]
		g.fwRules = slices.Delete(g.fwRules, pos, pos+1)
		target := moveto
		switch {
		case moveto >= n:
			target = len(g.fwRules)
		case moveto > pos:
			target = moveto - 1
		}
		g.fwRules = slices.Insert(g.fwRules, target, rule)
		return nil, nil
	}
	fields := map[string]string{}
	for k, v := range g.fwRules[pos].fields {
		fields[k] = v
	}
	for _, k := range dels {
		delete(fields, k)
	}
	for k, v := range set {
		if v == "" {
			delete(fields, k)
			continue
		}
		fields[k] = v
	}
	if errs := verifyRule(fields); len(errs) > 0 {
		return nil, paramError(errs)
	}
	rule := fwRule{fields: fields, enable: g.fwRules[pos].enable}
	if enable != nil {
		rule.enable = *enable
	}
	g.fwRules[pos] = rule
	return nil, nil
}

func (s *Server) deleteRule(r *http.Request) (any, error) {
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
	pos, err := rulePos(r, len(g.fwRules))
	if err != nil {
		return nil, err
	}
	if d := q.Get("digest"); d != "" && d != g.firewallDigest() {
		return nil, errorf("detected modified configuration - file changed by other user? Try again.")
	}
	g.fwRules = slices.Delete(g.fwRules, pos, pos+1)
	return nil, nil
}

func (rule fwRule) export(pos int) FirewallRule {
	f := rule.fields
	return FirewallRule{
		Pos: pos, Type: f["type"], Action: f["action"], Macro: f["macro"], Proto: f["proto"],
		Dport: f["dport"], Sport: f["sport"], Source: f["source"], Dest: f["dest"],
		Iface: f["iface"], Log: f["log"], IcmpType: f["icmp-type"], Comment: f["comment"],
		Enable: rule.enable,
	}
}
