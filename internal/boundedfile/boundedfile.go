// Package boundedfile reads a file whole, but only a regular file and only
// up to a size the caller bounds.
//
// os.ReadFile reads whatever a name leads to until it ends: /dev/zero grows
// the reader until it is killed, and opening a named pipe blocks until a
// writer comes, which may be never. Every file this project reads by name
// (CA bundles, a cluster's identity, kubeconfigs and talosconfigs, state
// and journal files, tokens, configuration) is read with Read or ReadFS:
// anything but a regular file is refused without being read (and, on the
// host, opened only without blocking), and no more than one byte past the
// bound is ever read. Errors are one line naming the file.
package boundedfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Bounds of the kinds of files the project reads.
const (
	// Small bounds a file a person or a tool writes once: a CA bundle, a
	// cluster's identity, a kubeconfig or talosconfig, a token, a secrets
	// file or a configuration.
	Small = 1 << 20
	// State bounds a state document the project writes and reads back: a
	// run journal, the agent's documents (its outbox, the plans shown).
	State = 16 << 20
)

// ErrNotRegular is the cause of an error reading something other than a
// regular file: a named pipe, a device, a directory or a socket.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is the cause of an error reading a file larger than its
// bound.
var ErrTooLarge = errors.New("file too large")

// op is the operation of every *fs.PathError this package returns, so
// that its message reads "reading <file>: <why>".
const op = "reading"

// notRegular says what a file that is not a regular file is.
type notRegular struct{ mode fs.FileMode }

func (e notRegular) Error() string { return ErrNotRegular.Error() + " (" + describe(e.mode) + ")" }

func (e notRegular) Is(target error) bool { return target == ErrNotRegular }

// tooLarge is a file over its bound.
type tooLarge struct{ max int64 }

func (e tooLarge) Error() string { return fmt.Sprintf("larger than %d bytes", e.max) }

func (e tooLarge) Is(target error) bool { return target == ErrTooLarge }

func describe(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	}
	return "an irregular file"
}

// fail names the file in err, dropping the operation and path an
// *fs.PathError already carries so that the file is named once.
func fail(name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// Read returns the content of the regular file at path on the host, which
// must hold at most max bytes. Anything else is refused: a named pipe, a
// device or a directory before it is opened, and, should the name have
// been replaced meanwhile, once it is open (it is opened without
// blocking). No more than max+1 bytes are read, whatever the file claims
// its size is. Errors are *fs.PathError values whose message is
// "reading <path>: <why>"; errors.Is finds fs.ErrNotExist for a missing
// file, ErrNotRegular and ErrTooLarge.
func Read(path string, max int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f, path, max)
}

// Open opens the regular file at path on the host for reading, as Read
// does, without reading it: the caller bounds what it reads.
func Open(path string) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fail(path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fail(path, notRegular{st.Mode()})
	}
	f, err := os.OpenFile(path, os.O_RDONLY|nonBlocking, 0)
	if err != nil {
		return nil, fail(path, err)
	}
	if err := regular(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadFS returns the content of the regular file name in fsys, which must
// hold at most max bytes, as Read does: what fs.Stat does not describe as
// a regular file is never opened, and no more than max+1 bytes are read.
// Errors name the file as name.
func ReadFS(fsys fs.FS, name string, max int64) ([]byte, error) {
	st, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, fail(name, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fail(name, notRegular{st.Mode()})
	}
	if st.Size() > max {
		return nil, fail(name, tooLarge{max})
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fail(name, err)
	}
	defer f.Close()
	if err := regular(f, name); err != nil {
		return nil, err
	}
	return readAll(f, name, max)
}

// regular checks an open file: the name may have been replaced between
// the check before it was opened and the open.
func regular(f fs.File, name string) error {
	st, err := f.Stat()
	if err != nil {
		return fail(name, err)
	}
	if !st.Mode().IsRegular() {
		return fail(name, notRegular{st.Mode()})
	}
	return nil
}

// readAll reads f whole, refusing it when it holds more than max bytes:
// by its size before reading, and by what it reads (a file may grow, and
// some report no size).
func readAll(f fs.File, name string, max int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fail(name, err)
	}
	if st.Size() > max {
		return nil, fail(name, tooLarge{max})
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fail(name, err)
	}
	if int64(len(data)) > max {
		return nil, fail(name, tooLarge{max})
	}
	return data, nil
}
