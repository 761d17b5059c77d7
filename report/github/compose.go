// Package github reports to GitHub with go-github: one plan comment per pull
// request, found again by a hidden marker and edited in place, kept under
// GitHub's comment limit by splitting and folding; commit statuses within
// GitHub's context and description limits; and a transport that retries
// transient failures, honours rate limits, spaces mutating requests and
// answers repeated reads from ETags.
package github

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits GitHub enforces or that consumers rely on.
const (
	// MaxCommentBytes is GitHub's comment limit (65,536 characters; some
	// measure bytes, so bytes are budgeted).
	MaxCommentBytes = 65536
	// MaxContext is the safe length of a status context.
	MaxContext = 255
	// MaxDescription is the safe length of a status description.
	MaxDescription = 140
)

// Marker starts every comment the agent writes, so it finds its own
// comments again whoever the token's user is; part n of a split comment
// carries MarkerPart(n).
const Marker = "<!-- taloscluster:plan -->"

// MarkerPart is the marker of the n-th continuation comment (n >= 2).
func MarkerPart(n int) string { return fmt.Sprintf("<!-- taloscluster:plan:%d -->", n) }

// Section is one cluster's part of a pull-request comment.
type Section struct {
	// Cluster is the cluster directory path.
	Cluster string
	// Summary is one line for the summary table.
	Summary string
	// Result is a short word for the table: planned, failed, refused.
	Result string
	// Body is the full plan in markdown; it goes inside a <details> fold.
	Body string
	// FullURL links to the full plan on the agent's status page, used when
	// the body has to be cut.
	FullURL string
	// Removes are the machines the plan removes, in order: listed under
	// the summary table, before any fold, so a reviewer cannot miss them.
	Removes []string
}

// maxRemovesListed bounds the names listed per cluster under the table.
const maxRemovesListed = 50

// Compose builds the comments of a pull request: a summary table first,
// then each cluster's plan folded in <details>, split into numbered
// continuation comments when it does not fit in one, and a plan too long
// for a comment of its own cut with a link to the full plan. Every comment
// is at most limit bytes (MaxCommentBytes when limit is 0).
func Compose(header string, sections []Section, limit int) []string {
	if limit <= 0 {
		limit = MaxCommentBytes
	}
	var table strings.Builder
	table.WriteString("| cluster | result | summary |\n|---|---|---|\n")
	for _, s := range sections {
		fmt.Fprintf(&table, "| `%s` | %s | %s |\n", escapeCell(s.Cluster), escapeCell(s.Result), escapeCell(s.Summary))
	}
	first := Marker + "\n" + header + "\n\n" + table.String() + "\n"
	for _, s := range sections {
		if len(s.Removes) == 0 {
			continue
		}
		names := s.Removes
		more := ""
		if len(names) > maxRemovesListed {
			more = fmt.Sprintf(" and %d more", len(names)-maxRemovesListed)
			names = names[:maxRemovesListed]
		}
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = "`" + escapeCell(n) + "`"
		}
		first += fmt.Sprintf("> [!IMPORTANT]\n> **`%s` removes %d machine(s)**, drained and reset one at a time: %s%s\n\n", escapeCell(s.Cluster), len(s.Removes), strings.Join(quoted, ", "), more)
	}
	var comments []string
	cur := first
	part := 1
	for _, s := range sections {
		block := fold(s, limit-len(MarkerPart(part+1))-len(first)-64)
		if len(cur)+len(block) > limit {
			comments = append(comments, cur)
			part++
			cur = MarkerPart(part) + "\n" + fmt.Sprintf("_continued (part %d)_\n\n", part)
			if len(cur)+len(block) > limit {
				block = fold(s, limit-len(cur)-64)
			}
		}
		cur += block
	}
	comments = append(comments, cur)
	for i := range comments {
		if len(comments) > 1 {
			comments[i] += fmt.Sprintf("\n_part %d of %d_\n", i+1, len(comments))
		}
	}
	return comments
}

// fold puts a section in a <details> fold, cutting its body to fit budget
// bytes with a link to the full plan.
func fold(s Section, budget int) string {
	head := fmt.Sprintf("<details><summary><code>%s</code>: %s</summary>\n\n", escapeHTML(s.Cluster), escapeHTML(s.Summary))
	tail := "\n</details>\n\n"
	body := s.Body
	if room := budget - len(head) - len(tail); len(body) > room {
		note := "\n\n… the plan is too long for a comment"
		if s.FullURL != "" {
			note += fmt.Sprintf(": [full plan](%s)", s.FullURL)
		}
		note += "\n"
		cut := max(0, room-len(note)-8)
		body = truncateUTF8(body, cut)
		// Close a code fence the cut left open.
		if strings.Count(body, "```")%2 == 1 {
			body += "\n```"
		}
		body += note
	}
	return head + body + tail
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func escapeCell(s string) string {
	s = escapeHTML(s)
	s = strings.ReplaceAll(s, "|", "\\|")
	s = strings.ReplaceAll(s, "`", "'")
	return strings.ReplaceAll(s, "\n", " ")
}

func escapeHTML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// StatusContext returns the status context for a job kind and cluster
// path, at most MaxContext bytes: a long path is shortened in the middle.
func StatusContext(kind, cluster string) string {
	c := "taloscluster/" + kind + ": " + cluster
	if len(c) <= MaxContext {
		return c
	}
	keep := (MaxContext - len("taloscluster/"+kind+": ") - 3) / 2
	return "taloscluster/" + kind + ": " + cluster[:keep] + "..." + cluster[len(cluster)-keep:]
}

// Description returns a status description of at most MaxDescription
// bytes: the first line of s, cut on a rune boundary.
func Description(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) <= MaxDescription {
		return line
	}
	return truncateUTF8(line, MaxDescription-3) + "..."
}
