package rancher_test

import (
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/plugins/internal/plugintest"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/taloscluster/taloscluster/lab/kube/realkube"
	labrancher "github.com/taloscluster/taloscluster/lab/rancher"
	"github.com/taloscluster/taloscluster/plugins/rancher"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

const apiToken = "token-x7k2p:s3cr3t-rancher-token"

// world is a lab Rancher served over TLS on 127.0.0.1 and a plugin that
// trusts it.
type world struct {
	lab  *labrancher.Server
	srv  *httptest.Server
	plug *rancher.Plugin
}

func newWorld(t *testing.T, opts labrancher.Options) *world {
	t.Helper()
	return newWorldAt(t, opts, "")
}

// newWorldAt serves the lab Rancher under the path prefix ("" for none);
// its server-url is then that origin and prefix, unless opts names one.
func newWorldAt(t *testing.T, opts labrancher.Options, prefix string) *world {
	t.Helper()
	opts.Token = apiToken
	if opts.Creator == "" {
		opts.Creator = "local://u-admin"
	}
	if opts.NamespaceDelay == 0 {
		opts.NamespaceDelay = 300 * time.Millisecond
	}
	srv := httptest.NewUnstartedServer(nil)
	if prefix != "" && opts.ServerURL == "" {
		opts.ServerURL = "https://" + srv.Listener.Addr().String() + prefix
	}
	lab := labrancher.New(opts)
	srv.Config.Handler = lab
	if prefix != "" {
		srv.Config.Handler = http.StripPrefix(prefix, lab)
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	plug := rancher.New(rancher.Options{RootCAs: roots, NamespacePoll: 50 * time.Millisecond, NamespaceTimeout: 10 * time.Second})
	return &world{lab: lab, srv: srv, plug: plug}
}

// load loads the proxmox-bridge example with a rancher section in
// cluster.yaml and the url and token in secrets.yaml.
func load(t *testing.T, url, rancherSection string) *spec.Cluster {
	t.Helper()
	return plugintest.Load(t, "proxmox-bridge", "rancher:\n"+rancherSection,
		"rancher:\n  url: "+url+"\n  token: "+apiToken+"\n")
}

func steps(t *testing.T, p *rancher.Plugin, env reconcile.PluginEnv) []plan.Change {
	t.Helper()
	st, err := p.Observe(t.Context(), env)
	if err != nil {
		t.Fatal(err)
	}
	var out []plan.Change
	if env.Teardown {
		out, err = p.PlanTeardown(env.Cluster, st)
	} else {
		out, err = p.Plan(env.Cluster, st)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// apply makes the steps and returns the results of the last that
// returned some.
func apply(t *testing.T, p *rancher.Plugin, env reconcile.PluginEnv, chs []plan.Change) map[string]string {
	t.Helper()
	var results map[string]string
	for _, ch := range chs {
		out, err := p.Apply(t.Context(), env, ch)
		if err != nil {
			t.Fatalf("%s %s: %v", ch.Action, ch.Resource, err)
		}
		if out != nil {
			results = out
		}
	}
	return results
}

func names(chs []plan.Change) []string {
	var out []string
	for _, ch := range chs {
		out = append(out, string(ch.Action)+" "+string(ch.Resource.Kind)+" "+ch.Resource.Name)
	}
	return out
}

// noSecret fails when text holds the API token.
func noSecret(t *testing.T, what, text string) {
	t.Helper()
	if strings.Contains(text, "s3cr3t") {
		t.Errorf("%s shows the token: %s", what, text)
	}
}

// mutations are the requests that change Rancher.
func mutations(reqs []labrancher.Request) []string {
	var out []string
	for _, r := range reqs {
		if r.Method != http.MethodGet && !(r.Method == http.MethodPost && strings.Contains(r.Query, "action=search")) {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

// TestRegistrationOnARealAPIServer: against the lab Rancher and a real
// kube-apiserver as the cluster, the plugin registers the cluster,
// installs the agent from Rancher's import manifest, plans nothing more,
// changes members, refuses to change anything while a member does not
// resolve, refuses to delete a registration that is not the cluster's,
// and tears down.
func TestRegistrationOnARealAPIServer(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{Controllers: []string{"namespace"}})
	kubeconfig, err := os.ReadFile(cp.Kubeconfig(t, "admin", "system:masters"))
	if err != nil {
		t.Fatal(err)
	}
	core := realkube.Client(t, cp.Admin).CoreV1()
	w := newWorld(t, labrancher.Options{})
	w.lab.AddUser("openldap", "alice", "Alice Admin")
	w.lab.AddUser("openldap", "alicia", "Alicia Prefix")
	w.lab.AddGroup("openldap", "alice")
	bob := w.lab.AddUser("openldap", "bob", "Bob User")
	w.lab.AddUser("openldap", "carol", "Carol User")
	c := load(t, w.srv.URL, "  admins: [alice]\n  users: [bob@example.org]\n")
	p := w.plug
	if !p.Configured(c) {
		t.Fatal("a cluster with rancher url and token is not configured")
	}
	env := reconcile.PluginEnv{Cluster: c, Kubeconfig: kubeconfig, Public: kubeconfig}

	first := steps(t, p, env)
	want := []string{"create rancher-cluster " + c.Name, "create rancher-agent cattle-system", "create rancher-member alice", "create rancher-member bob@example.org"}
	if got := names(first); !slices.Equal(got, want) {
		t.Fatalf("first plan %v, want %v", got, want)
	}
	data, _ := json.Marshal(first)
	noSecret(t, "the plan", string(data))
	results := apply(t, p, env, first)
	clusters := w.lab.Clusters()
	if len(clusters) != 1 || clusters[0].Name != c.Name {
		t.Fatalf("Rancher's clusters after the registration: %v", clusters)
	}
	id := clusters[0].ID
	if results["cluster_id"] != id || results["url"] != w.srv.URL {
		t.Errorf("results %v, want cluster_id %s and url %s", results, id, w.srv.URL)
	}
	secrets, err := core.Secrets("cattle-system").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// As from a real Rancher, the agent's credentials name no cluster id:
	// their token is the registration token the manifest was fetched
	// with, which proves the agent is this registration's.
	regToken := importedToken(t, w.lab.Requests())
	var creds string
	for _, s := range secrets.Items {
		if strings.HasPrefix(s.Name, "cattle-credentials-") && string(s.Data["namespace"]) == "" && string(s.Data["token"]) == regToken {
			creds = s.Name
		}
	}
	if creds == "" {
		t.Fatalf("no cattle-credentials Secret with an empty namespace and the registration token on the cluster: %v", secrets.Items)
	}
	if _, err := realkube.Client(t, cp.Admin).AppsV1().Deployments("cattle-system").Get(t.Context(), "cattle-cluster-agent", metav1.GetOptions{}); err != nil {
		t.Errorf("the agent's Deployment: %v", err)
	}
	if again := steps(t, p, env); len(again) != 0 {
		t.Fatalf("the plan after applying is %v, want nothing (no second install)", names(again))
	}
	if n := len(importPaths1(w.lab.Requests())); n != 1 {
		t.Errorf("the import manifest was fetched %d times, want once", n)
	}

	// bob replaced by carol: carol is added, bob's binding removed.
	changed := env
	changed.Cluster = load(t, w.srv.URL, "  admins: [alice]\n  users: [carol]\n")
	var bobBinding string
	for _, b := range w.lab.Bindings(id) {
		if b.UserPrincipalID == bob.ID {
			bobBinding = b.ID
		}
	}
	swap := steps(t, p, changed)
	if got, want := names(swap), []string{"create rancher-member carol", "delete rancher-binding " + bobBinding}; !slices.Equal(got, want) {
		t.Fatalf("members changed: plan %v, want %v", got, want)
	}
	apply(t, p, changed, swap)
	if again := steps(t, p, changed); len(again) != 0 {
		t.Fatalf("after the member change: %v", names(again))
	}
	if n := len(w.lab.Bindings(id)); n != 3 {
		t.Errorf("bindings after the change: %v (want the creator's, alice's and carol's)", w.lab.Bindings(id))
	}

	// A member that does not resolve (or only by a prefix): Observe
	// fails naming it, and nothing is changed.
	before := len(mutations(w.lab.Requests()))
	for _, users := range []string{"[zed]", "[ali]"} {
		bad := env
		bad.Cluster = load(t, w.srv.URL, "  admins: [alice]\n  users: "+users+"\n")
		_, err := p.Observe(t.Context(), bad)
		if err == nil || !strings.Contains(err.Error(), "could not resolve Rancher principals") || !strings.Contains(err.Error(), strings.Trim(users, "[]")) {
			t.Errorf("users %s: Observe %v", users, err)
		}
	}
	if after := mutations(w.lab.Requests()); len(after) != before {
		t.Errorf("an unresolved member changed Rancher: %v", after[before:])
	}

	// Never built (no kubeconfig): the registration of its name is kept,
	// and the plan says why.
	blind := steps(t, p, reconcile.PluginEnv{Cluster: changed.Cluster, Teardown: true})
	if len(blind) != 1 || blind[0].Action != plan.ActionRefuse || !strings.Contains(blind[0].Reason, "never built") {
		t.Fatalf("teardown without a kubeconfig: %v", blind)
	}

	// The agent registered as another Rancher cluster: converge refuses,
	// destroy refuses to delete.
	sec, err := core.Secrets("cattle-system").Get(t.Context(), creds, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data["namespace"] = []byte("c-other")
	if sec, err = core.Secrets("cattle-system").Update(t.Context(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if refused := steps(t, p, changed); len(refused) != 1 || refused[0].Action != plan.ActionRefuse || !strings.Contains(refused[0].Reason, "c-other") {
		t.Fatalf("converge with another agent id: %v", refused)
	}
	td := changed
	td.Teardown = true
	mismatch := steps(t, p, td)
	if len(mismatch) != 1 {
		t.Fatalf("teardown with another agent id: %v", names(mismatch))
	}
	if _, err := p.Apply(t.Context(), td, mismatch[0]); err == nil || !strings.Contains(err.Error(), "does not match the downstream cluster (c-other)") {
		t.Errorf("teardown with another agent id: %v", err)
	}

	// Credentials without a cluster id whose token is no registration
	// token of the Rancher cluster: nothing shows the agent is its, so
	// converge refuses the active cluster and destroy will not delete it.
	sec.Data["namespace"], sec.Data["token"] = []byte{}, []byte("another-registration-token")
	if sec, err = core.Secrets("cattle-system").Update(t.Context(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.lab.SetState(id, "active")
	if refused := steps(t, p, changed); len(refused) != 1 || refused[0].Action != plan.ActionRefuse || !strings.Contains(refused[0].Reason, "no Rancher agent") {
		t.Fatalf("converge with an agent of another registration: %v", refused)
	}
	unproven := steps(t, p, td)
	if len(unproven) != 1 {
		t.Fatalf("teardown with an agent of another registration: %v", names(unproven))
	}
	if _, err := p.Apply(t.Context(), td, unproven[0]); err == nil || !strings.Contains(err.Error(), "no cattle-cluster-agent") {
		t.Errorf("teardown with an agent of another registration: %v", err)
	}
	if len(w.lab.Clusters()) != 1 {
		t.Fatal("a refused teardown deleted the Rancher cluster")
	}
	// The credentials as the import manifest made them again: the token
	// proves the registration, and destroy deletes it.
	sec.Data["namespace"], sec.Data["token"] = []byte{}, []byte(regToken)
	if _, err := core.Secrets("cattle-system").Update(t.Context(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	teardown := steps(t, p, td)
	data, _ = json.Marshal(teardown)
	if strings.Contains(string(data), regToken) {
		t.Errorf("the teardown plan shows the registration token: %s", data)
	}
	if got, want := names(teardown), []string{"delete rancher-cluster " + c.Name, "delete rancher-agent cattle-system"}; !slices.Equal(got, want) {
		t.Fatalf("teardown %v, want %v", got, want)
	}
	apply(t, p, td, teardown)
	if left := w.lab.Clusters(); len(left) != 0 {
		t.Errorf("Rancher's clusters after the teardown: %v", left)
	}
	ns, err := core.Namespaces().Get(t.Context(), "cattle-system", metav1.GetOptions{})
	if err == nil && ns.DeletionTimestamp == nil {
		t.Errorf("cattle-system after the teardown: not being deleted")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// importPaths1 are the paths of the import manifest's requests.
func importPaths1(reqs []labrancher.Request) []string {
	var out []string
	for _, r := range reqs {
		if strings.HasPrefix(r.Path, "/v3/import/") {
			out = append(out, r.Path)
		}
	}
	return out
}

// importedToken is the registration token of the last import manifest
// fetched: the one its Secret carries.
func importedToken(t *testing.T, reqs []labrancher.Request) string {
	t.Helper()
	paths := importPaths1(reqs)
	if len(paths) == 0 {
		t.Fatal("no import manifest was fetched")
	}
	tok, _, _ := strings.Cut(strings.TrimPrefix(paths[len(paths)-1], "/v3/import/"), "_")
	return tok
}

// importPaths are the paths of the import manifest's requests, by the
// host they named, and whether any carried a bearer token.
func importPaths(reqs []labrancher.Request) (map[string][]string, bool) {
	out := map[string][]string{}
	bearer := false
	for _, r := range reqs {
		if strings.HasPrefix(r.Path, "/v3/import/") {
			out[r.Host] = append(out[r.Host], r.Path)
			bearer = bearer || r.Bearer
		}
	}
	return out, bearer
}

// TestImportManifestElsewhere: a registration command naming another
// origin than rancher.url (Rancher's server-url is another name of it)
// is fetched there without the token, and the agent is installed from
// it. A redirect there is not followed, a larger answer than the bound is
// not read, and no error shows the registration token.
func TestImportManifestElsewhere(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{})
	kubeconfig, err := os.ReadFile(cp.Kubeconfig(t, "admin", "system:masters"))
	if err != nil {
		t.Fatal(err)
	}
	// The other origin is the same Rancher, unless mode makes it answer
	// otherwise: a redirect to rancher.url, a 404 quoting the path, or
	// more than the manifest's bound.
	var mode atomic.Int32
	other := httptest.NewUnstartedServer(nil)
	otherHost := other.Listener.Addr().String()
	w := newWorld(t, labrancher.Options{ServerURL: "https://" + otherHost})
	other.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case 1:
			http.Redirect(rw, r, w.srv.URL+r.URL.Path, http.StatusFound)
		case 2:
			http.Error(rw, "no manifest at "+r.URL.Path, http.StatusNotFound)
		case 3:
			_, _ = rw.Write([]byte(strings.Repeat("#", 3<<20)))
		default:
			w.lab.ServeHTTP(rw, r)
		}
	})
	other.StartTLS()
	defer other.Close()
	c := load(t, w.srv.URL, "  admins: []\n")
	env := reconcile.PluginEnv{Cluster: c, Kubeconfig: kubeconfig}
	chs := steps(t, w.plug, env)
	if got := names(chs); !slices.Equal(got, []string{"create rancher-cluster " + c.Name, "create rancher-agent cattle-system"}) {
		t.Fatalf("plan %v", got)
	}
	apply(t, w.plug, env, chs[:1])

	for m, want := range map[int32]string{1: "answered 302, a redirect", 2: "returned 404: no manifest at /v3/import/<redacted>", 3: "answered more than"} {
		mode.Store(m)
		_, err := w.plug.Apply(t.Context(), env, chs[1])
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "https://"+otherHost+"/v3/import/<token>.yaml") {
			t.Errorf("mode %d: %v, want it to say %q", m, err, want)
			continue
		}
		noSecret(t, "the error", err.Error())
		paths, _ := importPaths(w.lab.Requests())
		for _, p := range paths[otherHost] {
			tok, _, _ := strings.Cut(strings.TrimPrefix(p, "/v3/import/"), "_")
			if strings.Contains(err.Error(), tok) {
				t.Errorf("mode %d: the error shows the registration token: %v", m, err)
			}
		}
	}
	if _, err := realkube.Client(t, cp.Admin).CoreV1().Namespaces().Get(t.Context(), "cattle-system", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cattle-system after failed installs: %v", err)
	}

	mode.Store(0)
	apply(t, w.plug, env, chs[1:])
	paths, bearer := importPaths(w.lab.Requests())
	if len(paths) != 1 || len(paths[otherHost]) == 0 || bearer {
		t.Errorf("the import manifest's requests: %v (a bearer token: %v); want them at %s only, without one", paths, bearer, otherHost)
	}
	regToken := importedToken(t, w.lab.Requests())
	secrets, err := realkube.Client(t, cp.Admin).CoreV1().Secrets("cattle-system").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(secrets.Items, func(s corev1.Secret) bool {
		return string(s.Data["namespace"]) == "" && string(s.Data["token"]) == regToken
	}) {
		t.Errorf("no cattle-credentials Secret with the registration token after the install")
	}
	if again := steps(t, w.plug, env); len(again) != 0 {
		t.Errorf("the plan after the install: %v", names(again))
	}
}

// TestUnderAPathPrefix: a Rancher served under a path prefix (rancher.url
// https://host/rancher) is reached there, its import manifest too, whose
// path carries the prefix already.
func TestUnderAPathPrefix(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{})
	kubeconfig, err := os.ReadFile(cp.Kubeconfig(t, "admin", "system:masters"))
	if err != nil {
		t.Fatal(err)
	}
	w := newWorldAt(t, labrancher.Options{}, "/rancher")
	w.lab.AddUser("openldap", "alice", "Alice Admin")
	c := load(t, w.srv.URL+"/rancher", "  admins: [alice]\n")
	env := reconcile.PluginEnv{Cluster: c, Kubeconfig: kubeconfig}
	chs := steps(t, w.plug, env)
	if got, want := names(chs), []string{"create rancher-cluster " + c.Name, "create rancher-agent cattle-system", "create rancher-member alice"}; !slices.Equal(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	results := apply(t, w.plug, env, chs)
	if results["url"] != w.srv.URL+"/rancher" {
		t.Errorf("results %v", results)
	}
	if paths, _ := importPaths(w.lab.Requests()); len(paths) != 1 {
		t.Errorf("the import manifest's requests: %v", paths)
	}
	if _, err := realkube.Client(t, cp.Admin).AppsV1().Deployments("cattle-system").Get(t.Context(), "cattle-cluster-agent", metav1.GetOptions{}); err != nil {
		t.Errorf("the agent's Deployment: %v", err)
	}
	if again := steps(t, w.plug, env); len(again) != 0 {
		t.Errorf("the plan after applying: %v", names(again))
	}
}

// TestBindingsOfOtherClusters: a Rancher that answers the binding list
// unfiltered (every cluster's) never makes another cluster's binding
// look stale, nor one there look like this cluster's.
func TestBindingsOfOtherClusters(t *testing.T) {
	t.Parallel()
	w := newWorld(t, labrancher.Options{UnfilteredBindings: true})
	alice := w.lab.AddUser("openldap", "alice", "Alice Admin")
	dave := w.lab.AddUser("openldap", "dave", "Dave User")
	c := load(t, w.srv.URL, "  admins: [alice]\n")
	ours := w.lab.AddCluster(c.Name, "pending")
	other := w.lab.AddCluster("other", "active")
	theirs := []labrancher.Binding{
		w.lab.AddBinding(labrancher.Binding{ClusterID: other.ID, UserPrincipalID: dave.ID, RoleTemplateID: "cluster-member"}),
		w.lab.AddBinding(labrancher.Binding{ClusterID: other.ID, UserPrincipalID: alice.ID, RoleTemplateID: "cluster-owner"}),
	}
	stale := w.lab.AddBinding(labrancher.Binding{ClusterID: ours.ID, UserPrincipalID: dave.ID, RoleTemplateID: "cluster-member"})
	env := reconcile.PluginEnv{Cluster: c}
	chs := steps(t, w.plug, env)
	want := []string{"create rancher-agent cattle-system", "create rancher-member alice", "delete rancher-binding " + stale.ID}
	if got := names(chs); !slices.Equal(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	apply(t, w.plug, env, chs[1:])
	got := w.lab.Bindings(ours.ID)
	if len(got) != 2 || !slices.ContainsFunc(got, func(b labrancher.Binding) bool { return b.UserPrincipalID == alice.ID }) {
		t.Errorf("the cluster's bindings: %v, want the creator's and alice's", got)
	}
	if left := w.lab.Bindings(other.ID); len(left) != 3 || !slices.Contains(left, theirs[0]) || !slices.Contains(left, theirs[1]) {
		t.Errorf("the other cluster's bindings: %v", left)
	}
}

// TestFaultNamesTheCall: Rancher answering 500 to the registration fails
// the step with an error that names the call and Rancher's message, not
// the token.
func TestFaultNamesTheCall(t *testing.T) {
	t.Parallel()
	w := newWorld(t, labrancher.Options{})
	w.lab.Fault("POST", "/v3/clusters", labrancher.Fault{Status: 500, Message: "etcd is unhappy"})
	c := load(t, w.srv.URL, "  admins: []\n")
	env := reconcile.PluginEnv{Cluster: c}
	chs := steps(t, w.plug, env)
	if len(chs) == 0 || chs[0].Resource.Kind != rancher.KindCluster {
		t.Fatalf("plan %v", names(chs))
	}
	_, err := w.plug.Apply(t.Context(), env, chs[0])
	if err == nil || !strings.Contains(err.Error(), "POST /v3/clusters returned 500: etcd is unhappy") {
		t.Fatalf("a failed registration: %v", err)
	}
	noSecret(t, "the error", err.Error())
	if len(w.lab.Clusters()) != 0 {
		t.Error("a cluster was made")
	}

	// A long message is cut to 300 characters.
	w.lab.Fault("POST", "/v3/clusters", labrancher.Fault{Status: 500, Message: strings.Repeat("etcd is unhappy; ", 100)})
	_, err = w.plug.Apply(t.Context(), env, chs[0])
	if err == nil {
		t.Fatal("a failed registration succeeded")
	}
	if _, said, _ := strings.Cut(err.Error(), "returned 500: "); len([]rune(said)) != 300 || !strings.HasSuffix(said, "…") {
		t.Errorf("a long message: %d characters: %v", len([]rune(said)), err)
	}

	// A Rancher that does not answer in time.
	w.lab.Fault("GET", "/v3/clusters", labrancher.Fault{Status: 401, Message: "must authenticate " + apiToken})
	_, err = w.plug.Observe(t.Context(), env)
	if err == nil || !strings.Contains(err.Error(), "GET /v3/clusters returned 401") {
		t.Fatalf("a refused token: %v", err)
	}
	noSecret(t, "an error quoting the token back", err.Error())
}

// TestRedirectElsewhere: a Rancher answering with a redirect to another
// origin is not followed: the token never reaches it.
func TestRedirectElsewhere(t *testing.T) {
	t.Parallel()
	var bearer atomic.Int32
	other := httptest.NewTLSServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			bearer.Add(1)
		}
	}))
	defer other.Close()
	w := newWorld(t, labrancher.Options{})
	c := load(t, w.srv.URL, "  admins: []\n")
	env := reconcile.PluginEnv{Cluster: c}
	for _, loc := range []string{other.URL + "/v3/clusters", strings.Replace(w.srv.URL, "https://", "http://", 1) + "/v3/clusters"} {
		w.lab.Fault("GET", "/v3/clusters", labrancher.Fault{Location: loc})
		_, err := w.plug.Observe(t.Context(), env)
		if err == nil || !strings.Contains(err.Error(), "refusing a redirect") {
			t.Errorf("a redirect to %s: %v", loc, err)
		}
	}
	if bearer.Load() != 0 {
		t.Errorf("the token reached the other origin %d times", bearer.Load())
	}
	// A plain http rancher.url is refused before any request.
	plain := load(t, strings.Replace(w.srv.URL, "https://", "http://", 1), "  admins: []\n")
	if _, err := w.plug.Observe(t.Context(), reconcile.PluginEnv{Cluster: plain}); err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("an http url: %v", err)
	}
}

// TestExistingRegistrations: a pending registration of the name (an
// interrupted import) is reused, with no register step; an active one
// with no agent on the cluster is refused before anything changes.
func TestExistingRegistrations(t *testing.T) {
	t.Parallel()
	w := newWorld(t, labrancher.Options{})
	w.lab.AddUser("openldap", "alice", "Alice Admin")
	c := load(t, w.srv.URL, "  admins: [alice]\n")
	env := reconcile.PluginEnv{Cluster: c}
	pending := w.lab.AddCluster(c.Name, "pending")
	if got, want := names(steps(t, w.plug, env)), []string{"create rancher-agent cattle-system", "create rancher-member alice"}; !slices.Equal(got, want) {
		t.Errorf("a pending registration: plan %v, want %v", got, want)
	}
	w.lab.SetState(pending.ID, "active")
	refused := steps(t, w.plug, env)
	if len(refused) != 1 || refused[0].Action != plan.ActionRefuse || !strings.Contains(refused[0].Reason, pending.ID) {
		t.Errorf("an active registration and no agent: %v", refused)
	}
	if m := mutations(w.lab.Requests()); len(m) != 0 {
		t.Errorf("planning changed Rancher: %v", m)
	}
}

// TestPreflight: a rancher.url the token must not go to is refused before
// converge changes anything; an https one passes without a request.
func TestPreflight(t *testing.T) {
	t.Parallel()
	p := rancher.New(rancher.Options{})
	for url, want := range map[string]string{
		"https://rancher.example.org": "",
		"http://rancher.example.org":  "must be an https URL",
		"rancher.example.org":         "not a URL",
	} {
		err := p.Preflight(load(t, url, ""))
		if (want == "" && err != nil) || (want != "" && (err == nil || !strings.Contains(err.Error(), want))) {
			t.Errorf("rancher.url %s: %v, want %q", url, err, want)
		}
	}
}

// deadKubeconfig is a kubeconfig naming an API server that is not there,
// as a cluster's is once its machines are gone.
func deadKubeconfig(t *testing.T) []byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://` + addr + `
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: not-a-secret
contexts:
- name: c
  context: {cluster: c, user: admin}
current-context: c
`)
}

// TestTeardownUnreadableAgent: a cluster whose API does not answer reads
// no agent id. With its machines gone the Rancher cluster of the name is
// kept and the plan says so; with machines left the teardown's step
// fails, so destroy can be run again. Nothing is deleted either way.
func TestTeardownUnreadableAgent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, labrancher.Options{})
	c := load(t, w.srv.URL, "  admins: []\n")
	cl := w.lab.AddCluster(c.Name, "active")
	env := reconcile.PluginEnv{Cluster: c, Kubeconfig: deadKubeconfig(t), Teardown: true}

	gone := steps(t, w.plug, env)
	if len(gone) != 1 || gone[0].Action != plan.ActionRefuse || !strings.Contains(gone[0].Reason, "("+cl.ID+") is kept") ||
		!strings.Contains(gone[0].Reason, "no machines left") {
		t.Fatalf("teardown with the machines gone: %v", gone)
	}

	env.Machines = 3
	down := steps(t, w.plug, env)
	if got := names(down); !slices.Equal(got, []string{"wait rancher-cluster " + c.Name}) {
		t.Fatalf("teardown with the API down: %v", got)
	}
	if _, err := w.plug.Apply(t.Context(), env, down[0]); err == nil || !strings.Contains(err.Error(), "could not be read") {
		t.Errorf("the step of a teardown with the API down: %v", err)
	}
	if m := mutations(w.lab.Requests()); len(m) != 0 || len(w.lab.Clusters()) != 1 {
		t.Errorf("a teardown that could not read the agent changed Rancher: %v", m)
	}
}

// TestAfterRancherRedeploys: once the agent connected, Rancher deploys
// its manifest for the cluster, whose credentials name the cluster id:
// that id is the agent's, the plan stays empty, and destroy deletes the
// registration.
func TestAfterRancherRedeploys(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{})
	kubeconfig, err := os.ReadFile(cp.Kubeconfig(t, "admin", "system:masters"))
	if err != nil {
		t.Fatal(err)
	}
	core := realkube.Client(t, cp.Admin).CoreV1()
	w := newWorld(t, labrancher.Options{})
	c := load(t, w.srv.URL, "  admins: []\n")
	env := reconcile.PluginEnv{Cluster: c, Kubeconfig: kubeconfig}
	apply(t, w.plug, env, steps(t, w.plug, env))
	id := w.lab.Clusters()[0].ID
	w.lab.SetState(id, "active")

	manifest, ok := w.lab.ForCluster(id, w.srv.URL)
	if !ok {
		t.Fatal("no manifest for the redeploy")
	}
	var sec corev1.Secret
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		if strings.Contains(doc, "\nkind: Secret\n") {
			if err := yaml.Unmarshal([]byte(doc), &sec); err != nil {
				t.Fatal(err)
			}
		}
	}
	if string(sec.Data["namespace"]) != id {
		t.Fatalf("the redeploy's Secret %s names %q, want %s", sec.Name, sec.Data["namespace"], id)
	}
	if _, err := core.Secrets("cattle-system").Create(t.Context(), &sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if again := steps(t, w.plug, env); len(again) != 0 {
		t.Fatalf("the plan after the redeploy: %v", names(again))
	}
	td := env
	td.Teardown = true
	teardown := steps(t, w.plug, td)
	if got, want := names(teardown), []string{"delete rancher-cluster " + c.Name, "delete rancher-agent cattle-system"}; !slices.Equal(got, want) {
		t.Fatalf("teardown %v, want %v", got, want)
	}
	apply(t, w.plug, td, teardown)
	if left := w.lab.Clusters(); len(left) != 0 {
		t.Errorf("Rancher's clusters after the teardown: %v", left)
	}
}
