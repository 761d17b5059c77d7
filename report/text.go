package report

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// diffIndent is the indentation of diff lines under their change.
const diffIndent = "      "

// Text writes the plan for a terminal: a header naming the cluster, the
// changes grouped by phase in converge order, one line each
//
//	<symbol> <kind> <name>  <reason> [key=value ...]
//
// with any diff indented below its change, then the warnings
// ("warning: ..."), refusals ("refused: <kind> <name>: <reason>") and what
// could not be read ("incomplete: <what> could not be read: <reason>"), and
// last a totals line and the plan's Summary. An empty plan says that
// nothing would change, unless it is incomplete; an empty plan with
// warnings says "Nothing to change; N warnings:" and lists them. The
// output is written with a single Write.
func Text(w io.Writer, p *plan.Plan) error {
	s := p.Sorted()
	var b strings.Builder

	b.WriteString("Plan for cluster " + clean(s.Cluster))
	if s.Commit != "" {
		b.WriteString(" at commit " + clean(s.Commit))
	}
	b.WriteString(":\n")
	if gone := plan.Removals(s); len(gone) > 0 {
		b.WriteString("\nRemoves " + plural(len(gone), "machine", "machines") + ", drained and reset one at a time: " + clean(strings.Join(gone, ", ")) + "\n")
	}

	for _, g := range groupByPhase(s.Changes) {
		b.WriteString("\n" + clean(string(g.phase)) + ":\n")
		writeTextChanges(&b, g.changes)
	}

	// An empty plan with warnings lists them under its last line.
	quietWarnings := s.Empty() && !s.Incomplete && len(s.Warnings) > 0
	if (len(s.Warnings) > 0 && !quietWarnings) || len(s.Refusals) > 0 || s.Incomplete {
		b.WriteString("\n")
	}
	if !quietWarnings {
		writeWarnings(&b, s.Warnings)
	}
	for _, r := range s.Refusals {
		fmt.Fprintf(&b, "refused: %s %s: %s\n", clean(string(r.Resource.Kind)), clean(r.Resource.Name), clean(r.Reason))
	}
	for _, why := range s.IncompleteReasons {
		b.WriteString("incomplete: " + clean(why) + "\n")
	}

	b.WriteString("\n")
	switch {
	case s.Empty() && s.Incomplete:
		b.WriteString("Incomplete: what could not be read was not compared with cluster.yaml, so this is not \"no changes\".\n")
	case quietWarnings:
		b.WriteString("Nothing to change; " + plural(len(s.Warnings), "warning", "warnings") + ":\n")
		writeWarnings(&b, s.Warnings)
	case s.Empty():
		b.WriteString("No changes: converge would leave the cluster as it is.\n")
	default:
		n := s.Counts()
		b.WriteString("Plan: " + countsSentence(n) + ".\n")
		if n.Refused > 0 {
			b.WriteString(refusedSentence(n.Refused) + ".\n")
		}
		if s.Incomplete {
			b.WriteString("Incomplete: what could not be read was not compared with cluster.yaml and may need more changes.\n")
		}
		b.WriteString("Summary: " + s.Summary() + "\n")
	}

	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing text plan: %w", err)
	}
	return nil
}

// writeTextChanges writes the lines of one phase, with the symbol, kind and
// name columns aligned across the phase.
func writeTextChanges(b *strings.Builder, changes []plan.Change) {
	type row struct {
		symbol, kind, name, rest string
		diff                     string
	}
	rows := make([]row, len(changes))
	var symbolWidth, kindWidth, nameWidth int
	for i, c := range changes {
		r := row{
			symbol: c.Action.Symbol(),
			kind:   clean(string(c.Resource.Kind)),
			name:   clean(c.Resource.Name),
			diff:   c.Diff,
		}
		var rest []string
		if c.Reason != "" {
			rest = append(rest, clean(c.Reason))
		}
		if len(c.Attributes) > 0 {
			rest = append(rest, "["+formatAttributes(c.Attributes)+"]")
		}
		r.rest = strings.Join(rest, " ")
		symbolWidth = max(symbolWidth, utf8.RuneCountInString(r.symbol))
		kindWidth = max(kindWidth, utf8.RuneCountInString(r.kind))
		nameWidth = max(nameWidth, utf8.RuneCountInString(r.name))
		rows[i] = r
	}
	for _, r := range rows {
		line := fmt.Sprintf("  %-*s %-*s %-*s  %s", symbolWidth, r.symbol, kindWidth, r.kind, nameWidth, r.name, r.rest)
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		if r.diff == "" {
			continue
		}
		for _, l := range diffLines(r.diff) {
			if l == "" {
				b.WriteString("\n")
				continue
			}
			b.WriteString(diffIndent + l + "\n")
		}
	}
}

func writeWarnings(b *strings.Builder, warnings []string) {
	for _, msg := range warnings {
		b.WriteString("warning: " + clean(msg) + "\n")
	}
}
