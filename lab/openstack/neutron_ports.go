package openstack

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
)

// port is a Neutron port.
type port struct {
	std
	name         string
	networkID    string
	mac          string
	adminUp      bool
	fixedIPs     []fixedIP
	pairs        []addrPair
	groups       []string
	portSecurity bool
	deviceID     string
	deviceOwner  string
	status       string
	hostID       string
	vnicType     string
}

// fixedIP is one address of a port.
type fixedIP struct {
	subnetID string
	addr     netip.Addr
}

// addrPair is an allowed address pair: an address or CIDR, and a MAC.
type addrPair struct{ ip, mac string }

func (p *port) json() map[string]any {
	ips := []map[string]string{}
	for _, ip := range p.fixedIPs {
		ips = append(ips, map[string]string{"subnet_id": ip.subnetID, "ip_address": ip.addr.String()})
	}
	pairs := []map[string]string{}
	for _, ap := range p.pairs {
		pairs = append(pairs, map[string]string{"ip_address": ap.ip, "mac_address": ap.mac})
	}
	return p.std.json(map[string]any{
		"name":                    p.name,
		"network_id":              p.networkID,
		"mac_address":             p.mac,
		"admin_state_up":          p.adminUp,
		"status":                  p.status,
		"device_id":               p.deviceID,
		"device_owner":            p.deviceOwner,
		"fixed_ips":               ips,
		"allowed_address_pairs":   pairs,
		"security_groups":         append([]string{}, p.groups...),
		"port_security_enabled":   p.portSecurity,
		"binding:vnic_type":       p.vnicType,
		"extra_dhcp_opts":         []any{},
		"ip_allocation":           "immediate",
		"qos_policy_id":           nil,
		"qos_network_policy_id":   nil,
		"resource_request":        nil,
		"propagate_uplink_status": false,
	})
}

// dropSubnet removes the port's addresses on a subnet.
func (p *port) dropSubnet(id string) {
	kept := p.fixedIPs[:0]
	for _, ip := range p.fixedIPs {
		if ip.subnetID != id {
			kept = append(kept, ip)
		}
	}
	p.fixedIPs = kept
}

// isComputeOwner reports a device owner Nova sets ("compute:<zone>").
func isComputeOwner(owner string) bool { return strings.HasPrefix(owner, "compute:") }

// trustedOwner reports the network-owned ports security groups never
// apply to (neutron_lib.utils.net.is_port_trusted).
func trustedOwner(owner string) bool { return strings.HasPrefix(owner, "network:") }

// portFor finds a port of the caller's project or answers PortNotFound.
func (s *Server) portFor(id string) (*port, error) {
	p := s.net.ports[id]
	if p == nil || !s.visible(p.project) {
		return nil, nerr(http.StatusNotFound, "PortNotFound", "Port %s could not be found.", id)
	}
	return p, nil
}

// newMAC is a MAC of Neutron's default base_mac fa:16:3e:00:00:00, unused
// on the network.
func (s *Server) newMAC(networkID string) string {
	for {
		var b [3]byte
		_, _ = rand.Read(b[:])
		mac := fmt.Sprintf("fa:16:3e:%02x:%02x:%02x", b[0], b[1], b[2])
		if !s.macUsed(networkID, mac) {
			return mac
		}
	}
}

func (s *Server) macUsed(networkID, mac string) bool {
	for _, p := range s.net.ports {
		if p.networkID == networkID && p.mac == mac {
			return true
		}
	}
	return false
}

func (s *Server) listPorts(r *http.Request) (int, any, error) {
	q, err := parseList(r, "id", "name", "network_id", "device_id", "device_owner", "mac_address", "status",
		"admin_state_up", "project_id", "tenant_id", "description", "security_groups", "fixed_ips",
		"port_security_enabled", "revision_number", "binding:vnic_type", "ip_allocation",
		"tags", "tags-any", "not-tags", "not-tags-any")
	if err != nil {
		return 0, nil, err
	}
	fixed := q.filters["fixed_ips"]
	delete(q.filters, "fixed_ips")
	var items []map[string]any
	for _, p := range bySeq(s.net.ports, func(p *port) int { return p.seq }) {
		if s.visible(p.project) && matchFixedIPs(p, fixed) {
			items = append(items, p.json())
		}
	}
	return http.StatusOK, s.page(r, "ports", q, items), nil
}

// matchFixedIPs applies the fixed_ips=ip_address=X, subnet_id=Y and
// ip_address_substr=Z filters: one of the port's addresses must match
// all of the kinds given, any value of each.
func matchFixedIPs(p *port, filters []string) bool {
	if len(filters) == 0 {
		return true
	}
	want := map[string][]string{}
	for _, f := range filters {
		k, v, _ := strings.Cut(f, "=")
		want[k] = append(want[k], v)
	}
	oneOf := func(vals []string, ok func(string) bool) bool {
		if len(vals) == 0 {
			return true
		}
		for _, v := range vals {
			if ok(v) {
				return true
			}
		}
		return false
	}
	for _, ip := range p.fixedIPs {
		if oneOf(want["ip_address"], func(v string) bool { return v == ip.addr.String() }) &&
			oneOf(want["subnet_id"], func(v string) bool { return v == ip.subnetID }) &&
			oneOf(want["ip_address_substr"], func(v string) bool { return strings.Contains(ip.addr.String(), v) }) {
			return true
		}
	}
	return false
}

func (s *Server) showPort(r *http.Request) (int, any, error) {
	p, err := s.portFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"port": p.json()}, nil
}

var portAttrs = []string{"network_id", "name", "description", "admin_state_up", "mac_address", "fixed_ips",
	"device_id", "device_owner", "tenant_id", "project_id", "security_groups", "allowed_address_pairs",
	"port_security_enabled", "tags", "binding:vnic_type", "binding:host_id", "binding:profile",
	"propagate_uplink_status", "extra_dhcp_opts", "qos_policy_id", "dns_name"}

// fixedIPRequest is one entry of a port's fixed_ips.
type fixedIPRequest struct {
	SubnetID  string `json:"subnet_id"`
	IPAddress string `json:"ip_address"`
}

func (s *Server) createPort(r *http.Request) (int, any, error) {
	a, err := readBody(r, "port", portAttrs...)
	if err != nil {
		return 0, nil, err
	}
	if !a.has("network_id") {
		return 0, nil, httpBadRequest("Failed to parse request. Required attribute 'network_id' not specified")
	}
	var netID string
	if _, err := a.get("network_id", &netID); err != nil {
		return 0, nil, err
	}
	n, err := s.network(netID)
	if err != nil {
		return 0, nil, err
	}
	if !s.visible(n.project) && !n.shared {
		return 0, nil, policyDenied("create_port")
	}
	if k := firstOf(a, "binding:host_id", "binding:profile"); k != "" {
		return 0, nil, policyDenied("create_port:" + k)
	}
	s.defaultGroup(s.opts.ProjectID)
	p := &port{std: s.newStd(s.opts.ProjectID), networkID: n.id, adminUp: true, status: "DOWN",
		portSecurity: n.portSecurity, vnicType: "normal"}
	for _, f := range []struct {
		k   string
		dst any
	}{{"name", &p.name}, {"description", &p.description}, {"admin_state_up", &p.adminUp},
		{"device_id", &p.deviceID}, {"device_owner", &p.deviceOwner}, {"port_security_enabled", &p.portSecurity},
		{"binding:vnic_type", &p.vnicType}, {"tags", &p.tags}} {
		if _, err := a.get(f.k, f.dst); err != nil {
			return 0, nil, err
		}
	}
	p.tags = uniqueSorted(p.tags)
	if ok, err := a.get("mac_address", &p.mac); err != nil {
		return 0, nil, err
	} else if ok {
		hw, perr := net.ParseMAC(p.mac)
		if perr != nil || len(hw) != 6 {
			return 0, nil, httpBadRequest("Invalid input for mac_address. Reason: '%s' is not a valid MAC address.", p.mac)
		}
		p.mac = hw.String()
		if s.macUsed(n.id, p.mac) {
			return 0, nil, nerr(http.StatusConflict, "MacAddressInUse",
				"Unable to complete operation for network %s. The mac address %s is in use.", n.id, p.mac)
		}
	} else {
		p.mac = s.newMAC(n.id)
	}
	if err := s.assignFixedIPs(p, n, a); err != nil {
		return 0, nil, err
	}
	if err := s.setPairs(p, a); err != nil {
		return 0, nil, err
	}
	if err := s.setPortGroups(p, a, true); err != nil {
		return 0, nil, err
	}
	s.net.ports[p.id] = p
	return http.StatusCreated, map[string]any{"port": p.json()}, nil
}

// assignFixedIPs allocates the port's addresses: those asked for, or,
// without fixed_ips, one from the first IPv4 subnet with room.
func (s *Server) assignFixedIPs(p *port, n *network, a attrs) error {
	var reqs []fixedIPRequest
	given, err := a.get("fixed_ips", &reqs)
	if err != nil {
		return err
	}
	preferNext := p.deviceOwner == ownerDHCP || p.deviceOwner == ownerDistributed
	if !given {
		if len(n.subnets) == 0 {
			return nil
		}
		for _, id := range n.subnets {
			if addr, ok := s.allocateIP(s.net.subnets[id], preferNext); ok {
				p.fixedIPs = append(p.fixedIPs, fixedIP{id, addr})
				return nil
			}
		}
		return nerr(http.StatusConflict, "IpAddressGenerationFailure", "No more IP addresses available on network %s.", n.id)
	}
	// Specific addresses first, as the IPAM backend sorts them, so that
	// they are not taken by the automatic ones.
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].IPAddress != "" && reqs[j].IPAddress == "" })
	for _, req := range reqs {
		var sn *subnet
		var addr netip.Addr
		if req.IPAddress != "" {
			var perr error
			if addr, perr = netip.ParseAddr(req.IPAddress); perr != nil {
				return httpBadRequest("Invalid input for fixed_ips. Reason: '%s' is not a valid IP address.", req.IPAddress)
			}
		}
		switch {
		case req.SubnetID != "":
			sn = s.net.subnets[req.SubnetID]
			if sn == nil || sn.networkID != n.id {
				return invalidInput("Failed to create port on network %s, because fixed_ips included invalid subnet %s", n.id, req.SubnetID)
			}
			if addr.IsValid() && !sn.cidr.Contains(addr) {
				return nerr(http.StatusBadRequest, "InvalidIpForSubnet", "IP address %s is not a valid IP for the specified subnet.", addr)
			}
		case addr.IsValid():
			for _, id := range n.subnets {
				if s.net.subnets[id].cidr.Contains(addr) {
					sn = s.net.subnets[id]
				}
			}
			if sn == nil {
				return nerr(http.StatusBadRequest, "InvalidIpForNetwork",
					"IP address %s is not a valid IP for any of the subnets on the specified network.", addr)
			}
		default:
			return invalidInput("IP allocation requires subnet_id or ip_address")
		}
		if addr.IsValid() {
			taken := s.allocated(sn)[addr]
			for _, ip := range p.fixedIPs {
				taken = taken || ip.addr == addr
			}
			if taken {
				return nerr(http.StatusConflict, "IpAddressAlreadyAllocated", "IP address %s already allocated in subnet %s", addr, sn.id)
			}
			p.fixedIPs = append(p.fixedIPs, fixedIP{sn.id, addr})
			continue
		}
		// The port's own earlier picks are not in s.net.ports yet.
		var held []netip.Addr
		for _, ip := range p.fixedIPs {
			held = append(held, ip.addr)
		}
		addr, ok := s.allocateIP(sn, preferNext, held...)
		if !ok {
			return nerr(http.StatusConflict, "IpAddressGenerationFailure", "No more IP addresses available on network %s.", n.id)
		}
		p.fixedIPs = append(p.fixedIPs, fixedIP{sn.id, addr})
	}
	return nil
}

// maxAddressPairs is [DEFAULT] max_allowed_address_pair.
const maxAddressPairs = 10

// setPairs applies allowed_address_pairs (a MAC defaults to the port's).
func (s *Server) setPairs(p *port, a attrs) error {
	var pairs []struct {
		IP  *string `json:"ip_address"`
		MAC string  `json:"mac_address"`
	}
	given, err := a.get("allowed_address_pairs", &pairs)
	if err != nil {
		return err
	}
	if !given && !a.null("allowed_address_pairs") {
		return nil
	}
	if len(pairs) > 0 && !p.portSecurity {
		return nerr(http.StatusConflict, "AddressPairAndPortSecurityRequired",
			"Port Security must be enabled in order to have allowed address pairs on a port.")
	}
	if len(pairs) > maxAddressPairs {
		return nerr(http.StatusBadRequest, "AllowedAddressPairExhausted",
			"The number of allowed address pair exceeds the maximum %d.", maxAddressPairs)
	}
	var out []addrPair
	seen := map[addrPair]bool{}
	for _, ap := range pairs {
		if ap.IP == nil {
			return nerr(http.StatusBadRequest, "AllowedAddressPairsMissingIP", "AllowedAddressPair must contain ip_address")
		}
		if _, err := netip.ParseAddr(*ap.IP); err != nil {
			if _, err := netip.ParsePrefix(*ap.IP); err != nil {
				return httpBadRequest("Invalid input for allowed_address_pairs. Reason: '%s' is not a valid IP address.", *ap.IP)
			}
		}
		mac := ap.MAC
		if mac == "" {
			mac = p.mac
		} else if hw, err := net.ParseMAC(mac); err != nil || len(hw) != 6 {
			return httpBadRequest("Invalid input for allowed_address_pairs. Reason: '%s' is not a valid MAC address.", mac)
		} else {
			mac = hw.String()
		}
		pair := addrPair{*ap.IP, mac}
		if seen[pair] {
			return nerr(http.StatusBadRequest, "DuplicateAddressPairInRequest",
				"Request contains duplicate address pair: mac_address %s ip_address %s.", pair.mac, pair.ip)
		}
		seen[pair] = true
		out = append(out, pair)
	}
	p.pairs = out
	return nil
}

// setPortGroups applies security_groups: on create without them, the
// project's default group when port security is on and the port has an
// address (ML2's _ensure_default_security_group_on_port).
func (s *Server) setPortGroups(p *port, a attrs, create bool) error {
	var ids []string
	given, err := a.get("security_groups", &ids)
	if err != nil {
		return err
	}
	if a.null("security_groups") {
		given = true
	}
	if trustedOwner(p.deviceOwner) {
		if create {
			p.groups = nil
		}
		return nil
	}
	if !given {
		if create && p.portSecurity && len(p.fixedIPs) > 0 {
			p.groups = []string{s.defaultGroup(p.project).id}
		}
		return nil
	}
	var missing []string
	for _, id := range ids {
		if g := s.net.groups[id]; g == nil || !s.visible(g.project) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return nerr(http.StatusNotFound, "SecurityGroupNotFound", "Security group %s does not exist", strings.Join(missing, ", "))
	}
	if len(ids) > 0 && (!p.portSecurity || len(p.fixedIPs) == 0) {
		return nerr(http.StatusBadRequest, "PortSecurityAndIPRequiredForSecurityGroups",
			"Port security must be enabled and port must have an IP address in order to use security groups.")
	}
	p.groups = uniqueKeepOrder(ids)
	return nil
}

func (s *Server) updatePort(r *http.Request) (int, any, error) {
	p, err := s.portFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	a, err := readBody(r, "port", "name", "description", "admin_state_up", "mac_address", "fixed_ips",
		"device_id", "device_owner", "security_groups", "allowed_address_pairs", "port_security_enabled",
		"binding:vnic_type", "binding:host_id", "binding:profile", "propagate_uplink_status",
		"extra_dhcp_opts", "qos_policy_id", "dns_name")
	if err != nil {
		return 0, nil, err
	}
	if err := checkIfMatch(r, p.revision); err != nil {
		return 0, nil, err
	}
	if k := firstOf(a, "mac_address", "binding:host_id", "binding:profile"); k != "" {
		return 0, nil, policyDenied("update_port:" + k)
	}
	if a.has("fixed_ips") {
		return 0, nil, invalidInput("updating fixed_ips is not emulated")
	}
	s.defaultGroup(s.opts.ProjectID)
	next := *p
	next.groups = append([]string(nil), p.groups...)
	for _, f := range []struct {
		k   string
		dst any
	}{{"name", &next.name}, {"description", &next.description}, {"admin_state_up", &next.adminUp},
		{"device_id", &next.deviceID}, {"device_owner", &next.deviceOwner},
		{"port_security_enabled", &next.portSecurity}, {"binding:vnic_type", &next.vnicType}} {
		if _, err := a.get(f.k, f.dst); err != nil {
			return 0, nil, err
		}
	}
	if err := s.setPortGroups(&next, a, false); err != nil {
		return 0, nil, err
	}
	if err := s.setPairs(&next, a); err != nil {
		return 0, nil, err
	}
	if !next.portSecurity {
		if len(next.groups) > 0 {
			return 0, nil, nerr(http.StatusConflict, "PortSecurityPortHasSecurityGroup",
				"Port has security group associated. Cannot disable port security or IP address until security group is removed.")
		}
		if len(next.pairs) > 0 {
			return 0, nil, nerr(http.StatusConflict, "AddressPairAndPortSecurityRequired",
				"Port Security must be enabled in order to have allowed address pairs on a port.")
		}
	}
	*p = next
	s.touch(&p.std)
	return http.StatusOK, map[string]any{"port": p.json()}, nil
}

func (s *Server) deletePort(r *http.Request) (int, any, error) {
	p, err := s.portFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	switch p.deviceOwner {
	case ownerRouterInterface, ownerRouterGateway, ownerFloatingIP:
		return 0, nil, nerr(http.StatusConflict, "ServicePortInUse",
			"Port %s cannot be deleted directly via the port API: has device owner %s.", p.id, p.deviceOwner)
	}
	s.removePort(p)
	return http.StatusNoContent, nil, nil
}

// removePort deletes a port and disassociates its floating IPs
// (l3_db.disassociate_floatingips).
func (s *Server) removePort(p *port) {
	changed := false
	for _, f := range s.net.fips {
		if f.portID == p.id {
			f.portID, f.fixedIP, f.routerID = "", netip.Addr{}, ""
			f.status = "DOWN"
			s.touch(&f.std)
			changed = true
		}
	}
	delete(s.net.ports, p.id)
	if changed {
		s.fipsChanged()
	}
}

// ensureMetadataPort creates the network's OVN metadata port
// (device_owner network:distributed, device_id ovnmeta-<network>), as
// ML2/OVN does for every network when ovn_metadata_enabled is set.
func (s *Server) ensureMetadataPort(n *network) {
	if n.external || s.metadataPort(n) != nil {
		return
	}
	p := &port{std: s.newStd(n.project), networkID: n.id, adminUp: true, status: "DOWN",
		portSecurity: n.portSecurity, vnicType: "normal", deviceOwner: ownerDistributed,
		deviceID: "ovnmeta-" + n.id}
	p.mac = s.newMAC(n.id)
	s.net.ports[p.id] = p
}

func (s *Server) metadataPort(n *network) *port {
	for _, p := range s.net.ports {
		if p.networkID == n.id && p.deviceOwner == ownerDistributed {
			return p
		}
	}
	return nil
}

// updateMetadataPort gives the metadata port an address, the first free
// one, on each subnet with DHCP enabled and takes it back from the others
// (ovn_client.update_metadata_port).
func (s *Server) updateMetadataPort(n *network) {
	p := s.metadataPort(n)
	if p == nil {
		return
	}
	changed := false
	for _, id := range n.subnets {
		sn := s.net.subnets[id]
		has := false
		for _, ip := range p.fixedIPs {
			has = has || ip.subnetID == id
		}
		switch {
		case sn.dhcp && !has:
			if addr, ok := s.allocateIP(sn, true); ok {
				p.fixedIPs = append(p.fixedIPs, fixedIP{id, addr})
				changed = true
			}
		case !sn.dhcp && has:
			p.dropSubnet(id)
			changed = true
		}
	}
	if changed {
		s.touch(&p.std)
	}
}

// uniqueSorted is a set of strings in order, as Neutron answers tags.
func uniqueSorted(in []string) []string {
	out := uniqueKeepOrder(in)
	sort.Strings(out)
	return out
}

func uniqueKeepOrder(in []string) []string {
	out := []string{}
	seen := map[string]bool{}
	for _, v := range in {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// PortInfo describes a port to tests and the lab. Slices are copies.
type PortInfo struct {
	ID, Name, NetworkID, MAC string
	// DeviceID and DeviceOwner are the port's ("compute:<zone>" once Nova
	// bound it); HostID is binding:host_id, which only admins see.
	DeviceID, DeviceOwner, HostID string
	// Status is ACTIVE while bound, DOWN otherwise.
	Status string
	// Addrs are the fixed IP addresses, in the port's order.
	Addrs []netip.Addr
	// SecurityGroups are the IDs of the port's groups.
	SecurityGroups []string
	// AllowedAddressPairs are the ip_address of each pair.
	AllowedAddressPairs []string
}

// Ports returns every port, the network-owned ones included, in creation
// order.
func (s *Server) Ports() []PortInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []PortInfo
	for _, p := range bySeq(s.net.ports, func(p *port) int { return p.seq }) {
		info := PortInfo{ID: p.id, Name: p.name, NetworkID: p.networkID, MAC: p.mac, DeviceID: p.deviceID,
			DeviceOwner: p.deviceOwner, HostID: p.hostID, Status: p.status,
			SecurityGroups: append([]string(nil), p.groups...)}
		for _, ip := range p.fixedIPs {
			info.Addrs = append(info.Addrs, ip.addr)
		}
		for _, ap := range p.pairs {
			info.AllowedAddressPairs = append(info.AllowedAddressPairs, ap.ip)
		}
		out = append(out, info)
	}
	return out
}
