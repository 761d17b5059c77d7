package gitsync

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// ClusterFile is the file that marks a cluster directory.
const ClusterFile = "cluster.yaml"

// Commit summarises one commit for reports.
type Commit struct {
	// SHA is the full commit hash.
	SHA string
	// Subject is the first line of the message.
	Subject string
	// Author is the author's name.
	Author string
	// AuthorEmail is the author's email address.
	AuthorEmail string
	// When is the author time.
	When time.Time
	// Parent is the first parent's hash, "" for a root commit.
	Parent string
}

// ChangedPaths lists the paths of files (regular files, executables and
// symbolic links) that differ between the trees of commits from and to:
// added, modified, deleted, or changed in mode. A rename is a deletion of
// the old path and an addition of the new one. An empty from means every
// file in to. The result is sorted and slash-separated; submodules are
// ignored, as in Tree.
func (r *Repo) ChangedPaths(ctx context.Context, from, to string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	toTree, err := r.treeOf(to)
	if err != nil {
		return nil, err
	}
	var fromTree plumbing.Hash
	if from != "" {
		if fromTree, err = r.treeOf(from); err != nil {
			return nil, err
		}
	}
	set := map[string]struct{}{}
	if err := r.diffTrees(ctx, "", fromTree, toTree, set); err != nil {
		return nil, fmt.Errorf("comparing %q with %q: %w", from, to, err)
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// treeOf returns the tree hash of a commit. The caller holds r.mu.
func (r *Repo) treeOf(commit string) (plumbing.Hash, error) {
	h, err := r.resolve(commit)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	c, err := object.GetCommit(r.st, h)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("reading commit %s: %w", h, err)
	}
	return c.TreeHash, nil
}

// visibleEntries maps the visible entries of a tree by name; the zero hash
// is the empty tree. The caller holds r.mu.
func (r *Repo) visibleEntries(h plumbing.Hash) (map[string]object.TreeEntry, error) {
	m := map[string]object.TreeEntry{}
	if h.IsZero() {
		return m, nil
	}
	t, err := object.GetTree(r.st, h)
	if err != nil {
		return nil, err
	}
	for _, e := range t.Entries {
		if visible(e) {
			m[e.Name] = e
		}
	}
	return m, nil
}

// diffTrees adds to set the file paths that differ between trees a and b,
// skipping identical subtrees by hash. The caller holds r.mu.
func (r *Repo) diffTrees(ctx context.Context, prefix string, a, b plumbing.Hash, set map[string]struct{}) error {
	if a == b {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ea, err := r.visibleEntries(a)
	if err != nil {
		return err
	}
	eb, err := r.visibleEntries(b)
	if err != nil {
		return err
	}
	// side adds one side's entry: a file by path, a directory by recursion
	// against the empty tree.
	side := func(p string, e object.TreeEntry, fromSide bool) error {
		switch {
		case e.Mode != filemode.Dir:
			set[p] = struct{}{}
			return nil
		case fromSide:
			return r.diffTrees(ctx, p+"/", e.Hash, plumbing.ZeroHash, set)
		default:
			return r.diffTrees(ctx, p+"/", plumbing.ZeroHash, e.Hash, set)
		}
	}
	for name, x := range ea {
		p := prefix + name
		y, inB := eb[name]
		switch {
		case inB && x.Mode == y.Mode && x.Hash == y.Hash:
		case inB && x.Mode == filemode.Dir && y.Mode == filemode.Dir:
			if err := r.diffTrees(ctx, p+"/", x.Hash, y.Hash, set); err != nil {
				return err
			}
		default:
			if err := side(p, x, true); err != nil {
				return err
			}
			if inB {
				if err := side(p, y, false); err != nil {
					return err
				}
			}
		}
	}
	for name, y := range eb {
		if _, inA := ea[name]; inA {
			continue
		}
		if err := side(prefix+name, y, false); err != nil {
			return err
		}
	}
	return nil
}

// Commits lists the commits reachable from to and not from from, newest
// first by committer time, like "git log from..to". An empty from lists the
// whole history of to. As in git, the walk stops early by committer time,
// so heavy clock skew between commits can leave an ancestor of from in the
// result.
func (r *Repo) Commits(ctx context.Context, from, to string) ([]Commit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	toHash, err := r.resolve(to)
	if err != nil {
		return nil, err
	}
	w := &walk{r: r, flags: map[plumbing.Hash]uint8{}, parents: map[plumbing.Hash][]plumbing.Hash{}}
	if err := w.push(toHash, 0); err != nil {
		return nil, err
	}
	if from != "" {
		fromHash, err := r.resolve(from)
		if err != nil {
			return nil, err
		}
		if err := w.push(fromHash, flagUninteresting); err != nil {
			return nil, err
		}
	}
	found, err := w.run(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing commits %q..%q: %w", from, to, err)
	}
	out := make([]Commit, 0, len(found))
	for _, c := range found {
		if w.flags[c.Hash]&flagUninteresting != 0 {
			continue
		}
		subject, _, _ := strings.Cut(strings.TrimSpace(c.Message), "\n")
		var parent string
		if len(c.ParentHashes) > 0 {
			parent = c.ParentHashes[0].String()
		}
		out = append(out, Commit{
			Parent:      parent,
			SHA:         c.Hash.String(),
			Subject:     strings.TrimSpace(subject),
			Author:      c.Author.Name,
			AuthorEmail: c.Author.Email,
			When:        c.Author.When,
		})
	}
	return out, nil
}

const (
	flagQueued uint8 = 1 << iota
	flagUninteresting
)

// walk is a committer-time-ordered walk marking the ancestors of "from" as
// uninteresting. The caller holds r.mu.
type walk struct {
	r       *Repo
	q       commitQueue
	flags   map[plumbing.Hash]uint8
	parents map[plumbing.Hash][]plumbing.Hash // of popped commits
}

func (w *walk) push(h plumbing.Hash, flag uint8) error {
	if w.flags[h]&flagQueued != 0 {
		if flag&flagUninteresting != 0 {
			w.markUninteresting(h)
		}
		return nil
	}
	c, err := object.GetCommit(w.r.st, h)
	if err != nil {
		return fmt.Errorf("reading commit %s: %w", h, err)
	}
	w.flags[h] |= flagQueued | flag
	heap.Push(&w.q, c)
	return nil
}

// markUninteresting marks h and every already-walked ancestor.
func (w *walk) markUninteresting(h plumbing.Hash) {
	stack := []plumbing.Hash{h}
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if w.flags[h]&flagUninteresting != 0 {
			continue
		}
		w.flags[h] |= flagUninteresting
		stack = append(stack, w.parents[h]...)
	}
}

// done reports whether nothing left in the queue can matter: every queued
// commit is uninteresting and older than the oldest candidate.
func (w *walk) done(oldest time.Time) bool {
	for _, c := range w.q {
		if w.flags[c.Hash]&flagUninteresting == 0 {
			return false
		}
		if !oldest.IsZero() && !c.Committer.When.Before(oldest) {
			return false
		}
	}
	return true
}

func (w *walk) run(ctx context.Context) ([]*object.Commit, error) {
	var found []*object.Commit
	var oldest time.Time
	for w.q.Len() > 0 && !w.done(oldest) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := heap.Pop(&w.q).(*object.Commit)
		w.parents[c.Hash] = c.ParentHashes
		flag := w.flags[c.Hash] & flagUninteresting
		if flag == 0 {
			found = append(found, c)
			if oldest.IsZero() || c.Committer.When.Before(oldest) {
				oldest = c.Committer.When
			}
		}
		for _, p := range c.ParentHashes {
			if err := w.push(p, flag); err != nil {
				return nil, err
			}
		}
	}
	return found, nil
}

// commitQueue is a max-heap by committer time, ties broken by hash so the
// order is deterministic.
type commitQueue []*object.Commit

func (q commitQueue) Len() int { return len(q) }
func (q commitQueue) Less(i, j int) bool {
	ti, tj := q[i].Committer.When, q[j].Committer.When
	if !ti.Equal(tj) {
		return ti.After(tj)
	}
	return q[i].Hash.String() < q[j].Hash.String()
}
func (q commitQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *commitQueue) Push(x any)   { *q = append(*q, x.(*object.Commit)) }
func (q *commitQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}

// ClusterDirs lists every directory under the given roots that contains a
// regular file named cluster.yaml at commit, sorted and slash-separated,
// relative to the repository root. A root is a slash-separated path
// relative to the repository root ("" or "." for the root itself); roots
// may nest, and a root missing at commit contributes nothing. Symbolic
// links are not followed.
func (r *Repo) ClusterDirs(commit string, roots []string) ([]string, error) {
	key := ""
	if plumbing.IsHash(commit) {
		key = strings.ToLower(commit) + "\x00" + strings.Join(roots, "\x00")
		r.dirsMu.Lock()
		dirs, ok := r.dirs[key]
		r.dirsMu.Unlock()
		if ok {
			return slices.Clone(dirs), nil
		}
	}
	dirs, err := r.clusterDirs(commit, roots)
	if err != nil || key == "" {
		return dirs, err
	}
	r.dirsMu.Lock()
	if len(r.dirs) >= maxCachedDirs || r.dirs == nil {
		r.dirs = map[string][]string{}
	}
	r.dirs[key] = slices.Clone(dirs)
	r.dirsMu.Unlock()
	return dirs, nil
}

// maxCachedDirs bounds the commits whose cluster directories a Repo
// keeps; the cache starts over when it is full.
const maxCachedDirs = 256

func (r *Repo) clusterDirs(commit string, roots []string) ([]string, error) {
	fsys, err := r.Tree(commit)
	if err != nil {
		return nil, err
	}
	set := map[string]struct{}{}
	for _, root := range roots {
		clean, err := cleanRoot(root)
		if err != nil {
			return nil, err
		}
		err = fs.WalkDir(fsys, clean, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == clean && errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.Name() == ClusterFile && d.Type().IsRegular() {
				set[path.Dir(p)] = struct{}{}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing cluster directories under %q at %s: %w", root, commit, err)
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// cleanRoot turns a configured root into an fs.FS path.
func cleanRoot(root string) (string, error) {
	for _, el := range strings.Split(root, "/") {
		if el == ".." {
			return "", fmt.Errorf("listing cluster directories: root %q leaves the repository", root)
		}
	}
	clean := path.Clean("/" + root)[1:]
	if clean == "" {
		clean = "."
	}
	if !fs.ValidPath(clean) {
		return "", fmt.Errorf("listing cluster directories: invalid root %q", root)
	}
	return clean, nil
}

// PRChanges returns the paths a pull request changes: those changed
// between the merge base of base and head, and head. Changes made on base
// after the pull request branched off are not counted.
func (r *Repo) PRChanges(ctx context.Context, base, head string) ([]string, error) {
	mb, err := r.mergeBase(base, head)
	if err != nil {
		return nil, err
	}
	return r.ChangedPaths(ctx, mb, head)
}

// mergeBase returns the best common ancestor of a and b.
func (r *Repo) mergeBase(a, b string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ha, err := r.resolve(a)
	if err != nil {
		return "", err
	}
	hb, err := r.resolve(b)
	if err != nil {
		return "", err
	}
	ca, err := r.repo.CommitObject(ha)
	if err != nil {
		return "", fmt.Errorf("reading commit %s: %w", a, err)
	}
	cb, err := r.repo.CommitObject(hb)
	if err != nil {
		return "", fmt.Errorf("reading commit %s: %w", b, err)
	}
	bases, err := ca.MergeBase(cb)
	if err != nil {
		return "", fmt.Errorf("finding the merge base of %s and %s: %w", a, b, err)
	}
	if len(bases) == 0 {
		return "", nil
	}
	return bases[0].Hash.String(), nil
}
