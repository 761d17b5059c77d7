package charts

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// Plan tests on states made by hand, as the Python tool's reconcile tests
// stub helm and kubectl.

var owned = map[string]string{ManagedByLabel: ManagedByValue}

func ownedNS(name string) namespaceState {
	return namespaceState{name: name, exists: true, labels: owned}
}

// chartEntry is an entry's state with one release as given.
func chartEntry(name string, enabled bool, rs releaseState) entryState {
	e := Entry{Name: name, Enabled: enabled, Namespace: Namespace{Name: rs.ns.name}}
	rs.Entry, rs.Name, rs.Namespace, rs.Wanted = name, name, rs.ns.name, enabled
	if rs.Chart == "" {
		rs.Chart = name
	}
	return entryState{entry: e, releases: []releaseState{rs}}
}

func planOf(t *testing.T, entries ...entryState) []string {
	t.Helper()
	steps, err := (&Plugin{}).Plan(nil, &state{entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	return stepNames(steps)
}

func teardownOf(t *testing.T, entries ...entryState) []string {
	t.Helper()
	steps, err := (&Plugin{}).PlanTeardown(nil, &state{entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	return stepNames(steps)
}

func stepNames(steps []plan.Change) []string {
	out := []string{}
	for _, s := range steps {
		out = append(out, string(s.Action)+" "+string(s.Resource.Kind)+" "+s.Resource.Name)
	}
	return out
}

func want(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func poolState(exists bool) []object {
	var out []object
	for _, o := range PoolObjects([]string{"192.0.2.190-192.0.2.199"}, "metallb-system") {
		out = append(out, object{obj: o, exists: exists, applied: exists})
	}
	return out
}

func metallb(enabled bool, installed bool) entryState {
	es := chartEntry("metallb", enabled, releaseState{exists: installed, status: "deployed", installed: "0.14.9", ns: ownedNS("metallb-system")})
	es.pool = poolState(installed)
	return es
}

// TestDisabledMetalLBDeletesPoolBeforeUninstall: the pool, the release,
// then the namespace the plugin created.
func TestDisabledMetalLBDeletesPoolBeforeUninstall(t *testing.T) {
	t.Parallel()
	want(t, "disabled metallb", planOf(t, metallb(false, true)), []string{
		"delete l2advertisement metallb-system/external", "delete ipaddresspool metallb-system/external",
		"delete helm-release metallb-system/metallb", "delete namespace metallb-system"})
	absent := metallb(false, false)
	absent.releases[0].ns = namespaceState{name: "metallb-system"}
	want(t, "disabled and absent", planOf(t, absent), []string{})
}

// TestDestroyOrder: entries in reverse; each entry's pool before its
// release before its namespace; the gateway's manifest last.
func TestDestroyOrder(t *testing.T) {
	t.Parallel()
	gw := entryState{entry: Entry{Name: "gateway", Enabled: true, URLs: []string{GatewayManifest}, Version: "v1.6.2"}}
	for _, n := range []string{"gatewayclasses", "gateways"} {
		o := obj(map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": n + ".gateway.networking.k8s.io"}})
		gw.manifest = append(gw.manifest, object{obj: o, exists: true, applied: true})
	}
	traefik := chartEntry("traefik", true, releaseState{exists: true, status: "deployed", ns: ownedNS("traefik")})
	want(t, "destroy", teardownOf(t, gw, metallb(true, true), traefik), []string{
		"delete helm-release traefik/traefik", "delete namespace traefik",
		"delete l2advertisement metallb-system/external", "delete ipaddresspool metallb-system/external",
		"delete helm-release metallb-system/metallb", "delete namespace metallb-system",
		"delete customresourcedefinition gateways.gateway.networking.k8s.io", "delete customresourcedefinition gatewayclasses.gateway.networking.k8s.io"})
	// The pool is skipped when the chart (and its CRDs) is gone.
	gone := metallb(true, false)
	gone.releases[0].ns = namespaceState{name: "metallb-system"}
	want(t, "destroy after the chart is gone", teardownOf(t, gone), []string{})
}

// TestNamespaceOwnership: a namespace without the marker, the cluster's
// own, or one an enabled entry uses is never deleted; a namespace that
// exists without the marker gets the Pod Security labels only.
func TestNamespaceOwnership(t *testing.T) {
	t.Parallel()
	foreign := chartEntry("mine", false, releaseState{exists: true, status: "deployed", ns: namespaceState{name: "mine", exists: true}})
	want(t, "a namespace the plugin did not create", planOf(t, foreign), []string{"delete helm-release mine/mine"})
	system := chartEntry("mine", false, releaseState{exists: true, status: "deployed", ns: namespaceState{name: "kube-system", exists: true, labels: owned}})
	want(t, "kube-system", teardownOf(t, system), []string{"delete helm-release kube-system/mine"})

	user := chartEntry("theirs", true, releaseState{exists: true, status: "deployed", ns: ownedNS("shared")})
	user.releases[0].Values = map[string]any{}
	gone := chartEntry("mine", false, releaseState{ns: ownedNS("shared")})
	want(t, "a namespace an enabled entry uses", planOf(t, gone, user), []string{})
	want(t, "the same in a teardown", teardownOf(t, gone, user), []string{"delete helm-release shared/theirs", "delete namespace shared"})

	leftover := chartEntry("mine", false, releaseState{ns: ownedNS("mine")})
	want(t, "a leftover namespace", planOf(t, leftover), []string{"delete namespace mine"})

	psa := map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	pre := chartEntry("traefik", true, releaseState{exists: true, status: "deployed", ns: namespaceState{name: "traefik", exists: true}})
	pre.releases[0].PSA, pre.releases[0].Values = psa, map[string]any{}
	steps, _ := (&Plugin{}).Plan(nil, &state{entries: []entryState{pre}})
	if len(steps) != 1 || steps[0].Action != plan.ActionUpdate || steps[0].Attributes[0].Value != "pod-security.kubernetes.io/enforce" {
		t.Errorf("a namespace without the marker: %v", stepNames(steps))
	}
	pre.releases[0].ns.labels = psa
	want(t, "labelled already", planOf(t, pre), []string{})
}

// TestReleaseDrift: install, upgrade for a status, a pinned version, the
// values or a newer latest; nothing when it matches (a leading v
// ignored, numbers compared as JSON sees them).
func TestReleaseDrift(t *testing.T) {
	t.Parallel()
	values := map[string]any{"deployment": map[string]any{"replicas": int64(1)}}
	stored := map[string]any{"deployment": map[string]any{"replicas": float64(1)}}
	base := releaseState{Release: Release{Chart: "traefik", Version: "1.21.2", Values: values}, exists: true, status: "deployed",
		installed: "v1.21.2", values: stored, ns: ownedNS("traefik")}
	for _, tc := range []struct {
		name   string
		change func(*releaseState)
		action plan.Action
		reason string
	}{
		{"up to date, pinned with a v", func(*releaseState) {}, "", ""},
		{"missing", func(r *releaseState) { r.exists = false }, plan.ActionCreate, "not installed"},
		{"failed", func(r *releaseState) { r.status = "failed" }, plan.ActionUpdate, "its status is failed"},
		{"pending upgrade", func(r *releaseState) { r.status, r.revision, r.lastGood = "pending-upgrade", 3, 2 }, plan.ActionUpdate,
			"an upgrade that never finished, or is still running): it is rolled back to revision 2, its last good one, and then upgraded"},
		{"pending rollback", func(r *releaseState) { r.status, r.revision, r.lastGood = "pending-rollback", 5, 3 }, plan.ActionUpdate,
			"a rollback that never finished, or is still running): it is rolled back to revision 3"},
		{"pending upgrade, nothing good before", func(r *releaseState) { r.status, r.revision = "pending-upgrade", 2 }, plan.ActionReplace,
			"no earlier revision was deployed to roll back to: it is uninstalled and installed again"},
		{"pending install", func(r *releaseState) { r.status, r.revision = "pending-install", 1 }, plan.ActionReplace,
			"its status is pending-install: its first install never finished, so it is uninstalled and installed again"},
		{"uninstalling", func(r *releaseState) { r.status, r.revision = "uninstalling", 4 }, plan.ActionRefuse,
			"release traefik/traefik has status uninstalling: someone is uninstalling it"},
		{"moved", func(r *releaseState) { r.exists, r.elsewhere = false, []string{"ingress"} }, plan.ActionRefuse,
			"release traefik is in namespace ingress, and the entry's namespace is traefik: moving a release between namespaces is not done: " +
				"uninstall it from ingress first, or set namespace back"},
		{"moved, a copy in both", func(r *releaseState) { r.elsewhere = []string{"ingress"} }, plan.ActionRefuse, "uninstall it from ingress first"},
		{"pinned differs", func(r *releaseState) { r.Version = "1.22.0" }, plan.ActionUpdate, "differs from the pinned"},
		{"values", func(r *releaseState) { r.values = map[string]any{} }, plan.ActionUpdate, "chart values changed"},
		{"latest, newer", func(r *releaseState) { r.Version, r.resolved = "", "1.22.0" }, plan.ActionUpdate, "newer chart version"},
		{"latest, current", func(r *releaseState) { r.Version, r.resolved = "", "1.21.2" }, "", ""},
	} {
		rs := base
		tc.change(&rs)
		es := chartEntry("traefik", true, rs)
		steps, _ := (&Plugin{}).Plan(nil, &state{entries: []entryState{es}})
		switch {
		case tc.action == "" && len(steps) != 0:
			t.Errorf("%s: %v", tc.name, stepNames(steps))
		case tc.action != "" && (len(steps) != 1 || steps[0].Action != tc.action || !strings.Contains(steps[0].Reason, tc.reason)):
			t.Errorf("%s: %v", tc.name, steps)
		case tc.action == plan.ActionRefuse:
			if steps[0].Op != nil {
				t.Errorf("%s: a refusal with an operation", tc.name)
			}
		case tc.action != "":
			op := steps[0].Op.(deployRelease)
			if op.version == "" {
				t.Errorf("%s: no version to install", tc.name)
			}
			if op.revision != rs.revision || (rs.exists && op.status != rs.status) {
				t.Errorf("%s: the step expects %s at %d", tc.name, op.status, op.revision)
			}
			if op.rollbackTo != rs.lastGood || op.reinstall != (tc.action == plan.ActionReplace) {
				t.Errorf("%s: rollback to %d, reinstall %v", tc.name, op.rollbackTo, op.reinstall)
			}
		}
	}
}

// TestCephFlagTurnedOff: the turned-off chart's release, Secret and
// namespace go first; the other's are made.
func TestCephFlagTurnedOff(t *testing.T) {
	t.Parallel()
	e := Entry{Name: "ceph", Enabled: true, raw: map[string]any{"userID": "kubernetes", "userKey": "AQCs3cr3t=="}}
	rbd := releaseState{Release: Release{Entry: "ceph", Name: CephRBD, Namespace: CephRBD, Chart: CephRBD, Wanted: true, Values: map[string]any{}},
		exists: true, status: "deployed", values: map[string]any{}, ns: ownedNS(CephRBD)}
	fs := releaseState{Release: Release{Entry: "ceph", Name: CephFS, Namespace: CephFS, Chart: CephFS}, exists: true, status: "deployed", ns: ownedNS(CephFS)}
	var secrets []object
	for _, o := range CephSecrets(e, []string{CephRBD, CephFS}) {
		secrets = append(secrets, object{obj: o, exists: o.GetNamespace() == CephFS, applied: true})
	}
	es := entryState{entry: e, releases: []releaseState{rbd, fs}, secrets: secrets}
	got := planOf(t, es)
	want(t, "fs off", got, []string{"delete helm-release ceph-csi-cephfs/ceph-csi-cephfs", "delete secret ceph-csi-cephfs/csi-cephfs-secret",
		"delete namespace ceph-csi-cephfs", "create secret ceph-csi-rbd/csi-rbd-secret"})
	steps, _ := (&Plugin{}).Plan(nil, &state{entries: []entryState{es}})
	data, _ := json.Marshal(steps)
	if strings.Contains(string(data), "AQCs3cr3t") {
		t.Errorf("the plan shows the ceph key: %s", data)
	}
	es.entry.Enabled = false
	es.releases[0].Wanted = false
	es.secrets[0].exists = true
	want(t, "ceph disabled", planOf(t, es), []string{"delete helm-release ceph-csi-cephfs/ceph-csi-cephfs", "delete helm-release ceph-csi-rbd/ceph-csi-rbd",
		"delete secret ceph-csi-rbd/csi-rbd-secret", "delete secret ceph-csi-cephfs/csi-cephfs-secret",
		"delete namespace ceph-csi-rbd", "delete namespace ceph-csi-cephfs"})
}

// TestPlanRedactsValues: a release's values are shown, redacted.
func TestPlanRedactsValues(t *testing.T) {
	t.Parallel()
	rs := releaseState{Release: Release{Chart: "mine", Values: map[string]any{"auth": map[string]any{"password": "hunter2", "user": "bob"}}}, ns: ownedNS("mine")}
	steps, _ := (&Plugin{}).Plan(nil, &state{entries: []entryState{chartEntry("mine", true, rs)}})
	data, _ := json.Marshal(steps)
	if strings.Contains(string(data), "hunter2") || !strings.Contains(string(data), "bob") {
		t.Errorf("the plan's values: %s", data)
	}
}

// manifestObject is an object of a manifest as read: existing, applied by
// the plugin or not, in namespace.
func manifestObject(kind, name, namespace string, applied bool) object {
	m := map[string]any{"name": name}
	if namespace != "" {
		m["namespace"] = namespace
	}
	return object{obj: obj(map[string]any{"apiVersion": "v1", "kind": kind, "metadata": m}), exists: true, applied: applied, namespace: namespace}
}

// TestKeepsWhatThePluginDidNotApply: of a manifest turned off or torn
// down, only what the plugin applied is deleted; what another tool made,
// and what is in (or is) one of the cluster's own namespaces, is kept,
// each said once in the plan that removes the rest, and nothing is said
// when nothing is removed. The same holds for MetalLB's pool and
// cert-manager's issuers.
func TestKeepsWhatThePluginDidNotApply(t *testing.T) {
	t.Parallel()
	crd := func(name string, applied bool) object {
		o := obj(map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": name}})
		return object{obj: o, exists: true, applied: applied}
	}
	unnamespaced := manifestObject("ConfigMap", "loose", "default", true)
	delete(unnamespaced.obj.Object["metadata"].(map[string]any), "namespace")
	es := entryState{entry: Entry{Name: "crds", URLs: []string{"https://example.org/x.yaml"}}, manifest: []object{
		crd("mine.example.org", true), crd("theirs.example.org", false),
		manifestObject("Namespace", "default", "", true), manifestObject("ConfigMap", "sys", "kube-system", true), unnamespaced,
		manifestObject("ConfigMap", "app", "apps", true), {obj: manifestObject("ConfigMap", "gone", "apps", true).obj},
	}}
	removal := []string{"delete configmap apps/app", "delete customresourcedefinition mine.example.org",
		"wait configmap default/loose", "wait configmap kube-system/sys", "wait namespace default", "wait customresourcedefinition theirs.example.org"}
	want(t, "disabled", planOf(t, es), removal)
	want(t, "destroy", teardownOf(t, es), removal)
	steps, _ := (&Plugin{}).Plan(nil, &state{entries: []entryState{es}})
	for _, s := range steps[2:] {
		if !strings.HasPrefix(s.Reason, "kept: ") || s.Op != (keepObject{entry: "crds"}) {
			t.Errorf("%s: %q %v", s.Resource, s.Reason, s.Op)
		}
	}
	if r := steps[5].Reason; !strings.Contains(r, "not applied by taloscluster") || !strings.Contains(r, "field manager taloscluster") {
		t.Errorf("a CRD another tool installed: %q", r)
	}
	if r := steps[3].Reason; !strings.Contains(r, "kube-system") {
		t.Errorf("an object in kube-system: %q", r)
	}

	// Once what the plugin applied is gone, the plan is empty.
	es.manifest[0].exists, es.manifest[5].exists = false, false
	want(t, "disabled, the plugin's objects gone", planOf(t, es), []string{})
	want(t, "destroy, the plugin's objects gone", teardownOf(t, es), []string{})

	// A pool another tool made stays; in a namespace the plugin deletes,
	// it goes with it unsaid.
	lb := metallb(false, true)
	for i := range lb.pool {
		lb.pool[i].applied = false
	}
	want(t, "a pool not applied, its namespace deleted", planOf(t, lb), []string{"delete helm-release metallb-system/metallb", "delete namespace metallb-system"})
	lb.releases[0].ns.labels = nil
	want(t, "a pool not applied, its namespace kept", planOf(t, lb), []string{"delete helm-release metallb-system/metallb",
		"wait l2advertisement metallb-system/external", "wait ipaddresspool metallb-system/external"})

	cm := chartEntry("cert-manager", false, releaseState{exists: true, status: "deployed", ns: ownedNS("cert-manager")})
	for _, o := range Issuers(Entry{raw: map[string]any{"staging": true, "prod": true}}) {
		cm.issuers = append(cm.issuers, object{obj: o, exists: true, applied: o.GetName() == "letsencrypt-prod"})
	}
	want(t, "issuers", teardownOf(t, cm), []string{"delete clusterissuer letsencrypt-prod", "delete helm-release cert-manager/cert-manager",
		"delete namespace cert-manager", "wait clusterissuer letsencrypt-staging"})
}

// TestVersionConstraint: a constrained release installs the newest
// version matching it, is up to date at it, upgrades when a newer match
// is out or the installed one does not match; a pinned one is not a
// constraint.
func TestVersionConstraint(t *testing.T) {
	t.Parallel()
	base := releaseState{Release: Release{Chart: "metallb", Version: "~0.14", Values: map[string]any{}}, exists: true, status: "deployed",
		installed: "0.14.9", resolved: "0.14.9", values: map[string]any{}, ns: ownedNS("metallb-system")}
	for _, tc := range []struct {
		name      string
		change    func(*releaseState)
		action    plan.Action
		reason    string
		installed string
	}{
		{"the newest match", func(*releaseState) {}, "", "", ""},
		{"missing", func(r *releaseState) { r.exists = false }, plan.ActionCreate, "not installed", "0.14.9"},
		{"a newer match", func(r *releaseState) { r.installed = "0.14.8" }, plan.ActionUpdate, "a newer chart version matching ~0.14 is out", "0.14.9"},
		{"no match", func(r *releaseState) { r.installed = "0.15.2" }, plan.ActionUpdate, "does not match ~0.14", "0.14.9"},
		{"a match newer than the repository's", func(r *releaseState) { r.resolved = "0.14.8" }, "", "", ""},
		{"1.x", func(r *releaseState) { r.Version, r.installed, r.resolved = "1.x", "1.2.0", "1.3.0" }, plan.ActionUpdate, "matching 1.x", "1.3.0"},
		{"a partial version", func(r *releaseState) { r.Version = "0.14" }, "", "", ""},
	} {
		rs := base
		tc.change(&rs)
		steps, _ := (&Plugin{}).Plan(nil, &state{entries: []entryState{chartEntry("metallb", true, rs)}})
		switch {
		case tc.action == "" && len(steps) != 0:
			t.Errorf("%s: %v", tc.name, stepNames(steps))
		case tc.action != "" && (len(steps) != 1 || steps[0].Action != tc.action || !strings.Contains(steps[0].Reason, tc.reason)):
			t.Errorf("%s: %v", tc.name, steps)
		case tc.action != "":
			if op := steps[0].Op.(deployRelease); op.version != tc.installed {
				t.Errorf("%s: installs %q, want %q", tc.name, op.version, tc.installed)
			}
		}
	}
}

// TestRefusalIsTheEntrysOnlyStep: a refused release's entry plans nothing
// else (not its namespace); the other entries are planned.
func TestRefusalIsTheEntrysOnlyStep(t *testing.T) {
	t.Parallel()
	moved := chartEntry("lab-app", true, releaseState{ns: namespaceState{name: "lab-new"}, elsewhere: []string{"lab-app"}})
	got := planOf(t, moved, metallb(true, false))
	want(t, "moved", got, []string{"refuse helm-release lab-new/lab-app",
		"create helm-release metallb-system/metallb", "create ipaddresspool metallb-system/external", "create l2advertisement metallb-system/external"})
}
