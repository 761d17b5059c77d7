package proxmox_test

import (
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// TestRunningNodesKeepTheirVersionsInTheirConfigs: an existing node's
// desired config is made at the Talos and Kubernetes versions it runs, so
// a version change is an upgrade of its own and never shows as a config
// applied to every node before its upgrade, nor is a running node's
// config baked at a version before its hop.
func TestRunningNodesKeepTheirVersionsInTheirConfigs(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "versions", 1)

	p, err := planSets(t, ctx, w, [][2]string{{"kubernetes.version", "v1.36.2"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Refusals) > 0 {
		t.Fatalf("refusals %v", p.Refusals)
	}
	upgrades := 0
	for _, ch := range p.Changes {
		switch ch.Action {
		case plan.ActionApplyConfig:
			t.Errorf("a Kubernetes upgrade applies a config outside its hop: %s %s", ch.Resource, ch.Reason)
		case plan.ActionUpgradeKubernetes:
			upgrades++
		}
	}
	// The pre-pull, three components on each of three control planes,
	// kube-proxy, and four kubelets.
	if upgrades != 1+3*3+1+4 {
		t.Errorf("%d Kubernetes upgrade steps, want 15", upgrades)
	}

	p, err = planSets(t, ctx, w, [][2]string{{"talos.version", "v1.13.9"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	installed := map[string]bool{}
	for _, ch := range p.Changes {
		switch ch.Action {
		case plan.ActionUpgradeTalos:
			installed[ch.Resource.Name] = true
		case plan.ActionApplyConfig:
			if !installed[ch.Resource.Name] {
				t.Errorf("%s is given a config made for the new Talos before it runs it", ch.Resource.Name)
			}
		}
	}
	if len(installed) != 4 {
		t.Errorf("%d nodes upgraded, want 4", len(installed))
	}
}
