package spec

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// kind is the shape of a value in a cluster file.
type kind int

const (
	kindNull kind = iota
	kindString
	kindInt
	kindFloat
	kindBool
	kindList
	kindMap
)

func (k kind) String() string {
	return [...]string{"null", "string", "integer", "number", "boolean", "list", "mapping"}[k]
}

// node is one value of the merged configuration tree. It remembers the file
// and line it came from so that every problem can point at its source.
type node struct {
	kind  kind
	str   string // the scalar text for string, int, float and bool
	num   int64
	bool  bool
	items []*node
	keys  []string // mapping keys in file order
	vals  map[string]*node
	// keyKinds records the YAML type of each mapping key, for the rules that
	// require string keys.
	keyKinds map[string]kind
	file     string
	line     int
}

func (n *node) isNull() bool { return n == nil || n.kind == kindNull }

// get returns the value of a mapping key, or nil when n is not a mapping or
// the key is absent.
func (n *node) get(key string) *node {
	if n == nil || n.kind != kindMap {
		return nil
	}
	return n.vals[key]
}

// has reports whether a mapping key is present with a non-null value.
func (n *node) has(key string) bool { return !n.get(key).isNull() }

// describe names a value's type for error messages without echoing it.
func (n *node) describe() string {
	if n == nil {
		return "null"
	}
	return n.kind.String()
}

// YAML 1.1 scalar forms the Python tool's parser resolves differently from
// YAML 1.2. Unquoted scalars are resolved the way PyYAML's safe loader does,
// so a file reads the same here as it does there.
var (
	yaml11Bool = map[string]bool{
		"yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
		"true": true, "True": true, "TRUE": true,
		"no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
		"false": false, "False": false, "FALSE": false,
	}
	yaml11Null = map[string]bool{"": true, "~": true, "null": true, "Null": true, "NULL": true}
	yaml11Int  = regexp.MustCompile(`^[-+]?(0|[1-9][0-9_]*)$`)
	yaml11Oct  = regexp.MustCompile(`^[-+]?0[0-7_]+$`)
	yaml11Hex  = regexp.MustCompile(`^[-+]?0x[0-9a-fA-F_]+$`)
	yaml11Bin  = regexp.MustCompile(`^[-+]?0b[01_]+$`)
	yaml11Flt  = regexp.MustCompile(`^[-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)?$|^\.[0-9_]+([eE][-+][0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$`)
)

// parseYAML reads one file's bytes into a node tree. A key repeated in one
// mapping keeps its last value, as PyYAML does.
func parseYAML(file string, data []byte) (*node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %s", file, yamlReason(err))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &node{kind: kindNull, file: file, line: 1}, nil
	}
	c := converter{file: file}
	return c.convert(doc.Content[0], 0)
}

// yamlReason strips the library prefix from a parser error.
func yamlReason(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

type converter struct {
	file string
	// count bounds the nodes built, so aliases cannot expand without end.
	count int
}

// maxNodes bounds the values one file may expand to, aliases included.
const maxNodes = 200000

// maxDepth bounds nesting so a hostile file cannot exhaust the stack.
const maxDepth = 64

func (c *converter) convert(y *yaml.Node, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%s:%d: nested deeper than %d levels", c.file, y.Line, maxDepth)
	}
	c.count++
	if c.count > maxNodes {
		return nil, fmt.Errorf("%s: expands to more than %d values", c.file, maxNodes)
	}
	n := &node{file: c.file, line: y.Line}
	switch y.Kind {
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, fmt.Errorf("%s:%d: unknown alias", c.file, y.Line)
		}
		a, err := c.convert(y.Alias, depth+1)
		if err != nil {
			return nil, err
		}
		a.line = y.Line
		return a, nil
	case yaml.ScalarNode:
		c.scalar(y, n)
	case yaml.SequenceNode:
		n.kind = kindList
		for _, it := range y.Content {
			v, err := c.convert(it, depth+1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
	case yaml.MappingNode:
		n.kind = kindMap
		n.vals = map[string]*node{}
		n.keyKinds = map[string]kind{}
		if err := c.mapping(y, n, depth); err != nil {
			return nil, err
		}
	default:
		n.kind = kindNull
	}
	return n, nil
}

func (c *converter) mapping(y *yaml.Node, n *node, depth int) error {
	var merges []*yaml.Node
	for i := 0; i+1 < len(y.Content); i += 2 {
		k, v := y.Content[i], y.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s:%d: a mapping key must be a plain value", c.file, k.Line)
		}
		kn := &node{}
		c.scalar(k, kn)
		val, err := c.convert(v, depth+1)
		if err != nil {
			return err
		}
		key := k.Value
		if _, dup := n.vals[key]; !dup {
			n.keys = append(n.keys, key)
		}
		n.vals[key] = val
		n.keyKinds[key] = kn.kind
	}
	// YAML merge keys ("<<: *anchor"): explicit keys win over merged ones.
	for _, m := range merges {
		src, err := c.convert(m, depth+1)
		if err != nil {
			return err
		}
		sources := []*node{src}
		if src.kind == kindList {
			sources = src.items
		}
		for _, s := range sources {
			if s.kind != kindMap {
				return fmt.Errorf("%s:%d: a merge key needs a mapping", c.file, m.Line)
			}
			for _, k := range s.keys {
				if _, ok := n.vals[k]; !ok {
					n.keys = append(n.keys, k)
					n.vals[k] = s.vals[k]
					n.keyKinds[k] = s.keyKinds[k]
				}
			}
		}
	}
	return nil
}

// scalar resolves a scalar the way a YAML 1.1 loader does.
func (c *converter) scalar(y *yaml.Node, n *node) {
	n.str = y.Value
	n.file, n.line = c.file, y.Line
	plain := y.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0
	if !plain || (y.Style&yaml.TaggedStyle != 0 && (y.Tag == "!!str" || y.Tag == "!!binary")) {
		n.kind = kindString
		return
	}
	v := y.Value
	switch {
	case yaml11Null[v] && (plain || y.Tag == "!!null"):
		n.kind = kindNull
	case isBool(v):
		n.kind, n.bool = kindBool, yaml11Bool[v]
	case yaml11Int.MatchString(v), yaml11Hex.MatchString(v), yaml11Bin.MatchString(v), yaml11Oct.MatchString(v):
		if i, ok := parseYAMLInt(v); ok {
			n.kind, n.num = kindInt, i
		} else {
			n.kind = kindFloat
		}
	case yaml11Flt.MatchString(v):
		n.kind = kindFloat
	default:
		n.kind = kindString
	}
}

func isBool(v string) bool {
	_, ok := yaml11Bool[v]
	return ok
}

func parseYAMLInt(v string) (int64, bool) {
	s := strings.ReplaceAll(v, "_", "")
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	base := 10
	switch {
	case strings.HasPrefix(s, "0x"):
		base, s = 16, s[2:]
	case strings.HasPrefix(s, "0b"):
		base, s = 2, s[2:]
	case len(s) > 1 && s[0] == '0':
		base, s = 8, s[1:]
	}
	u, err := strconv.ParseUint(s, base, 63)
	if err != nil || u > math.MaxInt64 {
		return 0, false
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}
