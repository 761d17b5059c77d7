package reconcile_test

import (
	"path/filepath"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// BenchmarkFirstBuild measures the offline plan of the largest example.
func BenchmarkFirstBuild(b *testing.B) {
	c, warns, err := spec.Load(filepath.Join("..", "examples", "proxmox-external"), spec.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := reconcile.FirstBuild(c, warns); err != nil {
			b.Fatal(err)
		}
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
