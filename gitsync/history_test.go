package gitsync_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/taloscluster/taloscluster/gitsync"
)

func TestChangedPaths(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.write(map[string]string{
		"clusters/a/cluster.yaml":     "name: a\n",
		"clusters/a/patches/p.yaml":   "p: 1\n",
		"clusters/b/cluster.yaml":     "name: b\n",
		"clusters/old/cluster.yaml":   "name: old\n",
		"clusters/gone/cluster.yaml":  "name: gone\n",
		"clusters/gone/patches/x.yml": "x\n",
		"docs/readme.md":              "docs\n",
		"tools/run":                   "run\n",
	})
	base := o.commit("base")

	o.write(map[string]string{"clusters/a/cluster.yaml": "name: a\nnodes: 3\n"}) // modify
	modified := o.commit("modify a")

	o.write(map[string]string{"clusters/c/cluster.yaml": "name: c\n"}) // add
	added := o.commit("add c")

	o.remove("clusters/gone") // delete a directory
	deleted := o.commit("delete gone")

	o.git(o.work, "mv", "clusters/old", "clusters/new") // rename, content unchanged
	renamed := o.commit("rename old to new")

	if err := os.Chmod(filepath.Join(o.work, "tools", "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	modeChanged := o.commit("make run executable")

	o.remove("docs")
	o.write(map[string]string{"docs": "docs is a file now\n"}) // directory becomes a file
	dirToFile := o.commit("docs as a file")
	o.pushMain()
	r := open(t, ctx, gitsync.Options{URL: o.bare})

	for _, tc := range []struct {
		name     string
		from, to string
		want     []string
	}{
		{"modify", base, modified, []string{"clusters/a/cluster.yaml"}},
		{"add", modified, added, []string{"clusters/c/cluster.yaml"}},
		{"delete", added, deleted, []string{"clusters/gone/cluster.yaml", "clusters/gone/patches/x.yml"}},
		{"rename is delete plus add", deleted, renamed, []string{"clusters/new/cluster.yaml", "clusters/old/cluster.yaml"}},
		{"mode change", renamed, modeChanged, []string{"tools/run"}},
		{"directory becomes file", modeChanged, dirToFile, []string{"docs", "docs/readme.md"}},
		{"same commit", added, added, []string{}},
		{"backwards", added, base, []string{"clusters/a/cluster.yaml", "clusters/c/cluster.yaml"}},
		{"several commits", base, renamed, []string{
			"clusters/a/cluster.yaml", "clusters/c/cluster.yaml", "clusters/gone/cluster.yaml",
			"clusters/gone/patches/x.yml", "clusters/new/cluster.yaml", "clusters/old/cluster.yaml",
		}},
		{"from nothing", "", base, []string{
			"clusters/a/cluster.yaml", "clusters/a/patches/p.yaml", "clusters/b/cluster.yaml",
			"clusters/gone/cluster.yaml", "clusters/gone/patches/x.yml", "clusters/old/cluster.yaml",
			"docs/readme.md", "tools/run",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := r.ChangedPaths(ctx, tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("ChangedPaths = %q, want %q", got, tc.want)
			}
		})
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.ChangedPaths(canceled, "", base); !errors.Is(err, context.Canceled) {
		t.Fatalf("ChangedPaths with a canceled context: err = %v", err)
	}
}

func TestCommits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	c1 := o.commit("one")
	c2 := o.commit("two\n\nwith a body")
	// A side branch merged back: c3 on main, s1 on the side, then a merge.
	o.git(o.work, "checkout", "-q", "-b", "side")
	s1 := o.commit("side one")
	o.git(o.work, "checkout", "-q", "main")
	c3 := o.commit("three")
	o.git(o.work, "merge", "-q", "--no-ff", "-m", "Merge side", "side")
	m := o.git(o.work, "rev-parse", "HEAD")
	c4 := o.commit("four")
	o.pushMain()
	r := open(t, ctx, gitsync.Options{URL: o.bare})

	for _, tc := range []struct {
		name     string
		from, to string
		want     []string
	}{
		{"one commit", c1, c2, []string{c2}},
		{"over a merge", c2, c4, []string{c4, m, c3, s1}},
		{"from the side branch", s1, c4, []string{c4, m, c3}},
		{"from the merge", m, c4, []string{c4}},
		{"nothing new", c4, c4, nil},
		{"to is behind from", c4, c2, nil},
		{"whole history", "", c2, []string{c2, c1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := r.Commits(ctx, tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			var shas []string
			for _, c := range got {
				shas = append(shas, c.SHA)
			}
			if !slices.Equal(shas, tc.want) {
				t.Fatalf("Commits = %q, want %q", shas, tc.want)
			}
		})
	}

	got, err := r.Commits(ctx, c1, c2)
	if err != nil {
		t.Fatal(err)
	}
	if c := got[0]; c.Subject != "two" || c.Author != "Ada Author" || c.AuthorEmail != "ada@example.test" || c.When.IsZero() {
		t.Fatalf("Commits()[0] = %+v", c)
	}
}

func TestClusterDirs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.write(map[string]string{
		"cluster.yaml":                          "name: root\n",
		"clusters/prod/a/cluster.yaml":          "name: a\n",
		"clusters/prod/a/nested/cluster.yaml":   "name: nested\n",
		"clusters/prod/b/cluster.yaml":          "name: b\n",
		"clusters/prod/b/patches/x.yaml":        "x\n",
		"clusters/staging/s/cluster.yaml":       "name: s\n",
		"clusters/staging/notes/cluster.yml":    "not the marker\n",
		"clusters/staging/dir/cluster.yaml/x":   "a directory named cluster.yaml\n",
		"elsewhere/e/cluster.yaml":              "name: e\n",
		"clusters/staging/linked/real/file.txt": "x\n",
	})
	o.symlink("clusters/staging/linked/cluster.yaml", "../s/cluster.yaml")
	c := o.commit("layout")
	o.pushMain()
	r := open(t, ctx, gitsync.Options{URL: o.bare})

	for _, tc := range []struct {
		name  string
		roots []string
		want  []string
	}{
		{"one root", []string{"clusters"}, []string{"clusters/prod/a", "clusters/prod/a/nested", "clusters/prod/b", "clusters/staging/s"}},
		{"nested roots", []string{"clusters", "clusters/prod", "clusters/prod/a/"}, []string{"clusters/prod/a", "clusters/prod/a/nested", "clusters/prod/b", "clusters/staging/s"}},
		{"two roots", []string{"clusters/staging", "elsewhere"}, []string{"clusters/staging/s", "elsewhere/e"}},
		{"missing root", []string{"nope", "/clusters/prod/b"}, []string{"clusters/prod/b"}},
		{"repository root", []string{"."}, []string{".", "clusters/prod/a", "clusters/prod/a/nested", "clusters/prod/b", "clusters/staging/s", "elsewhere/e"}},
		{"no roots", nil, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The second answer is the first one kept: a caller that
			// changes what it got changes nothing kept.
			for range 2 {
				got, err := r.ClusterDirs(c, tc.roots)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("ClusterDirs(%q) = %q, want %q", tc.roots, got, tc.want)
				}
				if len(got) > 0 {
					got[0] = "changed by the caller"
				}
			}
		})
	}
	if _, err := r.ClusterDirs(c, []string{"../outside"}); err == nil {
		t.Fatal("a root leaving the repository was accepted")
	}
}

func TestPRChangesIgnoresLaterBaseChanges(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	o.write(map[string]string{"clusters/a/cluster.yaml": "a1", "clusters/b/cluster.yaml": "b1"})
	o.commit("base")
	o.pushMain()
	o.git(o.work, "checkout", "-q", "-b", "pr")
	o.write(map[string]string{"clusters/a/cluster.yaml": "a2"})
	prHead := o.commit("change a")
	o.openPR(1, prHead)
	o.git(o.work, "checkout", "-q", "main")
	o.write(map[string]string{"clusters/b/cluster.yaml": "b2"})
	mainHead := o.commit("change b on main")
	o.pushMain()
	r := open(t, t.Context(), gitsync.Options{URL: o.bare})
	if _, err := r.Fetch(t.Context(), []int{1}); err != nil {
		t.Fatal(err)
	}
	got, err := r.PRChanges(t.Context(), mainHead, prHead)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "clusters/a/cluster.yaml" {
		t.Fatalf("PR changes %v, want only clusters/a/cluster.yaml", got)
	}
}
