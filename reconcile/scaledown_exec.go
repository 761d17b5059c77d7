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
	kc, err := kube.New(data)
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

func (r *run) cordon(ctx context.Context, hostname string) error {
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
	why := "being removed: not in cluster.yaml"
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
func (r *run) drain(ctx context.Context, hostname string) error {
	e := r.e
	kc, err := r.kube(ctx)
	if err != nil {
		return err
	}
	if _, ok, err := kc.Node(ctx, hostname); err != nil {
		return err
	} else if !ok {
		e.say(plan.PhaseScaleDown, "node %s is gone: nothing to drain", hostname)
		return nil
	}
	derr := kc.Drain(ctx, hostname, e.drainTimeout())
	if derr == nil {
		e.say(plan.PhaseScaleDown, "drained %s", hostname)
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
		e.say(plan.PhaseScaleDown, "the drain of %s did not finish (%v), but the node is %s: going on", hostname, derr, readyText(n.Condition))
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
	key := strings.Join(cps, ",")
	if r.tc != nil && r.tcFor == key {
		return r.tc, cps, nil
	}
	b, err := r.identity(ctx)
	if err != nil {
		return nil, nil, err
	}
	tc, err := talos.Dial(ctx, r.e.Cluster.Name, b, cps)
	if err != nil {
		return nil, nil, err
	}
	r.close()
	r.tc, r.tcFor = tc, key
	return tc, cps, nil
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
// more, as a surviving member sees it; with remove, a member still listed
// is removed by its id, unless its own etcd still runs.
func (r *run) leftEtcd(ctx context.Context, op leftEtcd) error {
	e := r.e
	ms, from, err := r.members(ctx)
	if err != nil {
		return fmt.Errorf("%w; %s is kept until its membership is known", err, op.hostname)
	}
	i := slices.IndexFunc(ms, func(m talos.Member) bool { return m.Hostname == op.hostname })
	if i < 0 {
		e.say(plan.PhaseScaleDown, "etcd on %s lists no member %s", from, op.hostname)
		return nil
	}
	if !op.remove {
		return retry.Terminal(fmt.Errorf("%s is still an etcd member after its reset (member list from %s); its VM is kept", op.hostname, from))
	}
	tc, _, err := r.survivorClient(ctx)
	if err != nil {
		return err
	}
	if addr, err := r.machineAddress(ctx, op.hostname); err == nil && addr != "" {
		if s, ok, err := tc.Service(ctx, addr, "etcd"); err == nil && ok && s.State == "Running" {
			return retry.Terminal(fmt.Errorf("%s is still an etcd member and its etcd runs: it must leave through a graceful reset, not be removed; its VM is kept", op.hostname))
		}
	}
	e.say(plan.PhaseScaleDown, "removing etcd member %s (id %x) through %s", op.hostname, ms[i].ID, from)
	if err := tc.RemoveMember(ctx, from, ms[i].ID); err != nil && status.Code(errors.Unwrap(err)) != codes.NotFound && status.Code(err) != codes.NotFound {
		return fmt.Errorf("%w; %s is kept", err, op.hostname)
	}
	ms, from, err = r.members(ctx)
	if err != nil {
		return fmt.Errorf("%w; %s is kept until its membership is known", err, op.hostname)
	}
	if slices.ContainsFunc(ms, func(m talos.Member) bool { return m.Hostname == op.hostname }) {
		return fmt.Errorf("etcd on %s still lists %s after its removal; it is kept", from, op.hostname)
	}
	return nil
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
	var unreadSince time.Time
	for {
		why := r.etcdUnsafe(ctx, tc, op)
		if why == "" {
			e.say(plan.PhaseScaleDown, "etcd is healthy on %s: %s may go", strings.Join(op.stay, ", "), op.removing)
			return nil
		}
		if unreadSince.IsZero() {
			unreadSince = time.Now()
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
	var reasons []string
	for _, m := range ms {
		if m.Learner {
			reasons = append(reasons, fmt.Sprintf("member %s (id %x) is a learner", m.Hostname, m.ID))
		}
	}
	for _, h := range op.stay {
		if !slices.ContainsFunc(ms, func(m talos.Member) bool { return m.Hostname == h && !m.Learner }) {
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
