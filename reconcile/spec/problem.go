package spec

import (
	"fmt"
	"strings"
)

// Problem is one error or warning found while loading a cluster directory.
type Problem struct {
	// File is the file the problem is in, relative to the cluster directory.
	File string
	// Line is the 1-based line in File, or 0 when there is no single line.
	Line int
	// Key is the dotted key path, e.g. network.external.kubeapi_vip; it is
	// empty for problems about a whole file.
	Key string
	// Message is the reason, in words that never echo a secret value.
	Message string
}

// String formats the problem as "<file>:<line>: <key>: <reason>".
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error is returned by Load when a cluster directory is invalid. It holds
// every problem found, not just the first.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Source is where a value was written: a file relative to the cluster
// directory and a 1-based line.
type Source struct {
	File string
	Line int
}

// Source returns where the value of key was written. key is a dotted key
// path as problems name it: a list entry such as talos.config_patches[0],
// controlplane.config_patches[1] or workers.gpu.extensions[0], or a tag
// such as tags.team or workers.gpu.tags.team. It reports false for a key
// the loader did not record.
func (c *Cluster) Source(key string) (Source, bool) {
	s, ok := c.sources[key]
	return s, ok
}

// ProblemAt returns a problem about key, placed where the value was
// written, or at the cluster file when that is not known. It is for the
// checks that run after loading, such as generating the machine configs.
func (c *Cluster) ProblemAt(key, message string) Problem {
	s, ok := c.Source(key)
	if !ok {
		s = Source{File: ClusterFile}
	}
	return Problem{File: s.File, Line: s.Line, Key: key, Message: message}
}
