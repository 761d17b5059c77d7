package spec_test

import (
	"path/filepath"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// BenchmarkLoad measures loading and validating the largest shipped example.
func BenchmarkLoad(b *testing.B) {
	dir := filepath.Join("..", "..", "examples", "proxmox-external")
	for b.Loop() {
		if _, _, err := spec.Load(dir, spec.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
