package spec_test

import (
	"testing"
	"testing/fstest"

	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestLoadFS reads a cluster directory from a file system that is not the
// disk, as the agent does from a commit's tree.
func TestLoadFS(t *testing.T) {
	t.Parallel()
	data, err := yaml.Marshal(map[string]any(proxmoxBase()))
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{
		"cluster.yaml": {Data: data},
		"secrets.yaml": {Data: []byte("proxmox:\n  token_id: a@pve!b\n  token_secret: s\n")},
	}
	c, _, err := spec.LoadFS(fsys, "clusters/edge", spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "edge" || c.Proxmox.TokenID != "a@pve!b" {
		t.Fatalf("loaded %q with token id %q", c.Name, c.Proxmox.TokenID)
	}
	delete(fsys, "secrets.yaml")
	if _, _, err := spec.LoadFS(fsys, "clusters/edge", spec.Options{}); err == nil {
		t.Fatal("a missing include loaded")
	}
}
