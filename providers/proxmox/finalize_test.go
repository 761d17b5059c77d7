package proxmox

import (
	"testing"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestFinalizeLeavesNoConfigISO: the health phase removes the first-boot
// media of every VM that still has them, including a VM that is stopped
// when the plan is made (the same run starts it before the health barrier)
// and a VM whose ISOs were detached but whose config ISO file is still on
// its node.
func TestFinalizeLeavesNoConfigISO(t *testing.T) {
	t.Parallel()
	c, _, err := spec.Load("../../examples/proxmox-bridge", spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{c: c}
	want := &reconcile.Desired{Cluster: c, Machines: machineconfig.Machines(c), API: reconcile.ConfiguredAPI(c)}
	first := want.Machines[0].Hostname
	attached := map[string]string{"ide2": "local:iso/talos.iso,media=cdrom", "ide3": p.cidataVolume(first) + ",media=cdrom"}
	detached := map[string]string{"ide2": "none,media=cdrom"}
	cases := []struct {
		name    string
		running bool
		config  map[string]string
		isoLeft bool
		want    bool
	}{
		{"running, media attached", true, attached, true, true},
		{"stopped, media attached: started by the same run", false, attached, true, true},
		{"detached, config ISO still on the node", true, detached, true, true},
		{"detached and deleted", true, detached, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inv := newInventory(false)
			for i, m := range want.Machines {
				// Every other machine is finalized already.
				inv.owned[m.Hostname] = &vm{id: 100 + i, node: "pve1", name: m.Hostname, running: true, config: detached}
			}
			inv.owned[first] = &vm{id: 100, node: "pve1", name: first, running: tc.running, config: tc.config}
			if tc.isoLeft {
				inv.isos["pve1/"+p.cidataVolume(first)] = true
			}
			changes, err := p.Plan(plan.PhaseHealth, want, inv)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ch := range changes {
				got = append(got, ch.Resource.Name)
			}
			if finalized := len(got) == 1 && got[0] == first; finalized != tc.want || (!tc.want && len(got) != 0) {
				t.Fatalf("finalize steps for %v, want one for %s: %v", got, first, tc.want)
			}
		})
	}
}
