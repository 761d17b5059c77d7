package spec

import (
	"regexp"
	"slices"
	"strings"
)

// DefaultPorts are the ports of the security rules that need no 'port'.
var DefaultPorts = map[string]int{"kubernetes": 6443, "talos": 50000, "http": 80, "https": 443}

// PublicPorts are open to everyone until a security rule claims them.
var PublicPorts = []int{80, 443}

var ruleNameRE = regexp.MustCompile(`[^a-z0-9-]+`)

// NormalizeRuleName turns a security rule name into the suffix of its Talos
// firewall rule (security-<name>): lowercase, runs of other characters
// become '-', and leading or trailing '-' are trimmed.
func NormalizeRuleName(name string) string {
	return strings.Trim(ruleNameRE.ReplaceAllString(strings.ToLower(name), "-"), "-")
}

// OpenPorts returns the public ports no security rule claims.
func (c *Cluster) OpenPorts() []int {
	var out []int
	for _, p := range PublicPorts {
		claimed := false
		for _, r := range c.Security {
			claimed = claimed || r.Port == p
		}
		if !claimed {
			out = append(out, p)
		}
	}
	return out
}

// security reads the security section (rules 20 and 21).
func (v *validator) security(t *node) []SecurityRule {
	sec := t.get("security")
	if sec.isNull() {
		return nil
	}
	if sec.kind != kindMap {
		v.errorf(sec, "security", "security must be a mapping of rule name to rule")
		return nil
	}
	var out []SecurityRule
	normalized := map[string]string{}
	for _, name := range sec.keys {
		entry := sec.vals[name]
		path := "security." + name
		if sec.keyKinds[name] != kindString || strings.TrimSpace(name) == "" {
			v.errorf(entry, path, "security rule names must be non-empty strings")
			continue
		}
		if entry.isNull() {
			// A rule left null is an empty one: it still claims its port, and
			// a name without a default port still needs one.
			entry = &node{kind: kindMap, vals: map[string]*node{}, keyKinds: map[string]kind{}, file: entry.file, line: entry.line}
		}
		if entry.kind != kindMap {
			v.errorf(entry, path, "%s must be a mapping of label to CIDR, or {hosts: ..., port: N}", path)
			continue
		}
		rule, ok := v.securityRule(entry, name, path)
		if !ok {
			continue
		}
		norm := NormalizeRuleName(name)
		if norm == "" {
			v.errorf(entry, path, "%s has no letters or digits to name its Talos firewall rule; rename it", path)
			continue
		}
		if other, dup := normalized[norm]; dup {
			v.errorf(entry, path, "security.%s and security.%s both become the Talos firewall rule security-%s; rename one", other, name, norm)
			continue
		}
		normalized[norm] = name
		out = append(out, rule)
	}
	return out
}

func (v *validator) securityRule(entry *node, name, path string) (SecurityRule, bool) {
	rule := SecurityRule{Name: name}
	hostsNode := entry.get("hosts")
	long := (hostsNode != nil && hostsNode.kind == kindMap) || entry.get("port") != nil
	ok := true
	hosts := entry
	if long {
		var unknown []string
		for _, k := range entry.keys {
			if !slices.Contains(securityRuleKeys, k) {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			v.errorf(entry.vals[unknown[0]], path, "%s has unknown keys: %s", path, strings.Join(unknown, ", "))
			ok = false
		}
		hosts = hostsNode
		if !hosts.isNull() && hosts.kind != kindMap {
			v.errorf(hosts, path+".hosts", "%s.hosts must be a mapping of label to CIDR", path)
			ok = false
			hosts = nil
		}
	}
	def, hasDefault := DefaultPorts[name]
	if pn := entry.get("port"); long && pn != nil && pn.kind == kindNull {
		// A port key left null overrides the default with nothing.
		v.errorf(pn, path+".port", "%s requires an explicit 'port'; the port key is empty", path)
		ok = false
	} else if long && pn != nil {
		port, okPort := v.intValue(pn, path+".port", true)
		switch {
		case !okPort:
			ok = false
		case port < 1 || port > 65535:
			v.errorf(pn, path+".port", "%s.port must be 1-65535", path)
			ok = false
		case (name == "http" || name == "https") && int(port) != def:
			v.errorf(pn, path+".port", "%s cannot change its port from %d to %d; use a differently named rule for port %d", path, def, port, port)
			ok = false
		default:
			rule.Port = int(port)
		}
	} else if hasDefault {
		rule.Port = def
	} else {
		v.errorf(entry, path, "%s requires an explicit 'port' (only kubernetes, talos, http and https have a default)", path)
		ok = false
	}
	if !hosts.isNull() {
		for _, label := range hosts.keys {
			h := hosts.vals[label]
			hp := path + "." + label
			text := scalarText(h)
			if label == "" {
				v.errorf(h, hp, "%s host labels must be non-empty", path)
				ok = false
				continue
			}
			cidr, good := parseNetwork4(text, true)
			if h.kind != kindString || !good {
				v.errorf(h, hp, "%s has invalid CIDR '%s' (an IPv4 network address like 192.0.2.0/24, or a single address)", hp, text)
				ok = false
				continue
			}
			rule.Hosts = append(rule.Hosts, SecurityHost{Label: label, CIDR: cidr})
		}
	}
	return rule, ok
}
