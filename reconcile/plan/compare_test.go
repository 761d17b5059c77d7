package plan_test

import (
	"slices"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

func TestDifferences(t *testing.T) {
	t.Parallel()
	worker := plan.Change{Phase: plan.PhaseCompute, Domain: plan.DomainProvider, Action: plan.ActionCreate,
		Resource: machine("a-worker-02"), Attributes: []plan.Attribute{{Key: "cores", Value: "4"}}}
	shown := plan.New("a")
	shown.Add(worker)
	if d := plan.Differences(shown, shown.Sorted()); d != nil {
		t.Fatalf("a plan differs from its own copy: %v", d)
	}
	now := plan.New("a")
	bigger := worker
	bigger.Attributes = []plan.Attribute{{Key: "cores", Value: "8"}}
	now.Add(bigger)
	now.Refuse(machine("a-worker-01"), "disk shrink")
	d := plan.Differences(shown, now)
	if len(d) != 3 || !slices.ContainsFunc(d, func(s string) bool { return s == "+ refused machine a-worker-01: disk shrink" }) {
		t.Fatalf("differences %q, want the changed step as gone and added, and the new refusal", d)
	}
	if d := plan.Differences(nil, shown); len(d) != 1 || d[0][0] != '+' {
		t.Fatalf("differences from no plan: %q", d)
	}
}

func TestDestructive(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		c    plan.Change
		want bool
	}{
		{plan.Change{Action: plan.ActionDelete, Resource: machine("a")}, true},
		{plan.Change{Action: plan.ActionReplace, Resource: machine("a")}, true},
		{plan.Change{Action: plan.ActionCreate, Resource: machine("a")}, false},
		{plan.Change{Action: plan.ActionDelete, Resource: plan.Resource{Kind: plan.KindCIData, Name: "a"}}, false},
	} {
		if got := tt.c.Destructive(); got != tt.want {
			t.Errorf("%s %s: Destructive() = %t, want %t", tt.c.Action, tt.c.Resource, got, tt.want)
		}
	}
}
