package openstack

import (
	"net/http"
	"net/netip"
	"sync"
)

// floatingIP is a Neutron floating IP.
type floatingIP struct {
	std
	networkID string
	addr      netip.Addr
	portID    string     // the associated port, empty when none
	fixedIP   netip.Addr // invalid when not associated
	routerID  string
	status    string
	fipPortID string // the hidden network:floatingip port holding addr
}

func (s *Server) fipJSON(f *floatingIP, status string) map[string]any {
	var portID, fixed, routerID, details any
	if f.portID != "" {
		portID, fixed = f.portID, f.fixedIP.String()
		if p := s.net.ports[f.portID]; p != nil {
			details = map[string]any{
				"name": p.name, "network_id": p.networkID, "mac_address": p.mac, "admin_state_up": p.adminUp,
				"status": p.status, "device_id": p.deviceID, "device_owner": p.deviceOwner,
			}
		}
	}
	if f.routerID != "" {
		routerID = f.routerID
	}
	return f.std.json(map[string]any{
		"floating_ip_address":   f.addr.String(),
		"floating_network_id":   f.networkID,
		"router_id":             routerID,
		"port_id":               portID,
		"fixed_ip_address":      fixed,
		"status":                status,
		"port_details":          details,
		"port_forwardings":      []any{},
		"qos_policy_id":         nil,
		"qos_network_policy_id": nil,
	})
}

func (s *Server) fipFor(id string) (*floatingIP, error) {
	f := s.net.fips[id]
	if f == nil || !s.visible(f.project) {
		return nil, nerr(http.StatusNotFound, "FloatingIPNotFound", "Floating IP %s could not be found", id)
	}
	return f, nil
}

func (s *Server) listFloatingIPs(r *http.Request) (int, any, error) {
	q, err := parseList(r, "id", "floating_ip_address", "floating_network_id", "router_id", "port_id",
		"fixed_ip_address", "status", "description", "project_id", "tenant_id", "revision_number",
		"tags", "tags-any", "not-tags", "not-tags-any")
	if err != nil {
		return 0, nil, err
	}
	var items []map[string]any
	for _, f := range bySeq(s.net.fips, func(f *floatingIP) int { return f.seq }) {
		if s.visible(f.project) {
			items = append(items, s.fipJSON(f, f.status))
		}
	}
	return http.StatusOK, s.page(r, "floatingips", q, items), nil
}

func (s *Server) showFloatingIP(r *http.Request) (int, any, error) {
	f, err := s.fipFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"floatingip": s.fipJSON(f, f.status)}, nil
}

func (s *Server) createFloatingIP(r *http.Request) (int, any, error) {
	a, err := readBody(r, "floatingip", "floating_network_id", "floating_ip_address", "subnet_id", "port_id",
		"fixed_ip_address", "description", "tenant_id", "project_id", "tags", "qos_policy_id", "dns_name", "dns_domain")
	if err != nil {
		return 0, nil, err
	}
	if !a.has("floating_network_id") {
		return 0, nil, httpBadRequest("Failed to parse request. Required attribute 'floating_network_id' not specified")
	}
	if a.has("floating_ip_address") && !a.null("floating_ip_address") {
		return 0, nil, policyDenied("create_floatingip:floating_ip_address")
	}
	var netID, subnetID string
	if _, err := a.get("floating_network_id", &netID); err != nil {
		return 0, nil, err
	}
	n, err := s.network(netID)
	if err != nil {
		return 0, nil, err
	}
	if !n.external {
		return 0, nil, badRequest("floatingip", "Network %s is not a valid external network", n.id)
	}
	f := &floatingIP{std: s.newStd(s.opts.ProjectID), networkID: n.id, status: "DOWN"}
	if _, err := a.get("description", &f.description); err != nil {
		return 0, nil, err
	}
	if _, err := a.get("tags", &f.tags); err != nil {
		return 0, nil, err
	}
	f.tags = uniqueSorted(f.tags)
	candidates := n.subnets
	if ok, err := a.get("subnet_id", &subnetID); err != nil {
		return 0, nil, err
	} else if ok {
		sn := s.net.subnets[subnetID]
		if sn == nil || sn.networkID != n.id {
			return 0, nil, invalidInput("Failed to create port on network %s, because fixed_ips included invalid subnet %s", n.id, subnetID)
		}
		candidates = []string{subnetID}
	}
	fp := &port{std: s.newStd(""), networkID: n.id, adminUp: true, status: "N/A", vnicType: "normal",
		deviceOwner: ownerFloatingIP, deviceID: f.id}
	fp.mac = s.newMAC(n.id)
	for _, id := range candidates {
		if addr, ok := s.allocateIP(s.net.subnets[id], false); ok {
			fp.fixedIPs = []fixedIP{{id, addr}}
			break
		}
	}
	if len(fp.fixedIPs) == 0 {
		return 0, nil, nerr(http.StatusConflict, "IpAddressGenerationFailure", "No more IP addresses available on network %s.", n.id)
	}
	f.fipPortID, f.addr = fp.id, fp.fixedIPs[0].addr
	if err := s.associate(f, a); err != nil {
		return 0, nil, err
	}
	s.net.ports[fp.id] = fp
	s.net.fips[f.id] = f
	// ML2/OVN creates the floating IP DOWN and sets it ACTIVE once the NAT
	// rule exists, after the answer was built: the answer says DOWN.
	body := map[string]any{"floatingip": s.fipJSON(f, "DOWN")}
	if f.portID != "" {
		f.status = "ACTIVE"
		s.fipsChanged()
	}
	return http.StatusCreated, body, nil
}

// associate applies port_id and fixed_ip_address of a POST or PUT
// (l3_db._check_and_get_fip_assoc): null port_id dissociates, an absent
// one keeps the association.
func (s *Server) associate(f *floatingIP, a attrs) error {
	var portID, fixedText string
	hasPort, err := a.get("port_id", &portID)
	if err != nil {
		return err
	}
	if _, err := a.get("fixed_ip_address", &fixedText); err != nil {
		return err
	}
	if fixedText != "" && !hasPort {
		return badRequest("floatingip", "fixed_ip_address cannot be specified without a port_id")
	}
	if !hasPort {
		if a.null("port_id") {
			f.portID, f.fixedIP, f.routerID = "", netip.Addr{}, ""
		}
		return nil
	}
	p, err := s.portFor(portID)
	if err != nil {
		return err
	}
	if p.deviceOwner == ownerDHCP {
		return badRequest("floatingip", "Port %%(id)s is unable to be assigned a floating IP")
	}
	var fixed fixedIP
	if fixedText != "" {
		addr, perr := netip.ParseAddr(fixedText)
		if perr != nil || !addr.Is4() {
			return badRequest("floatingip", "Cannot process floating IP association with %s, since that is not an IPv4 address", fixedText)
		}
		for _, ip := range p.fixedIPs {
			if ip.addr == addr {
				fixed = ip
			}
		}
		if !fixed.addr.IsValid() {
			return badRequest("floatingip", "Port %s does not have fixed ip %s", p.id, fixedText)
		}
	} else {
		switch len(p.fixedIPs) {
		case 0:
			return badRequest("floatingip", "Cannot add floating IP to port %s that has no fixed IPv4 addresses", p.id)
		case 1:
			fixed = p.fixedIPs[0]
		default:
			return badRequest("floatingip", "Port %s has multiple fixed IPv4 addresses.  Must provide a specific IPv4 address when assigning a floating IP", p.id)
		}
	}
	routerID, ok := s.routerForFloatingIP(s.net.subnets[fixed.subnetID], f.networkID)
	if !ok {
		return nerr(http.StatusNotFound, "ExternalGatewayForFloatingIPNotFound",
			"External network %s is not reachable from subnet %s.  Therefore, cannot associate Port %s with a Floating IP.",
			f.networkID, fixed.subnetID, p.id)
	}
	if p.id != f.portID {
		for _, o := range s.net.fips {
			if o != f && o.portID == p.id && o.fixedIP == fixed.addr && o.networkID == f.networkID {
				return nerr(http.StatusConflict, "FloatingIPPortAlreadyAssociated",
					"Cannot associate floating IP %s (%s) with port %s using fixed IP %s, as that fixed IP already has a floating IP on external network %s.",
					f.addr, f.id, p.id, fixed.addr, f.networkID)
			}
		}
	}
	f.portID, f.fixedIP, f.routerID = p.id, fixed.addr, routerID
	return nil
}

func (s *Server) updateFloatingIP(r *http.Request) (int, any, error) {
	f, err := s.fipFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	a, err := readBody(r, "floatingip", "port_id", "fixed_ip_address", "description", "qos_policy_id")
	if err != nil {
		return 0, nil, err
	}
	if err := checkIfMatch(r, f.revision); err != nil {
		return 0, nil, err
	}
	before := *f
	if err := s.associate(f, a); err != nil {
		*f = before
		return 0, nil, err
	}
	if _, err := a.get("description", &f.description); err != nil {
		*f = before
		return 0, nil, err
	}
	s.touch(&f.std)
	// The answer is built before ML2/OVN updates the NAT rule and the
	// status: it carries the status from before the update.
	body := map[string]any{"floatingip": s.fipJSON(f, f.status)}
	if f.portID != before.portID || f.fixedIP != before.fixedIP {
		f.status = "DOWN"
		if f.portID != "" {
			f.status = "ACTIVE"
		}
		s.fipsChanged()
	}
	return http.StatusOK, body, nil
}

func (s *Server) deleteFloatingIP(r *http.Request) (int, any, error) {
	f, err := s.fipFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	delete(s.net.ports, f.fipPortID)
	delete(s.net.fips, f.id)
	if f.portID != "" {
		s.fipsChanged()
	}
	return http.StatusNoContent, nil, nil
}

// floatingIPTable is the NAT table: floating address -> fixed address of
// every associated floating IP. The caller holds s.mu.
func (s *Server) floatingIPTable() map[netip.Addr]netip.Addr {
	t := map[netip.Addr]netip.Addr{}
	for _, f := range s.net.fips {
		if f.portID != "" {
			t[f.addr] = f.fixedIP
		}
	}
	return t
}

// FloatingIPTable returns a copy of the table of associated floating IPs
// (floating address -> fixed address), the one Options.FloatingIPs is
// called with.
func (s *Server) FloatingIPTable() map[netip.Addr]netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.floatingIPTable()
}

// fipsChanged queues the current table for Options.FloatingIPs. The
// caller holds s.mu; the queue is delivered by flushFloatingIPs once the
// lock is released.
func (s *Server) fipsChanged() { s.net.notifier.push(s.floatingIPTable()) }

// flushFloatingIPs delivers the queued tables. Call it without s.mu held
// after an operation that changed associations.
func (s *Server) flushFloatingIPs() { s.net.notifier.flush() }

// fipNotifier delivers floating IP tables to the hook in the order they
// were queued, one call at a time, from whichever goroutine flushes.
type fipNotifier struct {
	hook    func(map[netip.Addr]netip.Addr)
	mu      sync.Mutex
	queue   []map[netip.Addr]netip.Addr
	running bool
}

func (n *fipNotifier) push(t map[netip.Addr]netip.Addr) {
	if n.hook == nil {
		return
	}
	n.mu.Lock()
	n.queue = append(n.queue, t)
	n.mu.Unlock()
}

func (n *fipNotifier) flush() {
	n.mu.Lock()
	if n.running {
		n.mu.Unlock()
		return
	}
	n.running = true
	for len(n.queue) > 0 {
		t := n.queue[0]
		n.queue = n.queue[1:]
		n.mu.Unlock()
		n.hook(t)
		n.mu.Lock()
	}
	n.running = false
	n.mu.Unlock()
}
