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
