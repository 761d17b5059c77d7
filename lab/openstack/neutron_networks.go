package openstack

import (
	"net/http"
	"net/netip"
	"strings"
)

// network is a Neutron network.
type network struct {
	std
	name         string
	adminUp      bool
	shared       bool
	external     bool
	mtu          int
	portSecurity bool
	subnets      []string
}

// json is the network's answer (the attributes ML2/OVN shows a project
// member; provider:* are admin-only by policy).
func (n *network) json() map[string]any {
	return n.std.json(map[string]any{
		"name":                    n.name,
		"status":                  "ACTIVE",
		"admin_state_up":          n.adminUp,
		"subnets":                 append([]string{}, n.subnets...),
		"shared":                  n.shared,
		"router:external":         n.external,
		"mtu":                     n.mtu,
		"port_security_enabled":   n.portSecurity,
		"availability_zone_hints": []string{},
		"availability_zones":      []string{},
		"ipv4_address_scope":      nil,
		"ipv6_address_scope":      nil,
		"l2_adjacency":            true,
		"is_default":              false,
		"qos_policy_id":           nil,
	})
}

// addExternalNetworks creates Options.ExternalNetworks, owned by the admin
// project, each with one subnet without DHCP whose pool starts at .10.
func (s *Server) addExternalNetworks() {
	ext := s.opts.ExternalNetworks
	if len(ext) == 0 {
		ext = []ExternalNetwork{{Name: "ext-net", CIDR: netip.MustParsePrefix("127.44.0.0/24")}}
	}
	for _, e := range ext {
		n := &network{std: s.newStd(s.net.adminProj), name: e.Name, adminUp: true, external: true, mtu: 1500, portSecurity: true}
		s.net.networks[n.id] = n
		cidr := e.CIDR.Masked()
		first := cidr.Addr().Next()
		start := first
		for i := 0; i < 9 && cidr.Contains(start.Next()); i++ {
			start = start.Next()
		}
		sn := &subnet{std: s.newStd(s.net.adminProj), name: e.Name + "-subnet", networkID: n.id, cidr: cidr,
			gateway: first, pools: []ipRange{{start, lastHost(cidr)}}, dns: []string{}}
		s.net.subnets[sn.id] = sn
		n.subnets = append(n.subnets, sn.id)
	}
}

// visible reports whether the caller's project sees a resource of this
// project (non-admin policy: one's own resources).
func (s *Server) visible(project string) bool { return project == s.opts.ProjectID }

// netVisible: one's own networks, shared ones and external ones.
func (s *Server) netVisible(n *network) bool { return s.visible(n.project) || n.shared || n.external }

// network finds a visible network or answers NetworkNotFound.
func (s *Server) network(id string) (*network, error) {
	n := s.net.networks[id]
	if n == nil || !s.netVisible(n) {
		return nil, nerr(http.StatusNotFound, "NetworkNotFound", "Network %s could not be found.", id)
	}
	return n, nil
}

func (s *Server) listNetworks(r *http.Request) (int, any, error) {
	q, err := parseList(r, "id", "name", "status", "admin_state_up", "shared", "router:external", "mtu",
		"project_id", "tenant_id", "description", "port_security_enabled", "revision_number", "is_default",
		"tags", "tags-any", "not-tags", "not-tags-any")
	if err != nil {
		return 0, nil, err
	}
	var items []map[string]any
	for _, n := range bySeq(s.net.networks, func(n *network) int { return n.seq }) {
		if s.netVisible(n) {
			items = append(items, n.json())
		}
	}
	return http.StatusOK, s.page(r, "networks", q, items), nil
}

func (s *Server) showNetwork(r *http.Request) (int, any, error) {
	n, err := s.network(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"network": n.json()}, nil
}

// networkAttrs are the attributes a network's POST and PUT accept.
var networkAttrs = []string{"name", "description", "admin_state_up", "shared", "router:external", "mtu",
	"port_security_enabled", "availability_zone_hints", "tenant_id", "project_id", "tags", "dns_domain",
	"qos_policy_id", "is_default"}

func (s *Server) createNetwork(r *http.Request) (int, any, error) {
	a, err := readBody(r, "network", networkAttrs...)
	if err != nil {
		return 0, nil, err
	}
	s.defaultGroup(s.opts.ProjectID)
	n := &network{std: s.newStd(s.opts.ProjectID), adminUp: true, mtu: tenantMTU, portSecurity: true}
	if err := s.setNetwork(n, a, "create_network"); err != nil {
		return 0, nil, err
	}
	if _, err := a.get("tags", &n.tags); err != nil {
		return 0, nil, err
	}
	n.tags = uniqueSorted(n.tags)
	s.net.networks[n.id] = n
	s.ensureMetadataPort(n)
	return http.StatusCreated, map[string]any{"network": n.json()}, nil
}

// setNetwork applies the writable attributes of a POST or PUT.
func (s *Server) setNetwork(n *network, a attrs, rule string) error {
	var shared, external bool
	if ok, err := a.get("shared", &shared); err != nil {
		return err
	} else if ok && shared != n.shared {
		return policyDenied(rule + ":shared")
	}
	if ok, err := a.get("router:external", &external); err != nil {
		return err
	} else if ok && external != n.external {
		return policyDenied(rule + ":router:external")
	}
	var mtu int
	if ok, err := a.get("mtu", &mtu); err != nil {
		return err
	} else if ok {
		if mtu > tenantMTU {
			return invalidInput("Requested MTU is too big, maximum is %d", tenantMTU)
		}
		if mtu < 68 {
			return invalidInput("Requested MTU is too small, minimum is 68")
		}
		n.mtu = mtu
	}
	for _, f := range []struct {
		k   string
		dst any
	}{{"name", &n.name}, {"description", &n.description}, {"admin_state_up", &n.adminUp}, {"port_security_enabled", &n.portSecurity}} {
		if _, err := a.get(f.k, f.dst); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) updateNetwork(r *http.Request) (int, any, error) {
	n, err := s.network(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	a, err := readBody(r, "network", networkAttrs...)
	if err != nil {
		return 0, nil, err
	}
	if !s.visible(n.project) {
		return 0, nil, policyDenied("update_network")
	}
	if err := checkIfMatch(r, n.revision); err != nil {
		return 0, nil, err
	}
	if a.has("tags") || a.has("tenant_id") || a.has("project_id") {
		return 0, nil, httpBadRequest("Cannot update read-only attribute %s", firstOf(a, "tags", "tenant_id", "project_id"))
	}
	if err := s.setNetwork(n, a, "update_network"); err != nil {
		return 0, nil, err
	}
	s.touch(&n.std)
	return http.StatusOK, map[string]any{"network": n.json()}, nil
}

func (s *Server) deleteNetwork(r *http.Request) (int, any, error) {
	n, err := s.network(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if !s.visible(n.project) {
		return 0, nil, policyDenied("delete_network")
	}
	var inUse []string
	for _, p := range bySeq(s.net.ports, func(p *port) int { return p.seq }) {
		if p.networkID == n.id && !autoDeleteOwner(p.deviceOwner) {
			inUse = append(inUse, p.id)
		}
	}
	if len(inUse) > 0 {
		return 0, nil, nerr(http.StatusConflict, "NetworkInUse",
			"Unable to complete operation on network %s. There are one or more ports still in use on the network, id for these ports is: %s.",
			n.id, strings.Join(inUse, ","))
	}
	for id, p := range s.net.ports {
		if p.networkID == n.id {
			delete(s.net.ports, id)
		}
	}
	for _, sid := range n.subnets {
		delete(s.net.subnets, sid)
	}
	delete(s.net.networks, n.id)
	return http.StatusNoContent, nil, nil
}

// autoDeleteOwner reports the device owners whose ports go away with their
// network and do not keep it or its subnets in use
// (neutron.common._constants.AUTO_DELETE_PORT_OWNERS).
func autoDeleteOwner(owner string) bool {
	return owner == ownerDHCP || owner == ownerDistributed || owner == "network:floatingip_agent_gateway"
}

// firstOf is the first of the keys present in a.
func firstOf(a attrs, keys ...string) string {
	for _, k := range keys {
		if a.has(k) {
			return k
		}
	}
	return ""
}
