package proxmox

import (
	"testing"
)

func TestFirewallDiff(t *testing.T) {
	t.Parallel()
	api := fwRule{Type: "in", Action: "ACCEPT", Proto: "tcp", Dport: "6443", Source: "100.64.0.0/10", Comment: commentPrefix + "security-kubernetes", Enable: true}
	icmp := fwRule{Type: "in", Action: "ACCEPT", Proto: "icmp", Comment: commentPrefix + "icmp", Enable: true}
	desired := []fwRule{icmp, api}
	at := func(r fwRule, pos int) fwRule { r.Pos = pos; return r }

	cases := []struct {
		name          string
		observed      []fwRule
		add, del, own int
	}{
		{name: "new VM gets every rule", observed: nil, add: 2},
		{name: "in sync", observed: []fwRule{at(icmp, 0), at(api, 1)}},
		{name: "duplicate collapses", observed: []fwRule{at(icmp, 0), at(api, 1), at(api, 2)}, del: 1},
		{name: "disabled rule of ours is replaced", observed: []fwRule{at(icmp, 0), func() fwRule { r := at(api, 1); r.Enable = false; return r }()}, add: 1, del: 1},
		{name: "unmarked rule on a governed port is reconciled", observed: []fwRule{at(icmp, 0), at(api, 1),
			{Pos: 2, Type: "in", Action: "ACCEPT", Proto: "tcp", Dport: "6443", Source: "0.0.0.0/0", Enable: true}}, del: 1},
		{name: "rule on another port is left alone", observed: []fwRule{at(icmp, 0), at(api, 1),
			{Pos: 2, Type: "in", Action: "ACCEPT", Proto: "tcp", Dport: "22", Source: "10.0.0.0/8", Enable: true}}, own: 1},
		{name: "stale rule of ours on an old port is removed", observed: []fwRule{at(icmp, 0), at(api, 1),
			{Pos: 2, Type: "in", Action: "ACCEPT", Proto: "tcp", Dport: "9100", Comment: commentPrefix + "security-metrics", Enable: true}}, del: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			add, del, foreign := firewallDiff(tc.observed, desired, fwOptions)
			if len(add) != tc.add || len(del) != tc.del || len(foreign) != tc.own {
				t.Fatalf("add %v, delete %v, foreign %v; want %d, %d, %d", add, del, foreign, tc.add, tc.del, tc.own)
			}
			for i := 1; i < len(del); i++ {
				if del[i].Pos > del[i-1].Pos {
					t.Fatalf("deletions not highest position first: %v", del)
				}
			}
		})
	}
}
