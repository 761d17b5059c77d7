// Package openstack runs a cluster's OpenStack resources through
// gophercloud: the boot image in Glance, the network, subnet and router to
// the external network, the reserved kubeapi and ingress ports whose fixed
// addresses are the VIPs (with a floating IP each), the security group and
// its rules, one port per machine, and the servers, booted from a volume
// with the machine config as user data.
//
// Everything it creates carries the tags managed-by=taloscluster and
// cluster=<name> (machines and their ports also role= and pool=); it
// changes nothing it does not own. Servers are create-only: a change of
// flavor, disk or availability zone is refused.
package openstack
