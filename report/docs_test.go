package report_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/report"
)

// TestDocsExamples checks that every JSON example in docs/plan-json.md is a
// valid plan and exactly what JSON prints for it.
func TestDocsExamples(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/plan-json.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(doc), "```json\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("no JSON examples found")
	}
	for i, block := range blocks {
		example, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatalf("example %d is not closed", i)
		}
		var p plan.Plan
		dec := json.NewDecoder(strings.NewReader(example))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("example %d: %v", i, err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("example %d: %v", i, err)
		}
		var b bytes.Buffer
		if err := report.JSON(&b, &p); err != nil {
			t.Fatal(err)
		}
		if b.String() != example {
			t.Errorf("example %d differs from the rendered plan:\n%s", i, b.String())
		}
	}
}
