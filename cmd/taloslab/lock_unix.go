//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// blockLock is an exclusive lock on a lab network, held by this process
// while its lab runs: an flock on a file under the temporary directory,
// one per /24, which the kernel releases when the process ends, however it
// ends.
type blockLock struct {
	f *os.File
}

// lockPath is the lock file of a network.
func lockPath(p netip.Prefix) string {
	return filepath.Join(os.TempDir(), "taloslab-"+strings.ReplaceAll(p.String(), "/", "-")+".lock")
}

// lockBlock takes the lock of network p without waiting. When another
// process holds it, it returns a nil lock and who holds it.
func lockBlock(p netip.Prefix) (*blockLock, string, error) {
	path := lockPath(p)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, fs.ErrPermission) {
		// Another user's lab made the file; a read-only descriptor locks
		// as well.
		f, err = os.Open(path)
	}
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, "lock file " + path + " belongs to another user", nil
		}
		return nil, "", fmt.Errorf("opening the lock file of %s: %w", p, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder, _ := io.ReadAll(io.LimitReader(f, 200))
			return nil, strings.TrimSpace("lock " + path + " held; " + string(holder)), nil
		}
		return nil, "", fmt.Errorf("locking %s: %w", path, err)
	}
	// Say who holds it, for the next one who asks; best effort.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d\n", os.Getpid())), 0)
	}
	return &blockLock{f: f}, "", nil
}

// release drops the lock. The file stays: removing it would let two
// processes lock different files of the same name.
func (l *blockLock) release() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}
