package report_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/report"
)

func TestStepName(t *testing.T) {
	t.Parallel()
	node := plan.Resource{Kind: plan.KindNode, Name: "a-worker-01"}
	machine := plan.Resource{Kind: plan.KindMachine, Name: "a-controlplane-01"}
	hop := plan.Attribute{Key: "kubernetes", Value: "v1.34.2 -> v1.35.0"}
	for _, tc := range []struct {
		action plan.Action
		res    plan.Resource
		attrs  []plan.Attribute
		want   string
	}{
		{plan.ActionUpdate, node, []plan.Attribute{{Key: "unschedulable", Value: "false -> true"}}, "cordon"},
		{plan.ActionUpdate, node, []plan.Attribute{{Key: "unschedulable", Value: "true -> false"}}, "uncordon"},
		{plan.ActionUpdate, node, nil, "update"},
		{plan.ActionDrain, node, nil, "drain"},
		{plan.ActionUpgradeTalos, machine, []plan.Attribute{{Key: "talos", Value: "v1.13.8 -> v1.13.9"}}, "upgrade-talos"},
		{plan.ActionWait, machine, nil, "wait"},
		{plan.ActionUpgradeKubernetes, machine, []plan.Attribute{{Key: "component", Value: "kube-apiserver"}, hop}, "upgrade-kubernetes (kube-apiserver → v1.35.0)"},
		{plan.ActionUpgradeKubernetes, plan.Resource{Kind: plan.KindCluster, Name: "kube-proxy"}, []plan.Attribute{hop}, "upgrade-kubernetes (kube-proxy → v1.35.0)"},
		{plan.ActionUpgradeKubernetes, machine, nil, "upgrade-kubernetes"},
	} {
		if got := report.StepName(tc.action, tc.res, tc.attrs); got != tc.want {
			t.Errorf("StepName(%s, %s, %v) = %q, want %q", tc.action, tc.res, tc.attrs, got, tc.want)
		}
	}
}

func TestStepDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		30 * time.Millisecond:   "<0.1s",
		120 * time.Millisecond:  "0.1s",
		2500 * time.Millisecond: "2.5s",
		14 * time.Second:        "14s",
		188 * time.Second:       "3m8s",
	} {
		if got := report.StepDuration(d); got != want {
			t.Errorf("StepDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// rolloutSteps is what a Talos upgrade of one control plane and two
// workers in a batch ran, one worker failing, then a Kubernetes hop.
func rolloutSteps() []report.Step {
	machine := func(n string) plan.Resource { return plan.Resource{Kind: plan.KindMachine, Name: n} }
	node := func(n string) plan.Resource { return plan.Resource{Kind: plan.KindNode, Name: n} }
	gate := plan.Resource{Kind: plan.KindCluster, Name: "demo"}
	ms := time.Millisecond
	return []report.Step{
		{Resource: gate, Name: "wait", Duration: 1200 * ms},
		{Resource: node("demo-controlplane-01"), Name: "cordon", Duration: 100 * ms},
		{Resource: node("demo-controlplane-01"), Name: "drain", Duration: 2 * time.Second},
		{Resource: machine("demo-controlplane-01"), Name: "upgrade-talos", Duration: 14 * time.Second},
		{Resource: machine("demo-controlplane-01"), Name: "restart", Duration: time.Second},
		{Resource: machine("demo-controlplane-01"), Name: "wait", Duration: 38 * time.Second},
		{Resource: machine("demo-controlplane-01"), Name: "apply-config", Duration: 200 * ms},
		{Resource: node("demo-controlplane-01"), Name: "uncordon", Duration: 100 * ms},
		{Resource: node("demo-worker-01"), Name: "cordon", Batch: 1, Duration: 100 * ms},
		{Resource: node("demo-worker-02"), Name: "cordon", Batch: 1, Duration: 100 * ms},
		{Resource: node("demo-worker-01"), Name: "drain", Batch: 1, Duration: 3 * time.Second},
		{Resource: node("demo-worker-02"), Name: "drain", Batch: 1, Duration: 5 * time.Minute,
			Err: "draining demo-worker-02: the PodDisruptionBudget web/<pdb> | blocks **eviction** @oncall\nsecond line"},
		{Resource: machine("demo-worker-01"), Name: "upgrade-talos", Batch: 1, Duration: 12 * time.Second},
		{Resource: machine("demo-worker-01"), Name: "restart", Batch: 1, Unfinished: true, Duration: 4 * time.Second},
		{Resource: machine("demo-controlplane-01"), Name: "upgrade-kubernetes (kubelet → v1.35.0)", Duration: 900 * ms},
		{Resource: plan.Resource{Kind: plan.KindCluster, Name: "kube-proxy"}, Name: "upgrade-kubernetes (kube-proxy → v1.35.0)", Duration: 300 * ms,
			Err: "patching the DaemonSet: timeout"},
	}
}

func TestStepsMarkdown(t *testing.T) {
	t.Parallel()
	got := report.StepsMarkdown(rolloutSteps(), 65536, "https://agent.example/plans/converge-abc")
	golden(t, filepath.Join("testdata", "rollout-steps.md.golden"), got)
	for _, want := range []string{
		"- `demo-controlplane-01`: cordon 0.1s, drain 2.0s, upgrade-talos 14s, restart 1.0s, wait 38s, apply-config 0.2s, uncordon 0.1s, upgrade-kubernetes (kubelet → v1.35.0) 0.9s\n",
		"- `demo-worker-01` (batch 1, in parallel): cordon 0.1s, drain 3.0s, upgrade-talos 12s, restart **did not finish** (ran 4.0s)\n",
		"- `demo-worker-02` (batch 1, in parallel): cordon 0.1s, drain **failed** after 5m0s: ",
		"- the whole cluster: 2 steps (health gates, kube-proxy, networks, state), 1.5s in all; upgrade-kubernetes (kube-proxy → v1.35.0) **failed** after 0.3s: patching the DaemonSet: timeout\n",
		"(3 nodes, 16 steps, 2 failed)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the steps lack %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"<pdb>", "<pdb> |", "**eviction**", "@oncall", "second line", "<details>"} {
		if strings.Contains(got, bad) {
			t.Errorf("the steps hold %q unescaped (or folded when short):\n%s", bad, got)
		}
	}
	if report.StepsMarkdown(nil, 65536, "") != "" {
		t.Error("no steps render as something")
	}
}

// TestStepsMarkdownFoldsAndCuts: many nodes are folded in <details>, and
// a list longer than the limit is cut at a node's line, with a link to
// the run's page, never over the limit.
func TestStepsMarkdownFoldsAndCuts(t *testing.T) {
	t.Parallel()
	var steps []report.Step
	for i := range 400 {
		n := plan.Resource{Kind: plan.KindMachine, Name: fmt.Sprintf("big-worker-%03d", i)}
		for _, name := range []string{"cordon", "drain", "upgrade-talos", "restart", "wait", "uncordon"} {
			steps = append(steps, report.Step{Resource: n, Name: name, Batch: 1 + i/10, Duration: time.Duration(i) * time.Second})
		}
	}
	full := report.StepsMarkdown(steps, 1<<20, "")
	if !strings.HasPrefix(full, "<details><summary>Steps per node: 400 nodes, 2400 steps</summary>") || !strings.HasSuffix(full, "</details>\n") {
		t.Fatalf("a long list is not folded:\n%.300s", full)
	}
	if strings.Count(full, "\n- `big-worker-") != 400 {
		t.Errorf("the full list lacks nodes")
	}
	if got := report.StepsMarkdown(steps, 100, ""); got != "" {
		t.Errorf("a limit of 100 bytes gives %q", got)
	}
	for _, limit := range []int{16000, 3000, 500} {
		got := report.StepsMarkdown(steps, limit, "https://agent.example/plans/x")
		if len(got) > limit {
			t.Errorf("limit %d: %d bytes", limit, len(got))
		}
		if !strings.Contains(got, "more lines left out to keep the comment short: [the run's page](https://agent.example/plans/x)") {
			t.Errorf("limit %d: the cut is not said:\n%s", limit, got)
		}
		if !strings.HasSuffix(got, "</details>\n") {
			t.Errorf("limit %d: the fold is not closed", limit)
		}
		for _, line := range strings.Split(got, "\n") {
			if strings.HasPrefix(line, "- `big-worker-") && !strings.Contains(line, ", uncordon ") {
				t.Errorf("limit %d: a node's line was cut: %q", limit, line)
			}
		}
	}
}
