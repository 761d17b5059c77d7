package spec

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// validator turns the merged tree into a Cluster, reporting every problem.
type validator struct {
	*loader
	// root is the merged tree, for locating problems about absent keys.
	root *node
}

// errorf reports an error at n (or, when n is nil, at the cluster file).
func (v *validator) errorf(n *node, key, format string, args ...any) {
	file, line := ClusterFile, 0
	if n != nil {
		file, line = n.file, n.line
	}
	v.errorAt(file, line, key, format, args...)
}

func (v *validator) warnf(n *node, key, format string, args ...any) {
	file, line := ClusterFile, 0
	if n != nil {
		file, line = n.file, n.line
	}
	v.warnAt(file, line, key, format, args...)
}

// where picks the node to blame for a key: the value when present, else its
// parent mapping.
func where(parent *node, key string) *node {
	if v := parent.get(key); v != nil {
		return v
	}
	return parent
}

// mapping checks that n is a mapping (null counts as absent) and that it
// has only allowed keys. It returns false when n is absent or unusable.
func (v *validator) mapping(n *node, path string, allowed ...string) bool {
	if n.isNull() {
		return false
	}
	if n.kind != kindMap {
		v.errorf(n, path, "%s must be a mapping, not a %s", path, n.describe())
		return false
	}
	if allowed != nil {
		v.unknownKeys(n, path, allowed)
	}
	return true
}

func (v *validator) unknownKeys(n *node, path string, allowed []string) {
	var unknown []string
	for _, k := range n.keys {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return
	}
	slices.Sort(unknown)
	v.errorf(n.vals[unknown[0]], path, "%s: unknown key(s): %s", path, strings.Join(unknown, ", "))
}

// record remembers where the value of key was written (Cluster.Source).
func (v *validator) record(key string, n *node) {
	if n == nil {
		return
	}
	if v.sources == nil {
		v.sources = map[string]Source{}
	}
	v.sources[key] = Source{File: n.file, Line: n.line}
}

// str reads an optional non-empty string. Absent or null gives ("", false).
func (v *validator) str(parent *node, key, path string) (string, bool) {
	n := parent.get(key)
	if n.isNull() {
		return "", false
	}
	if n.kind != kindString {
		// Numbers and the like are stringified, as the Python tool does
		// for names it formats; booleans are refused.
		if n.kind == kindInt || n.kind == kindFloat {
			return n.str, true
		}
		v.errorf(n, path, "%s must be a string, not a %s", path, n.describe())
		return "", false
	}
	if strings.TrimSpace(n.str) == "" {
		v.errorf(n, path, "%s must be a non-empty string", path)
		return "", false
	}
	return n.str, true
}

// requiredStr reads a required non-empty string.
func (v *validator) requiredStr(parent *node, key, path string) (string, bool) {
	n := parent.get(key)
	if n.isNull() {
		if n != nil && n.kind == kindNull {
			v.errorf(where(parent, key), path, "%s must be a non-empty string", path)
		} else {
			v.errorf(where(parent, key), path, "missing required key %s", path)
		}
		return "", false
	}
	return v.str(parent, key, path)
}

// strictStr reads an optional string that must really be a string, not blank
// (Python's isinstance(value, str) and value.strip()). Absent or null gives
// ("", false) without a problem.
func (v *validator) strictStr(parent *node, key, path string) (string, bool) {
	n := parent.get(key)
	if n.isNull() {
		return "", false
	}
	if n.kind != kindString {
		v.errorf(n, path, "%s must be a string, not a %s", path, n.describe())
		return "", false
	}
	if strings.TrimSpace(n.str) == "" {
		v.errorf(n, path, "%s must be a non-empty string", path)
		return "", false
	}
	return n.str, true
}

// requiredStrictStr is strictStr for a key that must be set.
func (v *validator) requiredStrictStr(parent *node, key, path string) (string, bool) {
	if parent.get(key).isNull() {
		return v.requiredStr(parent, key, path)
	}
	return v.strictStr(parent, key, path)
}

// pyFalsy reports whether a value is false in Python's sense: null, false,
// zero, an empty string, list or mapping.
func pyFalsy(n *node) bool {
	switch n.kind {
	case kindNull:
		return true
	case kindBool:
		return !n.bool
	case kindInt:
		return n.num == 0
	case kindFloat:
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.str, "_", ""), 64)
		return err == nil && f == 0
	case kindString:
		return n.str == ""
	case kindList:
		return len(n.items) == 0
	case kindMap:
		return len(n.keys) == 0
	}
	return false
}

// pyTruthy reports whether a value is true in Python's sense (see pyFalsy).
func pyTruthy(n *node) bool { return n != nil && !pyFalsy(n) }

// pyText renders a value the way Python's str() does for the scalars a
// cluster file holds, and YAML flow style for lists and mappings.
func pyText(n *node) string {
	switch n.kind {
	case kindNull:
		return "None"
	case kindBool:
		if n.bool {
			return "True"
		}
		return "False"
	case kindInt:
		return strconv.FormatInt(n.num, 10)
	case kindList:
		parts := make([]string, len(n.items))
		for i, it := range n.items {
			parts[i] = pyRepr(it)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case kindMap:
		parts := make([]string, len(n.keys))
		for i, k := range n.keys {
			parts[i] = "'" + k + "': " + pyRepr(n.vals[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return n.str
}

func pyRepr(n *node) string {
	if n.kind == kindString {
		return "'" + n.str + "'"
	}
	return pyText(n)
}

// integer reads an int or a numeric string. A boolean is refused.
func (v *validator) integer(parent *node, key, path string) (int64, bool) {
	n := parent.get(key)
	if n.isNull() {
		return 0, false
	}
	return v.intValue(n, path, true)
}

func (v *validator) intValue(n *node, path string, allowString bool) (int64, bool) {
	switch n.kind {
	case kindInt:
		return n.num, true
	case kindString:
		if allowString {
			if i, err := strconv.ParseInt(strings.TrimSpace(n.str), 10, 64); err == nil {
				return i, true
			}
		}
	}
	v.errorf(n, path, "%s must be an integer, not %s", path, kindPhrase(n))
	return 0, false
}

// kindPhrase describes a value for an error message without echoing it,
// except for short non-numeric strings that cannot be secrets in these keys.
func kindPhrase(n *node) string {
	switch n.kind {
	case kindString:
		return "a string"
	case kindBool:
		return "a boolean"
	case kindFloat:
		return "a fractional number"
	default:
		return "a " + n.describe()
	}
}

// boolean reads an optional bool.
func (v *validator) boolean(parent *node, key, path string) (bool, bool) {
	n := parent.get(key)
	if n.isNull() {
		return false, false
	}
	if n.kind != kindBool {
		v.errorf(n, path, "%s must be true or false", path)
		return false, false
	}
	return n.bool, true
}

// strList reads an optional list of non-empty strings.
func (v *validator) strList(parent *node, key, path string) []string {
	n := parent.get(key)
	if n.isNull() {
		return nil
	}
	if n.kind != kindList {
		v.errorf(n, path, "%s must be a list of non-empty strings", path)
		return nil
	}
	out := make([]string, 0, len(n.items))
	for i, it := range n.items {
		v.record(fmt.Sprintf("%s[%d]", path, i), it)
		if it.kind != kindString || strings.TrimSpace(it.str) == "" {
			v.errorf(it, fmt.Sprintf("%s[%d]", path, i), "%s must be a list of non-empty strings; entry %d is %s", path, i+1, emptyOr(it))
			continue
		}
		out = append(out, it.str)
	}
	return out
}

// stringMap reads a free-form label map (tags): keys and values are
// stringified and spaces in values become underscores.
func (v *validator) stringMap(parent *node, key, path string) map[string]string {
	n := parent.get(key)
	out := map[string]string{}
	if n.isNull() {
		return out
	}
	if n.kind != kindMap {
		v.errorf(n, path, "%s must be a mapping of labels to values", path)
		return out
	}
	for _, k := range n.keys {
		v.record(path+"."+k, n.vals[k])
		// Like the Python tool, any value is accepted and stringified.
		out[k] = strings.ReplaceAll(pyText(n.vals[k]), " ", "_")
	}
	return out
}

// parseIPv4 parses a bare IPv4 address.
func parseIPv4(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// parseCIDR4 parses an IPv4 network; a bare address reads as its /32.
// With strict, host bits must be zero.
func parseCIDR4(s string, strict bool) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, ok := parseIPv4(s)
		if !ok {
			return netip.Prefix{}, false
		}
		return netip.PrefixFrom(a, 32), true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, false
	}
	if strict && p.Masked() != p {
		return netip.Prefix{}, false
	}
	return p, true
}

// parseNetwork4 parses an IPv4 network the way Python's ipaddress.ip_network
// does: no surrounding space, a bare address is its /32, and the part after
// '/' is a prefix length or a netmask or hostmask in dotted form. With strict,
// host bits must be zero. The prefix keeps the address as written.
func parseNetwork4(s string, strict bool) (netip.Prefix, bool) {
	addrText, maskText, hasMask := strings.Cut(s, "/")
	a, err := netip.ParseAddr(addrText)
	if err != nil || !a.Is4() {
		return netip.Prefix{}, false
	}
	bits := 32
	if hasMask {
		var ok bool
		if bits, ok = netmaskBits(maskText); !ok {
			return netip.Prefix{}, false
		}
	}
	p := netip.PrefixFrom(a, bits)
	if strict && p.Masked().Addr() != a {
		return netip.Prefix{}, false
	}
	return p, true
}

// netmaskBits reads the part of a network after '/': decimal digits (leading
// zeros allowed) or a dotted netmask or hostmask.
func netmaskBits(s string) (int, bool) {
	if s != "" && strings.Trim(s, "0123456789") == "" {
		n, err := strconv.Atoi(s)
		if err != nil || n > 32 {
			return 0, false
		}
		return n, true
	}
	m, err := netip.ParseAddr(s)
	if err != nil || !m.Is4() {
		return 0, false
	}
	b := m.As4()
	u := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	for _, mask := range []uint32{u, ^u} { // a netmask, else a hostmask
		ones := 0
		for ones < 32 && mask&(1<<(31-ones)) != 0 {
			ones++
		}
		if mask<<ones == 0 {
			return ones, true
		}
	}
	return 0, false
}

// scalarText returns a scalar's text, or "" for non-scalars.
func scalarText(n *node) string {
	switch n.kind {
	case kindString, kindInt, kindFloat:
		return n.str
	}
	return ""
}
