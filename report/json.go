package report

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// JSON writes the plan as indented JSON in the versioned schema documented
// in docs/plan-json.md, followed by a newline. Changes are in sorted order,
// and changes, warnings and refusals are arrays even when empty. Characters
// such as '<' and '&' are written as they are, not as \u escapes.
func JSON(w io.Writer, p *plan.Plan) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p.Sorted()); err != nil {
		return fmt.Errorf("writing json plan: %w", err)
	}
	return nil
}
