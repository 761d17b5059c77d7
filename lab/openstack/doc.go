// Package openstack is an emulator of the subset of the OpenStack APIs the
// provider uses, served the way gophercloud calls and parses them: Keystone v3
// (the Identity service: application-credential authentication, the service
// catalog, the version documents, and validation of the X-Auth-Token the
// other services require), Nova (Compute API v2.1 with microversions up to
// 2.100: flavors, availability zones, servers booted from volume, their
// actions and tags) and Glance (Image API v2: images, data upload and the
// glance-direct import). Servers become simulated machines through
// Options.Machines.
//
// A Server listens on a loopback address over HTTPS with a certificate from
// the lab CA (lab/labca). Every service lives under its own path prefix of the
// one base URL, as in a DevStack deployment: /identity, /compute/v2.1,
// /network and /image. Each request is recorded in a log tests assert on, and
// an operation can be made to fail with a chosen status.
//
// FIDELITY.md, section "OpenStack (lab/openstack)", says where each answer's
// shape comes from.
package openstack
