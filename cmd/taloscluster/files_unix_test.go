//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile"
)

// A state file of the cluster directory that is a named pipe (or a device)
// used to hang every command that read it: each command now fails at once
// with one line naming the file.
func TestCommandsRefuseANamedPipeForAStateFile(t *testing.T) {
	t.Parallel()
	_, dir := labCluster(t, "127.237.0.0/24", "piped", 0)
	cases := []struct {
		file string
		args []string
	}{
		{reconcile.TalosSecretsFile, []string{"plan", "-C", dir}},
		{reconcile.TalosSecretsFile, []string{"converge", "--yes", "-C", dir}},
		{reconcile.TalosSecretsFile, []string{"config", "-C", dir}},
		{reconcile.KubeconfigFile, []string{"status", "-C", dir}},
		{reconcile.TalosconfigFile, []string{"status", "-C", dir}},
	}
	for _, c := range cases {
		path := filepath.Join(dir, c.file)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Skipf("no named pipes here: %v", err)
		}
		type result struct {
			code           int
			stdout, stderr string
		}
		done := make(chan result, 1)
		go func() {
			code, stdout, stderr := cli(t, c.args...)
			done <- result{code, stdout, stderr}
		}()
		select {
		case r := <-done:
			var line string
			for _, l := range strings.Split(r.stderr, "\n") {
				if strings.HasPrefix(l, "error: ") {
					line = l
				}
			}
			if r.code != 1 || !strings.Contains(line, "reading "+path+": not a regular file (a named pipe)") {
				t.Errorf("%s with a named pipe as %s: exit %d, stderr:\n%s", strings.Join(c.args, " "), c.file, r.code, r.stderr)
			}
		case <-time.After(20 * time.Second):
			if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			t.Fatalf("%s blocked on a named pipe as %s", strings.Join(c.args, " "), c.file)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// The CLI reads the CA bundle of proxmox.tls_verify at an absolute path a
// person writes, but only a regular file under the bound: /dev/zero or a
// named pipe is one line naming the file.
func TestCLIReadsAnAbsoluteCABundleBounded(t *testing.T) {
	t.Parallel()
	_, dir := labCluster(t, "127.238.0.0/24", "trusting", 0)
	data, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const tlsLine = "tls_verify: ca.pem"
	if !strings.Contains(string(data), tlsLine) {
		t.Fatalf("the lab's cluster.yaml changed; update this test:\n%s", data)
	}
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	cases := []struct {
		caFile string
		code   int
		want   string
	}{
		{filepath.Join(dir, "ca.pem"), 0, ""},
		{"/dev/zero", 1, "error: the CA bundle of proxmox.tls_verify: reading /dev/zero: not a regular file (a character device)\n"},
		{fifo, 1, "error: the CA bundle of proxmox.tls_verify: reading " + fifo + ": not a regular file (a named pipe)\n"},
		{"../ca.pem", 1, "error: proxmox.tls_verify: ../ca.pem leaves the cluster's directory\n"},
	}
	for _, c := range cases {
		write(t, dir, "cluster.yaml", strings.Replace(string(data), tlsLine, "tls_verify: "+c.caFile, 1))
		done := make(chan [2]string, 1)
		var code int
		go func() {
			var stdout, stderr string
			code, stdout, stderr = cli(t, "plan", "-C", dir)
			done <- [2]string{stdout, stderr}
		}()
		select {
		case out := <-done:
			if code != c.code || c.want != "" && out[1] != c.want {
				t.Errorf("plan with tls_verify: %s: exit %d, stderr %q; want %d, %q", c.caFile, code, out[1], c.code, c.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("plan with tls_verify: %s did not end", c.caFile)
		}
	}
}
