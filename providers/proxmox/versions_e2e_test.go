package proxmox_test

import (
	"strings"
	"testing"
)

// TestRunningNodesKeepTheirVersionsInTheirConfigs: an existing node's
// desired config is made at the Talos and Kubernetes versions it runs, so
// a version change is its own refusal (until upgrades are built) and
// never shows as a config diff of every node, nor is baked into a running
// node's config before its hop.
func TestRunningNodesKeepTheirVersionsInTheirConfigs(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "versions", 1)
	for _, tc := range []struct{ key, value, refusal string }{
		{"kubernetes.version", "v1.36.2", "kubernetes.version v1.36.1 -> v1.36.2"},
		{"talos.version", "v1.13.9", "talos.version v1.13.8 -> v1.13.9"},
	} {
		p, err := planSets(t, ctx, w, [][2]string{{tc.key, tc.value}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Refusals) != 1 || !strings.Contains(p.Refusals[0].Reason, tc.refusal) {
			t.Errorf("%s = %s: refusals %v, want only the version's", tc.key, tc.value, p.Refusals)
		}
	}
}
