package plan

import (
	"fmt"
	"hash/fnv"
	"slices"
)

// Differences lists how now differs from shown, the plan a person reviewed:
// steps and refusals that were added ("+ ...") or are gone ("- ..."), in
// now's order then shown's. Every attribute of every step and the
// fingerprint of its diff are compared too, so a step whose details changed
// appears as gone and added: a machine's create step carries the digest of
// its redacted config, its node labels and its provider tags, so a change
// to any byte that reaches a new node shows. Reasons and expectations are
// prose for a person (they may quote what was observed) and are left out.
// It returns nil when the two plans would do the same.
func Differences(shown, now *Plan) []string {
	a, b := lines(shown), lines(now)
	var out []string
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "- "+l)
		}
	}
	return out
}

// lines renders the parts of a plan that decide what converge does.
func lines(p *Plan) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, c := range p.Changes {
		l := c.Step()
		for _, a := range c.Attributes {
			l += " " + a.Key + "=" + a.Value
		}
		if c.Diff != "" {
			l += " (with a config diff)"
			l += " #" + shortHash(c.Diff)
		}
		out = append(out, l)
	}
	for _, r := range p.Refusals {
		out = append(out, "refused "+r.Resource.String()+": "+r.Reason)
	}
	return out
}

// shortHash is a small stable fingerprint of a text.
func shortHash(s string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return fmt.Sprintf("%08x", h.Sum32())
}
