package charts

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	helmkube "helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/release/common"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// DefaultGitHubAPI is where the gateway entry's latest release is asked.
const DefaultGitHubAPI = "https://api.github.com"

// Bounds of what the plugin waits for.
const (
	// helmTimeout bounds an install, upgrade or uninstall (the Python
	// tool's 600 s).
	helmTimeout = 10 * time.Minute
	// readyWait bounds the wait for MetalLB's controller and
	// cert-manager's webhook before their objects are applied.
	readyWait = 3 * time.Minute
	// maxObjects bounds the objects of one manifest.
	maxObjects = 2000
)

// Options configure the plugin.
type Options struct {
	// AllowURL, when set, is asked before every download (repository
	// index, chart archive, manifest, GitHub's API, and each redirect);
	// an error refuses it. The agent wires its endpoint policy here.
	AllowURL func(url string) error
	// RootCAs verifies the servers' certificates; nil is the system's
	// roots. Verification is always on.
	RootCAs *x509.CertPool
	// GitHubAPI is GitHub's API, where a latest gateway is resolved;
	// "" is DefaultGitHubAPI.
	GitHubAPI string
	// GatewayManifest is the gateway entry's manifest URL, {version} its
	// release tag; "" is GatewayManifest (GitHub's release download).
	GatewayManifest string
	// ReadyWait bounds the wait for MetalLB's controller and
	// cert-manager's webhook before the pool and the issuers are applied:
	// 0 is three minutes, a negative value does not wait.
	ReadyWait time.Duration
}

// Plugin is the charts plugin (reconcile.Plugin).
type Plugin struct {
	fetch     *fetcher
	github    string
	gateway   string
	readyWait time.Duration
}

// New returns the plugin.
func New(o Options) *Plugin {
	p := &Plugin{fetch: newFetcher(o), github: o.GitHubAPI, gateway: o.GatewayManifest, readyWait: o.ReadyWait}
	if p.github == "" {
		p.github = DefaultGitHubAPI
	}
	if p.gateway == "" {
		p.gateway = GatewayManifest
	}
	if p.readyWait == 0 {
		p.readyWait = readyWait
	}
	return p
}

// Name is the plugin's section.
func (*Plugin) Name() string { return "charts" }

// After: the charts plugin needs no other plugin's results.
func (*Plugin) After() []string { return nil }

// Configured: the section is there. A section whose entries are all
// disabled may still have releases to remove (the Python tool's
// still_installed); Observe finds that, and plans nothing when there is
// nothing.
func (*Plugin) Configured(c *spec.Cluster) bool { return c.Plugins.Charts != nil }

// releaseState is a release and what the cluster holds of it.
type releaseState struct {
	Release
	exists bool
	status string
	// installed is the installed chart version; values the user-supplied
	// values it was installed with.
	installed string
	values    map[string]any
	// resolved is, for a wanted release that follows the latest or a
	// version constraint, the newest chart version in the repository
	// (matching the constraint).
	resolved string
	ns       namespaceState
	// revision is the latest revision's number; lastGood the newest
	// deployed (or superseded) one before it, 0 for none: read for a
	// release an upgrade or a rollback left pending.
	revision, lastGood int
	// elsewhere are the other namespaces holding a release of the same
	// name (the entry's namespace was changed, say).
	elsewhere []string
}

// entryState is what Observe read of one entry.
type entryState struct {
	entry    Entry
	releases []releaseState
	// pool, issuers and secrets are the MetalLB pool, cert-manager's
	// issuers and ceph's Secrets (both charts').
	pool, issuers, secrets []object
	// manifest holds a manifest entry's objects, in document order.
	manifest []object
	// unresolved says why a manifest entry's URLs are not known in a
	// teardown (its latest release could not be resolved).
	unresolved string
}

// state is what Observe read.
type state struct {
	entries []entryState
}

// Observe reads, for each entry, its releases (through the Helm SDK), the
// newest chart version of a latest one, its namespaces, its MetalLB pool,
// issuers and ceph Secrets, and a manifest entry's objects. It changes
// nothing.
func (p *Plugin) Observe(ctx context.Context, env reconcile.PluginEnv) (reconcile.PluginState, error) {
	c := env.Cluster
	entries, err := Entries(c)
	if err != nil {
		return nil, err
	}
	st := &state{}
	if env.Kubeconfig == nil {
		// Only a teardown asks without one (a cluster never built): all
		// the plugin makes is on the cluster.
		if env.Teardown {
			return st, nil
		}
		return nil, errors.New("the cluster has no kubeconfig")
	}
	k, err := newKube(env.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if err := k.reachable(); err != nil {
		if env.Teardown {
			// What the plugin made goes with the cluster's machines.
			return st, nil
		}
		return nil, fmt.Errorf("the cluster's API: %w", err)
	}
	x := ContextOf(c, entries, env.IngressVIP)
	r := p.fetch.repos()
	for _, e := range entries {
		es, err := p.observeEntry(ctx, k, r, e, x, env.Teardown)
		if err != nil {
			return nil, fmt.Errorf("charts.%s: %w", e.Name, err)
		}
		st.entries = append(st.entries, es)
	}
	return st, nil
}

func (p *Plugin) observeEntry(ctx context.Context, k *kube, r *repos, e Entry, x Context, teardown bool) (entryState, error) {
	es := entryState{entry: e}
	if e.Manifest() {
		return p.observeManifest(ctx, k, es, teardown)
	}
	for _, rel := range Releases(e, x) {
		rs, err := p.observeRelease(ctx, k, r, rel, (e.Latest() || IsConstraint(e.Version)) && rel.Wanted && !teardown)
		if err != nil {
			return es, err
		}
		es.releases = append(es.releases, rs)
	}
	var objs *[]object
	var render []*unstructured.Unstructured
	switch e.Name {
	case "metallb":
		objs, render = &es.pool, PoolObjects(x.Pool, e.Namespace.Name)
	case "cert-manager":
		objs, render = &es.issuers, Issuers(e)
	case "ceph":
		objs, render = &es.secrets, CephSecrets(e, []string{CephRBD, CephFS})
	}
	for _, o := range render {
		ob, err := k.read(ctx, o, e.Enabled && !teardown)
		if err != nil {
			return es, err
		}
		*objs = append(*objs, ob)
	}
	return es, nil
}

// observeRelease reads a release through the Helm SDK (the latest
// revision, its status, chart version and user-supplied values, and for
// one left pending by an upgrade or a rollback its last good revision),
// the releases of its name in other namespaces, its namespace and, with
// resolve set, the newest version in its repository (matching its version
// constraint).
func (p *Plugin) observeRelease(ctx context.Context, k *kube, r *repos, rel Release, resolve bool) (releaseState, error) {
	rs := releaseState{Release: rel}
	found, err := k.releasesNamed(rel.Name)
	if err != nil {
		return rs, fmt.Errorf("release %s/%s: %w", rel.Namespace, rel.Name, err)
	}
	for ns := range found {
		if ns != rel.Namespace {
			rs.elsewhere = append(rs.elsewhere, ns)
		}
	}
	slices.Sort(rs.elsewhere)
	if have := found[rel.Namespace]; have != nil {
		rs.exists, rs.status, rs.values, rs.revision = true, string(have.Info.Status), have.Config, have.Version
		if have.Chart != nil && have.Chart.Metadata != nil {
			rs.installed = have.Chart.Metadata.Version
		}
		if pendingChange(rs.status) {
			cfg, err := k.helm(rel.Namespace)
			if err != nil {
				return rs, err
			}
			if rs.lastGood, err = lastGood(cfg, rel.Name, rs.revision); err != nil {
				return rs, fmt.Errorf("release %s/%s: %w", rel.Namespace, rel.Name, err)
			}
		}
	}
	if resolve {
		cv, err := r.version(ctx, rel.Repo, rel.Chart, rel.Version)
		if err != nil {
			return rs, fmt.Errorf("the newest %s: %w", rel.Chart, err)
		}
		rs.resolved = cv.Version
	}
	if rs.ns, err = k.namespace(ctx, rel.Namespace); err != nil {
		return rs, err
	}
	return rs, nil
}

// observeManifest resolves a manifest entry's URLs, downloads each and
// reads its objects.
func (p *Plugin) observeManifest(ctx context.Context, k *kube, es entryState, teardown bool) (entryState, error) {
	e := es.entry
	urls, err := p.urls(ctx, e)
	if err != nil {
		if teardown {
			// As the Python tool: what cannot be resolved is not torn
			// down; the machines go all the same.
			es.unresolved = err.Error()
			return es, nil
		}
		// A disabled entry's objects may be on the cluster all the same:
		// not knowing them is not knowing that nothing is to remove.
		return es, err
	}
	for _, u := range urls {
		data, err := p.fetch.get(ctx, u, maxManifest, fetchTimeout, nil)
		if err != nil {
			return es, err
		}
		objs, err := parseManifest(data)
		if err != nil {
			return es, fmt.Errorf("%s: %w", u, err)
		}
		for _, o := range objs {
			ob, err := k.read(ctx, o, e.Enabled && !teardown)
			if err != nil {
				return es, err
			}
			es.manifest = append(es.manifest, ob)
		}
	}
	return es, nil
}

// urls are a manifest entry's URLs with {version} filled: the pinned
// version, or for a latest gateway its latest release's tag.
func (p *Plugin) urls(ctx context.Context, e Entry) ([]string, error) {
	version := e.Version
	templates := e.URLs
	if e.Name == "gateway" {
		templates = []string{p.gateway}
	}
	var out []string
	for _, u := range templates {
		if strings.Contains(u, "{version}") && version == "" {
			if e.Name != "gateway" {
				return nil, errors.New("cannot resolve the latest release; pin a version in cluster.yaml or retry")
			}
			tag, err := p.fetch.gatewayLatest(ctx, p.github)
			if err != nil {
				return nil, fmt.Errorf("cannot resolve the latest release (%w); pin a version in cluster.yaml or retry", err)
			}
			version = tag
		}
		out = append(out, strings.ReplaceAll(u, "{version}", version))
	}
	return out, nil
}

// parseManifest reads a multi-document YAML (or JSON) manifest; a List
// document's items are its objects.
func parseManifest(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("the manifest does not parse: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		items := []*unstructured.Unstructured{o}
		if o.IsList() {
			l, err := o.ToList()
			if err != nil {
				return nil, fmt.Errorf("the manifest's list: %w", err)
			}
			items = nil
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		}
		for _, it := range items {
			if it.GetAPIVersion() == "" || it.GetKind() == "" || it.GetName() == "" {
				return nil, errors.New("the manifest has an object without apiVersion, kind or name")
			}
			out = append(out, it)
		}
		if len(out) > maxObjects {
			return nil, fmt.Errorf("the manifest has more than %d objects", maxObjects)
		}
	}
}

// Plugin operations.
type (
	// deployRelease installs or upgrades a release with the chart version
	// given (the pinned one, or the newest, matching a constraint, that
	// Observe read). status and revision are the release's as the plan
	// read them ("" and 0: not installed); the step fails when they
	// changed since. A release left pending is first rolled back to
	// rollbackTo (an upgrade or a rollback that never finished), or
	// uninstalled when reinstall is set (a first install that never
	// finished).
	deployRelease struct {
		rel        Release
		version    string
		status     string
		revision   int
		rollbackTo int
		reinstall  bool
	}
	uninstallRelease struct{ entry, name, namespace string }
	// applyObject applies an object, after waiting (best effort) for the
	// Deployment that serves its webhook when waitFor is set.
	applyObject struct {
		entry            string
		obj              *unstructured.Unstructured
		waitNS, waitName string
	}
	deleteObject struct {
		entry string
		obj   *unstructured.Unstructured
	}
	// keepObject does nothing: its step tells that an object of an entry
	// being removed stays, and why.
	keepObject     struct{ entry string }
	applyNamespace struct {
		entry, name string
		psa         map[string]string
	}
	deleteNamespace struct{ entry, name string }
)

// Resource kinds of the plugin's steps besides objects' own.
const (
	KindRelease   plan.ResourceKind = "helm-release"
	KindNamespace plan.ResourceKind = "namespace"
)

// Plan installs, upgrades and applies what is missing or differs for the
// enabled entries, and removes what the disabled ones made, entry by
// entry in order.
func (*Plugin) Plan(_ *spec.Cluster, s reconcile.PluginState) ([]plan.Change, error) {
	st, ok := s.(*state)
	if !ok {
		return nil, errors.New("charts: not its state")
	}
	pl := &planner{sharers: enabledNamespaces(st), applied: map[string]bool{}}
	for _, es := range st.entries {
		e := es.entry
		pl.beginEntry()
		switch {
		case e.Manifest() && e.Enabled:
			pl.applyObjects(e.Name, es.manifest, "", "")
		case e.Manifest():
			pl.deleteObjects(e.Name, es.manifest)
		case e.Enabled:
			if !pl.refuse(es) {
				pl.converge(es)
			}
		default:
			pl.remove(es, "charts."+e.Name+" is disabled")
		}
		pl.endEntry()
	}
	return pl.out, nil
}

// PlanTeardown removes what the plugin made, entries in the reverse
// order, each as the Python tool's destroy: the pool and issuers before
// their release, the release, then its namespace when the plugin created
// it.
func (*Plugin) PlanTeardown(_ *spec.Cluster, s reconcile.PluginState) ([]plan.Change, error) {
	st, ok := s.(*state)
	if !ok {
		return nil, errors.New("charts: not its state")
	}
	pl := &planner{applied: map[string]bool{}}
	for i := len(st.entries) - 1; i >= 0; i-- {
		es := st.entries[i]
		pl.beginEntry()
		if es.entry.Manifest() {
			pl.deleteObjects(es.entry.Name, es.manifest)
		} else {
			pl.remove(es, "destroy")
		}
		pl.endEntry()
	}
	return pl.out, nil
}

// enabledNamespaces are the namespaces the enabled entries' wanted
// releases use, with the entries using each.
func enabledNamespaces(st *state) map[string][]string {
	out := map[string][]string{}
	for _, es := range st.entries {
		for _, rs := range es.releases {
			if rs.Wanted && !slices.Contains(out[rs.Namespace], es.entry.Name) {
				out[rs.Namespace] = append(out[rs.Namespace], es.entry.Name)
			}
		}
	}
	return out
}

// planner collects the steps of a plan.
type planner struct {
	out []plan.Change
	// sharers are the enabled entries using each namespace (none in a
	// teardown).
	sharers map[string][]string
	// applied are the namespaces a step already makes ("-" and the name:
	// deletes).
	applied map[string]bool
	// start is where the current entry's steps begin; kept are its
	// objects kept, said at its end.
	start int
	kept  []keptStep
}

func (pl *planner) add(ch plan.Change) {
	ch.Phase, ch.Domain = plan.PhasePlugins, plan.DomainKube
	pl.out = append(pl.out, ch)
}

// converge plans an enabled chart entry: ceph's turned-off chart removed
// first; then per release its namespace and the release; then MetalLB's
// pool or cert-manager's issuers.
func (pl *planner) converge(es entryState) {
	e := es.entry
	for _, rs := range es.releases {
		if !rs.Wanted {
			reason := "charts." + e.Name + "." + flagOf(rs.Chart) + " is off"
			pl.uninstall(rs, reason)
			pl.deleteObjects(e.Name, secretsOf(es.secrets, rs.Namespace))
			pl.deleteNamespace(e.Name, rs.ns, reason)
		}
	}
	for _, rs := range es.releases {
		if rs.Wanted {
			pl.namespace(e.Name, rs)
		}
	}
	for _, rs := range es.releases {
		if rs.Wanted {
			pl.applyObjects(e.Name, secretsOf(es.secrets, rs.Namespace), "", "")
			pl.release(rs)
		}
	}
	switch e.Name {
	case "metallb":
		pl.applyObjects(e.Name, es.pool, e.Namespace.Name, "metallb-controller")
	case "cert-manager":
		pl.applyObjects(e.Name, es.issuers, e.Namespace.Name, e.Name+"-webhook")
	}
}

// refuse plans, for an enabled chart entry one of whose wanted releases
// must not be touched, a refusal for each such release and nothing else
// of the entry; it reports whether it did. A release of the entry's name
// in another namespace is not moved (Helm would find the objects owned by
// the other release, or two copies would run); a release being
// uninstalled is someone's operation in progress.
func (pl *planner) refuse(es entryState) bool {
	refused := false
	for _, rs := range es.releases {
		if !rs.Wanted {
			continue
		}
		res := plan.Resource{Kind: KindRelease, Name: rs.Namespace + "/" + rs.Name}
		var reason string
		switch {
		case len(rs.elsewhere) > 0:
			old := strings.Join(rs.elsewhere, ", ")
			reason = "charts." + rs.Entry + ": release " + rs.Name + " is in namespace " + old + ", and the entry's namespace is " + rs.Namespace +
				": moving a release between namespaces is not done: uninstall it from " + old + " first, or set namespace back"
		case rs.exists && rs.status == string(common.StatusUninstalling):
			reason = "charts." + rs.Entry + ": release " + rs.Namespace + "/" + rs.Name + " has status " + rs.status +
				": someone is uninstalling it; it is left alone until that is done"
		default:
			continue
		}
		refused = true
		pl.add(plan.Change{Action: plan.ActionRefuse, Resource: res, Reason: reason})
	}
	return refused
}

// remove plans the removal of a chart entry's objects, releases and the
// namespaces the plugin created.
func (pl *planner) remove(es entryState, reason string) {
	e := es.entry
	pl.deleteObjects(e.Name, es.pool)
	pl.deleteObjects(e.Name, es.issuers)
	for i := len(es.releases) - 1; i >= 0; i-- {
		pl.uninstall(es.releases[i], reason)
	}
	for i := range es.secrets {
		// rbd's Secret, then cephfs's, as the Python tool.
		pl.deleteObjects(e.Name, es.secrets[i:i+1])
	}
	for _, rs := range es.releases {
		pl.deleteNamespace(e.Name, rs.ns, reason)
	}
}

func flagOf(chart string) string {
	for _, c := range cephCharts {
		if c.chart == chart {
			return c.flag
		}
	}
	return chart
}

func secretsOf(objs []object, namespace string) []object {
	var out []object
	for _, o := range objs {
		if o.obj.GetNamespace() == namespace {
			out = append(out, o)
		}
	}
	return out
}

// namespace plans a release's namespace when it is missing or its labels
// differ: the Pod Security labels, and the ownership label unless the
// namespace exists without it (one the plugin did not create).
func (pl *planner) namespace(entry string, rs releaseState) {
	ns := rs.ns
	if pl.applied[ns.name] {
		return
	}
	pl.applied[ns.name] = true
	want := NamespaceObject(ns.name, rs.PSA, !ns.exists || ns.owned()).GetLabels()
	var differs []string
	for k, v := range want {
		if ns.labels[k] != v {
			differs = append(differs, k)
		}
	}
	slices.Sort(differs)
	res := plan.Resource{Kind: KindNamespace, Name: ns.name}
	op := applyNamespace{entry: entry, name: ns.name, psa: rs.PSA}
	switch {
	case !ns.exists:
		pl.add(plan.Change{Action: plan.ActionCreate, Resource: res, Reason: "charts." + entry + " installs into it",
			Expects: "it does not exist, or carries the plugin's labels", Op: op})
	case len(differs) > 0:
		pl.add(plan.Change{Action: plan.ActionUpdate, Resource: res, Reason: "its labels differ from charts." + entry + "'s",
			Attributes: []plan.Attribute{{Key: "labels", Value: strings.Join(differs, ",")}}, Expects: "it exists", Op: op})
	}
}

// release plans a release's install or upgrade when it is missing, not
// deployed, at another version than the pinned one or one its constraint
// does not match, installed with other values, or older than the newest
// (matching its constraint) of a latest or constrained entry.
func (pl *planner) release(rs releaseState) {
	res := plan.Resource{Kind: KindRelease, Name: rs.Namespace + "/" + rs.Name}
	constraint := IsConstraint(rs.Version)
	desired := rs.Version
	if desired == "" || constraint {
		desired = rs.resolved
	}
	attrs := []plan.Attribute{{Key: "chart", Value: rs.Chart}, {Key: "repo", Value: rs.Repo}}
	var reason string
	action := plan.ActionUpdate
	op := deployRelease{rel: rs.Release, version: desired, revision: rs.revision}
	if rs.exists {
		op.status = rs.status
	}
	switch {
	case !rs.exists:
		action, reason = plan.ActionCreate, "not installed"
		attrs = append(attrs, plan.Attribute{Key: "version", Value: desired})
	case pendingChange(rs.status) && rs.lastGood > 0:
		op.rollbackTo = rs.lastGood
		what := "an upgrade"
		if rs.status == string(common.StatusPendingRollback) {
			what = "a rollback"
		}
		reason = fmt.Sprintf("its status is %s (%s that never finished, or is still running): it is rolled back to revision %d, "+
			"its last good one, and then upgraded", rs.status, what, rs.lastGood)
		attrs = append(attrs, plan.Attribute{Key: "rollback", Value: fmt.Sprintf("revision %d -> %d", rs.revision, rs.lastGood)},
			plan.Attribute{Key: "version", Value: desired})
	case pendingChange(rs.status) || rs.status == string(common.StatusPendingInstall):
		action, op.reinstall = plan.ActionReplace, true
		reason = "its status is " + rs.status + ": its first install never finished, so it is uninstalled and installed again"
		if rs.status != string(common.StatusPendingInstall) {
			reason = "its status is " + rs.status + " and no earlier revision was deployed to roll back to: it is uninstalled and installed again"
		}
		attrs = append(attrs, plan.Attribute{Key: "version", Value: desired})
	case rs.status != "deployed":
		reason = "its status is " + rs.status
	case rs.Version != "" && !constraint && !SameVersion(rs.installed, rs.Version):
		reason = "its chart version differs from the pinned one"
		attrs = append(attrs, plan.Attribute{Key: "version", Value: rs.installed + " -> " + rs.Version})
	case constraint && !SameVersion(rs.installed, rs.resolved) && !Satisfies(rs.installed, rs.Version):
		reason = "its chart version does not match " + rs.Version
		attrs = append(attrs, plan.Attribute{Key: "version", Value: rs.installed + " -> " + rs.resolved})
	case !reflect.DeepEqual(normalized(rs.values), normalized(rs.Values)):
		reason = "chart values changed"
	case (rs.Version == "" || constraint) && IsNewer(rs.resolved, rs.installed):
		reason = "a newer chart version is out"
		if constraint {
			reason = "a newer chart version matching " + rs.Version + " is out"
		}
		attrs = append(attrs, plan.Attribute{Key: "version", Value: rs.installed + " -> " + rs.resolved})
	default:
		return
	}
	attrs = append(attrs, plan.Attribute{Key: "values", Value: ShowValues(rs.Values)})
	pl.add(plan.Change{Action: action, Resource: res, Reason: "charts." + rs.Entry + ": " + reason, Attributes: attrs,
		Expects: "the release's status and revision are as read", Op: op})
}

func (pl *planner) uninstall(rs releaseState, reason string) {
	if !rs.exists {
		return
	}
	pl.add(plan.Change{Action: plan.ActionDelete, Resource: plan.Resource{Kind: KindRelease, Name: rs.Namespace + "/" + rs.Name},
		Reason: reason + ": the release is uninstalled", Op: uninstallRelease{entry: rs.Entry, name: rs.Name, namespace: rs.Namespace}})
}

// deleteNamespace plans a namespace's removal when the plugin created it,
// it is not one of the cluster's own, and no enabled entry uses it.
func (pl *planner) deleteNamespace(entry string, ns namespaceState, reason string) {
	if !ns.exists || !ns.owned() || slices.Contains(protectedNamespaces, ns.name) || len(pl.sharers[ns.name]) > 0 || pl.applied["-"+ns.name] {
		return
	}
	pl.applied["-"+ns.name] = true
	pl.add(plan.Change{Action: plan.ActionDelete, Resource: plan.Resource{Kind: KindNamespace, Name: ns.name},
		Reason: reason + ": the plugin created the namespace", Expects: "it carries " + ManagedByLabel + "=" + ManagedByValue,
		Op: deleteNamespace{entry: entry, name: ns.name}})
}

// applyObjects applies the objects that are missing or differ; a
// Secret's values are never shown.
func (pl *planner) applyObjects(entry string, objs []object, waitNS, waitName string) {
	for _, o := range objs {
		op := applyObject{entry: entry, obj: o.obj, waitNS: waitNS, waitName: waitName}
		switch {
		case !o.exists:
			pl.add(plan.Change{Action: plan.ActionCreate, Resource: resourceOf(o.obj), Reason: "charts." + entry + " makes it",
				Expects: "it does not exist or matches", Op: op})
		case len(o.drift) > 0:
			pl.add(plan.Change{Action: plan.ActionUpdate, Resource: resourceOf(o.obj), Reason: "differs from what charts." + entry + " makes",
				Attributes: []plan.Attribute{{Key: "differs", Value: strings.Join(o.drift, ",")}}, Expects: "it exists", Op: op})
		}
	}
}

// deleteObjects removes the objects that exist, the last first, when the
// plugin applied them and they are not in one of the cluster's own
// namespaces; the others are kept, and said so (see endEntry).
func (pl *planner) deleteObjects(entry string, objs []object) {
	for i := len(objs) - 1; i >= 0; i-- {
		o := objs[i]
		if !o.exists {
			continue
		}
		res := resourceOf(o.obj)
		if o.obj.GetNamespace() == "" && o.namespace != "" {
			// A namespaced object the manifest gives no namespace.
			res.Name = o.namespace + "/" + res.Name
		}
		if why := keptBecause(o.obj, o.where(), o.applied); why != "" {
			pl.kept = append(pl.kept, keptStep{namespace: o.where(), change: plan.Change{Action: plan.ActionWait, Resource: res,
				Reason: "kept: " + why, Op: keepObject{entry: entry}}})
			continue
		}
		pl.add(plan.Change{Action: plan.ActionDelete, Resource: res, Reason: "charts." + entry + " no longer makes it",
			Expects: "it was applied by taloscluster and is in none of the cluster's own namespaces", Op: deleteObject{entry: entry, obj: o.obj}})
	}
}

// where is the object's namespace: the API's, or the rendered one's.
func (o object) where() string {
	if o.namespace != "" {
		return o.namespace
	}
	return o.obj.GetNamespace()
}

// keptBecause says why an object the plugin would remove is kept: it is
// one of the cluster's own namespaces, or in one, or the plugin did not
// apply it; "" when it may go.
func keptBecause(o *unstructured.Unstructured, namespace string, applied bool) string {
	switch {
	case o.GetAPIVersion() == "v1" && o.GetKind() == "Namespace" && slices.Contains(protectedNamespaces, o.GetName()):
		return "namespace " + o.GetName() + " is the cluster's own"
	case slices.Contains(protectedNamespaces, namespace):
		return "it is in namespace " + namespace + ", the cluster's own"
	case !applied:
		return "not applied by taloscluster (no server-side apply by the field manager " + FieldManager + ")"
	}
	return ""
}

// keptStep is a kept object's step, with the namespace it is in.
type keptStep struct {
	namespace string
	change    plan.Change
}

// beginEntry starts an entry's steps.
func (pl *planner) beginEntry() {
	pl.start, pl.kept = len(pl.out), nil
}

// endEntry adds the steps telling which of the entry's objects are kept,
// when the entry's steps remove something: a plan that removes nothing of
// an entry has nothing to say of what stays, so that a plan after the
// removal is empty. An object in a namespace the plan deletes goes with
// it, and is not said to stay.
func (pl *planner) endEntry() {
	removes := slices.ContainsFunc(pl.out[pl.start:], func(ch plan.Change) bool { return ch.Action == plan.ActionDelete })
	for _, k := range pl.kept {
		if removes && !pl.applied["-"+k.namespace] {
			pl.add(k.change)
		}
	}
	pl.kept = nil
}

// resourceOf is a plan's resource for an object: its kind in lower case
// and namespace/name.
func resourceOf(o *unstructured.Unstructured) plan.Resource {
	n := o.GetName()
	if ns := o.GetNamespace(); ns != "" {
		n = ns + "/" + n
	}
	return plan.Resource{Kind: plan.ResourceKind(strings.ToLower(o.GetKind())), Name: n}
}

// Apply makes one step, reading its precondition again first.
func (p *Plugin) Apply(ctx context.Context, env reconcile.PluginEnv, ch plan.Change) (map[string]string, error) {
	if env.Kubeconfig == nil {
		return nil, errors.New("charts: the cluster has no kubeconfig")
	}
	k, err := newKube(env.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("charts: %w", err)
	}
	var entry string
	switch op := ch.Op.(type) {
	case deployRelease:
		entry, err = op.rel.Entry, p.deploy(ctx, k, op)
	case uninstallRelease:
		entry, err = op.entry, uninstall(k, op.name, op.namespace)
	case applyObject:
		entry = op.entry
		if op.waitName == "" {
			err = k.apply(ctx, op.obj)
			break
		}
		k.waitAvailable(ctx, op.waitNS, op.waitName, p.readyWait)
		err = retryWebhook(ctx, webhookRetry, webhookRetryEvery, func() error { return k.apply(ctx, op.obj) })
	case deleteObject:
		entry, err = op.entry, k.deleteApplied(ctx, op.obj)
	case keepObject:
		// The plan says what stays; there is nothing to do.
		entry = op.entry
	case applyNamespace:
		entry, err = op.entry, k.applyNamespace(ctx, op.name, op.psa)
	case deleteNamespace:
		entry, err = op.entry, k.deleteNamespace(ctx, op.name)
	default:
		return nil, fmt.Errorf("charts: no operation for %s %s", ch.Action, ch.Resource)
	}
	if err != nil {
		return nil, fmt.Errorf("charts.%s: %w", entry, err)
	}
	return nil, nil
}

// deploy installs or upgrades a release through the Helm SDK with the
// chart version the step names, without waiting for its workloads, once
// its status and revision are read again and found as the plan read
// them. A release left pending is rolled back to its last good revision,
// or uninstalled, first, as the step says.
func (p *Plugin) deploy(ctx context.Context, k *kube, op deployRelease) error {
	rel := op.rel
	cfg, err := k.helm(rel.Namespace)
	if err != nil {
		return err
	}
	have, err := lastRelease(cfg, rel.Name)
	if err != nil {
		return err
	}
	status, revision := "", 0
	if have != nil {
		status, revision = string(have.Info.Status), have.Version
	}
	if status != op.status || revision != op.revision {
		return fmt.Errorf("release %s/%s changed since the plan (%s, now %s); plan again",
			rel.Namespace, rel.Name, describeRelease(op.status, op.revision), describeRelease(status, revision))
	}
	switch {
	case op.reinstall:
		if err := uninstall(k, rel.Name, rel.Namespace); err != nil {
			return err
		}
		have = nil
	case op.rollbackTo > 0:
		rb := action.NewRollback(cfg)
		rb.Version, rb.Timeout, rb.WaitStrategy = op.rollbackTo, helmTimeout, helmkube.HookOnlyStrategy
		rb.Description = fmt.Sprintf("taloscluster: rollback from %s revision %d", status, revision)
		if err := rb.Run(rel.Name); err != nil {
			return fmt.Errorf("rolling back %s/%s to revision %d: %w", rel.Namespace, rel.Name, op.rollbackTo, err)
		}
	}
	r := p.fetch.repos()
	cv, err := r.version(ctx, rel.Repo, rel.Chart, op.version)
	if err != nil {
		return err
	}
	chrt, err := r.chart(ctx, rel.Repo, cv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, helmTimeout)
	defer cancel()
	values := normalized(rel.Values)
	if have == nil {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.Timeout = rel.Name, rel.Namespace, helmTimeout
		// No --wait: converge does not wait for workloads (hooks only,
		// as Helm runs them anyway).
		in.WaitStrategy = helmkube.HookOnlyStrategy
		// Server-side apply, Helm 4's default: Helm's field manager owns
		// what the chart renders, and a field another manager owns is a
		// conflict reported, not silently overwritten.
		in.ServerSideApply = true
		if _, err := in.RunWithContext(ctx, chrt, values); err != nil {
			return fmt.Errorf("installing %s %s: %w", rel.Chart, cv.Version, err)
		}
		return nil
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Timeout, up.WaitStrategy = rel.Namespace, helmTimeout, helmkube.HookOnlyStrategy
	// "auto": a release keeps the apply method it was installed with, so
	// one the Python tool's Helm 3 installed (client-side) is not moved
	// to server-side apply under it.
	up.ServerSideApply = "auto"
	// The values are the whole of them: Helm would otherwise reuse the
	// last release's when they are empty.
	up.ResetValues = true
	if _, err := up.RunWithContext(ctx, rel.Name, chrt, values); err != nil {
		return fmt.Errorf("upgrading %s to %s: %w", rel.Chart, cv.Version, err)
	}
	return nil
}

// describeRelease says a release's status and revision as read.
func describeRelease(status string, revision int) string {
	if status == "" {
		return "not installed"
	}
	return fmt.Sprintf("%s at revision %d", status, revision)
}

// uninstall removes a release through the Helm SDK; a release gone is
// done.
func uninstall(k *kube, name, namespace string) error {
	cfg, err := k.helm(namespace)
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.IgnoreNotFound, un.Timeout, un.WaitStrategy = true, helmTimeout, helmkube.HookOnlyStrategy
	if _, err := un.Run(name); err != nil {
		return fmt.Errorf("uninstalling %s/%s: %w", namespace, name, err)
	}
	return nil
}

func (k *kube) apply(ctx context.Context, o *unstructured.Unstructured) error {
	ri, err := k.resource(o)
	if err != nil {
		return err
	}
	if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("applying %s: %w", describe(o), redacted(o, err))
	}
	return nil
}

// deleteApplied deletes an object only while the plugin's ownership holds:
// the object is still the one the plugin applied (its managedFields say
// so) and not in one of the cluster's own namespaces. One gone, or whose
// kind is no longer served, is done.
func (k *kube) deleteApplied(ctx context.Context, o *unstructured.Unstructured) error {
	ri, err := k.resource(o)
	if isNoMatch(err) {
		return nil
	}
	if err != nil {
		return err
	}
	have, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", describe(o), redacted(o, err))
	}
	if why := keptBecause(o, have.GetNamespace(), appliedByPlugin(have)); why != "" {
		return fmt.Errorf("%s is left in place: %s", describe(o), why)
	}
	// The UID makes sure the object deleted is the one read.
	uid := have.GetUID()
	err = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", describe(o), redacted(o, err))
	}
	return nil
}

// delete removes an object; one gone, or whose kind is no longer served,
// is done.
func (k *kube) delete(ctx context.Context, o *unstructured.Unstructured) error {
	ri, err := k.resource(o)
	if err != nil {
		if isNoMatch(err) {
			return nil
		}
		return err
	}
	err = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", describe(o), err)
	}
	return nil
}

// applyNamespace applies a namespace's Pod Security labels, and the
// ownership label unless it exists without it: the plugin never marks a
// namespace it did not create.
func (k *kube) applyNamespace(ctx context.Context, name string, psa map[string]string) error {
	ns, err := k.namespace(ctx, name)
	if err != nil {
		return err
	}
	if ns.terminating {
		return fmt.Errorf("namespace %s is being deleted; retry once it is gone", name)
	}
	return k.apply(ctx, NamespaceObject(name, psa, !ns.exists || ns.owned()))
}

// deleteNamespace deletes a namespace that still carries the ownership
// label; one gone is done.
func (k *kube) deleteNamespace(ctx context.Context, name string) error {
	ns, err := k.namespace(ctx, name)
	if err != nil {
		return err
	}
	if !ns.exists {
		return nil
	}
	if !ns.owned() {
		return fmt.Errorf("namespace %s no longer carries %s=%s; it is left in place", name, ManagedByLabel, ManagedByValue)
	}
	return k.delete(ctx, NamespaceObject(name, nil, false))
}
