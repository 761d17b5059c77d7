package spec_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// The cases below replay the inputs of the Python tool's own configuration
// tests (its loader, tests/test_config.py) and the verdict each one reaches
// there: the file loads cleanly, loads with warnings, or is refused. Metal
// and plugin rules live in conformance_plugins_test.go.

// coreObj and coreList keep the table literals short.
type (
	coreObj  = map[string]any
	coreList = []any
)

// Verdicts.
const (
	coreValid   = "valid"
	coreWarning = "warning"
	coreError   = "error"
)

// coreMinimal is the smallest valid OpenStack cluster the Python tests start
// from; each case deep-merges its overrides on top of it.
func coreMinimal() tree {
	return tree{
		"name":         "testcluster",
		"talos":        coreObj{"version": "v1.13.9"},
		"kubernetes":   coreObj{"version": "v1.31.0"},
		"controlplane": coreObj{"count": 3, "flavor": "gp.medium", "disk": 40},
		"openstack": coreObj{
			"url":               "https://example.com:5000/v3/",
			"availability_zone": "nova",
			"external_net":      "ext-net",
		},
		"network": coreObj{
			"cluster": coreObj{"cidr": "192.168.0.0/21"},
			"dns":     coreList{"192.0.2.53"},
			"ntp":     coreList{"ntp.example.com"},
		},
	}
}

// coreMerge deep-merges override into base: mappings merge key by key, any
// other value replaces.
func coreMerge(base, override coreObj) coreObj {
	out := coreObj{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range override {
		if ov, ok := v.(coreObj); ok {
			if bv, ok := out[k].(coreObj); ok {
				out[k] = coreMerge(bv, ov)
				continue
			}
			out[k] = coreMerge(coreObj{}, ov)
			continue
		}
		out[k] = v
	}
	return out
}

// coreConfig is the minimal cluster with overrides merged in and the dotted
// paths in remove deleted.
func coreConfig(overrides coreObj, remove ...string) tree {
	t := tree(coreMerge(coreMinimal(), overrides))
	for _, p := range remove {
		t.del(p)
	}
	return t
}

// coreProxmox is coreConfig for a Proxmox cluster: the openstack section of
// the minimal cluster is removed.
func coreProxmox(overrides coreObj) tree {
	return coreConfig(overrides, "openstack")
}

func coreProxmoxSection(extra coreObj) coreObj {
	return coreMerge(coreObj{
		"url": "https://pve.example", "storage": "vms", "iso_storage": "isos",
	}, extra)
}

// coreProxmoxSmall is a one-control-plane Proxmox cluster on a bridge with the
// API VIP on the cluster network.
func coreProxmoxSmall(overrides coreObj) tree {
	return coreProxmox(coreMerge(coreObj{
		"controlplane": coreObj{"count": 1, "cores": 4, "memory": 8, "disk": 40},
		"network":      coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.10"}},
		"proxmox":      coreProxmoxSection(coreObj{"network": coreObj{"cluster": coreObj{"bridge": "vmbr0"}}}),
	}, overrides))
}

// coreSDN is a one-control-plane Proxmox cluster on a managed SDN.
func coreSDN(sdn coreObj, overrides coreObj) tree {
	if sdn == nil {
		sdn = coreObj{}
	}
	return coreProxmox(coreMerge(coreObj{
		"name":         "testc",
		"controlplane": coreObj{"count": 1, "cores": 4, "memory": 8, "disk": 40},
		"network":      coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.9"}},
		"proxmox": coreProxmoxSection(coreObj{
			"nodes":   coreList{"pve001", "pve002"},
			"network": coreObj{"cluster": coreObj{"sdn": sdn}},
		}),
	}, overrides))
}

// coreExternal is a one-control-plane Proxmox cluster whose API VIP and
// ingress pool live on the external network.
func coreExternal(ext, bridge coreObj) tree {
	return coreProxmox(coreObj{
		"controlplane": coreObj{"count": 1, "cores": 4, "memory": 8, "disk": 40},
		"network": coreObj{"external": coreMerge(coreObj{
			"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "anchor_cidr": "169.254.40.0/24",
			"ingress_pool": "203.0.113.20-203.0.113.40", "kubeapi_vip": "203.0.113.10",
		}, ext)},
		"proxmox": coreProxmoxSection(coreObj{"network": coreObj{
			"cluster":  coreObj{"bridge": "vmbr0"},
			"external": coreMerge(coreObj{"bridge": "vmbr1"}, bridge),
		}}),
	})
}

// coreNewNetwork is a Proxmox cluster with both L2 blocks fully described.
func coreNewNetwork() tree {
	return coreProxmox(coreObj{
		"controlplane": coreObj{"count": 1, "cores": 4, "memory": 8, "disk": 40},
		"proxmox": coreProxmoxSection(coreObj{
			"url":     "https://pve.example:8006",
			"network": coreObj{"cluster": coreObj{"bridge": "vmbr0"}, "external": coreObj{"bridge": "vmbr1"}},
		}),
		"network": coreObj{
			"cluster": coreObj{"cidr": "192.168.0.0/21", "gateway": "192.168.0.1", "vlan": 21, "mtu": 9000},
			"external": coreObj{
				"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "vlan": 1691, "kubeapi_vip": "203.0.113.10",
				"anchor_cidr": "169.254.32.0/20", "ingress_pool": "203.0.113.20-203.0.113.40",
			},
		},
	})
}

func coreWith(t tree, path string, v any) tree { return t.set(path, v) }

func coreWithout(t tree, paths ...string) tree {
	for _, p := range paths {
		t.del(p)
	}
	return t
}

// corePreRedesign and coreRedesigned are one real Proxmox cluster.yaml before
// and after the L2 facts moved into the network blocks.
const corePreRedesign = `name: farmcluster
include: [secrets.yaml]
talos:
  version: v1.13.10
  config_patches:
    - |
      machine:
        env:
          http_proxy: "http://proxy.example.edu:3128"
    - |
      apiVersion: v1alpha1
      kind: RoutingRuleConfig
      name: 0500
      dst: 203.0.113.0/24
      table: 100
kubernetes:
  version: v1.36.4
controlplane: {count: 3, cores: 4, memory: 8, disk: 40}
workers:
  worker: {count: 2, cores: 16, memory: 64, disk: 100}
proxmox:
  url: https://pve.example.edu:8006
  storage: vms
  iso_storage: isos
  cidata_storage: local
  placement_strategy: spread
  network:
    cluster:
      bridge: vmbr0
      kubeapi_vip: 192.168.100.200
    external:
      bridge: vmbr0
      vlan: 1691
      cidr: 203.0.113.0/24
      gateway: 203.0.113.1
      anchor_cidr: 169.254.32.0/20
      ingress_pool: 203.0.113.190-203.0.113.199
network:
  cidr: 192.168.100.0/24
  dns: [192.0.2.2, 192.0.2.3]
  ntp: [192.0.2.2]
security:
  kubernetes: {operator: 203.0.113.17/32}
  talos: {operator: 203.0.113.17/32}
`

const coreRedesigned = `name: farmcluster
include: [secrets.yaml]
talos:
  version: v1.13.10
  config_patches:
    - |
      machine:
        env:
          http_proxy: "http://proxy.example.edu:3128"
    - |
      apiVersion: v1alpha1
      kind: RoutingRuleConfig
      name: 0500
      dst: 203.0.113.0/24
      table: 100
kubernetes:
  version: v1.36.4
controlplane: {count: 3, cores: 4, memory: 8, disk: 40}
workers:
  worker: {count: 2, cores: 16, memory: 64, disk: 100}
proxmox:
  url: https://pve.example.edu:8006
  storage: vms
  iso_storage: isos
  cidata_storage: local
  placement_strategy: spread
  network:
    cluster: {bridge: vmbr0}
    external: {bridge: vmbr0}
network:
  cluster:
    cidr: 192.168.100.0/24
    kubeapi_vip: 192.168.100.200
  external:
    vlan: 1691
    cidr: 203.0.113.0/24
    gateway: 203.0.113.1
    anchor_cidr: 169.254.32.0/20
    ingress_pool: 203.0.113.190-203.0.113.199
  dns: [192.0.2.2, 192.0.2.3]
  ntp: [192.0.2.2]
security:
  kubernetes: {operator: 203.0.113.17/32}
  talos: {operator: 203.0.113.17/32}
`

const coreProxmoxSecrets = "proxmox:\n  token_id: \"root@pam!taloscluster\"\n  token_secret: \"01234567-89ab-cdef-0123-456789abcdef\"\n"

const coreOpenStackSecrets = "openstack: {credential_id: id, credential_secret: secret}\n"

type coreCase struct {
	name string
	tree tree
	// secrets is the text of secrets.yaml; empty means no such file. When it
	// is set and the tree has no include list, cluster.yaml includes it.
	secrets string
	// files are extra files of the directory; a "cluster.yaml" entry
	// replaces the tree.
	files map[string]string
	// symlinks maps a file name in the directory to a target outside it.
	symlinks map[string]string
	dirs     []string
	want     string
	// key must appear in one of the errors (or, for warnings, one of the
	// warnings) as the setting the problem names.
	key string
	// never must not appear anywhere in the output.
	never string
}

func coreCases() []coreCase {
	pool48 := strings.Repeat("p", 48)
	return []coreCase{
		// Pools and hostnames.
		{name: "openstack pools expand", tree: coreConfig(coreObj{
			"workers": coreObj{"worker": coreObj{"count": 2, "flavor": "gp.xlarge", "disk": 50}},
		}), want: coreValid},
		{name: "single control plane warns", tree: coreConfig(coreObj{
			"controlplane": coreObj{"count": 1, "flavor": "f", "disk": 20},
			"workers":      coreObj{"gpu": coreObj{"count": 1, "flavor": "g", "disk": 100}},
		}), want: coreWarning, key: "controlplane.count"},
		{name: "hostname of 63 characters loads", tree: coreConfig(coreObj{
			"controlplane": coreObj{"count": 1, "flavor": "f", "disk": 20},
			"workers":      coreObj{pool48: coreObj{"count": 99, "flavor": "f", "disk": 20}},
		}), want: coreWarning, key: "controlplane.count"},
		{name: "hostname past 63 characters at a three-digit ordinal", tree: coreConfig(coreObj{
			"controlplane": coreObj{"count": 1, "flavor": "f", "disk": 20},
			"workers":      coreObj{pool48: coreObj{"count": 100, "flavor": "f", "disk": 20}},
		}), want: coreError, key: "workers." + pool48},
		{name: "hostname length counts a pool of zero", tree: coreConfig(coreObj{
			"workers": coreObj{strings.Repeat("q", 49): coreObj{"count": 0, "flavor": "f", "disk": 20}},
		}), want: coreError, key: "workers.qqq"},

		// Extensions, patches and tailscale opt-in.
		{name: "tailscale section with https login server", tree: coreConfig(coreObj{"tailscale": coreObj{"login_server": "https://hs.example"}}), want: coreValid},
		{name: "null tailscale section", tree: coreConfig(coreObj{"tailscale": nil}), want: coreValid},
		{name: "cluster and pool extensions", tree: coreConfig(coreObj{
			"tailscale": coreObj{"login_server": "https://hs.example"},
			"talos":     coreObj{"extensions": coreList{"siderolabs/nvidia-gpu"}},
			"workers":   coreObj{"worker": coreObj{"count": 1, "flavor": "f", "disk": 20, "extensions": coreList{"siderolabs/nvidia-gpu", "extra/thing"}}},
		}), want: coreValid},
		{name: "cluster and pool config patches", tree: coreConfig(coreObj{
			"talos":   coreObj{"config_patches": coreList{"cluster-patch-1", "cluster-patch-2"}},
			"workers": coreObj{"worker": coreObj{"count": 1, "flavor": "f", "disk": 20, "config_patches": coreList{"pool-patch-1"}}},
		}), want: coreValid},
		{name: "pools with distinct extension sets", tree: coreConfig(coreObj{
			"talos": coreObj{"extensions": coreList{"extra/only-cluster"}},
			"workers": coreObj{
				"worker": coreObj{"count": 2, "flavor": "f", "disk": 20},
				"gpu":    coreObj{"count": 1, "flavor": "g", "disk": 100, "extensions": coreList{"siderolabs/nvidia-gpu"}},
			},
		}), want: coreValid},

		// Required keys and integers.
		{name: "name missing", tree: coreConfig(nil, "name"), want: coreError, key: "name"},
		{name: "talos version missing", tree: coreConfig(nil, "talos.version"), want: coreError, key: "talos.version"},
		{name: "openstack pool without flavor", tree: coreConfig(coreObj{"workers": coreObj{"worker": coreObj{"count": 2, "disk": 40}}}), want: coreError, key: "workers.worker.flavor"},
		{name: "control plane count not a number", tree: coreConfig(coreObj{"controlplane": coreObj{"count": "three"}}), want: coreError, key: "controlplane.count"},
		{name: "worker count not a number", tree: coreConfig(coreObj{"workers": coreObj{"worker": coreObj{"count": "two", "flavor": "f", "disk": 20}}}), want: coreError, key: "workers.worker.count"},
		{name: "name with capitals and underscore", tree: coreConfig(coreObj{"name": "Bad_Name"}), want: coreError, key: "name"},
		{name: "name that is a number", tree: coreConfig(coreObj{"name": 123}), want: coreError, key: "name"},
		{name: "talos version not a release", tree: coreConfig(coreObj{"talos": coreObj{"version": "latest"}}), want: coreError, key: "talos.version"},
		{name: "talos older than the minimum", tree: coreConfig(coreObj{"talos": coreObj{"version": "v1.12.9"}}), want: coreError, key: "talos.version"},
		{name: "kubernetes below the talos range", tree: coreConfig(coreObj{"kubernetes": coreObj{"version": "v1.30.0"}}), want: coreError, key: "kubernetes.version"},
		{name: "kubernetes above the talos range", tree: coreConfig(coreObj{"kubernetes": coreObj{"version": "v1.37.0"}}), want: coreError, key: "kubernetes.version"},
		{name: "cluster cidr not a network", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"cidr": "not-a-cidr"}}}), want: coreError, key: "network.cluster.cidr"},
		{name: "control plane count zero", tree: coreConfig(coreObj{"controlplane": coreObj{"count": 0}}), want: coreError, key: "controlplane"},
		{name: "worker count negative", tree: coreConfig(coreObj{"workers": coreObj{"worker": coreObj{"count": -1, "flavor": "f", "disk": 20}}}), want: coreError, key: "count"},
		{name: "worker pool named controlplane", tree: coreConfig(coreObj{"workers": coreObj{"controlplane": coreObj{"count": 1, "flavor": "f", "disk": 20}}}), want: coreError, key: "workers.controlplane"},
		{name: "workers is a list", tree: coreConfig(coreObj{"workers": coreList{}}), want: coreError, key: "workers"},
		{name: "tags is a list", tree: coreConfig(coreObj{"tags": coreList{}}), want: coreError, key: "tags"},
		{name: "talos extensions is a mapping", tree: coreConfig(coreObj{"talos": coreObj{"extensions": coreObj{}}}), want: coreError, key: "talos.extensions"},
		{name: "dns is a string", tree: coreConfig(coreObj{"network": coreObj{"dns": "192.0.2.53"}}), want: coreError, key: "network.dns"},

		// Versions.
		{name: "talos version without v", tree: coreConfig(coreObj{"talos": coreObj{"version": "1.13.9"}}), want: coreValid},
		{name: "kubernetes at the top of the talos range", tree: coreConfig(coreObj{"kubernetes": coreObj{"version": "v1.36.4"}}), want: coreValid},
		{name: "talos minor outside the support table is not judged", tree: coreConfig(coreObj{"talos": coreObj{"version": "v1.15.0"}, "kubernetes": coreObj{"version": "v1.40.0"}}), want: coreValid},
		{name: "talos 1.14 with kubernetes 1.36", tree: coreConfig(coreObj{"talos": coreObj{"version": "v1.14.2"}, "kubernetes": coreObj{"version": "v1.36.0"}}), want: coreValid},
		{name: "talos version as a float", tree: coreConfig(coreObj{"talos": coreObj{"version": 1.13}}), want: coreError, key: "talos.version"},
		{name: "kubernetes version without v", tree: coreConfig(coreObj{"kubernetes": coreObj{"version": "1.31.0"}}), want: coreValid},
		{name: "kubernetes version as a float", tree: coreConfig(coreObj{"kubernetes": coreObj{"version": 1.31}}), want: coreError, key: "kubernetes.version"},
		{name: "version with surrounding space", tree: coreConfig(coreObj{"talos": coreObj{"version": " v1.13.9"}}), want: coreError, key: "talos.version"},
		{name: "kubespan on", tree: coreConfig(coreObj{"talos": coreObj{"kubespan": true}}), want: coreValid},
		{name: "kubespan as a string", tree: coreConfig(coreObj{"talos": coreObj{"kubespan": "off"}}), want: coreError, key: "talos.kubespan"},

		// Warnings.
		{name: "even control plane count", tree: coreConfig(coreObj{"controlplane": coreObj{"count": 2, "flavor": "f", "disk": 20}}), want: coreWarning, key: "controlplane.count"},
		{name: "three control planes give no warning", tree: coreConfig(coreObj{"controlplane": coreObj{"count": 3, "flavor": "f", "disk": 20}}), want: coreValid},
		{name: "cluster network inside the pod network", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"cidr": "10.244.7.0/24"}}}), want: coreWarning, key: "network.cluster.cidr"},
		{name: "cluster network overlapping the service network", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"cidr": "10.100.0.0/16"}}}), want: coreWarning, key: "network.cluster.cidr"},
		{name: "ten-slash-sixteen clear of the kubernetes networks", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"cidr": "10.10.0.0/16"}}}), want: coreValid},
		{name: "dns on a proxmox bridge is ignored", tree: coreProxmoxSmall(nil), want: coreWarning, key: "network.dns"},
		{name: "empty dns on a proxmox bridge", tree: coreProxmoxSmall(coreObj{"network": coreObj{"dns": coreList{}}}), want: coreWarning, key: "controlplane.count"},
		{name: "dns on openstack is used", tree: coreConfig(nil), want: coreValid},
		{name: "dns on a proxmox sdn is used", tree: coreSDN(nil, nil), want: coreWarning, key: "controlplane.count"},

		// Tags.
		{name: "cluster tags", tree: coreConfig(coreObj{"tags": coreObj{"team": "platform"}}), want: coreValid},
		{name: "pool tags override cluster tags", tree: coreConfig(coreObj{
			"tags":    coreObj{"team": "platform", "tier": "shared"},
			"workers": coreObj{"worker": coreObj{"count": 1, "flavor": "f", "disk": 20, "tags": coreObj{"tier": "gpu"}}},
		}), want: coreValid},
		{name: "tag value that is a number", tree: coreConfig(coreObj{"tags": coreObj{"cost-center": 1234}}), want: coreValid},
		{name: "tag value that is a list", tree: coreConfig(coreObj{"tags": coreObj{"owners": coreList{"a", "b"}}}), want: coreValid},

		// Provider selection.
		{name: "openstack region", tree: coreConfig(coreObj{"openstack": coreObj{"region": "region-b"}}), want: coreValid},
		{name: "empty openstack region falls back to the default", tree: coreConfig(coreObj{"openstack": coreObj{"region": ""}}), want: coreValid},
		{name: "no provider section", tree: coreConfig(nil, "openstack"), want: coreError, key: "one provider section is required: openstack or proxmox", never: "metal"},
		{name: "two provider sections", tree: coreConfig(coreObj{"proxmox": coreObj{"url": "https://pve.example"}}), want: coreError, key: "at most one VM provider"},
		{name: "metal groups beside openstack", tree: coreConfig(coreObj{
			"network": coreObj{"cluster": coreObj{"gateway": "192.168.0.1"}},
			"metal": coreObj{
				"cp":     coreObj{"role": "controlplane", "disk": "/dev/sda"},
				"worker": coreObj{"role": "worker", "disk": "/dev/sda"},
			},
		}), want: coreValid},
		{name: "metal without a vm provider", tree: coreConfig(coreObj{
			"controlplane": coreObj{"count": 3, "disk": 40},
			"metal": coreObj{"worker": coreObj{
				"role": "worker", "disk": "/dev/sda",
				"interfaces": coreObj{"enp1s0f0": coreObj{"role": "cluster", "ip": "192.168.0.5/21"}},
				"servers":    coreObj{"srv01-worker": coreObj{}},
			}},
		}, "openstack"), want: coreError, key: "metal"},
		{name: "openstack url that is a number", tree: coreConfig(coreObj{"openstack": coreObj{"url": 5}}), want: coreError, key: "openstack.url"},

		// Proxmox.
		{name: "proxmox section with every key", tree: coreProxmox(coreObj{
			"controlplane": coreObj{"count": 3, "cores": 4, "memory": 8, "disk": 40},
			"workers":      coreObj{"worker": coreObj{"count": 1, "cores": 8, "memory": 16, "disk": 100}},
			"network":      coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.10"}},
			"proxmox": coreProxmoxSection(coreObj{
				"url": "https://pve.example:8006", "cidata_storage": "local", "placement_strategy": "spread",
				"nodes": coreList{"pve001", "pve002"}, "network": coreObj{"cluster": coreObj{"bridge": "vmbr0"}},
			}),
		}), want: coreWarning, key: "network.dns"},
		{name: "proxmox without storage", tree: coreWithout(coreProxmoxSmall(coreObj{"name": "testc"}), "proxmox.storage"), want: coreError, key: "proxmox.storage"},
		{name: "proxmox bridge and vnet", tree: coreProxmoxSmall(coreObj{"name": "testc", "proxmox": coreObj{"network": coreObj{"cluster": coreObj{"vnet": "talos"}}}}), want: coreError, key: "proxmox.network.cluster"},
		{name: "proxmox vip outside the cluster cidr", tree: coreProxmoxSmall(coreObj{"name": "testc", "network": coreObj{"cluster": coreObj{"kubeapi_vip": "203.0.113.10"}}}), want: coreError, key: "network.cluster.kubeapi_vip"},
		{name: "proxmox bridge with sdn", tree: coreProxmoxSmall(coreObj{"name": "testc", "network": coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.9"}}, "proxmox": coreObj{"network": coreObj{"cluster": coreObj{"sdn": coreObj{}}}}}), want: coreError, key: "proxmox.network.cluster.sdn"},
		{name: "sdn zone other than evpn", tree: coreSDN(coreObj{"zone": "vlan"}, nil), want: coreError, key: "proxmox.network.cluster.sdn.zone"},
		{name: "sdn default tag out of range", tree: coreSDN(coreObj{"vrf_tag": 16777215}, nil), want: coreError, key: "proxmox.network.cluster.sdn"},
		{name: "sdn exit node outside sdn nodes", tree: coreSDN(coreObj{"nodes": coreList{"pve001"}, "exit_nodes": coreList{"pve002"}}, coreObj{"proxmox": coreObj{"nodes": nil}}), want: coreError, key: "proxmox.network.cluster.sdn.exit_nodes"},
		{name: "sdn nodes missing a proxmox node", tree: coreSDN(coreObj{"nodes": coreList{"pve001", "pve002"}}, coreObj{"proxmox": coreObj{"nodes": coreList{"pve001", "pve003"}}}), want: coreError, key: "proxmox.network.cluster.sdn.nodes"},
		{name: "sdn vip on the anycast gateway", tree: coreSDN(nil, coreObj{"network": coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.1"}}}), want: coreError, key: "network.cluster.kubeapi_vip"},
		{name: "sdn vip on a node address", tree: coreSDN(nil, coreObj{"network": coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.11"}}}), want: coreError, key: "network.cluster.kubeapi_vip"},
		{name: "sdn vip on a reserved control plane slot", tree: coreSDN(nil, coreObj{"network": coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.12"}}}), want: coreError, key: "network.cluster.kubeapi_vip"},
		{name: "sdn tag equal to vrf_tag", tree: coreSDN(coreObj{"vrf_tag": 100, "tag": 100}, nil), want: coreError, key: "proxmox.network.cluster.sdn.tag"},
		{name: "sdn mtu below the cluster mtu", tree: coreSDN(coreObj{"mtu": 1450}, nil), want: coreError, key: "proxmox.network.cluster.sdn.mtu"},
		{name: "sdn primary exit node not an exit node", tree: coreSDN(coreObj{"exit_nodes": coreList{"pve001", "pve002"}, "primary_exit_node": "pve003"}, nil), want: coreError, key: "proxmox.network.cluster.sdn.primary_exit_node"},
		{name: "sdn id from a cluster name that does not fit", tree: coreSDN(nil, coreObj{"name": "testcluster"}), want: coreError, key: "proxmox.network.cluster.sdn.name"},
		{name: "sdn null controller is the default", tree: coreSDN(coreObj{"controller": nil}, nil), want: coreWarning, key: "controlplane.count"},
		{name: "sdn vip at the broadcast address", tree: coreSDN(nil, coreObj{"network": coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.7.255"}}}), want: coreWarning, key: "controlplane.count"},
		{name: "external network carries the vip", tree: coreExternal(nil, nil), want: coreWarning, key: "network.dns"},
		{name: "vip on the cluster network beside an external network", tree: coreProxmox(coreObj{
			"controlplane": coreObj{"count": 1, "cores": 4, "memory": 8, "disk": 40},
			"network": coreObj{
				"cluster":  coreObj{"kubeapi_vip": "192.168.0.10"},
				"external": coreObj{"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "anchor_cidr": "169.254.40.0/24"},
			},
			"proxmox": coreProxmoxSection(coreObj{"network": coreObj{"cluster": coreObj{"bridge": "vmbr0"}, "external": coreObj{"bridge": "vmbr1"}}}),
		}), want: coreWarning, key: "network.dns"},
		{name: "vip in both network blocks", tree: coreWith(coreExternal(nil, nil), "network.cluster.kubeapi_vip", "192.168.0.10"), want: coreError, key: "kubeapi_vip"},
		{name: "vip in neither network block", tree: coreWithout(coreExternal(nil, nil), "network.external.kubeapi_vip", "network.external.ingress_pool"), want: coreError, key: "kubeapi_vip"},
		{name: "external bridge empty", tree: coreExternal(nil, coreObj{"bridge": ""}), want: coreError, key: "proxmox.network.external.bridge"},
		{name: "external cidr empty", tree: coreExternal(coreObj{"cidr": ""}, nil), want: coreError, key: "network.external.cidr"},
		{name: "external gateway outside", tree: coreExternal(coreObj{"gateway": "10.0.0.1"}, nil), want: coreError, key: "network.external.gateway"},
		{name: "external anchor outside link-local", tree: coreExternal(coreObj{"anchor_cidr": "10.0.0.0/24"}, nil), want: coreError, key: "network.external.anchor_cidr"},
		{name: "external vip outside the external cidr", tree: coreExternal(coreObj{"kubeapi_vip": "192.168.0.10"}, nil), want: coreError, key: "network.external.kubeapi_vip"},
		{name: "external ingress pool reversed", tree: coreExternal(coreObj{"ingress_pool": "203.0.113.50-203.0.113.10"}, nil), want: coreError, key: "network.external.ingress_pool"},
		{name: "external ingress pool end invalid", tree: coreExternal(coreObj{"ingress_pool": "203.0.113.50-999.999.999.999"}, nil), want: coreError, key: "network.external.ingress_pool"},
		{name: "external vip inside the ingress pool", tree: coreExternal(coreObj{"kubeapi_vip": "203.0.113.30"}, nil), want: coreError, key: "network.external.kubeapi_vip"},
		{name: "external anchor with host bits", tree: coreExternal(coreObj{"anchor_cidr": "169.254.40.7/24"}, nil), want: coreWarning, key: "network.dns"},
		{name: "empty proxmox external block without a network block", tree: coreProxmoxSmall(coreObj{"proxmox": coreObj{"network": coreObj{"external": coreObj{}}}}), want: coreWarning, key: "network.dns"},
		{name: "empty placement strategy is the default", tree: coreProxmoxSmall(coreObj{"proxmox": coreObj{"placement_strategy": ""}}), want: coreWarning, key: "network.dns"},
		{name: "empty bridge beside a vnet", tree: coreProxmoxSmall(coreObj{"proxmox": coreObj{"network": coreObj{"cluster": coreObj{"bridge": "", "vnet": "v1"}}}}), want: coreWarning, key: "network.dns"},
		{name: "proxmox pool flavor is ignored", tree: coreProxmoxSmall(coreObj{"controlplane": coreObj{"flavor": ""}}), want: coreWarning, key: "network.dns"},
		{name: "openstack pool sizing is ignored", tree: coreConfig(coreObj{"controlplane": coreObj{"cores": 0, "memory": "lots", "node": ""}}), want: coreValid},

		// Credentials load without being judged.
		{name: "openstack credentials in secrets.yaml", tree: coreConfig(nil), secrets: coreOpenStackSecrets, want: coreValid},
		{name: "proxmox credentials in secrets.yaml", tree: coreProxmoxSmall(nil), secrets: "proxmox: {token_id: user@pve!provider, token_secret: secret}\n", want: coreWarning, key: "network.dns"},
		{name: "credentials in another include", tree: coreConfig(coreObj{"include": coreList{"creds.yaml"}}), files: map[string]string{"creds.yaml": coreOpenStackSecrets}, want: coreValid},
		{name: "credentials in cluster.yaml", tree: coreConfig(coreObj{"openstack": coreObj{"credential_id": "id", "credential_secret": "secret"}}), want: coreValid},
		{name: "credential set in two files", tree: coreConfig(coreObj{"openstack": coreObj{"credential_id": "from-cluster"}}), secrets: "openstack: {credential_id: from-secrets}\n", want: coreError, key: "openstack.credential_id"},
		{name: "null credential", tree: coreConfig(nil), secrets: "openstack: {credential_id: null, credential_secret: secret}\n", want: coreValid},
		{name: "numeric credential", tree: coreConfig(nil), secrets: "openstack: {credential_id: 123, credential_secret: secret}\n", want: coreValid},
		{name: "empty credential", tree: coreConfig(nil), secrets: "openstack: {credential_id: id, credential_secret: ''}\n", want: coreValid},
		{name: "placeholder credential", tree: coreConfig(nil), secrets: "openstack: {credential_id: CHANGE-ME, credential_secret: secret}\n", want: coreValid},
		{name: "credential that is a list", tree: coreConfig(nil), secrets: "openstack: {credential_id: [a], credential_secret: secret}\n", want: coreValid},
		{name: "numeric proxmox token", tree: coreProxmoxSmall(nil), secrets: "proxmox: {token_id: u@pve!t, token_secret: 42}\n", want: coreWarning, key: "network.dns"},
		{name: "the other provider's credentials", tree: coreConfig(nil), secrets: "proxmox: {token_id: user@pve!provider, token_secret: secret}\n", want: coreError, key: "at most one VM provider"},
		{name: "tailscale without a key", tree: coreConfig(coreObj{"tailscale": coreObj{"auth_key": nil}}), secrets: coreOpenStackSecrets, want: coreValid},
		{name: "empty tailscale section", tree: coreConfig(coreObj{"tailscale": coreObj{}}), want: coreValid},
		{name: "tailscale key", tree: coreConfig(coreObj{"tailscale": coreObj{"auth_key": "tskey-auth-abc123"}}), want: coreValid},
		{name: "tailscale placeholder key", tree: coreConfig(coreObj{"tailscale": coreObj{"auth_key": "CHANGE-ME"}}), want: coreValid},
		{name: "numeric tailscale key", tree: coreConfig(nil), secrets: coreOpenStackSecrets + "tailscale: {auth_key: 42}\n", want: coreValid, never: "42"},
		{name: "empty tailscale key", tree: coreConfig(nil), secrets: coreOpenStackSecrets + "tailscale: {auth_key: ''}\n", want: coreValid},
		{name: "http login server", tree: coreConfig(coreObj{"tailscale": coreObj{"login_server": "http://headscale.example.edu"}}), want: coreError, key: "tailscale.login_server"},
		{name: "login server without a scheme", tree: coreConfig(coreObj{"tailscale": coreObj{"login_server": "headscale.example.edu"}}), want: coreError, key: "tailscale.login_server"},

		// Security rules.
		{name: "legacy security shape", tree: coreConfig(coreObj{"security": coreObj{
			"kubernetes": coreObj{"vpn": "172.16.0.0/16"}, "talos": coreObj{"vpn": "172.16.0.0/16"},
		}}), want: coreValid},
		{name: "named rule without port", tree: coreConfig(coreObj{"security": coreObj{"metrics": coreObj{"hosts": coreObj{"vpn": "172.16.0.0/16"}}}}), want: coreError, key: "security.metrics"},
		{name: "named rule with port", tree: coreConfig(coreObj{"security": coreObj{"metrics": coreObj{"port": 9100, "hosts": coreObj{"vpn": "172.16.0.0/16"}}}}), want: coreValid},
		{name: "hosts shape with a default port", tree: coreConfig(coreObj{"security": coreObj{"talos": coreObj{"hosts": coreObj{"vpn": "172.16.0.0/16"}}}}), want: coreValid},
		{name: "security rule with an unknown key", tree: coreConfig(coreObj{"security": coreObj{"talos": coreObj{"hosts": coreObj{"vpn": "172.16.0.0/16"}, "protocol": "udp"}}}), want: coreError, key: "security.talos"},
		{name: "security port out of range", tree: coreConfig(coreObj{"security": coreObj{"metrics": coreObj{"port": 70000, "hosts": coreObj{}}}}), want: coreError, key: "security.metrics.port"},
		{name: "http and https open by default", tree: coreConfig(coreObj{"security": coreObj{"talos": coreObj{"vpn": "172.16.0.0/16"}}}), want: coreValid},
		{name: "http rule", tree: coreConfig(coreObj{"security": coreObj{"http": coreObj{"hosts": coreObj{"office": "203.0.113.0/24"}}}}), want: coreValid},
		{name: "https rule with no hosts", tree: coreConfig(coreObj{"security": coreObj{"https": coreObj{"hosts": coreObj{}}}}), want: coreValid},
		{name: "named rule with an invalid cidr", tree: coreConfig(coreObj{"security": coreObj{"metrics": coreObj{"port": 9100, "hosts": coreObj{"vpn": "nope"}}}}), want: coreError, key: "security.metrics.vpn"},
		{name: "bare address host", tree: coreConfig(coreObj{"security": coreObj{"talos": coreObj{"vpn": "198.51.100.7"}}}), want: coreValid},
		{name: "http on another port", tree: coreConfig(coreObj{"security": coreObj{"http": coreObj{"port": 8080, "hosts": coreObj{"office": "203.0.113.0/24"}}}}), want: coreError, key: "security.http"},
		{name: "https on another port", tree: coreConfig(coreObj{"security": coreObj{"https": coreObj{"port": 8443, "hosts": coreObj{}}}}), want: coreError, key: "security.https"},
		{name: "https restating its port", tree: coreConfig(coreObj{"security": coreObj{"https": coreObj{"port": 443, "hosts": coreObj{"office": "203.0.113.0/24"}}}}), want: coreValid},
		{name: "another rule claiming 443", tree: coreConfig(coreObj{"security": coreObj{"ingress": coreObj{"port": 443, "hosts": coreObj{"office": "203.0.113.0/24"}}}}), want: coreValid},
		{name: "null rule with a default port", tree: coreConfig(coreObj{"security": coreObj{"https": nil}}), want: coreValid},
		{name: "null rule without a default port", tree: coreConfig(coreObj{"security": coreObj{"metrics": nil}}), want: coreError, key: "security.metrics"},
		{name: "null port on a default rule", tree: coreConfig(coreObj{"security": coreObj{"talos": coreObj{"port": nil, "hosts": coreObj{}}}}), want: coreError, key: "security.talos"},
		{name: "security cidr in netmask form", tree: coreConfig(coreObj{"security": coreObj{"talos": coreObj{"office": "10.0.0.0/255.0.0.0"}}}), want: coreValid},

		// Managed SDN.
		{name: "sdn with every default", tree: coreSDN(nil, nil), want: coreWarning, key: "controlplane.count"},
		{name: "bridge beside a vip", tree: coreProxmoxSmall(coreObj{"network": coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.9"}}}), want: coreWarning, key: "network.dns"},
		{name: "sdn without dns", tree: coreWithout(coreSDN(nil, coreObj{"network": coreObj{"dns": coreList{}}}), "network.cluster.kubeapi_vip"), want: coreError, key: "network.dns"},
		{name: "sdn name overrides a long cluster name", tree: coreSDN(coreObj{"name": "grid"}, coreObj{"name": "a-cluster-name-too-long-for-sdn-ids"}), want: coreWarning, key: "controlplane.count"},
		{name: "sdn vip inside a worker pool block", tree: coreSDN(nil, coreObj{
			"workers": coreObj{"worker": coreObj{"count": 1, "cores": 4, "memory": 8, "disk": 40}},
			"network": coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.65"}},
		}), want: coreError, key: "network.cluster.kubeapi_vip"},
		{name: "sdn mtu below a jumbo cluster mtu", tree: coreSDN(coreObj{"mtu": 8950}, coreObj{"network": coreObj{"cluster": coreObj{"mtu": 9000}}}), want: coreError, key: "proxmox.network.cluster.sdn.mtu"},
		{name: "sdn mtu matching the cluster mtu", tree: coreSDN(coreObj{"mtu": 8950}, coreObj{"network": coreObj{"cluster": coreObj{"mtu": 8950}}}), want: coreWarning, key: "controlplane.count"},

		// The SDN id and static layout (naming rules, seen through the loader).
		{name: "sdn id with capitals", tree: coreSDN(coreObj{"name": "Bob1"}, nil), want: coreWarning, key: "controlplane.count"},
		{name: "sdn id with a hyphen", tree: coreSDN(coreObj{"name": "my-clstr"}, nil), want: coreError, key: "proxmox.network.cluster.sdn.name"},
		{name: "sdn id starting with a digit", tree: coreSDN(coreObj{"name": "1cluster"}, nil), want: coreError, key: "proxmox.network.cluster.sdn.name"},
		{name: "sdn id of one character", tree: coreSDN(coreObj{"name": "a"}, nil), want: coreError, key: "proxmox.network.cluster.sdn.name"},
		{name: "sdn worker block past the broadcast address", tree: coreSDN(nil, coreObj{
			"workers": coreObj{"gpu": coreObj{"count": 1, "cores": 4, "memory": 8, "disk": 40}},
			"network": coreObj{"cluster": coreObj{"cidr": "10.0.0.0/28", "kubeapi_vip": "10.0.0.5"}},
		}), want: coreError, key: "workers.gpu"},
		{name: "sdn fifty control planes", tree: coreSDN(nil, coreObj{"controlplane": coreObj{"count": 50}}), want: coreError, key: "controlplane.count"},
		{name: "sdn forty-nine control planes", tree: coreSDN(nil, coreObj{"controlplane": coreObj{"count": 49}}), want: coreValid},
		{name: "sdn worker pool of fifty", tree: coreSDN(nil, coreObj{"workers": coreObj{"gpu": coreObj{"count": 50, "cores": 4, "memory": 8, "disk": 40}}}), want: coreError, key: "workers.gpu.count"},
		{name: "sdn vip past the last pool block", tree: coreSDN(nil, coreObj{
			"workers": coreObj{"gpu": coreObj{"count": 1, "cores": 4, "memory": 8, "disk": 40}, "web": coreObj{"count": 2, "cores": 4, "memory": 8, "disk": 40}},
			"network": coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.200"}},
		}), want: coreWarning, key: "controlplane.count"},
		{name: "sdn vip in the second pool block", tree: coreSDN(nil, coreObj{
			"workers": coreObj{"gpu": coreObj{"count": 1, "cores": 4, "memory": 8, "disk": 40}, "web": coreObj{"count": 2, "cores": 4, "memory": 8, "disk": 40}},
			"network": coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.111"}},
		}), want: coreError, key: "network.cluster.kubeapi_vip"},
		{name: "talos pre-release of the minimum", tree: coreConfig(coreObj{"talos": coreObj{"version": "v1.13.0-beta.1"}}), want: coreValid},
		{name: "kubernetes version with build metadata", tree: coreConfig(coreObj{"kubernetes": coreObj{"version": "v1.35.2+talos"}}), want: coreValid},

		// Unknown keys.
		{name: "unknown top-level key", tree: coreConfig(coreObj{"clustrer": "oops"}), want: coreError, key: "clustrer"},
		{name: "every unknown top-level key is listed", tree: coreConfig(coreObj{"anemia": 1, "mistkes": 2}), want: coreError, key: "anemia, mistkes"},
		{name: "plugin sections are accepted", tree: coreConfig(coreObj{"argocd": coreObj{"admins": coreList{}, "users": coreList{}}, "rancher": coreObj{"admins": coreList{}, "users": coreList{}}}), want: coreValid},
		{name: "unknown top-level key in secrets.yaml", tree: coreConfig(nil), secrets: "taliscla: {auth_key: x}\n", want: coreError, key: "taliscla"},
		{name: "unowned plugin section in secrets.yaml", tree: coreConfig(nil), secrets: "gitlab: {url: x}\n", want: coreError, key: "gitlab"},
		{name: "unknown talos key", tree: coreConfig(coreObj{"talos": coreObj{"extensons": coreList{"siderolabs/foo"}}}), want: coreError, key: "extensons"},
		{name: "unknown network key", tree: coreConfig(coreObj{"network": coreObj{"dnss": coreList{"192.0.2.53"}}}), want: coreError, key: "dnss"},
		{name: "unknown openstack key", tree: coreConfig(coreObj{"openstack": coreObj{"regoin": "RegionTwo"}}), want: coreError, key: "regoin"},
		{name: "unknown kubernetes key", tree: coreConfig(coreObj{"kubernetes": coreObj{"verson": "v1.31.0"}}), want: coreError, key: "verson"},
		{name: "unknown tailscale key", tree: coreConfig(coreObj{"tailscale": coreObj{"login_serer": "https://hs.example"}}), want: coreError, key: "login_serer"},
		{name: "unknown control plane key", tree: coreConfig(coreObj{"controlplane": coreObj{"flavr": "x"}}), want: coreError, key: "flavr"},
		{name: "unknown worker pool key", tree: coreConfig(coreObj{"workers": coreObj{"worker": coreObj{"count": 1, "flavor": "f", "disk": 20, "cors": 4}}}), want: coreError, key: "cors"},
		{name: "unknown proxmox.network key", tree: coreProxmoxSmall(coreObj{"name": "testc", "proxmox": coreObj{"network": coreObj{"clustr": coreObj{}}}}), want: coreError, key: "clustr"},
		{name: "unknown proxmox.network.cluster key", tree: coreProxmoxSmall(coreObj{"name": "testc", "proxmox": coreObj{"network": coreObj{"cluster": coreObj{"vlna": 321}}}}), want: coreError, key: "vlna"},
		{name: "proxmox external plumbing", tree: coreWithout(coreExternal(coreObj{"kubeapi_vip": nil}, nil), "network.external.kubeapi_vip").set("network.cluster.kubeapi_vip", "192.168.0.9").set("name", "testc"), want: coreWarning, key: "network.dns"},
		{name: "unknown proxmox.network.external key", tree: coreExternal(nil, coreObj{"bridg": "vmbr2"}), want: coreError, key: "bridg"},
		{name: "unknown sdn key", tree: coreSDN(coreObj{"muta": 8950}, nil), want: coreError, key: "muta"},
		{name: "misspelled sdn exit nodes", tree: coreSDN(coreObj{"exit_ndoes": coreList{"pve1"}}, nil), want: coreError, key: "exit_ndoes"},
		{name: "free-form tags and patches", tree: coreConfig(coreObj{
			"tags":    coreObj{"team": "platform", "x": "y"},
			"workers": coreObj{"worker": coreObj{"count": 1, "flavor": "f", "disk": 20, "tags": coreObj{"workload": "gpu"}, "config_patches": coreList{"machine:\n  sysctls:\n    x: y"}}},
		}), want: coreValid},
		{name: "unknown openstack key in secrets.yaml", tree: coreConfig(nil), secrets: "openstack: {credential_id: a, regoin: x}\n", want: coreError, key: "regoin"},
		{name: "unknown tailscale key in secrets.yaml", tree: coreConfig(nil), secrets: "tailscale: {auth_key: x, authky: y}\n", want: coreError, key: "authky"},
		{name: "unknown key in an all-null external block", tree: coreConfig(coreObj{"network": coreObj{"external": coreObj{"cidrr": nil}}}), want: coreError, key: "cidrr"},

		// The network blocks.
		{name: "both network blocks", tree: coreNewNetwork(), want: coreWarning, key: "network.dns"},
		{name: "cluster block mtu defaults", tree: coreConfig(nil), want: coreValid},
		{name: "cluster cidr missing", tree: coreConfig(nil, "network.cluster.cidr"), want: coreError, key: "network.cluster.cidr"},
		{name: "anchor under the cluster block", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"anchor_cidr": "169.254.32.0/20"}}}), want: coreError, key: "network.cluster.anchor_cidr"},
		{name: "ingress pool under the cluster block", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"ingress_pool": "192.168.0.20-192.168.0.40"}}}), want: coreError, key: "network.cluster.ingress_pool"},
		{name: "cluster cidr with host bits", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"cidr": "192.168.0.5/21"}}}), want: coreError, key: "network.cluster.cidr"},
		{name: "cluster gateway outside", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"gateway": "10.0.0.1"}}}), want: coreError, key: "network.cluster.gateway"},
		{name: "cluster gateway not an address", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"gateway": "nope"}}}), want: coreError, key: "network.cluster.gateway"},
		{name: "cluster vlan out of range", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"vlan": 4095}}}), want: coreError, key: "network.cluster.vlan"},
		{name: "cluster vlan not a number", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"vlan": "many"}}}), want: coreError, key: "network.cluster.vlan"},
		{name: "cluster mtu too small", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"mtu": 1000}}}), want: coreError, key: "network.cluster.mtu"},
		{name: "cluster mtu not a number", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"mtu": "jumbo"}}}), want: coreError, key: "network.cluster.mtu"},
		{name: "cluster mtu above 65535", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"mtu": 70000}}}), want: coreValid},
		{name: "cluster vip outside on openstack", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"kubeapi_vip": "203.0.113.10"}}}), want: coreError, key: "network.cluster.kubeapi_vip"},
		{name: "unknown cluster block key", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"unknwn": 1}}}), want: coreError, key: "unknwn"},
		{name: "cluster cidr as a bare address", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"cidr": "192.168.0.0"}}}), want: coreValid},
		{name: "external anchor outside link-local (new blocks)", tree: coreWith(coreNewNetwork(), "network.external.anchor_cidr", "10.0.0.0/24"), want: coreError, key: "network.external.anchor_cidr"},
		{name: "external vip outside (new blocks)", tree: coreWith(coreNewNetwork(), "network.external.kubeapi_vip", "192.168.0.10"), want: coreError, key: "network.external.kubeapi_vip"},
		{name: "external ingress pool reversed (new blocks)", tree: coreWith(coreNewNetwork(), "network.external.ingress_pool", "203.0.113.40-203.0.113.20"), want: coreError, key: "network.external.ingress_pool"},
		{name: "external ingress pool not a range", tree: coreWith(coreNewNetwork(), "network.external.ingress_pool", "203.0.113.20"), want: coreError, key: "network.external.ingress_pool"},
		{name: "external ingress pool outside", tree: coreWith(coreNewNetwork(), "network.external.ingress_pool", "10.0.0.1-10.0.0.9"), want: coreError, key: "network.external.ingress_pool"},
		{name: "unknown external block key", tree: coreWith(coreNewNetwork(), "network.external.unknwn", 1), want: coreError, key: "unknwn"},
		{name: "external vip inside the ingress pool (new blocks)", tree: coreWith(coreNewNetwork(), "network.external.kubeapi_vip", "203.0.113.30"), want: coreError, key: "network.external.kubeapi_vip"},
		{name: "vip in both new blocks", tree: coreWith(coreNewNetwork(), "network.cluster.kubeapi_vip", "192.168.0.10"), want: coreError, key: "kubeapi_vip"},
		{name: "vip in the new cluster block only", tree: coreWithout(coreWith(coreNewNetwork(), "network.cluster.kubeapi_vip", "192.168.0.10"), "network.external", "proxmox.network.external"), want: coreWarning, key: "network.dns"},
		{name: "external bridge without a network block", tree: coreProxmoxSmall(coreObj{"proxmox": coreObj{"network": coreObj{"external": coreObj{"bridge": "vmbr1"}}}}), want: coreError, key: "proxmox.network.external"},
		{name: "external block without cidr", tree: coreWithout(coreNewNetwork(), "network.external.cidr"), want: coreError, key: "network.external.cidr"},
		{name: "external block without gateway", tree: coreWithout(coreNewNetwork(), "network.external.gateway"), want: coreError, key: "network.external.gateway"},
		{name: "external block without anchor", tree: coreWithout(coreNewNetwork(), "network.external.anchor_cidr"), want: coreError, key: "network.external.anchor_cidr"},
		{name: "external block without a proxmox bridge", tree: coreWithout(coreNewNetwork(), "proxmox.network.external"), want: coreError, key: "external.bridge"},
		{name: "external cidr overlapping the cluster cidr", tree: coreWithout(coreWith(coreWith(coreWith(coreNewNetwork(),
			"network.external.cidr", "192.168.0.0/24"), "network.external.gateway", "192.168.0.1"), "network.external.kubeapi_vip", "192.168.0.10"),
			"network.external.ingress_pool"), want: coreError, key: "network.external.cidr"},
		{name: "cluster vlan with sdn", tree: coreSDN(nil, coreObj{"name": "testcluster", "network": coreObj{"cluster": coreObj{"vlan": 7}}}), want: coreError, key: "network.cluster.vlan"},
		{name: "null vlan and mtu", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"vlan": nil, "mtu": nil}}}), want: coreValid},
		{name: "null dns and ntp lists", tree: coreConfig(coreObj{"network": coreObj{"dns": nil, "ntp": nil}}), want: coreValid},

		// Moved keys.
		{name: "network.cidr moved", tree: coreWith(coreNewNetwork(), "network.cidr", "203.0.113.0/24"), want: coreError, key: "network.cidr"},
		{name: "proxmox cluster vlan moved", tree: coreWith(coreNewNetwork(), "proxmox.network.cluster.vlan", 100), want: coreError, key: "proxmox.network.cluster.vlan"},
		{name: "proxmox cluster vip moved", tree: coreWith(coreNewNetwork(), "proxmox.network.cluster.kubeapi_vip", "203.0.113.10"), want: coreError, key: "proxmox.network.cluster.kubeapi_vip"},
		{name: "proxmox external cidr moved", tree: coreWith(coreNewNetwork(), "proxmox.network.external.cidr", "203.0.113.0/24"), want: coreError, key: "proxmox.network.external.cidr"},
		{name: "proxmox external gateway moved", tree: coreWith(coreNewNetwork(), "proxmox.network.external.gateway", "203.0.113.1"), want: coreError, key: "proxmox.network.external.gateway"},
		{name: "proxmox external anchor moved", tree: coreWith(coreNewNetwork(), "proxmox.network.external.anchor_cidr", "169.254.40.0/24"), want: coreError, key: "proxmox.network.external.anchor_cidr"},
		{name: "proxmox external vip moved", tree: coreWith(coreNewNetwork(), "proxmox.network.external.kubeapi_vip", "203.0.113.10"), want: coreError, key: "proxmox.network.external.kubeapi_vip"},
		{name: "proxmox external vlan moved", tree: coreWith(coreNewNetwork(), "proxmox.network.external.vlan", 100), want: coreError, key: "proxmox.network.external.vlan"},
		{name: "proxmox external ingress pool moved", tree: coreWith(coreNewNetwork(), "proxmox.network.external.ingress_pool", "203.0.113.20-203.0.113.40"), want: coreError, key: "proxmox.network.external.ingress_pool"},

		// OpenStack-only refusals.
		{name: "external block on openstack", tree: coreConfig(coreObj{"network": coreObj{"external": coreObj{"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "anchor_cidr": "169.254.40.0/24"}}}), want: coreError, key: "network.external"},
		{name: "cluster vip on openstack", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"kubeapi_vip": "192.168.0.10"}}}), want: coreError, key: "network.cluster.kubeapi_vip"},
		{name: "cluster vlan on openstack", tree: coreConfig(coreObj{"network": coreObj{"cluster": coreObj{"vlan": 100}}}), want: coreError, key: "network.cluster.vlan"},

		// A real cluster before and after the redesign.
		{name: "pre-redesign cluster.yaml", files: map[string]string{"cluster.yaml": corePreRedesign}, secrets: coreProxmoxSecrets, want: coreError, key: "network.cidr"},
		{name: "redesigned cluster.yaml", files: map[string]string{"cluster.yaml": coreRedesigned}, secrets: coreProxmoxSecrets, want: coreWarning, key: "network.dns"},

		// Includes.
		{name: "include adds a pool", tree: coreConfig(coreObj{"include": coreList{"pools.yaml"}}), files: map[string]string{"pools.yaml": "workers: {gpu: {count: 1, flavor: g, disk: 50}}\n"}, want: coreValid},
		{name: "include merges into a section", tree: coreConfig(coreObj{"include": coreList{"tags.yaml"}, "tags": coreObj{"site": "ncsa"}}), files: map[string]string{"tags.yaml": "tags: {team: platform}\n"}, want: coreValid},
		{name: "value set in two files", tree: coreConfig(coreObj{"include": coreList{"extra.yaml"}}), files: map[string]string{"extra.yaml": "network: {ntp: [a]}\n"}, want: coreError, key: "network.ntp"},
		{name: "nested include", tree: coreConfig(coreObj{"include": coreList{"extra.yaml"}}), files: map[string]string{"extra.yaml": "include: [more.yaml]\n"}, want: coreError, key: "include"},
		{name: "unknown key in an include", tree: coreConfig(coreObj{"include": coreList{"extra.yaml"}}), files: map[string]string{"extra.yaml": "netwrok: {}\n"}, want: coreError, key: "netwrok"},
		{name: "missing include", tree: coreConfig(coreObj{"include": coreList{"gone.yaml"}}), want: coreError, key: "gone.yaml"},
		{name: "include is a string", tree: coreConfig(coreObj{"include": "metal.yaml"}), want: coreError, key: "include"},
		{name: "include entry empty", tree: coreConfig(coreObj{"include": coreList{""}}), want: coreError, key: "include"},
		{name: "include entry a number", tree: coreConfig(coreObj{"include": coreList{7}}), want: coreError, key: "include"},
		{name: "include absolute path", tree: coreConfig(coreObj{"include": coreList{"/etc/passwd"}}), want: coreError, key: "include"},
		{name: "include outside the directory", tree: coreConfig(coreObj{"include": coreList{"../other/cluster.yaml"}}), want: coreError, key: "include"},
		{name: "two includes set one value", tree: coreConfig(coreObj{"include": coreList{"a.yaml", "b.yaml"}}), files: map[string]string{"a.yaml": "tags: {t: one}\n", "b.yaml": "tags: {t: two}\n"}, want: coreError, key: "tags.t"},
		{name: "include lists a file twice", tree: coreConfig(coreObj{"include": coreList{"a.yaml", "a.yaml"}}), files: map[string]string{"a.yaml": "tags: {t: one}\n"}, want: coreError, key: "include"},
		{name: "include symlinked out of the directory", tree: coreConfig(coreObj{"include": coreList{"link.yaml"}}), symlinks: map[string]string{"link.yaml": "tags: {t: one}\n"}, want: coreError, key: "include"},
		{name: "include names a directory", tree: coreConfig(coreObj{"include": coreList{"conf"}}), dirs: []string{"conf"}, want: coreError, key: "include"},
		{name: "null section filled by an include", tree: coreConfig(coreObj{"include": coreList{"ts.yaml"}, "tailscale": nil}), files: map[string]string{"ts.yaml": "tailscale: {login_server: 'https://hs.example'}\n"}, want: coreValid},
		{name: "null section in an include", tree: coreConfig(coreObj{"include": coreList{"ts.yaml"}}), files: map[string]string{"ts.yaml": "tailscale: null\n"}, want: coreValid},
		{name: "empty include file", tree: coreConfig(coreObj{"include": coreList{"empty.yaml"}}), files: map[string]string{"empty.yaml": "# nothing yet\n"}, want: coreValid},
		{name: "tailscale section in secrets.yaml", tree: coreConfig(nil), secrets: coreOpenStackSecrets + "tailscale: {auth_key: tskey-x}\n", want: coreValid},
		{name: "tailscale sections in two includes", tree: coreConfig(coreObj{"include": coreList{"ts.yaml", "secrets.yaml"}}), files: map[string]string{"ts.yaml": "tailscale: {login_server: 'https://hs.example'}\n"}, secrets: coreOpenStackSecrets + "tailscale: {auth_key: tskey-x}\n", want: coreValid},
		{name: "include lists secrets.yaml", tree: coreConfig(coreObj{"include": coreList{"secrets.yaml"}}), secrets: coreOpenStackSecrets, want: coreValid},
		{name: "secrets.yaml not included", tree: coreConfig(coreObj{"include": coreList{}}), secrets: coreOpenStackSecrets, want: coreError, key: "include"},
		{name: "include lists cluster.yaml", tree: coreConfig(coreObj{"include": coreList{"cluster.yaml"}}), want: coreError, key: "include"},
		{name: "yaml error in secrets.yaml", tree: coreConfig(coreObj{"include": coreList{"secrets.yaml"}}), secrets: "openstack:\n  credential_secret: \"hunter2secret\ntokens: 1\n", want: coreError, key: "secrets.yaml", never: "hunter2secret"},
	}
}

func TestConformanceCore(t *testing.T) {
	t.Parallel()
	for _, tc := range coreCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := coreWriteDir(t, tc)
			got, errs, warns := coreVerdict(t, dir)
			all := append(append([]spec.Problem{}, errs...), warns...)
			if got != tc.want {
				t.Fatalf("verdict %s, want %s\nerrors: %v\nwarnings: %v", got, tc.want, errs, warns)
			}
			if tc.key != "" {
				ps := errs
				if tc.want == coreWarning {
					ps = warns
				}
				if !coreNames(ps, tc.key) {
					t.Errorf("no problem names %q:\nerrors: %v\nwarnings: %v", tc.key, errs, warns)
				}
			}
			if tc.never != "" {
				for _, p := range all {
					if strings.Contains(p.String(), tc.never) {
						t.Errorf("output contains %q: %s", tc.never, p)
					}
				}
			}
		})
	}
}

func coreWriteDir(t *testing.T, tc coreCase) string {
	t.Helper()
	tr := tc.tree
	if tr == nil {
		tr = tree{}
	}
	files := map[string]string{"secrets.yaml": tc.secrets}
	for k, v := range tc.files {
		files[k] = v
	}
	if _, ok := tr["include"]; !ok && tc.secrets != "" && tc.files["cluster.yaml"] == "" {
		tr["include"] = coreList{"secrets.yaml"}
	}
	dir := writeDir(t, tr, files)
	for _, d := range tc.dirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range tc.symlinks {
		target := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(target, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// coreVerdict loads a directory and classifies the result.
func coreVerdict(t *testing.T, dir string) (string, []spec.Problem, []spec.Problem) {
	t.Helper()
	_, warns, err := spec.Load(dir, spec.Options{})
	if err != nil {
		var se *spec.Error
		if !errors.As(err, &se) {
			t.Fatalf("Load returned a %T: %v", err, err)
		}
		return coreError, se.Problems, warns
	}
	if len(warns) > 0 {
		return coreWarning, nil, warns
	}
	return coreValid, nil, nil
}

// coreNames reports whether a problem names key, in its key or its text.
func coreNames(ps []spec.Problem, key string) bool {
	for _, p := range ps {
		if strings.Contains(p.String(), key) {
			return true
		}
	}
	return false
}

// TestConformanceCoreCredentials replays the Python tests that load a
// cluster with odd credentials (which loads) and then ask for them (which
// refuses): the refusal names the credential and never echoes it.
func TestConformanceCoreCredentials(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-value-never-shown"
	cases := []struct {
		name    string
		tree    tree
		secrets string
		want    []string // the credentials refused, in order
	}{
		{"openstack none configured", coreConfig(nil), "{}\n", []string{"openstack.credential_id", "openstack.credential_secret"}},
		{"openstack null id", coreConfig(nil), "openstack: {credential_id: null, credential_secret: " + secret + "}\n", []string{"openstack.credential_id"}},
		{"openstack numeric id", coreConfig(nil), "openstack: {credential_id: 123, credential_secret: " + secret + "}\n", []string{"openstack.credential_id"}},
		{"openstack null secret", coreConfig(nil), "openstack: {credential_id: id, credential_secret: null}\n", []string{"openstack.credential_secret"}},
		{"openstack empty secret", coreConfig(nil), "openstack: {credential_id: id, credential_secret: ''}\n", []string{"openstack.credential_secret"}},
		{"openstack placeholder id", coreConfig(nil), "openstack: {credential_id: CHANGE-ME, credential_secret: " + secret + "}\n", []string{"openstack.credential_id"}},
		{"openstack placeholder secret", coreConfig(nil), "openstack: {credential_id: id, credential_secret: CHANGE-ME}\n", []string{"openstack.credential_secret"}},
		{"openstack set", coreConfig(nil), "openstack: {credential_id: id, credential_secret: " + secret + "}\n", nil},
		{"proxmox null token id", coreProxmoxSmall(nil), "proxmox: {token_id: null, token_secret: " + secret + "}\n", []string{"proxmox.token_id"}},
		{"proxmox numeric token secret", coreProxmoxSmall(nil), "proxmox: {token_id: u@pve!t, token_secret: 42}\n", []string{"proxmox.token_secret"}},
		{"proxmox placeholder token secret", coreProxmoxSmall(nil), "proxmox: {token_id: u@pve!t, token_secret: CHANGE-ME}\n", []string{"proxmox.token_secret"}},
		{"tailscale numeric key", coreConfig(nil), "openstack: {credential_id: id, credential_secret: " + secret + "}\ntailscale: {auth_key: 42}\n", []string{"tailscale.auth_key"}},
		{"tailscale placeholder key", coreConfig(nil), "openstack: {credential_id: id, credential_secret: " + secret + "}\ntailscale: {auth_key: CHANGE-ME}\n", []string{"tailscale.auth_key"}},
		{"tailscale empty key", coreConfig(nil), "openstack: {credential_id: id, credential_secret: " + secret + "}\ntailscale: {auth_key: ''}\n", []string{"tailscale.auth_key"}},
		{"tailscale null key idles", coreConfig(nil), "openstack: {credential_id: id, credential_secret: " + secret + "}\ntailscale: {auth_key: null}\n", nil},
		{"tailscale key", coreConfig(nil), "openstack: {credential_id: id, credential_secret: " + secret + "}\ntailscale: {auth_key: tskey-auth-abc123}\n", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := coreWriteDir(t, coreCase{tree: tc.tree, secrets: tc.secrets})
			c, _, err := spec.Load(dir, spec.Options{})
			if err != nil {
				t.Fatalf("the credentials are not judged at load, got: %v", err)
			}
			var got []string
			for _, p := range c.Credentials() {
				got = append(got, p.Key)
				if strings.Contains(p.String(), secret) || strings.Contains(p.String(), "42") {
					t.Errorf("problem echoes a value: %s", p)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("refused %v, want %v", got, tc.want)
			}
		})
	}
}
