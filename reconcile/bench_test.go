package reconcile_test

import (
	"path/filepath"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// BenchmarkOfflinePlan measures the offline plan of the largest example.
func BenchmarkOfflinePlan(b *testing.B) {
	for b.Loop() {
		offlinePlan(b, filepath.Join("..", "examples", "proxmox-external"))
	}
}

// BenchmarkMachineConfig measures generating and validating one control
// plane's machine config.
func BenchmarkMachineConfig(b *testing.B) {
	c, _, err := spec.Load(filepath.Join("..", "examples", "proxmox-external"), spec.Options{})
	if err != nil {
		b.Fatal(err)
	}
	bundle, err := machineconfig.NewSecrets(c.Talos.Version)
	if err != nil {
		b.Fatal(err)
	}
	endpoint, vip := reconcile.Endpoint(c)
	in := machineconfig.Input{Cluster: c, Secrets: bundle, Endpoint: endpoint, VIP: vip}
	m := machineconfig.Machines(c)[0]
	for b.Loop() {
		if _, err := machineconfig.Generate(in, m); err != nil {
			b.Fatal(err)
		}
	}
}
