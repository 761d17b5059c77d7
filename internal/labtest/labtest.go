// Package labtest holds what the tests of several packages do with the
// lab the same way: reading its log, waiting on a condition, editing a
// cluster.yaml key by key. It is for tests only.
package labtest

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/lab"
)

// Since returns the lab log's entries after mark.
func Since(l *lab.Lab, mark time.Time) []lab.LogEntry {
	var out []lab.LogEntry
	for _, e := range l.Log() {
		if e.Time.After(mark) {
			out = append(out, e)
		}
	}
	return out
}

// Find returns the index of the first successful entry from start on of
// source whose op (or service.op) is op and whose target contains target;
// -1 when there is none.
func Find(log []lab.LogEntry, start int, source, op, target string) int {
	for i := max(start, 0); i < len(log); i++ {
		e := log[i]
		if e.Source == source && (e.Op == op || e.Service+"."+e.Op == op) && strings.Contains(e.Target, target) && !strings.HasPrefix(e.Result, "4") && !strings.HasPrefix(e.Result, "5") {
			return i
		}
	}
	return -1
}

// Downs returns the most of hosts that were away at once (the lab's
// node-left to node-joined events), failing tb when that is above limit.
func Downs(tb testing.TB, log []lab.LogEntry, hosts []string, limit int) int {
	tb.Helper()
	down := map[string]bool{}
	most := 0
	for _, e := range log {
		if e.Source != "lab" || !slices.Contains(hosts, e.Target) {
			continue
		}
		switch e.Op {
		case "node-left":
			down[e.Target] = true
		case "node-joined":
			delete(down, e.Target)
		}
		if len(down) > limit {
			tb.Fatalf("%d of %v down at once (%v), at most %d allowed", len(down), hosts, down, limit)
		}
		most = max(most, len(down))
	}
	return most
}

// WaitFor waits up to 30 s for cond, failing tb after that.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SetYAML sets keys of the YAML file at path in place: kv holds dotted
// key paths and YAML values in turn; a missing key is added.
func SetYAML(tb testing.TB, path string, kv ...string) {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		var val yaml.Node
		if err := yaml.Unmarshal([]byte(kv[i+1]), &val); err != nil {
			tb.Fatal(err)
		}
		SetPath(tb, doc.Content[0], strings.Split(kv[i], "."), val.Content[0])
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// SetPath sets (or adds) the mapping entry at path under n.
func SetPath(tb testing.TB, n *yaml.Node, path []string, val *yaml.Node) {
	tb.Helper()
	if n.Kind != yaml.MappingNode {
		tb.Fatalf("%s: not a mapping", path[0])
	}
	for i := 0; i < len(n.Content); i += 2 {
		if n.Content[i].Value != path[0] {
			continue
		}
		if len(path) == 1 {
			n.Content[i+1] = val
			return
		}
		SetPath(tb, n.Content[i+1], path[1:], val)
		return
	}
	if len(path) > 1 {
		child := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: path[0]}, child)
		SetPath(tb, child, path[1:], val)
		return
	}
	n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: path[0]}, val)
}

// YAMLString quotes s as a one-item YAML list of a block string.
func YAMLString(s string) string {
	out, _ := yaml.Marshal([]string{s})
	return string(out)
}
