package argocd_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/taloscluster/taloscluster/lab/kube/realkube"
	"github.com/taloscluster/taloscluster/plugins/argocd"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

func steps(t *testing.T, p *argocd.Plugin, c *spec.Cluster, env reconcile.PluginEnv, teardown bool) []plan.Change {
	t.Helper()
	st, err := p.Observe(t.Context(), env)
	if err != nil {
		t.Fatal(err)
	}
	if teardown {
		out, err := p.PlanTeardown(c, st)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out, err := p.Plan(c, st)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func apply(t *testing.T, p *argocd.Plugin, env reconcile.PluginEnv, chs []plan.Change) {
	t.Helper()
	for _, ch := range chs {
		if _, err := p.Apply(t.Context(), env, ch); err != nil {
			t.Fatalf("%s %s: %v", ch.Action, ch.Resource, err)
		}
	}
}

func names(chs []plan.Change) []string {
	var out []string
	for _, ch := range chs {
		out = append(out, string(ch.Action)+" "+ch.Resource.Name)
	}
	return out
}

// TestRegistrationOnARealAPIServer: against a real kube-apiserver with
// Argo CD's kinds, the plugin creates the registration, then plans
// nothing, finds a changed object and applies it back, keeps Secret
// values out of its plan, and tears down in the Python plugin's order,
// leaving cinder's namespace.
func TestRegistrationOnARealAPIServer(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{})
	dyn, err := dynamic.NewForConfig(cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	cp.InstallArgoCD(t)
	kubeconfig, err := os.ReadFile(cp.Kubeconfig(t, "admin", "system:masters"))
	if err != nil {
		t.Fatal(err)
	}
	c := load(t, "openstack", base+"  cinder: {enabled: true}\n", "argocd:\n  git: {username: bot, token: s3cr3t-git-token}\n")
	p := argocd.New(fstest.MapFS{"argocd.kubeconfig": {Data: kubeconfig}})
	env := reconcile.PluginEnv{Cluster: c, Kubeconfig: kubeconfig, Public: kubeconfig, IngressVIP: "10.0.0.2", IngressPublic: "1.2.3.5", Project: "physics"}
	if !p.Configured(c) {
		t.Fatal("a cluster with argocd.kubeconfig is not configured")
	}

	first := steps(t, p, c, env, false)
	want := []string{"create argocd:argocd/argocd-science-secret", "create argocd:argocd/science", "create argocd:argocd/repo-science",
		"create argocd:argocd/science", "create argocd:argocd/science-cluster", "create cluster:cinder-csi", "create cluster:cinder-csi/cinder-csi-cloud-config"}
	if got := names(first); !slices.Equal(got, want) {
		t.Fatalf("first plan %v, want %v", got, want)
	}
	data, _ := json.Marshal(first)
	for _, secret := range []string{"s3cr3t-git-token", "x0123456789", "Q0VSVA"} {
		if strings.Contains(string(data), secret) {
			t.Errorf("the plan's steps show the secret %q", secret)
		}
	}
	apply(t, p, env, first)
	if again := steps(t, p, c, env, false); len(again) != 0 {
		t.Fatalf("the plan after applying is %v, want nothing", names(again))
	}
	applications := dyn.Resource(schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}).Namespace(argocd.Namespace)
	app, err := applications.Get(t.Context(), "science-cluster", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := values(t, app)
	if get(t, v, "openstack", "project") != "physics" {
		t.Errorf("the provider's project is not the Application's: %v", get(t, v, "openstack"))
	}
	if get(t, v, "ingresscontroller", "privateIP") != "10.0.0.2" || get(t, v, "ingresscontroller", "publicIP") != "1.2.3.5" {
		t.Errorf("the provider's ingress addresses are not the Application's: %v", get(t, v, "ingresscontroller"))
	}

	// cinder turned off: the cloud config (the OpenStack credential) is
	// removed from the cluster; turned on again, it is made again.
	off := load(t, "openstack", base, "argocd:\n  git: {username: bot, token: s3cr3t-git-token}\n")
	offEnv := env
	offEnv.Cluster = off
	orphan := steps(t, p, off, offEnv, false)
	if got := names(orphan); !slices.Equal(got, []string{"update argocd:argocd/science-cluster", "delete cluster:cinder-csi/cinder-csi-cloud-config"}) {
		t.Fatalf("with cinder off the plan is %v, want the values' update and the cloud config's removal", got)
	}
	apply(t, p, offEnv, orphan)
	if again := steps(t, p, off, offEnv, false); len(again) != 0 {
		t.Fatalf("with cinder off, after the removal, the plan is %v", names(again))
	}
	back := steps(t, p, c, env, false)
	if got := names(back); !slices.Equal(got, []string{"update argocd:argocd/science-cluster", "create cluster:cinder-csi/cinder-csi-cloud-config"}) {
		t.Fatalf("with cinder on again the plan is %v", got)
	}
	apply(t, p, env, back)

	// Someone edits the AppProject: it is found and put back.
	projects := dyn.Resource(schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}).Namespace(argocd.Namespace)
	proj, err := projects.Get(t.Context(), "science", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(proj.Object, "edited by hand", "spec", "description"); err != nil {
		t.Fatal(err)
	}
	if _, err := projects.Update(t.Context(), proj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	drift := steps(t, p, c, env, false)
	if got := names(drift); !slices.Equal(got, []string{"update argocd:argocd/science"}) || drift[0].Resource.Kind != "appproject" {
		t.Fatalf("after an edit the plan is %v, want the AppProject's update", got)
	}
	apply(t, p, env, drift)
	proj, err = projects.Get(t.Context(), "science", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d, _, _ := unstructured.NestedString(proj.Object, "spec", "description"); d != "science cluster" {
		t.Errorf("the AppProject's description after the update: %q", d)
	}

	// Registration only (argocd.git removed): what was made for the Git
	// repository (the repository Secret holds its token) and cinder's
	// cloud config are removed; then the full registration again.
	only := load(t, "openstack", "argocd:\n  kubeconfig: argocd.kubeconfig\n", "")
	onlyEnv := env
	onlyEnv.Cluster = only
	gone := names(steps(t, p, only, onlyEnv, false))
	for _, want := range []string{"delete argocd:argocd/repo-science", "delete argocd:argocd/science-cluster", "delete cluster:cinder-csi/cinder-csi-cloud-config"} {
		if !slices.Contains(gone, want) {
			t.Errorf("registration only: the plan %v lacks %q", gone, want)
		}
	}
	apply(t, p, onlyEnv, steps(t, p, only, onlyEnv, false))
	if again := steps(t, p, only, onlyEnv, false); len(again) != 0 {
		t.Fatalf("registration only, after the removals: %v", names(again))
	}
	apply(t, p, env, steps(t, p, c, env, false))

	// A teardown without the cluster (never built, or gone): the objects
	// on Argo CD are found all the same.
	blind := steps(t, p, c, reconcile.PluginEnv{Cluster: c, Teardown: true}, true)
	if got, want := names(blind), []string{"delete argocd:argocd/science", "delete argocd:argocd/science-cluster",
		"delete argocd:argocd/science", "delete argocd:argocd/argocd-science-secret", "delete argocd:argocd/repo-science"}; !slices.Equal(got, want) {
		t.Fatalf("teardown without the cluster %v, want %v", got, want)
	}

	teardown := steps(t, p, c, env, true)
	want = []string{"delete cluster:cinder-csi/cinder-csi-cloud-config", "delete argocd:argocd/science", "delete argocd:argocd/science-cluster",
		"delete argocd:argocd/science", "delete argocd:argocd/argocd-science-secret", "delete argocd:argocd/repo-science"}
	if got := names(teardown); !slices.Equal(got, want) {
		t.Fatalf("teardown %v, want %v", got, want)
	}
	if teardown[1].Resource.Kind != "application" || teardown[3].Resource.Kind != "appproject" {
		t.Errorf("teardown kinds %v %v", teardown[1].Resource, teardown[3].Resource)
	}
	apply(t, p, env, teardown)
	if left := steps(t, p, c, env, true); len(left) != 0 {
		t.Fatalf("after the teardown %v is left", names(left))
	}
	core := realkube.Client(t, cp.Admin).CoreV1()
	if _, err := core.Namespaces().Get(t.Context(), argocd.CinderNamespace, metav1.GetOptions{}); err != nil {
		t.Errorf("cinder's namespace after the teardown: %v", err)
	}
	if _, err := core.Secrets(argocd.Namespace).Get(t.Context(), "repo-science", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the repository Secret after the teardown: %v", err)
	}
	// A teardown step whose object is gone meanwhile is done.
	apply(t, p, env, teardown[:1])

	// A Rancher agent on the cluster: its id goes on the cluster Secret;
	// the rancher plugin's result, when there is one, wins.
	if _, err := core.Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cattle-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Secrets("cattle-system").Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cattle-credentials-1a2b3c"},
		Data: map[string][]byte{"namespace": []byte("c-abc12")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply(t, p, env, steps(t, p, c, env, false))
	annotation := func() string {
		sec, err := core.Secrets(argocd.Namespace).Get(t.Context(), "argocd-science-secret", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sec.Annotations[argocd.RancherAnnotation]
	}
	if got := annotation(); got != "c-abc12" {
		t.Errorf("the cluster Secret's Rancher id with an agent on the cluster: %q, want c-abc12", got)
	}
	env.Results = map[string]map[string]string{"rancher": {"cluster_id": "c-xyz89"}}
	apply(t, p, env, steps(t, p, c, env, false))
	if got := annotation(); got != "c-xyz89" {
		t.Errorf("the cluster Secret's Rancher id with the rancher plugin's result: %q, want c-xyz89", got)
	}

	// argocd.kubeconfig naming secrets.yaml or a file that is not a
	// kubeconfig: an error that quotes nothing of the file.
	for _, tc := range []struct{ name, data string }{{"secrets.yaml", ""}, {"notes.txt", "token: s3cr3t-in-a-file\n"}} {
		bad := load(t, "openstack", strings.Replace(base, "argocd.kubeconfig", tc.name, 1), "")
		files := argocd.New(fstest.MapFS{tc.name: {Data: []byte(tc.data)}, "secrets.yaml": {Data: []byte("proxmox: {token_secret: s3cr3t-in-a-file}\n")}})
		_, err := files.Observe(t.Context(), reconcile.PluginEnv{Cluster: bad, Kubeconfig: kubeconfig})
		if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "argocd.kubeconfig") {
			t.Errorf("argocd.kubeconfig %s: %v", tc.name, err)
		}
	}

	// argocd.context: the CLI's plugin uses it (an unknown one is an error
	// naming the key); the agent's ignores it for the file's current one.
	bad := load(t, "openstack", base+"  context: nope\n", "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "argocd.kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := argocd.NewOnHost(dir).Observe(t.Context(), reconcile.PluginEnv{Cluster: bad, Kubeconfig: kubeconfig}); err == nil || !strings.Contains(err.Error(), "argocd.kubeconfig") {
		t.Errorf("an unknown context on the CLI: %v", err)
	}
	if _, err := p.Observe(t.Context(), reconcile.PluginEnv{Cluster: bad, Kubeconfig: kubeconfig}); err != nil {
		t.Errorf("the agent's plugin did not use the file's current context: %v", err)
	}
}

// TestContextOfTheDefaultKubeconfig: on the CLI, argocd.context alone is a
// context of $KUBECONFIG (kubectl's default), as the Python tool reads
// it; the agent's plugin refuses it, saying where the kubeconfig goes.
// Not parallel: it sets $KUBECONFIG.
func TestContextOfTheDefaultKubeconfig(t *testing.T) {
	cp := realkube.Start(t, realkube.Options{})
	cp.InstallArgoCD(t)
	file := filepath.Join(t.TempDir(), "config")
	// The admin kubeconfig's one context is "lab".
	if err := os.WriteFile(file, cp.AdminKubeconfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", file)
	c := load(t, "openstack", "argocd:\n  context: lab\n", "")
	env := reconcile.PluginEnv{Cluster: c, Kubeconfig: cp.AdminKubeconfig()}
	if _, err := argocd.NewOnHost(t.TempDir()).Observe(t.Context(), env); err != nil {
		t.Errorf("the CLI with argocd.context alone: %v", err)
	}
	if _, err := argocd.New(fstest.MapFS{}).Observe(t.Context(), env); err == nil || !strings.Contains(err.Error(), "secrets directory") {
		t.Errorf("the agent with argocd.context alone: %v", err)
	}
}
