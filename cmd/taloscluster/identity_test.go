package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
)

// A second checkout of a running cluster with an identity of its own (a
// second talossecrets.yaml minted for the same cluster) is refused before
// any change: its plan names the machines whose Talos API serves another
// identity's certificate, and converge changes nothing.
func TestConvergeRefusesAnotherIdentityThanTheMachines(t *testing.T) {
	t.Parallel()
	l, dir := labCluster(t, "127.64.0.0/24", "twice", 1)
	if code, stdout, stderr := cli(t, "converge", "-C", dir, "--yes"); code != 0 {
		t.Fatalf("first converge exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	vms := len(l.PVE.VMs())

	other := t.TempDir()
	for _, f := range []string{"cluster.yaml", "secrets.yaml", "ca.pem"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		write(t, other, f, string(data))
	}
	bundle, err := machineconfig.NewSecrets("v1.13.8")
	if err != nil {
		t.Fatal(err)
	}
	if err := machineconfig.WriteSecrets(filepath.Join(other, "talossecrets.yaml"), bundle); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := cli(t, "plan", "-C", other)
	if code == 0 || !strings.Contains(stdout+stderr, "built with another cluster identity") || !strings.Contains(stdout+stderr, "twice-controlplane-01") {
		t.Fatalf("plan of the second identity exit %d, want a refusal naming the machines\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	logged := len(l.PVE.Log())
	code, stdout, stderr = cli(t, "converge", "-C", other, "--yes")
	if code == 0 || !strings.Contains(stdout+stderr, "built with another cluster identity") {
		t.Fatalf("converge of the second identity exit %d, want a refusal\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if n := len(l.PVE.VMs()); n != vms {
		t.Fatalf("%d VMs after the refused converge, want %d", n, vms)
	}
	for _, e := range l.PVE.Log()[logged:] {
		if e.Method != "GET" {
			t.Errorf("the refused converge changed Proxmox: %s %s", e.Method, e.Path)
		}
	}
}
