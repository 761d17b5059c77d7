package openstack

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// metadataIPv4 is the instance metadata service's address.
var metadataIPv4 = netip.MustParsePrefix("169.254.169.254/32")

// rule is one security group rule as a tuple: two rules with the same
// tuple are the same rule.
type rule struct {
	// Direction is "ingress" or "egress"; EtherType "IPv4" or "IPv6".
	Direction, EtherType string
	// Protocol is "tcp", "udp", "icmp", or "" for any.
	Protocol string
	// PortMin and PortMax bound the destination ports; 0 for any.
	PortMin, PortMax int
	// RemoteIP is the source (ingress) or destination (egress) network,
	// "" for any.
	RemoteIP string
	// RemoteGroup is set for a rule whose remote is the group itself.
	RemoteGroup bool
}

// String is the rule as the plan shows it.
func (r rule) String() string {
	var b strings.Builder
	b.WriteString(r.Direction + " " + r.EtherType)
	proto := r.Protocol
	if proto == "" {
		proto = "any"
	}
	b.WriteString(" " + proto)
	switch {
	case r.PortMin != 0 && r.PortMin == r.PortMax:
		b.WriteString(" port " + strconv.Itoa(r.PortMin))
	case r.PortMin != 0:
		fmt.Fprintf(&b, " ports %d-%d", r.PortMin, r.PortMax)
	}
	peer := " from "
	if r.Direction == "egress" {
		peer = " to "
	}
	switch {
	case r.RemoteGroup:
		b.WriteString(peer + "members of the group")
	case r.RemoteIP != "":
		b.WriteString(peer + r.RemoteIP)
	default:
		b.WriteString(peer + "anywhere")
	}
	return b.String()
}

// ruleOf reads a rule Neutron returned as a tuple; group is the ID of the
// group it belongs to.
func ruleOf(r rules.SecGroupRule, group string) rule {
	out := rule{Direction: r.Direction, EtherType: r.EtherType, Protocol: r.Protocol,
		PortMin: r.PortRangeMin, PortMax: r.PortRangeMax, RemoteIP: r.RemoteIPPrefix}
	switch out.Protocol {
	case "6":
		out.Protocol = "tcp"
	case "17":
		out.Protocol = "udp"
	case "1":
		out.Protocol = "icmp"
	case "any":
		out.Protocol = ""
	}
	if out.RemoteIP == "0.0.0.0/0" || out.RemoteIP == "::/0" {
		out.RemoteIP = ""
	}
	switch {
	case r.RemoteGroupID != "":
		out.RemoteGroup = r.RemoteGroupID == group
		if !out.RemoteGroup {
			out.RemoteIP = "group " + r.RemoteGroupID
		}
	case r.RemoteAddressGroupID != "":
		// Never one of the rules the cluster wants: it is stale.
		out.RemoteIP = "address group " + r.RemoteAddressGroupID
	}
	return out
}

// securityRules is the cluster security group's rule set, from the
// security section (cluster-yaml-reference §5):
//   - ICMP, TCP and UDP from members of the group;
//   - TCP and UDP from each metal L2 by CIDR;
//   - per security rule, TCP on its port from each host CIDR (0.0.0.0/0 as
//     a rule without a remote prefix);
//   - TCP 80 and 443 from anywhere while no rule claims them;
//   - egress: everything, or (openstack.metadata false, the default)
//     every IPv4 destination except the metadata service, written as the
//     prefixes that cover the rest of the address space, since a security
//     group can only allow; no IPv6 egress then, as the cluster's ports
//     have IPv4 addresses only and the metadata service also answers on
//     fe80::a9fe:a9fe.
func securityRules(c *spec.Cluster) []rule {
	var out []rule
	add := func(r rule) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	for _, proto := range []string{"icmp", "tcp", "udp"} {
		add(rule{Direction: "ingress", EtherType: "IPv4", Protocol: proto, RemoteGroup: true})
	}
	for _, l2 := range metalL2s(c) {
		for _, proto := range []string{"tcp", "udp"} {
			add(rule{Direction: "ingress", EtherType: "IPv4", Protocol: proto, RemoteIP: l2.String()})
		}
	}
	for _, sr := range c.Security {
		for _, h := range sr.Hosts {
			remote := h.CIDR.Masked().String()
			if h.CIDR.Bits() == 0 {
				remote = ""
			}
			add(rule{Direction: "ingress", EtherType: "IPv4", Protocol: "tcp", PortMin: sr.Port, PortMax: sr.Port, RemoteIP: remote})
		}
	}
	for _, port := range c.OpenPorts() {
		add(rule{Direction: "ingress", EtherType: "IPv4", Protocol: "tcp", PortMin: port, PortMax: port})
	}
	if c.OpenStack != nil && c.OpenStack.Metadata {
		add(rule{Direction: "egress", EtherType: "IPv4"})
		add(rule{Direction: "egress", EtherType: "IPv6"})
		return out
	}
	for _, pfx := range complement(metadataIPv4) {
		add(rule{Direction: "egress", EtherType: "IPv4", RemoteIP: pfx.String()})
	}
	return out
}

// metalL2s are the distinct L2s of the metal servers.
func metalL2s(c *spec.Cluster) []netip.Prefix {
	var out []netip.Prefix
	for _, g := range c.Metal {
		for _, s := range g.Servers {
			if pfx := s.Network.CIDR.Masked(); s.Network.CIDR.IsValid() && pfx != c.Network.Cluster.CIDR.Masked() && !slices.Contains(out, pfx) {
				out = append(out, pfx)
			}
		}
	}
	return out
}

// complement returns the prefixes that together cover every address of
// the family except those of pfx: for each bit of pfx, the sibling of the
// prefix one bit shorter, widest first.
func complement(pfx netip.Prefix) []netip.Prefix {
	addr := pfx.Masked().Addr()
	raw := addr.AsSlice()
	out := make([]netip.Prefix, 0, pfx.Bits())
	for bits := 1; bits <= pfx.Bits(); bits++ {
		flipped := slices.Clone(raw)
		flipped[(bits-1)/8] ^= 0x80 >> ((bits - 1) % 8)
		a, _ := netip.AddrFromSlice(flipped)
		out = append(out, netip.PrefixFrom(a, bits).Masked())
	}
	return out
}

// createOpts is the Neutron request that creates r in group.
func (r rule) createOpts(group string) rules.CreateOpts {
	o := rules.CreateOpts{Direction: rules.RuleDirection(r.Direction), EtherType: rules.RuleEtherType(r.EtherType),
		SecGroupID: group, Protocol: rules.RuleProtocol(r.Protocol), PortRangeMin: r.PortMin, PortRangeMax: r.PortMax,
		RemoteIPPrefix: r.RemoteIP, Description: "taloscluster"}
	if r.RemoteGroup {
		o.RemoteGroupID = group
	}
	return o
}
