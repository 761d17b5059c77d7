package openstack

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// loadCluster writes cluster.yaml with the given security and openstack
// extras and loads it.
func loadCluster(t *testing.T, security, openstackExtra string) *spec.Cluster {
	t.Helper()
	dir := t.TempDir()
	body := `name: sec
talos: {version: v1.13.8}
kubernetes: {version: v1.36.1}
controlplane: {count: 1, flavor: gp.medium, disk: 40}
openstack:
  url: https://keystone.example:5000/v3
  availability_zone: nova
  external_net: ext-net
` + openstackExtra + `
network:
  cluster: {cidr: 10.20.0.0/24}
  dns: []
  ntp: [ntp.example]
` + security
	if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSecurityGroupRules(t *testing.T) {
	t.Parallel()
	members := []string{
		"ingress IPv4 icmp from members of the group",
		"ingress IPv4 tcp from members of the group",
		"ingress IPv4 udp from members of the group",
	}
	var egressNoMetadata []string
	for _, p := range complement(netip.MustParsePrefix("169.254.169.254/32")) {
		egressNoMetadata = append(egressNoMetadata, "egress IPv4 any to "+p.String())
	}
	allEgress := []string{"egress IPv4 any to anywhere", "egress IPv6 any to anywhere"}
	cases := []struct {
		name, security, extra string
		want                  []string
	}{
		{
			name: "no rules: members, the public web ports, egress without the metadata service",
			want: slices.Concat(members, []string{
				"ingress IPv4 tcp port 80 from anywhere",
				"ingress IPv4 tcp port 443 from anywhere",
			}, egressNoMetadata),
		},
		{
			name: "kubernetes and talos from the tailnet, https claimed by one office",
			security: `security:
  kubernetes: {tailnet: 100.64.0.0/10}
  talos: {tailnet: 100.64.0.0/10, admin: 192.0.2.7}
  https: {office: 198.51.100.0/24}
`,
			want: slices.Concat(members, []string{
				"ingress IPv4 tcp port 6443 from 100.64.0.0/10",
				"ingress IPv4 tcp port 50000 from 100.64.0.0/10",
				"ingress IPv4 tcp port 50000 from 192.0.2.7/32",
				"ingress IPv4 tcp port 443 from 198.51.100.0/24",
				"ingress IPv4 tcp port 80 from anywhere",
			}, egressNoMetadata),
		},
		{
			name: "0.0.0.0/0 is a rule without a remote prefix; an empty rule closes its port; metadata allowed",
			security: `security:
  http: {}
  metrics: {hosts: {all: 0.0.0.0/0}, port: 9100}
`,
			extra: "  metadata: true\n",
			want: slices.Concat(members, []string{
				"ingress IPv4 tcp port 9100 from anywhere",
				"ingress IPv4 tcp port 443 from anywhere",
			}, allEgress),
		},
		{
			name: "a rule on 443 under another name claims it too",
			security: `security:
  web: {hosts: {lb: 203.0.113.0/28}, port: 443}
`,
			want: slices.Concat(members, []string{
				"ingress IPv4 tcp port 443 from 203.0.113.0/28",
				"ingress IPv4 tcp port 80 from anywhere",
			}, egressNoMetadata),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := loadCluster(t, tc.security, tc.extra)
			var got []string
			for _, r := range securityRules(c) {
				got = append(got, r.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("rules:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(tc.want, "\n     "))
			}
		})
	}
}

func TestComplementCoversAllButTheAddress(t *testing.T) {
	t.Parallel()
	meta := netip.MustParsePrefix("169.254.169.254/32")
	parts := complement(meta)
	if len(parts) != 32 {
		t.Fatalf("%d prefixes, want 32", len(parts))
	}
	for _, probe := range []string{"0.0.0.0", "10.1.2.3", "169.254.169.253", "169.254.169.255", "255.255.255.255", "169.254.0.1"} {
		a := netip.MustParseAddr(probe)
		n := 0
		for _, p := range parts {
			if p.Contains(a) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s is in %d prefixes, want exactly 1", probe, n)
		}
	}
	for _, p := range parts {
		if p.Contains(meta.Addr()) {
			t.Errorf("%s contains the metadata address", p)
		}
	}
}
