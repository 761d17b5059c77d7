package report_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/report"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// renderers maps a golden file extension to a renderer.
var renderers = map[string]func(*plan.Plan) (string, error){
	"text": func(p *plan.Plan) (string, error) {
		var b bytes.Buffer
		err := report.Text(&b, p)
		return b.String(), err
	},
	"md": func(p *plan.Plan) (string, error) {
		return report.Markdown(p), nil
	},
	"json": func(p *plan.Plan) (string, error) {
		var b bytes.Buffer
		err := report.JSON(&b, p)
		return b.String(), err
	},
}

func TestGolden(t *testing.T) {
	t.Parallel()
	for name, fixture := range fixtures {
		for ext, render := range renderers {
			t.Run(name+"."+ext, func(t *testing.T) {
				t.Parallel()
				p := fixture()
				before := fixture()
				got, err := render(p)
				if err != nil {
					t.Fatalf("rendering: %v", err)
				}
				if !reflect.DeepEqual(p, before) {
					t.Error("rendering changed the plan")
				}
				again, err := render(p)
				if err != nil || again != got {
					t.Errorf("second rendering differs (err %v)", err)
				}
				golden(t, filepath.Join("testdata", name+"."+ext+".golden"), got)
			})
		}
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run go test ./report -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test ./report -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestNilPlan(t *testing.T) {
	t.Parallel()
	for ext, render := range renderers {
		t.Run(ext, func(t *testing.T) {
			t.Parallel()
			got, err := render(nil)
			if err != nil {
				t.Fatalf("rendering nil plan: %v", err)
			}
			if got == "" {
				t.Error("nil plan rendered as nothing")
			}
		})
	}
}

func TestJSONShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		plan *plan.Plan
	}{
		{"nil", nil},
		{"zero", &plan.Plan{Cluster: "edge"}},
		{"empty", emptyPlan()},
		{"first build", firstBuildPlan()},
		{"day two", dayTwoPlan()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := report.JSON(&b, tt.plan); err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, b.String())
			}
			if v, ok := doc["version"].(float64); !ok || v != plan.SchemaVersion {
				t.Errorf("version = %v, want %d", doc["version"], plan.SchemaVersion)
			}
			for _, key := range []string{"changes", "warnings", "refusals"} {
				if _, ok := doc[key].([]any); !ok {
					t.Errorf("%s = %#v, want an array", key, doc[key])
				}
			}
			var back plan.Plan
			if err := json.Unmarshal(b.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if err := back.Validate(); err != nil {
				t.Errorf("rendered plan does not validate: %v", err)
			}
			if want := tt.plan.Sorted(); !reflect.DeepEqual(&back, want) {
				t.Errorf("round trip changed the plan:\n got %+v\nwant %+v", back, want)
			}
		})
	}
}

func TestEmptyPlanSaysNothingChanges(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := report.Text(&b, emptyPlan()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "No changes") {
		t.Errorf("text for an empty plan does not say so:\n%s", b.String())
	}
	if md := report.Markdown(emptyPlan()); !strings.Contains(md, "no changes") || strings.Contains(md, "<details>") {
		t.Errorf("markdown for an empty plan:\n%s", md)
	}
	b.Reset()
	if err := report.JSON(&b, emptyPlan()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"changes": []`) {
		t.Errorf("json for an empty plan has no empty changes array:\n%s", b.String())
	}
}

func TestMarkdownRefusalOutsideFold(t *testing.T) {
	t.Parallel()
	md := report.Markdown(dayTwoPlan())
	fold := strings.Index(md, "<details>")
	caution := strings.Index(md, "[!CAUTION]")
	if fold < 0 || caution < 0 || caution > fold {
		t.Errorf("refusal alert missing or inside the fold (alert at %d, fold at %d):\n%s", caution, fold, md)
	}
	if first := strings.SplitN(md, "\n", 2)[0]; !strings.Contains(first, "edge") || !strings.Contains(first, "to create") {
		t.Errorf("first line lacks cluster and counts: %q", first)
	}
}

func TestMarkdownEscaping(t *testing.T) {
	t.Parallel()
	md := report.Markdown(hostilePlan())
	checkMarkdownSafe(t, md)
	if strings.Contains(md, "\x1b") {
		t.Error("markdown contains a raw escape character")
	}
	if !strings.Contains(md, "````diff\n") {
		t.Errorf("diff containing a fence is not in a longer fence:\n%s", md)
	}
}

func TestTextEscaping(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := report.Text(&b, hostilePlan()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "\x1b") {
		t.Error("text contains a raw escape character")
	}
	if !strings.Contains(out, `line one\nline two\x1b[31m red`) {
		t.Errorf("control characters not escaped on one line:\n%s", out)
	}
}

type failingWriter struct{}

var errWrite = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errWrite }

func TestWriteErrors(t *testing.T) {
	t.Parallel()
	for name, write := range map[string]func() error{
		"text": func() error { return report.Text(failingWriter{}, firstBuildPlan()) },
		"json": func() error { return report.JSON(failingWriter{}, firstBuildPlan()) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := write(); !errors.Is(err, errWrite) {
				t.Errorf("error = %v, want it to wrap %v", err, errWrite)
			}
		})
	}
}

func FuzzMarkdownEscaping(f *testing.F) {
	f.Add("edge", "edge-worker-01", "new machine", "8 GB")
	f.Add("a|b", "<img src=x>", "`x` | **y**", "- 1. #")
	f.Add("\\", "\\|", "\\<", "\n|")
	f.Fuzz(func(t *testing.T, cluster, name, reason, value string) {
		p := plan.New(cluster)
		p.Add(plan.Change{
			Phase:      plan.PhaseCompute,
			Action:     plan.ActionCreate,
			Resource:   plan.Resource{Kind: plan.KindMachine, Name: name},
			Reason:     reason,
			Attributes: []plan.Attribute{{Key: "k", Value: value}},
		})
		p.Warn(reason)
		p.Refuse(plan.Resource{Kind: plan.KindMachine, Name: name}, reason)
		checkMarkdownSafe(t, report.Markdown(p))
	})
}

// checkMarkdownSafe checks that the only raw HTML in md is the renderer's
// own fold, that every table row has exactly its six cell separators, and
// that every line outside code blocks starts with structure the renderer
// wrote.
func checkMarkdownSafe(t *testing.T, md string) {
	t.Helper()
	ownTags := []string{"<details>", "</details>", "<summary>", "</summary>"}
	fence := ""
	for _, line := range strings.Split(md, "\n") {
		if fence != "" {
			if line == fence {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(line, "```") {
			fence = strings.TrimSuffix(line, "diff")
			continue
		}
		rest := line
		for _, tag := range ownTags {
			rest = strings.ReplaceAll(rest, tag, "")
		}
		for i := 0; i < len(rest); i++ {
			if rest[i] == '<' && !escaped(rest, i) {
				t.Errorf("unescaped '<' in line %q", line)
				break
			}
		}
		if strings.HasPrefix(line, "|") {
			if n := countUnescaped(line, '|'); n != 6 {
				t.Errorf("table row has %d cell separators, want 6: %q", n, line)
			}
		}
		if !allowedLineStart(line) {
			t.Errorf("line starts with unexpected structure: %q", line)
		}
	}
	if fence != "" {
		t.Errorf("code block %q never closed", fence)
	}
}

func allowedLineStart(line string) bool {
	if line == "" {
		return true
	}
	for _, prefix := range []string{"**", "> ", "<details>", "</details>", "#### ", "| ", "- ", "```"} {
		if strings.HasPrefix(line, prefix) {
			if prefix == "- " {
				rest := line[2:]
				if rest != "" && strings.ContainsAny(rest[:1], "-+*#>=") {
					return false
				}
				digits := strings.TrimLeft(rest, "0123456789")
				return len(digits) == len(rest) || digits == "" || (digits[0] != '.' && digits[0] != ')')
			}
			return true
		}
	}
	return strings.HasPrefix(line, "Diff of ")
}

func escaped(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

func countUnescaped(s string, c byte) int {
	n := 0
	inCode := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '`' && !escaped(s, i):
			inCode = !inCode
		case s[i] == c && !escaped(s, i) && !inCode:
			n++
		}
	}
	return n
}
