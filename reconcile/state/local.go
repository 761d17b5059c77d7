package state

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
)

// Local keeps one cluster's state as files in one directory: the CLI's
// cluster directory, next to cluster.yaml, as the Python tool does. The
// cluster argument of its methods is ignored.
type Local struct {
	Dir string
}

var _ Store = Local{}

func (l Local) file(name string) (string, error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return filepath.Join(l.Dir, name), nil
}

// Get reads a file.
func (l Local) Get(_ context.Context, _, name string) ([]byte, error) {
	p, err := l.file(name)
	if err != nil {
		return nil, err
	}
	return boundedfile.Read(p, boundedfile.State)
}

// Create writes a file only if absent (mode 0600).
func (l Local) Create(_ context.Context, _, name string, data []byte) error {
	p, err := l.file(name)
	if err != nil {
		return err
	}
	return CreateFile(p, data, 0o600)
}

// Put replaces a derived file (mode 0600); the identity is create-only.
func (l Local) Put(_ context.Context, _, name string, data []byte) error {
	if name == IdentityFile {
		return ErrCreateOnly
	}
	p, err := l.file(name)
	if err != nil {
		return err
	}
	return WriteFile(p, data, 0o600)
}

// Delete removes a file; an absent one is fine.
func (l Local) Delete(_ context.Context, _, name string) error {
	p, err := l.file(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting %s: %w", name, err)
	}
	return nil
}

// Lock takes the mutation lock of the cluster in Dir for holder (for
// example "taloscluster converge"): an advisory lock on LockFile in Dir,
// held until release is called or the process ends. When another run
// holds it, Lock fails at once with a LockedError naming that run, or with
// wait keeps trying, with backoff, until it gets the lock or ctx ends. The
// returned context is ctx's child, ended by release.
func (l Local) Lock(ctx context.Context, cluster, holder string, wait bool) (context.Context, func(), error) {
	if cluster == "" {
		cluster = l.Dir
	}
	return holdFile(ctx, filepath.Join(l.Dir, LockFile), cluster, holder, wait, time.Now)
}

// LocalJournalFile is the run journal the CLI keeps in a cluster
// directory, next to talossecrets.yaml (and, like it, out of Git).
const LocalJournalFile = ".taloscluster-journal.json"

var _ interface {
	Begin(ctx context.Context, cluster string, e Entry) (string, error)
	Done(ctx context.Context, cluster, id string, err error) error
	Open(ctx context.Context, cluster string) ([]Entry, error)
} = Local{}

func (l Local) journal() string { return filepath.Join(l.Dir, LocalJournalFile) }

// Begin records the intent e before a mutation and returns the entry's id.
func (l Local) Begin(ctx context.Context, cluster string, e Entry) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var id string
	err := updateJournalFile(l.journal(), cluster, func(j *journal) error {
		var err error
		id, err = j.begin(e, time.Now())
		return err
	})
	return id, err
}

// Done marks an entry finished, with err's first line when it failed.
func (l Local) Done(ctx context.Context, cluster, id string, err error) error {
	return updateJournalFile(l.journal(), cluster, func(j *journal) error {
		_, doneErr := j.done(id, err, time.Now())
		return doneErr
	})
}

// Open returns the entries begun and not finished, oldest first.
func (l Local) Open(ctx context.Context, cluster string) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	j, _, err := readJournalFile(l.journal())
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", cluster, err)
	}
	return j.open(), nil
}
