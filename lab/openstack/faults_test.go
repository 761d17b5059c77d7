package openstack

import "testing"

func TestMatchOp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"compute.server.create", "compute.server.create", true},
		{"compute", "compute.server.create", true},
		{"compute.*", "compute.server.create", true},
		{"compute.server.*", "compute.server.create", true},
		{"*", "identity.token.create", true},
		{"comp", "compute.server.create", false},
		{"compute.*", "computer.thing", false},
		{"network", "compute.server.create", false},
		{"compute.server", "compute.server.create", true},
		{"", "compute.server.create", false},
	} {
		if got := matchOp(tc.pattern, tc.name); got != tc.want {
			t.Errorf("matchOp(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
	m := map[string]int{"*": 1, "compute": 2, "compute.server.*": 3, "compute.server.create": 4}
	for name, want := range map[string]string{
		"compute.server.create": "compute.server.create",
		"compute.server.delete": "compute.server.*",
		"compute.flavor.list":   "compute",
		"image.image.upload":    "*",
	} {
		if got, ok := bestMatch(m, name); !ok || got != want {
			t.Errorf("bestMatch(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
