package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
)

// File names inside a cluster directory.
const (
	ClusterFile = "cluster.yaml"
	SecretsFile = "secrets.yaml"
)

// maxFileSize bounds what is read of any one cluster file.
const maxFileSize = 4 << 20

// coreSections are the top-level keys the engine itself owns: the Python
// tool's, then rollout and remediation, which it does not have.
var coreSections = []string{
	"name", "tags", "talos", "kubernetes", "controlplane", "workers", "network",
	"security", "tailscale", "openstack", "proxmox", "metal", "include",
	"rollout", "remediation",
}

// pluginSections are the top-level keys owned by the plugins this build
// knows: they are accepted next to the core sections.
var pluginSections = []string{"argocd", "rancher", "charts"}

// Options tune how a cluster directory is read.
type Options struct {
	// TolerateMissingIncludes reads a missing include file as empty and
	// reports it as a warning instead of an error (what `check` does).
	TolerateMissingIncludes bool
}

// Load reads and validates the cluster directory dir. It returns the cluster
// and its warnings, or an *Error holding every problem found.
func Load(dir string, opts Options) (*Cluster, []Problem, error) {
	return LoadFS(os.DirFS(dir), dir, opts)
}

// LoadFS reads and validates a cluster directory given as a file system
// whose root is the directory (a directory on disk, or a cluster directory
// in a commit's tree). dir names it in messages. Symbolic links are
// followed only when fsys can read them (fs.ReadLinkFS) and only inside the
// directory.
func LoadFS(fsys fs.FS, dir string, opts Options) (*Cluster, []Problem, error) {
	l := &loader{fsys: fsys, dir: dir, opts: opts}
	tree := l.read()
	if tree == nil {
		return nil, l.warns, l.fail()
	}
	l.moved(tree)
	v := &validator{loader: l}
	c := v.cluster(tree)
	if len(l.errs) > 0 {
		return nil, l.warns, l.fail()
	}
	c.Dir = dir
	c.Files = l.files
	c.sources = l.sources
	return c, l.warns, nil
}

// loader collects the problems of one Load call.
type loader struct {
	fsys  fs.FS
	dir   string
	opts  Options
	files []string
	errs  []Problem
	warns []Problem
	// sources records where list entries and free-form map values were
	// written, by dotted key path (Cluster.Source).
	sources map[string]Source
}

func (l *loader) fail() error {
	order := map[string]int{}
	for i, f := range l.files {
		order[f] = i + 1
	}
	slices.SortStableFunc(l.errs, func(a, b Problem) int {
		if d := order[a.File] - order[b.File]; d != 0 {
			return d
		}
		return a.Line - b.Line
	})
	return &Error{Problems: l.errs}
}

func (l *loader) errorAt(file string, line int, key, format string, args ...any) {
	l.errs = append(l.errs, Problem{File: file, Line: line, Key: key, Message: fmt.Sprintf(format, args...)})
}

func (l *loader) warnAt(file string, line int, key, format string, args ...any) {
	l.warns = append(l.warns, Problem{File: file, Line: line, Key: key, Message: fmt.Sprintf(format, args...)})
}

// readFile parses one file of the cluster directory; it reports and returns
// nil when the file cannot be read or is not a mapping.
func (l *loader) readFile(name string) *node {
	data, ok := l.readBytes(name)
	if !ok {
		return nil
	}
	tree, warns, err := parseYAML(name, data)
	l.warns = append(l.warns, warns...)
	if err != nil {
		var pe *parseError
		if errors.As(err, &pe) {
			l.errorAt(name, pe.line, "", "%s", pe.msg)
		} else {
			l.errorAt(name, 0, "", "%s", strings.TrimPrefix(err.Error(), name+": "))
		}
		return nil
	}
	if tree.kind != kindMap {
		// The Python tool reads a file whose document is empty or false-like
		// (only comments, null, false, 0, "", []) as an empty mapping.
		if pyFalsy(tree) {
			return &node{kind: kindMap, vals: map[string]*node{}, keyKinds: map[string]kind{}, file: name, line: tree.line}
		}
		l.errorAt(name, tree.line, "", "must be a YAML mapping, not a %s", tree.describe())
		return nil
	}
	return tree
}

// readBytes reads one file of the cluster directory, bounded: only a
// regular file (a symbolic link is followed where the file system can read
// it, and only inside the directory) of at most maxFileSize bytes. Anything
// else (a FIFO, a device, a directory) is reported without being opened, so
// that reading it can never block. Problems name the file as given.
func (l *loader) readBytes(name string) ([]byte, bool) {
	rel, inside := l.resolve(name)
	if !inside {
		l.errorAt(name, 0, "", "is a symbolic link that leads outside the cluster directory")
		return nil, false
	}
	data, err := boundedfile.ReadFS(l.fsys, rel, maxFileSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		l.errorAt(name, 0, "", "missing %s in %s", name, l.dir)
	case errors.Is(err, boundedfile.ErrNotRegular):
		l.errorAt(name, 0, "", "not a regular file")
	case errors.Is(err, boundedfile.ErrTooLarge):
		l.errorAt(name, 0, "", "larger than %d bytes", maxFileSize)
	case err != nil:
		l.errorAt(name, 0, "", "reading the file: %s", pathlessError(err))
	}
	if err != nil {
		return nil, false
	}
	return data, true
}

// pathlessError drops the absolute path an *fs.PathError carries: problems
// name files relative to the cluster directory.
func pathlessError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// read loads cluster.yaml and its includes and returns the merged tree.
func (l *loader) read() *node {
	l.files = []string{ClusterFile}
	root := l.readFile(ClusterFile)
	if root == nil {
		return nil
	}
	l.unknownTopLevel(root, true)
	includes := l.includes(root)
	merged := root
	for _, inc := range includes {
		n := inc.tree
		if n == nil {
			continue
		}
		l.unknownTopLevel(n, false)
		merge(l, merged, n, "")
	}
	return merged
}

func (l *loader) unknownTopLevel(n *node, isCluster bool) {
	var unknown []string
	for _, k := range n.keys {
		if k == "include" && !isCluster {
			l.errorAt(n.file, n.vals[k].line, "include", "an included file cannot include other files; list every file in cluster.yaml")
			continue
		}
		if !slices.Contains(coreSections, k) && !slices.Contains(pluginSections, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		l.errorAt(n.file, n.vals[unknown[0]].line, "", "unknown key(s): %s", strings.Join(unknown, ", "))
		for _, k := range unknown {
			n.remove(k)
		}
	}
}

type include struct {
	entry string
	tree  *node
}

// includes checks the include list of cluster.yaml and reads every file.
func (l *loader) includes(root *node) []include {
	list := root.get("include")
	listed := map[string]string{} // resolved path -> entry as written
	var out []include
	if !list.isNull() {
		if list.kind != kindList {
			l.errorAt(list.file, list.line, "include", "include must be a list of file names")
			list = nil
		}
	}
	var items []*node
	if list != nil {
		items = list.items
	}
	for i, it := range items {
		key := fmt.Sprintf("include[%d]", i)
		if it.kind != kindString || strings.TrimSpace(it.str) == "" {
			l.errorAt(it.file, it.line, key, "include must be a list of file names; entry %d is %s", i+1, emptyOr(it))
			continue
		}
		entry := it.str
		rel, ok := l.resolve(entry)
		if !ok {
			l.errorAt(it.file, it.line, key, "include '%s' must be a path inside the cluster directory", entry)
			continue
		}
		if rel == ClusterFile {
			l.errorAt(it.file, it.line, key, "cluster.yaml is the cluster file itself; do not list it")
			continue
		}
		if _, dup := listed[rel]; dup {
			l.errorAt(it.file, it.line, key, "include lists %s twice", entry)
			continue
		}
		listed[rel] = entry
		st, serr := fs.Stat(l.fsys, rel)
		switch {
		case serr != nil && errors.Is(serr, fs.ErrNotExist):
			if l.opts.TolerateMissingIncludes {
				l.warnAt(it.file, it.line, key, "include %s is missing; it is read as empty", entry)
			} else {
				l.errorAt(it.file, it.line, key, "include %s is missing", entry)
			}
			continue
		case serr != nil:
			l.errorAt(it.file, it.line, key, "include %s cannot be read: %s", entry, pathlessError(serr))
			continue
		case !st.Mode().IsRegular():
			l.errorAt(it.file, it.line, key, "include %s is not a file", entry)
			continue
		}
		l.files = append(l.files, rel)
		out = append(out, include{entry: entry, tree: l.readFile(rel)})
	}
	if _, ok := listed[SecretsFile]; !ok {
		if st, err := fs.Stat(l.fsys, SecretsFile); err == nil && st.Mode().IsRegular() {
			line := 0
			if list != nil {
				line = list.line
			}
			l.errorAt(ClusterFile, line, "include", "secrets.yaml exists but include does not list it; it is no longer merged automatically: add 'include: [secrets.yaml]'")
		}
	}
	root.remove("include")
	return out
}

// DirPath checks a path cluster.yaml names for a file to read (such as
// the CA bundle of proxmox.tls_verify) for reading from the cluster
// directory alone, as the agent reads it from a commit's tree and never
// from its own host, and returns it as a clean slash path of the
// directory's file system. A path that is absolute or leaves the directory
// is refused, saying why, before anything is read.
func DirPath(p string) (string, error) {
	slash := filepath.ToSlash(p)
	if filepath.IsAbs(p) || path.IsAbs(slash) || filepath.VolumeName(p) != "" {
		return "", fmt.Errorf("%s is an absolute path; only files of the cluster's directory are read", p)
	}
	clean := path.Clean(slash)
	if clean == "." {
		return "", fmt.Errorf("%s names the cluster's directory, not a file in it", p)
	}
	if !fs.ValidPath(clean) {
		return "", fmt.Errorf("%s leaves the cluster's directory", p)
	}
	return clean, nil
}

// resolve turns an include entry into a clean slash path inside the
// directory, following symbolic links where the file system can read them.
// It reports false for a path that is absolute or leads outside.
func (l *loader) resolve(entry string) (string, bool) {
	if filepath.IsAbs(entry) || path.IsAbs(filepath.ToSlash(entry)) {
		return "", false
	}
	p := path.Clean(filepath.ToSlash(entry))
	links, _ := l.fsys.(fs.ReadLinkFS)
	for hops := 0; ; hops++ {
		if p == ".." || strings.HasPrefix(p, "../") || hops > 40 {
			return "", false
		}
		if links == nil {
			return p, true
		}
		// Find the first component that is a link and replace it by its
		// target, until no component is a link.
		parts := strings.Split(p, "/")
		replaced := false
		for i := range parts {
			prefix := path.Join(parts[:i+1]...)
			st, err := links.Lstat(prefix)
			if err != nil || st.Mode()&fs.ModeSymlink == 0 {
				continue
			}
			target, err := links.ReadLink(prefix)
			if err != nil || path.IsAbs(filepath.ToSlash(target)) || filepath.IsAbs(target) {
				return "", false
			}
			p = path.Join(append([]string{path.Dir(prefix), filepath.ToSlash(target)}, parts[i+1:]...)...)
			replaced = true
			break
		}
		if !replaced {
			return p, true
		}
	}
}

func emptyOr(n *node) string {
	if n.kind == kindString {
		return "empty"
	}
	return "a " + n.describe()
}

// remove deletes a key from a mapping node.
func (n *node) remove(key string) {
	if n == nil || n.kind != kindMap {
		return
	}
	if _, ok := n.vals[key]; !ok {
		return
	}
	delete(n.vals, key)
	n.keys = slices.DeleteFunc(n.keys, func(k string) bool { return k == key })
}

// merge deep-merges src into dst. Mappings merge key by key; any other value
// set in both files is an error naming the key and both files. A null value
// adds nothing and collides with nothing.
func merge(l *loader, dst, src *node, prefix string) {
	for _, k := range src.keys {
		sv := src.vals[k]
		path := joinKey(prefix, k)
		if sv.isNull() {
			continue
		}
		dv, ok := dst.vals[k]
		if !ok || dv.isNull() {
			if !ok {
				dst.keys = append(dst.keys, k)
			}
			dst.vals[k] = sv
			dst.keyKinds[k] = src.keyKinds[k]
			continue
		}
		if dv.kind == kindMap && sv.kind == kindMap {
			merge(l, dv, sv, path)
			continue
		}
		l.errorAt(sv.file, sv.line, path, "%s is set in both %s and %s", path, dv.file, sv.file)
	}
}

func joinKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// movedKeys maps keys the Python tool moved (up to 0.7.x) to their new home.
var movedKeys = []struct{ old, new []string }{
	{[]string{"network", "cidr"}, []string{"network", "cluster", "cidr"}},
	{[]string{"proxmox", "network", "cluster", "vlan"}, []string{"network", "cluster", "vlan"}},
	{[]string{"proxmox", "network", "cluster", "kubeapi_vip"}, []string{"network", "cluster", "kubeapi_vip"}},
	{[]string{"proxmox", "network", "external", "cidr"}, []string{"network", "external", "cidr"}},
	{[]string{"proxmox", "network", "external", "gateway"}, []string{"network", "external", "gateway"}},
	{[]string{"proxmox", "network", "external", "anchor_cidr"}, []string{"network", "external", "anchor_cidr"}},
	{[]string{"proxmox", "network", "external", "kubeapi_vip"}, []string{"network", "external", "kubeapi_vip"}},
	{[]string{"proxmox", "network", "external", "vlan"}, []string{"network", "external", "vlan"}},
	{[]string{"proxmox", "network", "external", "ingress_pool"}, []string{"network", "external", "ingress_pool"}},
}

// moved refuses keys that moved, naming the new location, and drops them so
// the unknown-key checks do not report them a second time.
func (l *loader) moved(tree *node) {
	for _, m := range movedKeys {
		parent := tree
		for _, k := range m.old[:len(m.old)-1] {
			parent = parent.get(k)
		}
		last := m.old[len(m.old)-1]
		v := parent.get(last)
		if v == nil {
			continue
		}
		old := strings.Join(m.old, ".")
		l.errorAt(v.file, v.line, old, "%s has moved to %s", old, strings.Join(m.new, "."))
		parent.remove(last)
	}
}

// Identify reads only what routes a cluster directory: the cluster's name
// (cluster.yaml's name after includes are merged, "" when it has none or
// it is not a string) and the files loading read, tolerating missing
// includes and validating nothing else, so that a directory whose
// secrets are absent is still known by its name. It fails when
// cluster.yaml itself cannot be read or parsed.
func Identify(fsys fs.FS, dir string) (name string, files []string, err error) {
	l := &loader{fsys: fsys, dir: dir, opts: Options{TolerateMissingIncludes: true}}
	tree := l.read()
	if tree == nil {
		return "", l.files, l.fail()
	}
	if n := tree.get("name"); n != nil && n.kind == kindString {
		name = n.str
	}
	return name, l.files, nil
}
