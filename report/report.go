// Package report renders a plan for people and programs: Text for the
// terminal, Markdown for a pull-request comment and JSON for `plan -o json`
// and other tools.
//
// Every renderer works on a sorted copy of the plan and never changes the
// plan it is given, so the same plan always renders to the same bytes. A
// nil plan renders as an empty one. Strings from the plan are treated as
// untrusted: control characters are escaped everywhere, and Markdown
// escapes anything that could break its structure or inject HTML. Secrets
// must be redacted before a plan reaches a renderer; sinks that post the
// output (GitHub comments, statuses) enforce their own size limits.
package report

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// phaseGroup is the run of changes one phase makes in a sorted plan.
type phaseGroup struct {
	phase   plan.Phase
	changes []plan.Change
}

// groupByPhase splits the changes of a sorted plan into runs by phase.
func groupByPhase(changes []plan.Change) []phaseGroup {
	var groups []phaseGroup
	for _, c := range changes {
		if n := len(groups); n > 0 && groups[n-1].phase == c.Phase {
			groups[n-1].changes = append(groups[n-1].changes, c)
			continue
		}
		groups = append(groups, phaseGroup{phase: c.Phase, changes: []plan.Change{c}})
	}
	return groups
}

// countsSentence describes the counts in words, without a final period:
// "5 to create, 1 to update, 0 to delete, 1 to bootstrap". Refusals are
// left out; the renderers give them a line of their own.
func countsSentence(n plan.Counts) string {
	parts := []string{
		fmt.Sprintf("%d to create", n.Create),
		fmt.Sprintf("%d to update", n.Update),
		fmt.Sprintf("%d to delete", n.Delete),
	}
	for _, extra := range []struct {
		n    int
		verb string
	}{
		{n.Replace, "replace"},
		{n.Upgrade, "upgrade"},
		{n.Bootstrap, "bootstrap"},
	} {
		if extra.n > 0 {
			parts = append(parts, fmt.Sprintf("%d to %s", extra.n, extra.verb))
		}
	}
	return strings.Join(parts, ", ")
}

// refusedSentence says how many changes are refused and what that means.
func refusedSentence(n int) string {
	noun := "changes"
	if n == 1 {
		noun = "change"
	}
	return fmt.Sprintf("%d %s refused: converge would stop before making any change", n, noun)
}

// plural returns "1 change" or "n changes".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// formatAttributes renders attributes as space-separated key=value pairs in
// the order given (a sorted plan has them sorted by key). A value that is
// empty or holds spaces, quotes, '=' or control characters is quoted.
func formatAttributes(attrs []plan.Attribute) string {
	parts := make([]string, 0, len(attrs))
	for _, a := range attrs {
		parts = append(parts, clean(a.Key)+"="+quoteValue(a.Value))
	}
	return strings.Join(parts, " ")
}

// quoteValue quotes v when it would not read as a single value otherwise.
func quoteValue(v string) string {
	if v == "" {
		return `""`
	}
	for _, r := range v {
		if r == '"' || r == '=' || r == '\\' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(v)
		}
	}
	return v
}

// clean escapes every character of s that is not printable, including
// newlines and tabs, so one string stays on one line and cannot move the
// cursor or reorder text on a terminal.
func clean(s string) string {
	return escapeControls(s, false)
}

// cleanDiffLine is clean for one line of a diff, where tabs are kept.
func cleanDiffLine(s string) string {
	return escapeControls(s, true)
}

// escapeControls replaces non-printable characters and invalid UTF-8 with
// Go-style escapes. It keeps tabs when keepTab is set.
func escapeControls(s string, keepTab bool) string {
	if isPrintable(s, keepTab) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t' && keepTab, r == ' ', unicode.IsPrint(r):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// isPrintable reports whether escapeControls would leave s unchanged.
func isPrintable(s string, keepTab bool) bool {
	for _, r := range s {
		if r == utf8.RuneError || !(r == ' ' || (r == '\t' && keepTab) || unicode.IsPrint(r)) {
			return false
		}
	}
	return true
}

// diffLines splits a diff into lines, dropping one trailing newline, with
// each line cleaned.
func diffLines(diff string) []string {
	diff = strings.TrimSuffix(strings.ReplaceAll(diff, "\r\n", "\n"), "\n")
	lines := strings.Split(diff, "\n")
	for i, l := range lines {
		lines[i] = cleanDiffLine(l)
	}
	return lines
}
