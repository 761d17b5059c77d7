package charts

import (
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
