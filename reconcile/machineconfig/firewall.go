package machineconfig

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Well-known ports of the host firewall.
const (
	portDHCPClient = 68
	portTailscale  = 41641
	portKubeSpan   = 51820
)

var anyIPv4 = netip.MustParsePrefix("0.0.0.0/0")

// Firewall returns the Talos host firewall documents of a VM node, in order:
// the default ingress block, intra-cluster TCP and UDP from every node L2,
// the DHCP client, tailscale (when the section is present), KubeSpan from
// the other L2s (when the nodes span more than one), 80 and 443 to everyone
// while no security rule claims them, and one rule per security rule with
// hosts. Two security rules whose names normalise to the same document name
// are an error.
func Firewall(c *spec.Cluster) ([]config.Document, error) {
	return firewall(c, c.Network.Cluster.CIDR)
}

// firewall builds the documents for a node whose own L2 is self.
func firewall(c *spec.Cluster, self netip.Prefix) ([]config.Document, error) {
	names, err := securityRuleNames(c.Security)
	if err != nil {
		return nil, err
	}

	l2s := nodeL2s(c)

	defaultAction := network.NewDefaultActionConfigV1Alpha1()
	defaultAction.Ingress = nethelpers.DefaultActionBlock

	docs := []config.Document{
		defaultAction,
		ruleDoc("cluster-tcp", nethelpers.ProtocolTCP, network.PortRange{Lo: 1, Hi: 65535}, l2s),
		ruleDoc("cluster-udp", nethelpers.ProtocolUDP, network.PortRange{Lo: 1, Hi: 65535}, l2s),
		ruleDoc("dhcp-client", nethelpers.ProtocolUDP, singlePort(portDHCPClient), []netip.Prefix{anyIPv4}),
	}

	if c.Tailscale != nil {
		docs = append(docs, ruleDoc("tailscale", nethelpers.ProtocolUDP, singlePort(portTailscale), []netip.Prefix{anyIPv4}))
	}

	if len(l2s) > 1 {
		peers := slices.DeleteFunc(slices.Clone(l2s), func(p netip.Prefix) bool { return p == self.Masked() })
		if len(peers) > 0 {
			docs = append(docs, ruleDoc("kubespan", nethelpers.ProtocolUDP, singlePort(portKubeSpan), peers))
		}
	}

	for _, port := range c.OpenPorts() {
		docs = append(docs, ruleDoc(fmt.Sprintf("open-tcp-%d", port), nethelpers.ProtocolTCP, singlePort(port), []netip.Prefix{anyIPv4}))
	}

	for i, rule := range c.Security {
		if len(rule.Hosts) == 0 {
			continue
		}

		var sources []netip.Prefix

		for _, h := range rule.Hosts {
			if p := h.CIDR.Masked(); !slices.Contains(sources, p) {
				sources = append(sources, p)
			}
		}

		docs = append(docs, ruleDoc(names[i], nethelpers.ProtocolTCP, singlePort(rule.Port), sources))
	}

	return docs, nil
}

// securityRuleNames returns the firewall document name of every security
// rule, index for index, and refuses two rules that would share one.
func securityRuleNames(rules []spec.SecurityRule) ([]string, error) {
	names := make([]string, len(rules))
	seen := make(map[string]string, len(rules))

	for i, rule := range rules {
		norm := spec.NormalizeRuleName(rule.Name)
		if norm == "" {
			return nil, fmt.Errorf("security.%s has no letters or digits to name its firewall rule", rule.Name)
		}

		name := "security-" + norm

		if prev, ok := seen[name]; ok {
			return nil, fmt.Errorf("security.%s and security.%s both map to the firewall rule name %q; rename one of them", prev, rule.Name, name)
		}

		seen[name] = rule.Name
		names[i] = name
	}

	return names, nil
}

// nodeL2s returns every distinct node L2: network.cluster.cidr, then each
// metal machine's L2 in file order.
func nodeL2s(c *spec.Cluster) []netip.Prefix {
	l2s := []netip.Prefix{c.Network.Cluster.CIDR.Masked()}

	for _, group := range c.Metal {
		for _, server := range group.Servers {
			if !server.Network.CIDR.IsValid() {
				continue
			}

			if p := server.Network.CIDR.Masked(); !slices.Contains(l2s, p) {
				l2s = append(l2s, p)
			}
		}
	}

	return l2s
}

func singlePort(port int) network.PortRange {
	return network.PortRange{Lo: uint16(port), Hi: uint16(port)}
}

func ruleDoc(name string, proto nethelpers.Protocol, ports network.PortRange, sources []netip.Prefix) *network.RuleConfigV1Alpha1 {
	doc := network.NewRuleConfigV1Alpha1()
	doc.MetaName = name
	doc.PortSelector.Protocol = proto
	doc.PortSelector.Ports = network.PortRanges{ports}

	for _, src := range sources {
		doc.Ingress = append(doc.Ingress, network.IngressRule{Subnet: src})
	}

	return doc
}
