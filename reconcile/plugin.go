package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Plugin is a plugin converge runs at its end, after the health gate: the
// owner of one cluster.yaml section (argocd, charts, rancher). Like a
// provider it reads what it manages, plans steps from that without I/O,
// and makes each step after reading its precondition again.
type Plugin interface {
	// Name is the plugin's cluster.yaml section.
	Name() string
	// After names the plugins that run before this one when they are
	// configured too; the engine passes their results on.
	After() []string
	// Configured reports whether the cluster uses the plugin: its section
	// is there and the secrets it needs are set.
	Configured(c *spec.Cluster) bool
	// Observe reads what the plugin manages. It changes nothing.
	Observe(ctx context.Context, env PluginEnv) (PluginState, error)
	// Plan returns the steps that make what Observe read match the
	// cluster.yaml, without I/O; each step's Op is the plugin's own.
	Plan(c *spec.Cluster, st PluginState) ([]plan.Change, error)
	// PlanTeardown returns the steps destroy takes to remove what the
	// plugin made, without I/O.
	PlanTeardown(c *spec.Cluster, st PluginState) ([]plan.Change, error)
	// Apply makes one step Plan or PlanTeardown returned; it returns the
	// results later plugins may read (nil for none).
	Apply(ctx context.Context, env PluginEnv, ch plan.Change) (map[string]string, error)
}

// PluginPreflighter is a plugin that can tell, without I/O beyond reading its
// own local files, that its section cannot be used (a kubeconfig that is
// not one, a setting the provider cannot give). Converge and plan call it
// before reading anything: a configuration the plugin cannot use stops
// the run before its first step, not after the machines were changed.
type PluginPreflighter interface {
	Preflight(c *spec.Cluster) error
}

// preflightPlugins runs the configured plugins' preflights; the error
// names each plugin that refused.
func (e *Engine) preflightPlugins() error {
	ordered, err := orderPlugins(e.Plugins, e.Cluster)
	if err != nil {
		return err
	}
	var errs []error
	for _, pl := range ordered {
		if pf, ok := pl.(PluginPreflighter); ok {
			if err := pf.Preflight(e.Cluster); err != nil {
				errs = append(errs, fmt.Errorf("the %s plugin cannot run: %w", pl.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// PluginWarner is a plugin with warnings about its section that need no
// I/O (traefik without the Gateway API, say); plan shows them with the
// config warnings.
type PluginWarner interface {
	Warnings(c *spec.Cluster) []string
}

// pluginWarnings are the configured plugins' warnings, each prefixed
// with its plugin's name.
func pluginWarnings(c *spec.Cluster, plugins []Plugin) []string {
	ordered, err := orderPlugins(plugins, c)
	if err != nil {
		return nil
	}
	var out []string
	for _, pl := range ordered {
		if w, ok := pl.(PluginWarner); ok {
			for _, msg := range w.Warnings(c) {
				out = append(out, pl.Name()+": "+msg)
			}
		}
	}
	return out
}

// PluginState is what a plugin's Observe read, for its Plan.
type PluginState any

// PluginEnv is what a plugin knows of the cluster.
type PluginEnv struct {
	Cluster *spec.Cluster
	// Kubeconfig is the cluster's admin kubeconfig as the engine uses it
	// (its server is the API address the engine reaches); Public is the
	// same as people use it, naming the public endpoint where there is
	// one. Both are nil for a cluster without a kubeconfig.
	Kubeconfig, Public []byte
	// Results holds what the steps of the plugins before this one made,
	// by plugin, such as the Rancher cluster id; nil when the plugins are
	// read for a plan.
	Results map[string]map[string]string
	// IngressVIP and IngressPublic are the ingress addresses the provider
	// allocated (OpenStack's ingress port and its floating IP), "" when
	// it allocates none.
	IngressVIP, IngressPublic string
	// Project is the cloud project the provider's credential acts in
	// (OpenStack), "" without one.
	Project string
	// Teardown is set when the plugin is read for destroy: the cluster
	// may have no kubeconfig, or not answer, and what the plugin made
	// elsewhere must still be found.
	Teardown bool
	// Machines is how many of the cluster's machines the provider still
	// has (0 once destroy removed them, or for a cluster never built).
	Machines int
}

// pluginFacts is what the observation holds of one configured plugin.
type pluginFacts struct {
	// State is what the plugin read; Unread says why it read nothing.
	State  PluginState
	Unread string
	// Deferred says why the plugin was not asked: the cluster has no API
	// to reach yet, or it does not answer.
	Deferred string
}

// orderPlugins returns the configured plugins in the order they run: each
// after those it names in After, otherwise in name order. A cycle is an
// error.
func orderPlugins(all []Plugin, c *spec.Cluster) ([]Plugin, error) {
	var on []Plugin
	for _, pl := range all {
		if pl.Configured(c) {
			on = append(on, pl)
		}
	}
	slices.SortFunc(on, func(a, b Plugin) int { return strings.Compare(a.Name(), b.Name()) })
	var out []Plugin
	placed := map[string]bool{}
	for len(out) < len(on) {
		progress := false
		for _, pl := range on {
			if placed[pl.Name()] {
				continue
			}
			ready := true
			for _, dep := range pl.After() {
				if !placed[dep] && slices.ContainsFunc(on, func(o Plugin) bool { return o.Name() == dep }) {
					ready = false
				}
			}
			if ready {
				out = append(out, pl)
				placed[pl.Name()] = true
				progress = true
				break
			}
		}
		if !progress {
			return nil, errors.New("the plugins' After lists make a cycle")
		}
	}
	return out, nil
}

// observePlugins reads what each configured plugin manages, unless the
// cluster has no API to reach yet or it does not answer: the plugin is
// deferred then.
func (e *Engine) observePlugins(ctx context.Context, obs *Observation) error {
	plugins, err := orderPlugins(e.Plugins, e.Cluster)
	if err != nil || len(plugins) == 0 {
		return err
	}
	obs.Plugins = map[string]pluginFacts{}
	deferred := ""
	switch yes, known := obs.Bootstrapped(); {
	case !obs.State.Kubeconfig:
		deferred = "the cluster has no kubeconfig yet: its steps are planned and made once the cluster is built and healthy"
	case !yes && known:
		deferred = "the cluster is not bootstrapped yet: its steps are planned and made once it is and passes the health gate"
	case obs.Kube.Unknown != "":
		deferred = "the cluster's Kubernetes API does not answer (" + obs.Kube.Unknown + "); the plugin changes nothing until it does"
	}
	var kubeconfig, public []byte
	unread := ""
	if deferred == "" {
		if kubeconfig, public, err = e.kubeconfigs(ctx, obs.API); err != nil {
			unread = "the cluster's kubeconfig could not be read: " + err.Error()
		}
	}
	env := e.pluginEnv(kubeconfig, public, obs.Inventory)
	for _, pl := range plugins {
		if deferred != "" || unread != "" {
			obs.Plugins[pl.Name()] = pluginFacts{Deferred: deferred, Unread: unread}
			continue
		}
		st, err := pl.Observe(ctx, env)
		if err != nil {
			obs.Plugins[pl.Name()] = pluginFacts{Unread: err.Error()}
			continue
		}
		obs.Plugins[pl.Name()] = pluginFacts{State: st}
	}
	return nil
}

// kubeconfigs returns the cluster's stored kubeconfig as the engine uses
// it, naming the API address the engine reaches (kubeClient's), and as it
// is stored, for people.
func (e *Engine) kubeconfigs(ctx context.Context, api API) (engine, public []byte, err error) {
	data, err := e.read(ctx, KubeconfigFile)
	if err != nil {
		return nil, nil, err
	}
	if len(data) == 0 {
		return nil, nil, fmt.Errorf("%w: there is no %s", ErrPrecondition, KubeconfigFile)
	}
	if api.Known && api.Allocated {
		engine, err := kube.WithServer(data, api.URL)
		return engine, data, err
	}
	return data, data, nil
}

// planTeardown adds the steps with which the configured plugins remove
// what they made, in the reverse of their order, to a destroy plan. A
// plugin whose objects cannot be read gets a step that fails: destroy then
// removes the rest and exits non-zero.
func (e *Engine) planTeardown(ctx context.Context, p *plan.Plan, inv Inventory) error {
	ordered, err := orderPlugins(e.Plugins, e.Cluster)
	if err != nil || len(ordered) == 0 {
		return err
	}
	// Without a kubeconfig (a cluster never built) a plugin is asked all
	// the same: what it made elsewhere may exist.
	kubeconfig, public, _ := e.kubeconfigs(ctx, EndpointOf(e.Cluster, e.Infra, inv))
	env := e.pluginEnv(kubeconfig, public, inv)
	env.Teardown = true
	for i := len(ordered) - 1; i >= 0; i-- {
		pl := ordered[i]
		name := pl.Name()
		st, err := pl.Observe(ctx, env)
		if err != nil {
			p.Unread("the "+name+" plugin's objects", err.Error())
			p.Add(plan.Change{Phase: plan.PhasePlugins, Domain: plan.DomainKube, Action: plan.ActionWait,
				Resource: plan.Resource{Kind: plan.KindPlugin, Name: name},
				Reason:   "not torn down: its objects could not be read (" + err.Error() + "); destroy removes the rest and then fails for this plugin",
				Op:       pluginUnread{plugin: name, reason: err.Error()}})
			continue
		}
		steps, err := pl.PlanTeardown(e.Cluster, st)
		if err != nil {
			return fmt.Errorf("planning the %s plugin's teardown: %w", name, err)
		}
		for _, s := range steps {
			p.Add(wrapPluginStep(name, s, true))
		}
	}
	return nil
}

// pluginEnv is what a plugin knows of the cluster: its kubeconfigs, the
// cloud project, and the ingress addresses the provider reports in inv
// (none for a nil inv). Results are filled as the plugins' steps run.
func (e *Engine) pluginEnv(kubeconfig, public []byte, inv Inventory) PluginEnv {
	env := PluginEnv{Cluster: e.Cluster, Kubeconfig: kubeconfig, Public: public, Project: projectOf(e.Infra)}
	env.IngressVIP, env.IngressPublic = ingressOf(e.Infra, inv)
	if inv != nil {
		env.Machines = len(inv.Machines())
	}
	return env
}

// Plugin operations.
type (
	// pluginStep is a step of a plugin's plan, made by its Apply.
	pluginStep struct {
		plugin string
		change plan.Change
	}
	// pluginLater runs a plugin that was deferred when planning: it reads,
	// plans and makes its steps once the cluster is up.
	pluginLater struct{ plugin string }
	// pluginUnread fails: what the plugin manages could not be read.
	pluginUnread struct{ plugin, reason string }
	// pluginRefused fails: the plugin refuses a change (another
	// registration of the cluster's name, say). Only that plugin fails;
	// the other steps of the run are made.
	pluginRefused struct{ plugin, reason string }
	// pluginKept says what a plugin's teardown keeps because nothing
	// proves it is the cluster's; destroy goes on.
	pluginKept struct{ plugin, reason string }
)

// planPlugins adds the configured plugins' steps, in their order, to the
// plugins phase.
func planPlugins(p *plan.Plan, want *Desired, obs *Observation, plugins []Plugin) error {
	ordered, err := orderPlugins(plugins, want.Cluster)
	if err != nil {
		return err
	}
	// stepping holds the plugins with steps in this plan: a plugin after
	// one of them reads its results only once its steps are made.
	stepping := map[string]bool{}
	for _, pl := range ordered {
		name := pl.Name()
		f, ok := obs.Plugins[name]
		res := plan.Resource{Kind: plan.KindPlugin, Name: name}
		waitsFor := ""
		for _, dep := range pl.After() {
			if stepping[dep] {
				waitsFor = dep
			}
		}
		switch {
		case ok && f.Deferred == "" && f.Unread == "" && waitsFor != "":
			stepping[name] = true
			p.Add(plan.Change{Phase: plan.PhasePlugins, Domain: plan.DomainKube, Action: plan.ActionWait, Resource: res,
				Reason:  "deferred: it uses what the " + waitsFor + " plugin's steps make, so it is read, planned and made once they are",
				Expects: "the " + waitsFor + " plugin's steps were made", Op: pluginLater{plugin: name}})
		case !ok:
			p.Unread("the "+name+" plugin's objects", "they were not read")
			p.Add(plan.Change{Phase: plan.PhasePlugins, Domain: plan.DomainKube, Action: plan.ActionWait, Resource: res,
				Reason: "not read: the plugin runs only when its objects were read", Op: pluginUnread{plugin: name, reason: "they were not read"}})
		case f.Deferred != "":
			stepping[name] = true
			p.Add(plan.Change{Phase: plan.PhasePlugins, Domain: plan.DomainKube, Action: plan.ActionWait, Resource: res,
				Reason: "deferred: " + f.Deferred, Expects: "the cluster passed the health gate", Op: pluginLater{plugin: name}})
		case f.Unread != "":
			p.Unread("the "+name+" plugin's objects", f.Unread)
			p.Add(plan.Change{Phase: plan.PhasePlugins, Domain: plan.DomainKube, Action: plan.ActionWait, Resource: res,
				Reason: "not planned: its objects could not be read (" + f.Unread + "); converge makes the other steps and then fails for this plugin",
				Op:     pluginUnread{plugin: name, reason: f.Unread}})
		default:
			steps, err := pl.Plan(want.Cluster, f.State)
			if err != nil {
				return fmt.Errorf("planning the %s plugin: %w", name, err)
			}
			for _, st := range steps {
				p.Add(wrapPluginStep(name, st, false))
			}
			stepping[name] = len(steps) > 0
		}
	}
	return nil
}

// wrapPluginStep puts a plugin's step in the plugins phase, its Op the
// plugin's to make. A plugin's refusal refuses that plugin alone: when
// converging it is a step that fails (the plugin's other steps are not
// made, the rest of the run is, and the run fails naming it); in a
// teardown it is what the plugin keeps, said as the step runs.
func wrapPluginStep(name string, st plan.Change, teardown bool) plan.Change {
	if st.Action == plan.ActionRefuse {
		reason := st.Reason
		st.Action = plan.ActionWait
		if teardown {
			st.Reason = "kept: " + reason
			st.Op = pluginKept{plugin: name, reason: reason}
		} else {
			st.Reason = "refused: " + reason + "; converge makes the other steps and then fails for this plugin"
			st.Op = pluginRefused{plugin: name, reason: reason}
		}
		st.Phase = plan.PhasePlugins
		if st.Domain == "" {
			st.Domain = plan.DomainKube
		}
		return st
	}
	st.Phase = plan.PhasePlugins
	if st.Domain == "" {
		st.Domain = plan.DomainKube
	}
	st.Op = pluginStep{plugin: name, change: st}
	return st
}

// pluginOf returns the plugin whose step st is, "" for none.
func pluginOf(st plan.Change) string {
	switch op := st.Op.(type) {
	case pluginStep:
		return op.plugin
	case pluginLater:
		return op.plugin
	case pluginUnread:
		return op.plugin
	case pluginRefused:
		return op.plugin
	case pluginKept:
		return op.plugin
	}
	return ""
}

// plugin returns the engine's plugin of that name.
func (e *Engine) plugin(name string) (Plugin, error) {
	for _, pl := range e.Plugins {
		if pl.Name() == name {
			return pl, nil
		}
	}
	return nil, fmt.Errorf("no %s plugin", name)
}

// pluginEnv returns the plugin of that name and what it knows in this
// run; the results grow as the plugins run.
func (r *run) pluginEnv(ctx context.Context, name string) (Plugin, PluginEnv, error) {
	pl, err := r.e.plugin(name)
	if err != nil {
		return nil, PluginEnv{}, err
	}
	kubeconfig, public, err := r.e.kubeconfigs(ctx, r.want.API)
	if err != nil {
		return nil, PluginEnv{}, fmt.Errorf("reading the cluster's kubeconfig: %w", err)
	}
	if r.results == nil {
		r.results = map[string]map[string]string{}
	}
	env := r.e.pluginEnv(kubeconfig, public, nil)
	env.Results = r.results
	return pl, env, nil
}

// applyPlugin makes one plugin step and keeps what it returns for the
// plugins after it.
func (r *run) applyPlugin(ctx context.Context, name string, ch plan.Change) error {
	pl, env, err := r.pluginEnv(ctx, name)
	if err != nil {
		return err
	}
	out, err := pl.Apply(ctx, env, ch)
	if err != nil {
		return err
	}
	if len(out) > 0 {
		r.mu.Lock()
		if r.results[name] == nil {
			r.results[name] = map[string]string{}
		}
		for k, v := range out {
			r.results[name][k] = v
		}
		r.mu.Unlock()
	}
	return nil
}

// runDeferred reads, plans and makes the steps of a plugin that was
// deferred when planning, saying each.
func (r *run) runDeferred(ctx context.Context, name string) error {
	pl, env, err := r.pluginEnv(ctx, name)
	if err != nil {
		return err
	}
	if _, allocates := r.e.Infra.(Ingresser); allocates {
		// The ingress was allocated by this run: read where it is now.
		inv, err := r.e.Infra.Observe(ctx)
		if err != nil {
			return fmt.Errorf("reading the cluster's ingress addresses: %w", err)
		}
		env.IngressVIP, env.IngressPublic = ingressOf(r.e.Infra, inv)
	}
	st, err := pl.Observe(ctx, env)
	if err != nil {
		return fmt.Errorf("reading the %s plugin's objects: %w", name, err)
	}
	steps, err := pl.Plan(r.e.Cluster, st)
	if err != nil {
		return fmt.Errorf("planning the %s plugin: %w", name, err)
	}
	for _, st := range steps {
		if st.Action == plan.ActionRefuse {
			return fmt.Errorf("the %s plugin refuses %s: %s", name, st.Resource, st.Reason)
		}
	}
	for i, st := range steps {
		r.e.say(plan.PhasePlugins, "  %s [%d/%d] %s %s %s", name, i+1, len(steps), st.Action.Symbol(), st.Resource.Kind, st.Resource.Name)
		if err := r.applyPlugin(ctx, name, st); err != nil {
			return fmt.Errorf("%s %s: %w", st.Action, st.Resource, err)
		}
	}
	return nil
}

// pluginFailures is what the plugins' failed steps of a run were, by
// plugin: a failed plugin's later steps are skipped, the others' run.
type pluginFailures struct {
	order []string
	errs  map[string]error
}

func (f *pluginFailures) failed(name string) bool { return f.errs[name] != nil }

func (f *pluginFailures) add(name string, err error) {
	if f.errs == nil {
		f.errs = map[string]error{}
	}
	if f.errs[name] == nil {
		f.order = append(f.order, name)
		f.errs[name] = err
	}
}

// err is the run's error for its failed plugins, nil when none failed.
func (f *pluginFailures) err() error {
	if len(f.order) == 0 {
		return nil
	}
	errs := make([]error, len(f.order))
	for i, name := range f.order {
		errs[i] = fmt.Errorf("%s: %w", name, f.errs[name])
	}
	// Each failure keeps its kind (a transient one is retried).
	return fmt.Errorf("%w: %w", ErrPluginFailed, errors.Join(errs...))
}

// ErrPluginFailed marks a run whose plugins' steps did not all succeed;
// the run's other steps were made.
var ErrPluginFailed = errors.New("plugins failed")

// pluginNamesWithout returns the plugin sections the cluster configures
// that no plugin of the engine handles.
func pluginNamesWithout(c *spec.Cluster, plugins []Plugin) []string {
	var out []string
	for _, name := range pluginNames(c) {
		if !slices.ContainsFunc(plugins, func(pl Plugin) bool { return pl.Name() == name }) {
			out = append(out, name)
		}
	}
	return out
}

// pluginsIdle returns the plugins whose section is there but which are not
// configured to run (argocd without argocd.kubeconfig or argocd.context).
func pluginsIdle(c *spec.Cluster, plugins []Plugin) []string {
	var out []string
	for _, name := range pluginNames(c) {
		i := slices.IndexFunc(plugins, func(pl Plugin) bool { return pl.Name() == name })
		if i >= 0 && !plugins[i].Configured(c) {
			out = append(out, name)
		}
	}
	return out
}

// idleReason says what a plugin's section lacks to run.
func idleReason(name string) string {
	switch name {
	case "argocd":
		return "names nowhere to apply (argocd.kubeconfig or argocd.context)"
	case "rancher":
		return "has no Rancher to register with (rancher.url and rancher.token, usually in secrets.yaml)"
	}
	return "is not enough for the plugin to run"
}

// States of a plugin in a check (PluginCheck.State).
const (
	PluginInSync   = "in_sync"
	PluginDrift    = "drift"
	PluginDeferred = "deferred"
	PluginUnknown  = "unknown"
)

// PluginCheck is how one configured plugin stands against cluster.yaml,
// as check and the status page show it.
type PluginCheck struct {
	Name string
	// State is PluginInSync, PluginDrift (a converge would make steps),
	// PluginDeferred (the cluster has no API to ask yet) or PluginUnknown
	// (its objects could not be read, or it could not plan).
	State string
	// Reason says why the plugin is deferred or unknown.
	Reason string
	// Steps are what a converge would do, one line each, refusals too.
	Steps []string
}

// PluginChecks says how each configured plugin stands in obs (an
// observation of this engine, from Observe), in the order the plugins run:
// it reads what the plugins manage when obs does not hold it yet, plans
// from that, and changes nothing.
func (e *Engine) PluginChecks(ctx context.Context, obs *Observation) []PluginCheck {
	ordered, err := orderPlugins(e.Plugins, e.Cluster)
	if err != nil {
		return []PluginCheck{{Name: "plugins", State: PluginUnknown, Reason: err.Error()}}
	}
	if len(ordered) > 0 && obs.Plugins == nil && !obs.Offline {
		if err := e.observePlugins(ctx, obs); err != nil {
			return []PluginCheck{{Name: "plugins", State: PluginUnknown, Reason: err.Error()}}
		}
	}
	out := make([]PluginCheck, 0, len(ordered))
	// stepping holds the plugins a converge would make steps of (or
	// defer): a plugin after one of them is planned once they are made,
	// as planPlugins does.
	stepping := map[string]bool{}
	for _, pl := range ordered {
		name := pl.Name()
		f, ok := obs.Plugins[name]
		pc := PluginCheck{Name: name}
		waitsFor := ""
		for _, dep := range pl.After() {
			if stepping[dep] {
				waitsFor = dep
			}
		}
		switch {
		case ok && !obs.Offline && f.Deferred == "" && f.Unread == "" && waitsFor != "":
			pc.State, pc.Reason = PluginDeferred, "it uses what the "+waitsFor+" plugin's steps make, so it is planned once they are made"
		case obs.Offline:
			pc.State, pc.Reason = PluginUnknown, "offline: the plugin's objects were not read"
		case !ok:
			pc.State, pc.Reason = PluginUnknown, "its objects were not read"
		case f.Deferred != "":
			pc.State, pc.Reason = PluginDeferred, f.Deferred
		case f.Unread != "":
			pc.State, pc.Reason = PluginUnknown, f.Unread
		default:
			steps, err := pl.Plan(e.Cluster, f.State)
			if err != nil {
				pc.State, pc.Reason = PluginUnknown, "it could not plan: "+err.Error()
				break
			}
			pc.State = PluginInSync
			for _, st := range steps {
				pc.State = PluginDrift
				line := fmt.Sprintf("%s %s %s", st.Action, st.Resource.Kind, st.Resource.Name)
				if st.Reason != "" {
					line += ": " + st.Reason
				}
				pc.Steps = append(pc.Steps, line)
			}
		}
		stepping[name] = pc.State == PluginDrift || pc.State == PluginDeferred
		out = append(out, pc)
	}
	return out
}
