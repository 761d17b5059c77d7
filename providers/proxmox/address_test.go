package proxmox

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/Telmate/proxmox-api-go/proxmox"
)

func TestNodeAddressesLeaveTheVIPOut(t *testing.T) {
	t.Parallel()
	ips := func(s ...string) []net.IP {
		var out []net.IP
		for _, a := range s {
			out = append(out, net.ParseIP(a))
		}
		return out
	}
	// What the guest agent of the VIP holder reports: loopback, then the
	// NIC with its lease, the VIP and its link-local address.
	ifaces := []proxmox.AgentNetworkInterface{
		{Name: "lo", IpAddresses: ips("127.0.0.1", "::1")},
		{Name: "eth0", IpAddresses: ips("192.168.50.21", "192.168.50.5", "fe80::1")},
		{Name: "eth1", IpAddresses: ips("203.0.113.7")},
	}
	got := nodeAddresses(ifaces, netip.MustParsePrefix("192.168.50.0/24"), netip.MustParseAddr("192.168.50.5"))
	want := []netip.Addr{netip.MustParseAddr("192.168.50.21"), netip.MustParseAddr("203.0.113.7")}
	if !slices.Equal(got, want) {
		t.Fatalf("addresses %v, want %v", got, want)
	}
}
