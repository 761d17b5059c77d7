package spec_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestYAML11 checks that files read as the Python tool's YAML 1.1 parser
// reads them: yes/no/on/off are booleans, anchors, aliases and merge keys
// work, and a quoted "true" stays a string.
func TestYAML11(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, extra string
		want        outcome
		check       func(*testing.T, *spec.Cluster)
	}{
		{"yes is a bool", "talos:\n  version: v1.13.8\n  kubespan: yes\n", outcome{}, func(t *testing.T, c *spec.Cluster) {
			if !c.Talos.KubeSpan {
				t.Error("kubespan: yes did not read as true")
			}
		}},
		{"quoted true is a string", "talos:\n  version: v1.13.8\n  kubespan: 'true'\n", outcome{errKey: "talos.kubespan"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := proxmoxBase()
			tr.del("talos")
			dir := writeDir(t, tr, nil)
			if tc.extra != "" {
				appendFile(t, filepath.Join(dir, "cluster.yaml"), tc.extra)
			}
			c, _ := check(t, dir, tc.want)
			if tc.check != nil && c != nil {
				tc.check(t, c)
			}
		})
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	body := `include: [secrets.yaml]
name: anchors
talos: {version: v1.13.8}
kubernetes: {version: v1.36.1}
x-size: &size {cores: 4, memory: 8, disk: 40}
controlplane:
  <<: *size
  count: 3
workers:
  worker:
    <<: *size
    count: 2
    disk: 80
proxmox:
  url: https://pve.example:8006
  storage: s
  iso_storage: i
  tls_verify: off
  network: {cluster: {bridge: vmbr0}}
network:
  cluster: {cidr: 192.168.1.0/24, kubeapi_vip: 192.168.1.5}
  dns: []
  ntp: [pool.ntp.org]
`
	// x-size is not a known key, so it must be refused: anchors cannot be
	// parked under a made-up key.
	writeFile(t, dir, "cluster.yaml", body)
	writeFile(t, dir, "secrets.yaml", "{}\n")
	check(t, dir, outcome{errText: "unknown key(s): x-size"})

	// Defined on first use instead, the anchor and the merge key work.
	body = strings.Replace(body, "x-size: &size {cores: 4, memory: 8, disk: 40}\ncontrolplane:\n  <<: *size\n", "controlplane:\n  <<: &size {cores: 4, memory: 8, disk: 40}\n", 1)
	writeFile(t, dir, "cluster.yaml", body)
	c, _ := check(t, dir, outcome{})
	if c.ControlPlane.Cores != 4 || c.Workers[0].Memory != 8 || c.Workers[0].Disk != 80 {
		t.Fatalf("merge keys: control plane %+v, worker %+v", c.ControlPlane, c.Workers[0])
	}
	if c.Proxmox.TLSVerify.Verify {
		t.Fatal("tls_verify: off did not read as false")
	}
}

// TestDuplicateKeyLastWins: PyYAML keeps the last value of a key repeated in
// one mapping, so the loader does the same, and warns naming both lines.
func TestDuplicateKeyLastWins(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, proxmoxBase(), nil)
	data, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	first := 1 + strings.Count(string(data[:strings.Index(string(data), "\nname: ")+1]), "\n")
	last := 1 + strings.Count(string(data), "\n")
	appendFile(t, filepath.Join(dir, "cluster.yaml"), "name: other\n")
	c, warns := check(t, dir, outcome{})
	if c.Name != "other" {
		t.Fatalf("name %q; want the last value", c.Name)
	}
	want := fmt.Sprintf("cluster.yaml:%d: name: duplicate key, also at line %d; the last one (line %d) is used", last, first, last)
	if len(warns) != 1 || warns[0].String() != want {
		t.Fatalf("warnings %v; want exactly %q", warns, want)
	}
}

func TestSymlinkedIncludeOutsideIsRefused(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFile(t, outside, "evil.yaml", "tags: {a: b}\n")
	tr := proxmoxBase().set("include", []any{"secrets.yaml", "link.yaml"})
	dir := writeDir(t, tr, nil)
	if err := os.Symlink(filepath.Join(outside, "evil.yaml"), filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	check(t, dir, outcome{errKey: "include", errText: "must be a path inside the cluster directory"})
}

func TestMissingIncludeToleratedForCheck(t *testing.T) {
	t.Parallel()
	tr := proxmoxBase().set("include", []any{"secrets.yaml", "metal.yaml"})
	dir := writeDir(t, tr, nil)
	_, warns, err := spec.Load(dir, spec.Options{TolerateMissingIncludes: true})
	if err != nil {
		t.Fatalf("check-style load failed: %v", err)
	}
	found := false
	for _, w := range warns {
		found = found || strings.Contains(w.String(), "include metal.yaml is missing")
	}
	if !found {
		t.Fatalf("no warning for the missing include: %v", warns)
	}
}

func TestIncludedFileProblemsNameThatFile(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, proxmoxBase(), map[string]string{"secrets.yaml": "proxmox:\n  token_id: a@pve!b\n  bogus: 1\n"})
	_, _, err := spec.Load(dir, spec.Options{})
	if err == nil || !strings.Contains(err.Error(), "secrets.yaml:3: proxmox: proxmox: unknown key(s): bogus") {
		t.Fatalf("want the problem reported against secrets.yaml line 3, got: %v", err)
	}
}

func TestBillionLaughsIsBounded(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		b.WriteString("a" + strconv.Itoa(i) + ": &a" + strconv.Itoa(i) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + strconv.Itoa(i-1))
		}
		b.WriteString("]\n")
	}
	dir := t.TempDir()
	writeFile(t, dir, "cluster.yaml", b.String())
	_, _, err := spec.Load(dir, spec.Options{})
	if err == nil || !strings.Contains(err.Error(), "expands to more than") {
		t.Fatalf("want the expansion bound, got: %v", err)
	}
}

func writeFile(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, body string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(body); err != nil {
		t.Fatal(err)
	}
}
