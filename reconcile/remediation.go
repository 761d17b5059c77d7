package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// remediate is the first step of a remediation: the worker's node must
// still be NotReady, and have been for at least after, when the step runs.
// A node that recovered since the plan is never replaced: the step stops
// the run with ErrPrecondition.
type remediate struct {
	hostname, pool string
	after          time.Duration
}

// candidate is a desired worker whose node has been NotReady longer than
// remediation.after.
type candidate struct {
	hostname string
	pool     spec.Pool
	number   int
	vm       Machine
	node     kube.Node
	down     time.Duration
}

// planRemediation plans the replacement of the desired workers whose node
// has been NotReady (its Ready condition False or Unknown) for longer than
// remediation.after, when cluster.yaml opts in. It returns the observation
// the rest of the plan is made from: the same, or, when machines are
// replaced, one whose inventory no longer has them (the provider's
// Replacer says what is left once their VMs are deleted), so that the
// compute phase creates them anew with the same hostnames and the address
// wait and health barrier follow as for any new machine.
//
// A remediation never touches a control plane, never takes more than
// remediation.max_unhealthy of a pool at once (the rest are warnings),
// and never acts while the cluster itself is unhealthy (remediationBlocked).
func planRemediation(p *plan.Plan, want *Desired, obs *Observation, infra Infra) *Observation {
	r := want.Cluster.Remediation
	if r == nil || obs.Offline || obs.At.IsZero() || obs.Kube.Unknown != "" {
		return obs
	}
	cands := remediationCandidates(want, obs)
	if len(cands) == 0 {
		return obs
	}
	if why := remediationBlocked(want, obs); why != "" {
		for _, c := range cands {
			p.Warn(fmt.Sprintf("remediation: %s has been NotReady for %s (after: %s), but nothing is replaced while the cluster itself is unhealthy: %s", c.hostname, shortDuration(c.down), shortDuration(r.After), why))
		}
		return obs
	}
	replacer, ok := infra.(Replacer)
	if !ok {
		for _, c := range cands {
			p.Warn(fmt.Sprintf("remediation: %s has been NotReady for %s (after: %s), but this provider cannot replace machines yet; replace it by hand", c.hostname, shortDuration(c.down), shortDuration(r.After)))
		}
		return obs
	}
	view := *obs
	var replaced []string
	for _, pool := range poolsOf(cands) {
		var mine []candidate
		for _, c := range cands {
			if c.pool.Name == pool.Name {
				mine = append(mine, c)
			}
		}
		limit := r.Limit(pool.Count)
		for i, c := range mine {
			if i >= limit {
				p.Warn(fmt.Sprintf("remediation: %s has been NotReady for %s (after: %s), but it is not replaced now: %d machines of pool %s are NotReady that long, and max_unhealthy %s of %d allows %d at once; a later converge replaces it if it is still NotReady",
					c.hostname, shortDuration(c.down), shortDuration(r.After), len(mine), pool.Name, r.MaxUnhealthy, pool.Count, limit))
				continue
			}
			remove, after := replacer.PlanReplace(c.hostname, view.Inventory)
			if len(remove) == 0 {
				p.Warn(fmt.Sprintf("remediation: %s has been NotReady for %s (after: %s), but the provider cannot replace it", c.hostname, shortDuration(c.down), shortDuration(r.After)))
				continue
			}
			text := fmt.Sprintf("remediation: %s has been NotReady for %s (after: %s); it is replaced (%d of at most %d in pool %s)", c.hostname, shortDuration(c.down), shortDuration(r.After), i+1, limit, pool.Name)
			p.Warn(text)
			planReplacement(p, c, r.After, text, remove, obs)
			view.Inventory = after
			replaced = append(replaced, c.hostname)
			// The new machine is a new node: it boots at cluster.yaml's
			// versions, not at the ones the old one ran.
			if want.ConfigAt != nil {
				if cfg, err := want.ConfigAt(c.hostname, "", ""); err == nil {
					want.Configs[c.hostname] = cfg
				}
			}
		}
	}
	if len(replaced) == 0 {
		return obs
	}
	// The uncordon an interrupted remediation's cordon would get: the
	// node stays cordoned, it is being replaced.
	p.Changes = slices.DeleteFunc(p.Changes, func(ch plan.Change) bool {
		op, ok := ch.Op.(uncordonNode)
		return ok && slices.Contains(replaced, op.hostname)
	})
	view.Nodes = maps.Clone(obs.Nodes)
	for _, h := range replaced {
		delete(view.Nodes, h)
	}
	return &view
}

// remediationCandidates lists the desired workers of the pools remediation
// covers whose VM exists and whose node has been NotReady for longer than
// remediation.after, longest first.
func remediationCandidates(want *Desired, obs *Observation) []candidate {
	r := want.Cluster.Remediation
	nodes := map[string]kube.Node{}
	for _, n := range obs.Kube.Nodes {
		nodes[n.Name] = n
	}
	var out []candidate
	for _, m := range want.Machines {
		if m.Role() != spec.RoleWorker || !r.Covers(m.Pool.Name) {
			continue
		}
		vm, ok := machineNamed(obs.Inventory, m.Hostname)
		if !ok {
			continue // created by the compute phase
		}
		n, ok := nodes[m.Hostname]
		if !ok || (n.Condition != "False" && n.Condition != "Unknown") || n.ConditionSince.IsZero() {
			continue
		}
		down := obs.At.Sub(n.ConditionSince)
		if down <= r.After {
			continue
		}
		out = append(out, candidate{hostname: m.Hostname, pool: m.Pool, number: m.Number, vm: vm, node: n, down: down})
	}
	slices.SortStableFunc(out, func(a, b candidate) int {
		if c := cmp.Compare(b.down, a.down); c != 0 {
			return c
		}
		return cmp.Compare(a.hostname, b.hostname)
	})
	return out
}

// poolsOf returns the pools of the candidates, each once, by the pools'
// order in cluster.yaml.
func poolsOf(cands []candidate) []spec.Pool {
	var out []spec.Pool
	for _, c := range cands {
		if !slices.ContainsFunc(out, func(p spec.Pool) bool { return p.Name == c.pool.Name }) {
			out = append(out, c.pool)
		}
	}
	slices.SortStableFunc(out, func(a, b spec.Pool) int { return cmp.Compare(a.Index, b.Index) })
	return out
}

// remediationBlocked says why the cluster itself is too unhealthy for a
// remediation, "" when it is healthy enough. The predicate: the Kubernetes
// API answered; every control plane cluster.yaml has exists, answers the
// Talos API and is a Ready node; and the etcd members could be read and
// are exactly those control planes, none a learner. It is the health
// gate's predicate (healthGate) over the control planes only: the workers
// are what a remediation repairs. When it fails, the fault is rarely the
// workers', and replacing them would only add load.
func remediationBlocked(want *Desired, obs *Observation) string {
	if obs.Kube.Unknown != "" {
		return "the Kubernetes API does not answer: " + obs.Kube.Unknown
	}
	cps := controlPlanes(want)
	g := healthGate{machines: cps, controlPlanes: cps}
	f := healthFacts{talos: map[string]error{}, nodes: obs.Kube.Nodes, members: obs.Etcd.Members}
	var reasons []string
	for _, h := range cps {
		have, ok := machineNamed(obs.Inventory, h)
		n, asked := obs.Nodes[h]
		switch {
		case !ok:
			reasons = append(reasons, "control plane "+h+" does not exist")
		case asked && n.Unknown != "":
			f.talos[h] = errors.New(n.Unknown)
		case asked && n.Maintenance:
			f.talos[h] = errors.New("it runs in maintenance mode")
		case !asked && have.Running:
			f.talos[h] = errors.New("it reports no address")
		case !asked:
			f.talos[h] = errors.New("it is stopped")
		}
	}
	if obs.Etcd.Unknown != "" {
		f.membersErr = errors.New(obs.Etcd.Unknown)
	}
	if why, _ := g.unmet(f); why != "" {
		reasons = append(reasons, why)
	}
	return strings.Join(reasons, "; ")
}

// planReplacement adds the steps of one remediation: the check that the
// node is still NotReady, then those of a removal (cordon, drain, a reset
// when its Talos API answers, the Node, the provider's delete); the
// compute phase then creates the machine anew.
func planReplacement(p *plan.Plan, c candidate, after time.Duration, text string, remove []plan.Change, obs *Observation) {
	node := c.node
	r := removal{hostname: c.hostname, role: spec.RoleWorker, number: c.number, node: &node,
		where:     fmt.Sprintf("a worker NotReady for %s (remediation)", shortDuration(c.down)),
		cordonWhy: fmt.Sprintf("being replaced: NotReady for %s (remediation)", shortDuration(c.down))}
	vm := c.vm
	r.vm = &vm
	r.facts, r.asked = obs.Nodes[c.hostname]
	for _, en := range obs.Journal {
		if en.Target == c.hostname {
			r.resumes = append(r.resumes, en)
		}
	}
	p.Add(plan.Change{Phase: plan.PhaseScaleDown, Domain: plan.DomainGate, Action: plan.ActionWait,
		Resource:   plan.Resource{Kind: plan.KindNode, Name: c.hostname},
		Reason:     text + "; checked again just before: a node Ready again stops the run and is not replaced",
		Attributes: []plan.Attribute{{Key: "ready", Value: readyText(c.node.Condition)}, {Key: "pool", Value: c.pool.Name}},
		Expects:    "the node is still NotReady",
		Op:         remediate{hostname: c.hostname, pool: c.pool.Name, after: after}})
	first := len(p.Changes)
	planRemoval(p, r, nil, nil, plannedRemoval(remove), obs)
	for i := first; i < len(p.Changes); i++ {
		if !strings.HasPrefix(p.Changes[i].Reason, "remediation") {
			p.Changes[i].Reason = "remediation: " + p.Changes[i].Reason
		}
	}
}

// plannedRemoval is a Remover of steps already planned (a Replacer's).
type plannedRemoval []plan.Change

func (s plannedRemoval) PlanRemove(string, Inventory) []plan.Change { return s }

// shortDuration writes a duration the way cluster.yaml does: 14m, 1h30m,
// 90s as 1m30s; whole seconds.
func shortDuration(d time.Duration) string {
	d = d.Truncate(time.Second)
	h, m, s := int(d/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second)
	var b strings.Builder
	if h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if s > 0 || b.Len() == 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	return b.String()
}

// remediate checks, just before a remediation's first change, that its
// node is still NotReady and has been for at least remediation.after; then
// it reports the remediation (the progress line and Engine.Remediated). A node that is Ready again, gone, or NotReady for less
// than that since (it recovered and failed again) stops the run with
// ErrPrecondition: the next plan decides afresh.
func (r *run) remediate(ctx context.Context, op remediate) error {
	e := r.e
	kc, err := r.kube(ctx)
	if err != nil {
		return err
	}
	n, ok, err := kc.Node(ctx, op.hostname)
	switch {
	case err != nil:
		return fmt.Errorf("reading node %s before its remediation: %w", op.hostname, err)
	case !ok:
		return fmt.Errorf("%w: node %s is gone; it is not replaced", ErrPrecondition, op.hostname)
	case n.Condition != "False" && n.Condition != "Unknown":
		return fmt.Errorf("%w: node %s is %s again; it is not replaced", ErrPrecondition, op.hostname, readyText(n.Condition))
	}
	down := e.now().Sub(n.ConditionSince)
	if n.ConditionSince.IsZero() || down <= op.after {
		return fmt.Errorf("%w: node %s has been NotReady for only %s now (after: %s); it is not replaced yet", ErrPrecondition, op.hostname, shortDuration(down), shortDuration(op.after))
	}
	e.say(plan.PhaseScaleDown, "remediation: replacing %s of pool %s, NotReady for %s", op.hostname, op.pool, shortDuration(down))
	if e.Remediated != nil {
		e.Remediated(e.Cluster.Name, op.pool, op.hostname)
	}
	return nil
}
