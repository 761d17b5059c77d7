package check

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// SchemaVersion is the version of the Report's JSON shape
// (docs/check-json.md).
const SchemaVersion = 1

// Component names.
const (
	ComponentTalos      = "talos"
	ComponentKubernetes = "kubernetes"
)

// Scopes: what a report compared.
const (
	// ScopeCluster: the pins were compared with the releases and with the
	// running cluster.
	ScopeCluster = "cluster"
	// ScopeVersions: only the pins against the releases, and the config
	// warnings (the cluster does not exist yet, or was not read).
	ScopeVersions = "versions"
)

// States of a Fact.
const (
	StateInSync  = "in_sync"
	StateDrift   = "drift"
	StateUnknown = "unknown"
	// StateDeferred is a plugin's only: the cluster has no API to ask.
	StateDeferred = "deferred"
)

// Finding kinds: each finding needs attention.
const (
	KindUpdate     = "update"
	KindDrift      = "drift"
	KindCordon     = "cordon"
	KindIncomplete = "incomplete"
)

// Update kinds.
const (
	UpdatePatch = "patch"
	UpdateMinor = "minor"
)

// Report is what one check found. Its JSON form is stable
// (docs/check-json.md): slices are never nil.
type Report struct {
	Version   int       `json:"version"`
	Cluster   string    `json:"cluster"`
	CheckedAt time.Time `json:"checked_at"`
	// NeedsAttention is the exit decision: an update to take, drift, a
	// cordon, or a check that could not finish.
	NeedsAttention bool `json:"needs_attention"`
	// Incomplete is set when a source could not be read; the reasons say
	// which and why.
	Incomplete        bool     `json:"incomplete"`
	IncompleteReasons []string `json:"incomplete_reasons"`
	// Scope is ScopeCluster or ScopeVersions; ScopeReason says why only
	// the versions were checked.
	Scope       string `json:"scope"`
	ScopeReason string `json:"scope_reason"`
	// Components are Talos, then Kubernetes.
	Components []Component `json:"components"`
	// KubernetesAPI is the API server's version against
	// kubernetes.version; nil when the running cluster was not compared.
	KubernetesAPI *Fact `json:"kubernetes_api"`
	// Nodes are the machines the provider owns, by name.
	Nodes []Node `json:"nodes"`
	// Missing are machines cluster.yaml wants that do not exist.
	Missing []string `json:"missing"`
	// Cordoned are the Kubernetes nodes marked unschedulable, by name.
	Cordoned []string `json:"cordoned"`
	// Warnings are the config warnings of cluster.yaml.
	Warnings []string `json:"warnings"`
	// Plugins are the configured plugins (argocd, charts, rancher) against
	// cluster.yaml, in the order they run; empty when the running cluster
	// was not compared.
	Plugins []Plugin `json:"plugins"`
	// Findings is everything that needs attention, in a fixed order:
	// updates, drift, cordons, then incomplete sources.
	Findings []Finding `json:"findings"`
}

// Component is one pinned component against its releases.
type Component struct {
	Name       string `json:"name"`
	Repository string `json:"repository"`
	Pinned     string `json:"pinned"`
	// PinnedReleased is false when the pin is not among the published
	// releases (a typo, or a version that was withdrawn).
	PinnedReleased bool `json:"pinned_released"`
	// LatestPatch is the newest release of the pinned minor.
	LatestPatch string `json:"latest_patch"`
	// PatchesBehind counts the releases of the pinned minor newer than
	// the pin: the value of taloscluster_patch_releases_behind (taloscluster_update_available is 1 when an update is available).
	PatchesBehind int `json:"patches_behind"`
	// LatestSupported is the newest release the other pin allows: for
	// Kubernetes, inside the range the pinned Talos runs; for Talos, a
	// release that runs the pinned Kubernetes.
	LatestSupported string `json:"latest_supported"`
	// Latest is the newest release overall.
	Latest string `json:"latest"`
	// Supported is, for Kubernetes, the range of minors the pinned Talos
	// runs; nil for Talos and when the Talos minor is not in the table.
	Supported *SupportRange `json:"supported"`
	// Update is the next version to move to, nil when there is none.
	Update *Update `json:"update"`
	// Notes are facts for a person that need no action by themselves,
	// such as a newer minor the pinned Talos does not run.
	Notes []string `json:"notes"`
	// Unknown says why the releases could not be read; the fields above
	// other than Name, Repository and Pinned are then empty.
	Unknown string `json:"unknown"`
}

// SupportRange is an inclusive range of minors, such as v1.31 to v1.36.
type SupportRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Update is the next version of a component to move to.
type Update struct {
	// Kind is UpdatePatch (a newer patch of the pinned minor) or
	// UpdateMinor (the newest patch of the next minor the other pin
	// allows; upgrades go one minor at a time).
	Kind    string `json:"kind"`
	Version string `json:"version"`
}

// Node is one machine of the cluster against cluster.yaml.
type Node struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// InClusterYAML is false for a machine the provider owns that no pool
	// of cluster.yaml has (left over from a larger count).
	InClusterYAML bool `json:"in_cluster_yaml"`
	// Talos is the Talos version the node runs against talos.version.
	Talos Fact `json:"talos"`
	// Kubelet is the node's kubelet version against kubernetes.version.
	Kubelet Fact `json:"kubelet"`
	// Installer is the installer image (schematic and version) of the
	// node's running config against the one cluster.yaml gives it.
	Installer Fact `json:"installer"`
	// Cordoned is set when the node is marked unschedulable.
	Cordoned bool `json:"cordoned"`
}

// Fact is one desired value against the running one.
type Fact struct {
	Want string `json:"want"`
	// Have is the running value, "" when unknown.
	Have string `json:"have"`
	// State is StateInSync, StateDrift or StateUnknown.
	State string `json:"state"`
	// Reason says why the fact is unknown, or what differs.
	Reason string `json:"reason"`
}

// Plugin is one configured plugin against cluster.yaml.
type Plugin struct {
	Name string `json:"name"`
	// State is StateInSync, StateDrift (a converge would make steps),
	// StateDeferred (the cluster has no API to ask yet) or StateUnknown
	// (what it manages could not be read).
	State string `json:"state"`
	// Reason says why the plugin is deferred or unknown.
	Reason string `json:"reason"`
	// Steps are what a converge would do, one line each.
	Steps []string `json:"steps"`
}

// Finding is one thing that needs attention.
type Finding struct {
	// Kind is KindUpdate, KindDrift, KindCordon or KindIncomplete.
	Kind string `json:"kind"`
	// Subject is a component, a node, or the source that failed
	// ("releases", "cluster", "talos", "kubernetes").
	Subject string `json:"subject"`
	Message string `json:"message"`
}

// Options are what Run compares.
type Options struct {
	// Cluster is the loaded cluster.yaml; required.
	Cluster *spec.Cluster
	// Warnings are the load warnings.
	Warnings []spec.Problem
	// Releases lists upstream releases; nil makes the check incomplete.
	Releases Source
	// Observation is the running cluster as reconcile.Engine.Observe read
	// it. When nil, Observe is called (in parallel with the release
	// listings); when both are nil, the running cluster is not compared
	// and NotObserved says why.
	Observation *reconcile.Observation
	Observe     func(context.Context) (*reconcile.Observation, error)
	NotObserved string
	// Plugins says how the configured plugins stand in the observation
	// (reconcile.Engine.PluginChecks); nil leaves them out.
	Plugins func(context.Context, *reconcile.Observation) []reconcile.PluginCheck
	// Redact removes secrets from every message of the report; nil keeps
	// the messages as they are.
	Redact func(string) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Run checks a cluster: the pins against the releases, and against the
// running cluster when there is one. A source that cannot be read makes the
// report incomplete (and NeedsAttention), not an error; the error is only
// for options that cannot be used. Run changes nothing.
func Run(ctx context.Context, o Options) (*Report, error) {
	c := o.Cluster
	if c == nil {
		return nil, errors.New("check: no cluster given")
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	r := newReport(c.Name, now().UTC().Truncate(time.Second))
	for _, w := range o.Warnings {
		r.Warnings = append(r.Warnings, w.String())
	}

	var (
		wg                sync.WaitGroup
		talosRels, k8sRel []Release
		talosErr, k8sErr  error
		obs               = o.Observation
		obsErr            error
	)
	if o.Releases == nil {
		talosErr = errors.New("no release source is configured")
		k8sErr = talosErr
	} else {
		wg.Go(func() { talosRels, talosErr = o.Releases.Releases(ctx, TalosRepository) })
		wg.Go(func() { k8sRel, k8sErr = o.Releases.Releases(ctx, KubernetesRepository) })
	}
	if obs == nil && o.Observe != nil {
		wg.Go(func() { obs, obsErr = o.Observe(ctx) })
	}
	wg.Wait()

	var talosIx, k8sIx *Index
	if talosErr == nil {
		ix := NewIndex(talosRels)
		talosIx = &ix
	}
	if k8sErr == nil {
		ix := NewIndex(k8sRel)
		k8sIx = &ix
	}
	talos := Talos(c.Talos.Version, c.Kubernetes.Version, talosIx)
	if talosErr != nil {
		talos.Unknown = talosErr.Error()
		r.incomplete("releases", talosErr.Error())
	}
	k8s := Kubernetes(c.Kubernetes.Version, c.Talos.Version, k8sIx)
	if k8sErr != nil {
		k8s.Unknown = k8sErr.Error()
		r.incomplete("releases", k8sErr.Error())
	}
	r.Components = []Component{talos, k8s}

	switch {
	case obsErr != nil:
		r.ScopeReason = "the running cluster could not be read: only versions and warnings were checked"
		r.incomplete("cluster", obsErr.Error())
	case obs == nil:
		r.ScopeReason = o.NotObserved
		if r.ScopeReason == "" {
			r.ScopeReason = "the running cluster was not read: only versions and warnings were checked"
		}
	default:
		compareCluster(r, c, obs)
		if o.Plugins != nil && r.Scope == ScopeCluster {
			comparePlugins(r, o.Plugins(ctx, obs))
		}
	}
	r.decide()
	if o.Redact != nil {
		r.redact(o.Redact)
	}
	return r, nil
}

func newReport(cluster string, at time.Time) *Report {
	return &Report{
		Version: SchemaVersion, Cluster: cluster, CheckedAt: at, Scope: ScopeVersions,
		IncompleteReasons: []string{}, Components: []Component{}, Nodes: []Node{},
		Missing: []string{}, Cordoned: []string{}, Warnings: []string{}, Plugins: []Plugin{}, Findings: []Finding{},
	}
}

// incomplete records a source that could not be read, once per message.
func (r *Report) incomplete(source, reason string) {
	msg := source + ": " + reason
	if !slices.Contains(r.IncompleteReasons, msg) {
		r.IncompleteReasons = append(r.IncompleteReasons, msg)
	}
}

// Talos compares the Talos pin with the Talos releases (nil: unknown).
// A newer Talos minor is an update only when it runs the pinned
// Kubernetes minor, or when its support is not in the table (not known to
// be incompatible).
func Talos(pinned, kubePinned string, ix *Index) Component {
	comp := Component{Name: ComponentTalos, Repository: TalosRepository, Pinned: pinned, Notes: []string{}}
	if ix == nil {
		return comp
	}
	kube, kubeOK := ParseVersion(kubePinned)
	allowed := func(v Version) (bool, string) {
		lo, hi, known := spec.KubernetesRange(v.String())
		if !known || !kubeOK {
			return true, ""
		}
		rng, ok := parseRange(lo, hi)
		if !ok || rng.Contains(kube.Line()) {
			return true, ""
		}
		return false, fmt.Sprintf("talos %s is released, but it runs kubernetes %s, not the pinned %s: move kubernetes first", v, rng, kube)
	}
	evaluate(&comp, *ix, allowed)
	return comp
}

// Kubernetes compares the Kubernetes pin with the Kubernetes releases
// (nil: unknown). Only releases inside the range the pinned Talos runs are
// updates; newer ones are notes.
func Kubernetes(pinned, talosPinned string, ix *Index) Component {
	comp := Component{Name: ComponentKubernetes, Repository: KubernetesRepository, Pinned: pinned, Notes: []string{}}
	lo, hi, known := spec.KubernetesRange(talosPinned)
	rng, rngOK := parseRange(lo, hi)
	if known && rngOK {
		comp.Supported = &SupportRange{From: lo, To: hi}
	}
	if ix == nil {
		return comp
	}
	allowed := func(v Version) (bool, string) {
		if !known || !rngOK || rng.Contains(v.Line()) {
			return true, ""
		}
		return false, fmt.Sprintf("kubernetes %s is released, but talos %s runs kubernetes %s: not an update to take with this talos", v, talosPinned, rng)
	}
	evaluate(&comp, *ix, allowed)
	if !known {
		comp.Notes = append(comp.Notes, fmt.Sprintf("the kubernetes versions talos %s runs are not known here: newer minors were not checked against it", talosPinned))
	}
	return comp
}

func parseRange(lo, hi string) (Range, bool) {
	from, ok1 := ParseMinor(lo)
	to, ok2 := ParseMinor(hi)
	return Range{From: from, To: to}, ok1 && ok2
}

// evaluate fills in a component from its release index; allowed says
// whether a release can be moved to with the other pin, and if not why.
func evaluate(comp *Component, ix Index, allowed func(Version) (bool, string)) {
	if latest, ok := ix.Latest(); ok {
		comp.Latest = latest.String()
	}
	pinned, ok := ParseVersion(comp.Pinned)
	if !ok {
		comp.Notes = append(comp.Notes, fmt.Sprintf("the pin %q is not a version", comp.Pinned))
		return
	}
	comp.PinnedReleased = ix.Contains(pinned)
	if !comp.PinnedReleased {
		comp.Notes = append(comp.Notes, fmt.Sprintf("%s is not among the published releases of %s", pinned, comp.Repository))
	}
	if lp, ok := ix.LatestPatch(pinned.Line()); ok {
		comp.LatestPatch = lp.String()
	}
	comp.PatchesBehind = ix.PatchesBehind(pinned)
	if ls, ok := ix.LatestWhere(func(v Version) bool { ok, _ := allowed(v); return ok }); ok {
		comp.LatestSupported = ls.String()
	}
	if lp, ok := ix.LatestPatch(pinned.Line()); ok && lp.Compare(pinned) > 0 {
		comp.Update = &Update{Kind: UpdatePatch, Version: lp.String()}
	}
	var blocked string
	for _, line := range ix.LinesAfter(pinned.Line()) {
		newest, _ := ix.LatestPatch(line)
		ok, why := allowed(newest)
		if !ok {
			blocked = why // the newest line that cannot be taken is noted
			continue
		}
		if comp.Update == nil {
			comp.Update = &Update{Kind: UpdateMinor, Version: newest.String()}
		}
	}
	if blocked != "" {
		comp.Notes = append(comp.Notes, blocked)
	}
}

// compareCluster fills in the running cluster's side of the report.
func compareCluster(r *Report, c *spec.Cluster, obs *reconcile.Observation) {
	machines := obs.Inventory.Machines()
	switch {
	case obs.Offline:
		r.ScopeReason = "offline: the running cluster was not read; only versions and warnings were checked"
		return
	case len(machines) == 0 && !obs.State.Secrets:
		r.ScopeReason = "the cluster does not exist yet (no machines, no " + reconcile.TalosSecretsFile + "): only versions and warnings were checked"
		return
	case len(machines) == 0:
		r.ScopeReason = "no machine of the cluster exists yet: only versions and warnings were checked"
		return
	}
	r.Scope, r.ScopeReason = ScopeCluster, ""

	desired := map[string]machineconfig.Machine{}
	var order []string
	for _, m := range machineconfig.Machines(c) {
		desired[m.Hostname] = m
		order = append(order, m.Hostname)
	}
	kubeNodes := map[string]int{}
	for i, n := range obs.Kube.Nodes {
		kubeNodes[n.Name] = i
	}
	owned := map[string]bool{}
	for _, m := range machines {
		owned[m.Hostname] = true
		want, inYAML := desired[m.Hostname]
		n := Node{Name: m.Hostname, Role: string(m.Role), InClusterYAML: inYAML}
		n.Talos, n.Installer = talosFacts(r, c, m, want, inYAML, obs)
		n.Kubelet = kubeletFact(r, c, m.Hostname, obs, kubeNodes)
		if i, ok := kubeNodes[m.Hostname]; ok && obs.Kube.Unknown == "" {
			n.Cordoned = obs.Kube.Nodes[i].Unschedulable
		}
		r.Nodes = append(r.Nodes, n)
	}
	slices.SortFunc(r.Nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	for _, h := range order {
		if !owned[h] {
			r.Missing = append(r.Missing, h)
		}
	}
	if obs.Kube.Unknown == "" {
		for _, n := range obs.Kube.Nodes {
			if n.Unschedulable {
				r.Cordoned = append(r.Cordoned, n.Name)
			}
		}
		slices.Sort(r.Cordoned)
		api := versionFact(c.Kubernetes.Version, obs.Kube.Version)
		r.KubernetesAPI = &api
	} else {
		r.KubernetesAPI = &Fact{Want: c.Kubernetes.Version, State: StateUnknown, Reason: obs.Kube.Unknown}
	}
}

// talosFacts compares a machine's Talos version and installer image.
func talosFacts(r *Report, c *spec.Cluster, m reconcile.Machine, want machineconfig.Machine, inYAML bool, obs *reconcile.Observation) (Fact, Fact) {
	talos := Fact{Want: c.Talos.Version}
	inst := Fact{}
	if inYAML {
		factory := ""
		if c.Proxmox != nil {
			factory = c.Proxmox.ImageFactory
		}
		img, err := machineconfig.InstallerImage(factory, c.Extensions(want.Pool), c.Talos.Version)
		if err != nil {
			inst.Reason = "the desired installer image: " + err.Error()
		}
		inst.Want = img
	}
	unknown := func(reason string) (Fact, Fact) {
		talos.State, talos.Reason = StateUnknown, reason
		inst.State, inst.Reason = StateUnknown, reason
		return talos, inst
	}
	facts, asked := obs.Nodes[m.Hostname]
	switch {
	case !asked && len(m.Addresses) == 0:
		why := "the machine reports no address"
		if m.NoAddress != "" {
			why += " (" + m.NoAddress + ")"
		} else if !m.Running {
			why = "the machine is stopped"
		}
		r.incomplete(m.Hostname, why)
		return unknown(why)
	case !asked:
		why := obs.TalosUnknown
		if why == "" {
			why = "the node was not asked"
		}
		r.incomplete("talos", why)
		return unknown(why)
	case facts.Unknown != "":
		r.incomplete(m.Hostname, facts.Unknown)
		return unknown(facts.Unknown)
	case facts.Maintenance:
		why := "the node is in maintenance mode: it runs its boot media without a machine config"
		talos.Have, talos.State, talos.Reason = facts.Version, StateDrift, why
		inst.State, inst.Reason = StateDrift, why
		return talos, inst
	}
	talos = versionFact(c.Talos.Version, facts.Version)
	switch {
	case !inYAML:
		inst.Have, inst.State, inst.Reason = facts.Installer, StateDrift, "no pool of cluster.yaml has this machine"
	case inst.Want == "":
		inst.Have, inst.State = facts.Installer, StateUnknown
		r.incomplete(m.Hostname, inst.Reason)
	case facts.Installer == "":
		why := facts.ConfigUnknown
		if why == "" {
			why = "the running config names no installer image"
		}
		inst.State, inst.Reason = StateUnknown, why
		r.incomplete(m.Hostname, "running config: "+why)
	case facts.Installer == inst.Want:
		inst.Have, inst.State = facts.Installer, StateInSync
	default:
		inst.Have, inst.State, inst.Reason = facts.Installer, StateDrift, installerDifference(facts.Installer, inst.Want)
	}
	return talos, inst
}

// kubeletFact compares a node's kubelet version.
func kubeletFact(r *Report, c *spec.Cluster, host string, obs *reconcile.Observation, kubeNodes map[string]int) Fact {
	f := Fact{Want: c.Kubernetes.Version}
	if obs.Kube.Unknown != "" {
		f.State, f.Reason = StateUnknown, obs.Kube.Unknown
		r.incomplete("kubernetes", obs.Kube.Unknown)
		return f
	}
	i, ok := kubeNodes[host]
	if !ok {
		f.State, f.Reason = StateUnknown, "not registered as a Kubernetes node"
		r.incomplete(host, f.Reason)
		return f
	}
	return versionFact(c.Kubernetes.Version, obs.Kube.Nodes[i].KubeletVersion)
}

// versionFact compares two versions, build metadata and a missing "v"
// aside.
func versionFact(want, have string) Fact {
	f := Fact{Want: want, Have: have}
	w, okW := ParseVersion(want)
	h, okH := ParseVersion(have)
	switch {
	case have == "":
		f.State, f.Reason = StateUnknown, "no version reported"
	case okW && okH && w.Compare(h) == 0, want == have:
		f.State = StateInSync
	default:
		f.State = StateDrift
	}
	return f
}

// apiSubject is the subject of a finding about the Kubernetes API server.
const apiSubject = "kubernetes-api"

// versionDiffers starts the reason of an installer image that differs
// only in its version tag.
const versionDiffers = "another version: "

// installerDifference says what differs between two installer images of
// the form <registry>/installer/<schematic>:<version>.
func installerDifference(have, want string) string {
	hRepo, hTag, _ := cutTag(have)
	wRepo, wTag, _ := cutTag(want)
	switch {
	case hRepo == wRepo && hTag != wTag:
		return versionDiffers + hTag + ", want " + wTag
	case hRepo != wRepo && hTag == wTag:
		return "another schematic or registry (extensions differ)"
	}
	return "another image"
}

func cutTag(image string) (repo, tag string, ok bool) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, "", false
	}
	return image[:i], image[i+1:], true
}

// decide lists the findings and makes the exit decision.
// comparePlugins records the plugins' standing: one drift finding per
// plugin with steps to make, and an incomplete source per plugin whose
// objects could not be read. A deferred plugin needs nothing yet.
// pluginSubject starts the subject of a plugin's finding.
const pluginSubject = "plugin "

func comparePlugins(r *Report, checks []reconcile.PluginCheck) {
	for _, pc := range checks {
		p := Plugin{Name: pc.Name, Reason: pc.Reason, Steps: slices.Clone(pc.Steps)}
		if p.Steps == nil {
			p.Steps = []string{}
		}
		switch pc.State {
		case reconcile.PluginInSync:
			p.State = StateInSync
		case reconcile.PluginDrift:
			p.State = StateDrift
		case reconcile.PluginDeferred:
			p.State = StateDeferred
		default:
			p.State = StateUnknown
			r.incomplete(pluginSubject+pc.Name, pc.Reason)
		}
		r.Plugins = append(r.Plugins, p)
	}
}

func (r *Report) decide() {
	for _, comp := range r.Components {
		if comp.Update == nil {
			continue
		}
		msg := fmt.Sprintf("%s %s -> %s: ", comp.Name, comp.Pinned, comp.Update.Version)
		if comp.Update.Kind == UpdatePatch {
			msg += fmt.Sprintf("a newer patch release (%s behind)", plural(comp.PatchesBehind, "patch release"))
		} else {
			msg += "a newer minor release"
			if comp.Name == ComponentKubernetes && comp.Supported != nil {
				msg += fmt.Sprintf(" that talos runs (%s to %s)", comp.Supported.From, comp.Supported.To)
			}
		}
		r.Findings = append(r.Findings, Finding{Kind: KindUpdate, Subject: comp.Name, Message: msg})
	}
	if api := r.KubernetesAPI; api != nil && api.State == StateDrift {
		r.Findings = append(r.Findings, Finding{Kind: KindDrift, Subject: apiSubject,
			Message: fmt.Sprintf("the Kubernetes API server runs %s, cluster.yaml pins %s", api.Have, api.Want)})
	}
	for _, n := range r.Nodes {
		if !n.InClusterYAML {
			r.Findings = append(r.Findings, Finding{Kind: KindDrift, Subject: n.Name,
				Message: n.Name + " exists but no pool of cluster.yaml has it"})
		}
		for _, f := range []struct {
			what string
			fact Fact
		}{{"talos", n.Talos}, {"kubelet", n.Kubelet}, {"installer", n.Installer}} {
			if f.fact.State != StateDrift || (f.what == "installer" && !n.InClusterYAML) {
				continue
			}
			msg := fmt.Sprintf("%s: %s %s, cluster.yaml wants %s", n.Name, f.what, orNone(f.fact.Have), orNone(f.fact.Want))
			switch {
			case f.what == "installer" && f.fact.Reason != "":
				// The images are long and in the node's facts.
				msg = fmt.Sprintf("%s: installer image: %s", n.Name, f.fact.Reason)
			case f.fact.Reason != "":
				msg += " (" + f.fact.Reason + ")"
			}
			r.Findings = append(r.Findings, Finding{Kind: KindDrift, Subject: n.Name, Message: msg})
		}
	}
	for _, h := range r.Missing {
		r.Findings = append(r.Findings, Finding{Kind: KindDrift, Subject: h,
			Message: h + " is in cluster.yaml but does not exist (converge creates it)"})
	}
	for _, p := range r.Plugins {
		if p.State != StateDrift {
			continue
		}
		msg := fmt.Sprintf("the %s plugin has %s to make", p.Name, plural(len(p.Steps), "step"))
		if len(p.Steps) > 0 {
			msg += ", first: " + p.Steps[0]
		}
		r.Findings = append(r.Findings, Finding{Kind: KindDrift, Subject: pluginSubject + p.Name, Message: msg})
	}
	for _, h := range r.Cordoned {
		r.Findings = append(r.Findings, Finding{Kind: KindCordon, Subject: h,
			Message: h + " is cordoned (unschedulable)"})
	}
	for _, reason := range r.IncompleteReasons {
		subject, _, _ := strings.Cut(reason, ": ")
		r.Findings = append(r.Findings, Finding{Kind: KindIncomplete, Subject: subject, Message: reason})
	}
	r.Incomplete = len(r.IncompleteReasons) > 0
	r.NeedsAttention = len(r.Findings) > 0
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// redact passes every message of the report through f.
func (r *Report) redact(f func(string) string) {
	each := func(s []string) {
		for i := range s {
			s[i] = f(s[i])
		}
	}
	each(r.IncompleteReasons)
	each(r.Warnings)
	r.ScopeReason = f(r.ScopeReason)
	for i := range r.Components {
		each(r.Components[i].Notes)
		r.Components[i].Unknown = f(r.Components[i].Unknown)
	}
	fact := func(x *Fact) {
		x.Have, x.Reason = f(x.Have), f(x.Reason)
	}
	if r.KubernetesAPI != nil {
		fact(r.KubernetesAPI)
	}
	for i := range r.Nodes {
		fact(&r.Nodes[i].Talos)
		fact(&r.Nodes[i].Kubelet)
		fact(&r.Nodes[i].Installer)
	}
	for i := range r.Plugins {
		r.Plugins[i].Reason = f(r.Plugins[i].Reason)
		each(r.Plugins[i].Steps)
	}
	for i := range r.Findings {
		r.Findings[i].Message = f(r.Findings[i].Message)
	}
}
