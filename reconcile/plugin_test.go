package reconcile

import (
	"context"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// stepsPlugin plans as many steps as its state says, a refusal when the
// state is negative.
type stepsPlugin struct{ name, after string }

func (p stepsPlugin) Name() string { return p.name }
func (p stepsPlugin) After() []string {
	if p.after == "" {
		return nil
	}
	return []string{p.after}
}
func (stepsPlugin) Configured(*spec.Cluster) bool { return true }
func (stepsPlugin) Observe(context.Context, PluginEnv) (PluginState, error) {
	return 0, nil
}
func (p stepsPlugin) Plan(_ *spec.Cluster, st PluginState) ([]plan.Change, error) {
	n := st.(int)
	if n < 0 {
		return []plan.Change{{Action: plan.ActionRefuse, Resource: plan.Resource{Kind: "thing", Name: p.name}, Reason: "not ours"}}, nil
	}
	out := make([]plan.Change, n)
	for i := range out {
		out[i] = plan.Change{Action: plan.ActionCreate, Resource: plan.Resource{Kind: "thing", Name: p.name}, Reason: "missing"}
	}
	return out, nil
}
func (p stepsPlugin) PlanTeardown(c *spec.Cluster, st PluginState) ([]plan.Change, error) {
	return p.Plan(c, st)
}
func (stepsPlugin) Apply(context.Context, PluginEnv, plan.Change) (map[string]string, error) {
	return nil, nil
}

// PluginChecks agrees with the plan: a plugin after one with steps is
// deferred (it is planned once they are made), a refusal is drift, and
// what could not be read is unknown.
func TestPluginChecksAgreeWithThePlan(t *testing.T) {
	t.Parallel()
	e := &Engine{Cluster: &spec.Cluster{}, Plugins: []Plugin{
		stepsPlugin{name: "argocd", after: "rancher"}, stepsPlugin{name: "rancher"}, stepsPlugin{name: "charts"}, stepsPlugin{name: "zeta"}}}
	obs := &Observation{Plugins: map[string]pluginFacts{
		"charts":  {State: -1},
		"rancher": {State: 2},
		"argocd":  {State: 1},
		"zeta":    {Unread: "connection refused"},
	}}
	got := map[string]PluginCheck{}
	var order []string
	for _, pc := range e.PluginChecks(t.Context(), obs) {
		got[pc.Name] = pc
		order = append(order, pc.Name)
	}
	if strings.Join(order, ",") != "charts,rancher,argocd,zeta" {
		t.Errorf("order %v", order)
	}
	if pc := got["charts"]; pc.State != PluginDrift || len(pc.Steps) != 1 || !strings.Contains(pc.Steps[0], "not ours") {
		t.Errorf("a refusing plugin: %+v", pc)
	}
	if pc := got["rancher"]; pc.State != PluginDrift || len(pc.Steps) != 2 {
		t.Errorf("a plugin with steps: %+v", pc)
	}
	if pc := got["argocd"]; pc.State != PluginDeferred || !strings.Contains(pc.Reason, "rancher") {
		t.Errorf("a plugin after one with steps: %+v", pc)
	}
	if pc := got["zeta"]; pc.State != PluginUnknown || pc.Reason != "connection refused" {
		t.Errorf("an unread plugin: %+v", pc)
	}
	obs.Plugins["rancher"] = pluginFacts{State: 0}
	for _, pc := range e.PluginChecks(t.Context(), obs) {
		if pc.Name == "argocd" && (pc.State != PluginDrift || len(pc.Steps) != 1) {
			t.Errorf("argocd once rancher is in sync: %+v", pc)
		}
	}
}

// A plugin's refusal refuses that plugin alone: a failing step when
// converging, what the plugin keeps in a teardown.
func TestPluginRefusalIsThePluginsStep(t *testing.T) {
	t.Parallel()
	refusal := plan.Change{Action: plan.ActionRefuse, Resource: plan.Resource{Kind: "thing", Name: "x"}, Reason: "not ours"}
	st := wrapPluginStep("rancher", refusal, false)
	if st.Action != plan.ActionWait || st.Phase != plan.PhasePlugins || !strings.HasPrefix(st.Reason, "refused: not ours") {
		t.Errorf("converging: %+v", st)
	}
	if op, ok := st.Op.(pluginRefused); !ok || op.plugin != "rancher" || pluginOf(st) != "rancher" {
		t.Errorf("converging: op %#v", st.Op)
	}
	st = wrapPluginStep("rancher", refusal, true)
	if op, ok := st.Op.(pluginKept); !ok || st.Reason != "kept: not ours" || op.plugin != "rancher" {
		t.Errorf("tearing down: %+v", st)
	}
}

// warnPlugin warns about its section.
type warnPlugin struct{ stepsPlugin }

func (warnPlugin) Warnings(*spec.Cluster) []string {
	return []string{"gateway is off while traefik is on"}
}

// The configured plugins' warnings carry their plugin's name, in the
// plugins' order.
func TestPluginWarnings(t *testing.T) {
	t.Parallel()
	got := pluginWarnings(&spec.Cluster{}, []Plugin{stepsPlugin{name: "argocd"}, warnPlugin{stepsPlugin{name: "charts"}}})
	if len(got) != 1 || got[0] != "charts: gateway is off while traefik is on" {
		t.Errorf("warnings %q", got)
	}
}
