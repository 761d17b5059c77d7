package machineconfig_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/types/network"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

func hosts(cidrs ...string) []spec.SecurityHost {
	out := make([]spec.SecurityHost, 0, len(cidrs))
	for i, c := range cidrs {
		out = append(out, spec.SecurityHost{Label: fmt.Sprintf("h%d", i), CIDR: netip.MustParsePrefix(c)})
	}

	return out
}

func TestFirewall(t *testing.T) {
	t.Parallel()

	base := []string{"NetworkDefaultActionConfig", "cluster-tcp", "cluster-udp", "dhcp-client"}

	for _, tc := range []struct {
		name  string
		edit  func(c *spec.Cluster)
		want  []string
		rules map[string]string // rule name -> "proto ports <- sources"
	}{
		{
			name: "no rules: 80 and 443 open",
			edit: func(*spec.Cluster) {},
			want: append(slices.Clone(base), "open-tcp-80", "open-tcp-443"),
			rules: map[string]string{
				"cluster-tcp":  "tcp 1-65535 <- 10.40.0.0/24",
				"cluster-udp":  "udp 1-65535 <- 10.40.0.0/24",
				"dhcp-client":  "udp 68 <- 0.0.0.0/0",
				"open-tcp-80":  "tcp 80 <- 0.0.0.0/0",
				"open-tcp-443": "tcp 443 <- 0.0.0.0/0",
			},
		},
		{
			name: "https rule with hosts claims 443",
			edit: func(c *spec.Cluster) {
				c.Security = []spec.SecurityRule{{Name: "https", Port: 443, Hosts: hosts("203.0.113.0/24", "198.51.100.9/32", "203.0.113.0/24")}}
			},
			want: append(slices.Clone(base), "open-tcp-80", "security-https"),
			rules: map[string]string{
				"security-https": "tcp 443 <- 203.0.113.0/24 198.51.100.9/32",
			},
		},
		{
			name: "custom-named rule on 443 without hosts closes it",
			edit: func(c *spec.Cluster) {
				c.Security = []spec.SecurityRule{{Name: "web", Port: 443}}
			},
			want: append(slices.Clone(base), "open-tcp-80"),
		},
		{
			name: "http claimed, kubernetes and talos rules, names normalised",
			edit: func(c *spec.Cluster) {
				c.Security = []spec.SecurityRule{
					{Name: "http", Port: 80},
					{Name: "kubernetes", Port: 6443, Hosts: hosts("192.0.2.0/24")},
					{Name: "Talos API!!", Port: 50000, Hosts: hosts("192.0.2.7/32")},
					{Name: "--My  Service_v2--", Port: 8443, Hosts: hosts("0.0.0.0/0")},
				}
			},
			want: append(slices.Clone(base), "open-tcp-443", "security-kubernetes", "security-talos-api", "security-my-service-v2"),
			rules: map[string]string{
				"security-talos-api":     "tcp 50000 <- 192.0.2.7/32",
				"security-my-service-v2": "tcp 8443 <- 0.0.0.0/0",
			},
		},
		{
			name: "tailscale",
			edit: func(c *spec.Cluster) { c.Tailscale = &spec.Tailscale{} },
			want: append(slices.Clone(base), "tailscale", "open-tcp-80", "open-tcp-443"),
			rules: map[string]string{
				"tailscale": "udp 41641 <- 0.0.0.0/0",
			},
		},
		{
			name: "metal L2s: cluster rules cover them, kubespan from the peers",
			edit: func(c *spec.Cluster) {
				c.Talos.KubeSpan = true
				c.Metal = []spec.MetalGroup{{Name: "rack", Servers: []spec.MetalServer{
					{Name: "m1", Network: spec.L2{CIDR: netip.MustParsePrefix("10.50.0.0/24")}},
					{Name: "m2", Network: spec.L2{CIDR: netip.MustParsePrefix("10.50.0.0/24")}},
					{Name: "m3", Network: spec.L2{CIDR: netip.MustParsePrefix("10.40.0.0/24")}},
				}}}
			},
			want: append(slices.Clone(base), "kubespan", "open-tcp-80", "open-tcp-443"),
			rules: map[string]string{
				"cluster-tcp": "tcp 1-65535 <- 10.40.0.0/24 10.50.0.0/24",
				"kubespan":    "udp 51820 <- 10.50.0.0/24",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			c := openStackCluster()
			c.Network.Cluster.CIDR = netip.MustParsePrefix("10.40.0.0/24")
			tc.edit(c)

			docs, err := machineconfig.Firewall(c)
			if err != nil {
				t.Fatal(err)
			}

			var names []string

			got := map[string]string{}

			for _, d := range docs {
				switch d := d.(type) {
				case *network.DefaultActionConfigV1Alpha1:
					names = append(names, d.Kind())

					if d.Ingress.String() != "block" {
						t.Errorf("default ingress action %s", d.Ingress)
					}
				case *network.RuleConfigV1Alpha1:
					names = append(names, d.MetaName)
					got[d.MetaName] = describeRule(d)
				default:
					t.Errorf("unexpected document %T", d)
				}
			}

			if !slices.Equal(names, tc.want) {
				t.Errorf("documents\n got %v\nwant %v", names, tc.want)
			}

			for name, want := range tc.rules {
				if got[name] != want {
					t.Errorf("rule %s = %q, want %q", name, got[name], want)
				}
			}
		})
	}
}

func describeRule(r *network.RuleConfigV1Alpha1) string {
	var ports, sources []string
	for _, p := range r.PortSelector.Ports {
		if p.Lo == p.Hi {
			ports = append(ports, fmt.Sprint(p.Lo))
		} else {
			ports = append(ports, p.String())
		}
	}

	for _, in := range r.Ingress {
		sources = append(sources, in.Subnet.String())
	}

	return fmt.Sprintf("%s %s <- %s", r.PortSelector.Protocol, strings.Join(ports, ","), strings.Join(sources, " "))
}

func TestFirewallNameCollision(t *testing.T) {
	t.Parallel()

	c := openStackCluster()
	c.Security = []spec.SecurityRule{
		{Name: "Admin Panel", Port: 8080, Hosts: hosts("192.0.2.0/24")},
		{Name: "admin-panel", Port: 8081, Hosts: hosts("192.0.2.0/24")},
	}

	_, err := machineconfig.Firewall(c)
	if err == nil || !strings.Contains(err.Error(), "security.Admin Panel and security.admin-panel") {
		t.Fatalf("err = %v, want both rules named", err)
	}

	// Generate reports it too, naming the machine.
	_, err = machineconfig.Generate(openStackInput(t, c), machine(t, c, "prod-a-worker-01"))
	if err == nil || !strings.Contains(err.Error(), "security.Admin Panel and security.admin-panel") {
		t.Fatalf("Generate err = %v", err)
	}
}
