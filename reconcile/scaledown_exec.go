package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// Bounds of the scale-down steps.
const (
	// DefaultResetTimeout bounds a graceful reset: Talos waits up to a
	// minute for the cordon, five for the drain and five for leaving
	// etcd before it wipes.
	DefaultResetTimeout = 12 * time.Minute
	// waitingRetry is when a run that waits on a PodDisruptionBudget is
	// worth trying again.
	waitingRetry = time.Minute
	// memberListLag bounds how long a member that should have left etcd
	// may still be listed by the member read from (a follower applies the
	// removal a moment after the leader).
	memberListLag = 5 * time.Second
)

func (e *Engine) drainTimeout() time.Duration {
	if e.DrainTimeout > 0 {
		return e.DrainTimeout
	}
	return kube.DrainTimeout
}

func (e *Engine) resetTimeout() time.Duration {
	if e.ResetTimeout > 0 {
		return e.ResetTimeout
	}
	return DefaultResetTimeout
}

// kube returns a client of the cluster's Kubernetes API from the state's
// kubeconfig.
func (r *run) kube(ctx context.Context) (*kube.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kc != nil {
		return r.kc, nil
	}
	data, err := r.e.read(ctx, KubeconfigFile)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: there is no %s", ErrPrecondition, KubeconfigFile)
	}
	kc, err := kubeClient(data, r.want.API)
	if err != nil {
		return nil, err
	}
	r.kc = kc
	return kc, nil
}

// machineAddress reads one machine's address from the provider now; ""
// when it reports none or the machine is gone.
func (r *run) machineAddress(ctx context.Context, hostname string) (string, error) {
	addrs, err := r.addresses(ctx)
	return addrs[hostname], err
}

// addresses reads every machine's address from the provider now, in one
// read: hostname to its first address, absent when it reports none.
func (r *run) addresses(ctx context.Context) (map[string]string, error) {
	inv, err := r.e.Infra.Observe(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range inv.Machines() {
		if len(m.Addresses) > 0 {
			out[m.Hostname] = m.Addresses[0].String()
		}
	}
	return out, nil
}

func (r *run) cordon(ctx context.Context, hostname, why string) error {
	kc, err := r.kube(ctx)
	if err != nil {
		return err
	}
	n, ok, err := kc.Node(ctx, hostname)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: node %s is gone", ErrPrecondition, hostname)
	case n.Unschedulable:
		return nil
	}
	if why == "" {
		why = "being removed: not in cluster.yaml"
	}
	if r.e.Commit != "" {
		why += " of commit " + r.e.Commit[:min(12, len(r.e.Commit))]
	}
	return kc.Cordon(ctx, hostname, why)
}

func (r *run) uncordon(ctx context.Context, hostname string) error {
	kc, err := r.kube(ctx)
	if err != nil {
		return err
	}
	n, ok, err := kc.Node(ctx, hostname)
	if err != nil || !ok || n.CordonedBy != kube.CordonedByUs {
		return err // gone, or no longer cordoned by this engine: nothing to undo
	}
	return kc.Uncordon(ctx, hostname)
}

// drain evicts the node's pods. A PodDisruptionBudget that still blocks
// on a Ready node at the end of the drain timeout makes the run wait; on a
// NotReady node a drain that does not finish is reported and the removal
// goes on (its pods cannot terminate anyway).
func (r *run) drain(ctx context.Context, hostname string, phase plan.Phase) error {
	e := r.e
	if phase == "" {
		phase = plan.PhaseScaleDown
	}
	kc, err := r.kube(ctx)
	if err != nil {
		return err
	}
	if _, ok, err := kc.Node(ctx, hostname); err != nil {
		return err
	} else if !ok {
		e.say(phase, "node %s is gone: nothing to drain", hostname)
		return nil
	}
	derr := kc.Drain(ctx, hostname, e.drainTimeout())
	if derr == nil {
		e.say(phase, "drained %s", hostname)
		return nil
	}
	if ctx.Err() != nil {
		return derr
	}
	n, ok, err := kc.Node(ctx, hostname)
	switch {
	case err != nil:
		return fmt.Errorf("%w; and whether the node is Ready could not be read: %w", derr, err)
	case !ok:
		return nil
	case n.Condition == "False" || n.Condition == "Unknown":
		e.say(phase, "the drain of %s did not finish (%v), but the node is %s: going on", hostname, derr, readyText(n.Condition))
		return nil
	}
	var de *kube.DrainError
	if errors.As(derr, &de) && len(de.Blocked) > 0 {
		return retry.Waiting(fmt.Sprintf("a PodDisruptionBudget blocks the drain of %s after %s", hostname, e.drainTimeout().Round(time.Second)), waitingRetry, derr)
	}
	if errors.As(derr, &de) {
		return retry.Waiting(fmt.Sprintf("pods of %s are still terminating after %s", hostname, e.drainTimeout().Round(time.Second)), waitingRetry, derr)
	}
	return derr
}

// reset resets a machine gracefully. On a control plane a failure or a
// timeout is fatal: the run stops and the VM is kept, since a half-reset
// member must never be deleted. On a worker the removal goes on.
func (r *run) reset(ctx context.Context, op resetMachine) error {
	e := r.e
	tc, _, err := r.survivorClient(ctx)
	if err != nil {
		return err
	}
	addr, err := r.machineAddress(ctx, op.hostname)
	if err != nil {
		return err
	}
	if addr == "" && (!op.controlPlane || op.evidence) {
		// Off or gone since the plan (a reset an earlier run began may
		// have finished): nothing to reset; what follows checks the rest.
		e.say(plan.PhaseScaleDown, "%s reports no address any more: nothing to reset", op.hostname)
		return nil
	}
	if addr == "" {
		return fmt.Errorf("%w: %s reports no address any more", ErrPrecondition, op.hostname)
	}
	if _, err := tc.Version(ctx, addr); err != nil {
		if (!op.controlPlane || op.evidence) && talos.Unreachable(err) {
			e.say(plan.PhaseScaleDown, "%s no longer answers the Talos API: nothing to reset", op.hostname)
			return nil
		}
		return fmt.Errorf("%w: %s does not answer the Talos API: %w", ErrPrecondition, op.hostname, err)
	}
	rctx, cancel := context.WithTimeout(ctx, e.resetTimeout())
	defer cancel()
	e.say(plan.PhaseScaleDown, "resetting %s (%s) gracefully", op.hostname, addr)
	err = tc.ResetOnce(rctx, addr, true)
	switch {
	case errors.Is(err, talos.ErrResetNotStarted):
		// Nothing happened on the node: worth another try.
		return retry.Transient(err)
	case err == nil:
		e.say(plan.PhaseScaleDown, "%s is reset and powered off", op.hostname)
		return nil
	case ctx.Err() != nil:
		return err
	case op.evidence:
		e.say(plan.PhaseScaleDown, "the reset of control plane %s did not finish (%v); its Node is gone, so the etcd check that follows decides whether its VM may go", op.hostname, err)
		return nil
	case op.controlPlane:
		return retry.Terminal(fmt.Errorf("the graceful reset of control plane %s did not finish: %w; its VM is kept, as a half-reset etcd member must not be deleted; look at the node (talosctl -n %s dmesg, etcd members) before running converge again", op.hostname, err, addr))
	}
	e.say(plan.PhaseScaleDown, "the reset of worker %s did not finish (%v): it was drained, so its removal goes on", op.hostname, err)
	return nil
}

// survivorClient returns a Talos client whose endpoints are the desired
// control planes that report an address now, in order, and those
// addresses. Unlike talosClient it does not wait for every desired
// machine: a scale-down step needs the control planes that stay, and a
// machine that is down elsewhere must not hold it up.
func (r *run) survivorClient(ctx context.Context) (*talos.Client, []string, error) {
	addrs, err := r.addresses(ctx)
	if err != nil {
		return nil, nil, err
	}
	var cps []string
	for _, h := range controlPlanes(r.want) {
		if a := addrs[h]; a != "" {
			cps = append(cps, a)
		}
	}
	if len(cps) == 0 {
		return nil, nil, retry.Transient(fmt.Errorf("no control plane that stays reports an address"))
	}
	tc, err := r.dial(ctx, cps)
	return tc, cps, err
}

// members reads the etcd members from the first surviving control plane
// (a desired one: talosClient's endpoints) whose etcd answers; it fails
// closed when none does.
func (r *run) members(ctx context.Context) ([]talos.Member, string, error) {
	tc, cps, err := r.survivorClient(ctx)
	if err != nil {
		return nil, "", err
	}
	var errs []string
	for _, addr := range cps {
		ms, err := tc.EtcdMembers(ctx, addr)
		if err == nil {
			return ms, addr, nil
		}
		errs = append(errs, err.Error())
	}
	return nil, "", retry.Transient(fmt.Errorf("the etcd members could not be read from any surviving control plane (%s)", strings.Join(errs, "; ")))
}

// leftEtcd makes sure the removed control plane is no etcd member any
// more, as a surviving member sees it. A member still listed is removed by
// its id through the survivors only with proof that its own etcd does not
// run: its VM is gone or stopped, or its Talos API answers and its etcd
// service is not running. Without that proof the machine is kept and the
// run stops. A list read just after a reset may lag a moment behind the
// leave: it is read again for up to memberListLag.
func (r *run) leftEtcd(ctx context.Context, op leftEtcd) error {
	e := r.e
	deadline := time.Now().Add(min(e.readBudget(), memberListLag))
	var (
		ms   []talos.Member
		from string
		i    int
	)
	for {
		var err error
		ms, from, err = r.members(ctx)
		if err != nil {
			return fmt.Errorf("%w; %s is kept until its membership is known", err, op.hostname)
		}
		addr, _ := r.machineAddress(ctx, op.hostname)
		i = slices.IndexFunc(ms, func(m talos.Member) bool { return m.Is(op.hostname, addr) })
		if i < 0 {
			e.say(plan.PhaseScaleDown, "etcd on %s lists no member %s", from, op.hostname)
			return nil
		}
		if op.remove || time.Now().After(deadline) {
			break
		}
		if err := retry.Sleep(ctx, e.poll()); err != nil {
			return err
		}
	}
	why, proven, err := r.etcdStopped(ctx, op.hostname)
	if err != nil {
		return retry.Transient(fmt.Errorf("%s is still an etcd member (list from %s) and whether its etcd runs could not be read: %w; it is kept", op.hostname, from, err))
	}
	if !proven {
		return retry.Terminal(fmt.Errorf("%s is still an etcd member (list from %s) and %s: it must leave through a graceful reset, or its VM be stopped, before it can be removed; its VM is kept", op.hostname, from, why))
	}
	tc, _, err := r.survivorClient(ctx)
	if err != nil {
		return err
	}
	id := ms[i].ID
	e.say(plan.PhaseScaleDown, "removing etcd member %s (id %x) through %s: %s", op.hostname, id, from, why)
	if err := tc.RemoveMember(ctx, from, id); err != nil && status.Code(errors.Unwrap(err)) != codes.NotFound {
		// etcd refuses a removal the members that stay could not
		// survive; that may change once they are healthy.
		return retry.Transient(fmt.Errorf("%w; %s is kept", err, op.hostname))
	}
	ms, from, err = r.members(ctx)
	if err != nil {
		return fmt.Errorf("%w; %s is kept until its membership is known", err, op.hostname)
	}
	if slices.ContainsFunc(ms, func(m talos.Member) bool { return m.ID == id }) {
		return retry.Transient(fmt.Errorf("etcd on %s still lists %s after its removal; it is kept", from, op.hostname))
	}
	return nil
}

// etcdStopped looks for proof that a machine's etcd does not run: its VM
// is gone or stopped, or its Talos API answers and etcd is not running
// there. why says what was found; err is set when it could not be read.
func (r *run) etcdStopped(ctx context.Context, hostname string) (why string, proven bool, err error) {
	inv, err := r.e.Infra.Observe(ctx)
	if err != nil {
		return "", false, err
	}
	m, ok := machineNamed(inv, hostname)
	switch {
	case !ok:
		return "its VM is gone", true, nil
	case !m.Running:
		return "its VM is stopped", true, nil
	case len(m.Addresses) == 0:
		return "its VM runs but reports no address, so whether its etcd runs cannot be seen", false, nil
	}
	tc, _, err := r.survivorClient(ctx)
	if err != nil {
		return "", false, err
	}
	addr := m.Addresses[0].String()
	s, found, err := tc.Service(ctx, addr, "etcd")
	switch {
	case err != nil && talos.Unreachable(err):
		return fmt.Sprintf("its VM runs but its Talos API does not answer (%v), so whether its etcd runs cannot be seen", err), false, nil
	case err != nil:
		return "", false, err
	case !found || s.State != "Running":
		return fmt.Sprintf("etcd does not run on it (%s)", s.State), true, nil
	}
	return "its etcd runs", false, nil
}

// etcdSafe waits until etcd can lose the control plane about to go: the
// member list answers from a surviving member, no member is a learner,
// and every control plane that stays is a member whose etcd runs
// healthy. The Kubernetes API answering says nothing of this.
func (r *run) etcdSafe(ctx context.Context, op etcdSafe) error {
	e := r.e
	tc, _, err := r.survivorClient(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
	defer cancel()
	lastReport := time.Now()
	last := ""
	for {
		why := r.etcdUnsafe(ctx, tc, op)
		if ctx.Err() != nil && last != "" {
			// The look was cut short by the deadline: the last whole one
			// says why.
			why = last
		}
		last = why
		if why == "" {
			e.say(plan.PhaseScaleDown, "etcd is healthy on %s: %s may go", strings.Join(op.stay, ", "), op.removing)
			return nil
		}
		if time.Since(lastReport) >= e.reportEvery() {
			lastReport = time.Now()
			e.say(plan.PhaseScaleDown, "still waiting for etcd before %s goes: %s", op.removing, why)
		}
		if err := retry.Sleep(ctx, e.poll()); err != nil {
			return fmt.Errorf("waiting for a healthy etcd before removing %s: %s: %w", op.removing, why, err)
		}
	}
}

func (r *run) etcdUnsafe(ctx context.Context, tc *talos.Client, op etcdSafe) string {
	ms, from, err := r.members(ctx)
	if err != nil {
		return err.Error()
	}
	addrs, err := r.addresses(ctx)
	if err != nil {
		return "the machines' addresses could not be read: " + err.Error()
	}
	going := append([]string{op.removing}, op.queued...)
	isOne := func(m talos.Member, hosts []string) bool {
		return slices.ContainsFunc(hosts, func(h string) bool { return m.Is(h, addrs[h]) })
	}
	var reasons []string
	for _, m := range ms {
		switch {
		case isOne(m, op.stay):
		case isOne(m, going):
			// Being removed: it need not be healthy, and may be a
			// learner.
		default:
			reasons = append(reasons, fmt.Sprintf("etcd member %q (id %x) is neither a control plane that stays nor one being removed", m.Hostname, m.ID))
		}
	}
	for _, h := range op.stay {
		if !slices.ContainsFunc(ms, func(m talos.Member) bool { return m.Is(h, addrs[h]) && !m.Learner }) {
			reasons = append(reasons, fmt.Sprintf("%s is not a voting member (list from %s)", h, from))
			continue
		}
		addr := addrs[h]
		if addr == "" {
			reasons = append(reasons, h+" reports no address")
			continue
		}
		s, ok, err := tc.Service(ctx, addr, "etcd")
		switch {
		case err != nil:
			reasons = append(reasons, fmt.Sprintf("the etcd service of %s could not be read: %v", h, err))
		case !ok || s.State != "Running" || !s.Healthy:
			reasons = append(reasons, fmt.Sprintf("etcd on %s is not running healthy (%s %s)", h, s.State, s.Message))
		}
	}
	return strings.Join(reasons, "; ")
}

func (r *run) deleteNode(ctx context.Context, hostname string) error {
	kc, err := r.kube(ctx)
	if err != nil {
		return err
	}
	if err := kc.DeleteNode(ctx, hostname); err != nil {
		return err
	}
	r.e.say(plan.PhaseScaleDown, "deleted node %s", hostname)
	return nil
}
