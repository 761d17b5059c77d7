package report_test

import (
	"fmt"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// fixtures are the plans rendered by the golden tests, by golden file stem.
var fixtures = map[string]func() *plan.Plan{
	"empty":       emptyPlan,
	"first-build": firstBuildPlan,
	"day-two":     dayTwoPlan,
	"hostile":     hostilePlan,
}

func emptyPlan() *plan.Plan {
	p := plan.New("edge")
	p.Commit = "9b1e4c7a2d3f5e6b8c0a1d2e3f4a5b6c7d8e9f01"
	return p
}

// firstBuildPlan is the first converge of a Proxmox cluster with three
// control planes and two workers. Changes are added out of order on
// purpose: the renderers must sort.
func firstBuildPlan() *plan.Plan {
	p := plan.New("edge")
	p.Commit = "4f2c1d9e8b7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d"

	type vm struct {
		name, node         string
		cores, memory, dsk int
	}
	vms := []vm{
		{"edge-worker-02", "pve2", 8, 16, 100},
		{"edge-worker-01", "pve1", 8, 16, 100},
		{"edge-controlplane-03", "pve3", 4, 8, 40},
		{"edge-controlplane-02", "pve2", 4, 8, 40},
		{"edge-controlplane-01", "pve1", 4, 8, 40},
	}
	for _, m := range vms {
		p.Add(plan.Change{
			Phase:    plan.PhaseCompute,
			Action:   plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindMachine, Name: m.name},
			Reason:   "new machine",
			Attributes: []plan.Attribute{
				{Key: "node", Value: m.node},
				{Key: "cores", Value: fmt.Sprint(m.cores)},
				{Key: "memory", Value: fmt.Sprintf("%d GB", m.memory)},
				{Key: "disk", Value: fmt.Sprintf("%d GB", m.dsk)},
				{Key: "storage", Value: "local-lvm"},
			},
		})
		p.Add(plan.Change{
			Phase:      plan.PhaseCompute,
			Action:     plan.ActionCreate,
			Resource:   plan.Resource{Kind: plan.KindCIData, Name: m.name},
			Reason:     "machine config ISO for the first boot",
			Attributes: []plan.Attribute{{Key: "storage", Value: "local"}},
		})
	}
	p.Add(plan.Change{
		Phase:    plan.PhaseBootstrap,
		Action:   plan.ActionBootstrap,
		Resource: plan.Resource{Kind: plan.KindMachine, Name: "edge-controlplane-01"},
		Reason:   "the cluster has never been bootstrapped",
	})
	p.Add(plan.Change{
		Phase:      plan.PhaseKubeconfig,
		Action:     plan.ActionCreate,
		Resource:   plan.Resource{Kind: plan.KindKubeconfig, Name: "kubeconfig"},
		Reason:     "fetched from the first control plane",
		Attributes: []plan.Attribute{{Key: "endpoint", Value: "https://203.0.113.10:6443"}},
	})
	p.Add(plan.Change{
		Phase:    plan.PhaseImage,
		Action:   plan.ActionCreate,
		Resource: plan.Resource{Kind: plan.KindImage, Name: "talos-v1.13.8-4a1b6c2d9e0f.iso"},
		Reason:   "boot ISO not found on iso storage",
		Attributes: []plan.Attribute{
			{Key: "version", Value: "v1.13.8"},
			{Key: "storage", Value: "local"},
			{Key: "extensions", Value: "siderolabs/iscsi-tools,siderolabs/tailscale"},
		},
	})
	p.Add(plan.Change{
		Phase:    plan.PhaseSecrets,
		Action:   plan.ActionCreate,
		Resource: plan.Resource{Kind: plan.KindTalosSecrets, Name: "talossecrets.yaml"},
		Reason:   "new cluster identity; no machines exist yet",
	})
	p.Add(plan.Change{
		Phase:      plan.PhaseNetwork,
		Action:     plan.ActionCreate,
		Resource:   plan.Resource{Kind: plan.KindResourcePool, Name: "taloscluster-edge"},
		Reason:     "holds the cluster's VMs",
		Attributes: []plan.Attribute{{Key: "comment", Value: "managed-by=taloscluster cluster=edge"}},
	})
	p.Add(plan.Change{
		Phase:    plan.PhaseNetwork,
		Action:   plan.ActionCreate,
		Resource: plan.Resource{Kind: plan.KindFirewallOptions, Name: "edge"},
		Reason:   "enable the VM firewall",
		Attributes: []plan.Attribute{
			{Key: "enable", Value: "1"},
			{Key: "policy_in", Value: "DROP"},
			{Key: "policy_out", Value: "ACCEPT"},
		},
	})
	for _, r := range []struct{ name, port, source string }{
		{"kubernetes", "6443", "100.64.0.0/10,198.51.100.0/24"},
		{"talos", "50000", "100.64.0.0/10"},
		{"https", "443", "192.0.2.0/24"},
		{"metrics", "9100", "198.51.100.7/32"},
	} {
		p.Add(plan.Change{
			Phase:    plan.PhaseNetwork,
			Action:   plan.ActionCreate,
			Resource: plan.Resource{Kind: plan.KindFirewallRule, Name: r.name},
			Reason:   "security." + r.name,
			Attributes: []plan.Attribute{
				{Key: "proto", Value: "tcp"},
				{Key: "port", Value: r.port},
				{Key: "source", Value: r.source},
			},
		})
	}
	p.Add(plan.Change{
		Phase:    plan.PhaseNetwork,
		Action:   plan.ActionCreate,
		Resource: plan.Resource{Kind: plan.KindTalosconfig, Name: "talosconfig"},
		Reason:   "client config for the new identity",
	})
	return p
}

// dayTwoPlan changes a running cluster: an update, a delete, a config
// apply with a diff, upgrades, a replacement and a refusal, with warnings.
func dayTwoPlan() *plan.Plan {
	p := plan.New("edge")
	p.Commit = "c0ffee1234567890c0ffee1234567890c0ffee12"
	p.Add(plan.Change{
		Phase:    plan.PhaseValidate,
		Action:   plan.ActionRefuse,
		Resource: plan.Resource{Kind: plan.KindMachine, Name: "edge-worker-02"},
		Reason:   "disk cannot shrink from 100 GB to 80 GB; keep 100 or replace the pool",
		Attributes: []plan.Attribute{
			{Key: "disk", Value: "100 GB -> 80 GB"},
		},
	})
	p.Add(plan.Change{
		Phase:    plan.PhaseNetwork,
		Action:   plan.ActionUpdate,
		Resource: plan.Resource{Kind: plan.KindFirewallRule, Name: "kubernetes"},
		Reason:   "security.kubernetes hosts changed",
		Attributes: []plan.Attribute{
			{Key: "source", Value: "100.64.0.0/10,198.51.100.0/24 -> 100.64.0.0/10"},
			{Key: "port", Value: "6443"},
		},
	})
	p.Add(plan.Change{
		Phase:    plan.PhaseNetwork,
		Action:   plan.ActionDelete,
		Resource: plan.Resource{Kind: plan.KindFirewallRule, Name: "metrics"},
		Reason:   "security.metrics removed from cluster.yaml",
		Attributes: []plan.Attribute{
			{Key: "port", Value: "9100"},
		},
	})
	p.Add(plan.Change{
		Phase:    plan.PhaseScaleDown,
		Action:   plan.ActionDelete,
		Resource: plan.Resource{Kind: plan.KindMachine, Name: "edge-worker-03"},
		Reason:   "workers.worker.count lowered from 3 to 2; drain, reset, delete",
		Attributes: []plan.Attribute{
			{Key: "node", Value: "pve3"},
		},
	})
	p.Add(plan.Change{
		Phase:    plan.PhaseApplyConfig,
		Action:   plan.ActionApplyConfig,
		Resource: plan.Resource{Kind: plan.KindMachine, Name: "edge-controlplane-01"},
		Reason:   "machine config changed",
		Attributes: []plan.Attribute{
			{Key: "mode", Value: "no-reboot"},
		},
		Diff: `--- edge-controlplane-01 (running)
+++ edge-controlplane-01 (desired)
@@ -12,6 +12,8 @@ machine:
   kubelet:
     extraArgs:
       rotate-server-certificates: "true"
+    extraConfig:
+      maxPods: 150
   network:
     hostname: edge-controlplane-01
@@ -40,3 +42,3 @@ cluster:
   secretboxEncryptionSecret: '***'
-  allowSchedulingOnControlPlanes: true
+  allowSchedulingOnControlPlanes: false
`,
	})
	p.Add(plan.Change{
		Phase:    plan.PhaseUpgrade,
		Action:   plan.ActionUpgradeKubernetes,
		Resource: plan.Resource{Kind: plan.KindCluster, Name: "edge"},
		Reason:   "one minor step toward kubernetes.version v1.36.1",
		Attributes: []plan.Attribute{
			{Key: "version", Value: "v1.34.6 -> v1.35.4"},
		},
	})
	for _, name := range []string{"edge-worker-01", "edge-controlplane-02", "edge-controlplane-01"} {
		p.Add(plan.Change{
			Phase:      plan.PhaseUpgrade,
			Action:     plan.ActionUpgradeTalos,
			Resource:   plan.Resource{Kind: plan.KindMachine, Name: name},
			Reason:     "talos.version changed",
			Attributes: []plan.Attribute{{Key: "version", Value: "v1.13.7 -> v1.13.8"}},
		})
	}
	p.Add(plan.Change{
		Phase:    plan.PhaseCompute,
		Action:   plan.ActionUpdate,
		Resource: plan.Resource{Kind: plan.KindMachine, Name: "edge-worker-01"},
		Reason:   "sizing takes effect when the VM next restarts",
		Attributes: []plan.Attribute{
			{Key: "memory", Value: "16 GB -> 32 GB"},
			{Key: "cores", Value: "8 -> 12"},
		},
	})
	p.Add(plan.Change{
		Phase:      plan.PhaseImage,
		Action:     plan.ActionReplace,
		Resource:   plan.Resource{Kind: plan.KindImage, Name: "talos-v1.13.8-4a1b6c2d9e0f.iso"},
		Reason:     "the uploaded ISO does not match its checksum",
		Attributes: []plan.Attribute{{Key: "storage", Value: "local"}},
	})
	p.Warn("controlplane.count is 3 but only 2 control planes answer; upgrades wait for the third")
	p.Warn("kubernetes.version v1.36.1 is two minors ahead of the running v1.34.6; this converge stops at v1.35.4, run it again for v1.36.1")
	return p
}

// hostilePlan carries strings that try to break each output format.
func hostilePlan() *plan.Plan {
	p := plan.New("team|<b>x</b>")
	p.Commit = "`rm -rf`"
	p.Add(plan.Change{
		Phase:    plan.PhaseCompute,
		Action:   plan.ActionCreate,
		Resource: plan.Resource{Kind: plan.KindMachine, Name: "a|b<img src=x onerror=alert(1)>"},
		Reason:   "line one\nline two\x1b[31m red",
		Attributes: []plan.Attribute{
			{Key: "label", Value: "x | y"},
			{Key: "note", Value: "**bold** _it_ [link](https://example.com) `code` $x$"},
		},
	})
	p.Add(plan.Change{
		Phase:    plan.PhaseApplyConfig,
		Action:   plan.ActionApplyConfig,
		Resource: plan.Resource{Kind: plan.KindMachine, Name: "- not a list"},
		Reason:   "1. not an ordered list",
		Diff:     "```\n</details>\n+ injected `` ticks\n\tindented\n",
	})
	p.Warn("# not a heading <script>alert(1)</script>")
	p.Refuse(plan.Resource{Kind: plan.KindFirewallRule, Name: "> quote"}, "& ~strike~ \\ backslash")
	return p
}
