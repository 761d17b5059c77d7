package proxmox_test

import (
	"bytes"
	"testing"

	"github.com/taloscluster/taloscluster/providers/proxmox"
)

func TestCIDataRoundTrip(t *testing.T) {
	t.Parallel()
	config := []byte("version: v1alpha1\nmachine:\n  type: controlplane\n")
	iso, err := proxmox.CIDataISO("edge-controlplane-01", config)
	if err != nil {
		t.Fatal(err)
	}
	got, err := proxmox.ReadCIData(iso)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, config) {
		t.Fatalf("user-data round trip: got %q", got)
	}
}
