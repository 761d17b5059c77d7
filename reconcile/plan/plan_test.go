package plan_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

func machine(name string) plan.Resource {
	return plan.Resource{Kind: plan.KindMachine, Name: name}
}

func TestAddWarnRefuse(t *testing.T) {
	t.Parallel()
	p := plan.New("prod-a")
	p.Add(plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionCreate, Resource: machine("prod-a-worker-01")})
	p.Add(plan.Change{Phase: plan.PhaseValidate, Action: plan.ActionRefuse, Resource: machine("prod-a-worker-02"), Reason: "disk shrink"})
	p.Refuse(machine("prod-a-worker-02"), "disk shrink")
	p.Refuse(machine("prod-a-worker-03"), "node change")
	p.Warn("even control-plane count")
	p.Warn("even control-plane count")
	p.Warn("tailscale key missing")

	if got := len(p.Changes); got != 2 {
		t.Errorf("len(Changes) = %d, want 2", got)
	}
	wantRefusals := []plan.Refusal{
		{Resource: machine("prod-a-worker-02"), Reason: "disk shrink"},
		{Resource: machine("prod-a-worker-03"), Reason: "node change"},
	}
	if !reflect.DeepEqual(p.Refusals, wantRefusals) {
		t.Errorf("Refusals = %+v, want %+v", p.Refusals, wantRefusals)
	}
	if want := []string{"even control-plane count", "tailscale key missing"}; !reflect.DeepEqual(p.Warnings, want) {
		t.Errorf("Warnings = %q, want %q", p.Warnings, want)
	}
}

func TestZeroPlanIsUsable(t *testing.T) {
	t.Parallel()
	var p plan.Plan
	if !p.Empty() {
		t.Error("zero plan is not empty")
	}
	p.Add(plan.Change{Phase: plan.PhaseImage, Action: plan.ActionCreate, Resource: plan.Resource{Kind: plan.KindImage, Name: "talos"}})
	p.Warn("w")
	if p.Empty() {
		t.Error("plan with a change is empty")
	}
}

func TestEmpty(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		plan *plan.Plan
		want bool
	}{
		{"nil", nil, true},
		{"new", plan.New("a"), true},
		{"warnings only", &plan.Plan{Warnings: []string{"w"}}, true},
		{"change", &plan.Plan{Changes: []plan.Change{{Action: plan.ActionCreate}}}, false},
		{"refusal", &plan.Plan{Refusals: []plan.Refusal{{Reason: "no"}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.plan.Empty(); got != tt.want {
				t.Errorf("Empty() = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestSorted(t *testing.T) {
	t.Parallel()
	p := plan.New("prod-a")
	p.Add(plan.Change{Phase: plan.PhaseBootstrap, Action: plan.ActionBootstrap, Resource: machine("prod-a-controlplane-01")})
	p.Add(plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionCreate, Resource: machine("prod-a-worker-01"),
		Attributes: []plan.Attribute{{Key: "node", Value: "pve1"}, {Key: "cores", Value: "4"}, {Key: "memory", Value: "8 GB"}}})
	p.Add(plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionCreate, Resource: plan.Resource{Kind: plan.KindCIData, Name: "prod-a-worker-01"}})
	p.Add(plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionCreate, Resource: machine("prod-a-controlplane-01")})
	p.Add(plan.Change{Phase: plan.PhaseImage, Action: plan.ActionCreate, Resource: plan.Resource{Kind: plan.KindImage, Name: "talos"}})
	p.Add(plan.Change{Phase: plan.PhaseUpgrade, Action: plan.ActionUpgradeKubernetes, Resource: machine("prod-a-controlplane-01")})
	p.Add(plan.Change{Phase: plan.PhaseUpgrade, Action: plan.ActionUpgradeTalos, Resource: machine("prod-a-controlplane-01")})
	p.Refuse(machine("b"), "z")
	p.Refuse(plan.Resource{Kind: plan.KindImage, Name: "c"}, "y")
	p.Refuse(machine("a"), "x")
	before := cloneJSON(t, p)

	s := p.Sorted()

	var got []string
	for _, c := range s.Changes {
		got = append(got, string(c.Phase)+" "+c.Resource.String()+" "+string(c.Action))
	}
	// By phase; within a phase, in the order the planner added them,
	// which is the order converge runs them.
	want := []string{
		"image image talos create",
		"upgrade machine prod-a-controlplane-01 upgrade-kubernetes",
		"upgrade machine prod-a-controlplane-01 upgrade-talos",
		"compute machine prod-a-worker-01 create",
		"compute cidata prod-a-worker-01 create",
		"compute machine prod-a-controlplane-01 create",
		"bootstrap machine prod-a-controlplane-01 bootstrap",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sorted changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var keys []string
	for _, a := range s.Changes[3].Attributes {
		keys = append(keys, a.Key)
	}
	if want := []string{"cores", "memory", "node"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("attribute keys = %q, want %q", keys, want)
	}
	var refused []string
	for _, r := range s.Refusals {
		refused = append(refused, r.Resource.String())
	}
	if want := []string{"image c", "machine a", "machine b"}; !reflect.DeepEqual(refused, want) {
		t.Errorf("refusals = %q, want %q", refused, want)
	}
	if after := cloneJSON(t, p); after != before {
		t.Errorf("Sorted changed its receiver:\nbefore %s\nafter  %s", before, after)
	}
}

func TestSortedNil(t *testing.T) {
	t.Parallel()
	var p *plan.Plan
	s := p.Sorted()
	if s == nil || s.Changes == nil || s.Warnings == nil || s.Refusals == nil || s.Version != plan.SchemaVersion {
		t.Fatalf("Sorted() of nil = %+v, want an empty plan with non-nil lists", s)
	}
}

func TestSortKeepsExecutionOrderWithinAPhase(t *testing.T) {
	t.Parallel()
	changes := []plan.Change{
		{Phase: "custom", Action: plan.ActionCreate, Resource: plan.Resource{Kind: "widget", Name: "w"}},
		{Phase: plan.PhaseNetwork, Action: plan.ActionDelete, Resource: plan.Resource{Kind: plan.KindFirewallRule, Name: "metrics"}},
		{Phase: plan.PhaseScaleDown, Action: plan.ActionDelete, Resource: machine("a-worker-03")},
		{Phase: plan.PhaseNetwork, Action: plan.ActionCreate, Resource: plan.Resource{Kind: plan.KindFirewallRule, Name: "ingress"}},
	}
	got := (&plan.Plan{Changes: changes}).Sorted().Changes
	var order []string
	for _, c := range got {
		order = append(order, c.Resource.Name)
	}
	if want := []string{"metrics", "ingress", "a-worker-03", "w"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %q, want %q (phases in converge order, unknown last, insertion order within a phase)", order, want)
	}
}

func TestCounts(t *testing.T) {
	t.Parallel()
	p := plan.New("a")
	for _, a := range []plan.Action{
		plan.ActionCreate, plan.ActionCreate, plan.ActionUpdate, plan.ActionApplyConfig,
		plan.ActionReplace, plan.ActionDelete, plan.ActionUpgradeTalos,
		plan.ActionUpgradeKubernetes, plan.ActionBootstrap, plan.ActionRefuse, "unknown",
	} {
		p.Add(plan.Change{Phase: plan.PhaseCompute, Action: a, Resource: machine(string(a))})
	}
	p.Refuse(machine("other"), "no")
	want := plan.Counts{Create: 2, Update: 2, Replace: 1, Delete: 1, Upgrade: 2, Bootstrap: 1, Refused: 2}
	if got := p.Counts(); got != want {
		t.Errorf("Counts() = %+v, want %+v", got, want)
	}
	var nilPlan *plan.Plan
	if got := nilPlan.Counts(); got != (plan.Counts{}) {
		t.Errorf("nil Counts() = %+v, want zero", got)
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	change := func(a plan.Action) plan.Change {
		return plan.Change{Phase: plan.PhaseCompute, Action: a, Resource: machine("m")}
	}
	build := func(actions []plan.Action, refusals, warnings int) *plan.Plan {
		p := plan.New("a")
		for _, a := range actions {
			p.Add(change(a))
		}
		for i := range refusals {
			p.Refuse(machine(strings.Repeat("r", i+1)), "no")
		}
		for i := range warnings {
			p.Warn(strings.Repeat("w", i+1))
		}
		return p
	}
	tests := []struct {
		name string
		plan *plan.Plan
		want string
	}{
		{"nil", nil, "no changes"},
		{"empty", build(nil, 0, 0), "no changes"},
		{"warnings only", build(nil, 0, 2), "no changes, 2 warnings"},
		{"creates", build([]plan.Action{plan.ActionCreate, plan.ActionCreate}, 0, 0), "+2 ~0 -0"},
		{
			"mixed",
			build([]plan.Action{plan.ActionCreate, plan.ActionCreate, plan.ActionApplyConfig, plan.ActionUpgradeTalos}, 0, 0),
			"+2 ~1 -0, 1 upgrade",
		},
		{
			"everything",
			build([]plan.Action{
				plan.ActionCreate, plan.ActionUpdate, plan.ActionReplace, plan.ActionReplace, plan.ActionDelete,
				plan.ActionUpgradeTalos, plan.ActionUpgradeKubernetes, plan.ActionBootstrap,
			}, 1, 1),
			"+1 ~1 -1, 2 replacements, 2 upgrades, 1 bootstrap, 1 refused, 1 warning",
		},
		{"refusal only", build(nil, 3, 0), "+0 ~0 -0, 3 refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.plan.Summary()
			if got != tt.want {
				t.Errorf("Summary() = %q, want %q", got, tt.want)
			}
			if len(got) > 140 {
				t.Errorf("Summary() is %d characters, want at most 140", len(got))
			}
		})
	}
}

func TestSummaryLengthBound(t *testing.T) {
	t.Parallel()
	p := &plan.Plan{Changes: make([]plan.Change, 0, 8)}
	for _, a := range plan.Actions() {
		p.Changes = append(p.Changes, plan.Change{Action: a})
	}
	for i := range 100000 {
		p.Warnings = append(p.Warnings, strings.Repeat("x", i%7))
	}
	if got := p.Summary(); len(got) > 140 {
		t.Errorf("Summary() is %d characters: %q", len(got), got)
	}
}

func TestJSONArraysNeverNull(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		plan any
	}{
		{"zero value", plan.Plan{Cluster: "a"}},
		{"zero pointer", &plan.Plan{Cluster: "a"}},
		{"new", plan.New("a")},
		{"change without attributes", &plan.Plan{Cluster: "a", Changes: []plan.Change{{Phase: plan.PhaseImage, Action: plan.ActionCreate}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tt.plan)
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			if strings.Contains(s, "null") {
				t.Errorf("JSON contains null: %s", s)
			}
			for _, key := range []string{`"version":2`, `"warnings":[]`, `"refusals":[]`} {
				if !strings.Contains(s, key) {
					t.Errorf("JSON lacks %s: %s", key, s)
				}
			}
			if strings.Contains(s, `"commit"`) || strings.Contains(s, `"diff"`) {
				t.Errorf("JSON has empty optional fields: %s", s)
			}
		})
	}
}

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	p := plan.New("prod-a")
	p.Commit = "0123456789abcdef0123456789abcdef01234567"
	p.Add(plan.Change{
		Phase:      plan.PhaseApplyConfig,
		Action:     plan.ActionApplyConfig,
		Resource:   machine("prod-a-controlplane-01"),
		Reason:     "config changed",
		Attributes: []plan.Attribute{{Key: "mode", Value: "no-reboot"}},
		Diff:       "-a\n+b\n",
	})
	p.Warn("careful")
	p.Refuse(machine("prod-a-worker-01"), "disk shrink")
	p.Unread("etcd members", "Unavailable")
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back plan.Plan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, p) {
		t.Errorf("round trip changed the plan:\n got %+v\nwant %+v", back, *p)
	}
	want := `{"version":2,"cluster":"prod-a","commit":"0123456789abcdef0123456789abcdef01234567","changes":[{"phase":"apply-config","action":"apply-config","resource":{"kind":"machine","name":"prod-a-controlplane-01"},"reason":"config changed","attributes":[{"key":"mode","value":"no-reboot"}],"diff":"-a\n+b\n"}],"warnings":["careful"],"refusals":[{"resource":{"kind":"machine","name":"prod-a-worker-01"},"reason":"disk shrink"}],"incomplete":true,"incomplete_reasons":["etcd members could not be read: Unavailable"]}`
	if string(b) != want {
		t.Errorf("JSON:\n got %s\nwant %s", b, want)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionCreate, Resource: machine("a-worker-01")}
	tests := []struct {
		name    string
		plan    *plan.Plan
		wantErr []string
	}{
		{"nil", nil, nil},
		{"empty", plan.New("a"), nil},
		{"good", &plan.Plan{Changes: []plan.Change{good}}, nil},
		{
			"every problem",
			&plan.Plan{
				Version: 3,
				Changes: []plan.Change{
					good,
					{Phase: "later", Action: "rename", Resource: plan.Resource{Kind: "widget"}},
				},
				Refusals: []plan.Refusal{{Resource: plan.Resource{Kind: "gadget", Name: "g"}}},
			},
			[]string{
				"unsupported schema version 3",
				`change 1 (widget ): unknown phase "later"`,
				`change 1 (widget ): unknown action "rename"`,
				`change 1 (widget ): unknown resource kind "widget"`,
				"change 1 (widget ): empty resource name",
				`refusal 0 (gadget g): unknown resource kind "gadget"`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.plan.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate() = nil, want errors")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func cloneJSON(t *testing.T, p *plan.Plan) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestJSONEscapingFollowsCaller(t *testing.T) {
	t.Parallel()
	p := plan.New("a<b>")
	p.Add(plan.Change{Phase: plan.PhaseCompute, Action: plan.ActionUpdate, Resource: machine("m"),
		Attributes: []plan.Attribute{{Key: "cores", Value: "4 -> 8"}}})

	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(string(b), "<>") {
		t.Errorf("json.Marshal left '<' or '>' unescaped: %s", b)
	}

	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"a<b>"`) || !strings.Contains(buf.String(), `"4 -> 8"`) {
		t.Errorf("encoder without HTML escaping escaped anyway: %s", buf.String())
	}
}
