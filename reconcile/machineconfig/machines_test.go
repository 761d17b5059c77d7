package machineconfig_test

import (
	"regexp"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
)

func TestMAC(t *testing.T) {
	t.Parallel()

	format := regexp.MustCompile(`^02(:[0-9a-f]{2}){5}$`)

	for _, tc := range []struct {
		cluster, hostname string
		index             int
		want              string
	}{
		// sha256("lab/lab-controlplane-01/0") starts e8 23 88 87 6a.
		{"lab", "lab-controlplane-01", 0, "02:e8:23:88:87:6a"},
		{"lab", "lab-controlplane-01", 1, "02:21:44:d5:c2:d2"},
	} {
		got := machineconfig.MAC(tc.cluster, tc.hostname, tc.index)
		if got != tc.want {
			t.Errorf("MAC(%q, %q, %d) = %s, want %s", tc.cluster, tc.hostname, tc.index, got, tc.want)
		}
	}

	seen := map[string]bool{}

	for _, m := range machineconfig.Machines(proxmoxCluster()) {
		for _, mac := range []string{m.ClusterMAC, m.ExternalMAC} {
			if !format.MatchString(mac) {
				t.Errorf("%s: MAC %q is not 02:xx:xx:xx:xx:xx", m.Hostname, mac)
			}

			if seen[mac] {
				t.Errorf("%s: MAC %s repeats", m.Hostname, mac)
			}

			seen[mac] = true
		}

		if m.ClusterMAC != machineconfig.MAC("lab", m.Hostname, machineconfig.NICCluster) {
			t.Errorf("%s: cluster MAC %s is not the deterministic one", m.Hostname, m.ClusterMAC)
		}
	}

	// On OpenStack the machine's port is created with the cluster MAC.
	for _, m := range machineconfig.Machines(openStackCluster()) {
		if m.ClusterMAC != machineconfig.MAC("prod-a", m.Hostname, machineconfig.NICCluster) || m.ExternalMAC != "" {
			t.Errorf("%s: OpenStack machine MACs %q, %q; want the deterministic cluster MAC only", m.Hostname, m.ClusterMAC, m.ExternalMAC)
		}
	}
}

func TestSchematicID(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		exts []string
		want string
	}{
		// The two IDs the Image Factory publishes for these schematics.
		{"empty", nil, "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"},
		{"qemu guest agent", []string{"siderolabs/qemu-guest-agent"}, "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"},
		{"sorted", []string{"siderolabs/qemu-guest-agent", "siderolabs/tailscale"}, "7d4c31cbd96db9f90c874990697c523482b2bae27fb4631d5583dcd9c281b1ff"},
		{"order and duplicates do not matter", []string{"siderolabs/tailscale", "siderolabs/qemu-guest-agent", "siderolabs/tailscale"}, "7d4c31cbd96db9f90c874990697c523482b2bae27fb4631d5583dcd9c281b1ff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, err := machineconfig.SchematicID(tc.exts)
			if err != nil {
				t.Fatal(err)
			}

			if got != tc.want {
				t.Errorf("SchematicID(%v) = %s, want %s", tc.exts, got, tc.want)
			}
		})
	}

	t.Run("yaml", func(t *testing.T) {
		t.Parallel()

		got, err := machineconfig.SchematicYAML([]string{"siderolabs/tailscale", "siderolabs/qemu-guest-agent"})
		if err != nil {
			t.Fatal(err)
		}

		want := "customization:\n    systemExtensions:\n        officialExtensions:\n            - siderolabs/qemu-guest-agent\n            - siderolabs/tailscale\n"
		if string(got) != want {
			t.Errorf("SchematicYAML =\n%s\nwant\n%s", got, want)
		}
	})

	t.Run("installer image", func(t *testing.T) {
		t.Parallel()

		got, err := machineconfig.InstallerImage("", []string{"siderolabs/qemu-guest-agent"}, "1.13.2")
		if err != nil {
			t.Fatal(err)
		}

		if want := "factory.talos.dev/installer/ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515:v1.13.2"; got != want {
			t.Errorf("InstallerImage = %s, want %s", got, want)
		}
	})
}
