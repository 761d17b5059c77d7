package boundedfile_test

import (
	"errors"
	"io"
	"io/fs"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
)

// within runs f and fails the test if it has not returned after a few
// seconds (a read that blocks on a named pipe) or allocated more than a
// few MiB (a read that follows /dev/zero).
func within(t *testing.T, f func() ([]byte, error)) ([]byte, error) {
	t.Helper()
	type result struct {
		data []byte
		err  error
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	done := make(chan result, 1)
	go func() {
		data, err := f()
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
			t.Errorf("reading allocated %d bytes", grew)
		}
		return r.data, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("reading did not return in 5s")
		return nil, nil
	}
}

func checkErr(t *testing.T, err error, target error, want string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v; want one wrapping %v", err, target)
	}
	if err.Error() != want {
		t.Errorf("error %q; want %q", err, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q is not one line", err)
	}
}

// endless is a file system whose one file claims to be a small regular
// file and never ends.
type endless struct{}

func (endless) Open(name string) (fs.File, error) {
	if name != "ca.pem" {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return endlessFile{}, nil
}

type endlessFile struct{}

func (endlessFile) Stat() (fs.FileInfo, error) {
	return fstest.MapFS{"f": {}}.Stat("f")
}
func (endlessFile) Read(p []byte) (int, error) { clear(p); return len(p), nil }
func (endlessFile) Close() error               { return nil }

var _ io.Reader = endlessFile{}

func TestReadFSRefusesWhatIsNotABoundedRegularFile(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"ca.pem":            {Data: []byte("0123456789")},
		"talossecrets.yaml": {Mode: fs.ModeNamedPipe},
		"null":              {Mode: fs.ModeDevice | fs.ModeCharDevice},
		"dir/x":             {},
	}
	cases := []struct {
		name   string
		fsys   fs.FS
		file   string
		max    int64
		target error
		want   string
	}{
		{"named pipe", fsys, "talossecrets.yaml", 1 << 20, boundedfile.ErrNotRegular, "reading talossecrets.yaml: not a regular file (a named pipe)"},
		{"device", fsys, "null", 1 << 20, boundedfile.ErrNotRegular, "reading null: not a regular file (a character device)"},
		{"directory", fsys, "dir", 1 << 20, boundedfile.ErrNotRegular, "reading dir: not a regular file (a directory)"},
		{"over the bound", fsys, "ca.pem", 9, boundedfile.ErrTooLarge, "reading ca.pem: larger than 9 bytes"},
		{"never ends", endless{}, "ca.pem", 1 << 20, boundedfile.ErrTooLarge, "reading ca.pem: larger than 1048576 bytes"},
		{"missing", fsys, "none", 1 << 20, fs.ErrNotExist, "reading none: file does not exist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := within(t, func() ([]byte, error) { return boundedfile.ReadFS(c.fsys, c.file, c.max) })
			checkErr(t, err, c.target, c.want)
		})
	}
	if data, err := boundedfile.ReadFS(fsys, "ca.pem", 10); err != nil || string(data) != "0123456789" {
		t.Errorf("ReadFS(ca.pem, 10) = %q, %v", data, err)
	}
}
