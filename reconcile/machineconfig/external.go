package machineconfig

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// The external network's policy routing, as the Python tool lays it out:
// routing table 100 holds the external subnet and a default route through
// network.external.gateway; rule 1000 sends traffic from an external API
// VIP there, rule 1001 sends traffic carrying the return-path mark there.
// The main table keeps the cluster network's default route.
const (
	ExternalRouteTable         = 100
	ExternalVIPRulePriority    = 1000
	ExternalReturnRulePriority = 1001
	// ExternalReturnMark is the conntrack and packet mark of connections
	// that entered through the external link.
	ExternalReturnMark = 0x2000
	// ExternalReturnTable is the nftables table the return-path pod owns.
	ExternalReturnTable = "taloscluster_return_path"
	// ReturnPathPod is the name of the return-path static pod.
	ReturnPathPod = "taloscluster-proxmox-return-path"
)

// AnchorAddress returns the deterministic /32 a machine takes from
// network.external.anchor_cidr: the first four bytes of
// sha256("<cluster>/<hostname>"), big-endian, modulo the number of usable
// hosts, counted from the first host (the network and broadcast addresses
// are skipped unless the prefix is /31 or /32).
func AnchorAddress(anchor netip.Prefix, cluster, hostname string) (netip.Prefix, error) {
	anchor = anchor.Masked()
	if !anchor.IsValid() || !anchor.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("anchor_cidr %s is not an IPv4 network", anchor)
	}

	size := uint64(1) << (32 - anchor.Bits())

	hosts, skip := size, uint64(0)
	if anchor.Bits() < 31 {
		hosts, skip = size-2, 1
	}

	sum := sha256.Sum256([]byte(cluster + "/" + hostname))
	offset := uint64(binary.BigEndian.Uint32(sum[:4])) % hosts

	base := binary.BigEndian.Uint32(anchor.Addr().AsSlice())

	var b [4]byte
	binary.BigEndian.PutUint32(b[:], base+uint32(offset+skip))

	return netip.PrefixFrom(netip.AddrFrom4(b), 32), nil
}

// machineAnchor returns m's anchor address and refuses one another machine
// of the cluster also draws (the spec's "a collision aborts").
func machineAnchor(c *spec.Cluster, m Machine) (netip.Prefix, error) {
	ext := c.Network.External

	own, err := AnchorAddress(ext.AnchorCIDR, c.Name, m.Hostname)
	if err != nil {
		return netip.Prefix{}, err
	}

	for _, other := range Machines(c) {
		if other.Hostname == m.Hostname {
			continue
		}

		a, err := AnchorAddress(ext.AnchorCIDR, c.Name, other.Hostname)
		if err != nil {
			return netip.Prefix{}, err
		}

		if a == own {
			return netip.Prefix{}, fmt.Errorf("network.external.anchor_cidr %s: anchor address collision: %s is generated for both %s and %s; use a larger anchor_cidr",
				ext.AnchorCIDR, own.Addr(), m.Hostname, other.Hostname)
		}
	}

	return own, nil
}

// externalOn reports whether m gets the external network's documents: the
// cluster has a network.external block and m an external NIC with a known
// MAC.
func externalOn(c *spec.Cluster, m Machine) bool {
	return c.Network.External != nil && m.ExternalMAC != ""
}

// vipOnExternal reports whether the API VIP rides the external network.
func vipOnExternal(c *spec.Cluster) bool {
	ext := c.Network.External

	return ext != nil && ext.KubeAPIVIP.IsValid()
}

// externalDocs returns the documents of the external network for m: the
// external link with its anchor address (and its MTU above 1500), routing
// table 100 (the external subnet and the default route through the
// external gateway) when m holds an external API VIP or the cluster has an
// ingress_pool, rule 1000 for the VIP's replies on control planes, and rule
// 1001 for the return-path mark with an ingress_pool. The cluster link is
// stated as well, with DHCP on a DHCP-backed network, because Talos stops
// running DHCP on physical links by default once link documents exist.
func externalDocs(c *spec.Cluster, m Machine) ([]config.Document, error) {
	ext := c.Network.External

	anchor, err := machineAnchor(c, m)
	if err != nil {
		return nil, err
	}

	var docs []config.Document

	// The cluster link: its MTU document when there is one, an empty link
	// otherwise, plus DHCP unless its addresses are static.
	if m.ClusterMAC != "" {
		link := mtuDoc(LinkCluster, m.ClusterMAC, &c.Network.Cluster)
		if link == nil {
			link = network.NewLinkConfigV1Alpha1(LinkCluster)
		}

		docs = append(docs, link)

		if !staticNetwork(c) {
			docs = append(docs, network.NewDHCPv4ConfigV1Alpha1(LinkCluster))
		}
	}

	link := network.NewLinkConfigV1Alpha1(LinkExternal)
	link.LinkAddresses = []network.AddressConfig{{AddressAddress: anchor}}

	if ext.MTU > routeClampMTU {
		link.LinkMTU = uint32(ext.MTU)
	}

	controlPlane := m.Role() == spec.RoleControlPlane
	returnPath := ext.IngressPool != nil

	if (controlPlane && vipOnExternal(c)) || returnPath {
		table := nethelpers.RoutingTable(ExternalRouteTable)
		def := network.RouteConfig{RouteGateway: network.Addr{Addr: ext.Gateway}, RouteTable: table}

		if ext.MTU > routeClampMTU {
			def.RouteMTU = routeClampMTU
		}

		link.LinkRoutes = []network.RouteConfig{
			{RouteDestination: network.Prefix{Prefix: ext.CIDR.Masked()}, RouteTable: table},
			def,
		}
	}

	docs = append(docs, link)

	if controlPlane && vipOnExternal(c) {
		rule := network.NewRoutingRuleConfigV1Alpha1(ExternalVIPRulePriority)
		rule.RuleSrc = network.Prefix{Prefix: netip.PrefixFrom(ext.KubeAPIVIP, 32)}
		rule.RuleTable = nethelpers.RoutingTable(ExternalRouteTable)
		docs = append(docs, rule)
	}

	if returnPath {
		rule := network.NewRoutingRuleConfigV1Alpha1(ExternalReturnRulePriority)
		rule.RuleFwMark = ExternalReturnMark
		rule.RuleFwMask = ExternalReturnMark
		rule.RuleTable = nethelpers.RoutingTable(ExternalRouteTable)
		docs = append(docs, rule)
	}

	return docs, nil
}

// returnPathDoc is the static pod of an ingress_pool: it marks the
// connections entering the external link for the external subnet, and
// their replies, so rule 1001 routes the replies back through the external
// gateway. It runs nft from the kube-proxy image of kubeVersion, which
// every node already has.
func returnPathDoc(c *spec.Cluster, m Machine, kubeVersion string) *v1alpha1.Config {
	ext := c.Network.External
	mark := fmt.Sprintf("0x%08x", ExternalReturnMark)
	mac := strings.ToLower(m.ExternalMAC)

	script := strings.Join([]string{
		"set -eu",
		"ext=",
		"for f in /sys/class/net/*/address; do",
		`  if [ "$(cat "$f")" = "` + mac + `" ]; then ext="${f%/address}"; ext="${ext##*/}"; break; fi`,
		"done",
		`if [ -z "$ext" ]; then echo "no link with MAC ` + mac + `" >&2; exit 1; fi`,
		"cleanup() { nft delete table ip " + ExternalReturnTable + " 2>/dev/null || true; }",
		"trap cleanup EXIT",
		"cleanup",
		"nft -f - <<EOF",
		"table ip " + ExternalReturnTable + " {",
		"  chain prerouting {",
		"    type filter hook prerouting priority -160; policy accept;",
		`    iifname "$ext" ip daddr ` + ext.CIDR.Masked().String() + " ct direction original ct mark set ct mark | " + mark,
		"    ct direction reply ct mark & " + mark + " != 0 meta mark set meta mark | " + mark,
		"  }",
		"}",
		"EOF",
		"while nft list table ip " + ExternalReturnTable + " >/dev/null 2>&1; do sleep 30; done",
		"exit 1",
		"",
	}, "\n")

	pod := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name":      ReturnPathPod,
			"namespace": "kube-system",
		},
		"spec": map[string]any{
			"hostNetwork":       true,
			"priorityClassName": "system-node-critical",
			"restartPolicy":     "Always",
			"tolerations":       []any{map[string]any{"operator": "Exists"}},
			"containers": []any{map[string]any{
				"name":            "return-path",
				"image":           "registry.k8s.io/kube-proxy:v" + strings.TrimPrefix(kubeVersion, "v"),
				"imagePullPolicy": "IfNotPresent",
				"command":         []any{"/bin/sh", "-ec", script},
				"securityContext": map[string]any{
					"runAsUser":                0,
					"runAsGroup":               0,
					"readOnlyRootFilesystem":   true,
					"allowPrivilegeEscalation": false,
					"capabilities": map[string]any{
						"drop": []any{"ALL"},
						"add":  []any{"NET_ADMIN"},
					},
				},
				"resources": map[string]any{
					"requests": map[string]any{"cpu": "5m", "memory": "8Mi"},
					"limits":   map[string]any{"memory": "32Mi"},
				},
			}},
		},
	}

	return &v1alpha1.Config{
		MachineConfig: &v1alpha1.MachineConfig{
			MachinePods: []v1alpha1.Unstructured{{Object: pod}},
		},
	}
}
