package agent_test

import (
	"slices"
	"testing"

	"github.com/taloscluster/taloscluster/agent"
)

func TestAffected(t *testing.T) {
	t.Parallel()
	dirs := []string{"clusters/a", "clusters/b", "clusters/b/inner"}
	cases := []struct {
		name    string
		changed []string
		want    []string
	}{
		{"file in a cluster", []string{"clusters/a/cluster.yaml"}, []string{"clusters/a"}},
		{"include in a cluster", []string{"clusters/b/metal.yaml", "README.md"}, []string{"clusters/b"}},
		{"nested cluster owns its files", []string{"clusters/b/inner/cluster.yaml"}, []string{"clusters/b/inner"}},
		{"prefix is not a parent", []string{"clusters/ab/cluster.yaml"}, nil},
		{"nothing relevant", []string{"docs/x.md"}, nil},
		{"two clusters", []string{"clusters/a/x", "clusters/b/y"}, []string{"clusters/a", "clusters/b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := agent.Affected(dirs, tc.changed)
			if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got := agent.Removed([]string{"a", "b"}, []string{"b"}); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Removed: %v", got)
	}
}
