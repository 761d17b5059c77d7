package report

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// Markdown renders the plan as GitHub-flavoured Markdown for a pull-request
// comment about one cluster.
//
// A summary line with the cluster name and the counts comes first, then a
// caution alert when changes are refused; both stay visible. The details
// follow inside a <details> fold: a table per phase in converge order, each
// diff in a fenced diff block, then the warnings and refusals as lists. An
// empty plan is a single line (plus the fold when there are warnings).
//
// Every string from the plan is escaped, so a name or reason cannot break a
// table, start a block, or inject HTML; a diff cannot close its fence. The
// result may still exceed GitHub's comment limit for a very large plan:
// folding or splitting is the comment sink's job.
func Markdown(p *plan.Plan) string {
	s := p.Sorted()
	var b strings.Builder

	b.WriteString("**Cluster " + mdEscape(s.Cluster) + "**")
	if s.Commit != "" {
		b.WriteString(" at commit " + mdEscape(s.Commit))
	}
	switch {
	case s.Empty() && s.Incomplete:
		b.WriteString(": **incomplete.** What could not be read was not compared with cluster.yaml, so this is not \"no changes\".\n")
	case s.Empty() && len(s.Warnings) > 0:
		b.WriteString(": nothing to change; " + plural(len(s.Warnings), "warning", "warnings") + ".\n")
	case s.Empty():
		b.WriteString(": no changes. Converge would leave the cluster as it is.\n")
	default:
		n := s.Counts()
		// Summary is made of numbers and fixed words, safe in a code span.
		b.WriteString(": " + countsSentence(n) + " (`" + s.Summary() + "`).\n")
		if n.Refused > 0 {
			b.WriteString("\n> [!CAUTION]\n> **" + refusedSentence(n.Refused) + ".** The refused changes are listed below.\n")
		}
	}
	if gone := plan.Removals(s); len(gone) > 0 {
		// Outside the fold and first: machines that leave the cluster.
		b.WriteString("\n> [!IMPORTANT]\n> **Removes " + plural(len(gone), "machine", "machines") + "**, drained and reset one at a time, in this order:\n")
		for _, h := range gone {
			b.WriteString("> - " + mdEscape(h) + "\n")
		}
	}
	if s.Incomplete {
		// Outside the fold: nobody may miss that the plan is partial.
		b.WriteString("\n> [!WARNING]\n> **Incomplete:** the plan compares only what could be read.\n")
		for _, why := range s.IncompleteReasons {
			b.WriteString("> - " + mdEscape(why) + "\n")
		}
	}
	if s.Empty() && len(s.Warnings) == 0 {
		return b.String()
	}

	fmt.Fprintf(&b, "\n<details><summary>%s</summary>\n", detailsSummary(s))
	for _, g := range groupByPhase(s.Changes) {
		writeMarkdownPhase(&b, g)
	}
	if len(s.Warnings) > 0 {
		b.WriteString("\n#### Warnings\n\n")
		for _, msg := range s.Warnings {
			b.WriteString("- " + mdEscape(msg) + "\n")
		}
	}
	if len(s.Refusals) > 0 {
		b.WriteString("\n#### Refused\n\n")
		for _, r := range s.Refusals {
			b.WriteString("- " + mdEscape(string(r.Resource.Kind)) + " " + mdEscape(r.Resource.Name) + ": " + mdEscape(r.Reason) + "\n")
		}
	}
	b.WriteString("\n</details>\n")
	return b.String()
}

// detailsSummary is the label of the fold. It is built from counts only, so
// it needs no HTML escaping.
func detailsSummary(s *plan.Plan) string {
	parts := []string{plural(len(s.Changes), "change", "changes")}
	if n := len(groupByPhase(s.Changes)); n > 0 {
		parts[0] += " in " + plural(n, "phase", "phases")
	}
	if n := len(s.Warnings); n > 0 {
		parts = append(parts, plural(n, "warning", "warnings"))
	}
	if n := len(s.Refusals); n > 0 {
		parts = append(parts, fmt.Sprintf("%d refused", n))
	}
	return "Plan details: " + strings.Join(parts, ", ")
}

// writeMarkdownPhase writes one phase: a heading, a table of its changes
// and the diffs of those changes.
func writeMarkdownPhase(b *strings.Builder, g phaseGroup) {
	b.WriteString("\n#### " + mdEscape(string(g.phase)) + "\n\n")
	b.WriteString("| Action | Kind | Name | Reason | Details |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	for _, c := range g.changes {
		// Symbol returns one of a fixed set, safe in a code span.
		cells := []string{
			"`" + c.Action.Symbol() + "` " + mdEscape(string(c.Action)),
			mdEscape(string(c.Resource.Kind)),
			mdEscape(c.Resource.Name),
			mdEscape(c.Reason),
			mdEscape(formatAttributes(c.Attributes)),
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	for _, c := range g.changes {
		if c.Diff == "" {
			continue
		}
		lines := diffLines(c.Diff)
		fence := codeFence(lines)
		b.WriteString("\nDiff of " + mdEscape(c.Resource.String()) + " (" + mdEscape(string(c.Action)) + "):\n\n")
		b.WriteString(fence + "diff\n")
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
		b.WriteString(fence + "\n")
	}
}

// codeFence returns a backtick fence longer than any run of backticks in
// lines, so no line can close the block early.
func codeFence(lines []string) string {
	longest := 0
	for _, l := range lines {
		run := 0
		for _, r := range l {
			if r != '`' {
				run = 0
				continue
			}
			run++
			longest = max(longest, run)
		}
	}
	return strings.Repeat("`", max(3, longest+1))
}

// mdSpecial lists the characters escaped anywhere in Markdown text: those
// that start emphasis, code, links, HTML, tables, strikethrough, math,
// entities or headings.
const mdSpecial = "\\`*_[]<>|~&#$"

// mdLeading lists the characters escaped at the start of a string, where
// they could start a list, a quote or a heading underline.
const mdLeading = "-+="

// mdEscape makes s safe to place in Markdown text or a table cell: control
// characters are escaped first (so it stays on one line) and surrounding
// spaces trimmed (so it cannot become indented code), then every
// Markdown-significant character is backslash-escaped, as is the dot or
// parenthesis of a leading "1." or "1)".
func mdEscape(s string) string {
	s = strings.TrimSpace(clean(s))
	digits := len(s) - len(strings.TrimLeft(s, "0123456789"))
	var b strings.Builder
	for i, r := range s {
		switch {
		case strings.ContainsRune(mdSpecial, r),
			i == 0 && strings.ContainsRune(mdLeading, r),
			digits > 0 && i == digits && (r == '.' || r == ')'):
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// wordJoiner is an invisible character that ends a mention: "@\u2060name"
// shows as @name but notifies nobody.
const wordJoiner = "\u2060"

// MarkdownText makes text that someone else wrote (a pull request's title)
// safe to place inline in a comment: one line of at most max bytes (cut on
// a rune boundary, "..." added), every Markdown and HTML character
// escaped, and no @mention that notifies anyone.
func MarkdownText(s string, max int) string {
	s = strings.TrimSpace(clean(s))
	if len(s) > max {
		n := max
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "..."
	}
	return strings.ReplaceAll(mdEscape(s), "@", "@"+wordJoiner)
}
