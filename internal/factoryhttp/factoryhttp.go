// Package factoryhttp is the HTTP client of the Talos Image Factory. It
// carries no credential. The real factory answers an image that is in its
// cache with a 302 to the cache's (presigned) URL (image-factory
// internal/frontend/http/image.go, handleImage), so redirects are
// followed, but only to https, at most five, and never with an
// Authorization header; the proxy comes from the environment.
package factoryhttp

import (
	"crypto/tls"
	"net/http"
	"time"

	"github.com/taloscluster/taloscluster/internal/noredirect"
)

// Client returns the factory's HTTP client: TLS as tlsCfg says, each
// request (its body included) bounded by timeout.
func Client(tlsCfg *tls.Config, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != "https" || len(via) > 5 {
				return noredirect.CheckRedirect(req, via)
			}
			req.Header.Del("Authorization")
			return nil
		},
	}
}
