package spec_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Conformance of the metal section and the plugin sections (rancher, argocd,
// charts) with the Python tool: one row per case of its test suite that
// loads or validates a configuration, with the verdict it expects. The
// inputs are restated on this package's bases; the plugins' validate hooks
// count as load-time errors here.

type (
	pcObj  = map[string]any
	pcList = []any
)

type pcVerdict string

const (
	pcValid   pcVerdict = "valid"
	pcWarning pcVerdict = "warning-only"
	pcError   pcVerdict = "error"
)

type pcCase struct {
	name  string
	tree  tree
	files map[string]string
	want  pcVerdict
	// key must be part of the key of one of the errors (or, for a
	// warning-only verdict, of the warnings).
	key string
	// text must be part of that same problem's text.
	text string
	// never must not appear in any problem (a secret value).
	never string
}

// pcOpenStack is an OpenStack cluster on 192.168.0.0/21, the network the
// Python metal cases are written against; gateway sets its gateway.
func pcOpenStack(gateway bool) tree {
	t := openstackBase().set("network.cluster.cidr", "192.168.0.0/21")
	if gateway {
		t.set("network.cluster.gateway", "192.168.0.1")
	}
	return t
}

// pcProxmox is a Proxmox bridge cluster on the given L2.
func pcProxmox(cidr, gateway, vip string) tree {
	t := proxmoxBase().set("network.cluster", pcObj{"cidr": cidr, "kubeapi_vip": vip})
	if gateway != "" {
		t.set("network.cluster.gateway", gateway)
	}
	return t
}

// pcExternal adds a routed external network to a Proxmox cluster.
func pcExternal(t tree, ext pcObj) tree {
	return t.set("network.external", ext).set("proxmox.network.external", pcObj{"bridge": "br-ext"})
}

// pcMetal sets the metal section of t.
func pcMetal(t tree, groups pcObj) tree { return t.set("metal", groups) }

// pcRack is a worker group on the cluster L2 with one cluster interface and
// one server srv01 at ip, plus extra group keys.
func pcRack(ip string, extra pcObj) pcObj {
	g := pcObj{
		"role": "worker", "disk": "/dev/sda",
		"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
		"servers":    pcObj{"srv01": pcObj{"interfaces": pcObj{"enp1s0f0": pcObj{"ip": ip}}}},
	}
	for k, v := range extra {
		g[k] = v
	}
	return g
}

// pcRedfish is a redfish group whose credentials sit on the group and whose
// server brings its own BMC address.
func pcRedfish(srv pcObj) pcObj {
	return pcObj{
		"role": "worker", "redfish": true, "disk": "/dev/sda",
		"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
		"servers":    pcObj{"srv01": srv},
	}
}

// pcMetalGroups is one redfish group per role, the shape of a mixed cluster.
func pcMetalGroups(ip1, ip2 string) pcObj {
	group := func(role, ip, srv, bmc string) pcObj {
		return pcObj{
			"role": role, "redfish": true, "disk": "/dev/sda",
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": "pxe"}, "enp2s0f0": pcObj{"role": "cluster", "ip": ip}},
			"bmc":        pcObj{"username": "root", "password": "secret"},
			"servers":    pcObj{srv: pcObj{"bmc": pcObj{"ip": bmc}}},
		}
	}
	return pcObj{"cp": group("controlplane", ip1, "srv01-cp", "192.0.2.10"), "worker": group("worker", ip2, "srv01-worker", "192.0.2.11")}
}

// pcPhoenix is the csfarm machine shape: a PXE link and one NIC carrying
// both the cluster and the external role, on a jumbo L2.
func pcPhoenix() pcObj {
	return pcObj{
		"role": "worker", "disk": "/dev/sda",
		"network": pcObj{"cidr": "172.29.21.0/24", "gateway": "172.29.21.1", "mtu": 9000},
		"interfaces": pcObj{
			"enp1s0f0": pcObj{"role": "pxe"},
			"enp2s0f0": pcObj{"role": pcList{"cluster", "external"}, "dns": pcList{"198.51.100.53"}},
		},
		"servers": pcObj{"rp001": pcObj{"interfaces": pcObj{"enp2s0f0": pcObj{"ip": "172.29.21.5/24"}}}},
	}
}

var pcTalosExternal = pcObj{"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "vlan": 1691, "anchor_cidr": "169.254.32.0/20"}

// pcTalos is the Proxmox cluster the Python metal machine-config cases use:
// a jumbo 172.29.21.0/24 L2 with KubeSpan on, plus an external network when
// ext is set.
func pcTalos(metal pcObj, ext pcObj) tree {
	t := pcProxmox("172.29.21.0/24", "172.29.21.1", "172.29.21.200").set("network.cluster.mtu", 9000).set("talos.kubespan", true)
	if ext != nil {
		pcExternal(t, ext)
	}
	return pcMetal(t, pcObj{"phoenix": metal})
}

// pcCommandsGroup is the redfish group the metal command cases drive.
func pcCommandsGroup(servers pcObj, extra pcObj) pcObj {
	g := pcObj{
		"role": "worker", "redfish": true, "disk": "/dev/sda",
		"network":    pcObj{"cidr": "172.29.21.0/24", "gateway": "172.29.21.1"},
		"interfaces": pcObj{"enp1s0f0": pcObj{"role": "pxe"}, "enp2s0f0": pcObj{"role": "cluster"}},
		"bmc":        pcObj{"username": "root", "password": "hunter2"},
		"servers":    servers,
	}
	for k, v := range extra {
		g[k] = v
	}
	return g
}

func pcCommands(group pcObj) tree {
	return pcMetal(pcProxmox("172.29.21.0/24", "172.29.21.1", "172.29.21.200"), pcObj{"phoenix": group})
}

func pcCommandsServer() pcObj {
	return pcObj{"rp001": pcObj{"bmc": pcObj{"ip": "198.51.100.10"}, "interfaces": pcObj{"enp2s0f0": pcObj{"ip": "172.29.21.5/24"}}}}
}

// pcSDN is a managed-SDN cluster with one worker pool and the metal section.
func pcSDN(metal pcObj) tree {
	t := sdnBase().set("workers", pcObj{"worker": pcObj{"count": 1, "cores": 4, "memory": 8, "disk": 40}})
	return pcMetal(t, metal)
}

// pcSchema is a group without servers on the OpenStack cluster, for the
// schema cases; extra replaces or adds group keys.
func pcSchema(extra pcObj) tree {
	g := pcObj{"role": "worker", "disk": "/dev/sda"}
	for k, v := range extra {
		if v == nil {
			delete(g, k)
			continue
		}
		g[k] = v
	}
	return pcMetal(pcOpenStack(true), pcObj{"worker": g})
}

func pcMetalCases() []pcCase {
	ip := func(a string) pcObj { return pcObj{"interfaces": pcObj{"enp1s0f0": pcObj{"ip": a}}} }
	cabling := func(g pcObj) tree { return pcMetal(pcOpenStack(true), pcObj{"rack1": g}) }
	other := func(t tree) tree { return t.set("talos.kubespan", true) }
	shared := func(srvIPs ...string) tree {
		servers := pcObj{}
		for i, a := range srvIPs {
			servers[[]string{"srv01", "srv02"}[i]] = pcObj{"interfaces": pcObj{"enp2s0f0": pcObj{"ip": a}}}
		}
		return pcMetal(pcProxmox("198.51.100.0/24", "198.51.100.1", "198.51.100.200"), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda",
			"network":    pcObj{"cidr": "198.51.100.0/24", "gateway": "198.51.100.1"},
			"interfaces": pcObj{"enp2s0f0": pcObj{"role": "cluster"}},
			"servers":    servers,
		}})
	}
	badBMC := func(bmc pcObj) tree {
		return pcMetal(pcOpenStack(true), pcObj{"rack1": pcRedfish(pcObj{"bmc": bmc, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.5/21"}}})})
	}
	schemeCase := func(scheme any) tree {
		return badBMC(pcObj{"ip": "203.0.113.5", "username": "root", "password": "secret", "scheme": scheme})
	}
	tlsCase := func(tv any) tree {
		return badBMC(pcObj{"ip": "203.0.113.5", "username": "root", "password": "secret", "tls_verify": tv})
	}
	creds := func(bmc pcObj) tree {
		return pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{"role": "worker", "redfish": true, "disk": "/dev/sda", "servers": pcObj{"srv01": pcObj{"bmc": bmc}}}})
	}
	bmcCreds := "metal:\n  rack1:\n    bmc:\n      username: root\n      password: secret\n"
	iface := func(f pcObj) tree { return pcSchema(pcObj{"interfaces": pcObj{"enp1s0f0": f}}) }
	talosCabling := func(ifs pcObj, ext pcObj) tree {
		return pcTalos(pcObj{"role": "worker", "disk": "/dev/sda", "interfaces": ifs, "servers": pcObj{"rp001": pcObj{}}}, ext)
	}
	cluster := func(role string) pcObj {
		return pcObj{"role": role, "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
			"servers": pcObj{"rp001": pcObj{"interfaces": pcObj{"enp1s0f0": pcObj{"ip": "172.29.21.5"}}}}}
	}
	otherL2 := func(role string) pcObj {
		return pcObj{"role": role, "disk": "/dev/sda", "network": pcObj{"cidr": "172.29.31.0/24", "gateway": "172.29.31.1"},
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
			"servers":    pcObj{"rp001": pcObj{"interfaces": pcObj{"enp1s0f0": pcObj{"ip": "172.29.31.5/24"}}}}}
	}

	return []pcCase{
		// Metal beside a VM provider.
		{name: "metal groups beside openstack load", tree: pcMetal(pcOpenStack(true), pcObj{
			"cp": pcObj{"role": "controlplane", "disk": "/dev/sda"}, "worker": pcObj{"role": "worker", "disk": "/dev/sda"}}), want: pcValid},
		{name: "metal with no vm provider", tree: pcMetal(pcOpenStack(true), pcObj{"worker": pcRack("192.168.0.5/21", nil)}).del("openstack"), want: pcError, key: "metal"},
		{name: "servers of two groups flatten", tree: pcMetal(pcOpenStack(true), pcObj{
			"cp": pcObj{"role": "controlplane", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "ip": "192.168.0.5/21"}}, "servers": pcObj{"srv01-cp": pcObj{}}},
			"worker": pcObj{"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}}, "servers": pcObj{
				"srv01-worker": ip("192.168.0.6/21"), "srv02-worker": ip("192.168.0.7/21")}},
		}), want: pcValid},
		{name: "metal section that is a list", tree: pcMetal(pcOpenStack(true), nil).set("metal", pcList{}), want: pcError, key: "metal"},
		{name: "metal group that is a string", tree: pcMetal(pcOpenStack(true), pcObj{"cp": "srv01"}), want: pcError, key: "metal.cp"},
		{name: "metal group named by a number", tree: pcOpenStack(true).set("include", pcList{"secrets.yaml", "metal.yaml"}),
			files: map[string]string{"metal.yaml": "metal:\n  1: {}\n"}, want: pcError, key: "metal", text: "group names"},
		{name: "group defaults need no servers", tree: pcMetal(pcOpenStack(true), pcObj{"worker": pcObj{"role": "worker", "disk": "/dev/sda"}}), want: pcValid},

		// KubeSpan for another L2.
		{name: "group on another l2 with kubespan off", tree: pcMetal(pcOpenStack(true).set("talos.kubespan", false), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "198.51.100.0/24", "gateway": "198.51.100.1"}}}), want: pcError, key: "talos.kubespan"},
		{name: "group on another l2 with kubespan unset", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "198.51.100.0/24", "gateway": "198.51.100.1"}}}), want: pcError, key: "talos.kubespan"},
		{name: "server on another l2 with kubespan off", tree: pcMetal(pcOpenStack(false).set("talos.kubespan", false), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "servers": pcObj{"srv01": pcObj{
				"network":    pcObj{"cidr": "198.51.100.0/24", "gateway": "198.51.100.1"},
				"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "ip": "198.51.100.5/24"}}}}}}), want: pcError, key: "talos.kubespan", text: "rack1/srv01"},
		{name: "server on another l2 with kubespan on", tree: pcMetal(other(pcOpenStack(true)), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "servers": pcObj{"srv01": pcObj{
				"network":    pcObj{"cidr": "198.51.100.0/24", "gateway": "198.51.100.1"},
				"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "ip": "198.51.100.5/24"}}}}}}), want: pcValid},
		{name: "groups on the cluster l2 need no kubespan", tree: pcMetal(pcOpenStack(true).set("talos.kubespan", false), pcObj{
			"worker": pcObj{"role": "worker", "disk": "/dev/sda"},
			"same":   pcObj{"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "192.168.0.0/21", "gateway": "192.168.0.1"}}}), want: pcValid},
		{name: "group restating a cluster l2 that holds the vip", tree: pcMetal(pcProxmox("198.51.100.0/24", "198.51.100.1", "198.51.100.200"), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "198.51.100.0/24", "gateway": "198.51.100.1"}}}), want: pcValid},

		// Gateways.
		{name: "group l2 without a gateway", tree: pcMetal(other(pcOpenStack(false)), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "198.51.100.0/24"}}}), want: pcError, key: "metal.rack1.network.gateway"},
		{name: "server l2 without a gateway", tree: pcMetal(other(pcOpenStack(false)), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "198.51.100.0/24", "gateway": "198.51.100.1"},
			"servers": pcObj{"srv01": pcObj{"network": pcObj{"cidr": "192.168.19.0/24"},
				"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "ip": "192.168.19.5/24"}}}}}}), want: pcError, key: "metal.rack1.servers.srv01.network.gateway"},
		{name: "group riding a cluster l2 without a gateway", tree: pcMetal(other(pcOpenStack(false)), pcObj{"rack1": pcObj{"role": "worker", "disk": "/dev/sda"}}),
			want: pcError, key: "network.cluster.gateway", text: "metal.rack1"},
		{name: "group restating the cluster cidr without a gateway", tree: pcMetal(other(pcOpenStack(true)), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "192.168.0.0/21"}}}), want: pcError, key: "metal.rack1.network.gateway"},

		// Cluster addresses.
		{name: "cluster address off the l2", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("10.99.0.5/24", nil)}), want: pcError, key: "interfaces.enp1s0f0.ip"},
		{name: "cluster address with another prefix", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/24", nil)}), want: pcError, key: "interfaces.enp1s0f0.ip"},
		{name: "addresses with surrounding spaces", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{"enp2s0f0": pcObj{"role": "cluster"}},
			"servers": pcObj{"srv01": pcObj{"bmc": pcObj{"ip": " 203.0.113.5"}, "interfaces": pcObj{"enp2s0f0": pcObj{"ip": " 192.168.0.5 "}}}}}}), want: pcValid},
		{name: "cluster address on the vip", tree: shared("198.51.100.5/24", "198.51.100.200/24"), want: pcError, key: "srv02.interfaces.enp2s0f0.ip", text: "kubeapi_vip"},
		{name: "cluster address taken twice", tree: shared("198.51.100.5/24", "198.51.100.5"), want: pcError, key: "srv02.interfaces.enp2s0f0.ip", text: "srv01"},
		{name: "cluster address on the group gateway", tree: pcMetal(other(pcOpenStack(false)), pcObj{"rack1": pcRack("192.168.8.1/21",
			pcObj{"network": pcObj{"cidr": "192.168.8.0/21", "gateway": "192.168.8.1"}})}), want: pcError, key: "interfaces.enp1s0f0.ip", text: "gateway"},
		{name: "bare cluster address on the group gateway", tree: pcMetal(other(pcOpenStack(false)), pcObj{"rack1": pcRack("192.168.8.1",
			pcObj{"network": pcObj{"cidr": "192.168.8.0/21", "gateway": "192.168.8.1"}})}), want: pcError, key: "interfaces.enp1s0f0.ip", text: "gateway"},
		{name: "cluster address on the cluster gateway", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.1/21", nil)}), want: pcError, key: "interfaces.enp1s0f0.ip", text: "gateway"},
		{name: "bare cluster address on the cluster gateway", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.1", nil)}), want: pcError, key: "interfaces.enp1s0f0.ip", text: "gateway"},
		{name: "cluster address on the network address", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.0/21",
			pcObj{"network": pcObj{"cidr": "192.168.0.0/21", "gateway": "192.168.0.254"}})}), want: pcError, key: "interfaces.enp1s0f0.ip", text: "broadcast"},
		{name: "cluster address on the broadcast address", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.7.255",
			pcObj{"network": pcObj{"cidr": "192.168.0.0/21", "gateway": "192.168.0.254"}})}), want: pcError, key: "interfaces.enp1s0f0.ip", text: "broadcast"},
		{name: "cluster address on the shared cluster gateway", tree: pcMetal(pcProxmox("198.51.100.0/24", "198.51.100.1", "198.51.100.200"), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "198.51.100.0/24", "gateway": "198.51.100.254"},
			"interfaces": pcObj{"enp2s0f0": pcObj{"role": "cluster"}},
			"servers":    pcObj{"srv01": pcObj{"interfaces": pcObj{"enp2s0f0": pcObj{"ip": "198.51.100.1/24"}}}}}}), want: pcError, key: "interfaces.enp2s0f0.ip", text: "gateway"},

		// Cabling and BMC facts checked at load.
		{name: "no cluster interface", tree: cabling(pcObj{"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "pxe"}}, "servers": pcObj{"srv01": pcObj{}}}),
			want: pcError, key: "metal.rack1.servers.srv01.interfaces", text: "got none"},
		{name: "two cluster interfaces", tree: cabling(pcObj{"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{
			"enp1s0f0": pcObj{"role": "cluster"}, "enp2s0f0": pcObj{"role": "cluster"}}, "servers": pcObj{"srv01": pcObj{}}}),
			want: pcError, key: "metal.rack1.servers.srv01.interfaces", text: "enp1s0f0, enp2s0f0"},
		{name: "cluster interface without an address", tree: cabling(pcObj{"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}}, "servers": pcObj{"srv01": pcObj{}}}),
			want: pcError, key: "interfaces.enp1s0f0.ip", text: "no static address"},
		{name: "a role listed twice", tree: cabling(pcObj{"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": pcList{"cluster", "cluster"}}}, "servers": pcObj{"srv01": pcObj{}}}),
			want: pcError, key: "interfaces.enp1s0f0.role", text: "must not repeat a role"},
		{name: "external role without an external network", tree: cabling(pcObj{"role": "worker", "disk": "/dev/sda",
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": pcList{"cluster", "external"}}}, "servers": pcObj{"srv01": ip("192.168.0.5/21")}}),
			want: pcError, key: "interfaces.enp1s0f0", text: "no network.external block"},
		{name: "link_name without the external role", tree: cabling(pcObj{"role": "worker", "disk": "/dev/sda",
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "link_name": "ext0"}}, "servers": pcObj{"srv01": ip("192.168.0.5/21")}}),
			want: pcError, key: "interfaces.enp1s0f0.link_name", text: "no external role"},
		{name: "vlan without the external role", tree: cabling(pcObj{"role": "worker", "disk": "/dev/sda",
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "vlan": 21}}, "servers": pcObj{"srv01": ip("192.168.0.5/21")}}),
			want: pcError, key: "interfaces.enp1s0f0.vlan", text: "no external role"},
		{name: "redfish without a bmc address", tree: cabling(pcObj{"role": "worker", "redfish": true, "disk": "/dev/sda",
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}}, "servers": pcObj{"srv01": ip("192.168.0.5/21")}}),
			want: pcError, key: "metal.rack1.servers.srv01.bmc.ip", text: "no bmc.ip"},

		// The API VIP belongs to network.cluster or network.external.
		{name: "group network with a vip", tree: pcSchema(pcObj{"network": pcObj{"cidr": "192.168.0.0/21", "kubeapi_vip": "192.168.0.10"}}), want: pcError, key: "metal.worker.network.kubeapi_vip"},
		{name: "server network with a vip", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "198.51.100.0/24", "gateway": "198.51.100.1"},
			"servers": pcObj{"srv01": pcObj{"network": pcObj{"cidr": "198.51.100.0/24", "kubeapi_vip": "198.51.100.200"},
				"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "ip": "198.51.100.5/24"}}}}}}), want: pcError, key: "metal.rack1.servers.srv01.network.kubeapi_vip"},

		// A restated cluster L2 is the same wire.
		{name: "restated cluster l2 with another mtu", tree: pcMetal(pcOpenStack(false), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "192.168.0.0/21", "gateway": "192.168.0.1", "mtu": 9000}}}), want: pcError, key: "metal.rack1.network.mtu", text: "1500"},
		{name: "restated cluster l2 with another vlan", tree: pcMetal(pcOpenStack(false), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "192.168.0.0/21", "gateway": "192.168.0.1", "vlan": 21}}}), want: pcError, key: "metal.rack1.network.vlan"},

		// Group defaults merged into the servers.
		{name: "group defaults resolve into servers", tree: pcMetal(other(pcOpenStack(false)), pcObj{"rack1": pcObj{
			"role": "worker", "redfish": true, "disk": "/dev/sda",
			"network":    pcObj{"cidr": "198.51.100.0/24", "gateway": "198.51.100.1", "mtu": 9000},
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": "pxe"}, "enp2s0f0": pcObj{"role": "cluster", "dns": pcList{"192.0.2.53"}}},
			"bmc":        pcObj{"username": "root", "password": "secret"},
			"servers": pcObj{
				"srv01": pcObj{"bmc": pcObj{"ip": "203.0.113.5"}, "interfaces": pcObj{"enp2s0f0": pcObj{"ip": "198.51.100.5/24"}}},
				"srv02": pcObj{"bmc": pcObj{"ip": "203.0.113.6"}, "disk": "/dev/nvme0n1", "interfaces": pcObj{"enp2s0f0": pcObj{"ip": "198.51.100.6/24"}}},
			}}}), want: pcValid},
		{name: "boot timeout on the group and a server", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "boot_timeout": 1800, "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
			"servers": pcObj{"srv01": ip("192.168.0.5/21"), "srv02": pcObj{"boot_timeout": 3600, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.6/21"}}}}}}), want: pcValid},
		{name: "boot timeout default", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/21", nil)}), want: pcValid},
		{name: "auto_join default", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/21", nil)}), want: pcValid},
		{name: "auto_join opted out by a server", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "auto_join": true, "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
			"servers": pcObj{"srv01": ip("192.168.0.5/21"), "srv02": pcObj{"auto_join": false, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.6/21"}}}}}}), want: pcValid},
		{name: "auto_join zero", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/21", pcObj{"auto_join": 0})}), want: pcError, key: "metal.rack1.auto_join"},
		{name: "auto_join one", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/21", pcObj{"auto_join": 1})}), want: pcError, key: "metal.rack1.auto_join"},
		{name: "auto_join quoted", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/21", pcObj{"auto_join": "true"})}), want: pcError, key: "metal.rack1.auto_join"},
		{name: "boot timeout zero", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/21", pcObj{"boot_timeout": 0})}), want: pcError, key: "metal.rack1.boot_timeout"},
		{name: "boot timeout negative", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/21", pcObj{"boot_timeout": -60})}), want: pcError, key: "metal.rack1.boot_timeout"},
		{name: "boot timeout boolean", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/21", pcObj{"boot_timeout": true})}), want: pcError, key: "metal.rack1.boot_timeout"},
		{name: "boot timeout with a unit", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/21", pcObj{"boot_timeout": "30m"})}), want: pcError, key: "metal.rack1.boot_timeout"},
		{name: "boot timeout fractional", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRack("192.168.0.5/21", pcObj{"boot_timeout": 1.5})}), want: pcError, key: "metal.rack1.boot_timeout"},

		// Redfish credentials and the bmc block.
		{name: "redfish credentials from the group", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "redfish": true, "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
			"bmc":     pcObj{"username": "root", "password": "secret"},
			"servers": pcObj{"srv01": pcObj{"bmc": pcObj{"ip": "203.0.113.5"}, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.5/21"}}}}}}), want: pcValid},
		{name: "redfish credentials from the server", tree: badBMC(pcObj{"ip": "203.0.113.5", "username": "admin", "password": "s3cret"}), want: pcValid},
		{name: "bmc scheme merges per key", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "redfish": true, "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
			"bmc": pcObj{"username": "root", "password": "secret", "scheme": "http"},
			"servers": pcObj{
				"srv01": pcObj{"bmc": pcObj{"ip": "203.0.113.5"}, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.5/21"}}},
				"srv02": pcObj{"bmc": pcObj{"ip": "203.0.113.6", "scheme": "https"}, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.6/21"}}},
			}}}), want: pcValid},
		{name: "bmc scheme default", tree: badBMC(pcObj{"ip": "203.0.113.5", "username": "root", "password": "secret"}), want: pcValid},
		{name: "bmc scheme ftp", tree: schemeCase("ftp"), want: pcError, key: "bmc.scheme", text: "https, http"},
		{name: "bmc scheme empty", tree: schemeCase(""), want: pcError, key: "bmc.scheme"},
		{name: "bmc scheme boolean", tree: schemeCase(true), want: pcError, key: "bmc.scheme"},
		{name: "bmc tls_verify merges per key", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "redfish": true, "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
			"bmc": pcObj{"username": "root", "password": "secret", "tls_verify": "/etc/ssl/certs/bmc-ca.pem"},
			"servers": pcObj{
				"srv01": pcObj{"bmc": pcObj{"ip": "203.0.113.5"}, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.5/21"}}},
				"srv02": pcObj{"bmc": pcObj{"ip": "203.0.113.6", "tls_verify": false}, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.6/21"}}},
			}}}), want: pcValid},
		{name: "bmc tls_verify default", tree: badBMC(pcObj{"ip": "203.0.113.5", "username": "root", "password": "secret"}), want: pcValid},
		{name: "bmc tls_verify number", tree: tlsCase(1), want: pcError, key: "bmc.tls_verify"},
		{name: "bmc tls_verify empty", tree: tlsCase(""), want: pcError, key: "bmc.tls_verify"},
		{name: "bmc tls_verify list", tree: tlsCase(pcList{}), want: pcError, key: "bmc.tls_verify"},
		{name: "bmc tls_verify null", tree: tlsCase(nil), want: pcError, key: "bmc.tls_verify"},
		{name: "group bmc address with a prefix", tree: pcMetal(pcOpenStack(true), pcObj{"worker": pcObj{"role": "worker", "disk": "/dev/sda", "bmc": pcObj{"ip": "192.0.2.51/24"}}}),
			want: pcError, key: "metal.worker.bmc.ip", text: "invalid"},
		{name: "server bmc address with a prefix", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "redfish": true, "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "ip": "192.168.0.5/21"}},
			"servers": pcObj{"srv01": pcObj{"bmc": pcObj{"ip": "192.0.2.51/24", "username": "root", "password": "secret"}}}}}),
			want: pcError, key: "metal.rack1.servers.srv01.bmc.ip", text: "invalid"},
		{name: "bmc credentials from secrets.yaml", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRedfish(pcObj{"bmc": pcObj{"ip": "203.0.113.5"}, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.5/21"}}})}),
			files: map[string]string{"secrets.yaml": bmcCreds}, want: pcValid},
		{name: "bmc credentials from an include", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRedfish(pcObj{"bmc": pcObj{"ip": "203.0.113.5"}, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.5/21"}}})}).
			set("include", pcList{"secrets.yaml", "bmc.yaml"}), files: map[string]string{"bmc.yaml": bmcCreds}, want: pcValid},
		{name: "bmc credentials in cluster.yaml", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRedfish(pcObj{"bmc": pcObj{"ip": "203.0.113.5"}, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.5/21"}}})}).
			set("metal.rack1.bmc", pcObj{"username": "root", "password": "secret"}), want: pcValid},
		{name: "redfish without a username", tree: creds(pcObj{"ip": "203.0.113.5"}), want: pcError, key: "metal.rack1.servers.srv01.bmc.username"},
		{name: "redfish without a password", tree: creds(pcObj{"ip": "203.0.113.5", "username": "root"}), want: pcError, key: "metal.rack1.servers.srv01.bmc.password"},
		{name: "redfish with an empty password", tree: creds(pcObj{"ip": "203.0.113.5", "username": "root", "password": ""}), want: pcError, key: "metal.rack1.servers.srv01.bmc.password"},
		{name: "redfish with a placeholder username", tree: creds(pcObj{"ip": "203.0.113.5", "username": "CHANGE-ME", "password": "hunter2-secret"}),
			want: pcError, key: "metal.rack1.servers.srv01.bmc.username", text: "placeholder", never: "hunter2-secret"},
		{name: "redfish with a placeholder password", tree: creds(pcObj{"ip": "203.0.113.5", "username": "root", "password": "CHANGE-ME"}),
			want: pcError, key: "metal.rack1.servers.srv01.bmc.password", text: "placeholder"},
		{name: "no redfish needs no credentials", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
			"servers": pcObj{"srv01": pcObj{"bmc": pcObj{"ip": "203.0.113.5", "username": "CHANGE-ME"}, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.5/21"}}}}}}), want: pcValid},
		{name: "server opting out of redfish", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcRedfish(pcObj{
			"redfish": false, "bmc": pcObj{"ip": "203.0.113.5"}, "interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.5/21"}}})}), want: pcValid},

		// Interfaces merge per name.
		{name: "server adds an interface", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "pxe", "ip": "198.51.100.9/24"}},
			"servers": pcObj{"srv01": pcObj{"interfaces": pcObj{"enp2s0f0": pcObj{"role": "cluster", "ip": "192.168.0.5/21"}}}}}}), want: pcValid},
		{name: "server retags the external child", tree: pcMetal(pcExternal(pcProxmox("192.168.0.0/21", "192.168.0.1", "192.168.0.10"),
			pcObj{"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "anchor_cidr": "169.254.32.0/20"}), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda",
			"interfaces": pcObj{"enp2s0f0": pcObj{"role": pcList{"cluster", "external"}, "link_name": "ext0", "vlan": 1600}},
			"servers":    pcObj{"srv01": pcObj{"interfaces": pcObj{"enp2s0f0": pcObj{"ip": "192.168.0.5/21", "vlan": 1691}}}}}}), want: pcValid},

		// The group and server schema.
		{name: "group without a role", tree: pcSchema(pcObj{"role": nil}), want: pcError, key: "metal.worker.role", text: "missing 'role'"},
		{name: "group role master", tree: pcSchema(pcObj{"role": "master"}), want: pcError, key: "metal.worker.role"},
		{name: "group without a disk", tree: pcSchema(pcObj{"disk": nil}), want: pcError, key: "metal.worker.disk", text: "missing 'disk'"},
		{name: "group disk blank", tree: pcSchema(pcObj{"disk": " "}), want: pcError, key: "metal.worker.disk"},
		{name: "redfish quoted yes", tree: pcSchema(pcObj{"redfish": "yes"}), want: pcError, key: "metal.worker.redfish"},
		{name: "unknown group key", tree: pcSchema(pcObj{"driver": "redfish"}), want: pcError, key: "metal.worker", text: "unknown key(s): driver"},
		{name: "group network cidr invalid", tree: pcSchema(pcObj{"network": pcObj{"cidr": "nope"}}), want: pcError, key: "metal.worker.network.cidr"},
		{name: "group network anchor", tree: pcSchema(pcObj{"network": pcObj{"cidr": "198.51.100.0/24", "anchor_cidr": "169.254.40.0/24"}}), want: pcError, key: "metal.worker.network", text: "anchor_cidr"},
		{name: "unknown interface key", tree: iface(pcObj{"speed": 10000}), want: pcError, key: "metal.worker.interfaces.enp1s0f0", text: "speed"},
		{name: "interface role mgmt", tree: iface(pcObj{"role": "mgmt"}), want: pcError, key: "metal.worker.interfaces.enp1s0f0.role"},
		{name: "interface role list with mgmt", tree: iface(pcObj{"role": pcList{"cluster", "mgmt"}}), want: pcError, key: "metal.worker.interfaces.enp1s0f0.role"},
		{name: "interface role empty list", tree: iface(pcObj{"role": pcList{}}), want: pcError, key: "metal.worker.interfaces.enp1s0f0.role"},
		{name: "interface ip invalid", tree: iface(pcObj{"role": "cluster", "ip": "nope"}), want: pcError, key: "metal.worker.interfaces.enp1s0f0.ip", text: "invalid"},
		{name: "interface dns hostname", tree: iface(pcObj{"role": "cluster", "dns": pcList{"dns.example.edu"}}), want: pcError, key: "metal.worker.interfaces.enp1s0f0.dns", text: "invalid address"},
		{name: "interface link_name blank", tree: iface(pcObj{"role": "cluster", "link_name": " "}), want: pcError, key: "metal.worker.interfaces.enp1s0f0.link_name"},
		{name: "interface vlan too high", tree: iface(pcObj{"role": "cluster", "vlan": 4095}), want: pcError, key: "metal.worker.interfaces.enp1s0f0.vlan", text: "1-4094"},
		{name: "interface vlan boolean", tree: iface(pcObj{"role": "cluster", "vlan": true}), want: pcError, key: "metal.worker.interfaces.enp1s0f0.vlan", text: "1-4094"},
		{name: "unknown bmc key", tree: pcSchema(pcObj{"bmc": pcObj{"user": "root"}}), want: pcError, key: "metal.worker.bmc", text: "user"},
		{name: "bmc address a hostname", tree: pcSchema(pcObj{"bmc": pcObj{"ip": "bmc.example.edu"}}), want: pcError, key: "metal.worker.bmc.ip"},
		{name: "servers a list", tree: pcSchema(pcObj{"servers": pcList{"srv01"}}), want: pcError, key: "metal.worker.servers"},
		{name: "server name with a space", tree: pcSchema(pcObj{"servers": pcObj{"rp 001": pcObj{}}}), want: pcError, key: "metal.worker.servers", text: "'rp 001'"},
		{name: "server named by a number", tree: pcOpenStack(true).set("include", pcList{"secrets.yaml", "metal.yaml"}),
			files: map[string]string{"metal.yaml": "metal:\n  worker:\n    role: worker\n    disk: /dev/sda\n    servers:\n      1: {}\n"}, want: pcError, key: "metal.worker.servers", text: "server names"},
		{name: "unknown server key", tree: pcSchema(pcObj{"servers": pcObj{"srv01": pcObj{"user": "x"}}}), want: pcError, key: "metal.worker.servers.srv01", text: "user"},
		{name: "unknown server key beside a role", tree: pcSchema(pcObj{"servers": pcObj{"srv01": pcObj{"role": "controlplane", "role2": "x"}}}), want: pcError, key: "metal.worker.servers.srv01", text: "role2"},
		{name: "extensions a string", tree: pcSchema(pcObj{"extensions": "siderolabs/i915"}), want: pcError, key: "metal.worker.extensions"},
		{name: "extensions with an empty entry", tree: pcSchema(pcObj{"extensions": pcList{"siderolabs/i915", ""}}), want: pcError, key: "metal.worker.extensions"},
		{name: "group and server extensions", tree: pcMetal(pcOpenStack(true), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "extensions": pcList{"siderolabs/nvidia"},
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "ip": "192.168.0.5/21"}},
			"servers":    pcObj{"srv01": pcObj{"extensions": pcList{"siderolabs/ice"}}}}}), want: pcValid},
		{name: "metal extensions beside talos extensions", tree: pcMetal(pcOpenStack(true).set("talos.extensions", pcList{"siderolabs/i915"}), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "extensions": pcList{"siderolabs/nvidia"},
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "ip": "192.168.0.5/21"}},
			"servers":    pcObj{"srv01": pcObj{"extensions": pcList{"siderolabs/ice"}}}}}), want: pcValid},
		{name: "server in two groups", tree: pcMetal(pcOpenStack(true), pcObj{
			"a": pcObj{"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "ip": "192.168.0.5/21"}}, "servers": pcObj{"srv01": pcObj{}}},
			"b": pcObj{"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster", "ip": "192.168.0.5/21"}}, "servers": pcObj{"srv01": pcObj{}, "srv02": pcObj{}}},
		}), want: pcError, key: "servers.srv01", text: "defined in more than one group"},

		// One VM provider plus metal.
		{name: "openstack with metal groups", tree: pcMetal(pcOpenStack(true), pcMetalGroups("192.168.0.5/21", "192.168.0.6/21")), want: pcValid},
		{name: "proxmox with metal groups", tree: pcMetal(pcProxmox("192.168.0.0/21", "192.168.0.1", "192.168.0.10"), pcMetalGroups("192.168.0.5/21", "192.168.0.6/21")), want: pcValid},
		{name: "proxmox sdn with metal groups", tree: pcSDN(pcMetalGroups("192.168.20.6/24", "192.168.20.7/24")), want: pcValid},
		{name: "openstack with metal and an external network", tree: pcMetal(pcOpenStack(true), pcMetalGroups("192.168.0.5/21", "192.168.0.6/21")).
			set("network.external", pcObj{"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "anchor_cidr": "169.254.40.0/24"}), want: pcError, key: "network.external"},
		{name: "sdn metal address of a control plane", tree: pcSDN(pcObj{"rack1": pcRack("192.168.20.11", nil)}), want: pcError, key: "interfaces.enp1s0f0.ip", text: "SDN static address layout"},
		{name: "sdn metal address in a pool block", tree: pcSDN(pcObj{"rack1": pcRack("192.168.20.65", nil)}), want: pcError, key: "interfaces.enp1s0f0.ip", text: "SDN static address layout"},
		{name: "sdn metal address in a free slot", tree: pcSDN(pcObj{"rack1": pcRack("192.168.20.6/24", nil)}), want: pcValid},
		{name: "group network on the pod network", tree: pcMetal(other(pcOpenStack(true)), pcObj{"rack1": pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "10.244.0.0/16", "gateway": "10.244.0.1"},
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}}, "servers": pcObj{"srv01": ip("10.244.0.5/16")}}}),
			want: pcWarning, key: "metal.rack1", text: "overlaps the kubernetes pod network"},

		// Machine configuration shapes (loaded, then generated).
		{name: "csfarm machine shape", tree: pcTalos(pcPhoenix(), pcTalosExternal), want: pcValid},
		{name: "worker on another l2", tree: pcTalos(otherL2("worker"), nil), want: pcValid},
		{name: "control plane on another l2", tree: pcTalos(otherL2("controlplane"), nil), want: pcValid},
		{name: "external child renamed and retagged", tree: pcTalos(pcObj{
			"role": "worker", "disk": "/dev/sda", "network": pcObj{"cidr": "172.29.21.0/24", "gateway": "172.29.21.1", "mtu": 9000},
			"interfaces": pcObj{"enp1s0f0": pcObj{"role": "pxe"}, "enp2s0f0": pcObj{"role": pcList{"cluster", "external"}, "link_name": "ext0", "vlan": 1600}},
			"servers":    pcObj{"rp001": pcObj{"interfaces": pcObj{"enp2s0f0": pcObj{"ip": "172.29.21.5/24"}}}}}, pcTalosExternal), want: pcValid},
		{name: "cluster link only", tree: pcTalos(cluster("worker"), nil), want: pcValid},
		{name: "control plane holding the vip", tree: pcTalos(cluster("controlplane"), nil), want: pcValid},
		{name: "control plane with an external vip and no external link", tree: pcTalos(cluster("controlplane"),
			pcObj{"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "vlan": 1691, "anchor_cidr": "169.254.32.0/20", "kubeapi_vip": "203.0.113.79"}).
			del("network.cluster.kubeapi_vip"), want: pcValid},
		{name: "metal control plane beside openstack", tree: pcMetal(pcOpenStack(true), pcObj{"phoenix": pcObj{
			"role": "controlplane", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": "cluster"}},
			"servers": pcObj{"rp001": pcObj{"interfaces": pcObj{"enp1s0f0": pcObj{"ip": "192.168.0.5"}}}}}}), want: pcValid},
		{name: "cabling with only a pxe link", tree: talosCabling(pcObj{"enp1s0f0": pcObj{"role": "pxe"}}, pcTalosExternal), want: pcError, key: "interfaces", text: "exactly one interface with the cluster role"},
		{name: "cabling with two cluster links", tree: talosCabling(pcObj{"enp1s0f0": pcObj{"role": "cluster"}, "enp2s0f0": pcObj{"role": "cluster"}}, pcTalosExternal),
			want: pcError, key: "interfaces", text: "exactly one interface with the cluster role"},
		{name: "cabling with two external links", tree: talosCabling(pcObj{"enp1s0f0": pcObj{"role": "cluster"}, "enp2s0f0": pcObj{"role": "external"}, "enp3s0f0": pcObj{"role": "external"}}, pcTalosExternal),
			want: pcError, key: "interfaces", text: "at most one is supported"},
		{name: "cabling external without a network", tree: talosCabling(pcObj{"enp1s0f0": pcObj{"role": pcList{"cluster", "external"}}}, nil),
			want: pcError, key: "interfaces", text: "no network.external block"},
		{name: "external link without any vlan loads", tree: pcTalos(pcObj{
			"role": "worker", "disk": "/dev/sda", "interfaces": pcObj{"enp1s0f0": pcObj{"role": pcList{"cluster", "external"}}},
			"servers": pcObj{"rp001": pcObj{"interfaces": pcObj{"enp1s0f0": pcObj{"ip": "172.29.21.5"}}}}},
			pcObj{"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "anchor_cidr": "169.254.32.0/20"}), want: pcValid},

		// The metal commands' configuration.
		{name: "commands group", tree: pcCommands(pcCommandsGroup(pcCommandsServer(), nil)), want: pcValid, never: "hunter2"},
		{name: "commands cluster link without an address", tree: pcCommands(pcCommandsGroup(pcObj{"rp001": pcObj{"bmc": pcObj{"ip": "198.51.100.10"}, "interfaces": pcObj{"enp2s0f0": pcObj{}}}}, nil)),
			want: pcError, key: "interfaces.enp2s0f0.ip", text: "no static address", never: "hunter2"},
		{name: "commands group without redfish", tree: pcCommands(pcCommandsGroup(pcCommandsServer(), pcObj{"redfish": false})), want: pcValid},
		{name: "commands server without a bmc address", tree: pcCommands(pcCommandsGroup(pcObj{"rp001": pcObj{}}, nil)), want: pcError, key: "bmc.ip", never: "hunter2"},
		{name: "commands server turning redfish off", tree: pcCommands(pcCommandsGroup(pcObj{"rp001": pcObj{
			"redfish": false, "bmc": pcObj{"ip": "198.51.100.10"}, "interfaces": pcObj{"enp2s0f0": pcObj{"ip": "172.29.21.5/24"}}}}, nil)), want: pcValid},
	}
}

func pcRancherCases() []pcCase {
	base := proxmoxBase
	secrets := func(body string) map[string]string { return map[string]string{"secrets.yaml": body} }
	creds := "rancher:\n  url: https://rancher.example.com\n  token: token-x:y-secret\n"
	return []pcCase{
		{name: "rancher members and credentials", tree: base().set("rancher", pcObj{"admins": pcList{"alice"}, "users": pcList{"carol"}}), files: secrets(creds), want: pcValid},
		{name: "rancher empty sections", tree: base().set("rancher", pcObj{}), files: secrets("rancher: {}\n"), want: pcValid},
		{name: "no rancher sections", tree: base(), want: pcValid},
		{name: "rancher a string in cluster.yaml", tree: base().set("rancher", "enabled"), want: pcError, key: "rancher"},
		{name: "rancher a string in secrets.yaml", tree: base(), files: secrets("rancher: enabled\n"), want: pcError, key: "rancher"},
		{name: "rancher admins a string", tree: base().set("rancher", pcObj{"admins": "alice"}), want: pcError, key: "rancher.admins"},
		{name: "rancher admins a number", tree: base().set("rancher", pcObj{"admins": 3}), want: pcError, key: "rancher.admins"},
		{name: "rancher admins numbers", tree: base().set("rancher", pcObj{"admins": pcList{1, 2}}), want: pcError, key: "rancher.admins"},
		{name: "rancher admins with a number", tree: base().set("rancher", pcObj{"admins": pcList{"alice", 3}}), want: pcError, key: "rancher.admins"},
		{name: "rancher users a string", tree: base().set("rancher", pcObj{"users": "carol"}), want: pcError, key: "rancher.users"},
		{name: "rancher users a number", tree: base().set("rancher", pcObj{"users": 3}), want: pcError, key: "rancher.users"},
		{name: "rancher users numbers", tree: base().set("rancher", pcObj{"users": pcList{1, 2}}), want: pcError, key: "rancher.users"},
		{name: "rancher users with a number", tree: base().set("rancher", pcObj{"users": pcList{"carol", 3}}), want: pcError, key: "rancher.users"},
		{name: "rancher member in both tiers", tree: base().set("rancher", pcObj{"admins": pcList{"alice", "bob"}, "users": pcList{"carol", "bob"}}), want: pcError, key: "rancher.users", text: "bob"},
		{name: "rancher member in both tiers with credentials", tree: base().set("rancher", pcObj{"admins": pcList{"alice", "bob"}, "users": pcList{"carol", "bob"}}),
			files: secrets(creds), want: pcError, key: "rancher.users", never: "token-x:y-secret"},
		{name: "rancher misspelled members", tree: base().set("rancher", pcObj{"admins": pcList{"alice"}, "memers": pcList{"bob"}}), want: pcError, key: "rancher", text: "memers"},
		{name: "rancher owners", tree: base().set("rancher", pcObj{"owners": pcList{"alice"}}), want: pcError, key: "rancher", text: "owners"},
		{name: "rancher misspelled url in secrets", tree: base(), files: secrets("rancher: {url: https://r.example.com, token: t, urll: x}\n"), want: pcError, key: "rancher", text: "urll"},
		{name: "rancher user in secrets", tree: base(), files: secrets("rancher: {user: x}\n"), want: pcError, key: "rancher", text: "user"},
		{name: "rancher misspelled key with credentials", tree: base().set("rancher", pcObj{"admins": pcList{"alice"}, "memers": pcList{"bob"}}), files: secrets(creds), want: pcError, key: "rancher", text: "memers"},
		{name: "rancher url null", tree: base(), files: secrets("rancher: {url: null}\n"), want: pcError, key: "rancher.url"},
		{name: "rancher url a list", tree: base(), files: secrets("rancher: {url: [not, a, string]}\n"), want: pcError, key: "rancher.url"},
		{name: "rancher url a number", tree: base(), files: secrets("rancher: {url: 3}\n"), want: pcError, key: "rancher.url"},
		{name: "rancher url empty", tree: base(), files: secrets("rancher: {url: ''}\n"), want: pcError, key: "rancher.url"},
		{name: "rancher token null", tree: base(), files: secrets("rancher: {token: null}\n"), want: pcError, key: "rancher.token"},
		{name: "rancher token a list", tree: base(), files: secrets("rancher: {token: [not, a, string]}\n"), want: pcError, key: "rancher.token"},
		{name: "rancher token a number", tree: base(), files: secrets("rancher: {token: 3}\n"), want: pcError, key: "rancher.token"},
		{name: "rancher token empty", tree: base(), files: secrets("rancher: {token: ''}\n"), want: pcError, key: "rancher.token"},
		// secrets.yaml is an include: its nulls add nothing to a section
		// cluster.yaml already has, so the credentials are simply absent.
		{name: "rancher null credentials beside members", tree: base().set("rancher", pcObj{"admins": pcList{"alice"}}), files: secrets("rancher: {url: null, token: null}\n"), want: pcValid},
		{name: "rancher credentials in cluster.yaml", tree: base().set("rancher", pcObj{"admins": pcList{"alice"}, "url": "https://rancher.example.edu", "token": "token-x:y"}), want: pcValid},
		{name: "rancher credentials in an include", tree: base().set("rancher", pcObj{"admins": pcList{"alice"}}).set("include", pcList{"creds.yaml", "secrets.yaml"}),
			files: map[string]string{"creds.yaml": "rancher: {url: 'https://rancher.example.edu', token: 'token-x:y'}\n"}, want: pcValid},
		{name: "rancher scaffolded split", tree: base().set("rancher", pcObj{"admins": pcList{"alice"}}), files: secrets(creds), want: pcValid},
		{name: "rancher only in secrets.yaml", tree: base(), files: secrets(creds), want: pcValid},
		{name: "rancher token a number in cluster.yaml", tree: base().set("rancher", pcObj{"url": "https://rancher.example.edu", "token": 3}), want: pcError, key: "rancher.token"},
		{name: "rancher init scaffold", tree: base().set("rancher", pcObj{"admins": pcList{}, "users": pcList{}}), files: secrets("# Add both values to activate Rancher registration.\nrancher:\n  # url: https://rancher.example.com\n"), want: pcValid},
		{name: "plugin sections kept by core", tree: base().set("argocd", pcObj{"admins": pcList{}, "users": pcList{}}).set("rancher", pcObj{"admins": pcList{}, "users": pcList{}}), want: pcValid},
	}
}

func pcArgoCDCases() []pcCase {
	base := proxmoxBase
	repos := pcObj{"git": pcObj{"url": "https://git.example.com/cluster.git"}, "infra": pcObj{"url": "https://git.example.com/infra.git"}}
	with := func(cluster pcObj, secrets string) pcCase {
		c := pcCase{tree: base()}
		if cluster != nil {
			c.tree.set("argocd", cluster)
		}
		if secrets != "" {
			c.files = map[string]string{"secrets.yaml": secrets}
		}
		return c
	}
	row := func(name string, cluster pcObj, secrets string, want pcVerdict, key string) pcCase {
		c := with(cluster, secrets)
		c.name, c.want, c.key = name, want, key
		return c
	}
	merge := func(a, b pcObj) pcObj {
		out := pcObj{}
		for k, v := range a {
			out[k] = v
		}
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	cases := []pcCase{
		row("argocd full configuration", repos, "argocd:\n  kubeconfig: ../argocd-kubeconfig\n  git: {username: deploy, token: CHANGE-ME}\n", pcValid, ""),
		row("argocd registration only", pcObj{}, "argocd: {kubeconfig: ../argocd-kubeconfig}\n", pcValid, ""),
		row("argocd git url without infra url", pcObj{"git": pcObj{"url": "https://git.example.com/cluster.git"}}, "", pcError, "argocd.infra.url"),
		row("argocd infra url without git url", pcObj{"infra": pcObj{"url": "https://git.example.com/infra.git"}}, "", pcError, "argocd.git.url"),
		row("argocd git credentials without git url", nil, "argocd:\n  kubeconfig: ../argocd-kubeconfig\n  git: {username: deploy, token: CHANGE-ME}\n", pcError, "argocd.git.url"),
		row("argocd git token without git url", nil, "argocd:\n  kubeconfig: ../argocd-kubeconfig\n  git: {token: CHANGE-ME}\n", pcError, "argocd.git.url"),
		row("argocd sync and automated quoted", pcObj{"automated": "false", "sync": "false"}, "", pcError, "argocd.automated"),
		row("argocd url and token alone", pcObj{}, "argocd: {url: 'https://argocd.example.edu', token: CHANGE-ME}\n", pcError, "argocd.url"),
		row("argocd url alone", pcObj{}, "argocd: {url: 'https://argocd.example.edu'}\n", pcError, "argocd.url"),
		row("argocd token alone", pcObj{}, "argocd: {token: CHANGE-ME}\n", pcError, "argocd.token"),
		row("argocd url and token beside a kubeconfig", pcObj{}, "argocd: {kubeconfig: ../argocd-kubeconfig, url: 'https://argocd.example.edu', token: x}\n", pcValid, ""),
		row("argocd secret git section a string", pcObj{"infra": pcObj{"url": "https://git.example.com/b"}}, "argocd: {git: deploy}\n", pcError, "argocd.git"),
		row("argocd a string in secrets.yaml", nil, "argocd: enabled\n", pcError, "argocd"),
		row("argocd git a string", pcObj{"git": "https://git.example.com/cluster.git"}, "", pcError, "argocd.git"),
		row("argocd metallb a string", pcObj{"metallb": "yes"}, "", pcError, "argocd.metallb"),
		row("argocd misspelled repository url", pcObj{"git": pcObj{"urre": "https://git.example.com/cluster.git"}, "infra": pcObj{"url": "https://git.example.com/infra.git"}}, "", pcError, "argocd.git"),
		row("argocd repository branch", pcObj{"git": pcObj{"url": "https://git.example.com/cluster.git", "branch": "main"}, "infra": pcObj{"url": "https://git.example.com/infra.git"}}, "", pcError, "argocd.git"),
		row("argocd misspelled git credential", repos, "argocd:\n  git: {username: deploy, tokn: x}\n", pcError, "argocd.git"),
		row("argocd misspelled kubeconfig", nil, "argocd: {kubeconfig: ../argocd-kubeconfig, kubeconfigg: ../other}\n", pcError, "argocd"),
		row("argocd traefik version", pcObj{"ingress": pcObj{"enabled": true, "class": "traefik", "traefik": pcObj{"version": "34.0.0"}}}, "", pcValid, ""),
		row("argocd misspelled traefik key", pcObj{"ingress": pcObj{"enabled": true, "traefik": pcObj{"verson": "34.0.0"}}}, "", pcError, "argocd.ingress.traefik"),
		row("argocd traefik a string", pcObj{"ingress": pcObj{"enabled": true, "traefik": "34.0.0"}}, "", pcError, "argocd.ingress.traefik"),
		row("argocd nfs version beside servers", pcObj{"nfs": pcObj{"enabled": true, "servers": pcObj{}, "version": "1"}}, "", pcError, "argocd.nfs.version"),
		row("argocd nfs servers a string", pcObj{"nfs": pcObj{"enabled": true, "servers": "nfs.example.edu"}}, "", pcError, "argocd.nfs.servers"),
		row("argocd nfs servers verbatim", pcObj{"nfs": pcObj{"enabled": true, "servers": pcObj{"shared": pcObj{"server": "nfs.example.edu", "path": "/exports/x", "defaultClass": true}}}}, "", pcValid, ""),
		row("argocd full configuration with versions", merge(repos, pcObj{
			"metallb":     pcObj{"enabled": true, "version": "34.0.0"},
			"ingress":     pcObj{"enabled": true, "traefik": pcObj{"version": "28.0.0"}},
			"certmanager": pcObj{"email": "admin@example.edu", "version": "1.14.0"},
			"nfs":         pcObj{"enabled": true, "servers": pcObj{"shared": pcObj{"path": "/e"}}},
		}), "argocd: {kubeconfig: ../argocd-kubeconfig}\n", pcValid, ""),
		row("argocd kubeconfig in cluster.yaml", pcObj{"kubeconfig": "../argocd-kubeconfig"}, "", pcValid, ""),
		row("argocd git credentials in cluster.yaml", pcObj{"kubeconfig": "../argocd-kubeconfig",
			"git":   pcObj{"url": "https://git.example.com/cluster.git", "username": "deploy", "token": "CHANGE-ME"},
			"infra": pcObj{"url": "https://git.example.com/infra.git"}}, "", pcValid, ""),
		row("argocd url and token in cluster.yaml", pcObj{"url": "https://argocd.example.edu", "token": "CHANGE-ME"}, "", pcError, "argocd.url"),
		row("argocd kubeconfig a list in cluster.yaml", pcObj{"kubeconfig": pcList{"not", "a", "string"}}, "", pcError, "argocd.kubeconfig"),
		row("argocd init scaffold", merge(repos, pcObj{"admins": pcList{}, "users": pcList{}}), "# Choose a kubeconfig path or kubectl context.\nargocd:\n  # kubeconfig: ../argocd-kubeconfig\n", pcValid, ""),
	}
	c := with(nil, "")
	c.tree.set("argocd", "enabled")
	c.name, c.want, c.key = "argocd a string in cluster.yaml", pcError, "argocd"
	cases = append(cases, c)
	c = with(nil, "")
	c.tree.set("include", pcList{"secrets.yaml", "argocd.yaml"})
	c.name, c.want, c.files = "argocd context in an include", pcValid, map[string]string{"argocd.yaml": "argocd: {context: argocd}\n"}
	cases = append(cases, c)
	for _, bad := range []any{"false", "true", 1, 0} {
		cases = append(cases,
			row("argocd sync "+pcShow(bad), pcObj{"sync": bad}, "", pcError, "argocd.sync"),
			row("argocd automated "+pcShow(bad), pcObj{"automated": bad}, "", pcError, "argocd.automated"))
	}
	for _, app := range []string{"metallb", "ingress", "sealedsecrets", "certmanager", "cinder", "nfs", "monitoring"} {
		cases = append(cases, row("argocd "+app+" enabled quoted", pcObj{app: pcObj{"enabled": "false"}}, "", pcError, "argocd."+app+".enabled"))
	}
	for _, bad := range []any{"alice@example.com", 3, pcList{1, 2}} {
		cases = append(cases, row("argocd admins "+pcShow(bad), pcObj{"admins": bad}, "", pcError, "argocd.admins"))
	}
	for _, repo := range []string{"git", "infra"} {
		cases = append(cases,
			row("argocd "+repo+" url a number", pcObj{repo: pcObj{"url": 42}}, "", pcError, "argocd."+repo+".url"),
			row("argocd unknown "+repo+" key", pcObj{repo: pcObj{"url": "https://git.example.com/cluster.git", "usl": "https://git.example.com/other.git"}}, "", pcError, "argocd."+repo))
	}
	for _, key := range []string{"kubeconfig", "context", "url", "token"} {
		cases = append(cases, row("argocd "+key+" a list", pcObj{}, "argocd: {"+key+": [not, a, string]}\n", pcError, "argocd."+key))
	}
	for _, key := range []string{"username", "token"} {
		cases = append(cases, row("argocd git "+key+" a number", repos, "argocd: {git: {"+key+": 123}}\n", pcError, "argocd.git."+key))
	}
	for _, key := range []string{"admin", "sync_mode", "gitlab", "appofapps"} {
		c := row("argocd unsupported option "+key, merge(repos, pcObj{key: "x"}), "", pcError, "argocd")
		c.text = key
		cases = append(cases, c)
	}
	for _, s := range []pcObj{
		{"metallb": pcObj{"enabled": true, "verson": "1.2"}},
		{"certmanager": pcObj{"enabled": true, "emial": "admin@example.edu"}},
		{"monitoring": pcObj{"enabled": true, "scrapeInterval": "30s"}},
	} {
		for app := range s {
			cases = append(cases, row("argocd misspelled "+app+" key", s, "", pcError, "argocd."+app))
		}
	}
	for _, app := range []string{"ingress", "nfs", "monitoring"} {
		cases = append(cases, row("argocd "+app+" version", pcObj{app: pcObj{"enabled": true, "version": "9.9"}}, "", pcError, "argocd."+app+".version"))
	}
	for _, app := range []string{"metallb", "sealedsecrets", "certmanager", "cinder"} {
		cases = append(cases, row("argocd "+app+" version kept", pcObj{app: pcObj{"enabled": true, "version": "34.0.0"}}, "", pcValid, ""))
	}
	for _, bad := range []any{34.5, 34, "", "   "} {
		cases = append(cases, row("argocd metallb version "+pcShow(bad), pcObj{"metallb": pcObj{"enabled": true, "version": bad}}, "", pcError, "argocd.metallb.version"))
	}
	return cases
}

func pcShow(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

func pcChartsCases() []pcCase {
	charts := func(c pcObj) tree { return proxmoxBase().set("charts", c) }
	ceph := func(extra pcObj) tree {
		e := pcObj{"clusterID": "x", "monitors": pcList{"m:6789"}}
		for k, v := range extra {
			e[k] = v
		}
		return charts(pcObj{"ceph": e})
	}
	nfsClass := func(name string, extra pcObj) pcObj {
		c := pcObj{"name": name, "server": "s", "share": "/x"}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	return []pcCase{
		{name: "charts absent", tree: proxmoxBase(), want: pcValid},
		{name: "charts metallb enabled", tree: charts(pcObj{"metallb": pcObj{"enabled": true}}), want: pcValid},
		{name: "charts all disabled", tree: charts(pcObj{"metallb": pcObj{"enabled": false}, "traefik": pcObj{"enabled": false}}), want: pcValid},
		{name: "charts entry enabled by default", tree: charts(pcObj{"metallb": pcObj{"enabled": false}, "traefik": pcObj{}}), want: pcValid},
		{name: "charts unsupported entry key", tree: charts(pcObj{"metallb": pcObj{"bogus": 1}}), want: pcError, key: "charts.metallb", text: "bogus"},
		{name: "charts a string", tree: proxmoxBase().set("charts", "not-a-mapping"), want: pcError, key: "charts"},
		{name: "charts metallb defaults", tree: charts(pcObj{"metallb": pcObj{}}), want: pcValid},
		{name: "charts gateway pinned", tree: charts(pcObj{"gateway": pcObj{"version": "v1.3.1"}}), want: pcValid},
		{name: "charts sealed-secrets defaults", tree: charts(pcObj{"sealed-secrets": pcObj{}}), want: pcValid},
		{name: "charts cert-manager prod issuer", tree: charts(pcObj{"cert-manager": pcObj{"email": "a@example.edu", "prod": true}}), want: pcValid},
		{name: "charts staging issuer without email", tree: charts(pcObj{"cert-manager": pcObj{"staging": true}}), want: pcError, key: "charts.cert-manager.email"},
		{name: "charts prod issuer without email", tree: charts(pcObj{"cert-manager": pcObj{"prod": true}}), want: pcError, key: "charts.cert-manager.email"},
		{name: "charts cert-manager without issuers", tree: charts(pcObj{"cert-manager": pcObj{}}), want: pcValid},
		{name: "charts disabled cert-manager with an issuer", tree: charts(pcObj{"cert-manager": pcObj{"enabled": false, "staging": true}}), want: pcValid},
		{name: "charts issuer outside cert-manager", tree: charts(pcObj{"traefik": pcObj{"email": "a@b", "staging": true}}), want: pcError, key: "charts.traefik.staging", text: "only used by cert-manager"},
		{name: "charts prod quoted", tree: charts(pcObj{"cert-manager": pcObj{"email": "a@b", "prod": "yes"}}), want: pcError, key: "charts.cert-manager.prod"},
		{name: "charts ceph disabled", tree: charts(pcObj{"ceph": pcObj{"enabled": false}}), want: pcValid},
		{name: "charts ceph without a cluster id", tree: charts(pcObj{"ceph": pcObj{}}), want: pcError, key: "charts.ceph.clusterID"},
		{name: "charts ceph without a driver", tree: ceph(nil), want: pcError, key: "charts.ceph", text: "at least one of rbd or fs"},
		{name: "charts ceph without monitors", tree: ceph(pcObj{"monitors": pcList{}, "rbd": true}), want: pcError, key: "charts.ceph.monitors"},
		{name: "charts ceph rbd quoted", tree: ceph(pcObj{"rbd": "yes"}), want: pcError, key: "charts.ceph.rbd"},
		{name: "charts ceph keys on gateway", tree: charts(pcObj{"gateway": pcObj{"clusterID": "x", "rbd": true}}), want: pcError, key: "charts.gateway", text: "only used by ceph"},
		{name: "charts ceph rbd and fs", tree: ceph(pcObj{"rbd": true, "fs": true}), want: pcValid},
		{name: "charts ceph storage classes", tree: ceph(pcObj{"rbd": pcObj{"pool": "kubernetes", "defaultClass": true}, "fs": pcObj{"fsName": "cephfs"}}), want: pcValid},
		{name: "charts ceph bare driver", tree: ceph(pcObj{"rbd": true}), want: pcValid},
		{name: "charts ceph rbd without a pool", tree: ceph(pcObj{"rbd": pcObj{}}), want: pcError, key: "charts.ceph.rbd.pool"},
		{name: "charts ceph fs without a name", tree: ceph(pcObj{"fs": pcObj{"pool": "p"}}), want: pcError, key: "charts.ceph.fs.fsName"},
		{name: "charts ceph rbd with fsName", tree: ceph(pcObj{"rbd": pcObj{"pool": "p", "fsName": "f"}}), want: pcError, key: "charts.ceph.rbd", text: "fsName"},
		{name: "charts ceph rbd class name empty", tree: ceph(pcObj{"rbd": pcObj{"pool": "p", "name": ""}}), want: pcError, key: "charts.ceph.rbd.name"},
		{name: "charts ceph two default classes", tree: ceph(pcObj{"rbd": pcObj{"pool": "p", "defaultClass": true}, "fs": pcObj{"fsName": "f", "defaultClass": true}}), want: pcError, key: "charts.ceph", text: "defaultClass"},
		{name: "charts ceph class and values storageClass", tree: ceph(pcObj{"rbd": pcObj{"pool": "p"}, "values": pcObj{"storageClass": pcObj{"create": true}}}), want: pcError, key: "charts.ceph.values"},
		{name: "charts ceph credentials from secrets.yaml", tree: ceph(pcObj{"rbd": true}),
			files: map[string]string{"secrets.yaml": "charts:\n  ceph:\n    userID: admin\n    userKey: AQC-secret-key\n"}, want: pcValid, never: "AQC-secret-key"},
		{name: "charts ceph half a credential", tree: ceph(pcObj{"rbd": true}), files: map[string]string{"secrets.yaml": "charts:\n  ceph:\n    userID: a\n"}, want: pcError, key: "charts.ceph.userKey"},
		{name: "charts ceph credentials on metallb", tree: charts(pcObj{"metallb": pcObj{"userID": "a", "userKey": "k-secret"}}), want: pcError, key: "charts.metallb", text: "only used by ceph", never: "k-secret"},
		{name: "charts nfs without classes", tree: charts(pcObj{"nfs": pcObj{}}), want: pcError, key: "charts.nfs.storageClasses"},
		{name: "charts classes on metallb", tree: charts(pcObj{"metallb": pcObj{"storageClasses": pcList{pcObj{"name": "x"}}}}), want: pcError, key: "charts.metallb.storageClasses", text: "only used by nfs"},
		{name: "charts nfs duplicate class", tree: charts(pcObj{"nfs": pcObj{"storageClasses": pcList{nfsClass("a", nil), nfsClass("a", nil)}}}), want: pcError, key: "charts.nfs.storageClasses"},
		{name: "charts nfs two default classes", tree: charts(pcObj{"nfs": pcObj{"storageClasses": pcList{nfsClass("a", pcObj{"defaultClass": true}), nfsClass("b", pcObj{"defaultClass": true})}}}), want: pcError, key: "charts.nfs.storageClasses"},
		{name: "charts nfs class unknown key", tree: charts(pcObj{"nfs": pcObj{"storageClasses": pcList{nfsClass("a", pcObj{"bogus": 1})}}}), want: pcError, key: "charts.nfs.storageClasses", text: "bogus"},
		{name: "charts nfs classes twice", tree: charts(pcObj{"nfs": pcObj{"storageClasses": pcList{nfsClass("a", nil)}, "values": pcObj{"storageClasses": pcList{}}}}), want: pcError, key: "charts.nfs.storageClasses", text: "not both"},
		{name: "charts nfs one class", tree: charts(pcObj{"nfs": pcObj{"storageClasses": pcList{nfsClass("a", nil)}}}), want: pcValid},
		{name: "charts traefik resolver beside issuers", tree: charts(pcObj{"cert-manager": pcObj{"email": "a@b", "prod": true},
			"traefik": pcObj{"values": pcObj{"certificatesResolvers": pcObj{"le": pcObj{"acme": pcObj{"email": "a@b"}}}}}}), want: pcError, key: "charts.traefik.values", text: "two ACME clients"},
		{name: "charts traefik resolver argument beside issuers", tree: charts(pcObj{"cert-manager": pcObj{"email": "a@b", "staging": true},
			"traefik": pcObj{"values": pcObj{"additionalArguments": pcList{"--certificatesresolvers.le.acme.email=a@b"}}}}), want: pcError, key: "charts.traefik.values"},
		{name: "charts traefik resolver alone", tree: charts(pcObj{"traefik": pcObj{"values": pcObj{"certificatesResolvers": pcObj{"le": pcObj{}}}}}), want: pcValid},
		{name: "charts traefik resolver beside disabled cert-manager", tree: charts(pcObj{"cert-manager": pcObj{"email": "a@b", "enabled": false, "prod": true},
			"traefik": pcObj{"values": pcObj{"certificatesResolvers": pcObj{"le": pcObj{}}}}}), want: pcValid},
		{name: "charts issuers beside a plain traefik", tree: charts(pcObj{"cert-manager": pcObj{"email": "a@b", "prod": true}, "traefik": pcObj{}}), want: pcValid},
		{name: "charts namespace mapping", tree: charts(pcObj{"foo": pcObj{"repo": "https://example.com/charts", "namespace": pcObj{"name": "apps", "enforce": "restricted"}}}), want: pcValid},
		{name: "charts unknown entry without a source", tree: charts(pcObj{"mystery": pcObj{}}), want: pcError, key: "charts.mystery", text: "set repo or manifest"},
		{name: "charts repo and manifest", tree: charts(pcObj{"foo": pcObj{"repo": "https://a", "manifest": "https://b"}}), want: pcError, key: "charts.foo", text: "repo and manifest"},
		{name: "charts gateway values", tree: charts(pcObj{"gateway": pcObj{"values": pcObj{}}}), want: pcError, key: "charts.gateway.values", text: "not used by manifest entries"},
		{name: "charts manifest entry values", tree: charts(pcObj{"crds": pcObj{"manifest": "https://example.com/x.yaml", "values": pcObj{}}}), want: pcError, key: "charts.crds.values"},
		{name: "charts gateway namespace", tree: charts(pcObj{"gateway": pcObj{"namespace": "gateway-system"}}), want: pcError, key: "charts.gateway.namespace"},
		{name: "charts manifest entry namespace", tree: charts(pcObj{"crds": pcObj{"manifest": "https://example.com/x.yaml", "namespace": "x"}}), want: pcError, key: "charts.crds.namespace"},
		{name: "charts namespace unknown key", tree: charts(pcObj{"foo": pcObj{"repo": "https://example.com/charts", "namespace": pcObj{"name": "tr", "enforse": "privileged"}}}), want: pcError, key: "charts.foo.namespace", text: "enforse"},
		{name: "charts ceph namespace", tree: ceph(pcObj{"namespace": "ceph"}), want: pcError, key: "charts.ceph.namespace"},
		{name: "charts unknown chart with a repo", tree: charts(pcObj{"mystery": pcObj{"repo": "https://example.com/charts"}}), want: pcValid},
		{name: "charts unknown chart with a namespace", tree: charts(pcObj{"mystery": pcObj{"repo": "https://example.com/charts", "namespace": "other"}}), want: pcValid},
		{name: "charts email on metallb", tree: charts(pcObj{"metallb": pcObj{"email": "a@example.edu"}}), want: pcError, key: "charts.metallb.email", text: "only used by cert-manager"},
		{name: "charts email on traefik", tree: charts(pcObj{"traefik": pcObj{"email": "a@example.edu"}}), want: pcError, key: "charts.traefik.email"},
		{name: "charts traefik enabled", tree: charts(pcObj{"traefik": pcObj{"enabled": true}}), want: pcValid},
		{name: "charts traefik disabled", tree: charts(pcObj{"traefik": pcObj{"enabled": false}}), want: pcValid},
		{name: "charts gateway latest", tree: charts(pcObj{"gateway": pcObj{"version": "latest"}}), want: pcValid},
		{name: "charts gateway pinned newer", tree: charts(pcObj{"gateway": pcObj{"version": "v1.6.2"}}), want: pcValid},
		{name: "charts manifest entry version", tree: charts(pcObj{"crds": pcObj{"manifest": "https://example.com/x.yaml", "version": "1.0"}}), want: pcError, key: "charts.crds.version"},
		{name: "charts gateway repo", tree: charts(pcObj{"gateway": pcObj{"version": "v1.3.1", "repo": "https://a"}}), want: pcError, key: "charts.gateway.repo", text: "no repo"},
		{name: "metallb in argocd and charts", tree: charts(pcObj{"metallb": pcObj{"version": "latest"}}).set("argocd", pcObj{"metallb": pcObj{"enabled": true}}),
			want: pcError, key: "argocd.metallb.enabled", text: "MetalLB is enabled both in argocd.metallb"},
		{name: "traefik in argocd ingress and charts", tree: charts(pcObj{"traefik": pcObj{"enabled": true}}).set("argocd", pcObj{"ingress": pcObj{"enabled": true}}),
			want: pcError, key: "argocd.ingress.enabled", text: "charts.traefik"},
		{name: "cert-manager off in charts", tree: charts(pcObj{"cert-manager": pcObj{"enabled": false}}).set("argocd", pcObj{"certmanager": pcObj{"enabled": true}}), want: pcValid},
		{name: "sealed-secrets off in argocd", tree: charts(pcObj{"sealed-secrets": pcObj{}}).set("argocd", pcObj{"sealedsecrets": pcObj{"enabled": false}}), want: pcValid},
		{name: "charts init scaffold", tree: charts(pcObj{
			"ceph":           pcObj{"enabled": false, "rbd": true, "fs": true, "version": "latest"},
			"cert-manager":   pcObj{"enabled": false, "staging": false, "prod": true, "version": "latest"},
			"nfs":            pcObj{"enabled": false, "version": "latest"},
			"gateway":        pcObj{"enabled": false, "version": "latest"},
			"metallb":        pcObj{"enabled": false, "version": "latest"},
			"sealed-secrets": pcObj{"enabled": false, "version": "latest"},
			"traefik":        pcObj{"enabled": false, "version": "latest"},
		}), want: pcValid},
	}
}

func TestConformancePlugins(t *testing.T) {
	t.Parallel()
	groups := map[string][]pcCase{
		"metal":   pcMetalCases(),
		"rancher": pcRancherCases(),
		"argocd":  pcArgoCDCases(),
		"charts":  pcChartsCases(),
	}
	seen := map[string]bool{}
	for section, cases := range groups {
		for _, tc := range cases {
			name := section + "/" + tc.name
			if seen[name] {
				t.Fatalf("duplicate case name %q", name)
			}
			seen[name] = true
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				dir := writeDir(t, tc.tree, tc.files)
				pcCheck(t, dir, tc)
			})
		}
	}
}

func pcCheck(t *testing.T, dir string, tc pcCase) {
	t.Helper()
	_, warns, err := spec.Load(dir, spec.Options{})
	var errs []spec.Problem
	if err != nil {
		var se *spec.Error
		if !errors.As(err, &se) {
			t.Fatalf("Load returned a %T, want *spec.Error: %v", err, err)
		}
		errs = se.Problems
	}
	got := pcValid
	switch {
	case len(errs) > 0:
		got = pcError
	case len(warns) > 0:
		got = pcWarning
	}
	if got != tc.want {
		t.Fatalf("verdict %s, want %s\nerrors: %v\nwarnings: %v", got, tc.want, errs, warns)
	}
	if tc.key != "" || tc.text != "" {
		ps := errs
		if tc.want == pcWarning {
			ps = warns
		}
		if !hasProblem(ps, tc.key, tc.text) {
			t.Errorf("no problem with key %q and text %q:\nerrors: %v\nwarnings: %v", tc.key, tc.text, errs, warns)
		}
	}
	for _, p := range append(append([]spec.Problem{}, errs...), warns...) {
		if tc.never != "" && strings.Contains(p.String(), tc.never) {
			t.Errorf("a problem echoes a secret value: %s", p)
		}
		if p.Key == "" && tc.want == pcError && !strings.Contains(p.Message, "unknown key") {
			t.Errorf("problem without a key: %s", p)
		}
	}
}
