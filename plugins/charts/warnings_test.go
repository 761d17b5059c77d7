package charts_test

import (
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/plugins/charts"
	"github.com/taloscluster/taloscluster/reconcile"
)

var _ reconcile.PluginWarner = (*charts.Plugin)(nil)

// TestWarnings: Traefik without the gateway entry, and ceph's enabled
// charts without credentials, are warned about; nothing else is.
func TestWarnings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, section, secrets string
		want                   []string // one substring per warning
	}{
		{"traefik with the gateway", "charts:\n  traefik: {}\n  gateway: {}\n", "", nil},
		{"traefik without the gateway", "charts:\n  traefik: {}\n", "", []string{"gateway entry is off or absent"}},
		{"traefik with the gateway off", "charts:\n  traefik: {}\n  gateway: {enabled: false}\n", "", []string{"Gateway API CRDs"}},
		{"traefik off", "charts:\n  traefik: {enabled: false}\n", "", nil},
		{"ceph with credentials", "charts:\n  ceph: {clusterID: abc, monitors: [m], rbd: true, fs: true}\n",
			"charts:\n  ceph:\n    userID: kubernetes\n    userKey: AQCs3cr3tKey==\n", nil},
		{"ceph rbd without credentials", "charts:\n  ceph: {clusterID: abc, monitors: [m], rbd: true}\n", "",
			[]string{"ceph-csi-rbd/csi-rbd-secret must exist"}},
		{"ceph both without credentials", "charts:\n  ceph: {clusterID: abc, monitors: [m], rbd: true, fs: true}\n", "",
			[]string{"ceph-csi-rbd/csi-rbd-secret, ceph-csi-cephfs/csi-cephfs-secret must exist"}},
		{"ceph fs without credentials", "charts:\n  ceph: {clusterID: abc, monitors: [m], fs: {fsName: cephfs}}\n", "",
			[]string{"ceph-csi-cephfs/csi-cephfs-secret must exist"}},
		{"ceph disabled", "charts:\n  ceph: {enabled: false, clusterID: abc, monitors: [m], rbd: true}\n", "", nil},
		{"both", "charts:\n  traefik: {}\n  ceph: {clusterID: abc, monitors: [m], rbd: true}\n", "",
			[]string{"gateway entry", "csi-rbd-secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := load(t, "proxmox-external", tc.section, tc.secrets)
			got := charts.New(charts.Options{}).Warnings(c)
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d is %q, want it to say %q", i, got[i], w)
				}
				if strings.Contains(got[i], "AQCs3cr3t") {
					t.Errorf("a warning shows the key: %q", got[i])
				}
			}
		})
	}
	c := load(t, "proxmox-external", "", "")
	if got := charts.New(charts.Options{}).Warnings(c); len(got) != 0 {
		t.Errorf("no charts section: %q", got)
	}
}
