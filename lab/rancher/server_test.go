package rancher_test

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab/rancher"
)

const token = "token-abcde:s3cr3tvalue"

type lab struct {
	t   *testing.T
	srv *httptest.Server
	r   *rancher.Server
}

func start(t *testing.T, opts rancher.Options) *lab {
	t.Helper()
	if opts.Token == "" {
		opts.Token = token
	}
	r := rancher.New(opts)
	srv := httptest.NewTLSServer(r)
	t.Cleanup(srv.Close)
	return &lab{t: t, srv: srv, r: r}
}

// call sends a request with the token (auth false: without) and decodes
// the JSON answer.
func (l *lab) call(method, path string, body any, auth bool) (int, map[string]any) {
	l.t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(l.t.Context(), method, l.srv.URL+path, rd)
	if err != nil {
		l.t.Fatal(err)
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := l.srv.Client().Do(req)
	if err != nil {
		l.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return resp.StatusCode, map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, out
}

func data(m map[string]any) []map[string]any {
	var out []map[string]any
	for _, v := range m["data"].([]any) {
		out = append(out, v.(map[string]any))
	}
	return out
}

func TestAuthenticationAndErrors(t *testing.T) {
	l := start(t, rancher.Options{})
	code, body := l.call("GET", "/v3/clusters", nil, false)
	if code != 401 || body["type"] != "error" || body["status"] != "401" || body["message"] != "must authenticate" {
		t.Errorf("without a token: %d %v", code, body)
	}
	code, body = l.call("GET", "/v3/clusters/c-nope", nil, true)
	if code != 404 || body["code"] != "NotFound" || body["type"] != "error" {
		t.Errorf("an unknown cluster: %d %v", code, body)
	}
	if reqs := l.r.Requests(); len(reqs) != 2 || reqs[0].Authorized || !reqs[1].Authorized || !reqs[1].Bearer {
		t.Errorf("request log %+v", reqs)
	}
}

func TestClusterRegistration(t *testing.T) {
	l := start(t, rancher.Options{NamespaceDelay: 300 * time.Millisecond, Creator: "local://u-admin"})
	other := l.r.AddCluster("other", "active")
	code, cl := l.call("POST", "/v3/clusters", map[string]any{"type": "cluster", "name": "science"}, true)
	if code != 201 || !strings.HasPrefix(cl["id"].(string), "c-") || cl["state"] != "pending" {
		t.Fatalf("create: %d %v", code, cl)
	}
	id := cl["id"].(string)
	if code, body := l.call("POST", "/v3/clusters", map[string]any{"type": "cluster", "name": "Science"}, true); code != 422 || body["code"] != "NotUnique" {
		t.Errorf("a second cluster of the name: %d %v", code, body)
	}
	// name= filters; filter= is not one of the schema's fields and is
	// ignored, as norman ignores it.
	if _, list := l.call("GET", "/v3/clusters?name=science", nil, true); len(data(list)) != 1 || list["type"] != "collection" {
		t.Errorf("name filter: %v", list)
	}
	if _, list := l.call("GET", "/v3/clusters?filter=name%3Dscience", nil, true); len(data(list)) != 2 {
		t.Errorf("filter= should be ignored: %v", list)
	}
	ready := func() string {
		_, got := l.call("GET", "/v3/clusters/"+id, nil, true)
		for _, c := range got["conditions"].([]any) {
			if c.(map[string]any)["type"] == "BackingNamespaceCreated" {
				return c.(map[string]any)["status"].(string)
			}
		}
		return ""
	}
	if s := ready(); s != "Unknown" {
		t.Errorf("BackingNamespaceCreated at once: %q", s)
	}
	time.Sleep(350 * time.Millisecond)
	if s := ready(); s != "True" {
		t.Errorf("BackingNamespaceCreated after the delay: %q", s)
	}
	_, bindings := l.call("GET", "/v3/clusterroletemplatebindings?clusterId="+id, nil, true)
	if b := data(bindings); len(b) != 1 || b[0]["id"] != id+":creator-cluster-owner" || b[0]["userPrincipalId"] != "local://u-admin" {
		t.Errorf("the creator's binding: %v", b)
	}

	if code, _ := l.call("POST", "/v3/clusterRegistrationTokens", map[string]any{"type": "clusterRegistrationToken", "clusterId": id}, true); code != 201 {
		t.Fatalf("token: %d", code)
	}
	_, tokens := l.call("GET", "/v3/clusters/"+id+"/clusterRegistrationTokens", nil, true)
	list := data(tokens)
	if len(list) != 2 {
		t.Fatalf("tokens: %v", list)
	}
	last := list[1]
	manifest := last["manifestUrl"].(string)
	if last["command"] != "kubectl apply -f "+manifest || last["insecureCommand"] != "curl --insecure -sfL "+manifest+" | kubectl apply -f -" ||
		!strings.HasPrefix(manifest, l.srv.URL+"/v3/import/") || !strings.HasSuffix(manifest, "_"+id+".yaml") {
		t.Errorf("token commands: %v", last)
	}
	resp, err := l.srv.Client().Get(manifest)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// As Rancher's import handler, the manifest carries no cluster id
	// (an empty namespace) and the registration token of its name.
	regTok := last["token"].(string)
	if regTok == "" || !strings.Contains(manifest, "/v3/import/"+regTok+"_") {
		t.Errorf("the token field %q is not the token its manifest URL names (%s)", regTok, manifest)
	}
	b64 := base64.StdEncoding.EncodeToString
	key := func(url, tok, ns string) string {
		sum := md5.Sum([]byte(url + tok + ns))
		return hex.EncodeToString(sum[:])[:7]
	}
	for _, want := range []string{"kind: Namespace", "name: cattle-credentials-" + key(l.srv.URL, regTok, "") + "\n",
		"namespace: \"\"", "token: \"" + b64([]byte(regTok)) + "\"", "url: \"" + b64([]byte(l.srv.URL)) + "\"",
		"name: cattle-cluster-agent", "kind: ClusterRoleBinding"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the import manifest lacks %q", want)
		}
	}
	if strings.Contains(string(text), b64([]byte(id))) {
		t.Errorf("the import manifest names the cluster id")
	}
	// The manifest Rancher deploys once the agent connected names the
	// cluster, with the cluster's default registration token.
	redeploy, ok := l.r.ForCluster(id, l.srv.URL)
	if !ok {
		t.Fatal("no manifest for the cluster's redeploy")
	}
	if list[0]["name"] != "default-token" {
		t.Fatalf("the first token: %v", list[0])
	}
	def := list[0]["token"].(string)
	for _, want := range []string{"name: cattle-credentials-" + key(l.srv.URL, def, id) + "\n", "namespace: \"" + b64([]byte(id)) + "\"", "token: \"" + b64([]byte(def)) + "\""} {
		if !strings.Contains(string(redeploy), want) {
			t.Errorf("the redeploy's manifest lacks %q", want)
		}
	}
	if _, ok := l.r.ForCluster("c-none", l.srv.URL); ok {
		t.Error("a redeploy's manifest for no cluster")
	}

	if code, _ := l.call("DELETE", "/v3/clusters/"+id, nil, true); code != 200 {
		t.Errorf("delete: %d", code)
	}
	if got := l.r.Clusters(); len(got) != 1 || got[0].ID != other.ID || len(l.r.Bindings(id)) != 0 {
		t.Errorf("after the delete: %v %v", got, l.r.Bindings(id))
	}
}

func TestPrincipalsAndBindings(t *testing.T) {
	l := start(t, rancher.Options{})
	alice := l.r.AddUser("openldap", "alice", "Alice A")
	l.r.AddUser("openldap", "alicia", "Alicia B")
	l.r.AddGroup("openldap", "alice-team")
	local := l.r.AddUser("local", "bob", "Bob")
	if !strings.HasPrefix(local.ID, "local://u-") || alice.ID != "openldap_user://uid=alice,ou=People,dc=example,dc=org" {
		t.Errorf("principal ids %q %q", local.ID, alice.ID)
	}
	code, found := l.call("POST", "/v3/principals?action=search", map[string]any{"name": "ali"}, true)
	if code != 200 || len(data(found)) != 3 {
		t.Errorf("search ali: %d %v", code, found)
	}
	cl := l.r.AddCluster("science", "active")
	code, b := l.call("POST", "/v3/clusterroletemplatebindings", map[string]any{"clusterId": cl.ID, "userPrincipalId": alice.ID, "roleTemplateId": "cluster-member"}, true)
	if code != 201 || !strings.HasPrefix(b["id"].(string), cl.ID+":crtb-") {
		t.Fatalf("bind: %d %v", code, b)
	}
	for _, bad := range []map[string]any{
		{"clusterId": cl.ID, "userPrincipalId": alice.ID},
		{"clusterId": "c-nope", "userPrincipalId": alice.ID, "roleTemplateId": "cluster-member"},
		{"clusterId": cl.ID, "roleTemplateId": "cluster-member"},
	} {
		if code, body := l.call("POST", "/v3/clusterroletemplatebindings", bad, true); code != 422 || body["type"] != "error" {
			t.Errorf("binding %v: %d %v", bad, code, body)
		}
	}
	if code, _ := l.call("DELETE", "/v3/clusterroletemplatebindings/"+b["id"].(string), nil, true); code != 200 {
		t.Errorf("unbind: %d", code)
	}
	if code, _ := l.call("DELETE", "/v3/clusterroletemplatebindings/"+b["id"].(string), nil, true); code != 404 {
		t.Errorf("unbind again: %d", code)
	}
}

func TestFaults(t *testing.T) {
	l := start(t, rancher.Options{})
	l.r.Fault("POST", "/v3/clusters", rancher.Fault{Status: 503, Message: "try later", Times: 1})
	if code, body := l.call("POST", "/v3/clusters", map[string]any{"name": "x"}, true); code != 503 || body["message"] != "try later" {
		t.Errorf("fault: %d %v", code, body)
	}
	if code, _ := l.call("POST", "/v3/clusters", map[string]any{"name": "x"}, true); code != 201 {
		t.Errorf("after a one-time fault: %d", code)
	}
	l.r.Fault("GET", "/v3/clusters", rancher.Fault{Location: "https://elsewhere.example/v3/clusters"})
	req, _ := http.NewRequestWithContext(t.Context(), "GET", l.srv.URL+"/v3/clusters", nil)
	c := l.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 307 || resp.Header.Get("Location") != "https://elsewhere.example/v3/clusters" {
		t.Errorf("redirect fault: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// UnfilteredBindings answers every cluster's bindings, whatever the
// query filters on; the request log names the host each request named.
func TestUnfilteredBindings(t *testing.T) {
	l := start(t, rancher.Options{UnfilteredBindings: true})
	a := l.r.AddCluster("a", "active")
	b := l.r.AddCluster("b", "active")
	_, list := l.call("GET", "/v3/clusterroletemplatebindings?clusterId="+a.ID, nil, true)
	seen := map[any]bool{}
	for _, row := range data(list) {
		seen[row["clusterId"]] = true
	}
	if len(data(list)) != 2 || !seen[a.ID] || !seen[b.ID] {
		t.Errorf("unfiltered bindings: %v", list)
	}
	if reqs := l.r.Requests(); len(reqs) != 1 || reqs[0].Host != strings.TrimPrefix(l.srv.URL, "https://") {
		t.Errorf("request log %+v", reqs)
	}
}
