package pve_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/lab/pve"
)

// TestFirewall drives the per-VM and datacenter firewall through the
// library's generic request methods, as the provider must (the library has
// no typed rules API).
func TestFirewall(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	ctx := t.Context()
	c := l.client
	node := proxmox.NodeName("pve2")
	if _, err := (proxmox.ConfigQemu{
		Node:   &node,
		ID:     ptr(proxmox.GuestID(300)),
		Name:   ptr(proxmox.GuestName("fw")),
		CPU:    &proxmox.QemuCPU{Cores: ptr(proxmox.QemuCpuCores(1))},
		Memory: &proxmox.QemuMemory{CapacityMiB: ptr(proxmox.QemuMemoryCapacity(512))},
	}).Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	base := "/nodes/pve2/qemu/300/firewall"

	// Unset options are absent: Proxmox VE answers only what is set.
	opts, err := c.GetItemConfigMapStringInterface(ctx, base+"/options", "firewall", "options")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := opts["enable"]; ok || opts["digest"] == nil {
		t.Errorf("fresh options = %v, want only a digest", opts)
	}
	if err := c.Put(ctx, map[string]any{"enable": 1, "policy_in": "DROP", "policy_out": "ACCEPT"}, base+"/options"); err != nil {
		t.Fatalf("setting options: %v", err)
	}
	opts, err = c.GetItemConfigMapStringInterface(ctx, base+"/options", "firewall", "options")
	if err != nil {
		t.Fatal(err)
	}
	if opts["enable"] != float64(1) || opts["policy_in"] != "DROP" || opts["policy_out"] != "ACCEPT" {
		t.Errorf("options = %v", opts)
	}

	// New rules go first; a rule without enable is created disabled.
	rules := []map[string]any{
		{"type": "in", "action": "ACCEPT", "proto": "tcp", "dport": "50000", "source": "10.0.0.0/24", "comment": "taloscluster: talos", "enable": 1},
		{"type": "in", "action": "ACCEPT", "proto": "tcp", "dport": "6443", "source": "10.0.0.0/24", "comment": "taloscluster: kubernetes", "enable": 1},
		{"type": "in", "action": "ACCEPT", "proto": "icmp", "comment": "taloscluster: icmp"},
	}
	for _, r := range rules {
		if err := c.Post(ctx, r, base+"/rules"); err != nil {
			t.Fatalf("creating rule %v: %v", r["comment"], err)
		}
	}
	list := listRules(t, c, base)
	if want := []string{"taloscluster: icmp", "taloscluster: kubernetes", "taloscluster: talos"}; !slices.Equal(comments(list), want) {
		t.Errorf("rule order = %v, want %v", comments(list), want)
	}
	first := list[0]
	if first["pos"] != float64(0) || first["enable"] != float64(0) || first["type"] != "in" || first["action"] != "ACCEPT" || first["proto"] != "icmp" {
		t.Errorf("rule 0 = %v", first)
	}
	if list[1]["dport"] != "6443" || list[1]["source"] != "10.0.0.0/24" || list[1]["enable"] != float64(1) || list[1]["ipversion"] != float64(4) {
		t.Errorf("rule 1 = %v", list[1])
	}

	// Deleting renumbers the rules after it.
	if err := c.Delete(ctx, base+"/rules/0"); err != nil {
		t.Fatalf("deleting rule 0: %v", err)
	}
	list = listRules(t, c, base)
	if want := []string{"taloscluster: kubernetes", "taloscluster: talos"}; !slices.Equal(comments(list), want) {
		t.Errorf("after delete = %v, want %v", comments(list), want)
	}
	for i, r := range list {
		if r["pos"] != float64(i) {
			t.Errorf("rule %d has pos %v", i, r["pos"])
		}
	}

	// Update one rule and move another.
	if err := c.Put(ctx, map[string]any{"enable": 0, "source": "10.0.1.0/24"}, base+"/rules/1"); err != nil {
		t.Fatalf("updating rule 1: %v", err)
	}
	one, err := c.GetItemConfigMapStringInterface(ctx, base+"/rules/1", "rule", "config")
	if err != nil {
		t.Fatal(err)
	}
	if one["enable"] != float64(0) || one["source"] != "10.0.1.0/24" || one["dport"] != "50000" {
		t.Errorf("updated rule = %v", one)
	}
	if err := c.Put(ctx, map[string]any{"moveto": 0}, base+"/rules/1"); err != nil {
		t.Fatalf("moving rule 1: %v", err)
	}
	if want := []string{"taloscluster: talos", "taloscluster: kubernetes"}; !slices.Equal(comments(listRules(t, c, base)), want) {
		t.Errorf("after move = %v, want %v", comments(listRules(t, c, base)), want)
	}
	state := l.srv.VMs()[0]
	if len(state.FirewallRules) != 2 || state.FirewallRules[1].Dport != "6443" || !state.FirewallRules[1].Enable || state.FirewallOptions["enable"] != "1" {
		t.Errorf("firewall state = %+v %v", state.FirewallRules, state.FirewallOptions)
	}

	// Invalid rules are refused with per-field errors, like Proxmox VE.
	for _, tc := range []struct {
		name  string
		rule  map[string]any
		field string
	}{
		{"port without protocol", map[string]any{"type": "in", "action": "ACCEPT", "dport": "80"}, "proto"},
		{"port with icmp", map[string]any{"type": "in", "action": "ACCEPT", "proto": "icmp", "dport": "80"}, "dport"},
		{"bad action", map[string]any{"type": "in", "action": "ALLOW"}, "action"},
		{"bad source", map[string]any{"type": "in", "action": "ACCEPT", "source": "10.0.0.0/33"}, "source"},
		{"missing type", map[string]any{"action": "ACCEPT"}, "type"},
	} {
		err := c.Post(ctx, tc.rule, base+"/rules")
		var apiErr *proxmox.ApiError
		if !errors.As(err, &apiErr) || apiErr.Code != "400" || apiErr.Errors[tc.field] == nil {
			t.Errorf("%s: error = %v, want a 400 naming %s", tc.name, err, tc.field)
		}
	}
	if err := c.Delete(ctx, base+"/rules/7"); err == nil {
		t.Error("deleting a missing rule succeeded")
	}

	// Datacenter firewall: off on a fresh cluster.
	dc, err := c.GetItemConfigMapStringInterface(ctx, "/cluster/firewall/options", "firewall", "options")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dc["enable"]; ok || l.srv.ClusterFirewall() {
		t.Errorf("fresh datacenter firewall = %v", dc)
	}
	if err := c.Put(ctx, map[string]any{"enable": 1}, "/cluster/firewall/options"); err != nil {
		t.Fatal(err)
	}
	if !l.srv.ClusterFirewall() {
		t.Error("datacenter firewall still off")
	}
}

func listRules(t *testing.T, c *proxmox.Client, base string) []map[string]any {
	t.Helper()
	raw, err := c.GetItemListInterfaceArray(t.Context(), base+"/rules")
	if err != nil {
		t.Fatalf("listing rules: %v", err)
	}
	out := make([]map[string]any, len(raw))
	for i, r := range raw {
		out[i] = r.(map[string]any)
	}
	return out
}

func comments(rules []map[string]any) []string {
	var out []string
	for _, r := range rules {
		out = append(out, fmt.Sprint(r["comment"]))
	}
	return out
}
