package spec_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestKeysAreTheValidatorsKeys checks Keys against the validator: every key
// it lists is accepted in a cluster file, and a few keys the validator
// refuses are not listed.
func TestKeysAreTheValidatorsKeys(t *testing.T) {
	t.Parallel()
	keys := spec.Keys()
	for _, want := range []string{
		"name", "include", "talos.kubespan", "workers.<pool>.cores", "controlplane.flavor",
		"network.external.ingress_pool", "network.cluster.mtu", "security.<rule>.port",
		"proxmox.network.cluster.sdn.primary_exit_node", "proxmox.image_factory",
		"openstack.metadata", "metal.<group>.servers.<server>.bmc.tls_verify", "argocd",
		"rollout.max_unavailable", "remediation.after", "remediation.max_unhealthy", "remediation.pools",
	} {
		if !slices.Contains(keys, want) {
			t.Errorf("Keys lacks %s", want)
		}
	}
	for _, k := range keys {
		if spec.IsSection(k) {
			t.Errorf("Keys lists the mapping %s", k)
		}
		if strings.HasPrefix(k, "network.cluster.anchor") || k == "proxmox.network.cluster.vlan" {
			t.Errorf("Keys lists %s, which the validator refuses", k)
		}
	}
}
