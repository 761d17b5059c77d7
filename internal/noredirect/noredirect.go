// Package noredirect keeps HTTP clients that carry credentials from
// following redirects.
//
// Go's http.Client follows a redirect and, when the new location has the
// same host name (whatever its port or scheme), sends the Authorization
// header along; a transport that sets a token on every request sends it
// to any location. A pull request that points an allowed endpoint at a
// path that answers 307 could so hand a token to another port of the same
// host, over plain http. Every client of this project that carries a
// credential (Proxmox, the Image Factory, GitHub, git over HTTP) goes
// through Transport, which turns a redirect into an error before any
// client can follow it.
package noredirect

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Error is a redirect that was refused. It is terminal: the endpoint
// answers the same way on the next try.
type Error struct {
	// Endpoint is the URL that answered, without its query.
	Endpoint string
	// Location is where it pointed, without userinfo or query.
	Location string
	// Status is the HTTP status of the answer.
	Status int
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s answered with a redirect to %s; refusing to follow it with credentials", e.Endpoint, e.Location)
}

// Transport wraps base (http.DefaultTransport when nil) so that an answer
// that redirects (301, 302, 303, 307 or 308 with a Location) is never
// returned to the client, which would follow it: the request fails with an
// *Error instead. Other 3xx answers, such as 304 Not Modified, pass.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if t, ok := base.(*transport); ok {
		return t
	}
	return &transport{base: base}
}

// Client returns an http.Client over Transport(base) that also refuses
// redirects itself, for callers that build their own client.
func Client(base http.RoundTripper) *http.Client {
	return &http.Client{Transport: Transport(base), CheckRedirect: CheckRedirect}
}

// CheckRedirect is an http.Client.CheckRedirect that refuses every
// redirect.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	from := req.URL
	if len(via) > 0 {
		from = via[len(via)-1].URL
	}
	return &Error{Endpoint: clean(from), Location: clean(req.URL)}
}

type transport struct {
	base http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || !isRedirect(resp.StatusCode) {
		return resp, err
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return resp, nil // nothing to follow; the client sees the answer
	}
	// Drain a little so the connection can be reused, then refuse.
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	_ = resp.Body.Close()
	target := loc
	if u, perr := req.URL.Parse(loc); perr == nil {
		target = clean(u)
	} else {
		target = fmt.Sprintf("%q (not a URL)", truncate(loc, 200))
	}
	return nil, &Error{Endpoint: clean(req.URL), Location: target, Status: resp.StatusCode}
}

// CloseIdleConnections passes through, so http.Client.CloseIdleConnections
// reaches the wrapped transport.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// clean writes a URL without userinfo, query or fragment: what an error
// may show of it.
func clean(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return c.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
