// Package openstack plans a cluster's OpenStack resources: the network,
// router, reserved VIP ports with floating IPs, security group and rules,
// machine ports and servers. It plans only: observing and changing a real
// OpenStack (gophercloud) is not implemented yet, so Observe and Apply
// fail and only plan --offline uses it.
package openstack
