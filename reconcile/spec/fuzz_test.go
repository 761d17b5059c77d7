package spec_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// FuzzLoad feeds arbitrary cluster.yaml bytes to the loader: it must never
// panic, and every rejection must be a *spec.Error whose problems name a
// file and, below the top level, a key.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "fuzz-seed", "*.yaml"))
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, []byte("proxmox:\n  token_id: a@pve!b\n  token_secret: x\n"))
	}
	f.Add([]byte("name: [\n"), []byte(""))
	f.Add([]byte("a: &a [*a, *a]\n"), []byte("{}"))
	f.Add([]byte("<<: {name: x}\n"), []byte("- 1"))
	f.Fuzz(func(t *testing.T, cluster, secrets []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), cluster, 0o600); err != nil {
			t.Fatal(err)
		}
		if len(secrets) > 0 {
			if err := os.WriteFile(filepath.Join(dir, "secrets.yaml"), secrets, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		c, _, err := spec.Load(dir, spec.Options{})
		if err == nil {
			if c == nil {
				t.Fatal("nil cluster without an error")
			}
			return
		}
		var se *spec.Error
		if !errors.As(err, &se) {
			t.Fatalf("rejection is a %T, not *spec.Error: %v", err, err)
		}
		if len(se.Problems) == 0 {
			t.Fatal("a *spec.Error with no problems")
		}
		for _, p := range se.Problems {
			if p.File == "" || p.Message == "" {
				t.Fatalf("problem without a file or reason: %+v", p)
			}
		}
	})
}
