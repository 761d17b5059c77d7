package openstack

import (
	"fmt"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
)

// Neutron takes tags in the body of a create (the tag-creation
// extension), so a resource never exists without its ownership tags. The
// types below add them to gophercloud's create requests.

func tagged(m map[string]any, err error, key string, tags []string) (map[string]any, error) {
	if err != nil {
		return nil, err
	}
	body, ok := m[key].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("building the %s request: no %q object", key, key)
	}
	body["tags"] = tags
	return m, nil
}

type taggedNetwork struct {
	networks.CreateOpts
	tags []string
}

func (o taggedNetwork) ToNetworkCreateMap() (map[string]any, error) {
	m, err := o.CreateOpts.ToNetworkCreateMap()
	return tagged(m, err, "network", o.tags)
}

type taggedSubnet struct {
	subnets.CreateOpts
	tags []string
}

func (o taggedSubnet) ToSubnetCreateMap() (map[string]any, error) {
	m, err := o.CreateOpts.ToSubnetCreateMap()
	return tagged(m, err, "subnet", o.tags)
}

type taggedRouter struct {
	routers.CreateOpts
	tags []string
}

func (o taggedRouter) ToRouterCreateMap() (map[string]any, error) {
	m, err := o.CreateOpts.ToRouterCreateMap()
	return tagged(m, err, "router", o.tags)
}

type taggedGroup struct {
	groups.CreateOpts
	tags []string
}

func (o taggedGroup) ToSecGroupCreateMap() (map[string]any, error) {
	m, err := o.CreateOpts.ToSecGroupCreateMap()
	return tagged(m, err, "security_group", o.tags)
}

type taggedPort struct {
	ports.CreateOpts
	tags []string
}

func (o taggedPort) ToPortCreateMap() (map[string]any, error) {
	m, err := o.CreateOpts.ToPortCreateMap()
	return tagged(m, err, "port", o.tags)
}

type taggedFloatingIP struct {
	floatingips.CreateOpts
	tags []string
}

func (o taggedFloatingIP) ToFloatingIPCreateMap() (map[string]any, error) {
	m, err := o.CreateOpts.ToFloatingIPCreateMap()
	return tagged(m, err, "floatingip", o.tags)
}
