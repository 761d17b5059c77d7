package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// Files the engine keeps next to cluster.yaml.
const (
	TalosSecretsFile = "talossecrets.yaml"
	TalosconfigFile  = "talosconfig"
	KubeconfigFile   = "kubeconfig"
)

// ErrRefused is returned when converge refuses a change before mutating
// anything; the plan's refusals say why.
var ErrRefused = errors.New("converge refused")

// ErrIncomplete is returned by converge when a part of the cluster could
// not be read: it ran the steps that did not depend on it, and what it
// could not read was not compared with cluster.yaml. It is transient: the
// part may answer again.
var ErrIncomplete = errors.New("the cluster could not be read completely")

// ErrUnreachable is returned (with ErrRefused) when a cluster that was
// bootstrapped before does not answer: converge changed nothing.
var ErrUnreachable = errors.New("existing cluster is unreachable")

// Engine plans and converges one cluster.
type Engine struct {
	Cluster  *spec.Cluster
	Warnings []spec.Problem
	// State keeps talossecrets.yaml, talosconfig and kubeconfig; Key names
	// the cluster in it (its path in the repository).
	State state.Store
	Key   string
	// Journal, when set, records every provider mutation before it is
	// made and its outcome after, so a run that was interrupted is seen by
	// the next one (which finds the resources by looking them up).
	Journal Journal
	// Commit is the commit the run works from, for the journal.
	Commit string
	Infra  Infra
	// Progress receives one human line per step; nil discards them.
	Progress io.Writer
	Log      *slog.Logger
	// BootTimeout bounds how long machines have to boot and the cluster to
	// become healthy. Zero means 15 minutes.
	BootTimeout time.Duration
	// PollInterval is how often conditions are polled. Zero means 2s.
	PollInterval time.Duration
	// Approve, when set, is called with the plan converge is about to run,
	// before its first mutation; an error stops converge there, with
	// nothing changed.
	Approve func(*plan.Plan) error
	// ReadBudget bounds how long a wait goes on while an API keeps
	// answering with errors (not a condition that changes on its own, such
	// as a node booting). Zero means 2 minutes.
	ReadBudget time.Duration
	// DrainTimeout bounds the drain of a node that is removed; a
	// PodDisruptionBudget that still blocks then makes the run wait. Zero
	// means kube.DrainTimeout (330s).
	DrainTimeout time.Duration
	// ResetTimeout bounds a graceful reset. Zero means
	// DefaultResetTimeout.
	ResetTimeout time.Duration
	// ReportEvery is how often a wait says what it still waits for. Zero
	// means 30s.
	ReportEvery time.Duration
	// Holder describes this run in the cluster's mutation lock, for
	// example "taloscluster converge"; empty means the kind of run and the
	// commit.
	Holder string
	// Steps, when set, is told when each step of a converge starts and
	// ends (a status page showing a rollout per node). It is called from
	// the run's goroutines: the steps of a batch run at the same time.
	Steps func(StepEvent)
	// RebootGrace is how long a node has to go down once its restart was
	// asked for. Zero means 120 seconds.
	RebootGrace time.Duration
	// Reboot restarts the machines whose provider changes (cores,
	// memory) wait for a restart, one control plane at a time, then the
	// workers in batches (converge --reboot).
	Reboot bool
	// Now is the clock an observation is stamped with (Observation.At),
	// which tells how long a node has been NotReady; nil means time.Now.
	// Tests move it forward instead of waiting.
	Now func() time.Time
	// Remediated, when set, is told of each remediation converge starts
	// (its node was found still NotReady just before): the cluster's
	// name, the worker pool and the machine's hostname (the agent counts
	// it and logs the event "remediation").
	Remediated func(cluster, pool, hostname string)
	// sayMu keeps the lines of parallel steps whole.
	sayMu sync.Mutex
	// WaitLock makes Converge and Destroy wait, bounded by their context,
	// for a mutation lock another run holds, instead of failing at once
	// with a state.LockedError.
	WaitLock bool
	// Plugins are the plugins the engine can run; those the cluster
	// configures run at the end of converge, in their order.
	Plugins []Plugin
}

// Locker is an optional capability of the Engine's State: one mutating run
// (converge, destroy) per cluster at a time, across processes. Converge
// and Destroy take the lock before their first read that could lead to a
// mutation and hold it to their end; plans never take it.
type Locker interface {
	// Lock takes the mutation lock of cluster for holder. When another run
	// holds it, Lock fails at once with a *state.LockedError naming that
	// run and since when, or with wait keeps trying until it gets the lock
	// or ctx ends. The returned context is ctx's child for the run: it
	// ends, with the cause state.ErrLockLost, if the lock is lost (a Lease
	// that could not be renewed in time), so the run stops mutating.
	// release frees the lock; it must be called once the run is over.
	Lock(ctx context.Context, cluster, holder string, wait bool) (held context.Context, release func(), err error)
}

// locked runs f holding the cluster's mutation lock when the State can
// lock.
func (e *Engine) locked(ctx context.Context, kind string, f func(context.Context) error) error {
	l, ok := e.State.(Locker)
	if !ok {
		return f(ctx)
	}
	holder := e.Holder
	if holder == "" {
		holder = kind
		if e.Commit != "" {
			holder += " of commit " + e.Commit[:min(len(e.Commit), 12)]
		}
	}
	held, release, err := l.Lock(ctx, e.Key, holder, false)
	var busy *state.LockedError
	if errors.As(err, &busy) && e.WaitLock {
		busy.Cluster = e.Cluster.Name
		e.say(plan.PhaseValidate, "%s: waiting for it to finish", busy)
		held, release, err = l.Lock(ctx, e.Key, holder, true)
	}
	if err != nil {
		if errors.As(err, &busy) {
			// The message names the cluster, not the state key.
			busy.Cluster = e.Cluster.Name
			return retry.Transient(err)
		}
		return fmt.Errorf("taking the mutation lock of cluster %s: %w", e.Cluster.Name, err)
	}
	defer release()
	err = f(held)
	if cause := context.Cause(held); err != nil && errors.Is(cause, state.ErrLockLost) {
		return retry.Transient(fmt.Errorf("%w; the run stopped: %w", cause, err))
	}
	return err
}

func (e *Engine) say(phase plan.Phase, format string, args ...any) {
	// The steps of a batch say what they do at the same time.
	e.sayMu.Lock()
	defer e.sayMu.Unlock()
	if e.Progress != nil {
		fmt.Fprintf(e.Progress, "%-10s %s\n", string(phase)+":", fmt.Sprintf(format, args...))
	}
	if e.Log != nil {
		e.Log.Info("converge step", "cluster", e.Cluster.Name, "phase", string(phase), "step", fmt.Sprintf(format, args...))
	}
}

// read returns a state file, nil when it is absent or empty.
func (e *Engine) read(ctx context.Context, name string) ([]byte, error) {
	data, err := e.State.Get(ctx, e.Key, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

func (e *Engine) exists(ctx context.Context, name string) (bool, error) {
	data, err := e.read(ctx, name)
	return len(data) > 0, err
}

func (e *Engine) bootTimeout() time.Duration {
	if e.BootTimeout > 0 {
		return e.BootTimeout
	}
	return 15 * time.Minute
}

func (e *Engine) rebootGrace() time.Duration {
	if e.RebootGrace > 0 {
		return e.RebootGrace
	}
	return rebootGrace
}

func (e *Engine) readBudget() time.Duration {
	if e.ReadBudget > 0 {
		return e.ReadBudget
	}
	return 2 * time.Minute
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Engine) poll() time.Duration {
	if e.PollInterval > 0 {
		return e.PollInterval
	}
	return 2 * time.Second
}

// Endpoint returns the cluster's Kubernetes API endpoint and its Layer-2
// VIP as known from the configuration alone: cluster.yaml's kubeapi_vip,
// or, where the provider allocates the address (OpenStack), a stand-in
// name under .invalid that only checks of a config's shape may use. The
// engine itself takes the endpoint from the provider's observation.
func Endpoint(c *spec.Cluster) (string, netip.Addr) {
	if vip, _ := c.Network.KubeAPIVIP(); vip.IsValid() {
		return "https://" + netip.AddrPortFrom(vip, 6443).String(), vip
	}
	return "https://" + c.Name + "-kubeapi.invalid:6443", netip.Addr{}
}

// Desired returns what the cluster should be: its machines, and their
// machine configs when the cluster identity exists, at the versions
// cluster.yaml names.
func (e *Engine) Desired(ctx context.Context) (*Desired, error) {
	return e.desired(ctx, nil)
}

// desired is Desired with each existing node's config made at the
// versions it runs, as obs found them (nil: cluster.yaml's versions).
func (e *Engine) desired(ctx context.Context, obs *Observation) (*Desired, error) {
	want := &Desired{Cluster: e.Cluster, Machines: machineconfig.Machines(e.Cluster), Configs: map[string][]byte{}, Restart: e.Reboot}
	inv := e.Infra.Empty()
	if obs != nil {
		inv = obs.Inventory
	}
	want.API = EndpointOf(e.Cluster, e.Infra, inv)
	bundle, err := e.bundle(ctx)
	if err != nil || bundle == nil {
		return want, err
	}
	return want, e.configs(want, bundle, obs)
}

// Plan observes the cluster and returns what Converge would do, without
// changing anything.
func (e *Engine) Plan(ctx context.Context) (*plan.Plan, error) {
	want, obs, err := e.observe(ctx)
	if err != nil {
		return nil, err
	}
	return Plan(want, obs, e.Infra, e.Warnings)
}

// OfflinePlan is the plan of a cluster of which nothing exists, made from
// cluster.yaml alone: the same planner with an observation that found
// nothing, asking no one.
func OfflinePlan(c *spec.Cluster, warnings []spec.Problem, infra Infra, plugins ...Plugin) (*plan.Plan, error) {
	want := &Desired{Cluster: c, Machines: machineconfig.Machines(c), Configs: map[string][]byte{}, Plugins: plugins}
	obs := Offline(infra)
	if on, err := orderPlugins(plugins, c); err == nil && len(on) > 0 {
		obs.Plugins = map[string]pluginFacts{}
		for _, pl := range on {
			obs.Plugins[pl.Name()] = pluginFacts{Deferred: "plan --offline reads nothing: its steps are planned and made once the cluster is built and healthy"}
		}
	}
	want.API = EndpointOf(c, infra, obs.Inventory)
	obs.API = want.API
	return Plan(want, obs, infra, warnings)
}

// observe reads the cluster, then what it should be. A node that exists
// gets its config at the Talos and Kubernetes versions it runs: a version
// change is a step (or a refusal) of its own, never hidden in a config
// diff, and a config is never baked at a version the node has not reached.
func (e *Engine) observe(ctx context.Context) (*Desired, *Observation, error) {
	if err := e.preflightPlugins(); err != nil {
		return nil, nil, err
	}
	obs, err := e.Observe(ctx)
	if err != nil {
		return nil, nil, err
	}
	want, err := e.desired(ctx, obs)
	if err != nil {
		return nil, nil, err
	}
	want.Plugins = e.Plugins
	if err := e.observePlugins(ctx, obs); err != nil {
		return nil, nil, err
	}
	return want, obs, nil
}

// Converge observes the cluster, plans, and runs exactly the plan's steps
// in order. A plan with refusals changes nothing. When the State is a
// Locker, the whole run holds the cluster's mutation lock.
func (e *Engine) Converge(ctx context.Context) error {
	e.say(plan.PhaseValidate, "checking credentials and reading the cluster")
	if probs := e.Cluster.Credentials(); len(probs) > 0 {
		msgs := make([]string, len(probs))
		for i, pr := range probs {
			msgs[i] = pr.String()
		}
		return fmt.Errorf("credentials: %s", strings.Join(msgs, "; "))
	}
	return e.locked(ctx, "converge", e.converge)
}

func (e *Engine) converge(ctx context.Context) error {
	e.awaitRestarted(ctx)
	want, obs, err := e.observe(ctx)
	if err != nil {
		return err
	}
	p, err := Plan(want, obs, e.Infra, e.Warnings)
	if err != nil {
		return err
	}
	if len(p.Refusals) > 0 {
		reasons := make([]string, len(p.Refusals))
		unreachable, waits := false, true
		for i, r := range p.Refusals {
			reasons[i] = r.Resource.String() + ": " + r.Reason
			unreachable = unreachable || r.Resource.Name == unreachableAPI
			waits = waits && r.Waits
		}
		err := fmt.Errorf("%w, nothing was changed: %s", ErrRefused, strings.Join(reasons, "; "))
		switch {
		case unreachable:
			// The API may answer again: worth another try later.
			return retry.Transient(fmt.Errorf("%w (%w), nothing was changed: %s", ErrRefused, ErrUnreachable, strings.Join(reasons, "; ")))
		case waits:
			return retry.Waiting(strings.Join(reasons, "; "), waitingRetry, err)
		}
		return err
	}
	if e.Approve != nil {
		if err := e.Approve(p); err != nil {
			return err
		}
	}
	if err := e.recheck(ctx, obs.Journal, p); err != nil {
		return err
	}
	for _, w := range p.Warnings {
		e.say(plan.PhaseValidate, "warning: %s", w)
	}
	n := executable(p)
	if n > 0 {
		if err := e.preflight(ctx, p); err != nil {
			return err
		}
	}
	switch {
	case n == 0 && p.Incomplete:
		// Nothing to run, but not "no changes": the end says why.
	case n == 0 && len(p.Warnings) > 0:
		e.say(plan.PhaseHealth, "nothing to change; %d warning(s) above", len(p.Warnings))
		return nil
	case n == 0:
		e.say(plan.PhaseHealth, "no changes: the cluster matches cluster.yaml")
		return nil
	default:
		e.say(plan.PhaseValidate, "plan: %s", p.Summary())
		if err := e.execute(ctx, p, want); err != nil {
			return err
		}
	}
	if p.Incomplete {
		return incomplete(p)
	}
	return nil
}

// preflight asks the provider, when it can tell, whether it will allow
// every step of the plan; a no is a refusal, before anything changed.
func (e *Engine) preflight(ctx context.Context, p *plan.Plan) error {
	pf, ok := e.Infra.(Preflighter)
	if !ok {
		return nil
	}
	if err := pf.Preflight(ctx, p); err != nil {
		if retry.IsTransient(err) {
			return fmt.Errorf("checking the provider's permissions before the first change: %w", err)
		}
		return fmt.Errorf("%w, nothing was changed: %w", ErrRefused, err)
	}
	return nil
}

// incomplete is the error of a converge whose plan could not read part of
// the cluster.
func incomplete(p *plan.Plan) error {
	return retry.Transient(fmt.Errorf("%w: %s; run converge again once it answers", ErrIncomplete, strings.Join(p.IncompleteReasons, "; ")))
}

// Journal records the intent of mutations (state.Journal).
type Journal interface {
	Begin(ctx context.Context, cluster string, e state.Entry) (string, error)
	Done(ctx context.Context, cluster, id string, err error) error
	Open(ctx context.Context, cluster string) ([]state.Entry, error)
}

// recheck closes the journal entries an earlier run left open: the plan
// just made observed what they left and planned from it (a reset that
// may still run is followed, a VM that may be gone is looked up), so they
// are settled.
func (e *Engine) recheck(ctx context.Context, open []state.Entry, p *plan.Plan) error {
	if e.Journal == nil {
		return nil
	}
	waited := map[string]bool{}
	for _, st := range p.Changes {
		if op, ok := st.Op.(nodeBack); ok {
			waited[op.hostname] = true
		}
	}
	for _, en := range open {
		if en.Boot != "" && waited[en.Target] {
			// A restart stays open until this plan's wait sees the node
			// back and healthy.
			continue
		}
		e.say(plan.PhaseValidate, "an earlier run was interrupted during %s %s (started %s): this plan was made from what it left", en.Op, en.Target, en.Started.Format(time.RFC3339))
		if err := e.Journal.Done(ctx, e.Key, en.ID, errors.New("interrupted; re-checked by the plan of a later run")); err != nil {
			return fmt.Errorf("closing the journal entry of the interrupted %s %s: %w", en.Op, en.Target, err)
		}
	}
	return nil
}

// configs generates the machine config of every desired machine: a new
// one at cluster.yaml's versions, one that exists at those it runs (obs;
// nil for none). A control plane in the middle of a Kubernetes upgrade
// keeps the newer components it already runs: its config is never moved
// back. want.ConfigAt generates configs at other versions, for the later
// steps of a rollout.
func (e *Engine) configs(want *Desired, bundle *secrets.Bundle, obs *Observation) error {
	if !want.API.Known || (want.API.PublicPending && obs.noMachines()) {
		// Made by the step after the network phase, from the endpoint
		// the provider then reports.
		want.ConfigAt = nil
		return nil
	}
	api := want.API
	gen := func(m machineconfig.Machine, talosVersion, kubeVersion string) ([]byte, error) {
		in := machineconfig.Input{Cluster: e.Cluster, Secrets: bundle, Endpoint: api.URL, VIP: api.VIP, PublicAddr: api.PublicAddr,
			TalosVersion: talosVersion, KubernetesVersion: kubeVersion}
		cfg, err := machineconfig.Generate(in, m)
		if err != nil {
			return nil, err
		}
		return machineconfig.Encode(cfg)
	}
	want.ConfigAt = func(hostname, talosVersion, kubeVersion string) ([]byte, error) {
		for _, m := range want.Machines {
			if m.Hostname == hostname {
				return gen(m, talosVersion, kubeVersion)
			}
		}
		return nil, fmt.Errorf("no machine %s in cluster.yaml", hostname)
	}
	for _, m := range want.Machines {
		tv, kv := runningVersions(obs, m.Hostname)
		data, err := gen(m, tv, kv)
		if err != nil && (tv != "" || kv != "") {
			// A version this build cannot write configs for (a Talos
			// outside its range): the node's version is refused by the
			// planner; its config is compared at cluster.yaml's.
			data, err = gen(m, "", "")
		}
		if err != nil {
			return err
		}
		if n, ok := obs.nodeFacts(m.Hostname); ok && m.Role() == spec.RoleControlPlane {
			if data, err = keepNewerComponents(data, n.Config); err != nil {
				return fmt.Errorf("the machine config of %s: %w", m.Hostname, err)
			}
		}
		want.Configs[m.Hostname] = data
	}
	return nil
}

// nodeFacts returns the Talos facts of a machine that answered with its
// running config; ok is false otherwise (and for a nil observation).
func (o *Observation) nodeFacts(hostname string) (NodeFacts, bool) {
	if o == nil || o.Offline {
		return NodeFacts{}, false
	}
	n, ok := o.Nodes[hostname]
	return n, ok && n.Unknown == "" && !n.Maintenance && n.Config != nil
}

// keepNewerComponents returns the desired config with each control-plane
// component at the version the running config has when that one is newer:
// an interrupted Kubernetes upgrade moved it already.
func keepNewerComponents(desired, running []byte) ([]byte, error) {
	for _, comp := range []string{machineconfig.APIServer, machineconfig.ControllerManager, machineconfig.Scheduler} {
		have, err := machineconfig.ComponentImage(running, comp)
		if err != nil {
			return nil, err
		}
		want, err := machineconfig.ComponentImage(desired, comp)
		if err != nil {
			return nil, err
		}
		if hv := kube.ImageTag(have); hv != "" && older(kube.ImageTag(want), hv) {
			if desired, err = machineconfig.WithComponentVersion(desired, comp, hv); err != nil {
				return nil, err
			}
		}
	}
	return desired, nil
}

// runningVersions returns the Talos and Kubernetes versions a machine runs
// as obs found them: Talos's from its API, Kubernetes's from the kubelet
// image its running config names, else the API server's for a machine
// that exists; "" for what is not known (cluster.yaml's then).
func runningVersions(obs *Observation, hostname string) (talosVersion, kubeVersion string) {
	if obs == nil || obs.Offline {
		return "", ""
	}
	if _, exists := machineNamed(obs.Inventory, hostname); !exists {
		return "", ""
	}
	n, ok := obs.Nodes[hostname]
	if ok && n.Unknown == "" && !n.Maintenance {
		talosVersion = n.Version
		if cfg, err := machineconfig.Parse(n.Config); n.Config != nil && err == nil && cfg.Machine() != nil {
			kubeVersion = kube.ImageTag(cfg.Machine().Kubelet().Image())
		}
	}
	if kubeVersion == "" && obs.Kube.Unknown == "" {
		kubeVersion = obs.Kube.Version
	}
	return talosVersion, kubeVersion
}

// PlanDestroy returns what Destroy would delete, without changing anything.
func (e *Engine) PlanDestroy(ctx context.Context) (*plan.Plan, error) {
	p, _, err := e.planDestroy(ctx)
	return p, err
}

// planDestroy is PlanDestroy with the inventory it was made from.
func (e *Engine) planDestroy(ctx context.Context) (*plan.Plan, Inventory, error) {
	inv, err := e.Infra.Observe(ctx)
	if err != nil {
		return nil, nil, err
	}
	p := plan.New(e.Cluster.Name)
	changes, err := e.Infra.Plan(plan.PhaseDestroy, &Desired{Cluster: e.Cluster, Machines: machineconfig.Machines(e.Cluster)}, inv)
	if err != nil {
		return nil, nil, err
	}
	for _, ch := range changes {
		p.Add(ch)
	}
	if err := e.planTeardown(ctx, p, inv); err != nil {
		return nil, nil, err
	}
	kinds := map[string]plan.ResourceKind{KubeconfigFile: plan.KindKubeconfig, TalosconfigFile: plan.KindTalosconfig, TalosSecretsFile: plan.KindTalosSecrets}
	for _, f := range []string{KubeconfigFile, TalosconfigFile, TalosSecretsFile} {
		if ok, err := e.exists(ctx, f); err != nil {
			return nil, nil, err
		} else if ok {
			p.Add(plan.Change{Phase: plan.PhaseDestroy, Domain: plan.DomainState, Action: plan.ActionDelete,
				Resource: plan.Resource{Kind: kinds[f], Name: f}, Reason: "destroy: the cluster's local state is removed last",
				Expects: "no machine of the cluster exists any more", Op: deleteState{file: f}})
		}
	}
	p.Warn("destroy deletes every machine of the cluster and its identity; workloads and their data on the machines are lost")
	p.Sort()
	return p, inv, nil
}

// Destroy runs the destroy plan: the cluster's machines and resources,
// then its state (the identity last, once nothing is left that it could
// rebuild). Approve, when set, sees the plan first. When the State is a
// Locker, the whole run holds the cluster's mutation lock.
func (e *Engine) Destroy(ctx context.Context) error {
	e.say(plan.PhaseDestroy, "destroying cluster %s", e.Cluster.Name)
	if probs := e.Cluster.Credentials(); len(probs) > 0 {
		return fmt.Errorf("credentials: %s", probs[0])
	}
	return e.locked(ctx, "destroy", e.destroy)
}

func (e *Engine) destroy(ctx context.Context) error {
	p, inv, err := e.planDestroy(ctx)
	if err != nil {
		return err
	}
	if e.Approve != nil {
		if err := e.Approve(p); err != nil {
			return err
		}
	}
	if err := e.preflight(ctx, p); err != nil {
		return err
	}
	// The plugins' teardown reaches the cluster as the plan read it.
	want := &Desired{Cluster: e.Cluster, Machines: machineconfig.Machines(e.Cluster), API: EndpointOf(e.Cluster, e.Infra, inv)}
	if err := e.execute(ctx, p, want); err != nil {
		return err
	}
	e.say(plan.PhaseDestroy, "done: the machines, the pool and the local state of %s are gone (the shared boot ISO is kept)", e.Cluster.Name)
	return nil
}
