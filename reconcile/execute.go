package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/state"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// run is one execution of a plan: what earlier steps produced for later
// ones.
type run struct {
	e      *Engine
	want   *Desired
	bundle *secrets.Bundle
	tc     *talos.Client
	tcFor  string // the endpoints tc was made for
	// addrs are the machines' addresses, by hostname, as waitAddresses
	// last saw them.
	addrs map[string]string
	// unreadAddrs are the machines whose address could not be read when
	// planning (waitAddresses' op): waited for only within the read budget.
	unreadAddrs []string
	// kc is the Kubernetes client, once a step needed it.
	kc *kube.Client

	// mu guards what the parallel steps of a batch share: the clients
	// above and the maps below.
	mu sync.Mutex
	// boots holds, by hostname, the boot ID a node had when this run
	// asked for its restart.
	boots map[string]string
	// selfReboot marks the nodes that reboot by themselves after an
	// install (the older upgrade call).
	selfReboot map[string]bool
	// refs are the running nodes the plan's rollout steps name.
	refs map[string]nodeRef
	// results holds what the plugins' steps returned, by plugin.
	results map[string]map[string]string
}

// execute runs the plan's steps in order, each recorded in the journal
// before it mutates anything. It stops at the first step that fails.
func (e *Engine) execute(ctx context.Context, p *plan.Plan, want *Desired) error {
	r := &run{e: e, want: want, boots: map[string]string{}, selfReboot: map[string]bool{}, refs: nodeRefs(p)}
	defer r.close()
	var steps []plan.Change
	for _, st := range p.Changes {
		if st.Action != plan.ActionRefuse {
			steps = append(steps, st)
		}
	}
	total := len(steps)
	var plugins pluginFailures
	for i := 0; i < total; {
		st := steps[i]
		if name := pluginOf(st); name != "" {
			// A plugin's failure stops its own later steps, not the
			// others': the run fails at its end, naming it.
			if plugins.failed(name) {
				r.e.say(st.Phase, "[%d/%d] skipped %s %s: the %s plugin failed before", i+1, total, st.Resource.Kind, st.Resource.Name, name)
			} else if err := r.numbered(ctx, i+1, total, st); err != nil {
				if ctx.Err() != nil {
					return err
				}
				r.e.say(st.Phase, "the %s plugin failed; the other plugins go on: %v", name, err)
				plugins.add(name, err)
			}
			i++
			continue
		}
		if op, ok := st.Op.(deleteState); ok && len(plugins.order) > 0 {
			// The state lets a destroy run again tear down what the
			// failed plugins left.
			r.e.say(st.Phase, "[%d/%d] kept %s: a plugin's teardown failed; destroy again once it can reach what it made", i+1, total, op.file)
			i++
			continue
		}
		if st.Batch == 0 {
			if err := r.numbered(ctx, i+1, total, st); err != nil {
				return err
			}
			i++
			continue
		}
		j := i
		for j < total && steps[j].Batch == st.Batch {
			j++
		}
		if err := r.batch(ctx, steps[i:j], i, total); err != nil {
			return err
		}
		i = j
	}
	return plugins.err()
}

// StepEvent tells that a step of a converge started (Ended is zero) or
// ended (with Err when it failed).
type StepEvent struct {
	// Index counts the step from 1 among the Total steps of the plan.
	Index, Total int
	Phase        plan.Phase
	Action       plan.Action
	Resource     plan.Resource
	// Reason is the step's reason, as the plan shows it.
	Reason string
	// Attributes are the step's attributes, as the plan shows them (which
	// hop a Kubernetes step belongs to, whether a node update cordons).
	Attributes []plan.Attribute
	// Batch is the step's batch, 0 for none.
	Batch          int
	Started, Ended time.Time
	Err            error
}

// numbered runs the step numbered i of total.
func (r *run) numbered(ctx context.Context, i, total int, st plan.Change) error {
	r.e.say(st.Phase, "[%d/%d] %s %s %s", i, total, st.Action.Symbol(), st.Resource.Kind, st.Resource.Name)
	ev := StepEvent{Index: i, Total: total, Phase: st.Phase, Action: st.Action, Resource: st.Resource, Reason: st.Reason, Attributes: st.Attributes, Batch: st.Batch, Started: time.Now()}
	if r.e.Steps != nil {
		r.e.Steps(ev)
	}
	err := r.journaled(ctx, st)
	if r.e.Steps != nil {
		ev.Ended, ev.Err = time.Now(), err
		r.e.Steps(ev)
	}
	if err != nil {
		if errors.Is(err, ErrPrecondition) {
			// The world changed since the plan was made: planning again
			// may well succeed, so the failure is worth a retry (which
			// the reviewed-plan check still guards).
			err = retry.Transient(err)
		}
		return fmt.Errorf("step %d of %d (%s %s %s): %w", i, total, st.Phase, st.Action, st.Resource, err)
	}
	return nil
}

// batch runs the steps of one batch (steps[0] is step offset+1): each
// machine's steps in order, the machines at the same time. It returns
// once every machine's steps ended, with their errors.
func (r *run) batch(ctx context.Context, steps []plan.Change, offset, total int) error {
	var order []string
	byMachine := map[string][]int{}
	for i, st := range steps {
		if _, ok := byMachine[st.Resource.Name]; !ok {
			order = append(order, st.Resource.Name)
		}
		byMachine[st.Resource.Name] = append(byMachine[st.Resource.Name], i)
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for k, name := range order {
		wg.Go(func() {
			for _, i := range byMachine[name] {
				if err := r.numbered(ctx, offset+i+1, total, steps[i]); err != nil {
					errs[k] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return worst(errs)
}

// worst returns the error of a batch whose outcome is the worst: a
// failure over a transient error over a wait, so that one machine's
// terminal failure is never retried because another one waits. The others
// are named in its message.
func worst(errs []error) error {
	rank := map[Outcome]int{Succeeded: 0, Waiting: 1, Transient: 2, Failed: 3}
	var pick error
	var others []string
	for _, err := range errs {
		if err == nil {
			continue
		}
		if pick == nil || rank[Settle(err).Outcome] > rank[Settle(pick).Outcome] {
			if pick != nil {
				others = append(others, pick.Error())
			}
			pick = err
			continue
		}
		others = append(others, err.Error())
	}
	if pick == nil || len(others) == 0 {
		return pick
	}
	return fmt.Errorf("%w; and in the same batch: %s", pick, strings.Join(others, "; "))
}

// nodeRefs collects the running nodes the plan's rollout steps name.
func nodeRefs(p *plan.Plan) map[string]nodeRef {
	out := map[string]nodeRef{}
	for _, st := range p.Changes {
		switch op := st.Op.(type) {
		case nodeBack:
			out[op.hostname] = op.nodeRef
		case rebootNode:
			out[op.hostname] = op.nodeRef
		case applyConfig:
			out[op.hostname] = op.nodeRef
		}
	}
	return out
}

func (r *run) close() {
	if r.tc != nil {
		_ = r.tc.Close()
	}
}

// journaled runs one step; a mutating step is recorded in the journal
// before and after.
func (r *run) journaled(ctx context.Context, st plan.Change) error {
	e := r.e
	var boot string
	if ref, ok := r.restarting(st); ok {
		var err error
		if boot, err = r.readBoot(ctx, ref); err != nil {
			return err
		}
	}
	if e.Journal == nil || st.Domain == plan.DomainGate {
		return r.step(ctx, st)
	}
	r.mu.Lock()
	id, err := e.Journal.Begin(ctx, e.Key, state.Entry{Op: string(st.Action) + " " + string(st.Resource.Kind), Target: st.Resource.Name, Commit: e.Commit, Boot: boot})
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("recording the intent: %w", err)
	}
	err = r.step(ctx, st)
	if boot != "" && err == nil {
		// A restart stays open in the journal until the node is back and
		// healthy (nodeBack closes it): a run killed meanwhile leaves the
		// next one the boot ID to check it against.
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if jerr := e.Journal.Done(context.WithoutCancel(ctx), e.Key, id, err); jerr != nil && err == nil {
		err = fmt.Errorf("recording the outcome: %w", jerr)
	}
	return err
}

// step dispatches one step to the executor of its operation; anything the
// engine does not know is the provider's.
func (r *run) step(ctx context.Context, st plan.Change) error {
	switch op := st.Op.(type) {
	case mintIdentity:
		return r.mintIdentity(ctx)
	case writeTalosconfig:
		return r.writeTalosconfig(ctx)
	case bootstrapEtcd:
		return r.bootstrap(ctx, op.hostname)
	case writeKubeconfig:
		return r.writeKubeconfig(ctx)
	case makeConfigs:
		return r.makeConfigs(ctx)
	case waitAddresses:
		r.unreadAddrs = op.unread
		_, err := r.waitAddresses(ctx)
		return err
	case waitHealthy:
		return r.waitHealthy(ctx)
	case deleteState:
		return r.deleteState(ctx, op.file)
	case cordonNode:
		return r.cordon(ctx, op.hostname, op.why)
	case pluginStep:
		return r.applyPlugin(ctx, op.plugin, op.change)
	case pluginLater:
		return r.runDeferred(ctx, op.plugin)
	case pluginUnread:
		return fmt.Errorf("the %s plugin's objects could not be read when planning: %s", op.plugin, op.reason)
	case pluginRefused:
		return fmt.Errorf("the %s plugin refuses: %s", op.plugin, op.reason)
	case pluginKept:
		r.e.say(st.Phase, "kept by the %s plugin: %s", op.plugin, op.reason)
		return nil
	case uncordonNode:
		err := r.uncordon(ctx, op.hostname)
		if err != nil && op.bestEffort {
			r.e.say(st.Phase, "warning: uncordoning %s failed; it stays unschedulable until uncordoned: %v", op.hostname, err)
			return nil
		}
		return err
	case drainNode:
		return r.drain(ctx, op.hostname, op.phase)
	case clusterHealthy:
		return r.clusterHealthy(ctx, st.Phase, op)
	case applyConfig:
		return r.applyConfig(ctx, st.Phase, op)
	case installTalos:
		return r.installTalos(ctx, st.Phase, op)
	case rebootNode:
		return r.reboot(ctx, st.Phase, op)
	case nodeBack:
		return r.nodeBack(ctx, st.Phase, op)
	case setComponent:
		return r.setComponent(ctx, st.Phase, op)
	case prePull:
		return r.prePull(ctx, st.Phase, op)
	case moveEndpoint:
		return r.moveEndpoint(ctx, st.Phase, op)
	case setKubeProxy:
		return r.setKubeProxy(ctx, st.Phase, op)
	case setKubelet:
		return r.setKubelet(ctx, st.Phase, op)
	case resetMachine:
		return r.reset(ctx, op)
	case leftEtcd:
		return r.leftEtcd(ctx, op)
	case etcdSafe:
		return r.etcdSafe(ctx, op)
	case deleteNode:
		return r.deleteNode(ctx, op.hostname)
	case remediate:
		return r.remediate(ctx, op)
	}
	if st.Domain != plan.DomainProvider && st.Domain != "" {
		return fmt.Errorf("no executor for a %s step", st.Domain)
	}
	return r.e.Infra.Apply(ctx, r.want, st)
}

// identity returns the cluster identity from the state.
func (r *run) identity(ctx context.Context) (*secrets.Bundle, error) {
	if r.bundle != nil {
		return r.bundle, nil
	}
	b, err := r.e.bundle(ctx)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("%w: %s does not exist", ErrPrecondition, TalosSecretsFile)
	}
	r.bundle = b
	return b, nil
}

// mintIdentity creates the cluster identity. Its precondition: no identity
// and no machine of the cluster exist, read again now.
func (r *run) mintIdentity(ctx context.Context) error {
	e := r.e
	if ok, err := e.exists(ctx, TalosSecretsFile); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("%w: %s exists now; another run made it", ErrPrecondition, TalosSecretsFile)
	}
	inv, err := e.Infra.Observe(ctx)
	if err != nil {
		return err
	}
	if ms := inv.Machines(); len(ms) > 0 {
		return fmt.Errorf("%w: %d of the cluster's machines exist now (e.g. %s); a new identity would not match them", ErrPrecondition, len(ms), ms[0].Hostname)
	}
	b, err := machineconfig.NewSecrets(e.Cluster.Talos.Version)
	if err != nil {
		return err
	}
	enc, err := machineconfig.EncodeSecrets(b)
	if err != nil {
		return err
	}
	if err := e.State.Create(ctx, e.Key, TalosSecretsFile, enc); err != nil {
		return fmt.Errorf("storing the new cluster identity: %w", err)
	}
	e.say(plan.PhaseSecrets, "minted a new cluster identity in %s: back it up now", TalosSecretsFile)
	r.bundle = b
	return e.configs(r.want, b, nil)
}

// waitAddresses waits until every desired machine reports an address and
// returns the control planes' addresses in order. Every ReportEvery it says
// which machines are still missing and what the provider knows of them.
func (r *run) waitAddresses(ctx context.Context) ([]string, error) {
	e := r.e
	ctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
	defer cancel()
	cps := controlPlanes(r.want)
	started, lastReport := time.Now(), time.Now()
	var missing, missingNames []string
	// found holds the machines that reported an address: after the first
	// read, only the others are read again when the provider can read
	// machines by name.
	found := map[string]Machine{}
	reader, narrow := e.Infra.(MachineReader)
	for {
		var seen []Machine
		var err error
		if narrow && len(found) > 0 {
			seen, err = reader.ReadMachines(ctx, missingNames)
		} else {
			var inv Inventory
			if inv, err = e.Infra.Observe(ctx); err == nil {
				seen = inv.Machines()
			}
		}
		missing = missing[:0]
		var addrs []string
		all := map[string]string{}
		if err == nil {
			// After a failed read the same machines are asked for again.
			missingNames = missingNames[:0]
			for _, m := range seen {
				if _, done := found[m.Hostname]; !done && len(m.Addresses) > 0 && m.Running {
					found[m.Hostname] = m
				}
			}
			for _, m := range r.want.Machines {
				have, ok := found[m.Hostname]
				if !ok {
					have, ok = machineIn(seen, m.Hostname)
					missingNames = append(missingNames, m.Hostname)
				}
				switch {
				case !ok:
					missing = append(missing, m.Hostname+" (no such VM)")
				case !have.Running:
					missing = append(missing, m.Hostname+" (stopped)")
				case len(have.Addresses) == 0 && have.NoAddress != "":
					missing = append(missing, m.Hostname+" (running, no address: "+have.NoAddress+")")
				case len(have.Addresses) == 0:
					missing = append(missing, m.Hostname+" (running, no address reported yet)")
				default:
					all[m.Hostname] = have.Addresses[0].String()
					if slices.Contains(cps, m.Hostname) {
						addrs = append(addrs, have.Addresses[0].String())
					}
				}
			}
			if len(missing) == 0 {
				r.addrs = all
				return addrs, nil
			}
			if time.Since(started) >= e.readBudget() && len(r.unreadAddrs) > 0 && allUnread(missing, r.unreadAddrs) {
				return nil, retry.Transient(fmt.Errorf("waiting for machine addresses: the address of %s could not be read for %s (it could not when planning either): %s",
					strings.Join(r.unreadAddrs, ", "), e.readBudget().Round(time.Second), strings.Join(missing, ", ")))
			}
		} else if ctx.Err() == nil && !retry.IsTransient(err) {
			return nil, err
		}
		if time.Since(lastReport) >= e.reportEvery() {
			lastReport = time.Now()
			if err != nil {
				e.say(plan.PhaseBootstrap, "still waiting for addresses: the provider did not answer: %v", err)
			} else {
				e.say(plan.PhaseBootstrap, "still waiting for addresses of %s", strings.Join(missing, ", "))
			}
		}
		if werr := retry.Sleep(ctx, e.poll()); werr != nil {
			if err != nil {
				return nil, fmt.Errorf("waiting for machine addresses: %w (last error: %v)", werr, err)
			}
			return nil, fmt.Errorf("waiting for machine addresses: still missing %s: %w", strings.Join(missing, ", "), werr)
		}
	}
}

// talosClient returns a Talos client for the control planes' current
// addresses. Once this run has seen every machine's address, a provider
// that reads machines by name is asked for the control planes alone; the
// whole wait runs only when one of them has no address now.
func (r *run) talosClient(ctx context.Context) (*talos.Client, []string, error) {
	cps, ok := r.controlPlaneAddrs(ctx)
	if !ok {
		var err error
		if cps, err = r.waitAddresses(ctx); err != nil {
			return nil, nil, err
		}
	}
	tc, err := r.dial(ctx, cps)
	return tc, cps, err
}

// controlPlaneAddrs reads the control planes' addresses fresh, and only
// theirs, when an earlier wait of this run saw every machine's address and
// the provider reads machines by name. ok is false when it could not: the
// caller then waits for every machine as before.
func (r *run) controlPlaneAddrs(ctx context.Context) (addrs []string, ok bool) {
	reader, narrow := r.e.Infra.(MachineReader)
	if !narrow || r.addrs == nil {
		return nil, false
	}
	cps := controlPlanes(r.want)
	seen, err := reader.ReadMachines(ctx, cps)
	if err != nil {
		return nil, false
	}
	for _, name := range cps {
		m, found := machineIn(seen, name)
		if !found || !m.Running || len(m.Addresses) == 0 {
			return nil, false
		}
		addrs = append(addrs, m.Addresses[0].String())
	}
	r.mu.Lock()
	for i, name := range cps {
		r.addrs[name] = addrs[i]
	}
	r.mu.Unlock()
	return addrs, true
}

// dial returns the run's Talos client with the given endpoints, made
// again only when they changed.
func (r *run) dial(ctx context.Context, endpoints []string) (*talos.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := strings.Join(endpoints, ",")
	if r.tc != nil && r.tcFor == key {
		return r.tc, nil
	}
	b, err := r.identity(ctx)
	if err != nil {
		return nil, err
	}
	tc, err := talos.Dial(ctx, r.e.Cluster.Name, b, endpoints)
	if err != nil {
		return nil, err
	}
	r.close()
	r.tc, r.tcFor = tc, key
	return tc, nil
}

// writeTalosconfig writes talosconfig with the control planes' addresses.
func (r *run) writeTalosconfig(ctx context.Context) error {
	e := r.e
	b, err := r.identity(ctx)
	if err != nil {
		return err
	}
	cps, err := r.waitAddresses(ctx)
	if err != nil {
		return err
	}
	data, err := talos.Talosconfig(e.Cluster.Name, b, cps)
	if err != nil {
		return err
	}
	if err := e.State.Put(ctx, e.Key, TalosconfigFile, data); err != nil {
		return err
	}
	e.say(plan.PhaseBootstrap, "wrote %s (endpoints %s)", TalosconfigFile, strings.Join(cps, ", "))
	return nil
}

// bootstrap bootstraps etcd on the first control plane. Its precondition,
// read again now: no control plane's etcd runs; if one does, the cluster
// was bootstrapped meanwhile and there is nothing to do.
func (r *run) bootstrap(ctx context.Context, hostname string) error {
	e := r.e
	tc, cps, err := r.talosClient(ctx)
	if err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
	defer cancel()
	err = retry.Do(bctx, retry.Policy{Initial: e.poll() / 4, Max: e.poll()}, func(ctx context.Context) error {
		for _, addr := range cps {
			s, ok, err := tc.Service(ctx, addr, "etcd")
			if err != nil {
				return err
			}
			if ok && s.State == "Running" {
				e.say(plan.PhaseBootstrap, "etcd already runs on %s: the cluster is bootstrapped, nothing to do", addr)
				return nil
			}
		}
		e.say(plan.PhaseBootstrap, "bootstrapping etcd on %s (%s)", hostname, cps[0])
		return tc.Bootstrap(ctx, cps[0])
	})
	if err != nil {
		return err
	}
	return nil
}

// writeKubeconfig fetches the admin kubeconfig from the first control
// plane that serves one and stores it.
func (r *run) writeKubeconfig(ctx context.Context) error {
	e := r.e
	tc, cps, err := r.talosClient(ctx)
	if err != nil {
		return err
	}
	kctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
	defer cancel()
	var data []byte
	err = retry.Do(kctx, retry.Policy{Initial: e.poll() / 4, Max: e.poll()}, func(ctx context.Context) error {
		var err error
		data, err = tc.Kubeconfig(ctx, cps[0])
		return err
	})
	if err != nil {
		return err
	}
	if data, err = forPeople(data, r.want.API); err != nil {
		return err
	}
	if err := e.State.Put(ctx, e.Key, KubeconfigFile, data); err != nil {
		return err
	}
	e.say(plan.PhaseKubeconfig, "wrote %s", KubeconfigFile)
	return nil
}

// waitHealthy waits until every desired machine is a Ready node whose
// Talos API answers and the etcd members are exactly the control planes. Every ReportEvery it says
// what it still waits for, with the last error.
func (r *run) waitHealthy(ctx context.Context) error {
	e := r.e
	kc, err := r.kube(ctx)
	if err != nil {
		return err
	}
	tc, cps, err := r.talosClient(ctx)
	if err != nil {
		return err
	}
	if err := r.await(ctx, plan.PhaseHealth, "the cluster to be healthy", func(ctx context.Context) (string, bool) {
		return r.unhealthy(ctx, tc, kc, cps)
	}); err != nil {
		return err
	}
	e.say(plan.PhaseHealth, "healthy: %d machines Ready, %d etcd members", len(r.want.Machines), len(cps))
	return nil
}

// unhealthy reads the cluster fresh and returns why it does not pass the
// health gate yet, "" when it does; unread is set when an API answered
// with an error (see healthGate.unmet).
func (r *run) unhealthy(ctx context.Context, tc *talos.Client, kc *kube.Client, cps []string) (why string, unread bool) {
	g := healthGate{machines: hostnames(r.want), controlPlanes: controlPlanes(r.want)}
	return r.healthOf(ctx, tc, kc, g, r.addrs, cps)
}

func (e *Engine) reportEvery() time.Duration {
	if e.ReportEvery > 0 {
		return e.ReportEvery
	}
	return 30 * time.Second
}

// deleteState removes a state file at the end of a destroy. Its
// precondition, read again now: no machine of the cluster is left, so the
// identity is never dropped while something could still need it.
func (r *run) deleteState(ctx context.Context, file string) error {
	inv, err := r.e.Infra.Observe(ctx)
	if err != nil {
		return err
	}
	if left := inv.Machines(); len(left) > 0 {
		return fmt.Errorf("%w: %d machines are still there (e.g. %s); the cluster's state was kept", ErrPrecondition, len(left), left[0].Hostname)
	}
	return r.e.State.Delete(ctx, r.e.Key, file)
}

// allUnread reports whether every missing entry ("<hostname> (why)") is of
// a machine in unread.
func allUnread(missing, unread []string) bool {
	for _, m := range missing {
		host, _, _ := strings.Cut(m, " ")
		if !slices.Contains(unread, host) {
			return false
		}
	}
	return true
}
