package check

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as the indented JSON of docs/check-json.md,
// with one trailing newline.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteText writes the report for a person: versions, nodes, cordons,
// warnings, then what needs attention and the verdict on the last line.
func WriteText(w io.Writer, r *Report) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "Cluster %s\n\nVersions\n", r.Cluster)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  COMPONENT\tPINNED\tLATEST PATCH\tLATEST SUPPORTED\tLATEST\tSTATUS")
	for _, c := range r.Components {
		if c.Unknown != "" {
			fmt.Fprintf(tw, "  %s\t%s\t?\t?\t?\tunknown\n", c.Name, c.Pinned)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Pinned, dash(c.LatestPatch), dash(c.LatestSupported), dash(c.Latest), componentStatus(c))
	}
	tw.Flush()
	for _, c := range r.Components {
		if c.Supported != nil {
			fmt.Fprintf(b, "  talos %s runs kubernetes %s to %s\n", r.Components[0].Pinned, c.Supported.From, c.Supported.To)
		}
	}
	for _, c := range r.Components {
		if c.Unknown != "" {
			fmt.Fprintf(b, "  %s: unknown: %s\n", c.Name, c.Unknown)
		}
		for _, n := range c.Notes {
			fmt.Fprintf(b, "  note: %s\n", n)
		}
	}

	b.WriteString("\n")
	if r.Scope != ScopeCluster {
		fmt.Fprintf(b, "Running cluster: not compared: %s\n", r.ScopeReason)
	} else {
		writeNodes(b, r)
	}

	if len(r.Plugins) > 0 {
		writePlugins(b, r.Plugins)
	}

	if len(r.Warnings) > 0 {
		b.WriteString("\nConfig warnings\n")
		for _, wn := range r.Warnings {
			fmt.Fprintf(b, "  warning: %s\n", wn)
		}
	}

	b.WriteString("\n")
	if len(r.Findings) == 0 {
		b.WriteString("OK: up to date and in sync, nothing needs attention\n")
	} else {
		b.WriteString("Needs attention\n")
		for _, f := range r.Findings {
			if f.Kind == KindIncomplete {
				continue
			}
			fmt.Fprintf(b, "  %s: %s\n", f.Kind, f.Message)
		}
		for _, reason := range r.IncompleteReasons {
			fmt.Fprintf(b, "  INCOMPLETE: %s\n", reason)
		}
		fmt.Fprintf(b, "NEEDS ATTENTION: %s\n", summary(r))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writePlugins lists the configured plugins and what a converge would do
// for each.
func writePlugins(b *strings.Builder, plugins []Plugin) {
	b.WriteString("\nPlugins (against cluster.yaml)\n")
	for _, p := range plugins {
		switch p.State {
		case StateInSync:
			fmt.Fprintf(b, "  %s: in sync\n", p.Name)
		case StateDrift:
			fmt.Fprintf(b, "  %s: drift, converge would make %s\n", p.Name, plural(len(p.Steps), "step"))
			for _, st := range p.Steps {
				fmt.Fprintf(b, "    %s\n", st)
			}
		default:
			fmt.Fprintf(b, "  %s: %s: %s\n", p.Name, p.State, p.Reason)
		}
	}
}

func writeNodes(b *strings.Builder, r *Report) {
	fmt.Fprintf(b, "Nodes (running against cluster.yaml)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tROLE\tTALOS\tKUBELET\tINSTALLER\tSCHEDULING")
	for _, n := range r.Nodes {
		sched := "enabled"
		if n.Cordoned {
			sched = "cordoned"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Role, versionCell(n.Talos), versionCell(n.Kubelet), stateCell(n.Installer), sched)
	}
	tw.Flush()
	if api := r.KubernetesAPI; api != nil {
		fmt.Fprintf(b, "  kubernetes API server: %s\n", factLine(*api))
	}
	for _, n := range r.Nodes {
		for _, f := range []struct {
			what string
			fact Fact
		}{{"talos", n.Talos}, {"kubelet", n.Kubelet}, {"installer", n.Installer}} {
			// Version drift is in the table above and among the findings;
			// details are shown for the rest (unknown facts, another
			// schematic with the images in full).
			if f.fact.State == StateInSync || (f.fact.State == StateDrift && (f.fact.Reason == "" || strings.HasPrefix(f.fact.Reason, versionDiffers))) {
				continue
			}
			fmt.Fprintf(b, "  %s: %s: %s\n", n.Name, f.what, factLine(f.fact))
		}
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(b, "  missing (in cluster.yaml, not created): %s\n", strings.Join(r.Missing, ", "))
	}
	if len(r.Cordoned) > 0 {
		fmt.Fprintf(b, "  cordoned: %s\n", strings.Join(r.Cordoned, ", "))
	} else {
		b.WriteString("  cordoned: none\n")
	}
}

func componentStatus(c Component) string {
	switch {
	case c.Update != nil && c.Update.Kind == UpdatePatch:
		return fmt.Sprintf("update to %s (%s behind)", c.Update.Version, plural(c.PatchesBehind, "patch release"))
	case c.Update != nil:
		return fmt.Sprintf("update to %s (next minor)", c.Update.Version)
	}
	return "up to date"
}

func versionCell(f Fact) string {
	switch f.State {
	case StateInSync:
		return f.Have
	case StateDrift:
		return fmt.Sprintf("%s (want %s)", orNone(f.Have), f.Want)
	}
	return "unknown"
}

func stateCell(f Fact) string {
	switch f.State {
	case StateInSync:
		return "in sync"
	case StateDrift:
		return "drift"
	}
	return "unknown"
}

func factLine(f Fact) string {
	switch f.State {
	case StateInSync:
		return "in sync (" + f.Have + ")"
	case StateDrift:
		s := fmt.Sprintf("drift: %s, want %s", orNone(f.Have), orNone(f.Want))
		if f.Reason != "" {
			s += " (" + f.Reason + ")"
		}
		return s
	}
	return "unknown: " + f.Reason
}

func summary(r *Report) string {
	counts := map[string]int{}
	drifted := map[string]bool{}
	plugins := 0
	for _, f := range r.Findings {
		counts[f.Kind]++
		switch {
		case f.Kind == KindDrift && strings.HasPrefix(f.Subject, pluginSubject):
			plugins++
		case f.Kind == KindDrift && f.Subject != apiSubject:
			drifted[f.Subject] = true
		}
	}
	var parts []string
	for _, k := range []struct{ kind, what string }{
		{KindUpdate, "update"}, {KindDrift, "drift"}, {KindCordon, "cordon"},
	} {
		if n := counts[k.kind]; n > 0 {
			if k.kind == KindDrift {
				if len(drifted) > 0 {
					parts = append(parts, "drift on "+plural(len(drifted), "machine"))
				}
				if slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Subject == apiSubject }) {
					parts = append(parts, "drift of the Kubernetes API server")
				}
				if plugins > 0 {
					parts = append(parts, "drift in "+plural(plugins, "plugin"))
				}
			} else {
				parts = append(parts, plural(n, k.what))
			}
		}
	}
	if r.Incomplete {
		parts = append(parts, "the check is incomplete")
	}
	return strings.Join(parts, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
