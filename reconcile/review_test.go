package reconcile_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestPlanCoversWhatReachesANewNode checks that the steps creating
// machines carry what each new node is given besides its size: a digest
// of its redacted machine config, its node labels and its Proxmox tags, so
// that a commit changing a pool's config_patches or tags after a plan was
// reviewed gives a plan that differs from the reviewed one, with and
// without the cluster identity, and that no secret is in the plan.
func TestPlanCoversWhatReachesANewNode(t *testing.T) {
	t.Parallel()
	base, _, err := spec.Load(filepath.Join("..", "examples", "proxmox-bridge"), spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := machineconfig.NewSecrets(base.Talos.Version)
	if err != nil {
		t.Fatal(err)
	}
	planOfCluster := func(t *testing.T, c *spec.Cluster, identity bool) *plan.Plan {
		t.Helper()
		want := &reconcile.Desired{Cluster: c, Machines: machineconfig.Machines(c), Configs: map[string][]byte{}, API: reconcile.ConfiguredAPI(c)}
		if identity {
			endpoint, vip := reconcile.Endpoint(c)
			in := machineconfig.Input{Cluster: c, Secrets: bundle, Endpoint: endpoint, VIP: vip}
			for _, m := range want.Machines {
				cfg, err := machineconfig.Generate(in, m)
				if err != nil {
					t.Fatal(err)
				}
				if want.Configs[m.Hostname], err = machineconfig.Encode(cfg); err != nil {
					t.Fatal(err)
				}
			}
		}
		infra, err := proxmox.Offline(c)
		if err != nil {
			t.Fatal(err)
		}
		p, err := reconcile.Plan(want, reconcile.Offline(infra), infra, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// withWorkers returns a copy of base whose worker pools went through
	// change.
	withWorkers := func(change func(p *spec.Pool)) *spec.Cluster {
		c := *base
		c.Workers = slices.Clone(base.Workers)
		for i := range c.Workers {
			c.Workers[i].Tags = map[string]string{}
			for k, v := range base.Workers[i].Tags {
				c.Workers[i].Tags[k] = v
			}
			change(&c.Workers[i])
		}
		return &c
	}
	patched := withWorkers(func(p *spec.Pool) {
		p.ConfigPatches = append(slices.Clone(p.ConfigPatches), "machine:\n  sysctls:\n    vm.nr_hugepages: \"1024\"\n")
	})
	tagged := withWorkers(func(p *spec.Pool) { p.Tags["team"] = "payments" })
	worker := base.Workers[0].Hostname(base.Name, 1)

	for _, identity := range []bool{true, false} {
		name := "without identity"
		if identity {
			name = "with identity"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			shown := planOfCluster(t, base, identity)
			if d := plan.Differences(shown, planOfCluster(t, base, identity)); d != nil {
				t.Fatalf("two plans of one commit differ: %q", d)
			}
			create := attributes(t, shown, worker)
			for _, key := range []string{"config", "labels", "tags"} {
				if create[key] == "" {
					t.Errorf("the create step of %s has no %s attribute: %v", worker, key, create)
				}
			}
			if identity && !strings.HasPrefix(create["config"], "sha256:") {
				t.Errorf("config attribute %q, want the digest of the redacted config", create["config"])
			}
			if !strings.Contains(create["tags"], "cluster_"+base.Name) {
				t.Errorf("tags attribute %q lacks the ownership tags", create["tags"])
			}
			for _, tc := range []struct {
				name    string
				c       *spec.Cluster
				changed []string // attributes of the worker's create step that must change
			}{
				{"config_patches", patched, []string{"config"}},
				{"tags", tagged, []string{"labels"}},
			} {
				now := planOfCluster(t, tc.c, identity)
				diffs := plan.Differences(shown, now)
				if !slices.ContainsFunc(diffs, func(d string) bool { return strings.HasPrefix(d, "+ compute provider create machine "+worker+" ") }) {
					t.Errorf("%s changed after review, yet the plans do not differ in the create step of %s: %q", tc.name, worker, diffs)
				}
				after := attributes(t, now, worker)
				for _, key := range tc.changed {
					if after[key] == create[key] {
						t.Errorf("%s changed after review, yet the %s attribute stayed %q", tc.name, key, after[key])
					}
				}
			}
			if identity {
				data, err := json.Marshal(shown)
				if err != nil {
					t.Fatal(err)
				}
				for what, s := range map[string]string{
					"bootstrap token": bundle.Secrets.BootstrapToken,
					"machine token":   bundle.TrustdInfo.Token,
					"cluster secret":  bundle.Cluster.Secret,
					"secretbox key":   bundle.Secrets.SecretboxEncryptionSecret,
				} {
					if s != "" && strings.Contains(string(data), s) {
						t.Errorf("the plan holds the %s", what)
					}
				}
			}
		})
	}
}

// attributes returns the attributes of the step that creates machine
// hostname.
func attributes(t *testing.T, p *plan.Plan, hostname string) map[string]string {
	t.Helper()
	for _, ch := range p.Changes {
		if ch.Resource.Kind == plan.KindMachine && ch.Action == plan.ActionCreate && ch.Resource.Name == hostname {
			out := map[string]string{}
			for _, a := range ch.Attributes {
				out[a.Key] = a.Value
			}
			return out
		}
	}
	t.Fatalf("no step creates %s", hostname)
	return nil
}
