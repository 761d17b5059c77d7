package argocd_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/taloscluster/taloscluster/plugins/internal/plugintest"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/taloscluster/taloscluster/plugins/argocd"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// load reads an example cluster directory with extra cluster.yaml text
// and secrets.yaml text appended.
func load(t *testing.T, example, extra, secrets string) *spec.Cluster {
	t.Helper()
	return plugintest.Load(t, example, extra, secrets)
}

// base is an argocd section registering the cluster with both repositories.
const base = `argocd:
  kubeconfig: argocd.kubeconfig
  admins: [ops@example.org]
  users: [dev@example.org]
  git: {url: https://git.example.org/k8s/apps.git}
  infra: {url: https://git.example.org/k8s/infra.git}
`

var downstream = argocd.Cluster{Server: "https://1.2.3.4:6443", CAData: "Q0E=", CertData: "Q0VSVA==", KeyData: "S0VZ",
	Ingress: argocd.Ingress{FloatingIP: "1.2.3.5", VIP: "10.0.0.2"}, OpenStackProject: "my project"}

func render(t *testing.T, c *spec.Cluster, d argocd.Cluster) argocd.Objects {
	t.Helper()
	objs, err := argocd.Render(argocd.SettingsOf(c), d)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s among %d objects", kind, name, len(objs))
	return nil
}

// values returns the Helm values of an Application, parsed.
func values(t *testing.T, app *unstructured.Unstructured) map[string]any {
	t.Helper()
	text, _, _ := unstructured.NestedString(app.Object, "spec", "source", "helm", "values")
	var v map[string]any
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("the Helm values do not parse: %v\n%s", err, text)
	}
	return v
}

func get(t *testing.T, m map[string]any, path ...string) any {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(m, path...)
	if err != nil || !ok {
		t.Fatalf("no %s in %v", strings.Join(path, "."), m)
	}
	return v
}

func TestRenderedObjects(t *testing.T) {
	t.Parallel()
	objs := render(t, load(t, "openstack", base, ""), downstream)
	var names []string
	for _, o := range objs.ArgoCD {
		names = append(names, o.GetKind()+"/"+o.GetName())
		if o.GetNamespace() != argocd.Namespace {
			t.Errorf("%s/%s is in namespace %q, want argocd", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	want := []string{"Secret/argocd-science-secret", "AppProject/science", "Secret/repo-science", "Application/science", "Application/science-cluster"}
	if !slices.Equal(names, want) {
		t.Fatalf("rendered %v, want %v in that order", names, want)
	}
	if len(objs.Cluster) != 0 {
		t.Errorf("objects on the cluster itself without cinder: %d", len(objs.Cluster))
	}

	secret := find(t, objs.ArgoCD, "Secret", "argocd-science-secret")
	if secret.GetLabels()["argocd.argoproj.io/secret-type"] != "cluster" || secret.GetAnnotations() != nil {
		t.Errorf("cluster Secret labels %v annotations %v", secret.GetLabels(), secret.GetAnnotations())
	}
	var cfg struct {
		TLS struct {
			Insecure                  bool
			CAData, CertData, KeyData string
		} `json:"tlsClientConfig"`
	}
	if err := json.Unmarshal([]byte(get(t, secret.Object, "stringData", "config").(string)), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.TLS.Insecure || cfg.TLS.CAData != "Q0E=" || cfg.TLS.CertData != "Q0VSVA==" || cfg.TLS.KeyData != "S0VZ" {
		t.Errorf("cluster Secret config %+v", cfg)
	}
	if get(t, secret.Object, "stringData", "server") != "https://1.2.3.4:6443" || get(t, secret.Object, "stringData", "name") != "science" {
		t.Errorf("cluster Secret data %v", secret.Object["stringData"])
	}

	proj := find(t, objs.ArgoCD, "AppProject", "science")
	roles := get(t, proj.Object, "spec", "roles").([]any)
	admin, user := roles[0].(map[string]any), roles[1].(map[string]any)
	if admin["name"] != "admin" || !slices.Equal(admin["policies"].([]any), []any{"p, proj:science:admin, applications, *, science/*, allow"}) ||
		!slices.Equal(admin["groups"].([]any), []any{"ops@example.org"}) {
		t.Errorf("admin role %v", admin)
	}
	if user["name"] != "user" || !slices.Equal(user["policies"].([]any), []any{"p, proj:science:user, applications, get, science/*, allow"}) {
		t.Errorf("user role %v", user)
	}
	dests := get(t, proj.Object, "spec", "destinations").([]any)
	if dests[0].(map[string]any)["server"] != "https://1.2.3.4:6443" || dests[1].(map[string]any)["server"] != "https://kubernetes.default.svc" {
		t.Errorf("project destinations %v", dests)
	}

	repo := find(t, objs.ArgoCD, "Secret", "repo-science")
	if d := repo.Object["stringData"].(map[string]any); d["url"] != "https://git.example.org/k8s/apps.git" || d["password"] != "" || d["username"] != "" ||
		d["type"] != "git" || d["project"] != "science" || d["name"] != "science-cluster" {
		t.Errorf("repository Secret data %v", d)
	}

	root := find(t, objs.ArgoCD, "Application", "science")
	if get(t, root.Object, "spec", "source", "repoURL") != "https://git.example.org/k8s/apps.git" ||
		get(t, root.Object, "spec", "source", "helm", "values") != "cluster: science\n" {
		t.Errorf("root Application source %v", get(t, root.Object, "spec", "source"))
	}
	cl := find(t, objs.ArgoCD, "Application", "science-cluster")
	if get(t, cl.Object, "spec", "source", "repoURL") != "https://git.example.org/k8s/infra.git" {
		t.Errorf("the cluster Application's repository %v", get(t, cl.Object, "spec", "source", "repoURL"))
	}
	v := values(t, cl)
	for path, want := range map[string]any{
		"cluster.url": "https://1.2.3.4:6443", "cluster.rancher.id": "", "openstack.project": "my project",
		"ingresscontroller.publicIP": "1.2.3.5", "ingresscontroller.privateIP": "10.0.0.2", "ingresscontroller.class": "traefik",
		"sync": false, "nfs.type": "csi", "gateway_crd.enabled": true, "metallb.enabled": false,
	} {
		if got := get(t, v, strings.Split(path, ".")...); got != want {
			t.Errorf("values %s = %v, want %v", path, got, want)
		}
	}
	if region := get(t, v, "openstack", "region"); region != "RegionOne" {
		t.Errorf("openstack.region without one in cluster.yaml = %v, want RegionOne", region)
	}
}

// TestMetalLBAddresses: the ingress VIP as a /32 on OpenStack, the ingress
// pool verbatim on Proxmox (no ingress addresses then), the VIP when the
// pool is empty, and nothing while MetalLB is off.
func TestMetalLBAddresses(t *testing.T) {
	t.Parallel()
	on := base + "  metallb: {enabled: true, version: 0.14.9}\n"
	for _, tc := range []struct {
		name, example, extra string
		ingress              argocd.Ingress
		want                 []any
	}{
		{"openstack VIP", "openstack", on, argocd.Ingress{VIP: "10.0.0.2", FloatingIP: "1.2.3.5"}, []any{"10.0.0.2/32"}},
		{"proxmox range", "proxmox-external", on, argocd.Ingress{Pool: []string{"203.0.113.20-203.0.113.29"}}, []any{"203.0.113.20-203.0.113.29"}},
		{"prefix and blanks", "openstack", on, argocd.Ingress{Pool: []string{" 10.1.0.0/28 ", "", "10.1.0.20"}}, []any{"10.1.0.0/28", "10.1.0.20/32"}},
		{"off", "openstack", base, argocd.Ingress{VIP: "10.0.0.2"}, []any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := downstream
			d.Ingress = tc.ingress
			v := values(t, find(t, render(t, load(t, tc.example, tc.extra, ""), d).ArgoCD, "Application", load(t, tc.example, "", "").Name+"-cluster"))
			if got := get(t, v, "metallb", "addresses").([]any); !slices.Equal(got, tc.want) {
				t.Errorf("metallb.addresses = %v, want %v", got, tc.want)
			}
			if tc.extra == on && get(t, v, "metallb", "version") != "0.14.9" {
				t.Errorf("metallb.version = %v", get(t, v, "metallb", "version"))
			}
		})
	}
}

// TestSyncPolicy: automated (the default) puts the automated block on both
// Applications, false leaves it out; sync is only the chart's value.
func TestSyncPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		extra           string
		automated, sync bool
	}{
		{"", true, false},
		{"  automated: false\n", false, false},
		{"  sync: true\n", true, true},
		{"  sync: true\n  automated: false\n", false, true},
	} {
		objs := render(t, load(t, "openstack", base+tc.extra, ""), downstream)
		for _, name := range []string{"science", "science-cluster"} {
			app := find(t, objs.ArgoCD, "Application", name)
			_, has := get(t, app.Object, "spec", "syncPolicy").(map[string]any)["automated"]
			if has != tc.automated {
				t.Errorf("%q: %s automated block %v, want %v", tc.extra, name, has, tc.automated)
			}
			if opts := get(t, app.Object, "spec", "syncPolicy", "syncOptions").([]any); !slices.Equal(opts, []any{"CreateNamespace=true"}) {
				t.Errorf("%q: %s syncOptions %v", tc.extra, name, opts)
			}
		}
		if got := get(t, values(t, find(t, objs.ArgoCD, "Application", "science-cluster")), "sync"); got != tc.sync {
			t.Errorf("%q: sync value %v, want %v", tc.extra, got, tc.sync)
		}
	}
}

// TestRancherMembersAndID: rancher's members follow argocd's, each once;
// the Rancher id is the Secret's annotation and a value.
func TestRancherMembersAndID(t *testing.T) {
	t.Parallel()
	c := load(t, "openstack", base+"rancher:\n  admins: [ops@example.org, boss@example.org]\n  users: [ext@example.org]\n", "")
	d := downstream
	d.RancherID = "c-abc12"
	objs := render(t, c, d)
	if got := find(t, objs.ArgoCD, "Secret", "argocd-science-secret").GetAnnotations()[argocd.RancherAnnotation]; got != "c-abc12" {
		t.Errorf("Rancher annotation %q", got)
	}
	roles := get(t, find(t, objs.ArgoCD, "AppProject", "science").Object, "spec", "roles").([]any)
	if g := roles[0].(map[string]any)["groups"].([]any); !slices.Equal(g, []any{"ops@example.org", "boss@example.org"}) {
		t.Errorf("admin groups %v", g)
	}
	if g := roles[1].(map[string]any)["groups"].([]any); !slices.Equal(g, []any{"dev@example.org", "ext@example.org"}) {
		t.Errorf("user groups %v", g)
	}
	if id := get(t, values(t, find(t, objs.ArgoCD, "Application", "science-cluster")), "cluster", "rancher", "id"); id != "c-abc12" {
		t.Errorf("values cluster.rancher.id %v", id)
	}
}

// TestRegistrationOnly: without argocd.git.url only the cluster Secret and
// the AppProject are rendered.
func TestRegistrationOnly(t *testing.T) {
	t.Parallel()
	objs := render(t, load(t, "openstack", "argocd:\n  context: argo\n", ""), downstream)
	if len(objs.ArgoCD) != 2 || objs.ArgoCD[0].GetKind() != "Secret" || objs.ArgoCD[1].GetKind() != "AppProject" {
		t.Fatalf("registration only rendered %d objects", len(objs.ArgoCD))
	}
	roles := get(t, objs.ArgoCD[1].Object, "spec", "roles").([]any)
	if _, ok := roles[0].(map[string]any)["groups"]; ok {
		t.Errorf("a role without members has groups: %v", roles[0])
	}
}

// TestRoundTrip: values a person writes that YAML would read otherwise
// (quotes, colons, booleans, leading zeros) come back unchanged, and the
// Git credential never reaches the cluster's Application.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, token := range []string{`it's`, `"quoted"`, `back\slash`, "on", "true", "0123", " lead", "key: value", "- dash", "# comment"} {
		secrets := "argocd:\n  git:\n    username: bot\n    token: " + strings.ReplaceAll(mustJSON(t, token), "\n", "") + "\n"
		objs := render(t, load(t, "openstack", base, secrets), downstream)
		if got := find(t, objs.ArgoCD, "Secret", "repo-science").Object["stringData"].(map[string]any)["password"]; got != token {
			t.Errorf("the Git token %q came back as %q", token, got)
		}
		cl := find(t, objs.ArgoCD, "Application", "science-cluster")
		if text, _, _ := unstructured.NestedString(cl.Object, "spec", "source", "helm", "values"); strings.Contains(text, token) && len(token) > 4 {
			t.Errorf("the Git token %q is in the cluster Application's values", token)
		}
	}
}

func mustJSON(t *testing.T, s string) string {
	t.Helper()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestCinder: cinder's cloud config goes to the cluster itself, namespace
// first, with the application credential; without one it is an error.
func TestCinder(t *testing.T) {
	t.Parallel()
	objs := render(t, load(t, "openstack", base+"  cinder: {enabled: true}\n", ""), downstream)
	if len(objs.Cluster) != 2 || objs.Cluster[0].GetKind() != "Namespace" || objs.Cluster[0].GetName() != argocd.CinderNamespace {
		t.Fatalf("objects on the cluster: %v", objs.Cluster)
	}
	sec := objs.Cluster[1]
	if sec.GetName() != argocd.CinderSecret || sec.GetNamespace() != argocd.CinderNamespace {
		t.Fatalf("cinder Secret %s/%s", sec.GetNamespace(), sec.GetName())
	}
	conf := sec.Object["stringData"].(map[string]any)["cloud.conf"].(string)
	lines := strings.Split(conf, "\n")
	if lines[0] != "[Global]" || !slices.Contains(lines, "application-credential-id=x0123456789") || !slices.Contains(lines, "region=RegionOne") {
		t.Errorf("cloud.conf:\n%s", conf)
	}
	for _, o := range objs.ArgoCD {
		data, _ := json.Marshal(o.Object)
		if strings.Contains(string(data), "x0123456789") {
			t.Errorf("the OpenStack credential is in %s/%s, which goes to Argo CD", o.GetKind(), o.GetName())
		}
	}
	s := argocd.SettingsOf(load(t, "openstack", base+"  cinder: {enabled: true}\n", ""))
	s.OpenStack.CredentialSecret = ""
	if _, err := argocd.Render(s, downstream); err == nil || !strings.Contains(err.Error(), "application credential") {
		t.Errorf("cinder without a credential: %v", err)
	}
}

// TestClusterOf reads the server and the admin credentials of a
// kubeconfig as Talos writes one.
func TestClusterOf(t *testing.T) {
	t.Parallel()
	kubeconfig := `apiVersion: v1
kind: Config
clusters:
- name: science
  cluster: {server: "https://1.2.3.4:6443", certificate-authority-data: Q0E=}
users:
- name: admin@science
  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}
contexts:
- name: admin@science
  context: {cluster: science, user: admin@science}
current-context: admin@science
`
	c, err := argocd.ClusterOf([]byte(kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server != "https://1.2.3.4:6443" || c.CAData != "Q0E=" || c.CertData != "Q0VSVA==" || c.KeyData != "S0VZ" {
		t.Errorf("read %+v", c)
	}
	if _, err := argocd.ClusterOf([]byte("apiVersion: v1\nkind: Config\n")); err == nil {
		t.Error("a kubeconfig without a context was read")
	}
}

// Preflight refuses, before anything is read from a cluster, a section
// the plugin cannot use; a usable one passes.
func TestPreflight(t *testing.T) {
	t.Parallel()
	kubeconfig := []byte("apiVersion: v1\nkind: Config\nclusters: [{name: argo, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: admin, user: {token: secret-token-value}}]\ncontexts: [{name: argo, context: {cluster: argo, user: admin}}]\ncurrent-context: argo\n")
	files := fstest.MapFS{"argocd.kubeconfig": {Data: kubeconfig}, "broken.kubeconfig": {Data: []byte("token: secret-token-value\n: [")}}
	cinder := "  cinder: {enabled: true}\n"
	for _, tc := range []struct {
		name, example, extra, want string
	}{
		{name: "usable", example: "proxmox-bridge", extra: base},
		{name: "context alone in the agent", example: "proxmox-bridge", extra: "argocd:\n  context: argo\n", want: "argocd.context alone"},
		{name: "a missing kubeconfig", example: "proxmox-bridge", extra: strings.Replace(base, "argocd.kubeconfig", "nowhere.kubeconfig", 1), want: "argocd.kubeconfig"},
		{name: "not a kubeconfig", example: "proxmox-bridge", extra: strings.Replace(base, "argocd.kubeconfig", "broken.kubeconfig", 1), want: "is not a kubeconfig file"},
		{name: "a path out of the secrets directory", example: "proxmox-bridge", extra: strings.Replace(base, "argocd.kubeconfig", "../argocd.kubeconfig", 1), want: "inside the cluster's secrets directory"},
		{name: "cinder on proxmox", example: "proxmox-bridge", extra: base + cinder, want: "requires an OpenStack application credential"},
		{name: "cinder on openstack", example: "openstack", extra: base + cinder},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := argocd.New(files).Preflight(load(t, tc.example, tc.extra, ""))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "secret-token-value"):
				t.Fatalf("the error quotes the kubeconfig: %v", err)
			}
		})
	}
}
