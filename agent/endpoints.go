package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Endpoint is one URL a cluster's configuration sends a credential to or
// trusts (a provider API, an identity service, an image source).
type Endpoint struct {
	// Key is the setting it comes from, such as proxmox.url.
	Key string
	// URL is the URL the engine uses, exactly as it will use it.
	URL string
}

// TLSTrust is how a cluster verifies the certificates of its endpoints.
type TLSTrust struct {
	// Key is the setting it comes from, such as proxmox.tls_verify.
	Key string
	// Verify is false when verification is off.
	Verify bool
	// CAFile is the CA bundle's path as written; "" for the system roots.
	CAFile string
	// CADigest identifies the bundle's content (such as "sha256:..."):
	// equal digests are equal bundles. "" without a bundle.
	CADigest string
}

// Endpoints are what the pull-request endpoint policy checks of a cluster:
// every endpoint a pull request can set that receives a credential or is
// trusted, and the TLS settings they are reached with.
type Endpoints struct {
	URLs []Endpoint
	TLS  []TLSTrust
}

// endpoint is a parsed endpoint URL: an https origin with an explicit port,
// and a path prefix.
type endpoint struct {
	host string // lower case, without brackets
	port string // explicit: 443 when the URL has none
	path string // without a trailing slash; "" for the whole origin
}

func (e endpoint) String() string {
	return "https://" + net.JoinHostPort(e.host, e.port) + e.path
}

// covers reports whether e allows got: the same scheme, host and port,
// and got's path is e's path or below it on a path boundary.
func (e endpoint) covers(got endpoint) bool {
	return e.host == got.host && e.port == got.port &&
		(e.path == "" || got.path == e.path || strings.HasPrefix(got.path, e.path+"/"))
}

// parseEndpoint parses an endpoint URL strictly, the way Go's HTTP client
// will read it: https only, no user info (user:pass@ before the host hides
// the real host from a prefix check), a host, a port of 1-65535 or none
// (443), no query or fragment, and a path without escapes, dot segments or
// empty segments.
func parseEndpoint(s string) (endpoint, error) {
	u, err := url.Parse(s)
	if err != nil {
		return endpoint{}, errors.New("is not a URL")
	}
	if u.Scheme != "https" {
		if u.Scheme == "" {
			return endpoint{}, errors.New("must be an https:// URL")
		}
		return endpoint{}, fmt.Errorf("must use https, not %s", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return endpoint{}, errors.New("has no host")
	}
	if u.User != nil {
		return endpoint{}, fmt.Errorf("has user info before its host (the request would go to %s)", u.Host)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "" {
		return endpoint{}, errors.New("may not have a query or a fragment")
	}
	host := strings.ToLower(u.Hostname())
	if host == "" || strings.ContainsAny(host, "%@\\ ") {
		return endpoint{}, errors.New("has no valid host")
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return endpoint{}, fmt.Errorf("has an invalid port %q", port)
	}
	if u.RawPath != "" {
		return endpoint{}, errors.New("has escaped characters in its path")
	}
	p := strings.TrimSuffix(u.Path, "/")
	if p != "" {
		if !strings.HasPrefix(p, "/") {
			return endpoint{}, errors.New("has an invalid path")
		}
		for _, seg := range strings.Split(p[1:], "/") {
			if seg == "" || seg == "." || seg == ".." {
				return endpoint{}, errors.New("has empty or dot segments in its path")
			}
		}
	}
	return endpoint{host: host, port: port, path: p}, nil
}

// parseAllowed parses allowed_endpoints; the error names every bad entry.
func parseAllowed(entries []string) ([]endpoint, error) {
	var out []endpoint
	var errs []error
	for i, s := range entries {
		e, err := parseEndpoint(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("allowed_endpoints[%d] (%s) %w", i, redactedURL(s), err))
			continue
		}
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

// redactedURL is s with any password hidden, for error messages.
func redactedURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return strconv.Quote(u.Redacted())
	}
	return "not a URL"
}

// endpointRefusal says why the endpoints a pull request sets for a cluster
// must not be used, or "". base is the cluster on the default branch, nil
// when it is not there (a new cluster) or cannot be read. Every URL must
// parse strictly (parseEndpoint) and be covered by the default branch's
// value of the same key or by an allowed_endpoints entry; unless allowTLS,
// TLS verification must not be turned off nor the CA bundle changed (path
// or content) relative to the default branch (a new cluster counts as
// verifying with the system roots). A CA bundle is read from the cluster's
// directory in the commit's tree, never from the agent's host: a path that
// is absolute or leaves the directory is refused even with allowTLS.
func endpointRefusal(pr Endpoints, base *Endpoints, allowed []endpoint, allowTLS bool) string {
	for _, e := range pr.URLs {
		got, err := parseEndpoint(e.URL)
		if err != nil {
			return e.Key + " " + err.Error()
		}
		ok := false
		if base != nil {
			for _, b := range base.URLs {
				if b.Key != e.Key {
					continue
				}
				if was, err := parseEndpoint(b.URL); err == nil && was.covers(got) {
					ok = true
				}
			}
		}
		for _, a := range allowed {
			ok = ok || a.covers(got)
		}
		if !ok {
			return fmt.Sprintf("%s %s is neither the default branch's endpoint nor in allowed_endpoints", e.Key, got)
		}
	}
	for _, t := range pr.TLS {
		if t.CAFile == "" {
			continue
		}
		if _, err := spec.DirPath(t.CAFile); err != nil {
			return t.Key + ": " + err.Error()
		}
	}
	if allowTLS {
		return ""
	}
	for _, t := range pr.TLS {
		was := TLSTrust{Key: t.Key, Verify: true}
		if base != nil {
			for _, b := range base.TLS {
				if b.Key == t.Key {
					was = b
				}
			}
		}
		switch {
		case !was.Verify:
			// Verification is off on the default branch: nothing a pull
			// request sets trusts more than that.
		case !t.Verify:
			return t.Key + ": false turns off TLS verification, which the default branch keeps on (allow_tls_changes is off)"
		case t.CAFile != was.CAFile || t.CADigest != was.CADigest:
			return t.Key + ": the CA bundle differs from the default branch's (allow_tls_changes is off)"
		}
	}
	return ""
}

// endpointPolicy says why a pull request must not point a cluster's
// credentials or trust where it does (see endpointRefusal), or "". It
// fails when the pull request's endpoints cannot be read.
func (a *Agent) endpointPolicy(head, base, cluster string) (string, error) {
	var prEP Endpoints
	if err := a.withFiles(head, cluster, func(files fs.FS) error {
		var err error
		prEP, err = a.runner.Endpoints(cluster, files)
		return err
	}); err != nil {
		return "", err
	}
	var baseEP *Endpoints
	_ = a.withFiles(base, cluster, func(files fs.FS) error {
		ep, err := a.runner.Endpoints(cluster, files)
		if err == nil {
			baseEP = &ep
		}
		return err
	})
	return endpointRefusal(prEP, baseEP, a.allowed, a.cfg.AllowTLSChanges), nil
}
