package forge

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// errPathConflict reports a path that would be both a file and a
// directory in one tree.
var errPathConflict = errors.New("a path is both a file and a directory")

// openStorage opens the bare repository at dir. Storages are opened per
// operation, so what git http-backend wrote meanwhile is always seen.
func openStorage(dir string) *filesystem.Storage {
	return filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
}

// treeEntry is a file of a flattened tree.
type treeEntry struct {
	hash plumbing.Hash
	mode filemode.FileMode
}

// refHash returns the hash a reference points to, or the zero hash when it
// does not exist.
func refHash(st storer.ReferenceStorer, name plumbing.ReferenceName) (plumbing.Hash, error) {
	ref, err := storer.ResolveReference(st, name)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("reading %s: %w", name, err)
	}
	return ref.Hash(), nil
}

// treeFiles flattens the tree of a commit into its files by path. The zero
// hash is the empty commit.
func treeFiles(st storer.EncodedObjectStorer, commit plumbing.Hash) (map[string]treeEntry, error) {
	files := map[string]treeEntry{}
	if commit.IsZero() {
		return files, nil
	}
	c, err := object.GetCommit(st, commit)
	if err != nil {
		return nil, fmt.Errorf("reading commit %s: %w", commit, err)
	}
	t, err := object.GetTree(st, c.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("reading the tree of %s: %w", commit, err)
	}
	w := object.NewTreeWalker(t, true, nil)
	defer w.Close()
	for {
		name, e, err := w.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("walking the tree of %s: %w", commit, err)
		}
		if e.Mode == filemode.Dir {
			continue
		}
		files[name] = treeEntry{hash: e.Hash, mode: e.Mode}
	}
}

// dirNode is a directory being assembled into tree objects.
type dirNode struct {
	files map[string]treeEntry
	dirs  map[string]*dirNode
}

// writeTree stores the tree objects for a flat map of files and returns
// the root tree's hash.
func writeTree(st storer.EncodedObjectStorer, files map[string]treeEntry) (plumbing.Hash, error) {
	root := &dirNode{files: map[string]treeEntry{}, dirs: map[string]*dirNode{}}
	for p, e := range files {
		parts := strings.Split(p, "/")
		d := root
		for _, part := range parts[:len(parts)-1] {
			if _, ok := d.files[part]; ok {
				return plumbing.ZeroHash, fmt.Errorf("writing a tree with %q: %w", p, errPathConflict)
			}
			sub := d.dirs[part]
			if sub == nil {
				sub = &dirNode{files: map[string]treeEntry{}, dirs: map[string]*dirNode{}}
				d.dirs[part] = sub
			}
			d = sub
		}
		name := parts[len(parts)-1]
		if _, ok := d.dirs[name]; ok {
			return plumbing.ZeroHash, fmt.Errorf("writing a tree with %q: %w", p, errPathConflict)
		}
		d.files[name] = e
	}
	return root.write(st)
}

func (d *dirNode) write(st storer.EncodedObjectStorer) (plumbing.Hash, error) {
	var entries []object.TreeEntry
	for name, sub := range d.dirs {
		h, err := sub.write(st)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h})
	}
	for name, e := range d.files {
		if _, ok := d.dirs[name]; ok {
			return plumbing.ZeroHash, fmt.Errorf("writing a tree with %q: %w", name, errPathConflict)
		}
		entries = append(entries, object.TreeEntry{Name: name, Mode: e.mode, Hash: e.hash})
	}
	// git orders tree entries by name, a directory's name compared as if
	// it ended with a slash.
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(entries, func(i, j int) bool { return key(entries[i]) < key(entries[j]) })
	obj := st.NewEncodedObject()
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("encoding a tree: %w", err)
	}
	h, err := st.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("storing a tree: %w", err)
	}
	return h, nil
}

// writeBlob stores a blob.
func writeBlob(st storer.EncodedObjectStorer, content []byte) (plumbing.Hash, error) {
	obj := st.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(content)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("opening a blob: %w", err)
	}
	if _, err := w.Write(content); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("writing a blob: %w", err)
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("closing a blob: %w", err)
	}
	h, err := st.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("storing a blob: %w", err)
	}
	return h, nil
}

// writeCommit stores a commit of tree with the given parents.
func writeCommit(st storer.EncodedObjectStorer, tree plumbing.Hash, parents []plumbing.Hash, msg string, author, committer object.Signature) (plumbing.Hash, error) {
	c := &object.Commit{
		Author:       author,
		Committer:    committer,
		Message:      msg,
		TreeHash:     tree,
		ParentHashes: parents,
	}
	obj := st.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("encoding a commit: %w", err)
	}
	h, err := st.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("storing a commit: %w", err)
	}
	return h, nil
}

// threeWayMerge merges the trees of two commits file by file against
// their merge base: a path changed on one side only takes that side, a
// path changed the same way on both sides takes either, and a path changed
// differently on both sides is a conflict (there is no line-level merge).
// It returns the merged tree and the conflicting paths; when there are
// conflicts the tree is the zero hash.
func threeWayMerge(st storer.EncodedObjectStorer, ours, theirs plumbing.Hash) (plumbing.Hash, []string, error) {
	oc, err := object.GetCommit(st, ours)
	if err != nil {
		return plumbing.ZeroHash, nil, fmt.Errorf("reading commit %s: %w", ours, err)
	}
	tc, err := object.GetCommit(st, theirs)
	if err != nil {
		return plumbing.ZeroHash, nil, fmt.Errorf("reading commit %s: %w", theirs, err)
	}
	bases, err := oc.MergeBase(tc)
	if err != nil {
		return plumbing.ZeroHash, nil, fmt.Errorf("finding the merge base of %s and %s: %w", ours, theirs, err)
	}
	var base plumbing.Hash
	if len(bases) > 0 {
		base = bases[0].Hash
	}
	b, err := treeFiles(st, base)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	o, err := treeFiles(st, ours)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	t, err := treeFiles(st, theirs)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	paths := map[string]bool{}
	for _, m := range []map[string]treeEntry{b, o, t} {
		for p := range m {
			paths[p] = true
		}
	}
	merged := map[string]treeEntry{}
	var conflicts []string
	for p := range paths {
		bv, bok := b[p]
		ov, ook := o[p]
		tv, tok := t[p]
		switch {
		case ook == tok && ov == tv: // same on both sides
			if ook {
				merged[p] = ov
			}
		case ook == bok && ov == bv: // only theirs changed
			if tok {
				merged[p] = tv
			}
		case tok == bok && tv == bv: // only ours changed
			if ook {
				merged[p] = ov
			}
		default:
			conflicts = append(conflicts, p)
		}
	}
	if len(conflicts) > 0 {
		sort.Strings(conflicts)
		return plumbing.ZeroHash, conflicts, nil
	}
	tree, err := writeTree(st, merged)
	if errors.Is(err, errPathConflict) {
		return plumbing.ZeroHash, []string{"(a file and a directory of the same name)"}, nil
	}
	return tree, nil, err
}

// copyObjects copies the commit tip and everything it reaches that dst
// lacks from src into dst, the way a fork shares its objects with the
// repository it was forked from. A commit dst has is taken to have its
// whole history there too.
func copyObjects(dst, src storer.EncodedObjectStorer, tip plumbing.Hash) error {
	var missing []*object.Commit
	seen := map[plumbing.Hash]bool{}
	stack := []plumbing.Hash{tip}
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[h] {
			continue
		}
		seen[h] = true
		if dst.HasEncodedObject(h) == nil {
			continue
		}
		c, err := object.GetCommit(src, h)
		if err != nil {
			return fmt.Errorf("reading commit %s: %w", h, err)
		}
		missing = append(missing, c)
		stack = append(stack, c.ParentHashes...)
	}
	// Oldest first, and every commit after its tree, so that an
	// interrupted copy never leaves a commit whose history is missing.
	for i := len(missing) - 1; i >= 0; i-- {
		c := missing[i]
		if err := copyTree(dst, src, c.TreeHash); err != nil {
			return err
		}
		if err := copyObject(dst, src, c.Hash); err != nil {
			return err
		}
	}
	return nil
}

func copyTree(dst, src storer.EncodedObjectStorer, h plumbing.Hash) error {
	if dst.HasEncodedObject(h) == nil {
		return nil
	}
	t, err := object.GetTree(src, h)
	if err != nil {
		return fmt.Errorf("reading tree %s: %w", h, err)
	}
	for _, e := range t.Entries {
		switch e.Mode {
		case filemode.Dir:
			if err := copyTree(dst, src, e.Hash); err != nil {
				return err
			}
		case filemode.Submodule:
		default:
			if dst.HasEncodedObject(e.Hash) != nil {
				if err := copyObject(dst, src, e.Hash); err != nil {
					return err
				}
			}
		}
	}
	return copyObject(dst, src, h)
}

func copyObject(dst, src storer.EncodedObjectStorer, h plumbing.Hash) error {
	obj, err := src.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		return fmt.Errorf("reading object %s: %w", h, err)
	}
	if _, err := dst.SetEncodedObject(obj); err != nil {
		return fmt.Errorf("storing object %s: %w", h, err)
	}
	return nil
}

// cleanPath validates a repository file path and returns it in canonical
// form.
func cleanPath(p string) (string, error) {
	c := path.Clean(strings.TrimPrefix(p, "/"))
	if p == "" || c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("invalid file path %q", p)
	}
	for _, part := range strings.Split(c, "/") {
		if part == ".git" {
			return "", fmt.Errorf("invalid file path %q", p)
		}
	}
	return c, nil
}

// isAncestor reports whether commit a is an ancestor of (or equal to) b.
func isAncestor(st storer.EncodedObjectStorer, a, b plumbing.Hash) (bool, error) {
	if a == b {
		return true, nil
	}
	ac, err := object.GetCommit(st, a)
	if err != nil {
		return false, fmt.Errorf("reading commit %s: %w", a, err)
	}
	bc, err := object.GetCommit(st, b)
	if err != nil {
		return false, fmt.Errorf("reading commit %s: %w", b, err)
	}
	return ac.IsAncestor(bc)
}
