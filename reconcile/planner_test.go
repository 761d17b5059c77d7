package reconcile_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// fakeInfra is a provider that plans nothing and owns the machines it is
// given: the planner's own decisions are what these tests look at.
type fakeInfra struct{}

type fakeInventory []reconcile.Machine

func (f fakeInventory) Machines() []reconcile.Machine { return f }

func (fakeInfra) Observe(context.Context) (reconcile.Inventory, error) {
	return fakeInventory(nil), nil
}
func (fakeInfra) Empty() reconcile.Inventory { return fakeInventory(nil) }
func (fakeInfra) Plan(plan.Phase, *reconcile.Desired, reconcile.Inventory) ([]plan.Change, error) {
	return nil, nil
}
func (fakeInfra) Apply(context.Context, *reconcile.Desired, plan.Change) error { return nil }

// converged returns the desired state of the bridge example and the
// observation of that cluster converged and healthy.
func converged(t testing.TB) (*reconcile.Desired, *reconcile.Observation) {
	t.Helper()
	c, _, err := spec.Load(filepath.Join("..", "examples", "proxmox-bridge"), spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := &reconcile.Desired{Cluster: c, Machines: machineconfig.Machines(c), Configs: map[string][]byte{}, API: reconcile.ConfiguredAPI(c)}
	obs := &reconcile.Observation{
		State: reconcile.StateFacts{Secrets: true, Talosconfig: true, Kubeconfig: true, TalosconfigContext: c.Name},
		Nodes: map[string]reconcile.NodeFacts{},
		Kube:  reconcile.KubeFacts{Version: c.Kubernetes.Version},
	}
	var inv fakeInventory
	for i, m := range want.Machines {
		addr := netip.AddrFrom4([4]byte{192, 168, 50, byte(10 + i)})
		inv = append(inv, reconcile.Machine{Hostname: m.Hostname, Role: m.Role(), Running: true, Addresses: []netip.Addr{addr}})
		f := reconcile.NodeFacts{Address: addr.String(), Version: c.Talos.Version}
		if m.Role() == spec.RoleControlPlane {
			f.Etcd = "Running"
			obs.Etcd.Members = append(obs.Etcd.Members, talos.Member{ID: uint64(i + 1), Hostname: m.Hostname})
			obs.State.TalosconfigEndpoints = append(obs.State.TalosconfigEndpoints, addr.String())
		}
		obs.Nodes[m.Hostname] = f
		obs.Kube.Nodes = append(obs.Kube.Nodes, kube.Node{Name: m.Hostname, Ready: true, KubeletVersion: c.Kubernetes.Version})
	}
	obs.Inventory = inv
	return want, obs
}

func planOf(t testing.TB, want *reconcile.Desired, obs *reconcile.Observation) *plan.Plan {
	t.Helper()
	p, err := reconcile.Plan(want, obs, fakeInfra{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func refusedWith(p *plan.Plan, text string) bool {
	for _, r := range p.Refusals {
		if strings.Contains(r.Resource.String()+": "+r.Reason, text) {
			return true
		}
	}
	return false
}

func TestPlanOfConvergedClusterIsEmpty(t *testing.T) {
	t.Parallel()
	want, obs := converged(t)
	if p := planOf(t, want, obs); !p.Empty() {
		t.Fatalf("plan of a converged cluster: %s %+v %+v", p.Summary(), p.Changes, p.Refusals)
	}
}

// TestBootstrapDecision covers the one decision that can cost a cluster:
// whether etcd must be bootstrapped. Only etcd and the Kubernetes API
// decide; a served kubeconfig proves nothing (Talos serves one before the
// bootstrap).
func TestBootstrapDecision(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		edit          func(*reconcile.Observation)
		wantBootstrap bool
		wantRefusal   string
		wantReason    string
	}{
		{"converged", func(*reconcile.Observation) {}, false, "", ""},
		{"API answers, no etcd facts", func(o *reconcile.Observation) {
			o.Etcd = reconcile.EtcdFacts{Unknown: "no control plane's etcd is running"}
		}, false, "", ""},
		{"etcd has members, API down, kubeconfig kept", func(o *reconcile.Observation) {
			o.Kube = reconcile.KubeFacts{Unknown: "the Kubernetes API does not answer: timeout"}
		}, false, "the Kubernetes API does not answer", ""},
		{"etcd runs, no kubeconfig, recovered one does not answer", func(o *reconcile.Observation) {
			o.State.Kubeconfig = false
			o.Kube = reconcile.KubeFacts{Unknown: "the Kubernetes API does not answer", Recovered: true}
			o.Etcd = reconcile.EtcdFacts{Unknown: "x"}
		}, false, "", ""},
		{"never bootstrapped: every control plane waits for etcd", func(o *reconcile.Observation) {
			o.State.Kubeconfig = false
			o.Kube = reconcile.KubeFacts{Unknown: "the Kubernetes API does not answer", Recovered: true}
			o.Etcd = reconcile.EtcdFacts{Unknown: "no control plane's etcd is running"}
			for h, n := range o.Nodes {
				if n.Etcd != "" {
					n.Etcd = "Preparing"
					o.Nodes[h] = n
				}
			}
		}, true, "", "bootstrap etcd on the first control plane"},
		{"unknown: a control plane does not answer", func(o *reconcile.Observation) {
			o.State.Kubeconfig = false
			o.Kube = reconcile.KubeFacts{Unknown: "no kubeconfig, and no control plane served one"}
			o.Etcd = reconcile.EtcdFacts{Unknown: "no control plane's etcd is running"}
			for h, n := range o.Nodes {
				if n.Etcd != "" {
					n.Etcd = "Preparing"
				}
				if strings.HasSuffix(h, "controlplane-02") {
					n = reconcile.NodeFacts{Address: n.Address, Unknown: "connection refused"}
				}
				o.Nodes[h] = n
			}
		}, true, "", "could not be read now"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want, obs := converged(t)
			tt.edit(obs)
			p := planOf(t, want, obs)
			var boot *plan.Change
			for i, ch := range p.Changes {
				if ch.Action == plan.ActionBootstrap {
					boot = &p.Changes[i]
				}
			}
			if (boot != nil) != tt.wantBootstrap {
				t.Fatalf("bootstrap planned = %t, want %t: %s", boot != nil, tt.wantBootstrap, p.Summary())
			}
			if boot != nil && (!strings.Contains(boot.Reason, tt.wantReason) || boot.Domain != plan.DomainTalos || boot.Expects == "") {
				t.Errorf("bootstrap step %+v, want reason with %q, domain talos and a precondition", boot, tt.wantReason)
			}
			if tt.wantRefusal != "" && !refusedWith(p, tt.wantRefusal) {
				t.Errorf("refusals %v, want one with %q", p.Refusals, tt.wantRefusal)
			}
			if tt.wantRefusal == "" && len(p.Refusals) > 0 {
				t.Errorf("unexpected refusals %v", p.Refusals)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*reconcile.Desired, *reconcile.Observation)
		want string
	}{
		{"talos downgrade", func(_ *reconcile.Desired, o *reconcile.Observation) {
			for h, n := range o.Nodes {
				n.Version = "v1.13.9"
				o.Nodes[h] = n
			}
		}, "talos.version v1.13.9 -> v1.13.8 on"},
		{"talos upgrade over two minors", func(_ *reconcile.Desired, o *reconcile.Observation) {
			for h, n := range o.Nodes {
				n.Version = "v1.11.5"
				o.Nodes[h] = n
			}
		}, "Talos is upgraded one minor release at a time; set talos.version to the newest v1.12 release first"},
		{"kubernetes downgrade", func(_ *reconcile.Desired, o *reconcile.Observation) { o.Kube.Version = "v1.36.2" }, "kubernetes.version v1.36.2 -> v1.36.1: downgrades are not supported"},
		{"scale-down without a remover", func(w *reconcile.Desired, _ *reconcile.Observation) { w.Machines = w.Machines[:len(w.Machines)-1] }, "this provider cannot remove machines yet"},
		{"rename", func(_ *reconcile.Desired, o *reconcile.Observation) { o.State.TalosconfigContext = "other" }, "renaming a cluster is not supported"},
		{"identity lost", func(_ *reconcile.Desired, o *reconcile.Observation) { o.State.Secrets = false }, "restore talossecrets.yaml from backup"},
		{"talos minor the engine does not implement", func(w *reconcile.Desired, _ *reconcile.Observation) {
			w.Cluster.Talos.Version = "v1.14.0"
		}, "talos.version: talos.version v1.14.0: this engine implements Talos v1.13.x only (its API behaviour differs: Talos 1.14 changes apply-config"},
		{"talos minor not known at all", func(w *reconcile.Desired, _ *reconcile.Observation) {
			w.Cluster.Talos.Version = "v2.0.0-alpha.1"
		}, "talos.version v2.0.0-alpha.1: this engine implements Talos v1.13.x only (the engine was not built for its API"},
		{"maintenance mode", func(w *reconcile.Desired, o *reconcile.Observation) {
			h := w.Machines[len(w.Machines)-1].Hostname
			o.Nodes[h] = reconcile.NodeFacts{Address: o.Nodes[h].Address, Version: "v1.13.8", Maintenance: true}
		}, "maintenance mode: it never read its machine config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want, obs := converged(t)
			tt.edit(want, obs)
			p := planOf(t, want, obs)
			if !refusedWith(p, tt.want) {
				t.Fatalf("refusals %v, want one with %q", p.Refusals, tt.want)
			}
		})
	}
}

// TestKubeconfigStep: a missing kubeconfig of an existing cluster (its
// machines and identity exist and it was bootstrapped) is recovered, and
// the plan says so; a new cluster's is written; when whether the cluster
// was bootstrapped could not be read, the step says that.
func TestKubeconfigStep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		edit      func(*reconcile.Observation)
		want, not string
	}{
		{"live cluster, the API answers", func(o *reconcile.Observation) {
			o.Kube.Recovered = true
		}, "recover kubeconfig: the state has none, but the cluster exists", ""},
		{"live cluster, etcd only", func(o *reconcile.Observation) {
			o.Kube = reconcile.KubeFacts{Unknown: "the Kubernetes API does not answer", Recovered: true}
		}, "recover kubeconfig", ""},
		{"new cluster", func(o *reconcile.Observation) {
			*o = reconcile.Observation{Inventory: fakeInventory(nil), Nodes: map[string]reconcile.NodeFacts{},
				State: reconcile.StateFacts{Secrets: true},
				Etcd:  reconcile.EtcdFacts{Unknown: "no machine"}, Kube: reconcile.KubeFacts{Unknown: "no kubeconfig, and no control plane served one"}}
		}, "admin kubeconfig from ", "recover"},
		{"bootstrapped or not is unknown", func(o *reconcile.Observation) {
			o.Kube = reconcile.KubeFacts{Unknown: "no kubeconfig, and no control plane served one"}
			o.Etcd = reconcile.EtcdFacts{Unknown: "no control plane's etcd is running"}
			for h, n := range o.Nodes {
				if n.Etcd != "" {
					o.Nodes[h] = reconcile.NodeFacts{Address: n.Address, Unknown: "connection refused"}
				}
			}
		}, "whether the cluster was bootstrapped could not be read", "recover"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want, obs := converged(t)
			obs.State.Kubeconfig = false
			tt.edit(obs)
			p := planOf(t, want, obs)
			var step *plan.Change
			for i, ch := range p.Changes {
				if ch.Resource.Kind == plan.KindKubeconfig {
					step = &p.Changes[i]
				}
			}
			if step == nil || !strings.Contains(step.Reason, tt.want) || (tt.not != "" && strings.Contains(step.Reason, tt.not)) {
				t.Fatalf("kubeconfig step %+v; want a reason with %q and without %q", step, tt.want, tt.not)
			}
		})
	}
}

// TestImplementedTalos: the engine's Talos range admits every v1.13
// release, pre-releases too, and nothing else.
func TestImplementedTalos(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"v1.13.0": true, "v1.13.9": true, "v1.13.0-beta.0": true, "1.13.4": true,
		"v1.12.9": false, "v1.14.0": false, "v1.14.0-beta.0": false, "v1.15.0": false, "v2.13.0": false, "latest": false,
	} {
		ok, why := reconcile.TalosImplemented(v)
		if ok != want || ok != (why == "") || (!ok && !strings.Contains(why, "Talos v1.13.x only")) {
			t.Errorf("TalosImplemented(%q) = %t, %q; want %t", v, ok, why, want)
		}
	}
	if got := reconcile.ImplementedTalos(); got != "v1.13.x" {
		t.Errorf("ImplementedTalos() = %q", got)
	}
}

func TestUnhealthyClusterGetsAHealthGate(t *testing.T) {
	t.Parallel()
	want, obs := converged(t)
	obs.Kube.Nodes[0].Ready = false
	p := planOf(t, want, obs)
	if p.Empty() || p.Counts().Wait != 1 || !strings.Contains(p.Changes[len(p.Changes)-1].Reason, "not Ready yet: lab-controlplane-01") {
		t.Fatalf("plan of a cluster with a NotReady node: %s %+v", p.Summary(), p.Changes)
	}
}

// BenchmarkPlanConverged measures the planner alone (no I/O) on the
// observation of a converged five-machine cluster.
func BenchmarkPlanConverged(b *testing.B) {
	want, obs := converged(b)
	for b.Loop() {
		planOf(b, want, obs)
	}
}

// BenchmarkPlanConvergedWithConfigs adds the comparison of every node's
// running machine config with its desired one, the costly part of a live
// plan.
func BenchmarkPlanConvergedWithConfigs(b *testing.B) {
	want, obs := converged(b)
	bundle, err := machineconfig.NewSecrets(want.Cluster.Talos.Version)
	if err != nil {
		b.Fatal(err)
	}
	endpoint, vip := reconcile.Endpoint(want.Cluster)
	in := machineconfig.Input{Cluster: want.Cluster, Secrets: bundle, Endpoint: endpoint, VIP: vip}
	for _, m := range want.Machines {
		cfg, err := machineconfig.Generate(in, m)
		if err != nil {
			b.Fatal(err)
		}
		data, err := machineconfig.Encode(cfg)
		if err != nil {
			b.Fatal(err)
		}
		want.Configs[m.Hostname] = data
		n := obs.Nodes[m.Hostname]
		n.Config = data
		obs.Nodes[m.Hostname] = n
	}
	for b.Loop() {
		if p := planOf(b, want, obs); !p.Empty() {
			b.Fatalf("plan of a converged cluster: %s", p.Summary())
		}
	}
}

// The gate the plan shows reads the same facts converge waits on: a node
// whose Talos API does not answer, an etcd learner and a missing member
// each keep a converged cluster from passing it.
func TestHealthGateNamesWhatItChecks(t *testing.T) {
	t.Parallel()
	for name, breakIt := range map[string]func(obs *reconcile.Observation) string{
		"talos": func(obs *reconcile.Observation) string {
			n := obs.Nodes["lab-worker-01"]
			n.Unknown = "rpc error: code = Internal desc = boom"
			obs.Nodes["lab-worker-01"] = n
			return "lab-worker-01 does not answer the Talos API: rpc error: code = Internal desc = boom"
		},
		"learner": func(obs *reconcile.Observation) string {
			obs.Etcd.Members[2].Learner = true
			return "etcd member " + obs.Etcd.Members[2].Hostname + " is still a learner"
		},
		"member": func(obs *reconcile.Observation) string {
			obs.Etcd.Members = obs.Etcd.Members[:2]
			return "etcd members are "
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, obs := converged(t)
			says := breakIt(obs)
			p := planOf(t, want, obs)
			gate := p.Changes[len(p.Changes)-1]
			if gate.Action != plan.ActionWait || !strings.Contains(gate.Reason, "whose Talos API answers") || !strings.Contains(gate.Reason, "none a learner") || !strings.Contains(gate.Reason, says) {
				t.Fatalf("gate %q, want it to name %q", gate.Reason, says)
			}
		})
	}
}
