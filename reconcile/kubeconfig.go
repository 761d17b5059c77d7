package reconcile

import (
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// Running reports whether the observation is of an existing cluster: its
// machines and its identity exist, and it was bootstrapped (see
// Bootstrapped). known is false when machines and the identity exist but
// whether it was bootstrapped could not be read.
func (o *Observation) Running() (yes, known bool) {
	if len(o.Inventory.Machines()) == 0 || !o.State.Secrets {
		return false, true
	}
	return o.Bootstrapped()
}

// planKubeconfig adds the kubeconfig step when the state has none. On an
// existing cluster the step is a recovery: the kubeconfig was lost, not
// never made, and a control plane serves it again to the cluster identity.
func planKubeconfig(p *plan.Plan, want *Desired, obs *Observation) {
	if obs.State.Kubeconfig {
		return
	}
	first := controlPlanes(want)[0]
	endpoint := want.API.Kubeconfig()
	reason := "admin kubeconfig from " + first + ", written with mode 0600"
	switch running, known := obs.Running(); {
	case running:
		reason = "recover kubeconfig: the state has none, but the cluster exists (its machines and identity exist and it was bootstrapped); " +
			first + " serves the admin kubeconfig to the cluster identity (" + TalosSecretsFile + "), written with mode 0600"
	case !known:
		reason += "; the state has none and whether the cluster was bootstrapped could not be read (" + firstReason(obs) + ")"
	}
	p.Add(plan.Change{Phase: plan.PhaseKubeconfig, Domain: plan.DomainState, Action: plan.ActionCreate,
		Resource:   plan.Resource{Kind: plan.KindKubeconfig, Name: KubeconfigFile},
		Reason:     reason,
		Attributes: []plan.Attribute{{Key: "server", Value: endpoint}},
		Expects:    first + " answers the Talos API",
		Op:         writeKubeconfig{}})
}
