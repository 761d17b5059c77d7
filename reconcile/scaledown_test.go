package reconcile_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// removerInfra is fakeInfra that can remove machines: one delete step
// per VM.
type removerInfra struct{ fakeInfra }

func (removerInfra) PlanRemove(hostname string, have reconcile.Inventory) []plan.Change {
	for _, m := range have.Machines() {
		if m.Hostname == hostname {
			return []plan.Change{{Phase: plan.PhaseScaleDown, Domain: plan.DomainProvider, Action: plan.ActionDelete,
				Resource: plan.Resource{Kind: plan.KindMachine, Name: hostname}, Reason: "delete the VM"}}
		}
	}
	return nil
}

// extra adds a machine to the observation as the converged cluster would
// show it, though cluster.yaml does not have it.
func extra(obs *reconcile.Observation, name string, role spec.Role, last byte) {
	addr := netip.AddrFrom4([4]byte{192, 168, 50, last})
	obs.Inventory = append(obs.Inventory.(fakeInventory), reconcile.Machine{Hostname: name, Role: role, Running: true, Addresses: []netip.Addr{addr}})
	f := reconcile.NodeFacts{Address: addr.String(), Version: "v1.13.8"}
	labels := map[string]string{}
	if role == spec.RoleControlPlane {
		f.Etcd = "Running"
		obs.Etcd.Members = append(obs.Etcd.Members, talos.Member{ID: uint64(last), Hostname: name})
		labels["node-role.kubernetes.io/control-plane"] = ""
	}
	obs.Nodes[name] = f
	obs.Kube.Nodes = append(obs.Kube.Nodes, kube.Node{Name: name, Ready: true, Condition: "True", Labels: labels})
}

// steps lists "action kind name" of the plan's scale-down steps.
func steps(p *plan.Plan) []string {
	var out []string
	for _, ch := range p.Changes {
		if ch.Phase == plan.PhaseScaleDown {
			out = append(out, string(ch.Action)+" "+string(ch.Resource.Kind)+" "+ch.Resource.Name)
		}
	}
	return out
}

func TestScaleDownPlan(t *testing.T) {
	t.Parallel()
	want, _ := converged(t)
	name := want.Cluster.Name
	w2, w3 := name+"-worker-03", name+"-worker-04"
	cp4, cp5 := name+"-controlplane-04", name+"-controlplane-05"
	tests := []struct {
		name    string
		edit    func(*reconcile.Observation)
		steps   []string
		refusal string
		warning string
	}{
		{"workers go highest first, each cordoned, drained, reset, then its Node and VM", func(o *reconcile.Observation) {
			extra(o, w2, spec.RoleWorker, 40)
			extra(o, w3, spec.RoleWorker, 41)
		}, []string{
			"update node " + w3, "drain node " + w3, "reset machine " + w3, "delete node " + w3, "delete machine " + w3,
			"update node " + w2, "drain node " + w2, "reset machine " + w2, "delete node " + w2, "delete machine " + w2,
		}, "", ""},
		{"a control plane is gated on etcd, reset, and checked out of etcd", func(o *reconcile.Observation) {
			extra(o, cp4, spec.RoleControlPlane, 50)
			extra(o, cp5, spec.RoleControlPlane, 51)
		}, []string{
			"wait cluster etcd", "update node " + cp5, "drain node " + cp5, "reset machine " + cp5, "delete etcd-member " + cp5, "delete node " + cp5, "delete machine " + cp5,
			"wait cluster etcd", "update node " + cp4, "drain node " + cp4, "reset machine " + cp4, "delete etcd-member " + cp4, "delete node " + cp4, "delete machine " + cp4,
		}, "", ""},
		{"a dead control plane goes first, through the survivors", func(o *reconcile.Observation) {
			extra(o, cp4, spec.RoleControlPlane, 50)
			extra(o, cp5, spec.RoleControlPlane, 51)
			inv := o.Inventory.(fakeInventory)
			inv[len(inv)-2].Addresses, inv[len(inv)-2].Running = nil, false // cp4 is off
			delete(o.Nodes, cp4)
			o.Kube.Nodes[len(o.Kube.Nodes)-2].Ready, o.Kube.Nodes[len(o.Kube.Nodes)-2].Condition = false, "Unknown"
		}, []string{
			"update node " + cp4, "drain node " + cp4, "delete etcd-member " + cp4, "delete node " + cp4, "delete machine " + cp4,
			"wait cluster etcd", "update node " + cp5, "drain node " + cp5, "reset machine " + cp5, "delete etcd-member " + cp5, "delete node " + cp5, "delete machine " + cp5,
		}, "", ""},
		{"a member without machine or Node is removed through the survivors", func(o *reconcile.Observation) {
			o.Etcd.Members = append(o.Etcd.Members, talos.Member{ID: 99, Hostname: cp4})
		}, []string{"delete etcd-member " + cp4}, "", ""},
		{"a NotReady Node without a VM is deleted", func(o *reconcile.Observation) {
			o.Kube.Nodes = append(o.Kube.Nodes, kube.Node{Name: w3, Condition: "Unknown"})
		}, []string{"update node " + w3, "drain node " + w3, "delete node " + w3}, "", ""},
		{"a Ready Node without a VM is left with a warning", func(o *reconcile.Observation) {
			o.Kube.Nodes = append(o.Kube.Nodes, kube.Node{Name: w3, Ready: true, Condition: "True"})
		}, nil, "", "Kubernetes node " + w3 + " is named like a machine of the cluster"},
		{"a node of another name is none of the engine's business", func(o *reconcile.Observation) {
			o.Kube.Nodes = append(o.Kube.Nodes, kube.Node{Name: "metal-7", Condition: "Unknown"})
		}, nil, "", ""},
		{"an addressless machine whose Node is Ready is a discovery failure", func(o *reconcile.Observation) {
			extra(o, w2, spec.RoleWorker, 40)
			inv := o.Inventory.(fakeInventory)
			inv[len(inv)-1].Addresses = nil
			delete(o.Nodes, w2)
		}, nil, "that is a failure to discover its address, not a dead node", ""},
		{"a VM that never registered is deleted without a reset when it does not answer", func(o *reconcile.Observation) {
			extra(o, w2, spec.RoleWorker, 40)
			o.Kube.Nodes = o.Kube.Nodes[:len(o.Kube.Nodes)-1]
			f := o.Nodes[w2]
			f.Unknown = "connection refused"
			o.Nodes[w2] = f
		}, []string{"delete machine " + w2}, "", ""},
		{"a node cordoned by the engine and kept is uncordoned", func(o *reconcile.Observation) {
			o.Kube.Nodes[len(o.Kube.Nodes)-1].Unschedulable = true
			o.Kube.Nodes[len(o.Kube.Nodes)-1].CordonedBy = kube.CordonedByUs
		}, []string{"update node " + want.Machines[len(want.Machines)-1].Hostname}, "", ""},
		{"a node cordoned by someone else is left cordoned", func(o *reconcile.Observation) {
			o.Kube.Nodes[len(o.Kube.Nodes)-1].Unschedulable = true
		}, nil, "", ""},
		{"a Ready node whose Talos API does not answer waits", func(o *reconcile.Observation) {
			extra(o, w2, spec.RoleWorker, 40)
			f := o.Nodes[w2]
			f.Unknown = "connection refused"
			o.Nodes[w2] = f
		}, nil, "Talos API does not answer", ""},
		{"a Ready Node of no VM keeps its etcd member", func(o *reconcile.Observation) {
			o.Kube.Nodes = append(o.Kube.Nodes, kube.Node{Name: cp4, Ready: true, Condition: "True", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}})
			o.Etcd.Members = append(o.Etcd.Members, talos.Member{ID: 77, Hostname: cp4})
		}, nil, "", "Kubernetes node " + cp4 + " is named like a machine of the cluster"},
		{"a learner without a name is its machine's, by its peer address", func(o *reconcile.Observation) {
			extra(o, cp4, spec.RoleControlPlane, 50)
			o.Etcd.Members[len(o.Etcd.Members)-1] = talos.Member{ID: 50, Learner: true, PeerURLs: []string{"https://192.168.50.50:2380"}}
		}, []string{"wait cluster etcd", "update node " + cp4, "drain node " + cp4, "reset machine " + cp4, "delete etcd-member " + cp4, "delete node " + cp4, "delete machine " + cp4}, "", ""},
		{"a control plane without its Node is reset, then its membership decides", func(o *reconcile.Observation) {
			extra(o, cp4, spec.RoleControlPlane, 50)
			o.Kube.Nodes = o.Kube.Nodes[:len(o.Kube.Nodes)-1]
		}, []string{"wait cluster etcd", "reset machine " + cp4, "delete etcd-member " + cp4, "delete machine " + cp4}, "", ""},
		{"an interrupted reset is shown as resumed", func(o *reconcile.Observation) {
			extra(o, w2, spec.RoleWorker, 40)
			o.Journal = []state.Entry{{Op: "reset machine", Target: w2}}
		}, []string{"update node " + w2, "drain node " + w2, "reset machine " + w2, "delete node " + w2, "delete machine " + w2}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want, obs := converged(t)
			tt.edit(obs)
			p, err := reconcile.Plan(want, obs, removerInfra{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.refusal != "" {
				if !refusedWith(p, tt.refusal) {
					t.Fatalf("refusals %v, want one with %q", p.Refusals, tt.refusal)
				}
				for _, r := range p.Refusals {
					if !r.Waits {
						t.Errorf("refusal %q does not wait: a node whose state is settling changes on its own", r.Reason)
					}
				}
				return
			}
			if len(p.Refusals) > 0 {
				t.Fatalf("unexpected refusals %v", p.Refusals)
			}
			if got := steps(p); !slices.Equal(got, tt.steps) {
				t.Errorf("scale-down steps:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.steps, "\n  "))
			}
			if tt.warning != "" && !slices.ContainsFunc(p.Warnings, func(w string) bool { return strings.Contains(w, tt.warning) }) {
				t.Errorf("warnings %v, want one with %q", p.Warnings, tt.warning)
			}
			if strings.HasPrefix(tt.name, "an interrupted") && !slices.ContainsFunc(p.Changes, func(ch plan.Change) bool {
				return slices.ContainsFunc(ch.Attributes, func(a plan.Attribute) bool { return a.Key == "resumes" })
			}) {
				t.Error("the resumed removal does not say so")
			}
		})
	}
}

// TestScaleDownGateStaysWithExistingControlPlanes: a control plane this
// run creates (later, in the compute phase) is not one the etcd gate
// waits for before a removal.
func TestScaleDownGateStaysWithExistingControlPlanes(t *testing.T) {
	t.Parallel()
	want, obs := converged(t)
	name := want.Cluster.Name
	// cluster.yaml renames nothing but replaces controlplane-03 by a
	// fourth: 01, 02 and 04 are desired, 03 exists and goes.
	cp3 := name + "-controlplane-03"
	for i, m := range want.Machines {
		if m.Hostname == cp3 {
			want.Machines[i].Hostname = name + "-controlplane-04"
		}
	}
	p, err := reconcile.Plan(want, obs, removerInfra{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range p.Changes {
		if ch.Resource.Name == "etcd" && strings.Contains(ch.Reason, "controlplane-04") {
			t.Fatalf("the etcd gate waits for a control plane that does not exist yet: %s", ch.Reason)
		}
	}
	if !slices.Contains(steps(p), "reset machine "+cp3) {
		t.Fatalf("no removal of %s: %v", cp3, steps(p))
	}
}

func TestScaleDownQuorumRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from, to int
		refusal  string
	}{
		{3, 2, "would leave two etcd members"},
		{5, 4, "choose 3"},
		{5, 3, ""},
		{3, 1, ""},
	} {
		want, obs := converged(t)
		name := want.Cluster.Name
		for i := 4; i <= tc.from; i++ {
			extra(obs, name+"-controlplane-0"+string(rune('0'+i)), spec.RoleControlPlane, byte(60+i))
		}
		// cluster.yaml asks for tc.to control planes out of what exists.
		want.Cluster.ControlPlane.Count = tc.to
		var keep []string
		for _, m := range want.Machines {
			if m.Role() != spec.RoleControlPlane || m.Number <= tc.to {
				keep = append(keep, m.Hostname)
			}
		}
		want.Machines = slices.DeleteFunc(want.Machines, func(m machineconfig.Machine) bool { return !slices.Contains(keep, m.Hostname) })
		p, err := reconcile.Plan(want, obs, removerInfra{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.refusal == "" && len(p.Refusals) > 0 || tc.refusal != "" && !refusedWith(p, tc.refusal) {
			t.Errorf("%d -> %d control planes: refusals %v, want %q", tc.from, tc.to, p.Refusals, tc.refusal)
		}
	}
}
