package reconcile_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// replacerInfra is removerInfra that can replace machines: the delete
// step of a removal and the inventory without the machine.
type replacerInfra struct{ removerInfra }

func (r replacerInfra) PlanReplace(hostname string, have reconcile.Inventory) ([]plan.Change, reconcile.Inventory) {
	var after fakeInventory
	for _, m := range have.Machines() {
		if m.Hostname != hostname {
			after = append(after, m)
		}
	}
	return r.PlanRemove(hostname, have), after
}

// observedAt is the time the remediation tests observe the cluster at.
var observedAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// notReady makes a node of the observation NotReady (its kubelet stopped
// reporting) since d before the observation.
func notReady(obs *reconcile.Observation, name string, d time.Duration) {
	for i := range obs.Kube.Nodes {
		if n := &obs.Kube.Nodes[i]; n.Name == name {
			n.Ready, n.Condition, n.ConditionSince = false, "Unknown", observedAt.Add(-d)
		}
	}
}

// remediationPlan plans the converged example (two workers) with the
// remediation section given (nil: off) after edit.
func remediationPlan(t *testing.T, r *spec.Remediation, infra reconcile.Infra, edit func(*reconcile.Observation)) *plan.Plan {
	t.Helper()
	want, obs := converged(t)
	for i := range obs.Kube.Nodes {
		obs.Kube.Nodes[i].Condition = "True"
		obs.Kube.Nodes[i].ConditionSince = observedAt.Add(-time.Hour)
	}
	obs.At = observedAt
	c := *want.Cluster
	c.Remediation = r
	want.Cluster = &c
	edit(obs)
	p, err := reconcile.Plan(want, obs, infra, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// remediated lists the nodes the plan replaces (its remediation checks).
func remediated(p *plan.Plan) []string {
	var out []string
	for _, ch := range p.Changes {
		if ch.Phase == plan.PhaseScaleDown && ch.Action == plan.ActionWait && ch.Resource.Kind == plan.KindNode {
			out = append(out, ch.Resource.Name)
		}
	}
	return out
}

func warned(p *plan.Plan, text string) bool {
	return slices.ContainsFunc(p.Warnings, func(w string) bool { return strings.Contains(w, text) })
}

func TestRemediationPlan(t *testing.T) {
	t.Parallel()
	const (
		w1  = "lab-worker-01"
		w2  = "lab-worker-02"
		cp3 = "lab-controlplane-03"
	)
	one := &spec.Remediation{After: 10 * time.Minute, MaxUnhealthy: spec.MaxUnhealthy{Count: 1}}
	tests := []struct {
		name      string
		r         *spec.Remediation
		infra     reconcile.Infra
		edit      func(*reconcile.Observation)
		want      []string
		warning   string
		noWarning string
	}{
		{"off by default", nil, replacerInfra{}, func(o *reconcile.Observation) { notReady(o, w2, time.Hour) }, nil, "", "remediation"},
		{"NotReady longer than after", one, replacerInfra{}, func(o *reconcile.Observation) { notReady(o, w2, 14*time.Minute) },
			[]string{w2}, "remediation: " + w2 + " has been NotReady for 14m (after: 10m); it is replaced (1 of at most 1 in pool worker)", ""},
		{"NotReady for less than after", one, replacerInfra{}, func(o *reconcile.Observation) { notReady(o, w2, 9*time.Minute) }, nil, "", "remediation"},
		{"NotReady (False) counts as Unknown does", one, replacerInfra{}, func(o *reconcile.Observation) {
			notReady(o, w2, 11*time.Minute)
			o.Kube.Nodes[len(o.Kube.Nodes)-1].Condition = "False"
		}, []string{w2}, "", ""},
		{"at most the limit of a pool, longest first", one, replacerInfra{}, func(o *reconcile.Observation) {
			notReady(o, w1, 12*time.Minute)
			notReady(o, w2, 20*time.Minute)
		}, []string{w2}, "remediation: " + w1 + " has been NotReady for 12m (after: 10m), but it is not replaced now: 2 machines of pool worker are NotReady that long, and max_unhealthy 1 of 2 allows 1 at once", ""},
		{"a pool too small for the percentage", &spec.Remediation{After: 10 * time.Minute, MaxUnhealthy: spec.MaxUnhealthy{Percent: 40}}, replacerInfra{}, func(o *reconcile.Observation) {
			notReady(o, w2, time.Hour)
		}, nil, "max_unhealthy 40% of 2 allows 0 at once", ""},
		{"a pool not covered", &spec.Remediation{After: 10 * time.Minute, MaxUnhealthy: spec.MaxUnhealthy{Count: 1}, Pools: []string{"gpu"}}, replacerInfra{}, func(o *reconcile.Observation) {
			notReady(o, w2, time.Hour)
		}, nil, "", "remediation"},
		{"never a control plane", one, replacerInfra{}, func(o *reconcile.Observation) { notReady(o, cp3, time.Hour) }, nil, "", "remediation"},
		{"not while a control plane is NotReady", one, replacerInfra{}, func(o *reconcile.Observation) {
			notReady(o, cp3, time.Hour)
			notReady(o, w2, time.Hour)
		}, nil, "nothing is replaced while the cluster itself is unhealthy: not Ready yet: " + cp3, ""},
		{"not while a control plane's Talos API does not answer", one, replacerInfra{}, func(o *reconcile.Observation) {
			f := o.Nodes[cp3]
			f.Unknown = "connection refused"
			o.Nodes[cp3] = f
			notReady(o, w2, time.Hour)
		}, nil, cp3 + " does not answer the Talos API: connection refused", ""},
		{"not while etcd has a learner", one, replacerInfra{}, func(o *reconcile.Observation) {
			o.Etcd.Members[2].Learner = true
			notReady(o, w2, time.Hour)
		}, nil, "etcd member " + cp3 + " is still a learner", ""},
		{"not while the etcd members are unknown", one, replacerInfra{}, func(o *reconcile.Observation) {
			o.Etcd = reconcile.EtcdFacts{Unknown: "deadline exceeded"}
			notReady(o, w2, time.Hour)
		}, nil, "the etcd members could not be listed: deadline exceeded", ""},
		{"not while etcd has another member", one, replacerInfra{}, func(o *reconcile.Observation) {
			o.Etcd.Members = append(o.Etcd.Members, talos.Member{ID: 99, Hostname: "stray"})
			notReady(o, w2, time.Hour)
		}, nil, "etcd members are", ""},
		{"a provider that cannot replace", one, removerInfra{}, func(o *reconcile.Observation) { notReady(o, w2, time.Hour) },
			nil, "this provider cannot replace machines yet", ""},
		{"nothing observed", one, replacerInfra{}, func(o *reconcile.Observation) {
			notReady(o, w2, time.Hour)
			o.At = time.Time{}
		}, nil, "", "remediation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := remediationPlan(t, tt.r, tt.infra, tt.edit)
			if got := remediated(p); !slices.Equal(got, tt.want) {
				t.Errorf("remediated %v, want %v; warnings %q", got, tt.want, p.Warnings)
			}
			if tt.warning != "" && !warned(p, tt.warning) {
				t.Errorf("no warning with %q in %q", tt.warning, p.Warnings)
			}
			if tt.noWarning != "" && warned(p, tt.noWarning) {
				t.Errorf("a warning with %q: %q", tt.noWarning, p.Warnings)
			}
			if len(tt.want) == 0 {
				for _, ch := range p.Changes {
					if strings.Contains(ch.Reason, "remediation") {
						t.Errorf("a remediation step: %s %s: %s", ch.Action, ch.Resource, ch.Reason)
					}
				}
			}
		})
	}
}

// TestRemediationSteps: a remediation is the steps of a removal, marked,
// after the check that the node is still NotReady; the Talos reset only
// when its Talos API answers; and a cordon an interrupted remediation
// left is not undone.
func TestRemediationSteps(t *testing.T) {
	t.Parallel()
	const w2 = "lab-worker-02"
	one := &spec.Remediation{After: 10 * time.Minute, MaxUnhealthy: spec.MaxUnhealthy{Count: 1}}
	p := remediationPlan(t, one, replacerInfra{}, func(o *reconcile.Observation) { notReady(o, w2, 14*time.Minute) })
	want := []string{"wait node " + w2, "update node " + w2, "drain node " + w2, "reset machine " + w2, "delete node " + w2, "delete machine " + w2}
	if got := steps(p); !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	for _, ch := range p.Changes {
		if ch.Phase == plan.PhaseScaleDown && !strings.HasPrefix(ch.Reason, "remediation") {
			t.Errorf("%s %s: the reason does not say remediation: %s", ch.Action, ch.Resource, ch.Reason)
		}
	}
	// Its machine is new to the phases that follow: the health barrier
	// follows.
	if !slices.ContainsFunc(p.Changes, func(ch plan.Change) bool { return ch.Phase == plan.PhaseHealth && ch.Action == plan.ActionWait }) {
		t.Error("no health barrier after the remediation")
	}

	// Unreachable, cordoned by an interrupted remediation: no reset, no
	// new cordon, and no uncordon.
	p = remediationPlan(t, one, replacerInfra{}, func(o *reconcile.Observation) {
		notReady(o, w2, 14*time.Minute)
		f := o.Nodes[w2]
		f.Unknown = "connection refused"
		o.Nodes[w2] = f
		for i := range o.Kube.Nodes {
			if n := &o.Kube.Nodes[i]; n.Name == w2 {
				n.Unschedulable, n.CordonedBy = true, "taloscluster"
			}
		}
	})
	want = []string{"wait node " + w2, "drain node " + w2, "delete node " + w2, "delete machine " + w2}
	if got := steps(p); !slices.Equal(got, want) {
		t.Fatalf("steps of an unreachable, cordoned node %v, want %v", got, want)
	}
	if p.Incomplete {
		t.Errorf("the replaced node's unreadable Talos API made the plan incomplete: %q", p.IncompleteReasons)
	}
}
