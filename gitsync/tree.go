package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// ErrSymlink is the error inside the *fs.PathError returned when opening or
// reading a symbolic link in a tree: links are reported, never followed.
var ErrSymlink = errors.New("symbolic link not followed")

var errIsDir = errors.New("is a directory")

// Tree returns a read-only view of the tree of commit (a full SHA, or any
// revision go-git resolves against the clone, such as
// "refs/remotes/pull/7/head"). The view implements fs.FS, fs.ReadFileFS,
// fs.ReadDirFS, fs.StatFS and fs.ReadLinkFS, and is safe for concurrent use.
//
// Regular and executable files read as their content. Symbolic links are
// reported with mode fs.ModeSymlink by Stat, Lstat and ReadDir and are
// never followed: Open and ReadFile fail with ErrSymlink, and a path through
// a link does not exist. Submodules are left out. Every entry's ModTime is
// the commit's committer time.
func (r *Repo) Tree(commit string) (fs.FS, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.resolve(commit)
	if err != nil {
		return nil, err
	}
	c, err := object.GetCommit(r.st, h)
	if err != nil {
		return nil, fmt.Errorf("reading commit %s: %w", h, err)
	}
	return &treeFS{r: r, root: c.TreeHash, when: c.Committer.When}, nil
}

var (
	_ fs.ReadFileFS = (*treeFS)(nil)
	_ fs.ReadDirFS  = (*treeFS)(nil)
	_ fs.StatFS     = (*treeFS)(nil)
	_ fs.ReadLinkFS = (*treeFS)(nil)
)

// treeFS is the fs.FS returned by Tree. It holds only hashes; every object
// read takes the repository lock.
type treeFS struct {
	r    *Repo
	root plumbing.Hash
	when time.Time
}

// node is one visible entry of a tree.
type node struct {
	name string // base name; "." for the root
	mode filemode.FileMode
	hash plumbing.Hash
}

// visible reports whether a tree entry is shown: submodules and names that
// are not a single valid path element are not.
func visible(e object.TreeEntry) bool {
	if e.Mode == filemode.Submodule {
		return false
	}
	return e.Name != "" && e.Name != "." && e.Name != ".." && !strings.Contains(e.Name, "/") && fs.ValidPath(e.Name)
}

// lookup finds the entry at name. The caller holds the lock.
func (t *treeFS) lookup(op, name string) (node, error) {
	if !fs.ValidPath(name) {
		return node{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return node{name: ".", mode: filemode.Dir, hash: t.root}, nil
	}
	cur := t.root
	parts := strings.Split(name, "/")
	for i, part := range parts {
		tree, err := object.GetTree(t.r.st, cur)
		if err != nil {
			return node{}, &fs.PathError{Op: op, Path: name, Err: err}
		}
		var found *object.TreeEntry
		for j := range tree.Entries {
			if tree.Entries[j].Name == part && visible(tree.Entries[j]) {
				found = &tree.Entries[j]
				break
			}
		}
		if found == nil {
			return node{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		if i == len(parts)-1 {
			return node{name: part, mode: found.Mode, hash: found.Hash}, nil
		}
		if found.Mode != filemode.Dir {
			return node{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		cur = found.Hash
	}
	panic("unreachable")
}

// info describes n. The caller holds the lock.
func (t *treeFS) info(n node) (*fileInfo, error) {
	fi := &fileInfo{name: n.name, mode: fsMode(n.mode), when: t.when}
	if n.mode == filemode.Dir {
		return fi, nil
	}
	obj, err := t.r.st.EncodedObject(plumbing.BlobObject, n.hash)
	if err != nil {
		return nil, err
	}
	fi.size = obj.Size()
	return fi, nil
}

// blob reads the content of n. The caller holds the lock.
func (t *treeFS) blob(n node) ([]byte, error) {
	obj, err := t.r.st.EncodedObject(plumbing.BlobObject, n.hash)
	if err != nil {
		return nil, err
	}
	rd, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	b := make([]byte, 0, obj.Size())
	buf := bytes.NewBuffer(b)
	if _, err := io.Copy(buf, rd); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// entries lists the visible entries of the directory n, sorted by name.
// The caller holds the lock.
func (t *treeFS) entries(n node) ([]fs.DirEntry, error) {
	tree, err := object.GetTree(t.r.st, n.hash)
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, 0, len(tree.Entries))
	for _, e := range tree.Entries {
		if !visible(e) {
			continue
		}
		out = append(out, &dirEntry{t: t, n: node{name: e.Name, mode: e.Mode, hash: e.Hash}})
	}
	// Git orders a directory "a" as "a/", which can differ from name order.
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

func fsMode(m filemode.FileMode) fs.FileMode {
	switch m {
	case filemode.Dir:
		return fs.ModeDir | 0o755
	case filemode.Executable:
		return 0o755
	case filemode.Symlink:
		return fs.ModeSymlink | 0o777
	default:
		return 0o644
	}
}

// Open opens the named file or directory; see Tree for symbolic links.
func (t *treeFS) Open(name string) (fs.File, error) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	n, err := t.lookup("open", name)
	if err != nil {
		return nil, err
	}
	switch n.mode {
	case filemode.Symlink:
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrSymlink}
	case filemode.Dir:
		fi, err := t.info(n)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		list, err := t.entries(n)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return &dirFile{path: name, info: fi, list: list}, nil
	}
	fi, err := t.info(n)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	b, err := t.blob(n)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &file{path: name, info: fi, rd: bytes.NewReader(b)}, nil
}

// ReadFile returns the content of the named regular file.
func (t *treeFS) ReadFile(name string) ([]byte, error) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	n, err := t.lookup("open", name)
	if err != nil {
		return nil, err
	}
	switch n.mode {
	case filemode.Symlink:
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrSymlink}
	case filemode.Dir:
		return nil, &fs.PathError{Op: "read", Path: name, Err: errIsDir}
	}
	b, err := t.blob(n)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return b, nil
}

// ReadDir lists the named directory, sorted by name.
func (t *treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	n, err := t.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	if n.mode != filemode.Dir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	list, err := t.entries(n)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return list, nil
}

// Stat describes the named entry without following symbolic links.
func (t *treeFS) Stat(name string) (fs.FileInfo, error) {
	return t.stat("stat", name)
}

// Lstat is Stat: nothing in a tree is ever followed.
func (t *treeFS) Lstat(name string) (fs.FileInfo, error) {
	return t.stat("lstat", name)
}

func (t *treeFS) stat(op, name string) (fs.FileInfo, error) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	n, err := t.lookup(op, name)
	if err != nil {
		return nil, err
	}
	fi, err := t.info(n)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return fi, nil
}

// ReadLink returns the target recorded for the named symbolic link, as
// text; the target is not resolved.
func (t *treeFS) ReadLink(name string) (string, error) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	n, err := t.lookup("readlink", name)
	if err != nil {
		return "", err
	}
	if n.mode != filemode.Symlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	b, err := t.blob(n)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return string(b), nil
}

type fileInfo struct {
	name string
	size int64
	mode fs.FileMode
	when time.Time
}

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return fi.size }
func (fi *fileInfo) Mode() fs.FileMode  { return fi.mode }
func (fi *fileInfo) ModTime() time.Time { return fi.when }
func (fi *fileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi *fileInfo) Sys() any           { return nil }

type dirEntry struct {
	t *treeFS
	n node
}

func (d *dirEntry) Name() string      { return d.n.name }
func (d *dirEntry) IsDir() bool       { return d.n.mode == filemode.Dir }
func (d *dirEntry) Type() fs.FileMode { return fsMode(d.n.mode).Type() }
func (d *dirEntry) String() string    { return fs.FormatDirEntry(d) }

func (d *dirEntry) Info() (fs.FileInfo, error) {
	d.t.r.mu.Lock()
	defer d.t.r.mu.Unlock()
	fi, err := d.t.info(d.n)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: d.n.name, Err: err}
	}
	return fi, nil
}

// file is an open regular file; its content was read when it was opened.
type file struct {
	path   string
	info   *fileInfo
	rd     *bytes.Reader
	closed bool
}

func (f *file) Stat() (fs.FileInfo, error) { return f.info, nil }

func (f *file) Read(p []byte) (int, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "read", Path: f.path, Err: fs.ErrClosed}
	}
	return f.rd.Read(p)
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "read", Path: f.path, Err: fs.ErrClosed}
	}
	return f.rd.ReadAt(p, off)
}

func (f *file) Seek(offset int64, whence int) (int64, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "seek", Path: f.path, Err: fs.ErrClosed}
	}
	return f.rd.Seek(offset, whence)
}

func (f *file) Close() error {
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.path, Err: fs.ErrClosed}
	}
	f.closed = true
	return nil
}

// dirFile is an open directory; its listing was read when it was opened.
type dirFile struct {
	path   string
	info   *fileInfo
	list   []fs.DirEntry
	off    int
	closed bool
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }

func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.path, Err: errIsDir}
}

func (d *dirFile) Close() error {
	if d.closed {
		return &fs.PathError{Op: "close", Path: d.path, Err: fs.ErrClosed}
	}
	d.closed = true
	return nil
}

// ReadDir follows fs.ReadDirFile: n > 0 returns at most n entries and
// io.EOF at the end; n <= 0 returns the rest.
func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if d.closed {
		return nil, &fs.PathError{Op: "readdir", Path: d.path, Err: fs.ErrClosed}
	}
	rest := d.list[d.off:]
	if n <= 0 {
		d.off = len(d.list)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if n > len(rest) {
		n = len(rest)
	}
	d.off += n
	return rest[:n], nil
}
