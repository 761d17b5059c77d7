package reconcile

import (
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// components are the control-plane components a Kubernetes upgrade moves
// on each control plane, in the order Talos's own tooling does.
var components = []string{machineconfig.APIServer, machineconfig.ControllerManager, machineconfig.Scheduler}

// planKubernetes plans the Kubernetes upgrade from the versions the nodes
// run (each node's kubelet and components, from its running config) to
// cluster.yaml's, one minor at a time: per hop the API server, controller
// manager and scheduler of each control plane in turn, then kube-proxy,
// then every kubelet. It refuses a downgrade, a version it cannot read,
// and a start that the new Talos version does not run.
func (ro *rollout) planKubernetes(p *plan.Plan) error {
	c := ro.want.Cluster
	target := c.Kubernetes.Version
	var lo, hi string
	var unread []string
	for _, h := range ro.gate.machines {
		i := slices.IndexFunc(ro.rolls, func(r roll) bool { return r.hostname == h })
		if i < 0 {
			unread = append(unread, h)
			continue
		}
		for _, v := range runningKubernetes(ro.rolls[i]) {
			if lo == "" || older(v, lo) {
				lo = v
			}
			if hi == "" || older(hi, v) {
				hi = v
			}
		}
	}
	if lo == "" {
		return nil // no node was read: nothing runs yet, or the plan is incomplete for each
	}
	done := lo != "" && sameVersion(lo, target) && sameVersion(hi, target)
	if len(unread) > 0 && !done {
		p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "kubernetes.version"},
			fmt.Sprintf("the running Kubernetes version of %s could not be read: no machine config is generated or applied until it can be, since a config at the wrong version would skip a minor", strings.Join(unread, ", ")))
		return nil
	}
	if done || lo == "" {
		return nil
	}
	switch {
	case older(target, hi) && older(target, ro.obs.Kube.Version):
		return nil // refused by refuseVersions
	case older(target, hi):
		p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "kubernetes.version"},
			fmt.Sprintf("kubernetes.version %s -> %s: downgrades are not supported", hi, target))
		return nil
	case minorsApart(lo, hi) > 1:
		p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "kubernetes.version"},
			fmt.Sprintf("the nodes run Kubernetes versions more than one minor apart (%s to %s): this is not a state an upgrade leaves; investigate before converging", lo, hi))
		return nil
	}
	if rlo, _, ok := spec.KubernetesRange(c.Talos.Version); ok && older(lo, rlo+".0") && minorsApart(lo, rlo+".0") > 0 {
		p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "kubernetes.version"},
			fmt.Sprintf("Talos %s runs Kubernetes %s and later, but the cluster runs %s: upgrade Kubernetes to %s with the current talos.version first", c.Talos.Version, rlo, lo, rlo))
		return nil
	}
	hops := hopVersions(lo, hi, target)
	from := lo
	base := map[string][]byte{}
	for _, r := range ro.rolls {
		base[r.hostname] = r.after
		if base[r.hostname] == nil {
			base[r.hostname] = ro.want.Configs[r.hostname]
		}
	}
	for i, v := range hops {
		hop := fmt.Sprintf("Kubernetes hop %d of %d (%s -> %s)", i+1, len(hops), from, v)
		if err := ro.planHop(p, hop, from, v, base); err != nil {
			return err
		}
		from = v
	}
	return nil
}

// runningKubernetes lists the Kubernetes versions a node runs: its
// kubelet's and, on a control plane, each component's, as its running
// config names them.
func runningKubernetes(r roll) []string {
	cfg, err := machineconfig.Parse(r.facts.Config)
	if err != nil || cfg.Machine() == nil {
		return nil
	}
	var out []string
	if v := kube.ImageTag(cfg.Machine().Kubelet().Image()); v != "" {
		out = append(out, v)
	}
	if r.controlPlane {
		for _, comp := range components {
			if img, err := machineconfig.ComponentImage(r.facts.Config, comp); err == nil && kube.ImageTag(img) != "" {
				out = append(out, kube.ImageTag(img))
			}
		}
	}
	return out
}

// hopVersions returns the versions a Kubernetes upgrade goes through from
// lo (hi when an interrupted upgrade moved some parts already) to target:
// every minor in between, none skipped.
func hopVersions(lo, hi, target string) []string {
	var hops []string
	cur := lo
	if !sameVersion(lo, hi) {
		hops, cur = append(hops, hi), hi
	}
	for minorsApart(cur, target) > 0 {
		next := target
		if minorsApart(cur, target) > 1 {
			next = latestPatch(nextMinor(cur))
		}
		hops, cur = append(hops, next), next
	}
	if !sameVersion(cur, target) {
		hops = append(hops, target)
	}
	return hops
}

// latestPatch returns the release of a Kubernetes minor line (v1.36) an
// intermediate hop goes to: the one the Talos machinery of this build
// defaults to when it is of that line, else the line's first release.
func latestPatch(line string) string {
	def := "v" + constants.DefaultKubernetesVersion
	if strings.HasPrefix(def, line+".") {
		return def
	}
	return line + ".0"
}

// planHop adds the steps of one Kubernetes hop. base holds, by hostname,
// the config each node runs when the hop starts; it is updated to the
// configs the hop leaves.
func (ro *rollout) planHop(p *plan.Plan, hop, from, to string, base map[string][]byte) error {
	add := func(ch plan.Change) {
		ch.Phase, ch.Domain = plan.PhaseUpgrade, orDomain(ch.Domain, plan.DomainTalos)
		ch.Action = plan.ActionUpgradeKubernetes
		ch.Attributes = append(ch.Attributes, plan.Attribute{Key: "kubernetes", Value: from + " -> " + to})
		p.Add(ch)
	}
	final := map[string][]byte{}
	for _, r := range ro.rolls {
		tv := r.facts.Version
		if r.upgradeTo != "" {
			tv = r.upgradeTo
		}
		cfg, err := ro.want.ConfigAt(r.hostname, tv, to)
		if err != nil {
			return fmt.Errorf("generating the machine config of %s at Kubernetes %s: %w", r.hostname, to, err)
		}
		final[r.hostname] = cfg
	}
	var pulls []pullOn
	for _, r := range ro.rolls {
		on := pullOn{nodeRef: r.nodeRef, kubelet: kubeletImage(final[r.hostname])}
		if r.controlPlane {
			for _, comp := range components {
				if img, err := machineconfig.ComponentImage(final[r.hostname], comp); err == nil {
					on.images = append(on.images, img)
				}
			}
		}
		pulls = append(pulls, on)
	}
	add(plan.Change{Resource: plan.Resource{Kind: plan.KindCluster, Name: "images"},
		Reason:  fmt.Sprintf("%s: pre-pull the control-plane components' images on each control plane and the kubelet's on every node, so that each restarts at once", hop),
		Expects: "the nodes answer",
		Op:      prePull{nodes: pulls}})
	var proxyImage string
	for _, r := range ro.rolls {
		if !r.controlPlane {
			continue
		}
		cfg := base[r.hostname]
		for _, comp := range components {
			next, err := machineconfig.WithComponentVersion(cfg, comp, to)
			if err != nil {
				return fmt.Errorf("the machine config of %s: %w", r.hostname, err)
			}
			cfg = next
			add(plan.Change{Resource: plan.Resource{Kind: plan.KindMachine, Name: r.hostname},
				Reason:     fmt.Sprintf("%s: %s on %s, live; then its pod must run %s and be Ready", hop, comp, r.hostname, to),
				Attributes: []plan.Attribute{{Key: "component", Value: comp}},
				Expects:    "the node answers",
				Op:         setComponent{nodeRef: r.nodeRef, component: comp, version: to, config: cfg}})
		}
		if proxyImage == "" {
			proxyImage = kubeProxyImage(final[r.hostname])
		}
	}
	if proxyImage != "" {
		add(plan.Change{Domain: plan.DomainKube, Resource: plan.Resource{Kind: plan.KindCluster, Name: "kube-proxy"},
			Reason:     fmt.Sprintf("%s: the kube-proxy DaemonSet's image, rolled out node by node by its controller", hop),
			Attributes: []plan.Attribute{{Key: "image", Value: proxyImage}},
			Expects:    "the DaemonSet kube-system/kube-proxy exists",
			Op:         setKubeProxy{image: proxyImage, version: to}})
	}
	for _, r := range ro.rolls {
		add(plan.Change{Resource: plan.Resource{Kind: plan.KindMachine, Name: r.hostname},
			Reason:     fmt.Sprintf("%s: the kubelet of %s, live, with its whole config at %s; then the node must report kubelet %s and be Ready", hop, r.hostname, to, to),
			Attributes: []plan.Attribute{{Key: "component", Value: "kubelet"}},
			Expects:    "the node answers",
			Op:         setKubelet{nodeRef: r.nodeRef, version: to, config: final[r.hostname]}})
		base[r.hostname] = final[r.hostname]
	}
	return nil
}

// kubeletImage returns the kubelet image a config names.
func kubeletImage(config []byte) string {
	cfg, err := machineconfig.Parse(config)
	if err != nil || cfg.Machine() == nil {
		return ""
	}
	return cfg.Machine().Kubelet().Image()
}

// kubeProxyImage returns the kube-proxy image a config names, "" when it
// disables kube-proxy.
func kubeProxyImage(config []byte) string {
	cfg, err := machineconfig.Parse(config)
	if err != nil || cfg.Cluster() == nil || !cfg.Cluster().Proxy().Enabled() {
		return ""
	}
	return cfg.Cluster().Proxy().Image()
}

func orDomain(d, def plan.Domain) plan.Domain {
	if d == "" {
		return def
	}
	return d
}
