package spec_test

import (
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestKubernetesRange reads the support table by Talos minor: the patch
// and a prerelease suffix do not matter, and a minor not in the table (or
// a version that does not parse) is unknown.
func TestKubernetesRange(t *testing.T) {
	t.Parallel()
	cases := []struct {
		talos  string
		lo, hi string
		ok     bool
	}{
		{"v1.13.0", "v1.31", "v1.36", true},
		{"v1.13.8", "v1.31", "v1.36", true},
		{"1.13.2", "v1.31", "v1.36", true},
		{"v1.14.0-beta.0", "v1.33", "v1.37", true},
		{"v1.14.3", "v1.33", "v1.37", true},
		{"v1.15.0", "", "", false},
		{"v1.12.9", "", "", false},
		{"v1.13", "", "", false},
		{"", "", "", false},
		{"latest", "", "", false},
	}
	for _, c := range cases {
		lo, hi, ok := spec.KubernetesRange(c.talos)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("KubernetesRange(%q) = %q, %q, %v; want %q, %q, %v", c.talos, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}
