package spec_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// tree is a cluster.yaml as nested maps, edited by dotted paths.
type tree map[string]any

func (t tree) set(path string, v any) tree {
	parts := strings.Split(path, ".")
	m := map[string]any(t)
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
	return t
}

func (t tree) del(path string) tree {
	parts := strings.Split(path, ".")
	m := map[string]any(t)
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			return t
		}
		m = next
	}
	delete(m, parts[len(parts)-1])
	return t
}

func proxmoxBase() tree {
	return tree{
		"include": []any{"secrets.yaml"},
		"name":    "edge",
		"talos":   map[string]any{"version": "v1.13.8"},
		"kubernetes": map[string]any{
			"version": "v1.36.1",
		},
		"controlplane": map[string]any{"count": 3, "cores": 4, "memory": 8, "disk": 40},
		"workers": map[string]any{
			"worker": map[string]any{"count": 2, "cores": 8, "memory": 16, "disk": 100},
		},
		"proxmox": map[string]any{
			"url": "https://pve.example.edu:8006", "storage": "local-lvm", "iso_storage": "local",
			"nodes":   []any{"pve1", "pve2", "pve3"},
			"network": map[string]any{"cluster": map[string]any{"bridge": "vmbr0"}},
		},
		"network": map[string]any{
			"cluster": map[string]any{"cidr": "192.168.20.0/24", "gateway": "192.168.20.1", "kubeapi_vip": "192.168.20.10"},
			"dns":     []any{},
			"ntp":     []any{"ntp.example.edu"},
		},
		"security": map[string]any{
			"kubernetes": map[string]any{"tailnet": "100.64.0.0/10"},
			"talos":      map[string]any{"tailnet": "100.64.0.0/10"},
		},
	}
}

func externalBase() tree {
	t := proxmoxBase()
	t.del("network.cluster.kubeapi_vip")
	t.set("proxmox.network.external", map[string]any{"bridge": "vmbr1"})
	t.set("network.external", map[string]any{
		"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "kubeapi_vip": "203.0.113.10",
		"anchor_cidr": "169.254.32.0/20", "ingress_pool": "203.0.113.20-203.0.113.29",
	})
	return t
}

func sdnBase() tree {
	t := proxmoxBase()
	t.set("proxmox.network.cluster", map[string]any{"sdn": map[string]any{}})
	t.set("network.dns", []any{"192.0.2.53"})
	t.set("network.cluster.kubeapi_vip", "192.168.20.5")
	return t
}

func openstackBase() tree {
	return tree{
		"include":      []any{"secrets.yaml"},
		"name":         "science",
		"talos":        map[string]any{"version": "v1.13.8"},
		"kubernetes":   map[string]any{"version": "v1.36.1"},
		"controlplane": map[string]any{"count": 3, "flavor": "gp.medium", "disk": 40},
		"workers": map[string]any{
			"worker": map[string]any{"count": 2, "flavor": "gp.xlarge", "disk": 100},
		},
		"openstack": map[string]any{"url": "https://keystone.example.edu:5000/v3/", "availability_zone": "nova", "external_net": "ext-net"},
		"network": map[string]any{
			"cluster": map[string]any{"cidr": "192.168.100.0/24"},
			"dns":     []any{"192.0.2.53"},
			"ntp":     []any{"ntp.example.edu"},
		},
	}
}

// writeDir writes a cluster directory: cluster.yaml from t, secrets.yaml
// with placeholder credentials, and any extra files.
func writeDir(tb testing.TB, t tree, extra map[string]string) string {
	tb.Helper()
	dir := tb.TempDir()
	data, err := yaml.Marshal(map[string]any(t))
	if err != nil {
		tb.Fatal(err)
	}
	files := map[string]string{"cluster.yaml": string(data), "secrets.yaml": "{}\n"}
	for k, v := range extra {
		files[k] = v
	}
	for name, body := range files {
		if body == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// outcome is what a case expects: an error or warning whose key and text
// contain the given substrings, or a clean load.
type outcome struct {
	errKey, errText   string
	warnKey, warnText string
}

func check(t *testing.T, dir string, want outcome) (*spec.Cluster, []spec.Problem) {
	t.Helper()
	c, warns, err := spec.Load(dir, spec.Options{})
	var se *spec.Error
	if err != nil && !errors.As(err, &se) {
		t.Fatalf("Load returned a %T, want *spec.Error: %v", err, err)
	}
	if want.errKey == "" && want.errText == "" {
		if err != nil {
			t.Fatalf("unexpected errors:\n%v", err)
		}
	} else {
		if err == nil {
			t.Fatalf("want an error on %q containing %q, got none (warnings: %v)", want.errKey, want.errText, warns)
		}
		if !hasProblem(se.Problems, want.errKey, want.errText) {
			t.Fatalf("want an error on %q containing %q, got:\n%v", want.errKey, want.errText, err)
		}
		for _, p := range se.Problems {
			if p.File == "" || (p.Key == "" && !strings.Contains(p.Message, "unknown key") && !strings.Contains(p.Message, "provider") && !strings.Contains(p.Message, "YAML") && !strings.Contains(p.Message, "missing")) {
				t.Errorf("problem without a file or key: %+v", p)
			}
		}
	}
	if want.warnKey != "" || want.warnText != "" {
		if !hasProblem(warns, want.warnKey, want.warnText) {
			t.Fatalf("want a warning on %q containing %q, got: %v", want.warnKey, want.warnText, warns)
		}
	}
	return c, warns
}

func hasProblem(ps []spec.Problem, key, text string) bool {
	for _, p := range ps {
		if strings.Contains(p.Key, key) && strings.Contains(p.String(), text) {
			return true
		}
	}
	return false
}
