package spec_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// minimalCluster is a valid cluster.yaml whose line numbers the tests below
// rely on: name is on line 2 and proxmox on line 6.
const minimalCluster = `include: [secrets.yaml]
name: edge
talos: {version: v1.13.8}
kubernetes: {version: v1.36.1}
controlplane: {count: 3, cores: 4, memory: 8, disk: 40}
proxmox:
  url: https://pve.example.edu:8006
  storage: local-lvm
  iso_storage: local
  network: {cluster: {bridge: vmbr0}}
network:
  cluster: {cidr: 192.168.20.0/24, kubeapi_vip: 192.168.20.10}
  dns: []
  ntp: [ntp.example.edu]
`

func minimalDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "cluster.yaml", minimalCluster)
	writeFile(t, dir, "secrets.yaml", "proxmox:\n  token_id: a@pve!b\n  token_secret: s\n")
	for name, body := range files {
		writeFile(t, dir, name, body)
	}
	return dir
}

// loadProblems loads dir and returns every error and warning as text.
func loadProblems(t *testing.T, dir string) (errs, warns []string) {
	t.Helper()
	_, ws, err := spec.Load(dir, spec.Options{})
	if err != nil {
		se, ok := err.(*spec.Error)
		if !ok {
			t.Fatalf("Load returned a %T: %v", err, err)
		}
		for _, p := range se.Problems {
			errs = append(errs, p.String())
		}
	}
	for _, w := range ws {
		warns = append(warns, w.String())
	}
	return errs, warns
}

func TestDuplicateKeysWarnNamingBothLines(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		edit  func(t *testing.T, dir string)
		warns []string
	}{
		{
			name: "name twice in cluster.yaml",
			edit: func(t *testing.T, dir string) {
				appendFile(t, filepath.Join(dir, "cluster.yaml"), "name: edge2\n")
			},
			warns: []string{"cluster.yaml:15: name: duplicate key, also at line 2; the last one (line 15) is used"},
		},
		{
			name: "proxmox twice in secrets.yaml",
			edit: func(t *testing.T, dir string) {
				writeFile(t, dir, "secrets.yaml", "proxmox:\n  token_id: a@pve!b\n  token_secret: s\ntailscale: ~\nproxmox:\n  token_id: a@pve!b\n  token_secret: hunter2\n")
			},
			warns: []string{"secrets.yaml:5: proxmox: duplicate key, also at line 1; the last one (line 5) is used"},
		},
		{
			name: "a nested key three times",
			edit: func(t *testing.T, dir string) {
				writeFile(t, dir, "secrets.yaml", "proxmox:\n  token_id: a@pve!b\n  token_secret: s\n  token_secret: t\n  token_secret: u\n")
			},
			warns: []string{"secrets.yaml:5: proxmox.token_secret: duplicate key, also at lines 3, 4; the last one (line 5) is used"},
		},
		{
			name: "a mapping an alias repeats is reported once",
			edit: func(t *testing.T, dir string) {
				body := strings.Replace(minimalCluster, "controlplane: {count: 3, cores: 4, memory: 8, disk: 40}",
					"controlplane: &cp {count: 3, cores: 4, memory: 8, disk: 40, disk: 40}\nworkers: {w: *cp}", 1)
				writeFile(t, dir, "cluster.yaml", body)
			},
			warns: []string{"cluster.yaml:5: controlplane.disk: duplicate key, also at line 5; the last one (line 5) is used"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := minimalDir(t, nil)
			tc.edit(t, dir)
			errs, warns := loadProblems(t, dir)
			if len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
			var dups []string
			for _, w := range warns {
				if strings.Contains(w, "duplicate key") {
					dups = append(dups, w)
				}
			}
			if strings.Join(dups, "\n") != strings.Join(tc.warns, "\n") {
				t.Fatalf("duplicate-key warnings:\n%s\nwant:\n%s", strings.Join(dups, "\n"), strings.Join(tc.warns, "\n"))
			}
			for _, w := range warns {
				if strings.Contains(w, "hunter2") {
					t.Fatalf("a warning echoes a value: %s", w)
				}
			}
		})
	}
}

func TestSecondYAMLDocumentIsRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		files   map[string]string
		appendC string // appended to cluster.yaml
		want    string // "" for a clean load
	}{
		{name: "second document in cluster.yaml", appendC: "---\nname: other\n",
			want: "cluster.yaml:15: a second YAML document starts here"},
		{name: "empty second document in cluster.yaml", appendC: "--- # nothing follows\n",
			want: "cluster.yaml:15: a second YAML document starts here"},
		{name: "second document in an include", files: map[string]string{
			"secrets.yaml": "proxmox:\n  token_id: a@pve!b\n  token_secret: s\n---\ntailscale: {}\n"},
			want: "secrets.yaml:4: a second YAML document starts here"},
		{name: "a document end marker is fine", appendC: "...\n"},
		{name: "a leading document marker is fine", files: map[string]string{
			"secrets.yaml": "---\nproxmox:\n  token_id: a@pve!b\n  token_secret: s\n"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := minimalDir(t, tc.files)
			if tc.appendC != "" {
				appendFile(t, filepath.Join(dir, "cluster.yaml"), tc.appendC)
			}
			errs, _ := loadProblems(t, dir)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("errors: %v", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.HasPrefix(errs[0], tc.want) {
				t.Fatalf("errors %q, want one starting %q", errs, tc.want)
			}
		})
	}
}

func TestClusterFileMustBeABoundedRegularFile(t *testing.T) {
	t.Parallel()
	t.Run("a directory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "cluster.yaml"), 0o755); err != nil {
			t.Fatal(err)
		}
		errs, _ := loadProblems(t, dir)
		if strings.Join(errs, "\n") != "cluster.yaml: not a regular file" {
			t.Fatalf("errors %q", errs)
		}
	})
	t.Run("too large", func(t *testing.T) {
		t.Parallel()
		dir := minimalDir(t, nil)
		big := minimalCluster + "# " + strings.Repeat("x", 4<<20) + "\n"
		writeFile(t, dir, "cluster.yaml", big)
		errs, _ := loadProblems(t, dir)
		if want := "cluster.yaml: larger than " + strconv.Itoa(4<<20) + " bytes"; strings.Join(errs, "\n") != want {
			t.Fatalf("errors %q, want %q", errs, want)
		}
	})
	t.Run("a symbolic link inside the directory is followed", func(t *testing.T) {
		t.Parallel()
		dir := minimalDir(t, map[string]string{"real.yaml": minimalCluster})
		if err := os.Remove(filepath.Join(dir, "cluster.yaml")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("real.yaml", filepath.Join(dir, "cluster.yaml")); err != nil {
			t.Fatal(err)
		}
		if errs, _ := loadProblems(t, dir); len(errs) > 0 {
			t.Fatalf("errors: %v", errs)
		}
	})
	t.Run("a symbolic link leading outside is refused", func(t *testing.T) {
		t.Parallel()
		outside := t.TempDir()
		writeFile(t, outside, "cluster.yaml", minimalCluster)
		dir := minimalDir(t, nil)
		if err := os.Remove(filepath.Join(dir, "cluster.yaml")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(outside, "cluster.yaml"), filepath.Join(dir, "cluster.yaml")); err != nil {
			t.Fatal(err)
		}
		errs, _ := loadProblems(t, dir)
		if len(errs) != 1 || !strings.Contains(errs[0], "leads outside the cluster directory") {
			t.Fatalf("errors %q", errs)
		}
	})
}

func TestSourceNamesWhereValuesWereWritten(t *testing.T) {
	t.Parallel()
	body := strings.Replace(minimalCluster, "talos: {version: v1.13.8}", `tags: {team: platform}
talos:
  version: v1.13.8
  config_patches:
    - "machine: {}"
    - |
      machine: {}`, 1) + "workers:\n  gpu: {count: 1, cores: 1, memory: 1, disk: 1, config_patches: [\"cluster: {}\"]}\n"
	dir := minimalDir(t, map[string]string{"cluster.yaml": body, "secrets.yaml": "proxmox:\n  token_id: a@pve!b\n  token_secret: s\nworkers:\n  gpu:\n    tags:\n      x: y\n"})
	c, _, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"tags.team":                     "cluster.yaml:3",
		"talos.config_patches[0]":       "cluster.yaml:7",
		"talos.config_patches[1]":       "cluster.yaml:8",
		"workers.gpu.config_patches[0]": "cluster.yaml:22",
		"workers.gpu.tags.x":            "secrets.yaml:7",
	} {
		s, ok := c.Source(key)
		if got := s.File + ":" + strconv.Itoa(s.Line); !ok || got != want {
			t.Errorf("Source(%s) = %s, %v; want %s", key, got, ok, want)
		}
	}
	if _, ok := c.Source("tags.nope"); ok {
		t.Error("Source of a key never written reports true")
	}
	p := c.ProblemAt("talos.config_patches[1]", "bad")
	if p.String() != "cluster.yaml:8: talos.config_patches[1]: bad" {
		t.Errorf("ProblemAt = %q", p)
	}
}
