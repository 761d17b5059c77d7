package github_test

import (
	"strings"
	"testing"

	gh "github.com/taloscluster/taloscluster/report/github"
)

func TestComposeKeepsEveryCommentUnderTheLimit(t *testing.T) {
	t.Parallel()
	big := "```diff\n" + strings.Repeat("+ a line of a machine config diff ü\n", 6000) + "```\n" // ~220 KB
	cases := []struct {
		name     string
		sections []gh.Section
		comments int
	}{
		{"small", []gh.Section{{Cluster: "clusters/a", Summary: "+1 ~0 -0", Result: "planned", Body: "ok"}}, 1},
		{"one huge plan is cut with a link", []gh.Section{{Cluster: "clusters/a", Summary: "+1", Result: "planned", Body: big, FullURL: "https://agent/plans/1"}}, 1},
		{"many plans split", func() []gh.Section {
			var s []gh.Section
			for _, c := range []string{"a", "b", "c", "d", "e"} {
				s = append(s, gh.Section{Cluster: "clusters/" + c, Summary: "+1", Result: "planned", Body: strings.Repeat("x", 30000)})
			}
			return s
		}(), 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			comments := gh.Compose("**taloscluster plan** for abc123", tc.sections, 0)
			if len(comments) != tc.comments {
				t.Fatalf("%d comments, want %d", len(comments), tc.comments)
			}
			for i, c := range comments {
				if len(c) > gh.MaxCommentBytes {
					t.Fatalf("comment %d is %d bytes", i+1, len(c))
				}
				if i == 0 && !strings.HasPrefix(c, gh.Marker) {
					t.Fatalf("first comment lacks the marker")
				}
				if i > 0 && !strings.HasPrefix(c, gh.MarkerPart(i+1)) {
					t.Fatalf("comment %d lacks its part marker", i+1)
				}
				if strings.Count(c, "```")%2 != 0 {
					t.Fatalf("comment %d leaves a code fence open", i+1)
				}
			}
			if !strings.Contains(comments[0], "| `clusters/a` | planned |") {
				t.Fatal("no summary table")
			}
			if strings.Contains(tc.name, "link") && !strings.Contains(comments[0], "https://agent/plans/1") {
				t.Fatal("a cut plan has no link to the full plan")
			}
		})
	}
}

func TestStatusLimits(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("clusters/very-long-name/", 20)
	if c := gh.StatusContext("plan", long); len(c) > gh.MaxContext || !strings.HasPrefix(c, "taloscluster/plan: ") {
		t.Fatalf("context %q (%d bytes)", c, len(c))
	}
	if c := gh.StatusContext("converge", "clusters/a"); c != "taloscluster/converge: clusters/a" {
		t.Fatalf("context %q", c)
	}
	if d := gh.Description(strings.Repeat("é", 200) + "\nsecond line"); len(d) > gh.MaxDescription || strings.Contains(d, "second") {
		t.Fatalf("description %q (%d bytes)", d, len(d))
	}
}
