package charts

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFetcherRefuses: a redirect that leaves https, one the hook refuses,
// an answer above the bound, and a tag that is not a version are refused;
// a redirect within https is followed, asking the hook.
func TestFetcherRefuses(t *testing.T) {
	t.Parallel()
	var plain *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/to-http", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, plain.URL+"/ok", http.StatusFound) })
	mux.HandleFunc("/to-https", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(strings.Repeat("x", 2048))) })
	mux.HandleFunc("/repos/kubernetes-sigs/gateway-api/releases/latest", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"tag_name": "../../etc"}`))
	})
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	plain = httptest.NewServer(mux)
	t.Cleanup(plain.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())

	var asked []string
	f := newFetcher(Options{RootCAs: roots, AllowURL: func(u string) error {
		asked = append(asked, u)
		return nil
	}})
	if _, err := f.get(t.Context(), srv.URL+"/to-http", 1024, time.Minute, nil); err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Errorf("a redirect from https to http: %v", err)
	}
	asked = nil
	if data, err := f.get(t.Context(), srv.URL+"/to-https", 1024, time.Minute, nil); err != nil || string(data) != "ok" {
		t.Errorf("a redirect within https: %q %v", data, err)
	}
	if len(asked) != 2 || !strings.HasSuffix(asked[1], "/ok") {
		t.Errorf("the hook was asked %v", asked)
	}
	if _, err := f.get(t.Context(), srv.URL+"/big", 1024, time.Minute, nil); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("an answer above the bound: %v", err)
	}
	if _, err := f.gatewayLatest(t.Context(), srv.URL); err == nil {
		t.Error("a tag that is not a version is taken")
	}
	deny := newFetcher(Options{RootCAs: roots, AllowURL: func(u string) error {
		if strings.HasSuffix(u, "/ok") {
			return errTest
		}
		return nil
	}})
	if _, err := deny.get(t.Context(), srv.URL+"/to-https", 1024, time.Minute, nil); err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("a redirect the hook refuses: %v", err)
	}
}

var errTest = errString("refused")

type errString string

func (e errString) Error() string { return string(e) }

// TestGatewayLatestIsConditional: the Gateway API's latest release is
// asked again with the ETag of the last answer, and a 304 (which GitHub
// does not charge to the rate limit) keeps the tag known; a new release
// is seen at once.
func TestGatewayLatestIsConditional(t *testing.T) {
	t.Parallel()
	tag, full := "v1.3.0", 0
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		etag := `"` + tag + `"`
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		full++
		w.Header().Set("ETag", etag)
		_, _ = w.Write([]byte(`{"tag_name": "` + tag + `"}`))
	}))
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	f := newFetcher(Options{RootCAs: roots})
	for range 3 {
		if got, err := f.gatewayLatest(t.Context(), srv.URL); err != nil || got != "v1.3.0" {
			t.Fatalf("latest %q %v", got, err)
		}
	}
	if full != 1 {
		t.Errorf("%d full answers for three questions, want one and two 304s", full)
	}
	tag = "v1.4.0"
	if got, err := f.gatewayLatest(t.Context(), srv.URL); err != nil || got != "v1.4.0" {
		t.Errorf("after a new release: %q %v", got, err)
	}
}

// TestLinkLocalIsNeverFetched: a repository at a link-local address (a
// cloud's instance metadata) is refused at the dial, whatever URL or
// redirect leads there; loopback and other addresses are dialled.
func TestLinkLocalIsNeverFetched(t *testing.T) {
	t.Parallel()
	for addr, refused := range map[string]bool{
		"169.254.169.254:80": true, "[fe80::1]:443": true, "0.0.0.0:443": true,
		"127.0.0.1:443": false, "10.0.0.1:443": false, "[2001:db8::1]:443": false,
	} {
		if err := refuseLinkLocal("tcp", addr, nil); (err != nil) != refused {
			t.Errorf("%s: %v, want refused %v", addr, err, refused)
		}
	}
	f := newFetcher(Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := f.get(ctx, "http://169.254.169.254/latest/meta-data/", 1024, time.Minute, nil); err == nil || !strings.Contains(err.Error(), "link-local") {
		t.Errorf("fetching the instance metadata: %v, want a link-local refusal", err)
	}
}
