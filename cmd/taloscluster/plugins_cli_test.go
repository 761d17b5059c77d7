package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/check"
	"github.com/taloscluster/taloscluster/lab"
	labcharts "github.com/taloscluster/taloscluster/lab/charts"
	labrancher "github.com/taloscluster/taloscluster/lab/rancher"
	"github.com/taloscluster/taloscluster/reconcile"
)

// rancherToken is the API token of the lab's Rancher in these tests.
const rancherToken = "token-plug1:0123456789abcdefghijklmnopqrstuvwxyz01"

// tlsServe serves h on 127.0.0.1 with a certificate of the lab's CA.
func tlsServe(t *testing.T, l *lab.Lab, h http.Handler) string {
	t.Helper()
	cfg, err := l.CA.ServerTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestConvergeRunsRancherAndCharts: a lab cluster with rancher and charts
// sections is built, then registered with the lab's Rancher (the agent
// installed from Rancher's import manifest, its members bound) and given
// its charts (MetalLB, a chart of the lab's repository) through its own Kubernetes API; the next plan has no
// changes and check finds both plugins in sync. A Rancher that fails the
// deletion of the cluster's registration does not keep the cluster:
// destroy removes the machines and exits non-zero naming the plugin.
func TestConvergeRunsRancherAndCharts(t *testing.T) {
	t.Parallel()
	l, dir := labCluster(t, "127.183.66.0/24", "plug", 0)
	rs := labrancher.New(labrancher.Options{Token: rancherToken, NamespaceDelay: -1})
	for _, login := range []string{"alice", "bob"} {
		rs.AddUser("openldap", login, login)
	}
	rancherURL := tlsServe(t, l, rs)
	repo, err := labcharts.New()
	if err != nil {
		t.Fatal(err)
	}
	chartsURL := tlsServe(t, l, repo)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, l.CA.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data) + "\nrancher:\n  admins: [alice@example.org]\n  users: [bob]\n" +
		"charts:\n  metallb: {repo: '" + chartsURL + "', version: 0.15.2}\n  lab-app: {repo: '" + chartsURL + "'}\n"
	write(t, dir, "cluster.yaml", text)
	secrets, err := os.ReadFile(filepath.Join(dir, "secrets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, "secrets.yaml", string(secrets)+"\nrancher:\n  url: '"+rancherURL+"'\n  token: '"+rancherToken+"'\n")
	run := func(args ...string) (int, string, string) {
		t.Helper()
		code, out, errOut := cli(t, append(args, "-C", dir, "--plugins-ca-file", caFile)...)
		if strings.Contains(out+errOut, rancherToken) {
			t.Fatalf("%v printed the Rancher token", args)
		}
		return code, out, errOut
	}

	code, out, errOut := run("plan")
	if code != 0 || strings.Count(out, "deferred: ") != 2 {
		t.Fatalf("plan before the first build (exit %d), want charts and rancher deferred:\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run("converge", "--yes")
	if code != 0 || !strings.Contains(out, "charts [") || !strings.Contains(out, "rancher [") {
		t.Fatalf("converge (exit %d):\n%s\n%s", code, out, errOut)
	}

	// Rancher: the registration and its members.
	clusters := rs.Clusters()
	if len(clusters) != 1 || clusters[0].Name != "plug" {
		t.Fatalf("Rancher's clusters after converge: %+v", clusters)
	}
	var roles []string
	for _, b := range rs.Bindings(clusters[0].ID) {
		roles = append(roles, b.RoleTemplateID+" "+b.UserPrincipalID)
	}
	slices.Sort(roles)
	if len(roles) != 3 || !strings.HasPrefix(roles[0], "cluster-member openldap_user://uid=bob,") || roles[1] != "cluster-owner local://u-creator" ||
		!strings.HasPrefix(roles[2], "cluster-owner openldap_user://uid=alice,") {
		t.Errorf("Rancher's bindings after converge: %v", roles)
	}
	// The cluster: the Rancher agent's identity, the releases, the pool.
	kc := clusterClient(t, dir)
	if secrets, err := kc.CoreV1().Secrets("cattle-system").List(t.Context(), metav1.ListOptions{}); err != nil || len(secrets.Items) == 0 {
		t.Errorf("cattle-system after converge: %v %v", secrets, err)
	}
	releases, err := kc.CoreV1().Secrets("").List(t.Context(), metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range releases.Items {
		names = append(names, s.Labels["name"])
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"lab-app", "metallb"}) {
		t.Errorf("Helm releases after converge: %v, want lab-app and metallb", names)
	}

	if code, out, errOut := run("plan"); code != 0 || !strings.Contains(out, "No changes") {
		t.Fatalf("plan after converge (exit %d):\n%s\n%s", code, out, errOut)
	}
	_, out, errOut = run("check", "-o", "json", "--github-api", "https://127.0.0.1:1/")
	r := decodeCheck(t, out, errOut)
	var states []string
	for _, p := range r.Plugins {
		states = append(states, p.Name+" "+p.State)
	}
	if !slices.Equal(states, []string{"charts " + check.StateInSync, "rancher " + check.StateInSync}) {
		t.Errorf("check after converge: plugins %v", states)
	}

	code, out, errOut = run("status", "-o", "json")
	var st clusterStatus
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("status -o json (exit %d): %v\n%s\n%s", code, err, out, errOut)
	}
	if len(st.Plugins) != 2 || st.Plugins[0].State != reconcile.PluginInSync || st.Plugins[1].State != reconcile.PluginInSync {
		t.Errorf("status after converge: plugins %+v, want charts and rancher in sync", st.Plugins)
	}

	// Rancher refuses to delete the registration: destroy still removes
	// the machines, keeps the state, and fails naming the plugin.
	rs.Fault(http.MethodDelete, "/v3/clusters/"+clusters[0].ID, labrancher.Fault{Status: http.StatusServiceUnavailable, Message: "try later"})
	code, out, errOut = run("destroy", "--yes")
	if code == 0 || !strings.Contains(out+errOut, "rancher") {
		t.Fatalf("destroy with Rancher failing (exit %d), want a failure naming the rancher plugin:\n%s\n%s", code, out, errOut)
	}
	if vms := l.PVE.VMs(); len(vms) != 0 {
		t.Errorf("a failed Rancher teardown kept %d VMs", len(vms))
	}
	if _, err := os.Stat(filepath.Join(dir, reconcile.TalosSecretsFile)); err != nil {
		t.Errorf("the identity after a failed plugin teardown: %v", err)
	}
	if len(rs.Clusters()) != 1 {
		t.Errorf("Rancher's clusters after the failed deletion: %+v", rs.Clusters())
	}
}

// clusterClient is a client of the cluster's Kubernetes API, from its
// kubeconfig.
func clusterClient(t *testing.T, dir string) kubernetes.Interface {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, reconcile.KubeconfigFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}
