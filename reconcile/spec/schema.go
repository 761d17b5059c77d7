package spec

import (
	"slices"
	"strings"
)

// The schema of cluster.yaml: the keys of every fixed-schema mapping, by the
// dotted path of that mapping. Validation checks unknown keys against these
// very tables, and Keys lists them, so a key cannot be accepted without
// appearing in Keys.
var (
	talosKeys      = []string{"version", "extensions", "config_patches", "kubespan"}
	kubernetesKeys = []string{"version"}
	tailscaleKeys  = []string{"login_server", "auth_key"}
	networkKeys    = []string{"dns", "ntp", "cluster", "external"}
	openstackKeys  = []string{"url", "availability_zone", "external_net", "region", "metadata", "credential_id", "credential_secret", "tls_verify", "image_factory"}
	proxmoxKeys    = []string{"url", "storage", "iso_storage", "cidata_storage", "placement_strategy",
		"nodes", "tls_verify", "network", "token_id", "token_secret", "image_factory"}
	proxmoxNetworkKeys         = []string{"cluster", "external"}
	proxmoxClusterNetworkKeys  = []string{"bridge", "vnet", "sdn"}
	proxmoxExternalNetworkKeys = []string{"bridge"}
	sdnKeys                    = []string{"name", "zone", "controller", "asn", "vrf_tag", "tag", "mtu", "nodes", "exit_nodes", "primary_exit_node"}
	// rolloutKeys and remediationKeys are additions beside the Python
	// tool's schema.
	rolloutKeys     = []string{"max_unavailable"}
	remediationKeys = []string{"after", "max_unhealthy", "pools"}
	// securityRuleKeys are the keys of a long-form security rule; a
	// short-form rule maps labels to CIDRs.
	securityRuleKeys = []string{"hosts", "port"}
)

// Placeholders in the key paths Keys returns: a name the user chooses.
const (
	KeyPool      = "<pool>"
	KeyRule      = "<rule>"
	KeyLabel     = "<label>"
	KeyGroup     = "<group>"
	KeyServer    = "<server>"
	KeyInterface = "<interface>"
)

// schemaSection is one mapping of cluster.yaml and the keys it accepts. A
// key that is itself a schemaSection's path is a mapping; any other is a
// value (a scalar, a list, or a free-form mapping such as tags).
type schemaSection struct {
	path string
	keys []string
}

// schema lists every fixed-schema mapping. Plugin-owned sections (argocd,
// rancher, charts) are one key each: the engine acts on such a section as
// a whole (the plugin owns its inner schema), so any change inside it has
// the section's effect.
func schema() []schemaSection {
	metalL2 := without(clusterL2Keys, "kubeapi_vip")
	out := []schemaSection{
		{"", slices.Concat(coreSections, pluginSections)},
		{"talos", talosKeys},
		{"kubernetes", kubernetesKeys},
		{"controlplane", poolKeys},
		{"workers", []string{KeyPool}},
		{"workers." + KeyPool, poolKeys},
		{"network", networkKeys},
		{"network.cluster", clusterL2Keys},
		{"network.external", externalL2Keys},
		{"security", []string{KeyRule}},
		{"security." + KeyRule, slices.Concat(securityRuleKeys, []string{KeyLabel})},
		{"tailscale", tailscaleKeys},
		{"openstack", openstackKeys},
		{"proxmox", proxmoxKeys},
		{"proxmox.network", proxmoxNetworkKeys},
		{"proxmox.network.cluster", proxmoxClusterNetworkKeys},
		{"proxmox.network.cluster.sdn", sdnKeys},
		{"proxmox.network.external", proxmoxExternalNetworkKeys},
		{"metal", []string{KeyGroup}},
		{"rollout", rolloutKeys},
		{"remediation", remediationKeys},
	}
	for _, m := range []struct {
		path string
		keys []string
	}{
		{"metal." + KeyGroup, metalGroupKeys},
		{"metal." + KeyGroup + ".servers." + KeyServer, without(metalGroupKeys, "servers")},
	} {
		out = append(out,
			schemaSection{m.path, m.keys},
			schemaSection{m.path + ".network", metalL2},
			schemaSection{m.path + ".interfaces", []string{KeyInterface}},
			schemaSection{m.path + ".interfaces." + KeyInterface, metalInterfaceKeys},
			schemaSection{m.path + ".bmc", metalBMCKeys})
	}
	out = append(out, schemaSection{"metal." + KeyGroup + ".servers", []string{KeyServer}})
	return out
}

// Keys returns the dotted path of every key of cluster.yaml that holds a
// value, sorted: the keys of the validator's own tables, with the names a
// user chooses written as placeholders (KeyPool, KeyRule, ...), e.g.
// "workers.<pool>.cores" or "security.<rule>.port". A mapping with a fixed
// schema is not listed itself, only its keys.
func Keys() []string {
	sections := map[string][]string{}
	for _, s := range schema() {
		sections[s.path] = s.keys
	}
	var out []string
	var walk func(path string)
	walk = func(path string) {
		for _, k := range sections[path] {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if _, ok := sections[p]; ok {
				walk(p)
				continue
			}
			out = append(out, p)
		}
	}
	walk("")
	slices.Sort(out)
	return slices.Compact(out)
}

// IsSection reports whether a dotted path (placeholders as in Keys) names a
// mapping with a fixed schema rather than a value.
func IsSection(path string) bool {
	for _, s := range schema() {
		if s.path == path || strings.HasPrefix(s.path, path+".") {
			return true
		}
	}
	return false
}
