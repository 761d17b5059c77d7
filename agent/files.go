package agent

import (
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// clusterFiles is a cluster directory as the agent reads it: the commit's
// tree, except secrets.yaml, which comes from the agent's secrets directory
// (<secrets_dir>/<cluster path>/secrets.yaml) and never from the
// repository, so a pull request can neither read nor replace credentials.
type clusterFiles struct {
	tree    fs.FS
	secrets string // path of the cluster's secrets.yaml on disk
}

// ClusterFiles returns the file system a cluster is loaded from.
func ClusterFiles(tree fs.FS, secretsDir, cluster string) (fs.FS, error) {
	sub, err := fs.Sub(tree, cluster)
	if err != nil {
		return nil, err
	}
	return clusterFiles{tree: sub, secrets: filepath.Join(secretsDir, filepath.FromSlash(cluster), spec.SecretsFile)}, nil
}

func (f clusterFiles) Open(name string) (fs.File, error) {
	if name == spec.SecretsFile {
		// Only a regular file, opened without blocking: a named pipe
		// there must not hang the agent. spec.LoadFS bounds the read.
		file, err := boundedfile.Open(f.secrets)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		if err != nil {
			return nil, err
		}
		return file, nil
	}
	return f.tree.Open(name)
}

// Lstat and ReadLink pass through to the tree, so links there are followed
// only inside the cluster directory; secrets.yaml is never a link.
func (f clusterFiles) Lstat(name string) (fs.FileInfo, error) {
	if name == spec.SecretsFile {
		return fs.Stat(f, name)
	}
	if l, ok := f.tree.(fs.ReadLinkFS); ok {
		return l.Lstat(name)
	}
	return fs.Stat(f.tree, name)
}

func (f clusterFiles) ReadLink(name string) (string, error) {
	if l, ok := f.tree.(fs.ReadLinkFS); ok && name != spec.SecretsFile {
		return l.ReadLink(name)
	}
	return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
}

var _ fs.ReadLinkFS = clusterFiles{}
