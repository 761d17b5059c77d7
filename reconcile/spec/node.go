package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
// mapping keeps its last value, as PyYAML does, and is reported in the
// returned warnings with the lines of both. A file holds one YAML document:
// a second one ("---" and more) is an error naming its line, as PyYAML's
// safe_load refuses it too.
func parseYAML(file string, data []byte) (*node, []Problem, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &node{kind: kindNull, file: file, line: 1}, nil, nil
		}
		return nil, nil, &parseError{file: file, msg: "not valid YAML: " + yamlReason(err)}
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, nil, &parseError{file: file, msg: "not valid YAML: " + yamlReason(err)}
	default:
		return nil, nil, &parseError{file: file, line: next.Line,
			msg: "a second YAML document starts here; a cluster file holds one document: remove the '---' line and what follows, or merge it into the first"}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &node{kind: kindNull, file: file, line: 1}, nil, nil
	}
	c := converter{file: file, checked: map[*yaml.Node]bool{}}
	n, err := c.convert(doc.Content[0], 0, "")
	if err != nil {
		return nil, nil, err
	}
	return n, c.warns, nil
}

// parseError is a file that cannot be read as a cluster file, with the line
// at fault when there is one.
type parseError struct {
	file string
	line int
	msg  string
}

func (e *parseError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.file, e.line, e.msg)
	}
	return e.file + ": " + e.msg
}

// yamlReason strips the library prefix from a parser error.
func yamlReason(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

type converter struct {
	file string
	// count bounds the nodes built, so aliases cannot expand without end.
	count int
	// checked records the mappings already searched for duplicate keys, so
	// a mapping an alias repeats is reported once.
	checked map[*yaml.Node]bool
	warns   []Problem
}

// maxNodes bounds the values one file may expand to, aliases included.
const maxNodes = 200000

// maxDepth bounds nesting so a hostile file cannot exhaust the stack.
const maxDepth = 64

// convert builds the node of y; path is its dotted key path, for warnings.
func (c *converter) convert(y *yaml.Node, depth int, path string) (*node, error) {
	if depth > maxDepth {
		return nil, &parseError{file: c.file, line: y.Line, msg: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	c.count++
	if c.count > maxNodes {
		return nil, &parseError{file: c.file, msg: fmt.Sprintf("expands to more than %d values", maxNodes)}
	}
	n := &node{file: c.file, line: y.Line}
	switch y.Kind {
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, &parseError{file: c.file, line: y.Line, msg: "unknown alias"}
		}
		a, err := c.convert(y.Alias, depth+1, path)
		if err != nil {
			return nil, err
		}
		a.line = y.Line
		return a, nil
	case yaml.ScalarNode:
		c.scalar(y, n)
	case yaml.SequenceNode:
		n.kind = kindList
		for i, it := range y.Content {
			v, err := c.convert(it, depth+1, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
	case yaml.MappingNode:
		n.kind = kindMap
		n.vals = map[string]*node{}
		n.keyKinds = map[string]kind{}
		if err := c.mapping(y, n, depth, path); err != nil {
			return nil, err
		}
	default:
		n.kind = kindNull
	}
	return n, nil
}

func (c *converter) mapping(y *yaml.Node, n *node, depth int, path string) error {
	c.duplicates(y, path)
	var merges []*yaml.Node
	for i := 0; i+1 < len(y.Content); i += 2 {
		k, v := y.Content[i], y.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return &parseError{file: c.file, line: k.Line, msg: "a mapping key must be a plain value"}
		}
		kn := &node{}
		c.scalar(k, kn)
		key := k.Value
		val, err := c.convert(v, depth+1, joinKey(path, key))
		if err != nil {
			return err
		}
		if _, dup := n.vals[key]; !dup {
			n.keys = append(n.keys, key)
		}
		n.vals[key] = val
		n.keyKinds[key] = kn.kind
	}
	// YAML merge keys ("<<: *anchor"): explicit keys win over merged ones.
	for _, m := range merges {
		src, err := c.convert(m, depth+1, path)
		if err != nil {
			return err
		}
		sources := []*node{src}
		if src.kind == kindList {
			sources = src.items
		}
		for _, s := range sources {
			if s.kind != kindMap {
				return &parseError{file: c.file, line: m.Line, msg: "a merge key needs a mapping"}
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

// duplicates warns about each key written more than once in the mapping y,
// at the line of the last one, which is the one used.
func (c *converter) duplicates(y *yaml.Node, path string) {
	if c.checked[y] {
		return
	}
	c.checked[y] = true
	lines := map[string][]int{}
	var order []string
	for i := 0; i+1 < len(y.Content); i += 2 {
		k := y.Content[i]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			continue
		}
		if _, ok := lines[k.Value]; !ok {
			order = append(order, k.Value)
		}
		lines[k.Value] = append(lines[k.Value], k.Line)
	}
	for _, key := range order {
		ls := lines[key]
		if len(ls) < 2 {
			continue
		}
		last := ls[len(ls)-1]
		earlier := make([]string, len(ls)-1)
		for i, l := range ls[:len(ls)-1] {
			earlier[i] = strconv.Itoa(l)
		}
		also := "line " + earlier[0]
		if len(earlier) > 1 {
			also = "lines " + strings.Join(earlier, ", ")
		}
		c.warns = append(c.warns, Problem{File: c.file, Line: last, Key: joinKey(path, key),
			Message: fmt.Sprintf("duplicate key, also at %s; the last one (line %d) is used", also, last)})
	}
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
