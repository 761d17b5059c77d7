package openstack

import (
	"errors"
	"net/netip"
)

// errNetworkNotFound is what allocatePort answers for a network that does
// not exist.
var errNetworkNotFound = errors.New("network not found")

// networkNameOfPort is the name of the network a port is on, the key of
// the server's "addresses"; "" when unknown. The caller holds s.mu.
func (s *Server) networkNameOfPort(portID string) string {
	if s.net == nil {
		return ""
	}
	p, ok := s.net.ports[portID]
	if !ok {
		return ""
	}
	if n, ok := s.net.networks[p.networkID]; ok {
		return n.name
	}
	return ""
}

// metadataReachable reports whether a port's guest may reach the metadata
// service (169.254.169.254, TCP 80): its port security is off, or one of
// its security groups has an egress IPv4 rule that covers that address,
// protocol and port (Neutron's security groups only allow; a port without
// a matching egress rule drops the traffic). An unknown port: false. The
// caller holds s.mu.
func (s *Server) metadataReachable(portID string) bool {
	if s.net == nil {
		return false
	}
	p, ok := s.net.ports[portID]
	if !ok {
		return false
	}
	if !p.portSecurity {
		return true
	}
	meta := netip.MustParseAddr("169.254.169.254")
	for _, r := range s.net.rules {
		if r.direction != "egress" || r.ethertype != "IPv4" || r.remoteGroup != nil || !contains(p.groups, r.groupID) {
			continue
		}
		if r.protocol != nil && *r.protocol != "tcp" && *r.protocol != "6" {
			continue
		}
		if r.portMin != nil && (*r.portMin > 80 || (r.portMax != nil && *r.portMax < 80)) {
			continue
		}
		if r.remotePrefix != nil {
			pfx, err := netip.ParsePrefix(*r.remotePrefix)
			if err != nil {
				a, aerr := netip.ParseAddr(*r.remotePrefix)
				if aerr != nil {
					continue
				}
				pfx = netip.PrefixFrom(a, a.BitLen())
			}
			if !pfx.Contains(meta) {
				continue
			}
		}
		return true
	}
	return false
}

// allocatePort (not emulated: servers here boot on ports the client
// made, which is what the provider does) would create a port on a network for a server, bound to it as
// bindPort binds one, when a server is created with networks: [{"uuid"}];
// it returns errNetworkNotFound for an unknown network. The caller holds
// s.mu.
func (s *Server) allocatePort(networkID, serverID, zone string) (portID string, addrs []netip.Addr, mac string, err error) {
	return "", nil, "", errNetworkNotFound
}

// releasePort deletes a port allocatePort created, as Nova deletes the
// ports it made when it deletes the server. The caller holds s.mu.
func (s *Server) releasePort(portID string) {}
