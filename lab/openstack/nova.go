package openstack

// computeRoutes registers Nova's operations under /compute/v2.1.
func (s *Server) computeRoutes() {}
