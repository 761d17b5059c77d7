package proxmox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/taloscluster/taloscluster/lab/labca"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// The CA bundle of proxmox.tls_verify is read bounded; with NoHostFiles
// (the agent: the files are a commit's tree) a path of the host is refused
// before anything is read, naming the key.
func TestTLSVerifyCABundleIsReadBounded(t *testing.T) {
	t.Parallel()
	ca, err := labca.New("files")
	if err != nil {
		t.Fatal(err)
	}
	pem := ca.PEM()
	hostCA := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(hostCA, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	tree := fstest.MapFS{
		"ca.pem":   {Data: pem},
		"huge.pem": {Data: make([]byte, 2<<20)},
		"pipe.pem": {Mode: os.ModeNamedPipe},
	}
	cluster := func(caFile string) *spec.Cluster {
		return &spec.Cluster{Name: "files", Provider: spec.ProviderProxmox, Proxmox: &spec.Proxmox{
			URL: "https://127.0.0.1:8006", TokenID: "root@pam!taloscluster", TokenSecret: "00000000-0000-0000-0000-000000000000",
			ImageFactory: "https://factory.talos.dev", TLSVerify: spec.TLSVerify{Verify: true, CAFile: caFile}}}
	}
	for _, tc := range []struct {
		name, caFile string
		noHost       bool
		refused      string // "" when the provider is built
	}{
		{name: "in the directory", caFile: "ca.pem"},
		{name: "in the directory, agent", caFile: "ca.pem", noHost: true},
		{name: "host path, CLI", caFile: hostCA},
		{name: "host path, agent", caFile: hostCA, noHost: true, refused: "proxmox.tls_verify: " + hostCA + " is an absolute path"},
		{name: "device, CLI", caFile: "/dev/zero", refused: "the CA bundle of proxmox.tls_verify: reading /dev/zero: not a regular file (a character device)"},
		{name: "device, agent", caFile: "/dev/zero", noHost: true, refused: "proxmox.tls_verify: /dev/zero is an absolute path"},
		{name: "parent, agent", caFile: "../ca.pem", noHost: true, refused: "proxmox.tls_verify: ../ca.pem leaves the cluster's directory"},
		{name: "too large", caFile: "huge.pem", noHost: true, refused: "the CA bundle of proxmox.tls_verify: reading huge.pem: larger than 1048576 bytes"},
		{name: "named pipe", caFile: "pipe.pem", noHost: true, refused: "the CA bundle of proxmox.tls_verify: reading pipe.pem: not a regular file (a named pipe)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opts []proxmox.Option
			if tc.noHost {
				opts = append(opts, proxmox.NoHostFiles())
			}
			_, err := proxmox.New(cluster(tc.caFile), tree, nil, opts...)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.refused != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.refused)):
				t.Fatalf("New: %v; want %q", err, tc.refused)
			}
		})
	}
}
