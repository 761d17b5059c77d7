package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// Step is one step of a converge as it ran: what it did, to which
// resource, how long it took and how it ended. It holds names, times and
// an outcome only; a failed step's error must have its secrets removed
// before it gets here.
type Step struct {
	// Resource is what the step acted on.
	Resource plan.Resource
	// Name says what the step did in a few words (StepName).
	Name string
	// Batch is the step's worker batch, 0 for none: the nodes of a batch
	// go through their steps at the same time.
	Batch int
	// Duration is how long the step took.
	Duration time.Duration
	// Unfinished is set for a step that started and never ended (the run
	// stopped while it ran).
	Unfinished bool
	// Err says why the step failed, on one line; empty when it did not.
	Err string
}

// StepNode returns the node a step acts on (its resource's name when the
// resource is a machine or a Kubernetes node), or "" for a step of the
// whole cluster (a health gate, kube-proxy, a network, a state file).
func StepNode(r plan.Resource) string {
	if r.Kind == plan.KindMachine || r.Kind == plan.KindNode {
		return r.Name
	}
	return ""
}

// StepName names what a step does in a few words: its action, except that
// an update of a Kubernetes node that makes it unschedulable is "cordon"
// and the reverse "uncordon", and a Kubernetes upgrade step names the
// component it moves and the version it moves it to
// ("upgrade-kubernetes (kubelet → v1.35.0)").
func StepName(a plan.Action, r plan.Resource, attrs []plan.Attribute) string {
	attr := func(key string) string {
		for _, at := range attrs {
			if at.Key == key {
				return at.Value
			}
		}
		return ""
	}
	switch {
	case a == plan.ActionUpdate && r.Kind == plan.KindNode:
		switch strings.ReplaceAll(attr("unschedulable"), " ", "") {
		case "false->true":
			return "cordon"
		case "true->false":
			return "uncordon"
		}
	case a == plan.ActionUpgradeKubernetes:
		var what []string
		if c := attr("component"); c != "" {
			what = append(what, c)
		} else if r.Kind == plan.KindCluster {
			what = append(what, r.Name)
		}
		if hop := attr("kubernetes"); hop != "" {
			_, to, ok := strings.Cut(hop, "->")
			if !ok {
				to = hop
			}
			what = append(what, "→ "+strings.TrimSpace(to))
		}
		if len(what) > 0 {
			return string(a) + " (" + strings.Join(what, " ") + ")"
		}
	}
	return string(a)
}

// Bounds of the steps StepsMarkdown lists.
const (
	// foldStepsNodes and foldStepsBytes: a list of more nodes, or longer,
	// is folded in <details>.
	foldStepsNodes = 6
	foldStepsBytes = 1500
	// maxStepsLine bounds one node's line, in bytes.
	maxStepsLine = 3000
	// maxStepErr bounds a failed step's error, in bytes.
	maxStepErr = 300
)

// StepsMarkdown renders in Markdown the steps a converge ran, per node:
// one line per node, in the order the nodes started, listing the node's
// steps in the order they ran with how long each took and how it ended;
// the nodes of a batch say that they ran in parallel. Steps of the whole
// cluster are summed up in one line, those that failed named. A long list
// is folded in <details>; one longer than limit bytes is cut at a node's
// line, with a link to fullURL (the run's page) when it is set. No steps,
// or a limit too small to say anything, render as "".
func StepsMarkdown(steps []Step, limit int, fullURL string) string {
	if len(steps) == 0 {
		return ""
	}
	var order []string
	byNode := map[string][]Step{}
	var cluster []Step
	failed := 0
	for _, s := range steps {
		if s.Err != "" {
			failed++
		}
		n := StepNode(s.Resource)
		if n == "" {
			cluster = append(cluster, s)
			continue
		}
		if _, ok := byNode[n]; !ok {
			order = append(order, n)
		}
		byNode[n] = append(byNode[n], s)
	}
	var lines []string
	for _, n := range order {
		lines = append(lines, nodeLine(n, byNode[n]))
	}
	if len(cluster) > 0 {
		lines = append(lines, clusterLine(cluster))
	}
	head := fmt.Sprintf("**Steps per node** (%s, %s%s), each in the order it ran:\n\n",
		plural(len(order), "node", "nodes"), plural(len(steps), "step", "steps"), failedWords(failed))
	var open, closing string
	if len(order) > foldStepsNodes || len(strings.Join(lines, "\n")) > foldStepsBytes {
		open = fmt.Sprintf("<details><summary>Steps per node: %s, %s%s</summary>\n\n",
			plural(len(order), "node", "nodes"), plural(len(steps), "step", "steps"), failedWords(failed))
		closing = "\n</details>\n"
		head = "Each node's steps in the order it ran them:\n\n"
	}
	budget := limit - len(open) - len(head) - len(closing)
	if budget < len(cutNote(len(lines), fullURL)) {
		return "" // not even room to say that the list was left out
	}
	var b strings.Builder
	b.WriteString(open + head)
	for i, l := range lines {
		more := len(lines) - i - 1
		// Room is kept for the note that says what was left out.
		note := ""
		if more > 0 {
			note = cutNote(more, fullURL)
		}
		if budget-len(l)-1 < len(note) {
			b.WriteString(cutNote(len(lines)-i, fullURL))
			break
		}
		b.WriteString(l + "\n")
		budget -= len(l) + 1
	}
	b.WriteString(closing)
	return b.String()
}

// cutNote says that the last n lines were left out.
func cutNote(n int, fullURL string) string {
	s := "- … " + plural(n, "more line", "more lines") + " left out to keep the comment short"
	if fullURL != "" {
		s += ": [the run's page](" + fullURL + ")"
	}
	return s + "\n"
}

func failedWords(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d failed", n)
}

// nodeLine is one node's line: "- `cp-01`: cordon 0.1s, drain 2.0s, ...".
func nodeLine(node string, steps []Step) string {
	var b strings.Builder
	b.WriteString("- `" + strings.ReplaceAll(clean(node), "`", "'") + "`")
	for _, s := range steps {
		if s.Batch > 0 {
			fmt.Fprintf(&b, " (batch %d, in parallel)", s.Batch)
			break
		}
	}
	b.WriteString(": ")
	for i, s := range steps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(stepText(s, false))
	}
	return cutLine(b.String())
}

// clusterLine sums up the steps of the whole cluster, naming those that
// failed or did not finish.
func clusterLine(steps []Step) string {
	var total time.Duration
	var bad []string
	for _, s := range steps {
		total += s.Duration
		if s.Err != "" || s.Unfinished {
			bad = append(bad, stepText(s, true))
		}
	}
	line := fmt.Sprintf("- the whole cluster: %s (health gates, kube-proxy, networks, state), %s in all",
		plural(len(steps), "step", "steps"), StepDuration(total))
	if len(bad) > 0 {
		line += "; " + strings.Join(bad, ", ")
	}
	return cutLine(line)
}

// stepText is one step: its name and duration, and how it ended when it
// did not succeed. withResource names its resource too.
func stepText(s Step, withResource bool) string {
	name := mdEscape(s.Name)
	if withResource && !strings.Contains(s.Name, s.Resource.Name) {
		name += " of " + mdEscape(s.Resource.String())
	}
	switch {
	case s.Unfinished:
		return name + " **did not finish** (ran " + StepDuration(s.Duration) + ")"
	case s.Err != "":
		line, _, _ := strings.Cut(s.Err, "\n")
		return name + " **failed** after " + StepDuration(s.Duration) + ": " + MarkdownText(line, maxStepErr)
	}
	return name + " " + StepDuration(s.Duration)
}

// cutLine bounds a line to maxStepsLine bytes.
func cutLine(s string) string {
	if len(s) <= maxStepsLine {
		return s
	}
	n := maxStepsLine
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	// A cut inside a code span or emphasis would leave it open: drop
	// back to the last step boundary.
	if i := strings.LastIndex(s[:n], ", "); i > 0 {
		n = i
	}
	return s[:n] + ", …"
}

// StepDuration writes how long a step took, briefly: "<0.1s", "0.4s",
// "2.5s", "14s", "3m8s".
func StepDuration(d time.Duration) string {
	switch {
	case d < 100*time.Millisecond:
		return "<0.1s"
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}
