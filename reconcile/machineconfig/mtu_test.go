package machineconfig_test

import (
	"net/netip"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
)

// TestMTUAboveDefault checks network.<l2>.mtu above 1500: the link's MTU is
// set and its default route through the L2's gateway is clamped to 1500;
// at 1500 no link document is written.
func TestMTUAboveDefault(t *testing.T) {
	t.Parallel()

	c := proxmoxCluster()
	c.Network.Cluster.MTU = 9000
	c.Network.Cluster.Gateway = netip.MustParseAddr("10.20.0.1")
	c.Network.External.MTU = 9000

	cfg := generate(t, proxmoxInput(t, c), machine(t, c, "lab-worker-01"))
	got := map[string]*network.LinkConfigV1Alpha1{}
	for _, d := range cfg.Documents() {
		if l, ok := d.(*network.LinkConfigV1Alpha1); ok {
			got[l.MetaName] = l
		}
	}
	for name, gw := range map[string]string{"cluster": "10.20.0.1", "external": "192.0.2.1"} {
		l := got[name]
		if l == nil {
			t.Fatalf("no LinkConfig %s in %v", name, got)
		}
		if l.LinkMTU != 9000 || len(l.LinkRoutes) != 1 {
			t.Fatalf("LinkConfig %s = %+v, want mtu 9000 and one route", name, l)
		}
		r := l.LinkRoutes[0]
		if r.RouteMTU != 1500 || r.RouteGateway.Addr.String() != gw || r.RouteDestination.Prefix.IsValid() {
			t.Errorf("LinkConfig %s route = %+v, want the default route via %s with mtu 1500", name, r, gw)
		}
	}

	def := generate(t, proxmoxInput(t, proxmoxCluster()), machine(t, proxmoxCluster(), "lab-worker-01"))
	if d := findDoc[*network.LinkConfigV1Alpha1](def.Documents()); d != nil {
		t.Errorf("a LinkConfig at the default MTU: %+v", d)
	}
}
