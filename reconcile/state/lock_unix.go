//go:build unix

package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// lockFile tries once to take the advisory lock (flock LOCK_EX) on the
// lock file at path and writes the holder record of command into it. The
// kernel drops the lock when the descriptor is closed, however the process
// ends. A lock another process holds gives a LockedError with its record.
func lockFile(path, cluster, command string, now time.Time) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the lock file of cluster %q: %w", cluster, err)
	}
	if busy, record, err := tryLock(f, path); err != nil || busy {
		f.Close()
		if busy {
			return nil, &LockedError{Cluster: cluster, Holder: decodeHolder(record)}
		}
		return nil, err
	}
	// The file may have been removed by the holder that released it
	// between our open and our lock: then we hold a lock nobody else can
	// see, so start again with the file that is there now.
	if !samePath(f, path) {
		f.Close()
		return nil, errRetryNow
	}
	if err := writeHolder(f, path, command, now); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// tryLock takes the advisory lock (flock LOCK_EX) on f without waiting.
// busy is set, with the record its holder wrote, when another process
// holds it.
func tryLock(f *os.File, path string) (busy bool, record []byte, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	switch {
	case err == nil:
		return false, nil, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		record, _ = io.ReadAll(io.NewSectionReader(f, 0, 4096))
		return true, record, nil
	}
	return false, nil, fmt.Errorf("locking %s: %w", path, err)
}

// writeHolder replaces the record in the lock file f (at path) with one
// naming this process running command since now.
func writeHolder(f *os.File, path, command string, now time.Time) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("writing the holder of %s: %w", path, err)
	}
	if _, err := f.WriteAt(newHolder(command, now).encode(), 0); err != nil {
		return fmt.Errorf("writing the holder of %s: %w", path, err)
	}
	_ = f.Sync()
	return nil
}

// samePath reports whether path still names the open file f.
func samePath(f *os.File, path string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	pi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, pi)
}

// holdFile takes the lock file at path for command, with acquire's
// waiting, and returns the run's context and release.
func holdFile(ctx context.Context, path, cluster, command string, wait bool, now func() time.Time) (context.Context, func(), error) {
	var f *os.File
	err := acquire(ctx, wait, func() error {
		var err error
		f, err = lockFile(path, cluster, command, now())
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	held, cancel := context.WithCancel(ctx)
	release := sync.OnceFunc(func() {
		cancel()
		// Remove the file while the lock is held, so the next run makes a
		// fresh one; a run that opened this one meanwhile sees it gone and
		// starts again (samePath).
		if samePath(f, path) {
			_ = os.Remove(path)
		}
		_ = f.Close()
	})
	return held, release, nil
}

// LockDataDir takes the agent's lock on its data directory dir (created
// if absent): an advisory lock (flock LOCK_EX) on DataDirLockFile, whose
// content records this process as holder for command. The kernel drops
// the lock when the process ends, however it ends, and the descriptor is
// not inherited by a child (O_CLOEXEC). When another process holds it,
// LockDataDir fails within dataDirLockPatience with a DataDirInUseError
// naming that process.
// release drops the lock; it may be called more than once.
func LockDataDir(dir, command string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, DataDirLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the lock of the data directory %s: %w", dir, err)
	}
	// A lock released a moment ago may still be held by a copy of its
	// descriptor in a child this process is forking (fork duplicates it,
	// O_CLOEXEC closes it only at exec): the lock is asked for again for
	// a short while before the holder is named.
	for deadline := time.Now().Add(dataDirLockPatience); ; time.Sleep(20 * time.Millisecond) {
		busy, record, err := tryLock(f, path)
		if err == nil && !busy {
			break
		}
		if err != nil || time.Now().After(deadline) {
			f.Close()
			if err != nil {
				return nil, err
			}
			return nil, &DataDirInUseError{Dir: dir, Holder: decodeHolder(record)}
		}
	}
	if err := writeHolder(f, path, command, time.Now()); err != nil {
		f.Close()
		return nil, err
	}
	// The file stays when released: the next agent locks the same file,
	// so two never hold two different files.
	return sync.OnceFunc(func() { _ = f.Close() }), nil
}
