package talos_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// vipHolders returns the nodes reporting the VIP among their held IPs.
func vipHolders(w *talos.World, vip netip.Addr) []netip.Addr {
	var out []netip.Addr

	for _, n := range w.Nodes() {
		if slices.Contains(n.VIPs, vip) {
			out = append(out, n.Addr)
		}
	}

	return out
}

// waitVIP waits until VIPHolder and the node states agree on the VIP's
// holder (an invalid address for none) and check accepts it, and returns it.
func waitVIP(t *testing.T, w *talos.World, vip netip.Addr, check func(netip.Addr) error) netip.Addr {
	t.Helper()

	var holder netip.Addr

	eventually(t, "the VIP holder", func() error {
		h, ok := w.VIPHolder(vip)
		holders := vipHolders(w, vip)

		switch {
		case ok != (len(holders) == 1) || len(holders) > 1 || (ok && holders[0] != h):
			return fmt.Errorf("VIPHolder %s %v, node states %v", h, ok, holders)
		case check != nil:
			if err := check(h); err != nil {
				return err
			}
		}

		holder = h

		return nil
	})

	return holder
}

// TestVIPHolder follows the Layer-2 VIP of a cluster: nobody holds it before
// etcd runs, then one control plane does until it goes down, and the next
// one takes it over and keeps it.
func TestVIPHolder(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 13)
	w := newWorld(t, talos.Options{})

	tc.bootAll(t, w)

	for _, m := range tc.machines {
		waitUp(t, w, tc.addrs[m.Hostname], talos.ModeRunning)
	}

	if h, ok := w.VIPHolder(tc.vip); ok {
		t.Fatalf("%s holds the VIP before etcd is bootstrapped", h)
	}

	cps := []netip.Addr{tc.addrs[tc.cp(1)], tc.addrs[tc.cp(2)], tc.addrs[tc.cp(3)]}
	isCP := func(h netip.Addr) error {
		if !slices.Contains(cps, h) {
			return fmt.Errorf("%s holds the VIP", h)
		}

		return nil
	}

	c := tc.client(t, cps[0])
	if err := c.Bootstrap(t.Context(), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	first := waitVIP(t, w, tc.vip, isCP)

	eventually(t, "three etcd members", func() error {
		if got := startedMembers(w.EtcdMembers(tc.name)); got != 3 {
			return fmt.Errorf("%d started members", got)
		}

		return nil
	})

	if h := waitVIP(t, w, tc.vip, isCP); h != first {
		t.Errorf("the VIP moved from %s to %s while its holder ran", first, h)
	}

	if st, _ := w.Node(tc.addrs[tc.worker(1)]); len(st.VIPs) != 0 {
		t.Errorf("the worker holds %v", st.VIPs)
	}

	if err := w.PowerOff(first); err != nil {
		t.Fatal(err)
	}

	second := waitVIP(t, w, tc.vip, func(h netip.Addr) error {
		if h == first {
			return fmt.Errorf("%s still holds the VIP", h)
		}

		return isCP(h)
	})

	// The first holder comes back and queues behind the second.
	if err := w.Boot(t.Context(), first, nil); err != nil {
		t.Fatal(err)
	}

	eventually(t, "three started etcd members again", func() error {
		if got := startedMembers(w.EtcdMembers(tc.name)); got != 3 {
			return fmt.Errorf("%d started members", got)
		}

		return nil
	})

	if h := waitVIP(t, w, tc.vip, isCP); h != second {
		t.Errorf("the VIP moved back to %s", h)
	}

	// Without an etcd majority, nobody keeps it.
	for _, a := range cps {
		if a != first {
			if err := w.PowerOff(a); err != nil {
				t.Fatal(err)
			}
		}
	}

	waitVIP(t, w, tc.vip, func(h netip.Addr) error {
		if h.IsValid() {
			return fmt.Errorf("%s holds the VIP without an etcd majority", h)
		}

		return nil
	})
}
