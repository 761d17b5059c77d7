package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cli runs the command in-process and returns its exit code and output.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestValidateExamples(t *testing.T) {
	t.Parallel()
	dirs, _ := filepath.Glob("../../examples/*")
	if len(dirs) < 3 {
		t.Fatalf("want at least three examples, found %v", dirs)
	}
	for _, d := range dirs {
		code, _, stderr := cli(t, "validate", "-C", d)
		if code != 0 {
			t.Errorf("validate %s: exit %d\n%s", d, code, stderr)
		}
	}
}

func TestValidateReportsEveryError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "cluster.yaml", `name: Bad
talos: {version: v1.12.0}
kubernetes: {version: v1.36.1}
controlplane: {count: 2, cores: 1, memory: 1, disk: 1}
proxmox: {url: https://x, storage: s, iso_storage: i, network: {cluster: {bridge: b}}}
network:
  cluster: {cidr: 10.0.0.0/24, kubeapi_vip: 10.0.1.5}
  dns: []
  ntp: [x]
`)
	code, _, stderr := cli(t, "validate", "-C", dir)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, stderr)
	}
	for _, want := range []string{
		"error: cluster.yaml:1: name: ",
		"error: cluster.yaml:2: talos.version: ",
		"error: cluster.yaml:7: network.cluster.kubeapi_vip: ",
		"warning: cluster.yaml:4: controlplane.count: even controlplane count (2)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestValidateNeverPrintsSecrets(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-token-value-123"
	dir := t.TempDir()
	write(t, dir, "cluster.yaml", "include: [secrets.yaml]\nname: x\n")
	write(t, dir, "secrets.yaml", "proxmox:\n  token_secret: "+secret+"\n  token_id: [a]\ntailscale:\n  auth_key: {k: "+secret+"}\n  bogus: "+secret+"\n")
	code, stdout, stderr := cli(t, "validate", "-C", dir)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if strings.Contains(stdout+stderr, secret) {
		t.Fatalf("a secret value was printed:\n%s%s", stdout, stderr)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"validate", "--nope"},
		{"validate", "extra-arg"},
		{"init", "--proxmox", "--openstack"},
		{"init", "--metal"},
		{"plan", "--offline", "-o", "yaml", "-C", "../../examples/openstack"},
	} {
		if code, _, stderr := cli(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, stderr)
		}
	}
}

func TestInitScaffoldsAValidDirectoryAndKeepsFiles(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"--proxmox", "--openstack"} {
		dir := filepath.Join(t.TempDir(), "c")
		if code, _, stderr := cli(t, "init", provider, "-C", dir, "demo"); code != 0 {
			t.Fatalf("init %s: exit %d\n%s", provider, code, stderr)
		}
		if code, _, stderr := cli(t, "validate", "-C", dir); code != 0 {
			t.Fatalf("scaffold %s does not validate:\n%s", provider, stderr)
		}
		st, err := os.Stat(filepath.Join(dir, "secrets.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("secrets.yaml mode %v, want 0600", st.Mode().Perm())
		}
		gi, _ := os.ReadFile(filepath.Join(dir, ".gitignore"))
		for _, e := range []string{"secrets.yaml", "talossecrets.yaml", "talosconfig", "kubeconfig"} {
			if !strings.Contains(string(gi), e+"\n") {
				t.Errorf(".gitignore lacks %s", e)
			}
		}
		// A second init keeps the user's edits.
		write(t, dir, "cluster.yaml", "edited: true\n")
		if code, _, _ := cli(t, "init", provider, "-C", dir, "demo"); code != 0 {
			t.Fatal("second init failed")
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "cluster.yaml")); string(b) != "edited: true\n" {
			t.Errorf("init overwrote cluster.yaml: %q", b)
		}
		if gi2, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); string(gi2) != string(gi) {
			t.Errorf(".gitignore changed on the second init:\n%s", gi2)
		}
	}
}

func TestPlanOfflineJSON(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := cli(t, "plan", "--offline", "-o", "json", "-C", "../../examples/proxmox-external")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var p struct {
		Version int    `json:"version"`
		Cluster string `json:"cluster"`
		Changes []struct {
			Action   string `json:"action"`
			Resource struct {
				Kind string `json:"kind"`
				Name string `json:"name"`
			} `json:"resource"`
		} `json:"changes"`
		Warnings []string `json:"warnings"`
		Refusals []any    `json:"refusals"`
	}
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatalf("plan -o json is not JSON: %v\n%s", err, stdout)
	}
	if p.Version != 2 || p.Cluster != "edge" || p.Refusals == nil {
		t.Fatalf("unexpected header: %+v", p)
	}
	machines := 0
	for _, c := range p.Changes {
		if c.Resource.Kind == "machine" && c.Action == "create" {
			machines++
		}
	}
	if machines != 7 { // 3 control planes + 3 workers + 1 gpu
		t.Errorf("plan creates %d machines, want 7", machines)
	}
}

func TestPlanWithoutOfflineSaysWhy(t *testing.T) {
	t.Parallel()
	code, _, stderr := cli(t, "plan", "-C", "../../examples/openstack")
	if code != 1 || !strings.Contains(stderr, "--offline") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDestroyWithoutTerminalOrYesStops(t *testing.T) {
	t.Parallel()
	dir := copyExample(t, "proxmox-bridge")
	write(t, dir, "secrets.yaml", "proxmox:\n  token_id: a@pve!b\n  token_secret: s\n")
	code, _, stderr := cli(t, "destroy", "-C", dir)
	if code != 130 || !strings.Contains(stderr, "--yes") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}
