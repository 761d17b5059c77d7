package charts

import (
	"strings"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Warnings (reconcile.PluginWarner) are what the charts section leaves to
// the cluster, read from cluster.yaml alone: Traefik without the gateway
// entry, and ceph without its credentials.
func (*Plugin) Warnings(c *spec.Cluster) []string {
	if c == nil || c.Plugins.Charts == nil {
		return nil
	}
	entries, err := Entries(c)
	if err != nil {
		// The section's errors are the plan's to say.
		return nil
	}
	on := map[string]Entry{}
	for _, e := range entries {
		if e.Enabled {
			on[e.Name] = e
		}
	}
	var out []string
	if _, traefik := on["traefik"]; traefik {
		if _, gateway := on["gateway"]; !gateway {
			out = append(out, "traefik is enabled but the gateway entry is off or absent: Traefik's Gateway provider then "+
				"relies on the Gateway API CRDs being on the cluster already, and may fail without them")
		}
	}
	if ceph, ok := on["ceph"]; ok && !HasCephCredentials(ceph) {
		var secrets []string
		for _, ch := range cephCharts {
			if truthy(ceph.raw[ch.flag]) {
				secrets = append(secrets, ch.chart+"/"+ch.secret)
			}
		}
		if len(secrets) > 0 {
			out = append(out, "ceph is enabled without charts.ceph.userID and userKey: the Secret(s) "+strings.Join(secrets, ", ")+
				" must exist on the cluster by other means, or the provisioners cannot reach ceph")
		}
	}
	return out
}
