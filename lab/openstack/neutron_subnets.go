package openstack

import (
	"math/rand/v2"
	"net/http"
	"net/netip"
)

// subnet is an IPv4 Neutron subnet.
type subnet struct {
	std
	name      string
	networkID string
	cidr      netip.Prefix
	gateway   netip.Addr // invalid when the subnet has none
	pools     []ipRange
	dhcp      bool
	dns       []string
}

// ipRange is an allocation pool, both ends included.
type ipRange struct{ start, end netip.Addr }

func (sn *subnet) json(external bool) map[string]any {
	pools := []map[string]string{}
	for _, p := range sn.pools {
		pools = append(pools, map[string]string{"start": p.start.String(), "end": p.end.String()})
	}
	var gw any
	if sn.gateway.IsValid() {
		gw = sn.gateway.String()
	}
	return sn.std.json(map[string]any{
		"name":                 sn.name,
		"network_id":           sn.networkID,
		"cidr":                 sn.cidr.String(),
		"ip_version":           4,
		"gateway_ip":           gw,
		"allocation_pools":     pools,
		"enable_dhcp":          sn.dhcp,
		"dns_nameservers":      append([]string{}, sn.dns...),
		"host_routes":          []any{},
		"ipv6_address_mode":    nil,
		"ipv6_ra_mode":         nil,
		"subnetpool_id":        nil,
		"service_types":        []string{},
		"segment_id":           nil,
		"dns_publish_fixed_ip": false,
		"router:external":      external,
	})
}

// lastHost is the last address of an IPv4 prefix before its broadcast.
func lastHost(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	v-- // the broadcast address is no host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// subnetFor finds a visible subnet or answers SubnetNotFound.
func (s *Server) subnetFor(id string) (*subnet, error) {
	sn := s.net.subnets[id]
	if sn == nil || !s.netVisible(s.net.networks[sn.networkID]) {
		return nil, nerr(http.StatusNotFound, "SubnetNotFound", "Subnet %s could not be found.", id)
	}
	return sn, nil
}

func (s *Server) subnetJSON(sn *subnet) map[string]any {
	return sn.json(s.net.networks[sn.networkID].external)
}

func (s *Server) listSubnets(r *http.Request) (int, any, error) {
	q, err := parseList(r, "id", "name", "network_id", "cidr", "ip_version", "gateway_ip", "enable_dhcp",
		"project_id", "tenant_id", "description", "subnetpool_id", "revision_number", "segment_id",
		"router:external", "tags", "tags-any", "not-tags", "not-tags-any")
	if err != nil {
		return 0, nil, err
	}
	var items []map[string]any
	for _, sn := range bySeq(s.net.subnets, func(sn *subnet) int { return sn.seq }) {
		if s.netVisible(s.net.networks[sn.networkID]) {
			items = append(items, s.subnetJSON(sn))
		}
	}
	return http.StatusOK, s.page(r, "subnets", q, items), nil
}

func (s *Server) showSubnet(r *http.Request) (int, any, error) {
	sn, err := s.subnetFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"subnet": s.subnetJSON(sn)}, nil
}

var subnetAttrs = []string{"network_id", "cidr", "ip_version", "name", "description", "enable_dhcp",
	"dns_nameservers", "gateway_ip", "allocation_pools", "host_routes", "tenant_id", "project_id",
	"subnetpool_id", "prefixlen", "ipv6_address_mode", "ipv6_ra_mode", "service_types",
	"dns_publish_fixed_ip", "segment_id", "tags", "use_default_subnetpool"}

func (s *Server) createSubnet(r *http.Request) (int, any, error) {
	a, err := readBody(r, "subnet", subnetAttrs...)
	if err != nil {
		return 0, nil, err
	}
	for _, k := range []string{"network_id", "ip_version"} {
		if !a.has(k) {
			return 0, nil, httpBadRequest("Failed to parse request. Required attribute '%s' not specified", k)
		}
	}
	var netID string
	var version int
	if _, err := a.get("network_id", &netID); err != nil {
		return 0, nil, err
	}
	if _, err := a.get("ip_version", &version); err != nil {
		return 0, nil, err
	}
	if version != 4 && version != 6 {
		return 0, nil, httpBadRequest("Invalid input for ip_version. Reason: %d is not in valid_values.", version)
	}
	n, err := s.network(netID)
	if err != nil {
		return 0, nil, err
	}
	if !s.visible(n.project) {
		return 0, nil, policyDenied("create_subnet")
	}
	if version == 6 {
		return 0, nil, invalidInput("IPv6 subnets are not emulated")
	}
	var cidrText string
	if ok, err := a.get("cidr", &cidrText); err != nil {
		return 0, nil, err
	} else if !ok {
		return 0, nil, badRequest("subnets", "a subnetpool must be specified in the absence of a cidr")
	}
	cidr, perr := netip.ParsePrefix(cidrText)
	if perr != nil || !cidr.Addr().Is4() {
		return 0, nil, httpBadRequest("Invalid input for cidr. Reason: '%s' is not a valid IP subnet.", cidrText)
	}
	if cidr.Masked() != cidr {
		return 0, nil, httpBadRequest("Invalid input for cidr. Reason: '%s' isn't a recommended CIDR, '%s' is recommended.", cidrText, cidr.Masked())
	}
	if cidr.Bits() == 0 {
		return 0, nil, invalidInput("0 is not allowed as CIDR prefix length")
	}
	for _, id := range n.subnets {
		if s.net.subnets[id].cidr.Overlaps(cidr) {
			return 0, nil, invalidInput("Requested subnet with cidr: %s for network: %s overlaps with another subnet", cidr, n.id)
		}
	}
	sn := &subnet{std: s.newStd(n.project), networkID: n.id, cidr: cidr, dhcp: true, dns: []string{}}
	if cidr.Bits() < 31 {
		sn.gateway = cidr.Addr().Next()
	}
	if a.null("gateway_ip") {
		sn.gateway = netip.Addr{}
	} else {
		var gw string
		if ok, err := a.get("gateway_ip", &gw); err != nil {
			return 0, nil, err
		} else if ok {
			if sn.gateway, perr = netip.ParseAddr(gw); perr != nil {
				return 0, nil, httpBadRequest("Invalid input for gateway_ip. Reason: '%s' is not a valid IP address.", gw)
			}
			if !cidr.Contains(sn.gateway) || sn.gateway == cidr.Addr() {
				return 0, nil, invalidInput("Gateway IP %s conflicts with allocation pool", gw)
			}
		}
	}
	if err := s.setSubnet(sn, a); err != nil {
		return 0, nil, err
	}
	var pools []struct{ Start, End string }
	if ok, err := a.get("allocation_pools", &pools); err != nil {
		return 0, nil, err
	} else if ok {
		for _, p := range pools {
			start, e1 := netip.ParseAddr(p.Start)
			end, e2 := netip.ParseAddr(p.End)
			if e1 != nil || e2 != nil || end.Less(start) {
				return 0, nil, nerr(http.StatusBadRequest, "InvalidAllocationPool", "The allocation pool %s-%s is not valid.", p.Start, p.End)
			}
			if !cidr.Contains(start) || !cidr.Contains(end) || start == cidr.Addr() || lastHost(cidr).Less(end) {
				return 0, nil, nerr(http.StatusBadRequest, "OutOfBoundsAllocationPool",
					"The allocation pool %s-%s spans beyond the subnet cidr %s.", start, end, cidr)
			}
			if sn.gateway.IsValid() && !sn.gateway.Less(start) && !end.Less(sn.gateway) {
				return 0, nil, nerr(http.StatusConflict, "GatewayConflictWithAllocationPools",
					"Gateway ip %s conflicts with allocation pool %s-%s.", sn.gateway, start, end)
			}
			sn.pools = append(sn.pools, ipRange{start, end})
		}
	} else {
		sn.pools = defaultPools(cidr, sn.gateway)
	}
	if _, err := a.get("tags", &sn.tags); err != nil {
		return 0, nil, err
	}
	sn.tags = uniqueSorted(sn.tags)
	s.net.subnets[sn.id] = sn
	n.subnets = append(n.subnets, sn.id)
	s.touch(&n.std)
	s.updateMetadataPort(n)
	return http.StatusCreated, map[string]any{"subnet": s.subnetJSON(sn)}, nil
}

// defaultPools is every host address of the CIDR but the gateway
// (ipam.utils.generate_pools).
func defaultPools(cidr netip.Prefix, gw netip.Addr) []ipRange {
	first, last := cidr.Addr().Next(), lastHost(cidr)
	if cidr.Bits() >= 31 {
		return nil
	}
	switch {
	case !gw.IsValid() || gw.Less(first) || last.Less(gw):
		return []ipRange{{first, last}}
	case gw == first:
		return []ipRange{{first.Next(), last}}
	case gw == last:
		return []ipRange{{first, last.Prev()}}
	default:
		return []ipRange{{first, gw.Prev()}, {gw.Next(), last}}
	}
}

// setSubnet applies name, description, enable_dhcp and dns_nameservers.
func (s *Server) setSubnet(sn *subnet, a attrs) error {
	for _, f := range []struct {
		k   string
		dst any
	}{{"name", &sn.name}, {"description", &sn.description}, {"enable_dhcp", &sn.dhcp}} {
		if _, err := a.get(f.k, f.dst); err != nil {
			return err
		}
	}
	var dns []string
	if ok, err := a.get("dns_nameservers", &dns); err != nil {
		return err
	} else if ok || a.null("dns_nameservers") {
		seen := map[string]bool{}
		for _, d := range dns {
			if _, err := netip.ParseAddr(d); err != nil {
				return httpBadRequest("Invalid input for dns_nameservers. Reason: '%s' is not a valid nameserver. '%s' is not a valid IP address.", d, d)
			}
			if seen[d] {
				return httpBadRequest("Invalid input for dns_nameservers. Reason: Duplicate nameserver '%s'.", d)
			}
			seen[d] = true
		}
		sn.dns = append([]string{}, dns...)
	}
	var routes []any
	if ok, err := a.get("host_routes", &routes); err != nil {
		return err
	} else if ok && len(routes) > 0 {
		return invalidInput("host_routes are not emulated")
	}
	return nil
}

func (s *Server) updateSubnet(r *http.Request) (int, any, error) {
	sn, err := s.subnetFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	a, err := readBody(r, "subnet", "name", "description", "enable_dhcp", "dns_nameservers", "host_routes",
		"gateway_ip", "allocation_pools", "dns_publish_fixed_ip", "service_types", "segment_id")
	if err != nil {
		return 0, nil, err
	}
	n := s.net.networks[sn.networkID]
	if !s.visible(sn.project) {
		return 0, nil, policyDenied("update_subnet")
	}
	if err := checkIfMatch(r, sn.revision); err != nil {
		return 0, nil, err
	}
	if k := firstOf(a, "gateway_ip", "allocation_pools"); k != "" {
		return 0, nil, invalidInput("updating %s is not emulated", k)
	}
	if err := s.setSubnet(sn, a); err != nil {
		return 0, nil, err
	}
	s.touch(&sn.std)
	s.updateMetadataPort(n)
	return http.StatusOK, map[string]any{"subnet": s.subnetJSON(sn)}, nil
}

func (s *Server) deleteSubnet(r *http.Request) (int, any, error) {
	sn, err := s.subnetFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if !s.visible(sn.project) {
		return 0, nil, policyDenied("delete_subnet")
	}
	for _, p := range s.net.ports {
		if autoDeleteOwner(p.deviceOwner) {
			continue
		}
		for _, ip := range p.fixedIPs {
			if ip.subnetID == sn.id {
				return 0, nil, nerr(http.StatusConflict, "SubnetInUse",
					"Unable to complete operation on subnet %s: One or more ports have an IP allocation from this subnet.", sn.id)
			}
		}
	}
	for _, p := range s.net.ports {
		p.dropSubnet(sn.id)
	}
	n := s.net.networks[sn.networkID]
	for i, id := range n.subnets {
		if id == sn.id {
			n.subnets = append(n.subnets[:i:i], n.subnets[i+1:]...)
			break
		}
	}
	delete(s.net.subnets, sn.id)
	s.touch(&n.std)
	return http.StatusNoContent, nil, nil
}

// allocated is the set of addresses the subnet's ports hold.
func (s *Server) allocated(sn *subnet) map[netip.Addr]bool {
	used := map[netip.Addr]bool{}
	for _, p := range s.net.ports {
		for _, ip := range p.fixedIPs {
			if ip.subnetID == sn.id {
				used[ip.addr] = true
			}
		}
	}
	return used
}

// allocateIP picks a free address of the subnet's pools as Neutron's
// IPAM driver does: in the first pool with room, one of its first 1000
// free addresses at random, or the first one when preferNext (DHCP and
// distributed ports). held are addresses taken but not yet in a port.
// It answers false when every pool is full.
func (s *Server) allocateIP(sn *subnet, preferNext bool, held ...netip.Addr) (netip.Addr, bool) {
	used := s.allocated(sn)
	for _, a := range held {
		used[a] = true
	}
	for _, p := range sn.pools {
		var free []netip.Addr
		for a := p.start; !p.end.Less(a) && len(free) < 1000; a = a.Next() {
			if !used[a] {
				free = append(free, a)
			}
			if a == p.end {
				break
			}
		}
		if len(free) == 0 {
			continue
		}
		if preferNext {
			return free[0], true
		}
		return free[rand.IntN(len(free))], true
	}
	return netip.Addr{}, false
}
