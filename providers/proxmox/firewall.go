package proxmox

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/types/network"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
)

// commentPrefix marks the per-VM firewall rules the engine writes.
const commentPrefix = "taloscluster:"

// Desired per-VM firewall options; written only when different.
var fwOptions = map[string]string{"enable": "1", "policy_in": "DROP", "policy_out": "ACCEPT"}

// fwRule is one Proxmox per-VM firewall rule.
type fwRule struct {
	Pos     int
	Type    string
	Action  string
	Proto   string
	Dport   string
	Source  string
	Comment string
	Enable  bool
}

// allPorts is the port range the engine writes for a rule on every port.
const allPorts = "1:65535"

// canonicalPort returns the port of a rule as compared: Proxmox reads a
// rule without dport as one on every port, so the engine's 1:65535 and an
// empty dport (the Python taloscluster's intra-cluster rules) are equal.
func canonicalPort(dport string) string {
	if dport == allPorts {
		return ""
	}
	return dport
}

// key identifies what a rule allows, whatever its position or comment.
func (r fwRule) key() string {
	return strings.Join([]string{r.Type, r.Action, r.Proto, canonicalPort(r.Dport), r.Source}, "|")
}

// same reports whether o is the rule r described when it was planned:
// the same allowance, comment and enabled state.
func (r fwRule) same(o fwRule) bool {
	return r.key() == o.key() && r.Comment == o.Comment && r.Enable == o.Enable
}

func (r fwRule) String() string {
	s := r.Action + " " + r.Proto
	if r.Dport != "" {
		s += "/" + r.Dport
	}
	if r.Source != "" {
		s += " from " + r.Source
	}
	return s
}

// desiredRules mirrors the Talos host firewall (the same policy on every
// target): ICMP, then one accept per protocol, port and source.
func (p *Provider) desiredRules() ([]fwRule, error) {
	docs, err := machineconfig.Firewall(p.c)
	if err != nil {
		return nil, err
	}
	out := []fwRule{{Type: "in", Action: "ACCEPT", Proto: "icmp", Comment: commentPrefix + "icmp", Enable: true}}
	for _, d := range docs {
		rc, ok := d.(*network.RuleConfigV1Alpha1)
		if !ok {
			continue
		}
		for _, pr := range rc.PortSelector.Ports {
			dport := strconv.Itoa(int(pr.Lo))
			if pr.Hi != pr.Lo {
				dport += ":" + strconv.Itoa(int(pr.Hi))
			}
			for _, in := range rc.Ingress {
				src := in.Subnet.String()
				if src == "0.0.0.0/0" {
					src = ""
				}
				out = append(out, fwRule{Type: "in", Action: "ACCEPT", Proto: rc.PortSelector.Protocol.String(),
					Dport: dport, Source: src, Comment: commentPrefix + rc.MetaName, Enable: true})
			}
		}
	}
	return out, nil
}

// governed reports whether the engine owns a rule: ours by marker, or on a
// protocol and port the security policy governs.
func governed(r fwRule, desired []fwRule) bool {
	if strings.HasPrefix(r.Comment, commentPrefix) {
		return true
	}
	for _, d := range desired {
		if d.Proto == r.Proto && canonicalPort(d.Dport) == canonicalPort(r.Dport) {
			return true
		}
	}
	return false
}

// dhcpClientPort is the port of the desired dhcp-client rule.
const dhcpClientPort = "68"

// satisfiedByOptions reports whether the VM's firewall options already
// allow what desired rule r allows, so that r need not be added: with the
// option dhcp=1 (which the Python taloscluster sets) Proxmox itself
// accepts the DHCP replies the dhcp-client rule (udp/68 from anywhere) is
// there for. A rule that exists anyway is kept.
func satisfiedByOptions(r fwRule, options map[string]string) bool {
	return options["dhcp"] == "1" && r.Type == "in" && r.Action == "ACCEPT" &&
		r.Proto == "udp" && r.Dport == dhcpClientPort && r.Source == ""
}

// firewallDiff returns the rules to add and the rules to delete (highest
// position first) to bring observed to desired, given the VM's firewall
// options. Missing rules are added before stale ones are deleted, unless
// the options already allow what they allow; duplicates collapse to one;
// a disabled rule of ours is replaced. Rules on other ports are left alone.
func firewallDiff(observed, desired []fwRule, options map[string]string) (add, del []fwRule, foreign []fwRule) {
	have := map[string]bool{}
	for _, o := range observed {
		if o.Enable {
			have[o.key()] = true
		}
	}
	want := map[string]bool{}
	for _, d := range desired {
		want[d.key()] = true
		if !have[d.key()] && !satisfiedByOptions(d, options) {
			add = append(add, d)
			have[d.key()] = true
		}
	}
	kept := map[string]bool{}
	for _, o := range observed {
		if !governed(o, desired) {
			foreign = append(foreign, o)
			continue
		}
		if o.Enable && want[o.key()] && !kept[o.key()] {
			kept[o.key()] = true
			continue
		}
		del = append(del, o)
	}
	slices.SortFunc(del, func(a, b fwRule) int { return b.Pos - a.Pos })
	return add, del, foreign
}

func (p *Provider) rulesURL(v *vm) string {
	return fmt.Sprintf("/nodes/%s/qemu/%d/firewall/rules", v.node, v.id)
}

// rules reads a VM's firewall rules.
func (p *Provider) rules(ctx context.Context, v *vm) ([]fwRule, error) {
	list, err := p.api.GetItemListInterfaceArray(ctx, p.rulesURL(v))
	if err != nil {
		return nil, fmt.Errorf("reading the firewall rules of %s: %w", v.name, err)
	}
	out := make([]fwRule, 0, len(list))
	for _, item := range list {
		m, _ := item.(map[string]any)
		out = append(out, fwRule{
			Pos: num(m["pos"]), Type: str(m["type"]), Action: str(m["action"]), Proto: str(m["proto"]),
			Dport: str(m["dport"]), Source: str(m["source"]), Comment: str(m["comment"]), Enable: str(m["enable"]) == "1",
		})
	}
	return out, nil
}

func (p *Provider) addRule(ctx context.Context, v *vm, r fwRule) error {
	params := map[string]any{"type": r.Type, "action": r.Action, "enable": 1, "comment": r.Comment}
	if r.Proto != "" {
		params["proto"] = r.Proto
	}
	if r.Dport != "" {
		params["dport"] = r.Dport
	}
	if r.Source != "" {
		params["source"] = r.Source
	}
	if err := p.api.Post(ctx, params, p.rulesURL(v)); err != nil {
		return fmt.Errorf("adding firewall rule %s on %s: %w", r, v.name, err)
	}
	return nil
}

func (p *Provider) deleteRule(ctx context.Context, v *vm, r fwRule) error {
	if err := p.api.Delete(ctx, fmt.Sprintf("%s/%d", p.rulesURL(v), r.Pos)); err != nil {
		return fmt.Errorf("deleting firewall rule %d (%s) on %s: %w", r.Pos, r, v.name, err)
	}
	return nil
}

// optionsDiff returns the firewall options that differ from the desired.
func optionsDiff(have map[string]string) map[string]string {
	out := map[string]string{}
	for k, want := range fwOptions {
		if have[k] != want {
			out[k] = want
		}
	}
	return out
}
