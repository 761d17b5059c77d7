package gitsync_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/taloscluster/taloscluster/gitsync"
)

func TestTreeReadsTwoCommitsConcurrently(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("clusters/c%02d/cluster.yaml", i)] = fmt.Sprintf("name: c%02d\nversion: 1\n", i)
	}
	o.write(files)
	c1 := o.commit("v1")
	for p := range files {
		files[p] += "version: 2\n"
	}
	o.write(files)
	c2 := o.commit("v2")
	o.pushMain()
	r := open(t, ctx, gitsync.Options{URL: o.bare})

	// A fetch that imports a packfile runs alongside the readers.
	o.write(map[string]string{"clusters/new/cluster.yaml": "name: new\n"})
	c3 := o.commit("v3")
	o.pushMain()

	want := func(commit string, i int) string {
		s := fmt.Sprintf("name: c%02d\nversion: 1\n", i)
		if commit == c2 {
			s += "version: 2\n"
		}
		return s
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	wg.Go(func() {
		if h, err := r.Fetch(ctx, nil); err != nil || h.Default != c3 {
			errs <- fmt.Errorf("Fetch = %+v, %v; want main at %s", h, err, c3)
		}
	})
	for g := range 16 {
		wg.Go(func() {
			commit := []string{c1, c2}[g%2]
			fsys, err := r.Tree(commit)
			if err != nil {
				errs <- err
				return
			}
			for i := range 20 {
				name := fmt.Sprintf("clusters/c%02d/cluster.yaml", i)
				b, err := fs.ReadFile(fsys, name)
				if err != nil {
					errs <- err
					return
				}
				if string(b) != want(commit, i) {
					errs <- fmt.Errorf("%s at %s = %q", name, commit, b)
					return
				}
				f, err := fsys.Open(name)
				if err != nil {
					errs <- err
					return
				}
				b, err = io.ReadAll(f)
				f.Close()
				if err != nil || string(b) != want(commit, i) {
					errs <- fmt.Errorf("Open+Read %s at %s = %q, %v", name, commit, b, err)
					return
				}
				if _, err := fs.Stat(fsys, name); err != nil {
					errs <- err
					return
				}
			}
			if list, err := fs.ReadDir(fsys, "clusters"); err != nil || len(list) != 20 {
				errs <- fmt.Errorf("ReadDir(clusters) = %d entries, %v", len(list), err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestTreeNeverFollowsSymlinks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.write(map[string]string{"clusters/a/cluster.yaml": "name: a\n"})
	o.symlink("clusters/a/link.yaml", "cluster.yaml")
	o.symlink("clusters/l", "a")
	o.symlink("clusters/a/passwd", "/etc/passwd")
	o.git(o.work, "add", "-A")
	// A submodule entry (gitlink) with nothing checked out.
	o.git(o.work, "update-index", "--add", "--cacheinfo",
		"160000,1111111111111111111111111111111111111111,clusters/sub")
	o.git(o.work, "commit", "-q", "-m", "links")
	c := o.git(o.work, "rev-parse", "HEAD")
	o.pushMain()
	r := open(t, ctx, gitsync.Options{URL: o.bare})
	fsys, err := r.Tree(c)
	if err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"clusters/a/link.yaml", "clusters/l", "clusters/a/passwd"} {
		fi, err := fs.Stat(fsys, name)
		if err != nil {
			t.Fatalf("Stat(%s): %v", name, err)
		}
		if fi.Mode().Type() != fs.ModeSymlink || fi.Mode().IsRegular() || fi.IsDir() {
			t.Errorf("Stat(%s).Mode() = %v, want a symlink", name, fi.Mode())
		}
		if _, err := fs.ReadFile(fsys, name); !errors.Is(err, gitsync.ErrSymlink) {
			t.Errorf("ReadFile(%s): err = %v, want ErrSymlink", name, err)
		}
		if _, err := fsys.Open(name); !errors.Is(err, gitsync.ErrSymlink) {
			t.Errorf("Open(%s): err = %v, want ErrSymlink", name, err)
		}
	}
	if _, err := fs.ReadFile(fsys, "clusters/l/cluster.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("reading through a linked directory: err = %v, want ErrNotExist", err)
	}
	if target, err := fs.ReadLink(fsys, "clusters/a/passwd"); err != nil || target != "/etc/passwd" {
		t.Errorf("ReadLink = %q, %v", target, err)
	}
	if _, err := fs.ReadLink(fsys, "clusters/a/cluster.yaml"); err == nil {
		t.Error("ReadLink of a regular file succeeded")
	}
	if fi, err := fs.Lstat(fsys, "clusters/l"); err != nil || fi.Mode().Type() != fs.ModeSymlink {
		t.Errorf("Lstat(clusters/l) = %v, %v", fi, err)
	}

	// ReadDir reports links by type and leaves the submodule out.
	list, err := fs.ReadDir(fsys, "clusters")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range list {
		got = append(got, fmt.Sprintf("%s %v", e.Name(), e.Type()))
	}
	if want := []string{"a d---------", "l L---------"}; !slices.Equal(got, want) {
		t.Errorf("ReadDir(clusters) = %q, want %q", got, want)
	}
	if _, err := fs.Stat(fsys, "clusters/sub"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(submodule): err = %v, want ErrNotExist", err)
	}

	// Walking never descends into a link.
	var walked []string
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		walked = append(walked, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".", "clusters", "clusters/a", "clusters/a/cluster.yaml", "clusters/a/link.yaml", "clusters/a/passwd", "clusters/l"}
	if !slices.Equal(walked, want) {
		t.Errorf("WalkDir = %q, want %q", walked, want)
	}
}

func TestTreeFSConformance(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.write(map[string]string{
		"README.md":                      "# clusters\n",
		"clusters/a/cluster.yaml":        "name: a\n",
		"clusters/a/patches/p1.yaml":     "machine: {}\n",
		"clusters/a-b/cluster.yaml":      "name: a-b\n", // sorts before "a/" in git's order
		"clusters/empty-ish/.keep":       "",
		"hack/run.sh":                    "#!/bin/sh\n",
		"clusters/a/patches/nested/x.md": "x\n",
	})
	if err := os.Chmod(filepath.Join(o.work, "hack", "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := o.commit("tree")
	o.pushMain()
	r := open(t, ctx, gitsync.Options{URL: o.bare})
	fsys, err := r.Tree(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(fsys, "README.md", "clusters/a/cluster.yaml", "clusters/a/patches/nested/x.md", "hack/run.sh"); err != nil {
		t.Fatal(err)
	}

	fi, err := fs.Stat(fsys, "hack/run.sh")
	if err != nil || fi.Mode() != 0o755 || fi.Size() != int64(len("#!/bin/sh\n")) {
		t.Fatalf("Stat(hack/run.sh) = %v, %v", fi, err)
	}
	if fi, err := fs.Stat(fsys, "clusters/a/cluster.yaml"); err != nil || fi.Mode() != 0o644 {
		t.Fatalf("Stat(cluster.yaml) = %v, %v", fi, err)
	}

	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"missing file", func() error { _, err := fs.ReadFile(fsys, "nope.yaml"); return err }, fs.ErrNotExist},
		{"path through a file", func() error { _, err := fs.Stat(fsys, "README.md/x"); return err }, fs.ErrNotExist},
		{"parent escape", func() error { _, err := fsys.Open("../etc/passwd"); return err }, fs.ErrInvalid},
		{"absolute path", func() error { _, err := fsys.Open("/etc/passwd"); return err }, fs.ErrInvalid},
		{"read a directory", func() error { _, err := fs.ReadFile(fsys, "clusters"); return err }, nil},
		{"list a file", func() error { _, err := fs.ReadDir(fsys, "README.md"); return err }, nil},
	} {
		err := tc.call()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		var pe *fs.PathError
		if !errors.As(err, &pe) {
			t.Errorf("%s: err = %T %v, want *fs.PathError", tc.name, err, err)
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}

	if _, err := r.Tree("0123456789012345678901234567890123456789"); err == nil {
		t.Error("Tree of an unknown commit succeeded")
	}
	if _, err := r.Tree("no-such-ref"); err == nil {
		t.Error("Tree of an unknown revision succeeded")
	}
}
