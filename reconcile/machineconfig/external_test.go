package machineconfig_test

import (
	"net/netip"
	"strings"
	"testing"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestAnchorAddress checks the deterministic anchor /32: the first four
// bytes of sha256("<cluster>/<hostname>") modulo the usable hosts, counted
// from the first host, so a /24 never yields its network or broadcast
// address, and a /32 yields itself.
func TestAnchorAddress(t *testing.T) {
	t.Parallel()

	// The expected values were worked out outside this code base from
	// sha256("lab/lab-worker-01") as the Python tool derives them.
	for _, tc := range []struct {
		anchor, want string
	}{
		{"169.254.64.0/20", "169.254.64.108/32"},
		{"169.254.7.0/24", "169.254.7.150/32"},
		{"169.254.9.9/32", "169.254.9.9/32"},
	} {
		got, err := machineconfig.AnchorAddress(netip.MustParsePrefix(tc.anchor), "lab", "lab-worker-01")
		if err != nil {
			t.Fatal(err)
		}
		p := netip.MustParsePrefix(tc.anchor)
		if got.Bits() != 32 || !p.Contains(got.Addr()) {
			t.Errorf("AnchorAddress(%s) = %s, want a /32 inside it", tc.anchor, got)
		}
		if tc.want != "" && got.String() != tc.want {
			t.Errorf("AnchorAddress(%s) = %s, want %s", tc.anchor, got, tc.want)
		}
		if p.Bits() < 31 && (got.Addr() == p.Addr() || !got.Addr().Next().IsValid() || !p.Contains(got.Addr().Next())) {
			t.Errorf("AnchorAddress(%s) = %s: the network or broadcast address", tc.anchor, got)
		}
	}

	a, _ := machineconfig.AnchorAddress(netip.MustParsePrefix("169.254.64.0/20"), "lab", "lab-worker-01")
	b, _ := machineconfig.AnchorAddress(netip.MustParsePrefix("169.254.64.0/20"), "lab", "lab-worker-02")
	c, _ := machineconfig.AnchorAddress(netip.MustParsePrefix("169.254.64.0/20"), "lab", "lab-worker-01")
	if a == b || a != c {
		t.Errorf("anchors %s, %s, %s: want deterministic and distinct per hostname", a, b, c)
	}
}

// TestAnchorCollision checks that two machines drawing the same anchor
// abort generation, naming both.
func TestAnchorCollision(t *testing.T) {
	t.Parallel()

	c := proxmoxCluster()
	// Six machines in a /30 (two usable hosts) must collide.
	c.Network.External.AnchorCIDR = netip.MustParsePrefix("169.254.9.0/30")

	_, err := machineconfig.Generate(proxmoxInput(t, c), machine(t, c, "lab-controlplane-01"))
	if err == nil || !strings.Contains(err.Error(), "anchor address collision") {
		t.Fatalf("Generate = %v, want an anchor address collision", err)
	}
}

// TestExternalNetwork checks the external network's documents: the anchor
// on the external link for every machine; table 100 (external subnet and
// default route through the external gateway) with rule 1000 from the VIP
// on control planes holding an external VIP; the cluster link kept on DHCP
// with the main table's default route; and, with an ingress_pool, table 100
// and the fwmark rule 1001 on every machine plus the return-path pod.
func TestExternalNetwork(t *testing.T) {
	t.Parallel()

	c := proxmoxCluster()
	in := proxmoxInput(t, c)

	cp := generate(t, in, machine(t, c, "lab-controlplane-01"))
	w := generate(t, in, machine(t, c, "lab-worker-01"))

	for name, cfg := range map[string]coreconfig.Provider{"controlplane": cp, "worker": w} {
		ext := linkConfig(cfg.Documents(), machineconfig.LinkExternal)
		if ext == nil || len(ext.LinkAddresses) != 1 || ext.LinkAddresses[0].AddressAddress.Bits() != 32 ||
			!c.Network.External.AnchorCIDR.Contains(ext.LinkAddresses[0].AddressAddress.Addr()) {
			t.Errorf("%s: external link %+v, want one anchor /32", name, ext)
		}
		cl := linkConfig(cfg.Documents(), machineconfig.LinkCluster)
		if cl == nil || len(cl.LinkRoutes) != 0 {
			t.Errorf("%s: cluster link %+v, want stated with no routes", name, cl)
		}
		if d := namedDoc[*network.DHCPv4ConfigV1Alpha1](cfg.Documents(), machineconfig.LinkCluster); d == nil {
			t.Errorf("%s: no DHCPv4Config on the cluster link", name)
		}
		if d := namedDoc[*network.DHCPv4ConfigV1Alpha1](cfg.Documents(), machineconfig.LinkExternal); d != nil {
			t.Errorf("%s: DHCP on the external link", name)
		}
		if pods(cfg) != 0 {
			t.Errorf("%s: a static pod without an ingress_pool", name)
		}
	}

	checkTable100(t, "controlplane", linkConfig(cp.Documents(), machineconfig.LinkExternal))
	rule := namedDoc[*network.RoutingRuleConfigV1Alpha1](cp.Documents(), "1000")
	if rule == nil || rule.RuleSrc.Prefix.String() != "192.0.2.10/32" || rule.RuleTable != 100 {
		t.Errorf("controlplane rule 1000 = %+v, want from 192.0.2.10/32 to table 100", rule)
	}
	if l := linkConfig(w.Documents(), machineconfig.LinkExternal); l != nil && len(l.LinkRoutes) != 0 {
		t.Errorf("worker without ingress_pool: external routes %+v", l.LinkRoutes)
	}
	if namedDoc[*network.RoutingRuleConfigV1Alpha1](w.Documents(), "1000") != nil {
		t.Error("worker: rule 1000")
	}

	c.Network.External.IngressPool = &spec.AddrRange{Start: netip.MustParseAddr("192.0.2.20"), End: netip.MustParseAddr("192.0.2.29")}
	in = proxmoxInput(t, c)
	in.KubernetesVersion = "1.35.0"
	wi := generate(t, in, machine(t, c, "lab-worker-01"))
	checkTable100(t, "worker with ingress_pool", linkConfig(wi.Documents(), machineconfig.LinkExternal))
	mark := namedDoc[*network.RoutingRuleConfigV1Alpha1](wi.Documents(), "1001")
	if mark == nil || mark.RuleFwMark != 0x2000 || mark.RuleFwMask != 0x2000 || mark.RuleTable != 100 {
		t.Errorf("rule 1001 = %+v, want fwmark 0x2000/0x2000 to table 100", mark)
	}
	if pods(wi) != 1 {
		t.Fatalf("%d static pods, want the return-path pod", pods(wi))
	}
	pod := v1Config(wi).MachineConfig.MachinePods[0].Object
	spec := pod["spec"].(map[string]any)
	ctr := spec["containers"].([]any)[0].(map[string]any)
	script := ctr["command"].([]any)[2].(string)
	mac := machine(t, c, "lab-worker-01").ExternalMAC
	for _, want := range []string{
		mac,
		`ip daddr 192.0.2.0/24 ct direction original ct mark set ct mark | 0x00002000`,
		`ct direction reply ct mark & 0x00002000 != 0 meta mark set meta mark | 0x00002000`,
		"priority -160",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("return-path script lacks %q:\n%s", want, script)
		}
	}
	if ctr["image"] != "registry.k8s.io/kube-proxy:v1.35.0" {
		t.Errorf("return-path image %v, want the running kube-proxy's", ctr["image"])
	}
	if spec["hostNetwork"] != true {
		t.Error("return-path pod not on the host network")
	}
}

// TestExternalGolden is the golden of a worker and a control plane with an
// ingress_pool and jumbo MTUs on both networks.
func TestExternalGolden(t *testing.T) {
	t.Parallel()

	c := proxmoxCluster()
	c.Network.External.IngressPool = &spec.AddrRange{Start: netip.MustParseAddr("192.0.2.20"), End: netip.MustParseAddr("192.0.2.29")}
	c.Network.External.MTU = 9000
	c.Network.Cluster.MTU = 9000
	c.Network.Cluster.Gateway = netip.MustParseAddr("10.20.0.1")

	for name, host := range map[string]string{
		"proxmox-ingress-controlplane-01.yaml": "lab-controlplane-01",
		"proxmox-ingress-worker-01.yaml":       "lab-worker-01",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			cfg := generate(t, proxmoxInput(t, c), machine(t, c, host))
			data, err := machineconfig.Encode(machineconfig.Redacted(cfg))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, data)
		})
	}
}

func checkTable100(t *testing.T, name string, l *network.LinkConfigV1Alpha1) {
	t.Helper()

	if l == nil || len(l.LinkRoutes) != 2 {
		t.Fatalf("%s: external link %+v, want two routes in table 100", name, l)
	}
	subnet, def := l.LinkRoutes[0], l.LinkRoutes[1]
	if subnet.RouteDestination.Prefix.String() != "192.0.2.0/24" || subnet.RouteTable != nethelpers.RoutingTable(100) {
		t.Errorf("%s: subnet route %+v", name, subnet)
	}
	if def.RouteDestination.Prefix.IsValid() || def.RouteGateway.Addr.String() != "192.0.2.1" || def.RouteTable != nethelpers.RoutingTable(100) {
		t.Errorf("%s: default route %+v, want via 192.0.2.1 in table 100", name, def)
	}
}

func linkConfig(docs []config.Document, name string) *network.LinkConfigV1Alpha1 {
	return namedDoc[*network.LinkConfigV1Alpha1](docs, name)
}

func namedDoc[T config.NamedDocument](docs []config.Document, name string) T {
	var zero T
	for _, d := range docs {
		if v, ok := d.(T); ok && v.Name() == name {
			return v
		}
	}
	return zero
}

func v1Config(cfg coreconfig.Provider) *v1alpha1.Config {
	for _, d := range cfg.Documents() {
		if v, ok := d.(*v1alpha1.Config); ok {
			return v
		}
	}
	return nil
}

func pods(cfg coreconfig.Provider) int {
	v := v1Config(cfg)
	if v == nil || v.MachineConfig == nil {
		return 0
	}
	return len(v.MachineConfig.MachinePods)
}

// TestExternalKeysChangeConfig checks that a change of each generated
// network.external key changes the machine config of every machine it
// reaches, so a live cluster sees it as a config difference (refused until
// config apply is built), never as nothing.
func TestExternalKeysChangeConfig(t *testing.T) {
	t.Parallel()

	pool := &spec.AddrRange{Start: netip.MustParseAddr("192.0.2.20"), End: netip.MustParseAddr("192.0.2.29")}
	render := func(t *testing.T, mod func(*spec.L2), host string) string {
		t.Helper()
		c := proxmoxCluster()
		c.Network.External.IngressPool = pool
		mod(c.Network.External)
		data, err := machineconfig.Encode(generate(t, proxmoxInput(t, c), machine(t, c, host)))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for key, mod := range map[string]func(*spec.L2){
		"gateway":      func(l *spec.L2) { l.Gateway = netip.MustParseAddr("192.0.2.254") },
		"anchor_cidr":  func(l *spec.L2) { l.AnchorCIDR = netip.MustParsePrefix("169.254.128.0/20") },
		"ingress_pool": func(l *spec.L2) { l.IngressPool = nil },
		"cidr":         func(l *spec.L2) { l.CIDR = netip.MustParsePrefix("192.0.0.0/22") },
	} {
		for _, host := range []string{"lab-controlplane-01", "lab-worker-01"} {
			if render(t, func(*spec.L2) {}, host) == render(t, mod, host) {
				t.Errorf("network.external.%s changed, but the config of %s did not", key, host)
			}
		}
	}
}
