package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
)

// DirStore keeps each cluster's state in a directory of its own under a
// root directory, named by Slug. Files are written with CreateFile and
// WriteFile, so every write is atomic and durable, and have mode 0600;
// directories have mode 0700.
//
// The journal is a small JSON document rewritten atomically on every
// change. Writers in one process are serialised per cluster directory;
// one process at a time may use a root (the agent holds its leader lease,
// the CLI works on a directory of its own).
type DirStore struct {
	root string
	now  func() time.Time
}

var _ Backend = (*DirStore)(nil)

// NewDirStore returns a DirStore under root, which is created when the
// first state is written.
func NewDirStore(root string) *DirStore {
	return &DirStore{root: root, now: time.Now}
}

// Dir returns the directory that holds the state of cluster.
func (s *DirStore) Dir(cluster string) (string, error) {
	slug, err := Slug(cluster)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.root, slug), nil
}

// path returns the path of a state file after checking both names.
func (s *DirStore) path(cluster, name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	dir, err := s.Dir(cluster)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// ensureDir creates the cluster's directory (and the root) if needed.
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the state directory %s: %w", dir, err)
	}
	return nil
}

// Get returns a file of a cluster's state; an error wrapping
// fs.ErrNotExist when it is absent.
func (s *DirStore) Get(ctx context.Context, cluster, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path, err := s.path(cluster, name)
	if err != nil {
		return nil, err
	}
	data, err := boundedfile.Read(path, boundedfile.State)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", cluster, err)
	}
	return data, nil
}

// Create stores a file only if it is absent; an existing one gives an
// error wrapping fs.ErrExist.
func (s *DirStore) Create(ctx context.Context, cluster, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path, err := s.path(cluster, name)
	if err != nil {
		return err
	}
	if err := ensureDir(filepath.Dir(path)); err != nil {
		return err
	}
	if err := CreateFile(path, data, 0o600); err != nil {
		return fmt.Errorf("creating %s of cluster %q: %w", name, cluster, err)
	}
	return nil
}

// Put replaces a derived file; IdentityFile gives ErrCreateOnly.
func (s *DirStore) Put(ctx context.Context, cluster, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if name == IdentityFile {
		return fmt.Errorf("replacing %s of cluster %q: %w", name, cluster, ErrCreateOnly)
	}
	path, err := s.path(cluster, name)
	if err != nil {
		return err
	}
	if err := ensureDir(filepath.Dir(path)); err != nil {
		return err
	}
	if err := WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("replacing %s of cluster %q: %w", name, cluster, err)
	}
	return nil
}

// Delete removes a file; an absent one is not an error.
func (s *DirStore) Delete(ctx context.Context, cluster, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path, err := s.path(cluster, name)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("deleting %s of cluster %q: %w", name, cluster, err)
	}
	return syncDir(filepath.Dir(path))
}

// Lock takes the mutation lock of a cluster for holder (for example
// "agent converge"): an advisory lock on LockFile in the cluster's
// directory, held until release is called or the process ends. When
// another run holds it, Lock fails at once with a LockedError naming that
// run, or with wait keeps trying, with backoff, until it gets the lock or
// ctx ends. The returned context is ctx's child, ended by release.
func (s *DirStore) Lock(ctx context.Context, cluster, holder string, wait bool) (context.Context, func(), error) {
	dir, err := s.Dir(cluster)
	if err != nil {
		return nil, nil, err
	}
	if err := ensureDir(dir); err != nil {
		return nil, nil, err
	}
	return holdFile(ctx, filepath.Join(dir, LockFile), cluster, holder, wait, s.now)
}

// dirLocks serialises journal updates per cluster directory within the
// process, whichever DirStore makes them.
var dirLocks sync.Map // absolute directory -> *sync.Mutex

func lockDir(dir string) func() {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	v, _ := dirLocks.LoadOrStore(dir, new(sync.Mutex))
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// readJournal reads the journal of the cluster whose directory is dir.
func readJournal(dir string) (*journal, []byte, error) {
	return readJournalFile(filepath.Join(dir, JournalFile))
}

// readJournalFile reads a journal file; a missing one is empty.
func readJournalFile(path string) (*journal, []byte, error) {
	data, err := boundedfile.Read(path, boundedfile.State)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	j, err := decodeJournal(data)
	return j, data, err
}

// viewJournal reads a cluster's journal.
func (s *DirStore) viewJournal(ctx context.Context, cluster string) (*journal, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, err := s.Dir(cluster)
	if err != nil {
		return nil, err
	}
	j, _, err := readJournal(dir)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", cluster, err)
	}
	return j, nil
}

// updateJournal applies change to a cluster's journal and writes it back
// atomically when it changed.
func (s *DirStore) updateJournal(ctx context.Context, cluster string, change func(*journal) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir, err := s.Dir(cluster)
	if err != nil {
		return err
	}
	return updateJournalFile(filepath.Join(dir, JournalFile), cluster, change)
}

// updateJournalFile applies change to the journal kept in path.
func updateJournalFile(path, cluster string, change func(*journal) error) error {
	dir := filepath.Dir(path)
	defer lockDir(dir)()
	j, old, err := readJournalFile(path)
	if err != nil {
		return fmt.Errorf("cluster %q: %w", cluster, err)
	}
	if err := change(j); err != nil {
		return err
	}
	data, err := j.encode()
	if err != nil {
		return err
	}
	if bytes.Equal(data, old) {
		return nil
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	if err := WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing the journal of cluster %q: %w", cluster, err)
	}
	return nil
}

// Begin records the intent e before a mutation and returns the entry's id.
func (s *DirStore) Begin(ctx context.Context, cluster string, e Entry) (string, error) {
	var id string
	err := s.updateJournal(ctx, cluster, func(j *journal) error {
		var err error
		id, err = j.begin(e, s.now())
		return err
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// Done marks an entry finished, with err's first line when it failed.
func (s *DirStore) Done(ctx context.Context, cluster, id string, err error) error {
	return s.updateJournal(ctx, cluster, func(j *journal) error {
		_, doneErr := j.done(id, err, s.now())
		return doneErr
	})
}

// Open returns the entries begun and not finished, oldest first.
func (s *DirStore) Open(ctx context.Context, cluster string) ([]Entry, error) {
	j, err := s.viewJournal(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return j.open(), nil
}

// Entries returns the open entries and the most recent finished ones,
// oldest first.
func (s *DirStore) Entries(ctx context.Context, cluster string) ([]Entry, error) {
	j, err := s.viewJournal(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return j.entries(), nil
}

// LastConverged returns the commit the cluster was last converged to, or
// "" when it never was.
func (s *DirStore) LastConverged(ctx context.Context, cluster string) (string, error) {
	j, err := s.viewJournal(ctx, cluster)
	if err != nil {
		return "", err
	}
	return j.lastConverged(), nil
}

// SetLastConverged records the commit a converge brought the cluster to.
func (s *DirStore) SetLastConverged(ctx context.Context, cluster, commit string) error {
	return s.updateJournal(ctx, cluster, func(j *journal) error {
		_, err := j.setLastConverged(commit, s.now())
		return err
	})
}
