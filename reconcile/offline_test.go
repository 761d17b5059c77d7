package reconcile_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/providers/openstack"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/report"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// offlinePlan is plan --offline of a cluster directory.
func offlinePlan(tb testing.TB, dir string) *plan.Plan {
	tb.Helper()
	c, warns, err := spec.Load(dir, spec.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	var infra reconcile.Infra
	if c.Proxmox != nil {
		infra, err = proxmox.Offline(c)
	} else {
		infra, err = openstack.Offline(c)
	}
	if err != nil {
		tb.Fatal(err)
	}
	p, err := reconcile.OfflinePlan(c, warns, infra)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestOfflinePlanGolden(t *testing.T) {
	t.Parallel()
	for _, ex := range []string{"proxmox-external", "proxmox-bridge", "openstack"} {
		t.Run(ex, func(t *testing.T) {
			t.Parallel()
			p := offlinePlan(t, filepath.Join("..", "examples", ex))
			if err := p.Validate(); err != nil {
				t.Fatalf("plan is not well-formed: %v", err)
			}
			var buf bytes.Buffer
			if err := report.Text(&buf, p); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "firstbuild-"+ex+".golden")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if buf.String() != string(want) {
				t.Errorf("plan differs from %s (run with -update to accept):\n%s", golden, buf.String())
			}
		})
	}
}

func TestOfflinePlanContents(t *testing.T) {
	t.Parallel()
	p := offlinePlan(t, filepath.Join("..", "examples", "proxmox-external"))
	count := map[plan.ResourceKind]int{}
	for _, ch := range p.Changes {
		if ch.Action == plan.ActionCreate {
			count[ch.Resource.Kind]++
		}
		if ch.Domain == "" {
			t.Errorf("step %s has no domain", ch.Step())
		}
	}
	want := map[plan.ResourceKind]int{
		plan.KindMachine:      7, // 3 control planes, 3 workers, 1 gpu
		plan.KindCIData:       7,
		plan.KindFirewallRule: 7,
		plan.KindTalosSecrets: 1,
		plan.KindResourcePool: 1,
		plan.KindTalosconfig:  1,
		plan.KindKubeconfig:   1,
		plan.KindImage:        1, // one boot ISO, shared
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d creates of %s, want %d", count[k], k, n)
		}
	}
	if c := p.Counts(); c.Bootstrap != 1 || c.Wait != 2 || len(p.Refusals) != 0 {
		t.Errorf("counts %+v, refusals %v", c, p.Refusals)
	}
	// The order is the order converge runs: identity before the first
	// machine, machines before the bootstrap, the health barrier before the
	// config ISOs are removed.
	order := map[string]int{}
	for i, ch := range p.Changes {
		if _, ok := order[string(ch.Action)+" "+string(ch.Resource.Kind)]; !ok {
			order[string(ch.Action)+" "+string(ch.Resource.Kind)] = i
		}
	}
	for _, pair := range [][2]string{
		{"create talossecrets", "create cidata"},
		{"create cidata", "create machine"},
		{"create machine", "wait cluster"},
		{"create talosconfig", "bootstrap machine"},
		{"bootstrap machine", "create kubeconfig"},
		{"create kubeconfig", "delete cidata"},
	} {
		if order[pair[0]] >= order[pair[1]] {
			t.Errorf("%q (step %d) does not come before %q (step %d)", pair[0], order[pair[0]], pair[1], order[pair[1]])
		}
	}
	var gpu *plan.Change
	for i, ch := range p.Changes {
		if ch.Resource.Name == "edge-gpu-01" && ch.Resource.Kind == plan.KindMachine {
			gpu = &p.Changes[i]
		}
	}
	if gpu == nil {
		t.Fatal("no create for edge-gpu-01")
	}
	attrs := map[string]string{}
	for _, a := range gpu.Attributes {
		attrs[a.Key] = a.Value
	}
	if attrs["node"] != "pve3" || attrs["cores"] != "16" || attrs["memory"] != "64 GB" || attrs["disk"] != "200 GB" {
		t.Errorf("gpu machine attributes %v", attrs)
	}
	var text bytes.Buffer
	if err := report.Text(&text, p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tcp/9100 from 198.51.100.7/32", "203.0.113.10"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("plan text lacks %q", want)
		}
	}
}
