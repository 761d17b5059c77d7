package proxmox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/plugins/argocd"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// nsPlugin is a plugin of the tests: it keeps a namespace of its own name
// in the cluster, labelled as registered, through the cluster's real
// Kubernetes API; its teardown labels it unregistered. It returns the
// namespace's UID as its result and records the results of the plugins
// before it. fail, when set, fails its Apply.
type nsPlugin struct {
	name, after string
	fail        error
	mu          sync.Mutex
	seen        []map[string]map[string]string // env.Results at each Apply
	applied     []string                       // the steps it made, "create"/"teardown"
	order       *[]string                      // shared: plugin names in the order they applied
}

type nsState struct{ exists, registered bool }

type nsOp struct{ teardown bool }

func (p *nsPlugin) Name() string                  { return p.name }
func (p *nsPlugin) Configured(*spec.Cluster) bool { return true }
func (p *nsPlugin) After() []string {
	if p.after == "" {
		return nil
	}
	return []string{p.after}
}

func (p *nsPlugin) client(env reconcile.PluginEnv) (kubernetes.Interface, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(env.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

func (p *nsPlugin) Observe(ctx context.Context, env reconcile.PluginEnv) (reconcile.PluginState, error) {
	if env.Kubeconfig == nil {
		return nsState{}, nil
	}
	kc, err := p.client(env)
	if err != nil {
		return nil, err
	}
	ns, err := kc.CoreV1().Namespaces().Get(ctx, "plugin-"+p.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err != nil && env.Teardown) {
		// Gone, or gone with the cluster's machines.
		return nsState{}, nil
	}
	if err != nil {
		return nil, err
	}
	return nsState{exists: true, registered: ns.Labels["registered"] == "true"}, nil
}

func (p *nsPlugin) Plan(_ *spec.Cluster, st reconcile.PluginState) ([]plan.Change, error) {
	if s := st.(nsState); s.exists && s.registered {
		return nil, nil
	}
	return []plan.Change{{Action: plan.ActionCreate, Resource: plan.Resource{Kind: "namespace", Name: "plugin-" + p.name},
		Reason: "the plugin's namespace", Op: nsOp{}}}, nil
}

func (p *nsPlugin) PlanTeardown(_ *spec.Cluster, st reconcile.PluginState) ([]plan.Change, error) {
	if !st.(nsState).exists {
		return nil, nil
	}
	return []plan.Change{{Action: plan.ActionDelete, Resource: plan.Resource{Kind: "namespace", Name: "plugin-" + p.name},
		Reason: "unregister", Op: nsOp{teardown: true}}}, nil
}

func (p *nsPlugin) Apply(ctx context.Context, env reconcile.PluginEnv, ch plan.Change) (map[string]string, error) {
	p.mu.Lock()
	results := map[string]map[string]string{}
	for k, v := range env.Results {
		results[k] = v
	}
	p.seen = append(p.seen, results)
	*p.order = append(*p.order, p.name)
	p.mu.Unlock()
	if p.fail != nil {
		return nil, p.fail
	}
	kc, err := p.client(env)
	if err != nil {
		return nil, err
	}
	op := ch.Op.(nsOp)
	label := map[string]string{"registered": fmt.Sprint(!op.teardown)}
	nss := kc.CoreV1().Namespaces()
	ns, err := nss.Get(ctx, "plugin-"+p.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ns, err = nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plugin-" + p.name, Labels: label}}, metav1.CreateOptions{})
	case err == nil:
		ns.Labels = label
		ns, err = nss.Update(ctx, ns, metav1.UpdateOptions{})
	}
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.applied = append(p.applied, map[bool]string{false: "create", true: "teardown"}[op.teardown])
	p.mu.Unlock()
	return map[string]string{"uid": string(ns.UID)}, nil
}

func pluginSteps(p *plan.Plan) []plan.Change {
	var out []plan.Change
	for _, ch := range p.Changes {
		if ch.Phase == plan.PhasePlugins {
			out = append(out, ch)
		}
	}
	return out
}

// TestPluginsRunAfterTheHealthGate: configured plugins are deferred while
// the cluster is not built, run at the end of its first converge in their
// order (each seeing the results of those before it), plan nothing once
// in place; a plugin that fails stops neither the other plugins nor the
// rest of the run, which fails naming it; destroy tears the plugins down
// in reverse order and removes the machines even when a teardown fails.
func TestPluginsRunAfterTheHealthGate(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "plugged", 0)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var order []string
	first := &nsPlugin{name: "alpha", order: &order}
	second := &nsPlugin{name: "beta", after: "alpha", order: &order}
	engine := func() *reconcile.Engine {
		e := w.engine(t)
		e.Plugins = []reconcile.Plugin{second, first}
		return e
	}

	p, err := engine().Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	steps := pluginSteps(p)
	if len(steps) != 2 || steps[0].Resource.Name != "alpha" || steps[1].Resource.Name != "beta" {
		t.Fatalf("the first plan's plugin steps are %+v, want alpha then beta, deferred", steps)
	}
	for _, st := range steps {
		if !strings.HasPrefix(st.Reason, "deferred: ") {
			t.Errorf("a plugin of a cluster not built yet is not deferred: %q", st.Reason)
		}
	}
	if p.Incomplete {
		t.Errorf("deferred plugins made the plan incomplete: %v", p.IncompleteReasons)
	}

	if err := engine().Converge(ctx); err != nil {
		t.Fatalf("first build: %v", err)
	}
	if !slices.Equal(order, []string{"alpha", "beta"}) {
		t.Fatalf("the plugins applied in the order %v, want alpha, beta", order)
	}
	if uid := second.seen[0]["alpha"]["uid"]; uid == "" {
		t.Errorf("beta did not see alpha's result: %v", second.seen)
	}
	if p, err := engine().Plan(ctx); err != nil || !p.Empty() {
		t.Fatalf("the plan after the plugins ran is not empty: %v %+v", err, p)
	}

	// alpha is unregistered behind the engine's back and fails now: beta
	// is still made, the run fails naming alpha.
	kubeconfig, err := os.ReadFile(filepath.Join(w.dir, reconcile.KubeconfigFile))
	if err != nil {
		t.Fatal(err)
	}
	kc, err := first.client(reconcile.PluginEnv{Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"plugin-alpha", "plugin-beta"} {
		ns, err := kc.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil || ns.Labels["registered"] != "true" {
			t.Fatalf("namespace %s after converge: %v %v", name, ns.Labels, err)
		}
		ns.Labels["registered"] = "false"
		if _, err := kc.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// beta runs after alpha and uses its results: while alpha has steps,
	// beta is planned and made once they are.
	p, err = engine().Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if steps := pluginSteps(p); len(steps) != 2 || steps[0].Resource.Name != "plugin-alpha" || steps[1].Resource.Name != "beta" ||
		!strings.Contains(steps[1].Reason, "deferred: it uses what the alpha plugin's steps make") {
		t.Fatalf("the plan with alpha's namespace to fix: %+v", steps)
	}
	first.fail = errors.New("alpha's API refused")
	order = nil
	err = engine().Converge(ctx)
	if !errors.Is(err, reconcile.ErrPluginFailed) || !strings.Contains(err.Error(), "alpha: ") || strings.Contains(err.Error(), "beta: ") {
		t.Fatalf("a run whose alpha plugin failed returned %v, want a plugin failure naming alpha alone", err)
	}
	if !slices.Equal(order, []string{"alpha", "beta"}) || len(second.applied) != 2 || second.applied[1] != "create" {
		t.Fatalf("after alpha failed, beta did not run: order %v, beta %v", order, second.applied)
	}

	// Destroy: beta's teardown before alpha's; alpha's fails, the machines
	// go all the same and destroy exits non-zero.
	order = nil
	err = engine().Destroy(ctx)
	if !errors.Is(err, reconcile.ErrPluginFailed) {
		t.Fatalf("destroy with a failed teardown returned %v, want a plugin failure", err)
	}
	if !slices.Equal(order, []string{"beta", "alpha"}) {
		t.Fatalf("teardown order %v, want beta then alpha", order)
	}
	if vms := w.lab.PVE.VMs(); len(vms) != 0 {
		t.Fatalf("a failed plugin teardown kept %d VMs", len(vms))
	}
	// The state stays, so that destroy can run again; it then completes.
	for _, f := range []string{reconcile.KubeconfigFile, reconcile.TalosSecretsFile} {
		if _, err := os.Stat(filepath.Join(w.dir, f)); err != nil {
			t.Errorf("%s after a failed plugin teardown: %v", f, err)
		}
	}
	first.fail = nil
	if err := engine().Destroy(ctx); err != nil {
		t.Fatalf("destroy again: %v", err)
	}
	if _, err := os.Stat(filepath.Join(w.dir, reconcile.TalosSecretsFile)); !os.IsNotExist(err) {
		t.Errorf("the identity after the second destroy: %v", err)
	}
}

// TestPluginSectionNamingNowhere: a plugin whose section is there but
// names nowhere to apply does not run, and the plan says so.
func TestPluginSectionNamingNowhere(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "idle", 0)
	w.set(t, "argocd", "{admins: [ops@example.org]}")
	e := w.engine(t)
	e.Plugins = []reconcile.Plugin{argocd.New(os.DirFS(w.dir))}
	p, err := e.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(p.Warnings, func(w string) bool { return strings.Contains(w, "argocd section names nowhere to apply") }) {
		t.Errorf("no warning for an argocd section without a kubeconfig or context: %v", p.Warnings)
	}
	if len(pluginSteps(p)) != 0 {
		t.Errorf("plugin steps for a plugin that does not run: %v", pluginSteps(p))
	}
}

// refusingPlugin is a plugin whose section cannot be used: its Preflight
// refuses it.
type refusingPlugin struct{ nsPlugin }

func (*refusingPlugin) Preflight(*spec.Cluster) error {
	return errors.New("its kubeconfig is not a kubeconfig file")
}

// TestAPluginThatCannotRunStopsConvergeBeforeAnyChange: a plugin whose
// configuration cannot be used (its Preflight refuses it) fails plan and
// converge before anything is read or changed, naming the plugin, so a
// cluster is never half-built because of a plugin section.
func TestAPluginThatCannotRunStopsConvergeBeforeAnyChange(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "unusable", 0)
	var order []string
	e := w.engine(t)
	e.Plugins = []reconcile.Plugin{&refusingPlugin{nsPlugin{name: "gamma", order: &order}}}
	if _, err := e.Plan(t.Context()); err == nil || !strings.Contains(err.Error(), "the gamma plugin cannot run: its kubeconfig is not a kubeconfig file") {
		t.Fatalf("plan: %v, want the plugin's refusal", err)
	}
	if err := e.Converge(t.Context()); err == nil || !strings.Contains(err.Error(), "the gamma plugin cannot run") {
		t.Fatalf("converge: %v, want the plugin's refusal", err)
	}
	if n := w.mutations(); n != 0 {
		t.Errorf("converge made %d changes before refusing the plugin", n)
	}
}

// vetoPlugin refuses whatever it would do: a registration of the
// cluster's name that is not provably the cluster's, say.
type vetoPlugin struct{ nsPlugin }

func (p *vetoPlugin) Plan(*spec.Cluster, reconcile.PluginState) ([]plan.Change, error) {
	return []plan.Change{{Action: plan.ActionRefuse, Resource: plan.Resource{Kind: "registration", Name: "delta"},
		Reason: "a registration of that name is another cluster's"}}, nil
}

func (p *vetoPlugin) PlanTeardown(*spec.Cluster, reconcile.PluginState) ([]plan.Change, error) {
	return []plan.Change{{Action: plan.ActionRefuse, Resource: plan.Resource{Kind: "registration", Name: "delta"},
		Reason: "nothing proves the registration of that name is this cluster's"}}, nil
}

// TestAPluginRefusalRefusesThatPluginAlone: a plugin's refusal does not
// veto the cluster's own steps: converge builds the cluster and runs the
// other plugins, then fails naming the refusing plugin; in a teardown the
// refusal is what the plugin keeps, said, and destroy goes on.
func TestAPluginRefusalRefusesThatPluginAlone(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "vetoed", 0)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var order []string
	other := &nsPlugin{name: "alpha", order: &order}
	veto := &vetoPlugin{nsPlugin{name: "delta", order: &order}}
	engine := func() *reconcile.Engine {
		e := w.engine(t)
		e.Plugins = []reconcile.Plugin{other, veto}
		return e
	}
	// The first build: both plugins deferred; delta refuses once read,
	// alpha is made all the same.
	err := engine().Converge(ctx)
	if !errors.Is(err, reconcile.ErrPluginFailed) || !strings.Contains(err.Error(), "delta") || !slices.Contains(order, "alpha") {
		t.Fatalf("first build with a refusing plugin returned %v (applied %v), want a plugin failure naming delta, alpha made", err, order)
	}
	// Once built, a plan shows the refusal as the plugin's failing step,
	// not as the whole plan's refusal.
	p, err := engine().Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Refusals) != 0 {
		t.Fatalf("a plugin's refusal refused the whole plan: %v", p.Refusals)
	}
	steps := pluginSteps(p)
	if len(steps) != 1 || !strings.HasPrefix(steps[0].Reason, "refused: a registration of that name is another cluster's") {
		t.Fatalf("the plan's plugin steps: %+v", steps)
	}
	// The cluster's own change runs; the run fails naming the plugin.
	w.set(t, "workers.worker.count", "1")
	err = engine().Converge(ctx)
	if !errors.Is(err, reconcile.ErrPluginFailed) || !strings.Contains(err.Error(), "delta") {
		t.Fatalf("converge with a refusing plugin returned %v, want a plugin failure naming delta", err)
	}
	if n := len(w.lab.PVE.VMs()); n != 4 {
		t.Fatalf("%d VMs after the refused plugin's converge, want the worker made too (4)", n)
	}
	var out strings.Builder
	e := engine()
	e.Progress = &out
	if err := e.Destroy(ctx); err != nil {
		t.Fatalf("destroy with a plugin keeping what is not provably the cluster's: %v", err)
	}
	if !strings.Contains(out.String(), "kept by the delta plugin: nothing proves") {
		t.Errorf("destroy did not say what the plugin keeps:\n%s", out.String())
	}
	if n := len(w.lab.PVE.VMs()); n != 0 {
		t.Errorf("%d VMs after destroy", n)
	}
}
