package pve

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// agentVM checks that the guest agent of the request's VM can answer and
// returns the VM's ID and MAC addresses. It takes s.mu.
func (s *Server) agentVM(r *http.Request) (int, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, err := s.lookupVM(r)
	if err != nil {
		return 0, nil, err
	}
	if !g.running {
		return 0, nil, errorf("VM %d is not running", g.id)
	}
	if !g.agentEnabled() {
		return 0, nil, errorf("No QEMU guest agent configured")
	}
	return g.id, g.macs(), nil
}

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
		result = append(result, agentInterface(fmt.Sprintf("eth%d", i), mac, perNIC[mac]))
	}
	return map[string]any{"result": result}, nil
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
