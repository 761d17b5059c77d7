package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// ClusterInfo is what the agent needs of a cluster directory to route
// changes and keep clusters apart: the cluster's name and the files its
// cluster.yaml read.
type ClusterInfo struct {
	// Name is the cluster's name (cluster.yaml's name).
	Name string
	// Files are the files loading the cluster read, relative to its
	// directory, slash-separated.
	Files []string
}

// maxInfoCache bounds the cluster descriptions kept between polls.
const maxInfoCache = 20000

// infoCache keeps the descriptions of cluster directories by commit: a
// commit's tree never changes.
type infoCache struct {
	mu sync.Mutex
	m  map[string]infoResult
}

type infoResult struct {
	info ClusterInfo
	err  error
}

// describe returns the description of cluster directory dir at commit;
// an error means its files do not load (its own plan reports why).
func (a *Agent) describe(commit, dir string) (ClusterInfo, error) {
	key := commit + "\x00" + dir
	a.infos.mu.Lock()
	r, ok := a.infos.m[key]
	a.infos.mu.Unlock()
	if ok {
		return r.info, r.err
	}
	err := a.withFiles(commit, dir, func(files fs.FS) error {
		var err error
		r.info, err = a.runner.Describe(dir, files)
		return err
	})
	r.err = err
	a.infos.mu.Lock()
	if a.infos.m == nil || len(a.infos.m) >= maxInfoCache {
		a.infos.m = map[string]infoResult{}
	}
	a.infos.m[key] = r
	a.infos.mu.Unlock()
	return r.info, r.err
}

// nameConflict says why cluster (a directory at head) must not be planned
// or converged because another directory uses its cluster name, on the
// default branch (base, with baseDirs) or at head (headDirs), or "". A
// cluster name, and with it the Proxmox pool and ownership tags, the
// OpenStack tags and the identity, belongs to exactly one directory.
func (a *Agent) nameConflict(head, base, cluster string, headDirs, baseDirs []string) string {
	info, err := a.describe(head, cluster)
	if err != nil || info.Name == "" {
		return "" // the plan reports the load error
	}
	var where []string
	for _, d := range baseDirs {
		if d == cluster {
			continue
		}
		if other, err := a.describe(base, d); err == nil && other.Name == info.Name {
			where = append(where, d+" (on the default branch)")
		}
	}
	for _, d := range headDirs {
		if d == cluster || slices.Contains(baseDirs, d) {
			continue
		}
		if other, err := a.describe(head, d); err == nil && other.Name == info.Name {
			where = append(where, d+" (in this pull request)")
		}
	}
	if len(where) == 0 {
		return ""
	}
	return fmt.Sprintf("cluster name %q of %s is also used by %s; a cluster name (its Proxmox pool, ownership tags and identity) belongs to one directory: give one of them another name (a cluster's directory cannot be moved)",
		info.Name, cluster, strings.Join(where, ", "))
}

// hasDestroyMarker reports whether cluster's directory at commit holds the
// destroy marker.
func (a *Agent) hasDestroyMarker(commit, cluster string) bool {
	tree, err := a.repo.Tree(commit)
	if err != nil {
		return false
	}
	_, err = fs.Stat(tree, path.Join(cluster, DestroyMarker))
	return err == nil
}

// destroyRefusal says why the destroy marker of cluster must not act, or
// "": it acts only in a directory that is on the default branch (base,
// with baseDirs) and whose cluster the agent converged from it.
func (a *Agent) destroyRefusal(ctx context.Context, cluster string, baseDirs []string) (string, error) {
	if !slices.Contains(baseDirs, cluster) {
		return fmt.Sprintf("the %s marker is in %s, which is not on the default branch: only a cluster that its directory on the default branch converged can be destroyed; nothing is destroyed", DestroyMarker, cluster), nil
	}
	last, err := a.progress.LastConverged(ctx, cluster)
	if err != nil {
		return "", fmt.Errorf("reading the last converged commit of %s: %w", cluster, err)
	}
	if last == "" {
		return fmt.Sprintf("the %s marker is in %s, whose cluster the agent never converged from that directory: nothing is destroyed", DestroyMarker, cluster), nil
	}
	return "", nil
}

// errDestroyRefused is wrapped by the error that stops a destroy the
// marker's rules do not allow.
var errDestroyRefused = errors.New("destroy refused")

// readSet returns the repository paths a cluster read at commit, nil when
// its files do not load.
func (a *Agent) readSet(commit, cluster string) []string {
	info, err := a.describe(commit, cluster)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(info.Files))
	for _, f := range info.Files {
		out = append(out, path.Join(cluster, f))
	}
	return out
}

// affectedBy returns the cluster directories a change touches: the
// deepest cluster directory that holds a changed path (a new or deleted
// file, cluster.yaml itself) and every cluster whose loading read a
// changed path, at from or at to (an include or patch file in a nested
// directory or shared by several clusters). A cluster reads files only
// inside its directory, so only the directories above a changed path are
// asked.
func (a *Agent) affectedBy(from, to string, dirs, fromDirs, changed []string) []string {
	set := map[string]bool{}
	for _, d := range Affected(dirs, changed) {
		set[d] = true
	}
	for _, d := range dirs {
		if set[d] || !slices.ContainsFunc(changed, func(p string) bool { return inside(p, d) }) {
			continue
		}
		read := a.readSet(to, d)
		if from != "" && slices.Contains(fromDirs, d) {
			read = append(read, a.readSet(from, d)...)
		}
		if slices.ContainsFunc(changed, func(p string) bool { return slices.Contains(read, p) }) {
			set[d] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// inside reports whether repository path p is inside directory d.
func inside(p, d string) bool {
	return d == "." || strings.HasPrefix(p, d+"/")
}

// linkedSkipped is the status of a directory whose cluster.yaml is a
// symbolic link.
const linkedSkipped = "skipped: cluster.yaml is a symbolic link; the agent reads only a regular cluster.yaml file"

// linkedClusters returns the directories under the cluster roots whose
// cluster.yaml is among the changed paths and is a symbolic link at
// commit: the agent does not read them as clusters, and says so.
func (a *Agent) linkedClusters(commit string, changed []string) []string {
	tree, err := a.repo.Tree(commit)
	if err != nil {
		return nil
	}
	links, ok := tree.(fs.ReadLinkFS)
	if !ok {
		return nil
	}
	var out []string
	for _, p := range changed {
		if path.Base(p) != spec.ClusterFile || !a.underRoots(p) {
			continue
		}
		if st, err := links.Lstat(p); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			out = append(out, path.Dir(p))
		}
	}
	return out
}

// underRoots reports whether repository path p is below one of the
// configured cluster roots.
func (a *Agent) underRoots(p string) bool {
	for _, r := range a.cfg.Repository.ClusterRoots {
		if r = strings.Trim(path.Clean("/"+r), "/"); r == "" || inside(p, r) {
			return true
		}
	}
	return false
}
