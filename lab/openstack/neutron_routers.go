package openstack

import (
	"net/http"
	"strings"
)

// router is a Neutron router (ML2/OVN: centralized, no HA attribute).
type router struct {
	std
	name     string
	adminUp  bool
	gwPortID string // empty without a gateway
}

func (s *Server) routerJSON(rt *router) map[string]any {
	var gw any
	if gp := s.net.ports[rt.gwPortID]; gp != nil {
		ips := []map[string]string{}
		for _, ip := range gp.fixedIPs {
			ips = append(ips, map[string]string{"subnet_id": ip.subnetID, "ip_address": ip.addr.String()})
		}
		gw = map[string]any{"network_id": gp.networkID, "enable_snat": true, "external_fixed_ips": ips}
	}
	return rt.std.json(map[string]any{
		"name":                    rt.name,
		"status":                  "ACTIVE",
		"admin_state_up":          rt.adminUp,
		"external_gateway_info":   gw,
		"routes":                  []any{},
		"availability_zone_hints": []string{},
		"availability_zones":      []string{},
		"flavor_id":               nil,
		"enable_ndp_proxy":        false,
	})
}

// routerFor finds a router of the caller's project or answers
// RouterNotFound.
func (s *Server) routerFor(id string) (*router, error) {
	rt := s.net.routers[id]
	if rt == nil || !s.visible(rt.project) {
		return nil, nerr(http.StatusNotFound, "RouterNotFound", "Router %s could not be found", id)
	}
	return rt, nil
}

func (s *Server) listRouters(r *http.Request) (int, any, error) {
	q, err := parseList(r, "id", "name", "status", "admin_state_up", "project_id", "tenant_id", "description",
		"revision_number", "tags", "tags-any", "not-tags", "not-tags-any")
	if err != nil {
		return 0, nil, err
	}
	var items []map[string]any
	for _, rt := range bySeq(s.net.routers, func(rt *router) int { return rt.seq }) {
		if s.visible(rt.project) {
			items = append(items, s.routerJSON(rt))
		}
	}
	return http.StatusOK, s.page(r, "routers", q, items), nil
}

func (s *Server) showRouter(r *http.Request) (int, any, error) {
	rt, err := s.routerFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"router": s.routerJSON(rt)}, nil
}

var routerAttrs = []string{"name", "description", "admin_state_up", "external_gateway_info", "tenant_id",
	"project_id", "distributed", "ha", "availability_zone_hints", "flavor_id", "tags", "routes", "enable_ndp_proxy"}

func (s *Server) createRouter(r *http.Request) (int, any, error) {
	a, err := readBody(r, "router", routerAttrs...)
	if err != nil {
		return 0, nil, err
	}
	if k := firstOf(a, "distributed", "ha", "flavor_id"); k != "" {
		return 0, nil, policyDenied("create_router:" + k)
	}
	rt := &router{std: s.newStd(s.opts.ProjectID), adminUp: true}
	if err := s.setRouter(rt, a); err != nil {
		return 0, nil, err
	}
	if _, err := a.get("tags", &rt.tags); err != nil {
		return 0, nil, err
	}
	rt.tags = uniqueSorted(rt.tags)
	if err := s.setGateway(rt, a, "create_router"); err != nil {
		return 0, nil, err
	}
	s.net.routers[rt.id] = rt
	return http.StatusCreated, map[string]any{"router": s.routerJSON(rt)}, nil
}

func (s *Server) setRouter(rt *router, a attrs) error {
	for _, f := range []struct {
		k   string
		dst any
	}{{"name", &rt.name}, {"description", &rt.description}, {"admin_state_up", &rt.adminUp}} {
		if _, err := a.get(f.k, f.dst); err != nil {
			return err
		}
	}
	var routes []any
	if ok, err := a.get("routes", &routes); err != nil {
		return err
	} else if ok && len(routes) > 0 {
		return invalidInput("extra routes are not emulated")
	}
	return nil
}

// setGateway applies external_gateway_info: {network_id} sets or moves
// the gateway (a port on the external network, its address from the
// external subnet), {} or null removes it.
func (s *Server) setGateway(rt *router, a attrs, rule string) error {
	if !a.has("external_gateway_info") {
		return nil
	}
	var info struct {
		NetworkID        string `json:"network_id"`
		EnableSNAT       *bool  `json:"enable_snat"`
		ExternalFixedIPs []any  `json:"external_fixed_ips"`
	}
	if _, err := a.get("external_gateway_info", &info); err != nil {
		return err
	}
	if info.EnableSNAT != nil {
		return policyDenied(rule + ":external_gateway_info:enable_snat")
	}
	if info.ExternalFixedIPs != nil {
		return policyDenied(rule + ":external_gateway_info:external_fixed_ips")
	}
	old := s.net.ports[rt.gwPortID]
	if old != nil && old.networkID == info.NetworkID {
		return nil
	}
	if old != nil {
		for _, f := range s.net.fips {
			if f.routerID == rt.id && f.networkID == old.networkID {
				return nerr(http.StatusConflict, "RouterExternalGatewayInUseByFloatingIp",
					"Gateway cannot be updated for router %s, since a gateway to external network %s is required by one or more floating IPs.",
					rt.id, old.networkID)
			}
		}
	}
	var gp *port
	if info.NetworkID != "" {
		n, err := s.network(info.NetworkID)
		if err != nil {
			return err
		}
		if !n.external {
			return badRequest("router", "Network %s is not an external network", n.id)
		}
		gp = &port{std: s.newStd(""), networkID: n.id, adminUp: true, status: "ACTIVE", portSecurity: false,
			vnicType: "normal", deviceOwner: ownerRouterGateway, deviceID: rt.id}
		gp.mac = s.newMAC(n.id)
		for _, id := range n.subnets {
			if addr, ok := s.allocateIP(s.net.subnets[id], false); ok {
				gp.fixedIPs = append(gp.fixedIPs, fixedIP{id, addr})
				break
			}
		}
		if len(gp.fixedIPs) == 0 {
			return nerr(http.StatusConflict, "IpAddressGenerationFailure", "No more IP addresses available on network %s.", n.id)
		}
	}
	if old != nil {
		delete(s.net.ports, old.id)
		rt.gwPortID = ""
	}
	if gp != nil {
		s.net.ports[gp.id] = gp
		rt.gwPortID = gp.id
	}
	return nil
}

func (s *Server) updateRouter(r *http.Request) (int, any, error) {
	rt, err := s.routerFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	a, err := readBody(r, "router", "name", "description", "admin_state_up", "external_gateway_info",
		"distributed", "ha", "routes", "enable_ndp_proxy")
	if err != nil {
		return 0, nil, err
	}
	if err := checkIfMatch(r, rt.revision); err != nil {
		return 0, nil, err
	}
	if k := firstOf(a, "distributed", "ha"); k != "" {
		return 0, nil, policyDenied("update_router:" + k)
	}
	if err := s.setRouter(rt, a); err != nil {
		return 0, nil, err
	}
	if err := s.setGateway(rt, a, "update_router"); err != nil {
		return 0, nil, err
	}
	s.touch(&rt.std)
	return http.StatusOK, map[string]any{"router": s.routerJSON(rt)}, nil
}

// interfaces are the router's interface ports in creation order.
func (s *Server) interfaces(rt *router) []*port {
	var out []*port
	for _, p := range bySeq(s.net.ports, func(p *port) int { return p.seq }) {
		if p.deviceID == rt.id && p.deviceOwner == ownerRouterInterface {
			out = append(out, p)
		}
	}
	return out
}

func (s *Server) deleteRouter(r *http.Request) (int, any, error) {
	rt, err := s.routerFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if ifs := s.interfaces(rt); len(ifs) > 0 {
		var ids []string
		for _, p := range ifs {
			ids = append(ids, p.id)
		}
		return 0, nil, nerr(http.StatusConflict, "RouterInUse", "Router %s has ports still attached: %s", rt.id, strings.Join(ids, ", "))
	}
	delete(s.net.ports, rt.gwPortID)
	delete(s.net.routers, rt.id)
	return http.StatusNoContent, nil, nil
}

// interfaceRequest is the body of add_router_interface and
// remove_router_interface (not wrapped in a resource key).
type interfaceRequest struct {
	SubnetID *string `json:"subnet_id"`
	PortID   *string `json:"port_id"`
}

func readInterfaceRequest(r *http.Request, removal bool) (interfaceRequest, error) {
	var req interfaceRequest
	if err := decodeJSON(r, &req); err != nil {
		return req, err
	}
	if req.SubnetID == nil && req.PortID == nil {
		return req, badRequest("router", "Either subnet_id or port_id must be specified")
	}
	if !removal && req.SubnetID != nil && req.PortID != nil {
		return req, badRequest("router", "Cannot specify both subnet-id and port-id")
	}
	return req, nil
}

// interfaceInfo is the answer of add/remove_router_interface
// (l3_db._make_router_interface_info).
func interfaceInfo(rt *router, p *port, subnetID string) map[string]any {
	return map[string]any{
		"id": rt.id, "project_id": p.project, "tenant_id": p.project, "port_id": p.id,
		"network_id": p.networkID, "subnet_id": subnetID, "subnet_ids": []string{subnetID},
	}
}

func (s *Server) addRouterInterface(r *http.Request) (int, any, error) {
	rt, err := s.routerFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	req, err := readInterfaceRequest(r, false)
	if err != nil {
		return 0, nil, err
	}
	var p *port
	var sn *subnet
	if req.PortID != nil {
		if p, err = s.portFor(*req.PortID); err != nil {
			return 0, nil, err
		}
		if p.deviceID != "" {
			return 0, nil, nerr(http.StatusConflict, "PortInUse",
				"Unable to complete operation on port %s for network %s. Port already has an attached device %s.", p.id, p.networkID, p.deviceID)
		}
		if len(p.fixedIPs) == 0 {
			return 0, nil, badRequest("router", "Router port must have at least one fixed IP")
		}
		sn = s.net.subnets[p.fixedIPs[0].subnetID]
	} else {
		if sn, err = s.subnetFor(*req.SubnetID); err != nil {
			return 0, nil, err
		}
		if !sn.gateway.IsValid() {
			return 0, nil, badRequest("router", "Subnet for router interface must have a gateway IP")
		}
		if !s.visible(sn.project) {
			return 0, nil, badRequest("router", "Cannot add interface to router because subnet %s is not owned by project making the request", sn.id)
		}
	}
	if err := s.checkRouterSubnets(rt, sn); err != nil {
		return 0, nil, err
	}
	if p == nil {
		if s.allocated(sn)[sn.gateway] {
			return 0, nil, nerr(http.StatusConflict, "IpAddressAlreadyAllocated", "IP address %s already allocated in subnet %s", sn.gateway, sn.id)
		}
		n := s.net.networks[sn.networkID]
		p = &port{std: s.newStd(rt.project), networkID: n.id, adminUp: true, portSecurity: n.portSecurity,
			vnicType: "normal", fixedIPs: []fixedIP{{sn.id, sn.gateway}}}
		p.mac = s.newMAC(n.id)
		s.net.ports[p.id] = p
	} else {
		p.groups = nil
		s.touch(&p.std)
	}
	p.deviceID, p.deviceOwner, p.status = rt.id, ownerRouterInterface, "ACTIVE"
	s.touch(&rt.std)
	return http.StatusOK, interfaceInfo(rt, p, sn.id), nil
}

// checkRouterSubnets refuses a second interface on a subnet and a subnet
// overlapping one the router is already on (_check_for_dup_router_subnets).
func (s *Server) checkRouterSubnets(rt *router, sn *subnet) error {
	var onRouter []*subnet
	for _, p := range s.interfaces(rt) {
		for _, ip := range p.fixedIPs {
			if ip.subnetID == sn.id {
				return badRequest("router", "Router already has a port on subnet %s", sn.id)
			}
			onRouter = append(onRouter, s.net.subnets[ip.subnetID])
		}
	}
	if gp := s.net.ports[rt.gwPortID]; gp != nil {
		for _, id := range s.net.networks[gp.networkID].subnets {
			onRouter = append(onRouter, s.net.subnets[id])
		}
	}
	for _, o := range onRouter {
		if o.cidr.Overlaps(sn.cidr) {
			return badRequest("router", "Cidr %s of subnet %s overlaps with cidr %s of subnet %s", sn.cidr, sn.id, o.cidr, o.id)
		}
	}
	return nil
}

func (s *Server) removeRouterInterface(r *http.Request) (int, any, error) {
	rt, err := s.routerFor(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	req, err := readInterfaceRequest(r, true)
	if err != nil {
		return 0, nil, err
	}
	var p *port
	var sn *subnet
	if req.PortID != nil {
		p = s.net.ports[*req.PortID]
		if p == nil || p.deviceID != rt.id || p.deviceOwner != ownerRouterInterface {
			return 0, nil, nerr(http.StatusNotFound, "RouterInterfaceNotFound",
				"Router %s does not have an interface with id %s", rt.id, *req.PortID)
		}
		sn = s.net.subnets[p.fixedIPs[0].subnetID]
		if req.SubnetID != nil && *req.SubnetID != sn.id {
			return 0, nil, nerr(http.StatusConflict, "SubnetMismatchForPort",
				"Subnet on port %s does not match the requested subnet %s.", p.id, *req.SubnetID)
		}
	} else {
		if sn, err = s.subnetFor(*req.SubnetID); err != nil {
			return 0, nil, err
		}
		for _, ifp := range s.interfaces(rt) {
			for _, ip := range ifp.fixedIPs {
				if ip.subnetID == sn.id {
					p = ifp
				}
			}
		}
		if p == nil {
			return 0, nil, nerr(http.StatusNotFound, "RouterInterfaceNotFoundForSubnet",
				"Router %s has no interface on subnet %s", rt.id, sn.id)
		}
	}
	for _, f := range s.net.fips {
		if f.routerID == rt.id && sn.cidr.Contains(f.fixedIP) {
			return 0, nil, nerr(http.StatusConflict, "RouterInterfaceInUseByFloatingIP",
				"Router interface for subnet %s on router %s cannot be deleted, as it is required by one or more floating IPs.", sn.id, rt.id)
		}
	}
	info := interfaceInfo(rt, p, sn.id)
	delete(s.net.ports, p.id)
	s.touch(&rt.std)
	return http.StatusOK, info, nil
}

// routerForFloatingIP finds the router that connects the subnet of a
// fixed address to the external network: one with an interface on the
// subnet and a gateway on the network, the one holding the subnet's
// gateway_ip first (l3_db.get_router_for_floatingip).
func (s *Server) routerForFloatingIP(sn *subnet, externalID string) (string, bool) {
	first := ""
	for _, rt := range bySeq(s.net.routers, func(rt *router) int { return rt.seq }) {
		gp := s.net.ports[rt.gwPortID]
		if gp == nil || gp.networkID != externalID {
			continue
		}
		for _, p := range s.interfaces(rt) {
			for _, ip := range p.fixedIPs {
				if ip.subnetID != sn.id {
					continue
				}
				if ip.addr == sn.gateway {
					return rt.id, true
				}
				if first == "" {
					first = rt.id
				}
			}
		}
	}
	return first, first != ""
}
