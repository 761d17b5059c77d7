package plan_test

import (
	"slices"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

func TestPhasesOrder(t *testing.T) {
	t.Parallel()
	want := []plan.Phase{
		"validate", "image", "secrets", "network", "discover", "scale-down",
		"apply-config", "upgrade", "compute", "bootstrap", "kubeconfig",
		"health", "plugins", "destroy",
	}
	got := plan.Phases()
	if !slices.Equal(got, want) {
		t.Fatalf("Phases() = %v, want %v", got, want)
	}
	for i, p := range got {
		if p.Order() != i {
			t.Errorf("%s.Order() = %d, want %d", p, p.Order(), i)
		}
		if !p.Valid() {
			t.Errorf("%s.Valid() = false", p)
		}
	}
	got[0] = "changed"
	if plan.Phases()[0] != plan.PhaseValidate {
		t.Error("Phases() returned the package's own slice")
	}
}

func TestComparePhases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b plan.Phase
		want int
	}{
		{plan.PhaseValidate, plan.PhaseImage, -1},
		{plan.PhasePlugins, plan.PhaseHealth, 1},
		{plan.PhaseUpgrade, plan.PhaseUpgrade, 0},
		{plan.PhaseScaleDown, plan.PhaseCompute, -1},
		{plan.PhasePlugins, "zzz-unknown", -1},
		{"aaa-unknown", plan.PhasePlugins, 1},
		{"aaa-unknown", "bbb-unknown", -1},
	}
	for _, tt := range tests {
		t.Run(string(tt.a)+"/"+string(tt.b), func(t *testing.T) {
			t.Parallel()
			if got := sign(plan.ComparePhases(tt.a, tt.b)); got != tt.want {
				t.Errorf("ComparePhases(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

func TestUnknownPhase(t *testing.T) {
	t.Parallel()
	p := plan.Phase("later")
	if p.Valid() {
		t.Error("unknown phase is valid")
	}
	if p.Order() != len(plan.Phases()) {
		t.Errorf("Order() = %d, want %d", p.Order(), len(plan.Phases()))
	}
}

func TestActionSymbol(t *testing.T) {
	t.Parallel()
	tests := []struct {
		action plan.Action
		want   string
	}{
		{plan.ActionCreate, "+"},
		{plan.ActionUpdate, "~"},
		{plan.ActionReplace, "-/+"},
		{plan.ActionDelete, "-"},
		{plan.ActionApplyConfig, ">"},
		{plan.ActionUpgradeTalos, "^"},
		{plan.ActionUpgradeKubernetes, "^"},
		{plan.ActionBootstrap, "*"},
		{plan.ActionDrain, "v"},
		{plan.ActionReset, "x"},
		{plan.ActionRestart, "@"},
		{plan.ActionWait, "="},
		{plan.ActionRefuse, "!"},
		{"rename", "?"},
	}
	for _, tt := range tests {
		t.Run(string(tt.action), func(t *testing.T) {
			t.Parallel()
			if got := tt.action.Symbol(); got != tt.want {
				t.Errorf("Symbol() = %q, want %q", got, tt.want)
			}
			if got, want := tt.action.Valid(), tt.want != "?"; got != want {
				t.Errorf("Valid() = %t, want %t", got, want)
			}
		})
	}
	if got := len(plan.Actions()); got != len(tests)-1 {
		t.Errorf("len(Actions()) = %d, want %d", got, len(tests)-1)
	}
}

func TestKinds(t *testing.T) {
	t.Parallel()
	required := []plan.ResourceKind{
		"machine", "image", "network", "subnet", "router", "port",
		"floating-ip", "security-group", "security-rule", "firewall-options",
		"firewall-rule", "resource-pool", "cidata", "talossecrets",
		"talosconfig", "kubeconfig", "plugin",
	}
	kinds := plan.Kinds()
	for _, k := range required {
		if !slices.Contains(kinds, k) || !k.Valid() {
			t.Errorf("kind %q missing", k)
		}
	}
	seen := map[plan.ResourceKind]bool{}
	for _, k := range kinds {
		if seen[k] {
			t.Errorf("kind %q listed twice", k)
		}
		seen[k] = true
	}
	if plan.ResourceKind("volume").Valid() {
		t.Error("unknown kind is valid")
	}
	if c := plan.CompareKinds(plan.KindImage, plan.KindMachine); c >= 0 {
		t.Errorf("CompareKinds(image, machine) = %d, want < 0", c)
	}
	if c := plan.CompareKinds(plan.KindPlugin, "aaa"); c >= 0 {
		t.Errorf("CompareKinds(plugin, unknown) = %d, want < 0", c)
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	default:
		return 0
	}
}
