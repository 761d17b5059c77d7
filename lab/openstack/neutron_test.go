package openstack

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	gcopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
)

// networkClient authenticates as production does and returns gophercloud's
// Networking v2 client.
func networkClient(t *testing.T, srv *Server) *gophercloud.ServiceClient {
	t.Helper()
	provider, err := authenticate(t, srv, srv.URL()+"/identity/v3", DefaultCredential.ID, DefaultCredential.Secret)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := gcopenstack.NewNetworkV2(provider, gophercloud.EndpointOpts{Region: DefaultRegion})
	if err != nil {
		t.Fatalf("network endpoint: %v", err)
	}
	return nc
}

// neutronErr asserts a call failed with status and a NeutronError of type.
func neutronErr(t *testing.T, what string, err error, status int, typ string) string {
	t.Helper()
	var resp gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &resp) || resp.Actual != status {
		t.Fatalf("%s: err = %v, want %d", what, err, status)
	}
	var body struct {
		NeutronError struct{ Type, Message, Detail string }
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatalf("%s: body %q: %v", what, resp.Body, err)
	}
	if body.NeutronError.Type != typ {
		t.Errorf("%s: type %q (%s), want %q", what, body.NeutronError.Type, body.NeutronError.Message, typ)
	}
	return body.NeutronError.Message
}

// inRange reports whether a lies within [lo, hi].
func inRange(a, lo, hi string) bool {
	x, l, h := netip.MustParseAddr(a), netip.MustParseAddr(lo), netip.MustParseAddr(hi)
	return !x.Less(l) && !h.Less(x)
}

// topology is a tenant network behind a router to the external network.
type topology struct {
	ext            networks.Network
	net            networks.Network
	sub            subnets.Subnet
	router         routers.Router
	routerPort     string
	metadataAddr   string
	gatewayAddress string
}

func buildTopology(t *testing.T, nc *gophercloud.ServiceClient, cidr string) topology {
	t.Helper()
	ctx := t.Context()
	var top topology
	yes := true
	pages, err := networks.List(nc, external.ListOptsExt{ListOptsBuilder: networks.ListOpts{}, External: &yes}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exts, err := networks.ExtractNetworks(pages)
	if err != nil || len(exts) != 1 || exts[0].Name != "ext-net" {
		t.Fatalf("external networks = %+v, %v", exts, err)
	}
	top.ext = exts[0]

	net, err := networks.Create(ctx, nc, networks.CreateOpts{Name: "lab"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	top.net = *net
	sub, err := subnets.Create(ctx, nc, subnets.CreateOpts{NetworkID: net.ID, CIDR: cidr, IPVersion: 4,
		DNSNameservers: []string{"127.0.0.53"}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	top.sub = *sub
	mdPages, err := ports.List(nc, ports.ListOpts{NetworkID: net.ID, DeviceOwner: "network:distributed"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := ports.ExtractPorts(mdPages)
	if len(md) != 1 || len(md[0].FixedIPs) != 1 || md[0].DeviceID != "ovnmeta-"+net.ID {
		t.Fatalf("metadata ports = %+v", md)
	}
	top.metadataAddr = md[0].FixedIPs[0].IPAddress

	rt, err := routers.Create(ctx, nc, routers.CreateOpts{Name: "lab-router",
		GatewayInfo: &routers.GatewayInfo{NetworkID: top.ext.ID}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	top.router = *rt
	if len(rt.GatewayInfo.ExternalFixedIPs) != 1 {
		t.Fatalf("gateway = %+v", rt.GatewayInfo)
	}
	top.gatewayAddress = rt.GatewayInfo.ExternalFixedIPs[0].IPAddress
	intf, err := routers.AddInterface(ctx, nc, rt.ID, routers.AddInterfaceOpts{SubnetID: sub.ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if intf.SubnetID != sub.ID || intf.ID != rt.ID || intf.PortID == "" {
		t.Fatalf("interface = %+v", intf)
	}
	top.routerPort = intf.PortID
	return top
}

func TestNeutronTopology(t *testing.T) {
	t.Parallel()
	srv := start(t, Options{})
	nc := networkClient(t, srv)
	if nc.Endpoint != srv.URL()+"/network/" || nc.ResourceBase != srv.URL()+"/network/v2.0/" {
		t.Errorf("endpoint %q, resource base %q", nc.Endpoint, nc.ResourceBase)
	}
	top := buildTopology(t, nc, "127.10.0.0/24")
	ctx := t.Context()

	if top.net.Status != "ACTIVE" || !top.net.AdminStateUp || top.net.Shared {
		t.Errorf("network = %+v", top.net)
	}
	var attrs struct {
		MTU            int  `json:"mtu"`
		External       bool `json:"router:external"`
		PortSecurity   bool `json:"port_security_enabled"`
		RevisionNumber int  `json:"revision_number"`
	}
	if err := networks.Get(ctx, nc, top.net.ID).ExtractInto(&attrs); err != nil {
		t.Fatal(err)
	}
	if attrs.MTU != 1442 || attrs.External || !attrs.PortSecurity || attrs.RevisionNumber < 2 {
		t.Errorf("network attributes = %+v", attrs)
	}
	if top.sub.GatewayIP != "127.10.0.1" || len(top.sub.AllocationPools) != 1 ||
		top.sub.AllocationPools[0] != (subnets.AllocationPool{Start: "127.10.0.2", End: "127.10.0.254"}) ||
		!top.sub.EnableDHCP || !slices.Equal(top.sub.DNSNameservers, []string{"127.0.0.53"}) {
		t.Errorf("subnet = %+v", top.sub)
	}
	if top.metadataAddr != "127.10.0.2" {
		t.Errorf("metadata port address %s, want the first of the pool", top.metadataAddr)
	}
	if !inRange(top.gatewayAddress, "127.44.0.10", "127.44.0.254") {
		t.Errorf("router gateway address %s", top.gatewayAddress)
	}
	rp, err := ports.Get(ctx, nc, top.routerPort).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if rp.DeviceOwner != "network:router_interface" || rp.DeviceID != top.router.ID ||
		len(rp.FixedIPs) != 1 || rp.FixedIPs[0].IPAddress != "127.10.0.1" || len(rp.SecurityGroups) != 0 {
		t.Errorf("router port = %+v", rp)
	}

	// A second interface on the subnet is refused; a router with an
	// interface cannot go.
	_, err = routers.AddInterface(ctx, nc, top.router.ID, routers.AddInterfaceOpts{SubnetID: top.sub.ID}).Extract()
	neutronErr(t, "second interface", err, http.StatusBadRequest, "BadRequest")
	err = routers.Delete(ctx, nc, top.router.ID).ExtractErr()
	if msg := neutronErr(t, "delete router", err, http.StatusConflict, "RouterInUse"); !strings.Contains(msg, top.routerPort) {
		t.Errorf("RouterInUse message %q", msg)
	}
	err = ports.Delete(ctx, nc, top.routerPort).ExtractErr()
	neutronErr(t, "delete router port", err, http.StatusConflict, "ServicePortInUse")

	// Security groups: a new group has the two egress rules; a duplicate
	// rule (tcp written as 6) is refused with the existing rule's ID.
	web, err := groups.Create(ctx, nc, groups.CreateOpts{Name: "web", Description: "web servers"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if len(web.Rules) != 2 || web.Rules[0].Direction != "egress" || web.Rules[0].EtherType != "IPv4" ||
		web.Rules[1].EtherType != "IPv6" || web.Rules[0].Protocol != "" {
		t.Errorf("new group rules = %+v", web.Rules)
	}
	rule, err := rules.Create(ctx, nc, rules.CreateOpts{SecGroupID: web.ID, Direction: rules.DirIngress,
		EtherType: rules.EtherType4, Protocol: rules.ProtocolTCP, PortRangeMin: 6443, PortRangeMax: 6443,
		RemoteIPPrefix: "127.0.0.1/8"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if rule.Protocol != "tcp" || rule.RemoteIPPrefix != "127.0.0.1/8" || rule.PortRangeMin != 6443 {
		t.Errorf("rule = %+v", rule)
	}
	var normalized struct {
		Rule struct {
			Normalized string `json:"normalized_cidr"`
		} `json:"security_group_rule"`
	}
	if err := rules.Get(ctx, nc, rule.ID).ExtractInto(&normalized); err != nil || normalized.Rule.Normalized != "127.0.0.0/8" {
		t.Errorf("normalized_cidr = %+v, %v", normalized, err)
	}
	for _, c := range []struct {
		name   string
		opts   rules.CreateOpts
		status int
		typ    string
	}{
		{"duplicate by number", rules.CreateOpts{SecGroupID: web.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4,
			Protocol: "6", PortRangeMin: 6443, PortRangeMax: 6443, RemoteIPPrefix: "127.0.0.1/8"}, http.StatusConflict, "SecurityGroupRuleExists"},
		{"min above max", rules.CreateOpts{SecGroupID: web.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4,
			Protocol: rules.ProtocolUDP, PortRangeMin: 90, PortRangeMax: 80}, http.StatusBadRequest, "SecurityGroupInvalidPortRange"},
		{"ports without protocol", rules.CreateOpts{SecGroupID: web.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4,
			PortRangeMin: 80, PortRangeMax: 80}, http.StatusBadRequest, "SecurityGroupProtocolRequiredWithPorts"},
		{"two remotes", rules.CreateOpts{SecGroupID: web.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4,
			RemoteIPPrefix: "127.0.0.0/8", RemoteGroupID: web.ID}, http.StatusBadRequest, "SecurityGroupMultipleRemoteEntites"},
		{"ethertype against prefix", rules.CreateOpts{SecGroupID: web.ID, Direction: rules.DirIngress, EtherType: rules.EtherType6,
			RemoteIPPrefix: "127.0.0.0/8"}, http.StatusBadRequest, "SecurityGroupRuleParameterConflict"},
		{"unknown group", rules.CreateOpts{SecGroupID: "00000000-0000-4000-8000-000000000000", Direction: rules.DirEgress,
			EtherType: rules.EtherType4}, http.StatusNotFound, "SecurityGroupNotFound"},
	} {
		_, err := rules.Create(ctx, nc, c.opts).Extract()
		msg := neutronErr(t, c.name, err, c.status, c.typ)
		if c.typ == "SecurityGroupRuleExists" && msg != "Security group rule already exists. Rule id is "+rule.ID+"." {
			t.Errorf("%s: message %q", c.name, msg)
		}
	}

	// Ports: one with allowed address pairs and the web group, one with
	// the project's default group.
	vip := "127.10.0.250"
	p1, err := ports.Create(ctx, nc, ports.CreateOpts{NetworkID: top.net.ID, Name: "cp-1",
		SecurityGroups:      &[]string{web.ID},
		AllowedAddressPairs: []ports.AddressPair{{IPAddress: vip}},
		FixedIPs:            []ports.IP{{SubnetID: top.sub.ID, IPAddress: "127.10.0.11"}}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if p1.Status != "DOWN" || !strings.HasPrefix(p1.MACAddress, "fa:16:3e:") || p1.FixedIPs[0].IPAddress != "127.10.0.11" ||
		len(p1.AllowedAddressPairs) != 1 || p1.AllowedAddressPairs[0].MACAddress != p1.MACAddress ||
		!slices.Equal(p1.SecurityGroups, []string{web.ID}) {
		t.Errorf("port = %+v", p1)
	}
	_, err = ports.Create(ctx, nc, ports.CreateOpts{NetworkID: top.net.ID,
		FixedIPs: []ports.IP{{SubnetID: top.sub.ID, IPAddress: "127.10.0.11"}}}).Extract()
	neutronErr(t, "taken address", err, http.StatusConflict, "IpAddressAlreadyAllocated")
	p2, err := ports.Create(ctx, nc, ports.CreateOpts{NetworkID: top.net.ID, Name: "worker-1"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	dpages, err := groups.List(nc, groups.ListOpts{Name: "default"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defaults, _ := groups.ExtractGroups(dpages)
	if len(defaults) != 1 || len(defaults[0].Rules) != 4 || !slices.Equal(p2.SecurityGroups, []string{defaults[0].ID}) {
		t.Fatalf("default group %+v, port groups %v", defaults, p2.SecurityGroups)
	}
	if a := p2.FixedIPs[0].IPAddress; !inRange(a, "127.10.0.3", "127.10.0.254") || a == "127.10.0.11" {
		t.Errorf("allocated %s", a)
	}
	err = groups.Delete(ctx, nc, web.ID).ExtractErr()
	neutronErr(t, "delete group in use", err, http.StatusConflict, "SecurityGroupInUse")

	// Nova binds the port.
	srv.mu.Lock()
	addrs, mac, err := srv.bindPort(p1.ID, "server-1", "nova")
	srv.mu.Unlock()
	if err != nil || len(addrs) != 1 || addrs[0].String() != "127.10.0.11" || mac != p1.MACAddress {
		t.Fatalf("bindPort = %v %s %v", addrs, mac, err)
	}
	srv.mu.Lock()
	_, _, err = srv.bindPort(p1.ID, "server-2", "nova")
	srv.mu.Unlock()
	if !errors.Is(err, errPortInUse) {
		t.Errorf("binding a bound port: %v", err)
	}
	if got, _ := ports.Get(ctx, nc, p1.ID).Extract(); got.Status != "ACTIVE" || got.DeviceOwner != "compute:nova" || got.DeviceID != "server-1" {
		t.Errorf("bound port = %+v", got)
	}

	// Updating pairs and groups.
	up, err := ports.Update(ctx, nc, p1.ID, ports.UpdateOpts{
		AllowedAddressPairs: &[]ports.AddressPair{{IPAddress: "127.10.0.240/29"}, {IPAddress: vip, MACAddress: "fa:16:3e:00:00:01"}},
		SecurityGroups:      &[]string{web.ID, defaults[0].ID}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if len(up.AllowedAddressPairs) != 2 || len(up.SecurityGroups) != 2 || up.RevisionNumber <= p1.RevisionNumber {
		t.Errorf("updated port = %+v", up)
	}

	// In-use deletes.
	err = subnets.Delete(ctx, nc, top.sub.ID).ExtractErr()
	neutronErr(t, "delete subnet", err, http.StatusConflict, "SubnetInUse")
	err = networks.Delete(ctx, nc, top.net.ID).ExtractErr()
	if msg := neutronErr(t, "delete network", err, http.StatusConflict, "NetworkInUse"); !strings.Contains(msg, p1.ID) {
		t.Errorf("NetworkInUse message %q", msg)
	}

	// Tear down in the order a client must.
	srv.mu.Lock()
	srv.unbindPorts("server-1")
	srv.mu.Unlock()
	for _, id := range []string{p1.ID, p2.ID} {
		if err := ports.Delete(ctx, nc, id).ExtractErr(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := routers.RemoveInterface(ctx, nc, top.router.ID, routers.RemoveInterfaceOpts{SubnetID: top.sub.ID}).Extract(); err != nil {
		t.Fatal(err)
	}
	if err := routers.Delete(ctx, nc, top.router.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := networks.Delete(ctx, nc, top.net.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	_, err = subnets.Get(ctx, nc, top.sub.ID).Extract()
	neutronErr(t, "subnet after its network", err, http.StatusNotFound, "SubnetNotFound")
	_, err = networks.Get(ctx, nc, top.net.ID).Extract()
	if msg := neutronErr(t, "deleted network", err, http.StatusNotFound, "NetworkNotFound"); msg != "Network "+top.net.ID+" could not be found." {
		t.Errorf("message %q", msg)
	}
	for _, p := range srv.Ports() {
		if p.NetworkID == top.net.ID {
			t.Errorf("port left on the deleted network: %+v", p)
		}
	}
}

// tableRecorder records the floating IP tables the hook is called with.
type tableRecorder struct {
	mu     sync.Mutex
	tables []map[netip.Addr]netip.Addr
}

func (r *tableRecorder) record(t map[netip.Addr]netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tables = append(r.tables, t)
}

func (r *tableRecorder) all() []map[netip.Addr]netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tables)
}

func TestNeutronFloatingIPs(t *testing.T) {
	t.Parallel()
	var rec tableRecorder
	srv := start(t, Options{
		ExternalNetworks: []ExternalNetwork{{Name: "public", CIDR: netip.MustParsePrefix("127.45.0.0/24")}},
		FloatingIPs:      rec.record,
	})
	nc := networkClient(t, srv)
	ctx := t.Context()
	yes := true
	pages, err := networks.List(nc, external.ListOptsExt{ListOptsBuilder: networks.ListOpts{Name: "public"}, External: &yes}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exts, _ := networks.ExtractNetworks(pages)
	if len(exts) != 1 {
		t.Fatalf("external networks %+v", exts)
	}
	ext := exts[0]
	net, err := networks.Create(ctx, nc, networks.CreateOpts{Name: "lab"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	sub, err := subnets.Create(ctx, nc, subnets.CreateOpts{NetworkID: net.ID, CIDR: "127.11.0.0/24", IPVersion: 4}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	p, err := ports.Create(ctx, nc, ports.CreateOpts{NetworkID: net.ID, Name: "cp-1"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	fixed := p.FixedIPs[0].IPAddress

	// Without a router from the subnet to the external network.
	_, err = floatingips.Create(ctx, nc, floatingips.CreateOpts{FloatingNetworkID: ext.ID, PortID: p.ID}).Extract()
	msg := neutronErr(t, "no router", err, http.StatusNotFound, "ExternalGatewayForFloatingIPNotFound")
	if want := "External network " + ext.ID + " is not reachable from subnet " + sub.ID +
		".  Therefore, cannot associate Port " + p.ID + " with a Floating IP."; msg != want {
		t.Errorf("message %q\nwant %q", msg, want)
	}
	rt, err := routers.Create(ctx, nc, routers.CreateOpts{Name: "r", GatewayInfo: &routers.GatewayInfo{NetworkID: ext.ID}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := routers.AddInterface(ctx, nc, rt.ID, routers.AddInterfaceOpts{SubnetID: sub.ID}).Extract(); err != nil {
		t.Fatal(err)
	}

	// Create associated: the answer says DOWN, the floating IP is ACTIVE.
	fip, err := floatingips.Create(ctx, nc, floatingips.CreateOpts{FloatingNetworkID: ext.ID, PortID: p.ID,
		Description: "api"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if fip.Status != "DOWN" || fip.PortID != p.ID || fip.FixedIP != fixed || fip.RouterID != rt.ID ||
		!inRange(fip.FloatingIP, "127.45.0.10", "127.45.0.254") || fip.Description != "api" {
		t.Errorf("created = %+v", fip)
	}
	if got, _ := floatingips.Get(ctx, nc, fip.ID).Extract(); got.Status != "ACTIVE" {
		t.Errorf("status after create = %s", got.Status)
	}
	floating := netip.MustParseAddr(fip.FloatingIP)
	want := map[netip.Addr]netip.Addr{floating: netip.MustParseAddr(fixed)}
	if tables := rec.all(); len(tables) != 1 || !mapsEqual(tables[0], want) {
		t.Errorf("hook tables %v, want [%v]", tables, want)
	}
	if got := srv.FloatingIPTable(); !mapsEqual(got, want) {
		t.Errorf("FloatingIPTable = %v", got)
	}

	// One floating IP per fixed address.
	_, err = floatingips.Create(ctx, nc, floatingips.CreateOpts{FloatingNetworkID: ext.ID, PortID: p.ID}).Extract()
	neutronErr(t, "second floating IP", err, http.StatusConflict, "FloatingIPPortAlreadyAssociated")
	_, err = routers.RemoveInterface(ctx, nc, rt.ID, routers.RemoveInterfaceOpts{SubnetID: sub.ID}).Extract()
	neutronErr(t, "remove interface in use", err, http.StatusConflict, "RouterInterfaceInUseByFloatingIP")

	// Dissociate: the answer still says ACTIVE, then DOWN.
	empty := ""
	upd, err := floatingips.Update(ctx, nc, fip.ID, floatingips.UpdateOpts{PortID: &empty}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if upd.PortID != "" || upd.FixedIP != "" || upd.RouterID != "" || upd.Status != "ACTIVE" {
		t.Errorf("dissociated = %+v", upd)
	}
	if got, _ := floatingips.Get(ctx, nc, fip.ID).Extract(); got.Status != "DOWN" {
		t.Errorf("status after dissociation = %s", got.Status)
	}
	// Associate again by update, then delete the port: the association goes.
	if _, err := floatingips.Update(ctx, nc, fip.ID, floatingips.UpdateOpts{PortID: &p.ID}).Extract(); err != nil {
		t.Fatal(err)
	}
	lpages, err := floatingips.List(nc, floatingips.ListOpts{PortID: p.ID}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := floatingips.ExtractFloatingIPs(lpages); len(l) != 1 || l[0].ID != fip.ID {
		t.Errorf("list by port = %+v", l)
	}
	if err := ports.Delete(ctx, nc, p.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if got, _ := floatingips.Get(ctx, nc, fip.ID).Extract(); got.PortID != "" || got.Status != "DOWN" {
		t.Errorf("after port delete = %+v", got)
	}
	tables := rec.all()
	if len(tables) != 4 || len(tables[1]) != 0 || !mapsEqual(tables[2], map[netip.Addr]netip.Addr{floating: netip.MustParseAddr(fixed)}) || len(tables[3]) != 0 {
		t.Errorf("hook tables %v", tables)
	}
	if err := floatingips.Delete(ctx, nc, fip.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	_, err = floatingips.Get(ctx, nc, fip.ID).Extract()
	neutronErr(t, "deleted floating IP", err, http.StatusNotFound, "FloatingIPNotFound")
}

func mapsEqual(a, b map[netip.Addr]netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestNeutronTags(t *testing.T) {
	t.Parallel()
	srv := start(t, Options{})
	nc := networkClient(t, srv)
	ctx := t.Context()
	var ids []string
	for _, tags := range [][]string{{"cluster_a", "role_cp"}, {"cluster_a", "role_worker"}, {"cluster_b"}} {
		n, err := networks.Create(ctx, nc, networks.CreateOpts{Name: "n"}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		got, err := attributestags.ReplaceAll(ctx, nc, "networks", n.ID, attributestags.ReplaceAllOpts{Tags: tags}).Extract()
		if err != nil || !slices.Equal(got, tags) {
			t.Fatalf("replace tags = %v, %v", got, err)
		}
		ids = append(ids, n.ID)
	}
	for _, c := range []struct {
		name string
		opts networks.ListOpts
		want []string
	}{
		{"tags all", networks.ListOpts{Tags: "cluster_a,role_cp"}, ids[:1]},
		{"tags one", networks.ListOpts{Tags: "cluster_a"}, ids[:2]},
		{"tags-any", networks.ListOpts{TagsAny: "role_worker,cluster_b"}, ids[1:]},
		{"not-tags", networks.ListOpts{Name: "n", NotTags: "cluster_a"}, ids[2:]},
		{"id", networks.ListOpts{ID: ids[1]}, ids[1:2]},
	} {
		pages, err := networks.List(nc, c.opts).AllPages(ctx)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		l, _ := networks.ExtractNetworks(pages)
		var got []string
		for _, n := range l {
			got = append(got, n.ID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}

	if err := attributestags.Add(ctx, nc, "networks", ids[2], "zeta").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if ok, err := attributestags.Confirm(ctx, nc, "networks", ids[2], "zeta").Extract(); err != nil || !ok {
		t.Errorf("confirm = %v, %v", ok, err)
	}
	if got, err := attributestags.List(ctx, nc, "networks", ids[2]).Extract(); err != nil || !slices.Equal(got, []string{"cluster_b", "zeta"}) {
		t.Errorf("list = %v, %v", got, err)
	}
	if err := attributestags.Delete(ctx, nc, "networks", ids[2], "zeta").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	err := attributestags.Delete(ctx, nc, "networks", ids[2], "zeta").ExtractErr()
	neutronErr(t, "delete missing tag", err, http.StatusNotFound, "TagNotFound")
	if err := attributestags.DeleteAll(ctx, nc, "networks", ids[2]).ExtractErr(); err != nil {
		t.Fatal(err)
	}

	// Tags on the other resources; security groups by their dashed path.
	g, err := groups.Create(ctx, nc, groups.CreateOpts{Name: "g"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attributestags.ReplaceAll(ctx, nc, "security-groups", g.ID, attributestags.ReplaceAllOpts{Tags: []string{"x"}}).Extract(); err != nil {
		t.Fatal(err)
	}
	pages, err := groups.List(nc, groups.ListOpts{Tags: "x"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := groups.ExtractGroups(pages); len(l) != 1 || l[0].ID != g.ID || !slices.Equal(l[0].Tags, []string{"x"}) {
		t.Errorf("groups tagged x = %+v", l)
	}
	_, err = attributestags.List(ctx, nc, "ports", "00000000-0000-4000-8000-000000000000").Extract()
	neutronErr(t, "tags of a missing port", err, http.StatusNotFound, "TagResourceNotFound")

	// An unknown filter is refused (filter-validation).
	_, err = ports.List(nc, ports.ListOpts{Status: "ACTIVE"}).AllPages(ctx)
	if err != nil {
		t.Errorf("status filter: %v", err)
	}
	resp, err := nc.Request(ctx, http.MethodGet, nc.ResourceBase+"networks?colour=red", &gophercloud.RequestOpts{})
	if resp != nil {
		_ = resp.Body.Close()
	}
	neutronErr(t, "unknown filter", err, http.StatusBadRequest, "HTTPBadRequest")
}

func TestNeutronNeedsToken(t *testing.T) {
	t.Parallel()
	srv := start(t, Options{})
	hc := httpClient(srv)
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/network/", http.StatusOK},
		{http.MethodGet, "/network/v2.0/networks", http.StatusUnauthorized},
		{http.MethodPost, "/network/v2.0/ports", http.StatusUnauthorized},
		{http.MethodDelete, "/network/v2.0/floatingips/x", http.StatusUnauthorized},
		{http.MethodGet, "/network/v2.0/networks/x/tags", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest(c.method, srv.URL()+c.path, strings.NewReader("{}"))
		req.Header.Set("X-Auth-Token", "bogus")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
	log := srv.Log()
	if len(log) != 5 || log[0].Name != "network.versions" || log[1].Name != "network.network.list" ||
		log[2].Name != "network.port.create" || log[3].Name != "network.floatingip.delete" || log[4].Name != "network.tag.list" {
		t.Errorf("log = %+v", log)
	}
}

// TestMetadataReachableFollowsEgressRules: a guest reaches the metadata
// service only through an egress rule that covers 169.254.169.254 on TCP
// 80 (a new group's default egress rules do), or without port security.
func TestMetadataReachableFollowsEgressRules(t *testing.T) {
	t.Parallel()
	srv := start(t, Options{})
	nc := networkClient(t, srv)
	top := buildTopology(t, nc, "10.61.0.0/24")
	g, err := groups.Create(t.Context(), nc, groups.CreateOpts{Name: "meta"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	port, err := ports.Create(t.Context(), nc, ports.CreateOpts{NetworkID: top.net.ID, SecurityGroups: &[]string{g.ID}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	reachable := func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.metadataReachable(port.ID)
	}
	if !reachable() {
		t.Fatal("a new group's default egress rules do not reach the metadata service")
	}
	for _, r := range g.Rules {
		if err := rules.Delete(t.Context(), nc, r.ID).ExtractErr(); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		rule rules.CreateOpts
		want bool
	}{
		{rules.CreateOpts{Direction: "egress", EtherType: "IPv4", RemoteIPPrefix: "0.0.0.0/1"}, false},
		{rules.CreateOpts{Direction: "egress", EtherType: "IPv4", Protocol: "udp", RemoteIPPrefix: "128.0.0.0/1"}, false},
		{rules.CreateOpts{Direction: "egress", EtherType: "IPv4", Protocol: "tcp", PortRangeMin: 443, PortRangeMax: 443, RemoteIPPrefix: "169.254.0.0/16"}, false},
		{rules.CreateOpts{Direction: "egress", EtherType: "IPv6"}, false},
		{rules.CreateOpts{Direction: "ingress", EtherType: "IPv4"}, false},
		{rules.CreateOpts{Direction: "egress", EtherType: "IPv4", Protocol: "tcp", PortRangeMin: 1, PortRangeMax: 1024, RemoteIPPrefix: "169.254.169.254/32"}, true},
	}
	for _, st := range steps {
		st.rule.SecGroupID = g.ID
		if _, err := rules.Create(t.Context(), nc, st.rule).Extract(); err != nil {
			t.Fatal(err)
		}
		if got := reachable(); got != st.want {
			t.Fatalf("after %+v: reachable %v, want %v", st.rule, got, st.want)
		}
	}
}
