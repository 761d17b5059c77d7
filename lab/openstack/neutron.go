package openstack

import (
	"errors"
	"net/netip"
)

// networkRoutes registers Neutron's operations under /network.
func (s *Server) networkRoutes() {}

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
	return nil, "", errPortNotFound
}

// unbindPorts detaches every port bound to the server (device_id and
// device_owner cleared, status DOWN), as Nova does when it deletes a
// server whose ports the user created. The caller holds s.mu.
func (s *Server) unbindPorts(serverID string) {}
