package plan

import (
	"fmt"
	"strings"
)

// maxSummary is the longest Summary, the safe length of a commit status
// description.
const maxSummary = 140

// Counts tallies a plan's changes by what they do.
type Counts struct {
	// Create counts ActionCreate changes.
	Create int
	// Update counts changes made in place to something that exists:
	// ActionUpdate and ActionApplyConfig.
	Update int
	// Replace counts ActionReplace changes. A replacement is counted here
	// only, not as a create and a delete.
	Replace int
	// Delete counts ActionDelete changes.
	Delete int
	// Upgrade counts ActionUpgradeTalos and ActionUpgradeKubernetes changes.
	Upgrade int
	// Bootstrap counts ActionBootstrap changes.
	Bootstrap int
	// Wait counts ActionWait changes: gates that wait for a condition.
	Wait int
	// Drain counts ActionDrain changes and Reset ActionReset changes.
	Drain, Reset int
	// Restart counts ActionRestart changes.
	Restart int
	// Refused counts the plan's refusals (every ActionRefuse change added
	// with Add is among them).
	Refused int
}

// Counts tallies the plan's changes and refusals. Changes with an unknown
// action are not counted. A nil plan gives zero counts.
func (p *Plan) Counts() Counts {
	var n Counts
	if p == nil {
		return n
	}
	for _, c := range p.Changes {
		switch c.Action {
		case ActionCreate:
			n.Create++
		case ActionUpdate, ActionApplyConfig:
			n.Update++
		case ActionReplace:
			n.Replace++
		case ActionDelete:
			n.Delete++
		case ActionUpgradeTalos, ActionUpgradeKubernetes:
			n.Upgrade++
		case ActionBootstrap:
			n.Bootstrap++
		case ActionWait:
			n.Wait++
		case ActionDrain:
			n.Drain++
		case ActionReset:
			n.Reset++
		case ActionRestart:
			n.Restart++
		}
	}
	n.Refused = len(p.Refusals)
	return n
}

// Summary returns a one-line status of the plan, at most 140 characters,
// fit for a commit status description:
//
//	+<create> ~<update> -<delete>[, N replacement(s)][, N upgrade(s)][, N bootstrap(s)][, N wait(s)][, N refused][, N warning(s)]
//
// for example "+2 ~1 -0, 1 upgrade, 1 refused", with ", incomplete (N
// facts not read)" after the counts when part of the cluster could not be
// read. An empty plan gives "no changes", or "incomplete (...)" when it is
// incomplete, followed by its warnings if it has any.
func (p *Plan) Summary() string {
	var parts []string
	var incomplete string
	if p != nil && p.Incomplete {
		incomplete = fmt.Sprintf("incomplete (%s not read)", plural(len(p.IncompleteReasons), "fact", "facts"))
	}
	switch {
	case incomplete != "" && p.Empty():
		parts = append(parts, incomplete)
	case p.Empty():
		parts = append(parts, "no changes")
	default:
		n := p.Counts()
		parts = append(parts, fmt.Sprintf("+%d ~%d -%d", n.Create, n.Update, n.Delete))
		parts = appendCount(parts, n.Replace, "replacement", "replacements")
		parts = appendCount(parts, n.Upgrade, "upgrade", "upgrades")
		parts = appendCount(parts, n.Bootstrap, "bootstrap", "bootstraps")
		parts = appendCount(parts, n.Drain, "drain", "drains")
		parts = appendCount(parts, n.Reset, "reset", "resets")
		parts = appendCount(parts, n.Restart, "restart", "restarts")
		parts = appendCount(parts, n.Wait, "wait", "waits")
		parts = appendCount(parts, n.Refused, "refused", "refused")
		if incomplete != "" {
			parts = append(parts, incomplete)
		}
	}
	if p != nil {
		parts = appendCount(parts, len(p.Warnings), "warning", "warnings")
	}
	s := strings.Join(parts, ", ")
	if len(s) > maxSummary {
		s = s[:maxSummary]
	}
	return s
}

// appendCount appends "n noun" to parts when n is not zero.
func appendCount(parts []string, n int, one, many string) []string {
	switch {
	case n == 0:
		return parts
	case n == 1:
		return append(parts, "1 "+one)
	default:
		return append(parts, fmt.Sprintf("%d %s", n, many))
	}
}

// plural returns "1 one" or "n many".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
