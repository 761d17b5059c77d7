package proxmox

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// pythonRules returns the per-VM firewall rules the Python taloscluster
// writes for c (docs/migration.md §1): icmp, the open ports, one rule per
// security host, and intra-cluster tcp and udp without a port, each with
// its comment marker "taloscluster: ".
func pythonRules(c *spec.Cluster) []fwRule {
	const marker = "taloscluster: "
	rule := func(proto, dport, source, what string) fwRule {
		return fwRule{Type: "in", Action: "ACCEPT", Proto: proto, Dport: dport, Source: source, Comment: marker + what, Enable: true}
	}
	out := []fwRule{rule("icmp", "", "", "icmp")}
	for _, port := range c.OpenPorts() {
		out = append(out, rule("tcp", strconv.Itoa(port), "", fmt.Sprintf("tcp/%d open", port)))
	}
	for _, r := range c.Security {
		for _, h := range r.Hosts {
			out = append(out, rule("tcp", strconv.Itoa(r.Port), h.CIDR.String(), r.Name+" from "+h.Label))
		}
	}
	cidr := c.Network.Cluster.CIDR.Masked().String()
	out = append(out, rule("tcp", "", cidr, "intra-cluster tcp"), rule("udp", "", cidr, "intra-cluster udp"))
	for i := range out {
		out[i].Pos = len(out) - 1 - i // Proxmox puts each new rule on top
	}
	return out
}

// TestFirewallAdoptsPythonRules: the per-VM firewall the Python
// taloscluster leaves (its rule shapes, its comment marker and its option
// dhcp=1) is the engine's desired firewall: nothing is added, deleted or
// reported as foreign. Without dhcp=1 only the dhcp-client rule is added.
func TestFirewallAdoptsPythonRules(t *testing.T) {
	t.Parallel()
	c, _, err := spec.Load("../../examples/proxmox-bridge", spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{c: c}
	desired, err := p.desiredRules()
	if err != nil {
		t.Fatal(err)
	}
	python := pythonRules(c)
	pythonOptions := map[string]string{"enable": "1", "policy_in": "DROP", "policy_out": "ACCEPT", "dhcp": "1"}

	if diff := optionsDiff(pythonOptions); len(diff) != 0 {
		t.Errorf("options of a Python VM differ: %v", diff)
	}
	add, del, foreign := firewallDiff(python, desired, pythonOptions)
	if len(add)+len(del)+len(foreign) != 0 {
		t.Errorf("Python firewall: add %v, delete %v, foreign %v; want nothing", add, del, foreign)
	}

	noDHCP := map[string]string{"enable": "1", "policy_in": "DROP", "policy_out": "ACCEPT"}
	add, del, _ = firewallDiff(python, desired, noDHCP)
	if len(add) != 1 || add[0].Proto != "udp" || add[0].Dport != dhcpClientPort || len(del) != 0 {
		t.Errorf("without dhcp=1: add %v, delete %v; want only the dhcp-client rule added", add, del)
	}

	// The engine's own rules, next to the option, are kept, not deleted.
	add, del, _ = firewallDiff(desired, desired, pythonOptions)
	if len(add)+len(del) != 0 {
		t.Errorf("engine rules with dhcp=1: add %v, delete %v; want nothing", add, del)
	}

	// A Python intra-cluster rule that is disabled allows nothing: it is
	// replaced by the engine's.
	stale := pythonRules(c)
	stale[len(stale)-1].Enable = false
	add, del, _ = firewallDiff(stale, desired, pythonOptions)
	if len(add) != 1 || add[0].Dport != allPorts || len(del) != 1 || del[0].Dport != "" {
		t.Errorf("disabled intra-cluster rule: add %v, delete %v; want the engine's added and the disabled one deleted", add, del)
	}
}

// TestImageAdoptsPythonBootISO: a node that has the Python taloscluster's
// boot ISO of the configured version (talos-<version>-tailscale.iso, the
// same Image Factory image) needs no boot ISO upload; a node with another
// version's, or none, does.
func TestImageAdoptsPythonBootISO(t *testing.T) {
	t.Parallel()
	c, _, err := spec.Load("../../examples/proxmox-bridge", spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{c: c}
	want := &reconcile.Desired{Cluster: c, Machines: machineconfig.Machines(c), API: reconcile.ConfiguredAPI(c)}
	node := "pve1"
	if len(c.Proxmox.Nodes) > 0 {
		node = c.Proxmox.Nodes[0]
	}
	cases := []struct {
		name string
		iso  string
		step bool
	}{
		{"python boot ISO of the version", "talos-" + c.Talos.Version + "-tailscale.iso", false},
		{"python boot ISO of another version", "talos-v1.12.0-tailscale.iso", true},
		{"no boot ISO", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inv := newInventory(false)
			inv.nodes = []string{node}
			for _, m := range want.Machines {
				inv.owned[m.Hostname] = &vm{name: m.Hostname, node: node, running: true}
			}
			if tc.iso != "" {
				inv.isos[node+"/"+p.isoVolume(tc.iso)] = true
			}
			steps, err := p.Plan(plan.PhaseImage, want, inv)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(steps) > 0; got != tc.step {
				t.Fatalf("image steps %v; want a step: %v", steps, tc.step)
			}
		})
	}
}
