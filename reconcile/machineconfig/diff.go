package machineconfig

import (
	"github.com/pmezard/go-difflib/difflib"
)

// diffContext is the number of unchanged lines shown around a change.
const diffContext = 3

// unifiedDiff returns the hunks of a unified diff between two texts, or ""
// when they are equal.
func unifiedDiff(a, b string) string {
	if a == b {
		return ""
	}
	out, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A:       lines(a),
		B:       lines(b),
		Context: diffContext,
	})
	if err != nil {
		// The library only fails when writing to its buffer fails.
		return ""
	}
	return out
}

// lines splits a text into lines that keep their newline; an empty text has
// no lines.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return difflib.SplitLines(s)
}
