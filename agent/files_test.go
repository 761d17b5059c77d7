package agent_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/taloscluster/taloscluster/agent"
)

func TestClusterFilesTakeSecretsFromTheSecretsDir(t *testing.T) {
	t.Parallel()
	tree := fstest.MapFS{
		"clusters/a/cluster.yaml": {Data: []byte("name: a\n")},
		"clusters/a/secrets.yaml": {Data: []byte("proxmox: {token_secret: from-the-pull-request}\n")},
	}
	secrets := t.TempDir()
	if err := os.MkdirAll(filepath.Join(secrets, "clusters", "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "clusters", "a", "secrets.yaml"), []byte("proxmox: {token_secret: from-the-agent}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files, err := agent.ClusterFiles(tree, secrets, "clusters/a")
	if err != nil {
		t.Fatal(err)
	}
	got, err := fs.ReadFile(files, "secrets.yaml")
	if err != nil || string(got) != "proxmox: {token_secret: from-the-agent}\n" {
		t.Fatalf("secrets.yaml = %q, %v; want the agent's", got, err)
	}
	if got, _ := fs.ReadFile(files, "cluster.yaml"); string(got) != "name: a\n" {
		t.Fatalf("cluster.yaml = %q", got)
	}
	other, err := agent.ClusterFiles(tree, secrets, "clusters/b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.ReadFile(other, "secrets.yaml"); err == nil {
		t.Fatal("a cluster without agent secrets read some")
	}
}
