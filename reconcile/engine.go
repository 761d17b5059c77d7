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
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
	"github.com/taloscluster/taloscluster/reconcile/talos"
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

// ErrUnreachable is returned when a cluster that was bootstrapped before
// does not answer: converge did what it safely could and stopped.
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
}

func (e *Engine) say(phase plan.Phase, format string, args ...any) {
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

func (e *Engine) poll() time.Duration {
	if e.PollInterval > 0 {
		return e.PollInterval
	}
	return 2 * time.Second
}

// Endpoint returns the cluster's Kubernetes API endpoint and its Layer-2
// VIP as known from the configuration.
func Endpoint(c *spec.Cluster) (string, netip.Addr) {
	if vip, _ := c.Network.KubeAPIVIP(); vip.IsValid() {
		return "https://" + netip.AddrPortFrom(vip, 6443).String(), vip
	}
	return "https://" + c.Name + "-kubeapi.invalid:6443", netip.Addr{}
}

func (e *Engine) desired() *Desired {
	return &Desired{Cluster: e.Cluster, Machines: machineconfig.Machines(e.Cluster), Configs: map[string][]byte{}}
}

// Plan returns what Converge would do, without changing anything.
func (e *Engine) Plan(ctx context.Context) (*plan.Plan, error) {
	p := plan.New(e.Cluster.Name)
	for _, w := range e.Warnings {
		p.Warn(w.String())
	}
	inv, err := e.Infra.Observe(ctx)
	if err != nil {
		return nil, err
	}
	want := e.desired()
	add := func(phase plan.Phase) error {
		changes, err := e.Infra.Plan(ctx, phase, want, inv)
		if err != nil {
			return err
		}
		for _, ch := range changes {
			p.Add(ch)
		}
		return nil
	}
	for _, phase := range []plan.Phase{plan.PhaseValidate, plan.PhaseImage} {
		if err := add(phase); err != nil {
			return nil, err
		}
	}
	if err := e.planIdentity(ctx, p, inv); err != nil {
		return nil, err
	}
	if err := add(plan.PhaseNetwork); err != nil {
		return nil, err
	}
	if ok, err := e.exists(ctx, TalosconfigFile); err != nil {
		return nil, err
	} else if !ok {
		p.Add(plan.Change{Phase: plan.PhaseNetwork, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindTalosconfig, Name: TalosconfigFile},
			Reason:   "Talos client config for the control planes, written with mode 0600"})
	}
	if err := add(plan.PhaseCompute); err != nil {
		return nil, err
	}
	if ok, err := e.exists(ctx, KubeconfigFile); err != nil {
		return nil, err
	} else if !ok {
		if len(inv.Machines()) == 0 {
			p.Add(plan.Change{Phase: plan.PhaseBootstrap, Action: plan.ActionBootstrap,
				Resource: plan.Resource{Kind: plan.KindMachine, Name: want.Machines[0].Hostname},
				Reason:   "bootstrap etcd on the first control plane"})
		} else {
			p.Add(plan.Change{Phase: plan.PhaseBootstrap, Action: plan.ActionBootstrap,
				Resource: plan.Resource{Kind: plan.KindMachine, Name: want.Machines[0].Hostname},
				Reason:   "machines exist but there is no kubeconfig: recover it from the first control plane, or bootstrap if it never was"})
		}
		p.Add(plan.Change{Phase: plan.PhaseKubeconfig, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindKubeconfig, Name: KubeconfigFile},
			Reason:   "fetched from the first control plane, written with mode 0600"})
	}
	if err := add(plan.PhaseHealth); err != nil {
		return nil, err
	}
	if w, ok := e.Infra.(Warner); ok {
		for _, msg := range w.Warnings(inv) {
			p.Warn(msg)
		}
	}
	p.Sort()
	return p, nil
}

// planIdentity adds the cluster-identity change, or the refusal when the
// identity is missing while machines exist.
func (e *Engine) planIdentity(ctx context.Context, p *plan.Plan, inv Inventory) error {
	if ok, err := e.exists(ctx, TalosSecretsFile); err != nil || ok {
		return err
	}
	res := plan.Resource{Kind: plan.KindTalosSecrets, Name: TalosSecretsFile}
	if ms := inv.Machines(); len(ms) > 0 {
		p.Refuse(res, fmt.Sprintf("%s is missing but %d of the cluster's machines exist (e.g. %s): restore talossecrets.yaml from backup; a new identity would not match the running cluster", TalosSecretsFile, len(ms), ms[0].Hostname))
		return nil
	}
	p.Add(plan.Change{Phase: plan.PhaseSecrets, Action: plan.ActionCreate, Resource: res,
		Reason: "new cluster identity (cluster and etcd CAs, join tokens); back it up, it cannot be regenerated"})
	return nil
}

// Converge makes the cluster match its configuration, phase by phase.
func (e *Engine) Converge(ctx context.Context) error {
	want := e.desired()

	// validate: every refusal is found before the first mutation.
	e.say(plan.PhaseValidate, "checking credentials and the provider")
	if err := e.interrupted(ctx); err != nil {
		return err
	}
	if probs := e.Cluster.Credentials(); len(probs) > 0 {
		msgs := make([]string, len(probs))
		for i, pr := range probs {
			msgs[i] = pr.String()
		}
		return fmt.Errorf("credentials: %s", strings.Join(msgs, "; "))
	}
	inv, err := e.Infra.Observe(ctx)
	if err != nil {
		return err
	}
	refusals := plan.New(e.Cluster.Name)
	checks, err := e.Infra.Plan(ctx, plan.PhaseValidate, want, inv)
	if err != nil {
		return err
	}
	for _, ch := range checks {
		refusals.Add(ch)
	}
	if err := e.planIdentity(ctx, refusals, inv); err != nil {
		return err
	}
	if len(refusals.Refusals) > 0 {
		var reasons []string
		for _, r := range refusals.Refusals {
			reasons = append(reasons, r.Resource.String()+": "+r.Reason)
		}
		return fmt.Errorf("%w, nothing was changed: %s", ErrRefused, strings.Join(reasons, "; "))
	}

	if err := e.runPhase(ctx, plan.PhaseImage, want, inv); err != nil {
		return err
	}

	bundle, err := e.identity(ctx, inv)
	if err != nil {
		return err
	}
	if err := e.configs(want, bundle); err != nil {
		return err
	}

	if inv, err = e.Infra.Observe(ctx); err != nil {
		return err
	}
	if err := e.runPhase(ctx, plan.PhaseNetwork, want, inv); err != nil {
		return err
	}

	// discover: a cluster with a kubeconfig must answer before anything
	// else is done to it.
	up, err := e.probeExisting(ctx)
	if err != nil {
		return err
	}

	if inv, err = e.Infra.Observe(ctx); err != nil {
		return err
	}
	if err := e.runPhase(ctx, plan.PhaseCompute, want, inv); err != nil {
		return err
	}

	cps, err := e.waitAddresses(ctx, want)
	if err != nil {
		return err
	}
	if err := e.writeTalosconfig(ctx, bundle, cps); err != nil {
		return err
	}
	tc, err := e.talosClient(ctx)
	if err != nil {
		return err
	}
	defer tc.Close()
	first := cps[0]

	if !up {
		if up, err = e.recoverKubeconfig(ctx, tc, first); err != nil {
			return err
		}
	}
	if !up {
		e.say(plan.PhaseBootstrap, "bootstrapping etcd on %s (%s)", want.Machines[0].Hostname, first)
		bctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
		err := talos.Retry(bctx, func(ctx context.Context) error { return tc.Bootstrap(ctx, first) })
		cancel()
		if err != nil {
			return err
		}
		if err := e.fetchKubeconfig(ctx, tc, first); err != nil {
			return err
		}
	}
	if err := e.health(ctx, tc, first, want); err != nil {
		return err
	}
	if inv, err = e.Infra.Observe(ctx); err != nil {
		return err
	}
	if err := e.runPhase(ctx, plan.PhaseHealth, want, inv); err != nil {
		return err
	}
	e.say(plan.PhaseHealth, "done: %d machines, all nodes Ready", len(want.Machines))
	return nil
}

// Journal records the intent of mutations (state.Journal).
type Journal interface {
	Begin(ctx context.Context, cluster string, e state.Entry) (string, error)
	Done(ctx context.Context, cluster, id string, err error) error
	Open(ctx context.Context, cluster string) ([]state.Entry, error)
}

// runPhase plans one provider phase and applies its changes in order, each
// recorded in the journal before it is made.
func (e *Engine) runPhase(ctx context.Context, phase plan.Phase, want *Desired, inv Inventory) error {
	changes, err := e.Infra.Plan(ctx, phase, want, inv)
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		e.say(phase, "nothing to do")
	}
	for _, ch := range changes {
		e.say(phase, "%s %s %s", ch.Action.Symbol(), ch.Resource.Kind, ch.Resource.Name)
		id := ""
		if e.Journal != nil {
			if id, err = e.Journal.Begin(ctx, e.Key, state.Entry{Op: string(ch.Action) + " " + string(ch.Resource.Kind), Target: ch.Resource.Name, Commit: e.Commit}); err != nil {
				return fmt.Errorf("recording the intent to %s %s: %w", ch.Action, ch.Resource, err)
			}
		}
		err := e.Infra.Apply(ctx, want, ch)
		if e.Journal != nil {
			if jerr := e.Journal.Done(context.WithoutCancel(ctx), e.Key, id, err); jerr != nil && err == nil {
				err = fmt.Errorf("recording the outcome: %w", jerr)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %s %s: %w", phase, ch.Action, ch.Resource, err)
		}
	}
	return nil
}

// interrupted reports the mutations an earlier run began and never
// finished: their outcome is unknown, so this run looks the resources up
// (as it always does) rather than assuming either way.
func (e *Engine) interrupted(ctx context.Context) error {
	if e.Journal == nil {
		return nil
	}
	open, err := e.Journal.Open(ctx, e.Key)
	if err != nil {
		return fmt.Errorf("reading the run journal: %w", err)
	}
	for _, en := range open {
		e.say(plan.PhaseValidate, "an earlier run was interrupted during %s %s (started %s): looking it up", en.Op, en.Target, en.Started.Format(time.RFC3339))
		if err := e.Journal.Done(ctx, e.Key, en.ID, errors.New("interrupted; resumed by a later run")); err != nil {
			return err
		}
	}
	return nil
}

// identity loads talossecrets.yaml, or mints it when no machine exists.
func (e *Engine) identity(ctx context.Context, inv Inventory) (*secrets.Bundle, error) {
	data, err := e.read(ctx, TalosSecretsFile)
	if err != nil {
		return nil, err
	}
	if len(data) > 0 {
		b, err := machineconfig.ParseSecrets(TalosSecretsFile, data)
		if err != nil {
			return nil, err
		}
		e.say(plan.PhaseSecrets, "using the existing %s", TalosSecretsFile)
		return b, nil
	}
	if ms := inv.Machines(); len(ms) > 0 {
		return nil, fmt.Errorf("%w: %s is missing but machines exist (%s): restore it from backup", ErrRefused, TalosSecretsFile, ms[0].Hostname)
	}
	b, err := machineconfig.NewSecrets(e.Cluster.Talos.Version)
	if err != nil {
		return nil, err
	}
	enc, err := machineconfig.EncodeSecrets(b)
	if err != nil {
		return nil, err
	}
	if err := e.State.Create(ctx, e.Key, TalosSecretsFile, enc); err != nil {
		return nil, fmt.Errorf("storing the new cluster identity: %w", err)
	}
	e.say(plan.PhaseSecrets, "minted a new cluster identity in %s: back it up now", TalosSecretsFile)
	return b, nil
}

// configs generates the machine config of every desired machine.
func (e *Engine) configs(want *Desired, bundle *secrets.Bundle) error {
	endpoint, vip := Endpoint(e.Cluster)
	in := machineconfig.Input{Cluster: e.Cluster, Secrets: bundle, Endpoint: endpoint, VIP: vip}
	for _, m := range want.Machines {
		cfg, err := machineconfig.Generate(in, m)
		if err != nil {
			return err
		}
		data, err := machineconfig.Encode(cfg)
		if err != nil {
			return err
		}
		want.Configs[m.Hostname] = data
	}
	return nil
}

// waitAddresses waits until every control plane reports an address and
// returns them in machine order (the first is cp-01).
func (e *Engine) waitAddresses(ctx context.Context, want *Desired) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
	defer cancel()
	var cps []string
	for _, m := range want.Machines {
		if m.Role() == spec.RoleControlPlane {
			cps = append(cps, m.Hostname)
		}
	}
	e.say(plan.PhaseBootstrap, "waiting for %d control planes to report an address", len(cps))
	for {
		inv, err := e.Infra.Observe(ctx)
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		var addrs []string
		if err == nil {
			for _, h := range cps {
				if m, ok := machineNamed(inv, h); ok && len(m.Addresses) > 0 {
					addrs = append(addrs, m.Addresses[0].String())
				}
			}
		}
		if len(addrs) == len(cps) {
			return addrs, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for control plane addresses: %d of %d known: %w", len(addrs), len(cps), ctx.Err())
		case <-time.After(e.poll()):
		}
	}
}

func (e *Engine) writeTalosconfig(ctx context.Context, bundle *secrets.Bundle, endpoints []string) error {
	data, err := talos.Talosconfig(e.Cluster.Name, bundle, endpoints)
	if err != nil {
		return err
	}
	if old, err := e.read(ctx, TalosconfigFile); err == nil && len(old) > 0 && sameEndpoints(old, endpoints) {
		return nil
	}
	if err := e.State.Put(ctx, e.Key, TalosconfigFile, data); err != nil {
		return err
	}
	e.say(plan.PhaseNetwork, "wrote %s (endpoints %s)", TalosconfigFile, strings.Join(endpoints, ", "))
	return nil
}

// sameEndpoints reports whether an existing talosconfig already lists the
// endpoints, so an unchanged file is not rewritten.
func sameEndpoints(old []byte, endpoints []string) bool {
	for _, ep := range endpoints {
		if !strings.Contains(string(old), "- "+ep+"\n") {
			return false
		}
	}
	return true
}

func (e *Engine) talosClient(ctx context.Context) (*talos.Client, error) {
	data, err := e.read(ctx, TalosconfigFile)
	if err != nil || len(data) == 0 {
		return nil, fmt.Errorf("reading %s: %w", TalosconfigFile, errors.Join(err, fs.ErrNotExist))
	}
	return talos.New(ctx, data)
}

// probeExisting decides whether a cluster with a kubeconfig is up, only by
// asking its API (with retries, so one failure is never taken as a fresh
// cluster). A kubeconfig whose API never answers is an existing but
// unreachable cluster: converge stops before creating, bootstrapping or
// changing anything. Without a kubeconfig it reports false.
func (e *Engine) probeExisting(ctx context.Context) (bool, error) {
	data, err := e.read(ctx, KubeconfigFile)
	if err != nil {
		return false, err
	}
	if len(data) == 0 {
		return false, nil
	}
	if err := e.probeAPI(ctx, data); err != nil {
		e.say(plan.PhaseDiscover, "WARNING: a kubeconfig exists but the Kubernetes API does not answer")
		return false, fmt.Errorf("%w: a kubeconfig exists but the Kubernetes API did not answer after retries (%v); converge did not create machines, bootstrap or check health; investigate the cluster and run converge again", ErrUnreachable, err)
	}
	e.say(plan.PhaseDiscover, "the Kubernetes API answers: the cluster is up")
	return true, nil
}

// recoverKubeconfig asks the first control plane for a kubeconfig: a
// bootstrapped cluster serves one, a never-bootstrapped one refuses. While
// the node is unreachable it waits (bounded), so a node that is slow to boot
// is not taken for a fresh cluster.
func (e *Engine) recoverKubeconfig(ctx context.Context, tc *talos.Client, first string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
	defer cancel()
	for {
		data, err := tc.Kubeconfig(ctx, first)
		switch {
		case err == nil:
			if err := e.State.Put(ctx, e.Key, KubeconfigFile, data); err != nil {
				return false, err
			}
			e.say(plan.PhaseDiscover, "recovered %s from the first control plane: the cluster was bootstrapped before", KubeconfigFile)
			return true, nil
		case !talos.Unreachable(err):
			e.say(plan.PhaseDiscover, "no kubeconfig and the first control plane serves none: the cluster was never bootstrapped")
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("asking the first control plane %s for a kubeconfig: %w", first, err)
		case <-time.After(e.poll()):
		}
	}
}

// probeAPI reads the Kubernetes version, retrying so that one transient
// failure is never taken as a fresh cluster.
func (e *Engine) probeAPI(ctx context.Context, kubeconfig []byte) error {
	kc, err := kube.New(kubeconfig)
	if err != nil {
		return err
	}
	var last error
	for i := 0; i < 5; i++ {
		if _, last = kc.Version(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.poll()):
		}
	}
	return last
}

func (e *Engine) fetchKubeconfig(ctx context.Context, tc *talos.Client, first string) error {
	ctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
	defer cancel()
	var data []byte
	err := talos.Retry(ctx, func(ctx context.Context) error {
		var err error
		data, err = tc.Kubeconfig(ctx, first)
		return err
	})
	if err != nil {
		return err
	}
	if err := e.State.Put(ctx, e.Key, KubeconfigFile, data); err != nil {
		return err
	}
	e.say(plan.PhaseKubeconfig, "wrote %s", KubeconfigFile)
	return nil
}

// health waits until every desired machine is a Ready node and the etcd
// members are exactly the control planes.
func (e *Engine) health(ctx context.Context, tc *talos.Client, first string, want *Desired) error {
	data, err := e.read(ctx, KubeconfigFile)
	if err != nil || len(data) == 0 {
		return fmt.Errorf("reading %s: %w", KubeconfigFile, errors.Join(err, fs.ErrNotExist))
	}
	kc, err := kube.New(data)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
	defer cancel()
	cps := 0
	for _, m := range want.Machines {
		if m.Role() == spec.RoleControlPlane {
			cps++
		}
	}
	e.say(plan.PhaseHealth, "waiting for %d nodes Ready and %d etcd members", len(want.Machines), cps)
	var why string
	for {
		why = e.unhealthy(ctx, tc, kc, first, want, cps)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the cluster to be healthy: %s: %w", why, ctx.Err())
		case <-time.After(e.poll()):
		}
	}
}

// unhealthy returns why the cluster is not healthy yet, or "".
func (e *Engine) unhealthy(ctx context.Context, tc *talos.Client, kc *kube.Client, first string, want *Desired, cps int) string {
	nodes, err := kc.Nodes(ctx)
	if err != nil {
		return err.Error()
	}
	ready := map[string]bool{}
	for _, n := range nodes {
		ready[n.Name] = n.Ready
	}
	var missing []string
	for _, m := range want.Machines {
		if !ready[m.Hostname] {
			missing = append(missing, m.Hostname)
		}
	}
	if len(missing) > 0 {
		return "not Ready yet: " + strings.Join(missing, ", ")
	}
	members, err := tc.EtcdMembers(ctx, first)
	if err != nil {
		return err.Error()
	}
	if len(members) != cps {
		return fmt.Sprintf("%d etcd members, want %d", len(members), cps)
	}
	return ""
}

// PlanDestroy returns what Destroy would delete, without changing anything.
func (e *Engine) PlanDestroy(ctx context.Context) (*plan.Plan, error) {
	inv, err := e.Infra.Observe(ctx)
	if err != nil {
		return nil, err
	}
	p := plan.New(e.Cluster.Name)
	changes, err := e.Infra.Plan(ctx, plan.PhaseDestroy, e.desired(), inv)
	if err != nil {
		return nil, err
	}
	for _, ch := range changes {
		p.Add(ch)
	}
	for _, f := range []string{KubeconfigFile, TalosconfigFile, TalosSecretsFile} {
		if ok, err := e.exists(ctx, f); err != nil {
			return nil, err
		} else if ok {
			kind := plan.KindKubeconfig
			switch f {
			case TalosconfigFile:
				kind = plan.KindTalosconfig
			case TalosSecretsFile:
				kind = plan.KindTalosSecrets
			}
			p.Add(plan.Change{Phase: plan.PhaseDestroy, Action: plan.ActionDelete,
				Resource: plan.Resource{Kind: kind, Name: f}, Reason: "destroy: the cluster's local state is removed last"})
		}
	}
	p.Warn("destroy deletes every machine of the cluster and its identity; workloads and their data on the machines are lost")
	p.Sort()
	return p, nil
}

// Destroy deletes the cluster's machines and resources, then its state
// (the identity last, once nothing is left that it could rebuild).
func (e *Engine) Destroy(ctx context.Context) error {
	e.say(plan.PhaseDestroy, "destroying cluster %s", e.Cluster.Name)
	if probs := e.Cluster.Credentials(); len(probs) > 0 {
		return fmt.Errorf("credentials: %s", probs[0])
	}
	inv, err := e.Infra.Observe(ctx)
	if err != nil {
		return err
	}
	if err := e.runPhase(ctx, plan.PhaseDestroy, e.desired(), inv); err != nil {
		return err
	}
	if inv, err = e.Infra.Observe(ctx); err != nil {
		return err
	}
	if left := inv.Machines(); len(left) > 0 {
		return fmt.Errorf("destroy: %d machines are still there (e.g. %s); the cluster's state was kept", len(left), left[0].Hostname)
	}
	for _, f := range []string{KubeconfigFile, TalosconfigFile, TalosSecretsFile} {
		if err := e.State.Delete(ctx, e.Key, f); err != nil {
			return err
		}
	}
	e.say(plan.PhaseDestroy, "done: the machines, the pool and the local state of %s are gone (the shared boot ISO is kept)", e.Cluster.Name)
	return nil
}
