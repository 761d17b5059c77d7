package reconcile_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/report"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestFirstBuildGolden(t *testing.T) {
	t.Parallel()
	for _, ex := range []string{"proxmox-external", "proxmox-bridge", "openstack"} {
		t.Run(ex, func(t *testing.T) {
			t.Parallel()
			c, warns, err := spec.Load(filepath.Join("..", "examples", ex), spec.Options{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := reconcile.FirstBuild(c, warns)
			if err != nil {
				t.Fatal(err)
			}
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

func TestFirstBuildContents(t *testing.T) {
	t.Parallel()
	c, warns, err := spec.Load(filepath.Join("..", "examples", "proxmox-external"), spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := reconcile.FirstBuild(c, warns)
	if err != nil {
		t.Fatal(err)
	}
	count := map[plan.ResourceKind]int{}
	for _, ch := range p.Changes {
		if ch.Action == plan.ActionCreate {
			count[ch.Resource.Kind]++
		}
	}
	want := map[plan.ResourceKind]int{
		plan.KindMachine:         7, // 3 control planes, 3 workers, 1 gpu
		plan.KindCIData:          7,
		plan.KindFirewallOptions: 7,
		plan.KindTalosSecrets:    1,
		plan.KindResourcePool:    1,
		plan.KindVIP:             1,
		plan.KindKubeconfig:      1,
		plan.KindImage:           3, // boot image and two installer schematics
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d creates of %s, want %d", count[k], k, n)
		}
	}
	if p.Counts().Bootstrap != 1 || len(p.Refusals) != 0 {
		t.Errorf("counts %+v, refusals %v", p.Counts(), p.Refusals)
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
	for _, want := range []string{"talos/security-metrics", "ports=9100", "sources=198.51.100.7/32", "talos/tailscale", "203.0.113.10"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("plan text lacks %q", want)
		}
	}
	if strings.Contains(text.String(), "open-tcp-443") {
		t.Error("443 is claimed by the https rule but the plan opens it to everyone")
	}
}
