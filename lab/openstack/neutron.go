package openstack

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"
)

// neutronTime is the form of Neutron's created_at and updated_at
// (timestamp_db: whole seconds and a literal Z).
const neutronTime = "2006-01-02T15:04:05Z"

// Neutron's device owners (neutron_lib.constants).
const (
	ownerRouterInterface = "network:router_interface"
	ownerRouterGateway   = "network:router_gateway"
	ownerFloatingIP      = "network:floatingip"
	ownerDHCP            = "network:dhcp"
	ownerDistributed     = "network:distributed"
)

// tenantMTU is the MTU of a Geneve tenant network under ML2/OVN: the 1500
// of global_physnet_mtu less OVN's minimum Geneve max_header_size (38)
// and the IPv4 header (20).
const tenantMTU = 1442

// neutron is the Networking service's state. It is guarded by Server.mu.
type neutron struct {
	seq       int
	networks  map[string]*network
	subnets   map[string]*subnet
	ports     map[string]*port
	routers   map[string]*router
	fips      map[string]*floatingIP
	groups    map[string]*secGroup
	rules     map[string]*secRule
	defaultSG map[string]string // project ID -> its "default" group
	adminProj string
	notifier  fipNotifier
}

// std is the standard attributes every Neutron resource carries.
type std struct {
	id, project, description string
	tags                     []string
	created, updated         time.Time
	revision                 int
	seq                      int
}

// newStd stamps a new resource.
func (s *Server) newStd(project string) std {
	s.net.seq++
	now := s.now().UTC()
	return std{id: newUUID(), project: project, created: now, updated: now, revision: 1, seq: s.net.seq}
}

// touch records an update of a resource: updated_at and revision_number.
func (s *Server) touch(a *std) {
	a.updated = s.now().UTC()
	a.revision++
}

// json is the standard attributes of a resource's answer.
func (a *std) json(m map[string]any) map[string]any {
	m["id"] = a.id
	m["project_id"] = a.project
	m["tenant_id"] = a.project
	m["description"] = a.description
	m["created_at"] = a.created.Format(neutronTime)
	m["updated_at"] = a.updated.Format(neutronTime)
	m["revision_number"] = a.revision
	tags := append([]string{}, a.tags...)
	m["tags"] = tags
	return m
}

// newUUID returns a random UUID in its 8-4-4-4-12 form, the form of
// Neutron's IDs (oslo_utils.uuidutils.generate_uuid).
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// networkRoutes registers Neutron's operations under /network.
func (s *Server) networkRoutes() {
	s.net = &neutron{
		networks:  map[string]*network{},
		subnets:   map[string]*subnet{},
		ports:     map[string]*port{},
		routers:   map[string]*router{},
		fips:      map[string]*floatingIP{},
		groups:    map[string]*secGroup{},
		rules:     map[string]*secRule{},
		defaultSG: map[string]string{},
		adminProj: stableID("project", "admin"),
		notifier:  fipNotifier{hook: s.opts.FloatingIPs},
	}
	s.addExternalNetworks()

	s.handle("GET /network", "network.versions", s.networkVersions)
	s.handle("GET /network/{$}", "network.versions", s.networkVersions)
	s.handleNeutron("GET /network/v2.0/{$}", "network.version", s.networkVersion)

	const v = "/network/v2.0/"
	for _, r := range []struct {
		method, path, op string
		fn               neutronHandler
	}{
		{"GET", "networks", "network.network.list", s.listNetworks},
		{"POST", "networks", "network.network.create", s.createNetwork},
		{"GET", "networks/{id}", "network.network.show", s.showNetwork},
		{"PUT", "networks/{id}", "network.network.update", s.updateNetwork},
		{"DELETE", "networks/{id}", "network.network.delete", s.deleteNetwork},

		{"GET", "subnets", "network.subnet.list", s.listSubnets},
		{"POST", "subnets", "network.subnet.create", s.createSubnet},
		{"GET", "subnets/{id}", "network.subnet.show", s.showSubnet},
		{"PUT", "subnets/{id}", "network.subnet.update", s.updateSubnet},
		{"DELETE", "subnets/{id}", "network.subnet.delete", s.deleteSubnet},

		{"GET", "ports", "network.port.list", s.listPorts},
		{"POST", "ports", "network.port.create", s.createPort},
		{"GET", "ports/{id}", "network.port.show", s.showPort},
		{"PUT", "ports/{id}", "network.port.update", s.updatePort},
		{"DELETE", "ports/{id}", "network.port.delete", s.deletePort},

		{"GET", "routers", "network.router.list", s.listRouters},
		{"POST", "routers", "network.router.create", s.createRouter},
		{"GET", "routers/{id}", "network.router.show", s.showRouter},
		{"PUT", "routers/{id}", "network.router.update", s.updateRouter},
		{"DELETE", "routers/{id}", "network.router.delete", s.deleteRouter},
		{"PUT", "routers/{id}/add_router_interface", "network.router.add_interface", s.addRouterInterface},
		{"PUT", "routers/{id}/remove_router_interface", "network.router.remove_interface", s.removeRouterInterface},

		{"GET", "floatingips", "network.floatingip.list", s.listFloatingIPs},
		{"POST", "floatingips", "network.floatingip.create", s.createFloatingIP},
		{"GET", "floatingips/{id}", "network.floatingip.show", s.showFloatingIP},
		{"PUT", "floatingips/{id}", "network.floatingip.update", s.updateFloatingIP},
		{"DELETE", "floatingips/{id}", "network.floatingip.delete", s.deleteFloatingIP},

		{"GET", "security-groups", "network.securitygroup.list", s.listSecGroups},
		{"POST", "security-groups", "network.securitygroup.create", s.createSecGroup},
		{"GET", "security-groups/{id}", "network.securitygroup.show", s.showSecGroup},
		{"PUT", "security-groups/{id}", "network.securitygroup.update", s.updateSecGroup},
		{"DELETE", "security-groups/{id}", "network.securitygroup.delete", s.deleteSecGroup},

		{"GET", "security-group-rules", "network.securitygrouprule.list", s.listSecRules},
		{"POST", "security-group-rules", "network.securitygrouprule.create", s.createSecRule},
		{"GET", "security-group-rules/{id}", "network.securitygrouprule.show", s.showSecRule},
		{"DELETE", "security-group-rules/{id}", "network.securitygrouprule.delete", s.deleteSecRule},
	} {
		s.handleNeutron(r.method+" "+v+r.path, r.op, r.fn)
	}
	for _, coll := range []string{"networks", "subnets", "ports", "routers", "floatingips", "security-groups"} {
		coll := coll
		s.handleNeutron("GET "+v+coll+"/{id}/tags", "network.tag.list", s.tagsHandler(coll, tagList))
		s.handleNeutron("PUT "+v+coll+"/{id}/tags", "network.tag.replace", s.tagsHandler(coll, tagReplace))
		s.handleNeutron("DELETE "+v+coll+"/{id}/tags", "network.tag.delete_all", s.tagsHandler(coll, tagDeleteAll))
		s.handleNeutron("GET "+v+coll+"/{id}/tags/{tag}", "network.tag.check", s.tagsHandler(coll, tagCheck))
		s.handleNeutron("PUT "+v+coll+"/{id}/tags/{tag}", "network.tag.add", s.tagsHandler(coll, tagAdd))
		s.handleNeutron("DELETE "+v+coll+"/{id}/tags/{tag}", "network.tag.delete", s.tagsHandler(coll, tagDelete))
	}
}

// networkVersions answers GET /network/: Neutron's version list, 200,
// without authentication (the root is outside keystonemiddleware in
// Neutron's api-paste).
func (s *Server) networkVersions(w http.ResponseWriter, _ *http.Request) int {
	return writeJSON(w, http.StatusOK, map[string]any{"versions": []any{map[string]any{
		"id":     "v2.0",
		"status": "CURRENT",
		"links":  []map[string]string{{"rel": "self", "href": s.url + "/network/v2.0/"}},
	}}})
}

// networkVersion answers GET /network/v2.0/: the core resources.
func (s *Server) networkVersion(r *http.Request) (int, any, error) {
	var res []any
	for _, c := range []struct{ name, coll string }{
		{"network", "networks"}, {"subnet", "subnets"}, {"subnetpool", "subnetpools"}, {"port", "ports"},
	} {
		res = append(res, map[string]any{"name": c.name, "collection": c.coll, "links": []map[string]string{
			{"rel": "self", "href": s.url + "/network/v2.0/" + c.coll},
		}})
	}
	return http.StatusOK, map[string]any{"resources": res}, nil
}

// errPortNotFound and errPortInUse are what bindPort answers for a port
// that does not exist and one already bound to another device.
var (
	errPortNotFound = errors.New("port not found")
	errPortInUse    = errors.New("port is still in use")
)

// bindPort attaches a port to a server as Nova does when it boots one
// (device_id = serverID, device_owner = "compute:"+zone, status ACTIVE)
// and returns the port's fixed addresses and MAC. The caller holds s.mu.
func (s *Server) bindPort(portID, serverID, zone string) (addrs []netip.Addr, mac string, err error) {
	p := s.net.ports[portID]
	if p == nil {
		return nil, "", errPortNotFound
	}
	if p.deviceID != "" && p.deviceID != serverID {
		return nil, "", errPortInUse
	}
	p.deviceID = serverID
	p.deviceOwner = "compute:" + zone
	p.status = "ACTIVE"
	p.hostID = "lab-" + zone
	s.touch(&p.std)
	for _, ip := range p.fixedIPs {
		addrs = append(addrs, ip.addr)
	}
	return addrs, p.mac, nil
}

// unbindPorts detaches every port bound to the server (device_id and
// device_owner cleared, status DOWN), as Nova does when it deletes a
// server whose ports the user created. The caller holds s.mu.
func (s *Server) unbindPorts(serverID string) {
	for _, p := range s.net.ports {
		if p.deviceID != serverID || !isComputeOwner(p.deviceOwner) {
			continue
		}
		p.deviceID, p.deviceOwner, p.hostID = "", "", ""
		p.status = "DOWN"
		s.touch(&p.std)
	}
}
