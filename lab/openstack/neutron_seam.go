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
