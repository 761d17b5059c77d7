package openstack

// imageRoutes registers Glance's operations under /image.
func (s *Server) imageRoutes() {}
