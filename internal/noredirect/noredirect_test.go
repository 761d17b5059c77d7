package noredirect_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/taloscluster/taloscluster/internal/noredirect"
)

// tokenTransport sets a credential on every request, the way API clients
// do (so a followed redirect would carry it anywhere).
type tokenTransport struct{ base http.RoundTripper }

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "PVEAPIToken=root@pam!t=secret")
	return t.base.RoundTrip(r)
}

func TestRedirectsAreRefused(t *testing.T) {
	t.Parallel()
	var leaked atomic.Int32
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
	}))
	defer attacker.Close()
	for _, code := range []int{301, 302, 303, 307, 308} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, attacker.URL+"/steal?x=1", code)
			}))
			defer srv.Close()
			clients := map[string]*http.Client{
				"transport only":  {Transport: noredirect.Transport(tokenTransport{http.DefaultTransport})},
				"client":          noredirect.Client(tokenTransport{http.DefaultTransport}),
				"inner transport": {Transport: tokenTransport{noredirect.Transport(nil)}},
			}
			for name, c := range clients {
				resp, err := c.Post(srv.URL+"/api2/json/nodes?q=1", "text/plain", strings.NewReader("x"))
				if err == nil {
					resp.Body.Close()
					t.Fatalf("%s: a %d was followed (status %d)", name, code, resp.StatusCode)
				}
				var re *noredirect.Error
				if !errors.As(err, &re) {
					t.Fatalf("%s: error %v is not a refused redirect", name, err)
				}
				want := srv.URL + "/api2/json/nodes answered with a redirect to " + attacker.URL + "/steal; refusing to follow it with credentials"
				if re.Error() != want {
					t.Errorf("%s: error\n%s\nwant\n%s", name, re.Error(), want)
				}
			}
		})
	}
	if n := leaked.Load(); n != 0 {
		t.Fatalf("the redirect target got %d requests with a credential", n)
	}
}

func TestNotModifiedPasses(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotModified)
	}))
	defer srv.Close()
	resp, err := noredirect.Client(nil).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("status %d, want 304", resp.StatusCode)
	}
}
