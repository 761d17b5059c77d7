package spec_test

import (
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

func TestCredentials(t *testing.T) {
	t.Parallel()
	const secret = "pve-token-secret-value"
	cases := []struct {
		name    string
		base    func() tree
		secrets string
		want    []string // keys with a problem
	}{
		{"proxmox set", proxmoxBase, "proxmox:\n  token_id: tc@pve!ci\n  token_secret: " + secret + "\n", nil},
		{"proxmox placeholder", proxmoxBase, "proxmox:\n  token_id: CHANGE-ME\n  token_secret: CHANGE-ME\n", []string{"proxmox.token_id", "proxmox.token_secret"}},
		{"proxmox missing", proxmoxBase, "{}\n", []string{"proxmox.token_id", "proxmox.token_secret"}},
		{"proxmox bad token id", proxmoxBase, "proxmox:\n  token_id: justaname\n  token_secret: " + secret + "\n", []string{"proxmox.token_id"}},
		{"openstack empty", openstackBase, "openstack:\n  credential_id: ''\n  credential_secret: x\n", []string{"openstack.credential_id"}},
		{"tailscale placeholder", proxmoxBase, "proxmox:\n  token_id: tc@pve!ci\n  token_secret: x\ntailscale:\n  auth_key: CHANGE-ME\n", []string{"tailscale.auth_key"}},
		{"tailscale absent key is fine", proxmoxBase, "proxmox:\n  token_id: tc@pve!ci\n  token_secret: x\ntailscale: {}\n", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeDir(t, tc.base(), map[string]string{"secrets.yaml": tc.secrets})
			c, _, err := spec.Load(dir, spec.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := c.Credentials()
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want problems on %v", got, tc.want)
			}
			for i, p := range got {
				if p.Key != tc.want[i] {
					t.Errorf("problem %d on %q, want %q", i, p.Key, tc.want[i])
				}
				if strings.Contains(p.String(), secret) {
					t.Errorf("problem echoes the secret: %s", p)
				}
			}
		})
	}
}
