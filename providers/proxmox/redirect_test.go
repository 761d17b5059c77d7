package proxmox

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/internal/factoryhttp"
	"github.com/taloscluster/taloscluster/internal/noredirect"
)

// The Proxmox API client never follows a redirect: the token goes with
// every request.
func TestAPIClientRefusesRedirects(t *testing.T) {
	t.Parallel()
	var leaked int
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { leaked++ }))
	defer target.Close()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/api2/json/version", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	c := apiClient(&http.Transport{TLSClientConfig: srv.Client().Transport.(*http.Transport).TLSClientConfig}, 5*time.Second)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api2/json/version", nil)
	req.Header.Set("Authorization", "PVEAPIToken=root@pam!t=s3cret")
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("the redirect was followed: %d", resp.StatusCode)
	}
	var re *noredirect.Error
	if !errors.As(err, &re) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v, want a refused redirect without the token", err)
	}
	if leaked != 0 {
		t.Fatalf("the redirect target got %d requests", leaked)
	}
}

// The Image Factory client follows the factory's redirect to its cache
// only over https and never with an Authorization header; a redirect to
// plain http is refused.
func TestFactoryClientFollowsOnlyHTTPSWithoutCredentials(t *testing.T) {
	t.Parallel()
	var sawAuth bool
	cache := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawAuth = sawAuth || r.Header.Get("Authorization") != ""
		_, _ = w.Write([]byte("image"))
	}))
	defer cache.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the plain-http target was reached")
	}))
	defer plain.Close()
	factory := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plain" {
			http.Redirect(w, r, plain.URL+"/x", http.StatusFound)
			return
		}
		http.Redirect(w, r, cache.URL+"/cached.iso?sig=abc", http.StatusFound)
	}))
	defer factory.Close()
	// Both test servers share httptest's certificate.
	c := factoryhttp.Client(&tls.Config{RootCAs: factory.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}, time.Minute)
	req, _ := http.NewRequest(http.MethodGet, factory.URL+"/image/abc/v1.12.1/nocloud-amd64.iso", nil)
	req.Header.Set("Authorization", "Bearer nothing-to-leak")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("the cache redirect was not followed: %v", err)
	}
	resp.Body.Close()
	if sawAuth {
		t.Error("the cache got an Authorization header")
	}
	if _, err := c.Get(factory.URL + "/plain"); err == nil || !strings.Contains(err.Error(), "refusing to follow it") {
		t.Fatalf("a redirect to plain http: %v, want a refusal", err)
	}
}
