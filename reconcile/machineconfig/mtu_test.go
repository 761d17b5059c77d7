package machineconfig_test

import (
	"net/netip"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
)

// TestMTUAboveDefault checks network.<l2>.mtu above 1500: the link's MTU is
// set; the cluster link's default route through its gateway is clamped to
// 1500 in the main table, and the external link's default route, which
// lives in routing table 100 only, is clamped there. At 1500 no link
// document is written.
func TestMTUAboveDefault(t *testing.T) {
	t.Parallel()

	c := proxmoxCluster()
	c.Network.Cluster.MTU = 9000
	c.Network.Cluster.Gateway = netip.MustParseAddr("10.20.0.1")
	c.Network.External.MTU = 9000

	cfg := generate(t, proxmoxInput(t, c), machine(t, c, "lab-controlplane-01"))
	got := map[string]*network.LinkConfigV1Alpha1{}
	for _, d := range cfg.Documents() {
		if l, ok := d.(*network.LinkConfigV1Alpha1); ok {
			got[l.MetaName] = l
		}
	}
	for _, want := range []struct {
		name, gw string
		table    nethelpers.RoutingTable
	}{
		{"cluster", "10.20.0.1", nethelpers.TableUnspec},
		{"external", "192.0.2.1", machineconfig.ExternalRouteTable},
	} {
		l := got[want.name]
		if l == nil {
			t.Fatalf("no LinkConfig %s in %v", want.name, got)
		}
		if l.LinkMTU != 9000 {
			t.Fatalf("LinkConfig %s = %+v, want mtu 9000", want.name, l)
		}
		var def []network.RouteConfig
		for _, r := range l.LinkRoutes {
			if !r.RouteDestination.Prefix.IsValid() {
				def = append(def, r)
			}
		}
		if len(def) != 1 {
			t.Fatalf("LinkConfig %s routes = %+v, want one default route", want.name, l.LinkRoutes)
		}
		r := def[0]
		if r.RouteMTU != 1500 || r.RouteGateway.Addr.String() != want.gw || r.RouteTable != want.table {
			t.Errorf("LinkConfig %s default route = %+v, want via %s in table %d with mtu 1500", want.name, r, want.gw, want.table)
		}
	}

	def := generate(t, proxmoxInput(t, proxmoxCluster()), machine(t, proxmoxCluster(), "lab-worker-01"))
	for _, d := range def.Documents() {
		if l, ok := d.(*network.LinkConfigV1Alpha1); ok && l.LinkMTU != 0 {
			t.Errorf("a LinkConfig with an MTU at the default MTU: %+v", l)
		}
	}
}
