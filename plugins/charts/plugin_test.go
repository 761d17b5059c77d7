package charts_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	labcharts "github.com/taloscluster/taloscluster/lab/charts"
	"github.com/taloscluster/taloscluster/lab/kube/realkube"
	"github.com/taloscluster/taloscluster/plugins/charts"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

func steps(t *testing.T, p *charts.Plugin, c *spec.Cluster, env reconcile.PluginEnv, teardown bool) []plan.Change {
	t.Helper()
	env.Cluster = c
	st, err := p.Observe(t.Context(), env)
	if err != nil {
		t.Fatal(err)
	}
	plan := p.Plan
	if teardown {
		plan = p.PlanTeardown
	}
	out, err := plan(c, st)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func apply(t *testing.T, p *charts.Plugin, env reconcile.PluginEnv, chs []plan.Change) {
	t.Helper()
	for _, ch := range chs {
		if _, err := p.Apply(t.Context(), env, ch); err != nil {
			t.Fatalf("%s %s: %v", ch.Action, ch.Resource, err)
		}
	}
}

func names(chs []plan.Change) []string {
	out := []string{}
	for _, ch := range chs {
		out = append(out, string(ch.Action)+" "+string(ch.Resource.Kind)+" "+ch.Resource.Name)
	}
	return out
}

// lab is a chart repository on httptest TLS and a real kube-apiserver.
type lab struct {
	repo       *labcharts.Repo
	url        string
	roots      *x509.CertPool
	kubeconfig []byte
	core       kubernetes.Interface
}

func startLab(t *testing.T) *lab {
	t.Helper()
	cp := realkube.Start(t, realkube.Options{Controllers: []string{"namespace"}})
	r, err := labcharts.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(r)
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	return &lab{repo: r, url: srv.URL, roots: roots, kubeconfig: cp.AdminKubeconfig(), core: realkube.Client(t, cp.Admin)}
}

func (l *lab) plugin(allow func(string) error) *charts.Plugin {
	return charts.New(charts.Options{RootCAs: l.roots, GitHubAPI: l.url, GatewayManifest: l.url + labcharts.GatewayManifest, ReadyWait: -1, AllowURL: allow})
}

// section is a charts section on the lab's repository.
func (l *lab) section(metallb, labApp, certManager string) string {
	return strings.NewReplacer("URL", l.url, "METALLB", metallb, "LABAPP", labApp, "CMVERSION", certManager).Replace(`charts:
  lab-app: {repo: URL, values: {greeting: LABAPP, auth: {password: s3cr3t-pw}}}
  cert-manager: {repo: URL, version: CMVERSION, email: ops@example.org, prod: true}
  traefik: {repo: URL}
  metallb: {repo: URL, enabled: METALLB}
  gateway: {}
`)
}

func (l *lab) configMap(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	cm, err := l.core.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's ConfigMap %s/%s: %v", ns, name, err)
	}
	return cm.Data
}

// TestChartsOnARealAPIServer: against a real kube-apiserver and the lab's
// chart repository over TLS, the plugin installs every entry, then plans
// nothing; finds changed values, a new pinned version, a newer latest
// chart and a newer Gateway API release; removes a disabled entry in the
// Python tool's order; and tears down leaving no release and no namespace
// it created.
func TestChartsOnARealAPIServer(t *testing.T) {
	t.Parallel()
	l := startLab(t)
	p := l.plugin(nil)
	env := reconcile.PluginEnv{Kubeconfig: l.kubeconfig}
	c := load(t, "proxmox-external", l.section("true", "hello", "v1.18.2"), "")
	if !p.Configured(c) {
		t.Fatal("a cluster with a charts section is not configured")
	}
	// lab-app's namespace exists already, unlabelled: the plugin neither
	// marks it nor removes it.
	if _, err := l.core.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab-app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	first := steps(t, p, c, env, false)
	want := []string{
		"create customresourcedefinition gatewayclasses.gateway.networking.k8s.io", "create customresourcedefinition gateways.gateway.networking.k8s.io",
		"create namespace metallb-system", "create helm-release metallb-system/metallb",
		"create ipaddresspool metallb-system/external", "create l2advertisement metallb-system/external",
		"create namespace traefik", "create helm-release traefik/traefik",
		"create namespace cert-manager", "create helm-release cert-manager/cert-manager", "create clusterissuer letsencrypt-prod",
		"create helm-release lab-app/lab-app",
	}
	if got := names(first); !slices.Equal(got, want) {
		t.Fatalf("first plan\n got %q\nwant %q", got, want)
	}
	data, _ := json.Marshal(first)
	if strings.Contains(string(data), "s3cr3t-pw") {
		t.Error("the plan shows a password of the values")
	}
	for _, ch := range first {
		if ch.Phase != plan.PhasePlugins || ch.Domain != plan.DomainKube {
			t.Errorf("%s: phase %s, domain %s", ch.Resource, ch.Phase, ch.Domain)
		}
	}
	apply(t, p, env, first)
	if again := steps(t, p, c, env, false); len(again) != 0 {
		t.Fatalf("the plan after applying is %q, want nothing", names(again))
	}
	if d := l.configMap(t, "traefik", "traefik-lab"); d["chart"] != "traefik-37.1.1" || !strings.Contains(d["values"], `"loadBalancerIP":"203.0.113.20"`) {
		t.Errorf("traefik's release: %v", d)
	}
	ns, err := l.core.CoreV1().Namespaces().Get(t.Context(), "metallb-system", metav1.GetOptions{})
	if err != nil || ns.Labels[charts.ManagedByLabel] != charts.ManagedByValue || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("metallb's namespace %v: %v", ns.Labels, err)
	}

	// Values and a pinned version changed in cluster.yaml.
	edited := load(t, "proxmox-external", l.section("true", "bye", "v1.19.0"), "")
	drift := steps(t, p, edited, env, false)
	if got, want := names(drift), []string{"update helm-release cert-manager/cert-manager", "update helm-release lab-app/lab-app"}; !slices.Equal(got, want) {
		t.Fatalf("after editing, the plan is %q, want %q", got, want)
	}
	if !strings.Contains(drift[0].Reason, "pinned") || !strings.Contains(drift[1].Reason, "values changed") {
		t.Errorf("reasons %q, %q", drift[0].Reason, drift[1].Reason)
	}
	apply(t, p, env, drift)
	if d := l.configMap(t, "lab-app", "lab-app-lab"); !strings.Contains(d["values"], `"greeting":"bye"`) {
		t.Errorf("lab-app's values after the upgrade: %v", d)
	}
	if d := l.configMap(t, "cert-manager", "cert-manager-lab"); d["chart"] != "cert-manager-v1.19.0" {
		t.Errorf("cert-manager after the upgrade: %v", d)
	}
	if again := steps(t, p, edited, env, false); len(again) != 0 {
		t.Fatalf("after the upgrades: %q", names(again))
	}

	// A newer chart and a newer Gateway API release are out.
	if err := l.repo.Publish("traefik", "38.0.0"); err != nil {
		t.Fatal(err)
	}
	l.repo.PublishGateway("v1.4.0")
	newer := steps(t, p, edited, env, false)
	if got, want := names(newer), []string{"update customresourcedefinition gatewayclasses.gateway.networking.k8s.io",
		"update customresourcedefinition gateways.gateway.networking.k8s.io", "update helm-release traefik/traefik"}; !slices.Equal(got, want) {
		t.Fatalf("with newer releases out, the plan is %q, want %q", got, want)
	}
	if !slices.Contains(newer[2].Attributes, plan.Attribute{Key: "version", Value: "37.1.1 -> 38.0.0"}) {
		t.Errorf("traefik's upgrade %v", newer[2].Attributes)
	}
	apply(t, p, env, newer)
	if d := l.configMap(t, "traefik", "traefik-lab"); d["chart"] != "traefik-38.0.0" {
		t.Errorf("traefik after the upgrade: %v", d)
	}
	if again := steps(t, p, edited, env, false); len(again) != 0 {
		t.Fatalf("after the newer releases: %q", names(again))
	}

	// MetalLB disabled: its pool, its release, then its namespace.
	off := load(t, "proxmox-external", l.section("false", "bye", "v1.19.0"), "")
	removal := steps(t, p, off, env, false)
	if got, want := names(removal), []string{"delete l2advertisement metallb-system/external", "delete ipaddresspool metallb-system/external",
		"delete helm-release metallb-system/metallb", "delete namespace metallb-system"}; !slices.Equal(got, want) {
		t.Fatalf("with metallb disabled, the plan is %q, want %q", got, want)
	}
	apply(t, p, env, removal)
	if again := steps(t, p, off, env, false); len(again) != 0 {
		t.Fatalf("after the removal: %q", names(again))
	}

	teardown := steps(t, p, off, env, true)
	want = []string{"delete helm-release lab-app/lab-app",
		"delete clusterissuer letsencrypt-prod", "delete helm-release cert-manager/cert-manager", "delete namespace cert-manager",
		"delete helm-release traefik/traefik", "delete namespace traefik",
		"delete customresourcedefinition gateways.gateway.networking.k8s.io", "delete customresourcedefinition gatewayclasses.gateway.networking.k8s.io"}
	if got := names(teardown); !slices.Equal(got, want) {
		t.Fatalf("teardown\n got %q\nwant %q", got, want)
	}
	apply(t, p, env, teardown)
	if left := steps(t, p, off, env, true); len(left) != 0 {
		t.Fatalf("after the teardown %q is left", names(left))
	}
	secrets, err := l.core.CoreV1().Secrets("").List(t.Context(), metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil || len(secrets.Items) != 0 {
		t.Errorf("Helm's release Secrets after the teardown: %d (%v)", len(secrets.Items), err)
	}
	for _, name := range []string{"cert-manager", "traefik", "metallb-system"} {
		ns, err := l.core.CoreV1().Namespaces().Get(t.Context(), name, metav1.GetOptions{})
		if err == nil && ns.DeletionTimestamp == nil {
			t.Errorf("namespace %s is left after the teardown", name)
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
	if ns, err := l.core.CoreV1().Namespaces().Get(t.Context(), "lab-app", metav1.GetOptions{}); err != nil || ns.DeletionTimestamp != nil || len(ns.Labels[charts.ManagedByLabel]) > 0 {
		t.Errorf("a namespace the plugin did not create, after the teardown: %v", err)
	}
	// A teardown step whose object is gone meanwhile is done.
	apply(t, p, env, teardown[:2])

	// Every entry disabled and nothing installed: the section is there,
	// and nothing is planned.
	disabled := load(t, "proxmox-external", "charts:\n  lab-app: {enabled: false, repo: "+l.url+"}\n  traefik: {enabled: false}\n  gateway: {enabled: false}\n", "")
	if got := steps(t, p, disabled, env, false); len(got) != 0 {
		t.Errorf("all disabled, nothing installed: %q", names(got))
	}
	// A teardown without a kubeconfig (a cluster never built) finds
	// nothing to remove.
	if got := steps(t, p, off, reconcile.PluginEnv{Teardown: true}, true); len(got) != 0 {
		t.Errorf("a teardown without a kubeconfig: %q", names(got))
	}
	if _, err := p.Observe(t.Context(), reconcile.PluginEnv{Cluster: off}); err == nil {
		t.Error("a converge without a kubeconfig is not an error")
	}
}

// TestUnreachableRepositories: a repository that fails, hangs, is not
// http(s) or is refused by the AllowURL hook makes Observe fail naming
// the entry, and the hook is asked before every download.
func TestUnreachableRepositories(t *testing.T) {
	t.Parallel()
	l := startLab(t)
	env := reconcile.PluginEnv{Kubeconfig: l.kubeconfig}
	c := load(t, "proxmox-external", "charts:\n  traefik: {repo: "+l.url+"}\n", "")
	observe := func(p *charts.Plugin, c *spec.Cluster, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		env := env
		env.Cluster = c
		_, err := p.Observe(ctx, env)
		return err
	}
	p := l.plugin(nil)
	if err := observe(p, c, time.Minute); err != nil {
		t.Fatalf("a reachable repository: %v", err)
	}

	l.repo.SetFault(labcharts.IndexPath, labcharts.Fail500)
	if err := observe(p, c, time.Minute); err == nil || !strings.Contains(err.Error(), "charts.traefik") || !strings.Contains(err.Error(), "500") {
		t.Errorf("a repository answering 500: %v", err)
	}
	l.repo.SetFault(labcharts.IndexPath, labcharts.Hang)
	start := time.Now()
	if err := observe(p, c, 3*time.Second); err == nil || !strings.Contains(err.Error(), "charts.traefik") {
		t.Errorf("a hanging repository: %v", err)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("a hanging repository held Observe %s", time.Since(start))
	}
	l.repo.SetFault(labcharts.IndexPath, labcharts.NoFault)

	// A turned-off gateway following the latest release, GitHub failing:
	// its CRDs may be on the cluster, so Observe fails naming it rather
	// than reading them absent; a teardown goes on without them.
	l.repo.SetFault(labcharts.GatewayLatestPath, labcharts.Fail500)
	off := load(t, "proxmox-external", "charts:\n  gateway: {enabled: false}\n", "")
	if err := observe(p, off, time.Minute); err == nil || !strings.Contains(err.Error(), "charts.gateway") || !strings.Contains(err.Error(), "500") {
		t.Errorf("a disabled latest gateway with GitHub failing: %v", err)
	}
	if got := steps(t, p, off, reconcile.PluginEnv{Kubeconfig: l.kubeconfig, Teardown: true}, true); len(got) != 0 {
		t.Errorf("its teardown: %q", names(got))
	}
	l.repo.SetFault(labcharts.GatewayLatestPath, labcharts.NoFault)
	if err := observe(p, off, time.Minute); err != nil {
		t.Errorf("a disabled latest gateway with GitHub answering: %v", err)
	}

	for _, repo := range []string{"file:///etc", "ftp://" + strings.TrimPrefix(l.url, "https://"), "https://user:pw@" + strings.TrimPrefix(l.url, "https://")} {
		bad := load(t, "proxmox-external", "charts:\n  traefik: {repo: \""+repo+"\"}\n", "")
		if err := observe(p, bad, time.Minute); err == nil || !strings.Contains(err.Error(), "charts.traefik") || strings.Contains(err.Error(), ":pw@") {
			t.Errorf("repo %s: %v", repo, err)
		}
	}

	// Plain HTTP to the TLS server, and a server whose certificate the
	// roots do not hold, fail.
	plain := load(t, "proxmox-external", "charts:\n  traefik: {repo: "+strings.Replace(l.url, "https://", "http://", 1)+"}\n", "")
	if err := observe(p, plain, time.Minute); err == nil {
		t.Error("plain HTTP to a TLS server read an index")
	}
	if err := observe(charts.New(charts.Options{}), c, time.Minute); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a certificate the roots do not hold: %v", err)
	}

	var asked []string
	refuse := errors.New("not in the endpoint policy")
	deny := l.plugin(func(u string) error {
		asked = append(asked, u)
		return refuse
	})
	hits := l.repo.Hits(labcharts.IndexPath)
	if err := observe(deny, c, time.Minute); err == nil || !errors.Is(err, refuse) || !strings.Contains(err.Error(), "charts.traefik") {
		t.Errorf("a URL the hook refuses: %v", err)
	}
	if !slices.Equal(asked, []string{l.url + "/index.yaml"}) || l.repo.Hits(labcharts.IndexPath) != hits {
		t.Errorf("the hook was asked %v; the repository was reached %d times", asked, l.repo.Hits(labcharts.IndexPath)-hits)
	}
	// The gateway's GitHub API and manifest are asked of the hook too.
	asked = nil
	gw := load(t, "proxmox-external", "charts:\n  gateway: {}\n", "")
	if err := observe(deny, gw, time.Minute); err == nil || !strings.Contains(err.Error(), "charts.gateway") {
		t.Errorf("the gateway with the hook refusing: %v", err)
	}
	if len(asked) != 1 || !strings.HasSuffix(asked[0], labcharts.GatewayLatestPath) {
		t.Errorf("the hook was asked %v", asked)
	}
}

// TestManifestOwnership: against a real kube-apiserver, a manifest entry
// turned off, or torn down, deletes only the objects the plugin applied
// (server-side apply by its field manager): an object another tool
// created as the manifest has it, one in kube-system and the default
// namespace stay, each said once in the plan; an object whose ownership
// is gone by the time its step runs is left in place.
func TestManifestOwnership(t *testing.T) {
	t.Parallel()
	l := startLab(t)
	p := l.plugin(nil)
	env := reconcile.PluginEnv{Kubeconfig: l.kubeconfig}
	l.repo.PublishManifest("apps.yaml", []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: lab-mine, namespace: lab-apps}
data: {owner: taloscluster}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: lab-theirs, namespace: lab-apps}
data: {owner: another-tool}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: lab-system, namespace: kube-system}
data: {owner: taloscluster}
---
apiVersion: v1
kind: Namespace
metadata: {name: default, labels: {lab.example.org/marked: "yes"}}
`))
	section := func(enabled string) *spec.Cluster {
		return load(t, "proxmox-external", "charts:\n  lab-apps: {enabled: "+enabled+", manifest: "+l.url+labcharts.ManifestPrefix+"apps.yaml}\n", "")
	}
	// Another tool made the namespace, and lab-theirs as the manifest has
	// it.
	ctx := t.Context()
	if _, err := l.core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab-apps"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lab-theirs", Namespace: "lab-apps"}, Data: map[string]string{"owner": "another-tool"}}
	if _, err := l.core.CoreV1().ConfigMaps("lab-apps").Create(ctx, theirs, metav1.CreateOptions{FieldManager: "another-tool"}); err != nil {
		t.Fatal(err)
	}
	on, off := section("true"), section("false")
	first := steps(t, p, on, env, false)
	if got, want := names(first), []string{"create configmap lab-apps/lab-mine", "create configmap kube-system/lab-system", "update namespace default"}; !slices.Equal(got, want) {
		t.Fatalf("first plan\n got %q\nwant %q", got, want)
	}
	apply(t, p, env, first)
	if again := steps(t, p, on, env, false); len(again) != 0 {
		t.Fatalf("the plan after applying is %q", names(again))
	}

	kept := []string{"wait namespace default", "wait configmap kube-system/lab-system", "wait configmap lab-apps/lab-theirs"}
	removal := steps(t, p, off, env, false)
	if got, want := names(removal), append([]string{"delete configmap lab-apps/lab-mine"}, kept...); !slices.Equal(got, want) {
		t.Fatalf("turned off\n got %q\nwant %q", got, want)
	}
	for i, why := range []string{"cluster's own", "kube-system", "not applied by taloscluster"} {
		if r := removal[i+1].Reason; !strings.HasPrefix(r, "kept: ") || !strings.Contains(r, why) {
			t.Errorf("%s: %q", removal[i+1].Resource, r)
		}
	}
	apply(t, p, env, removal)
	l.present(t, "lab-theirs", "lab-system")
	if _, err := l.core.CoreV1().ConfigMaps("lab-apps").Get(ctx, "lab-mine", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap the plugin applied, after the removal: %v", err)
	}
	if again := steps(t, p, off, env, false); len(again) != 0 {
		t.Fatalf("the plan after the removal is %q", names(again))
	}

	// On again, then torn down: the same.
	apply(t, p, env, steps(t, p, on, env, false))
	teardown := steps(t, p, on, env, true)
	if got, want := names(teardown), append([]string{"delete configmap lab-apps/lab-mine"}, kept...); !slices.Equal(got, want) {
		t.Fatalf("teardown\n got %q\nwant %q", got, want)
	}
	apply(t, p, env, teardown)
	l.present(t, "lab-theirs", "lab-system")
	if again := steps(t, p, on, env, true); len(again) != 0 {
		t.Fatalf("after the teardown %q is left", names(again))
	}

	// The plugin's object loses the plugin's apply between the plan and
	// its step (its managedFields cleared): the step leaves it in place.
	apply(t, p, env, steps(t, p, on, env, false))
	teardown = steps(t, p, on, env, true)
	clear := []byte(`{"metadata":{"managedFields":[{}]}}`)
	if _, err := l.core.CoreV1().ConfigMaps("lab-apps").Patch(ctx, "lab-mine", types.MergePatchType, clear, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Apply(ctx, env, teardown[0]); err == nil || !strings.Contains(err.Error(), "charts.lab-apps") || !strings.Contains(err.Error(), "left in place") {
		t.Errorf("deleting an object no longer the plugin's: %v", err)
	}
	l.present(t, "lab-mine")
}

// present fails the test unless the ConfigMaps named (in lab-apps or
// kube-system) exist, and the default namespace.
func (l *lab) present(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		ns := "lab-apps"
		if n == "lab-system" {
			ns = "kube-system"
		}
		if _, err := l.core.CoreV1().ConfigMaps(ns).Get(t.Context(), n, metav1.GetOptions{}); err != nil {
			t.Errorf("ConfigMap %s/%s: %v", ns, n, err)
		}
	}
	if ns, err := l.core.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("the default namespace: %v", err)
	}
}

// TestVersionConstraintOnARealAPIServer: metallb at "~0.14" installs the
// newest 0.14 (0.14.9, not 0.15.2), then plans nothing; a newer 0.14 is
// one upgrade; a newer version the constraint does not match is none.
func TestVersionConstraintOnARealAPIServer(t *testing.T) {
	t.Parallel()
	l := startLab(t)
	p := l.plugin(nil)
	env := reconcile.PluginEnv{Kubeconfig: l.kubeconfig}
	c := load(t, "proxmox-external", "charts:\n  metallb: {repo: "+l.url+", version: \"~0.14\"}\n", "")
	first := steps(t, p, c, env, false)
	if got, want := names(first), []string{"create namespace metallb-system", "create helm-release metallb-system/metallb",
		"create ipaddresspool metallb-system/external", "create l2advertisement metallb-system/external"}; !slices.Equal(got, want) {
		t.Fatalf("first plan\n got %q\nwant %q", got, want)
	}
	if !slices.Contains(first[1].Attributes, plan.Attribute{Key: "version", Value: "0.14.9"}) {
		t.Errorf("the install's attributes %v", first[1].Attributes)
	}
	apply(t, p, env, first)
	if d := l.configMap(t, "metallb-system", "metallb-lab"); d["chart"] != "metallb-0.14.9" {
		t.Errorf("metallb installed: %v", d)
	}
	if again := steps(t, p, c, env, false); len(again) != 0 {
		t.Fatalf("the plan after applying is %q, want nothing", names(again))
	}

	if err := l.repo.Publish("metallb", "0.14.10"); err != nil {
		t.Fatal(err)
	}
	newer := steps(t, p, c, env, false)
	if got := names(newer); !slices.Equal(got, []string{"update helm-release metallb-system/metallb"}) ||
		!slices.Contains(newer[0].Attributes, plan.Attribute{Key: "version", Value: "0.14.9 -> 0.14.10"}) {
		t.Fatalf("with 0.14.10 out: %q %v", got, newer)
	}
	apply(t, p, env, newer)
	if d := l.configMap(t, "metallb-system", "metallb-lab"); d["chart"] != "metallb-0.14.10" {
		t.Errorf("metallb upgraded: %v", d)
	}
	if err := l.repo.Publish("metallb", "0.16.0"); err != nil {
		t.Fatal(err)
	}
	if again := steps(t, p, c, env, false); len(again) != 0 {
		t.Fatalf("with 0.16.0 out, the plan is %q, want nothing", names(again))
	}
}
