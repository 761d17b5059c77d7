// Package state keeps a cluster's local state: the cluster identity
// (talossecrets.yaml), which is irreplaceable, and the derived client files
// (talosconfig, kubeconfig). Every write is atomic, so a crash never leaves
// a half-written file, and the identity is only ever created, never
// overwritten. The backends also lock a cluster for one mutating run at a
// time, across processes: an advisory file lock in a directory (Local,
// DirStore), a coordination.k8s.io/v1 Lease in Kubernetes (KubeStore).
package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// CreateFile writes data to path only if path does not exist yet. The data
// goes to a synced temporary file in the same directory that is then
// hard-linked into place, which fails when path exists, so a concurrent
// writer is never overwritten. An existing file gives an error wrapping
// fs.ErrExist and is left untouched.
func CreateFile(path string, data []byte, perm fs.FileMode) (err error) {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("creating %s: %w", path, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	defer func() {
		if rmErr := os.Remove(tmp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("creating %s: removing the temporary file: %w", path, rmErr)
		}
	}()
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("creating %s: %w", path, fs.ErrExist)
		}
		if !linkUnsupported(err) {
			return fmt.Errorf("creating %s: linking into place: %w", path, err)
		}
		// A filesystem without hard links: a last check, then a rename.
		if _, statErr := os.Lstat(path); statErr == nil {
			return fmt.Errorf("creating %s: %w", path, fs.ErrExist)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("creating %s: renaming into place: %w", path, err)
		}
	}
	return syncDir(filepath.Dir(path))
}

// WriteFile replaces path with data atomically: readers see the old content
// or the new one, never a mix, and a crash leaves one of the two.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: renaming into place: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// writeTemp writes data to a synced temporary file beside path.
func writeTemp(path string, data []byte, perm fs.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("writing %s: creating a temporary file: %w", path, err)
	}
	name := f.Name()
	fail := func(step string, err error) (string, error) {
		f.Close()
		os.Remove(name)
		return "", fmt.Errorf("writing %s: %s: %w", path, step, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fail("setting the mode", err)
	}
	if _, err := f.Write(data); err != nil {
		return fail("writing", err)
	}
	if err := f.Sync(); err != nil {
		return fail("syncing", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return "", fmt.Errorf("writing %s: closing: %w", path, err)
	}
	return name, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// linkUnsupported reports whether a link error means the filesystem has no
// hard links.
func linkUnsupported(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EOPNOTSUPP)
}
