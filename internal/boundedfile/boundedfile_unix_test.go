//go:build unix

package boundedfile_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
)

func TestReadRefusesWhatIsNotABoundedRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "talossecrets.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	big := filepath.Join(dir, "big.pem")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: 4 GiB that take no room on disk.
	if err := f.Truncate(4 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ok := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ok, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, path string
		max        int64
		target     error
		want       string
	}{
		{"named pipe", fifo, 1 << 20, boundedfile.ErrNotRegular, "reading " + fifo + ": not a regular file (a named pipe)"},
		{"device", "/dev/zero", 1 << 20, boundedfile.ErrNotRegular, "reading /dev/zero: not a regular file (a character device)"},
		{"directory", dir, 1 << 20, boundedfile.ErrNotRegular, "reading " + dir + ": not a regular file (a directory)"},
		{"over the bound", big, 1 << 20, boundedfile.ErrTooLarge, "reading " + big + ": larger than 1048576 bytes"},
		{"one byte over", ok, 9, boundedfile.ErrTooLarge, "reading " + ok + ": larger than 9 bytes"},
		{"missing", filepath.Join(dir, "none"), 1 << 20, fs.ErrNotExist, "reading " + filepath.Join(dir, "none") + ": no such file or directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.path); c.target != fs.ErrNotExist && err != nil {
				t.Skipf("%s: %v", c.path, err)
			}
			_, err := within(t, func() ([]byte, error) { return boundedfile.Read(c.path, c.max) })
			checkErr(t, err, c.target, c.want)
			_, err = within(t, func() ([]byte, error) {
				f, err := boundedfile.Open(c.path)
				if err == nil {
					f.Close()
					if c.target == boundedfile.ErrTooLarge {
						return nil, nil
					}
					t.Fatalf("Open(%s) opened it", c.path)
				}
				return nil, err
			})
			if c.target != boundedfile.ErrTooLarge {
				checkErr(t, err, c.target, c.want)
			}
		})
	}

	data, err := boundedfile.Read(ok, 10)
	if err != nil || string(data) != "0123456789" {
		t.Errorf("Read(%s, 10) = %q, %v", ok, data, err)
	}
}

// A file that reports no size (as /proc files do) is still read no
// further than its bound.
func TestReadStopsAtTheBoundWhateverTheSize(t *testing.T) {
	const proc = "/proc/self/status"
	if st, err := os.Stat(proc); err != nil || st.Size() != 0 {
		t.Skipf("%s does not report size 0 here", proc)
	}
	_, err := boundedfile.Read(proc, 16)
	checkErr(t, err, boundedfile.ErrTooLarge, "reading "+proc+": larger than 16 bytes")
}

func TestReadFSNeverOpensANamedPipeOnDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "kubeconfig"), 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	_, err := within(t, func() ([]byte, error) { return boundedfile.ReadFS(os.DirFS(dir), "kubeconfig", 1<<20) })
	checkErr(t, err, boundedfile.ErrNotRegular, "reading kubeconfig: not a regular file (a named pipe)")
}
