package rancher

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// callTimeout bounds each call to Rancher's API, as the Python tool's 60 s.
const callTimeout = 60 * time.Second

// Bounds on what an answer may hold: Rancher's JSON answers and the
// import manifest are small; a larger one is refused, not read.
const (
	maxBody     = 8 << 20
	maxManifest = 2 << 20
)

// detailLimit is how many characters of what an error answer says an
// error quotes, its marker included.
const detailLimit = 300

// v3 is a client of Rancher's v3 API: a bearer token on every call, TLS
// verified, and never sent to another origin than the configured one.
type v3 struct {
	base  *url.URL
	token string
	http  *http.Client
}

// newV3 returns the client of the Rancher at rawURL. roots are the CAs
// trusted (nil: the system's); hc, when set, is the client to copy (its
// transport is kept, its redirect policy replaced).
func newV3(rawURL, token string, roots *x509.CertPool, hc *http.Client) (*v3, error) {
	u, err := url.Parse(strings.TrimRight(rawURL, "/"))
	if err != nil || u.Host == "" {
		return nil, errors.New("rancher.url is not a URL")
	}
	if u.Scheme != "https" {
		// The token travels in a header: only over TLS.
		return nil, fmt.Errorf("rancher.url must be an https URL, not %s", u.Scheme)
	}
	u.RawQuery, u.Fragment, u.User = "", "", nil
	var c http.Client
	if hc != nil {
		c = *hc
	} else {
		c.Transport = &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: 10 * time.Second,
		}
	}
	c.CheckRedirect = sameOrigin(u)
	return &v3{base: u, token: token, http: &c}, nil
}

// sameOrigin refuses a redirect that leaves base's origin (scheme, host
// and port): the bearer token would go along.
func sameOrigin(base *url.URL) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if !origin(req.URL, base) {
			return fmt.Errorf("refusing a redirect to %s://%s: it is not the Rancher at %s", req.URL.Scheme, req.URL.Host, base.Host)
		}
		if len(via) >= 5 {
			return errors.New("stopped after 5 redirects")
		}
		return nil
	}
}

// elsewhere is the client of an origin other than Rancher's: the same
// transport and trust, and no redirect followed.
func (c *v3) elsewhere() *http.Client {
	hc := *c.http
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &hc
}

// origin reports whether u has base's scheme, host and port.
func origin(u, base *url.URL) bool {
	return strings.EqualFold(u.Scheme, base.Scheme) && strings.EqualFold(u.Hostname(), base.Hostname()) && port(u) == port(base)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "http") {
		return "80"
	}
	return "443"
}

// apiError is a call Rancher answered with an error status.
type apiError struct {
	method, path string
	status       int
	detail       string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s returned %d: %s", e.method, e.path, e.status, e.detail)
}

// notFound reports whether err is Rancher's 404.
func notFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.status == http.StatusNotFound
}

// call sends one request to path (which may carry an action query, such
// as ?action=search; it is named in errors), with query added and body
// as JSON, and decodes the JSON answer into out (nil: ignored).
func (c *v3) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	raw, err := c.send(ctx, method, path, query, body, maxBody)
	if err != nil || out == nil {
		return err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s returned non-JSON body", method, path)
	}
	return nil
}

// send makes the request to path of Rancher's API and returns its body,
// bounded by limit.
func (c *v3) send(ctx context.Context, method, path string, query url.Values, body any, limit int64) ([]byte, error) {
	target, err := c.resolve(path, query)
	if err != nil {
		return nil, err
	}
	r := request{method: method, name: path, target: target, limit: limit, bearer: true}
	if body != nil {
		if r.body, err = json.Marshal(body); err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return c.do(ctx, c.http, r)
}

// request is one request: name is how errors call it (a path without
// secrets); bearer sends the token along; secrets are what errors must
// not show besides the token.
type request struct {
	method, name string
	target       *url.URL
	body         []byte
	limit        int64
	bearer       bool
	secrets      []string
}

// do makes the request with hc and returns its body, bounded by r.limit.
// An error status is an apiError; a redirect hc did not follow is an
// error too.
func (c *v3) do(ctx context.Context, hc *http.Client, r request) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	secrets := append([]string{c.token}, r.secrets...)
	var rd io.Reader
	if r.body != nil {
		rd = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.target.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %s", r.method, r.name, redact(err.Error(), secrets))
	}
	if r.bearer {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "application/json")
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s failed: %s", r.method, r.name, redact(transportError(ctx, err), secrets))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, r.limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s failed reading its answer: %s", r.method, r.name, redact(transportError(ctx, err), secrets))
	}
	if int64(len(raw)) > r.limit {
		return nil, fmt.Errorf("%s %s answered more than %d bytes; refusing to read it", r.method, r.name, r.limit)
	}
	if resp.StatusCode >= 400 {
		return nil, &apiError{method: r.method, path: r.name, status: resp.StatusCode, detail: detail(raw, secrets)}
	}
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s %s answered %d, a redirect; it is not followed", r.method, r.name, resp.StatusCode)
	}
	return raw, nil
}

// resolve joins path (and its own query) and query onto the base URL.
func (c *v3) resolve(path string, query url.Values) (*url.URL, error) {
	rel, err := url.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("bad API path %q", path)
	}
	u := *c.base
	u.Path = c.base.Path + rel.Path
	q := rel.Query()
	for k, vs := range query {
		q[k] = append(q[k], vs...)
	}
	u.RawQuery = q.Encode()
	return &u, nil
}

// transportError is what a failed request says: the cause without the
// URL (which Go's error repeats), and a timeout named as one.
func transportError(ctx context.Context, err error) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %s", callTimeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// redact keeps the secrets (the token, a registration token) out of text
// a server sent back.
func redact(s string, secrets []string) string {
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "<redacted>")
		}
	}
	return s
}

// detail is what an error answer says, its secrets redacted, then cut
// to detailLimit characters: redacted first, so that no part of a secret
// is left where the cut falls.
func detail(raw []byte, secrets []string) string {
	return capDetail(redact(errorDetail(raw), secrets))
}

// capDetail cuts text to detailLimit characters, the last one "…" when
// it was cut.
func capDetail(text string) string {
	if r := []rune(text); len(r) > detailLimit {
		return string(r[:detailLimit-1]) + "…"
	}
	return text
}

// errorDetail is what an error answer says, by the Python tool's rules:
// the body's string message; a list message, or else the messages of
// errors[], joined with "; " (empty ones left out); otherwise the body
// text itself. It is not cut: detail cuts it.
func errorDetail(raw []byte) string {
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err == nil {
		if s, ok := body["message"].(string); ok && s != "" {
			return s
		}
		if list, ok := body["message"].([]any); ok {
			if s := joinStrings(list); s != "" {
				return s
			}
		}
		if errs, ok := body["errors"].([]any); ok {
			var msgs []any
			for _, e := range errs {
				if m, ok := e.(map[string]any); ok {
					msgs = append(msgs, m["message"])
				}
			}
			if s := joinStrings(msgs); s != "" {
				return s
			}
		}
	}
	return string(raw)
}

// joinStrings joins the non-empty strings of list with "; ".
func joinStrings(list []any) string {
	var out []string
	for _, v := range list {
		if s, ok := v.(string); ok && s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "; ")
}
