package openstack

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
)

// start runs a Server for the test.
func start(t *testing.T, o Options) *Server {
	t.Helper()
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("closing: %v", err)
		}
	})
	return srv
}

// httpClient trusts the server's lab CA and nothing else.
func httpClient(srv *Server) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: srv.CA().Pool(), MinVersion: tls.VersionTLS12,
		}},
	}
}

// authenticate logs in with gophercloud the way production does.
func authenticate(t *testing.T, srv *Server, endpoint, id, secret string) (*gophercloud.ProviderClient, error) {
	t.Helper()
	provider, err := gcopenstack.NewClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	provider.HTTPClient = *httpClient(srv)
	err = gcopenstack.Authenticate(t.Context(), provider, gophercloud.AuthOptions{
		IdentityEndpoint:            endpoint,
		ApplicationCredentialID:     id,
		ApplicationCredentialSecret: secret,
	})
	return provider, err
}

func TestApplicationCredentialAuthAndCatalog(t *testing.T) {
	t.Parallel()
	srv := start(t, Options{})
	provider, err := authenticate(t, srv, srv.URL()+"/identity/v3", DefaultCredential.ID, DefaultCredential.Secret)
	if err != nil {
		t.Fatalf("authenticating: %v", err)
	}
	if provider.Token() == "" {
		t.Fatal("no token")
	}

	compute, err := gcopenstack.NewComputeV2(provider, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatalf("compute endpoint: %v", err)
	}
	if want := srv.URL() + "/compute/v2.1/"; compute.Endpoint != want {
		t.Errorf("compute endpoint = %q, want %q", compute.Endpoint, want)
	}
	if _, err := gcopenstack.NewComputeV2(provider, gophercloud.EndpointOpts{Region: "RegionTwo"}); err == nil {
		t.Error("a compute endpoint in RegionTwo was found")
	}

	// The token describes itself through GET /v3/auth/tokens.
	identity, err := gcopenstack.NewIdentityV3(provider, gophercloud.EndpointOpts{})
	if err != nil {
		t.Fatal(err)
	}
	res := tokens.Get(t.Context(), identity, provider.Token())
	tok, err := res.ExtractToken()
	if err != nil {
		t.Fatalf("validating the token: %v", err)
	}
	if d := time.Until(tok.ExpiresAt); d < 59*time.Minute || d > time.Hour {
		t.Errorf("token expires in %v, want 1h", d)
	}
	project, err := res.ExtractProject()
	if err != nil || project.Name != "taloslab" || project.Domain.ID != "default" {
		t.Errorf("project = %+v, %v", project, err)
	}
	catalog, err := res.ExtractServiceCatalog()
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range catalog.Entries {
		types = append(types, e.Type)
	}
	if got := strings.Join(types, ","); got != "identity,compute,network,image" {
		t.Errorf("catalog types = %s", got)
	}

	var names []string
	for _, op := range srv.Log() {
		names = append(names, op.Method+" "+op.Path+" "+op.Name+" "+http.StatusText(op.Status))
	}
	want := []string{
		"POST /identity/v3/auth/tokens identity.token.create Created",
		"GET /identity/v3/auth/tokens identity.token.get OK",
	}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
}

func TestVersionDiscoveryFromRoot(t *testing.T) {
	t.Parallel()
	srv := start(t, Options{Region: "lab-1"})
	provider, err := authenticate(t, srv, srv.URL()+"/identity/", DefaultCredential.ID, DefaultCredential.Secret)
	if err != nil {
		t.Fatalf("authenticating through discovery: %v", err)
	}
	if _, err := gcopenstack.NewComputeV2(provider, gophercloud.EndpointOpts{Region: "lab-1"}); err != nil {
		t.Errorf("compute endpoint in lab-1: %v", err)
	}
	log := srv.Log()
	if len(log) != 2 || log[0].Name != "identity.versions" || log[0].Status != http.StatusMultipleChoices ||
		log[1].Name != "identity.token.create" || log[1].Status != http.StatusCreated {
		t.Errorf("log = %+v", log)
	}
}

func TestWrongCredentials(t *testing.T) {
	t.Parallel()
	srv := start(t, Options{})
	for _, c := range []struct{ name, id, secret string }{
		{"wrong secret", DefaultCredential.ID, "not-the-secret"},
		{"unknown id", "ffffffffffffffffffffffffffffffff", DefaultCredential.Secret},
	} {
		_, err := authenticate(t, srv, srv.URL()+"/identity/v3", c.id, c.secret)
		var resp gophercloud.ErrUnexpectedResponseCode
		if !errors.As(err, &resp) || resp.Actual != http.StatusUnauthorized {
			t.Fatalf("%s: err = %v, want a 401", c.name, err)
		}
		var body struct {
			Error struct {
				Code           int
				Message, Title string
			}
		}
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			t.Fatalf("%s: body %q: %v", c.name, resp.Body, err)
		}
		if body.Error.Code != 401 || body.Error.Title != "Unauthorized" ||
			body.Error.Message != "The request you have made requires authentication." {
			t.Errorf("%s: error = %+v", c.name, body.Error)
		}
	}
	for _, op := range srv.Log() {
		if op.Name != "identity.token.create" || op.Status != http.StatusUnauthorized {
			t.Errorf("log entry %+v", op)
		}
	}
}

func TestTokenExpiryAndAuthorized(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { return now }
	srv := start(t, Options{Now: clock})
	hc := httpClient(srv)
	body := `{"auth":{"identity":{"methods":["application_credential"],"application_credential":{"id":"` +
		DefaultCredential.ID + `","secret":"` + DefaultCredential.Secret + `"}}}}`
	resp, err := hc.Post(srv.URL()+"/identity/v3/auth/tokens", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Token struct {
			Methods               []string
			IssuedAt              string `json:"issued_at"`
			ExpiresAt             string `json:"expires_at"`
			ApplicationCredential struct {
				ID         string
				Restricted bool
			} `json:"application_credential"`
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	id := resp.Header.Get("X-Subject-Token")
	if got.Token.IssuedAt != "2026-01-02T03:04:05.000000Z" || got.Token.ExpiresAt != "2026-01-02T04:04:05.000000Z" ||
		got.Token.ApplicationCredential.ID != DefaultCredential.ID || !got.Token.ApplicationCredential.Restricted ||
		len(got.Token.Methods) != 1 || got.Token.Methods[0] != "application_credential" {
		t.Errorf("token = %+v", got.Token)
	}

	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Auth-Token", id)
	if !srv.authorized(req) {
		t.Error("a fresh token is not authorized")
	}
	now = now.Add(DefaultTokenTTL)
	if srv.authorized(req) {
		t.Error("an expired token is authorized")
	}
	req.Header.Set("X-Auth-Token", "bogus")
	if srv.authorized(req) {
		t.Error("an unknown token is authorized")
	}

	// Validating with an expired token: 401 with keystonemiddleware's header.
	get, _ := http.NewRequest(http.MethodGet, srv.URL()+"/identity/v3/auth/tokens", nil)
	get.Header.Set("X-Auth-Token", id)
	get.Header.Set("X-Subject-Token", id)
	resp, err = hc.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Keystone uri=") {
		t.Errorf("validating with an expired token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
}

func TestFailNextAndLoopbackOnly(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{Addr: "0.0.0.0:0"}); err == nil {
		t.Error("a non-loopback listen address was accepted")
	}
	srv := start(t, Options{Addr: "127.0.0.1:0"})
	srv.FailNext("identity.token.create", 1, http.StatusServiceUnavailable)
	if _, err := authenticate(t, srv, srv.URL()+"/identity/v3", DefaultCredential.ID, DefaultCredential.Secret); err == nil {
		t.Error("the injected failure was not seen")
	}
	if _, err := authenticate(t, srv, srv.URL()+"/identity/v3", DefaultCredential.ID, DefaultCredential.Secret); err != nil {
		t.Errorf("after the fault: %v", err)
	}
	log := srv.Log()
	if len(log) != 2 || log[0].Fault != "fail" || log[0].Status != http.StatusServiceUnavailable || log[1].Status != http.StatusCreated {
		t.Errorf("log = %+v", log)
	}
}
