package pve

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// agentVM checks that the guest agent of the request's VM can answer, in
// the order of qemu-server's assert_agent_available: an agent configured,
// the VM running, the agent answering guest-ping (never when the agent is
// disabled, as QEMU then has no agent channel). It returns the VM's ID and
// MAC addresses. It takes s.mu.
func (s *Server) agentVM(r *http.Request) (int, []string, error) {
	s.lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return 0, nil, err
	}
	if _, ok := g.conf["agent"]; !ok {
		return 0, nil, errorf("No QEMU guest agent configured")
	}
	if !g.running {
		return 0, nil, errorf("VM %d is not running", g.id)
	}
	if !g.agentEnabled() {
		return 0, nil, errorf("QEMU guest agent is not running")
	}
	return g.id, g.macs(), nil
}

// agentRunning asks the machine hooks for the addresses the guest holds; no
// address means the agent does not answer yet.
func (s *Server) agentRunning(vmid int) ([]netip.Prefix, error) {
	if s.opts.Machines == nil {
		return nil, errorf("QEMU guest agent is not running")
	}
	addrs := s.opts.Machines.Addresses(vmid)
	if len(addrs) == 0 {
		return nil, errorf("QEMU guest agent is not running")
	}
	return addrs, nil
}

func (s *Server) agentPing(r *http.Request) (any, error) {
	vmid, _, err := s.agentVM(r)
	if err != nil {
		return nil, err
	}
	if _, err := s.agentRunning(vmid); err != nil {
		return nil, err
	}
	return map[string]any{"result": map[string]any{}}, nil
}

// agentInterfaces answers guest-network-get-interfaces the way qemu-ga
// does on a Linux guest: one entry per link in link order (lo first, then
// the NICs), each with every address the link holds, IPv4 before IPv6 (the
// order getifaddrs lists them), including secondary addresses such as a
// Layer-2 VIP, plus the IPv6 link-local address the kernel derives from the
// MAC (EUI-64) on every NIC that is up.
func (s *Server) agentInterfaces(r *http.Request) (any, error) {
	vmid, macs, err := s.agentVM(r)
	if err != nil {
		return nil, err
	}
	addrs, err := s.agentRunning(vmid)
	if err != nil {
		return nil, err
	}
	perNIC := map[string][]netip.Prefix{}
	if ia, ok := s.opts.Machines.(InterfaceAddresses); ok {
		for mac, p := range ia.InterfaceAddresses(vmid) {
			perNIC[strings.ToLower(mac)] = p
		}
	} else if len(macs) > 0 {
		perNIC[strings.ToLower(macs[0])] = addrs
	}

	result := []map[string]any{agentInterface("lo", "00:00:00:00:00:00", []netip.Prefix{
		netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128"),
	})}
	for i, mac := range macs {
		mac = strings.ToLower(mac)
		result = append(result, agentInterface(fmt.Sprintf("eth%d", i), mac, nicAddresses(mac, perNIC[mac])))
	}
	return map[string]any{"result": result}, nil
}

// nicAddresses orders a NIC's addresses as getifaddrs lists them (IPv4,
// then IPv6, each in the order given) and adds the kernel's EUI-64 IPv6
// link-local address when the NIC holds any address and none is given.
func nicAddresses(mac string, given []netip.Prefix) []netip.Prefix {
	if len(given) == 0 {
		return nil
	}
	out := make([]netip.Prefix, 0, len(given)+1)
	hasLinkLocal := false
	for _, p := range given {
		if p.Addr().Is4() {
			out = append(out, p)
		}
	}
	for _, p := range given {
		if !p.Addr().Is4() {
			out = append(out, p)
			hasLinkLocal = hasLinkLocal || p.Addr().IsLinkLocalUnicast()
		}
	}
	if ll, ok := eui64LinkLocal(mac); ok && !hasLinkLocal {
		out = append(out, ll)
	}
	return out
}

// eui64LinkLocal is the fe80::/64 address Linux gives a link from its MAC
// address (addr_gen_mode eui64, the kernel default): the universal/local bit
// flipped and ff:fe inserted in the middle.
func eui64LinkLocal(mac string) (netip.Prefix, bool) {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return netip.Prefix{}, false
	}
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	a[8] = hw[0] ^ 0x02
	a[9], a[10] = hw[1], hw[2]
	a[11], a[12] = 0xff, 0xfe
	a[13], a[14], a[15] = hw[3], hw[4], hw[5]
	return netip.PrefixFrom(netip.AddrFrom16(a), 64), true
}

// agentInterface is one entry of the guest agent's network-get-interfaces
// answer.
func agentInterface(name, mac string, prefixes []netip.Prefix) map[string]any {
	ips := []map[string]any{}
	for _, p := range prefixes {
		typ := "ipv4"
		if p.Addr().Is6() {
			typ = "ipv6"
		}
		ips = append(ips, map[string]any{
			"ip-address":      p.Addr().String(),
			"ip-address-type": typ,
			"prefix":          p.Bits(),
		})
	}
	m := map[string]any{
		"name":             name,
		"hardware-address": mac,
		"statistics": map[string]any{
			"rx-bytes": 0, "rx-dropped": 0, "rx-errs": 0, "rx-packets": 0,
			"tx-bytes": 0, "tx-dropped": 0, "tx-errs": 0, "tx-packets": 0,
		},
	}
	if len(ips) > 0 {
		m["ip-addresses"] = ips
	}
	return m
}
