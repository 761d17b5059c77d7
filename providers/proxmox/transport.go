package proxmox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/taloscluster/taloscluster/internal/noredirect"
)

// RequestTimeout bounds one Proxmox HTTP request unless WithRequestTimeout
// says otherwise: well below CallTimeout, so a request that hangs fails
// (and, when it only reads, is sent again) long before the call it belongs
// to runs out of time.
const RequestTimeout = 30 * time.Second

// readTries bounds how often a read (GET) that got no answer in time is
// sent.
const readTries = 3

// Option configures a Provider.
type Option func(*options)

type options struct {
	requestTimeout time.Duration
	noHostFiles    bool
}

// NoHostFiles says the cluster's files come from a repository's tree, as
// in the agent: a path cluster.yaml names (the CA bundle of
// proxmox.tls_verify) is read only from the cluster's directory in that
// tree, never from the host. An absolute path, or one that leaves the
// directory, is refused before anything is read. Without it (the CLI), an
// absolute path is a file of the host.
func NoHostFiles() Option {
	return func(o *options) { o.noHostFiles = true }
}

// WithRequestTimeout sets the bound of one Proxmox HTTP request;
// RequestTimeout by default.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.requestTimeout = d
		}
	}
}

// apiClient is the HTTP client of the Proxmox API: every request has its
// own deadline (boundedTransport), so one request that hangs cannot hold a
// whole call, and a task's status, which proxmox-api-go polls with one
// request per poll, is still waited for as long as the task runs.
func apiClient(base *http.Transport, timeout time.Duration) *http.Client {
	base.DisableCompression = true
	base.ResponseHeaderTimeout = timeout
	base.TLSHandshakeTimeout = min(timeout, 10*time.Second)
	base.DialContext = (&net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second}).DialContext
	base.IdleConnTimeout = 90 * time.Second
	// The API token goes with every request: a redirect is never
	// followed (noredirect), whatever the URL in cluster.yaml answers.
	return &http.Client{Transport: &boundedTransport{base: noredirect.Transport(base), timeout: timeout, tries: readTries},
		CheckRedirect: noredirect.CheckRedirect}
}

// boundedTransport gives each request its own deadline, timeout after it
// is sent, covering its answer and the body. A GET that got no answer in
// time is sent again, up to tries times: reads are safe to repeat, and a
// hung poll of a task's status must not fail a task that succeeds. Other
// methods are not repeated: the caller looks the result up. An upload
// (its body may take long to send) is bounded by its call's deadline, and
// by the transport's ResponseHeaderTimeout once its body is sent.
type boundedTransport struct {
	base    http.RoundTripper
	timeout time.Duration
	tries   int
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/upload") {
		return t.base.RoundTrip(req)
	}
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(req.Context(), t.timeout)
		resp, err := t.base.RoundTrip(req.WithContext(ctx))
		if err == nil {
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		}
		cancel()
		var ne net.Error
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
		if req.Context().Err() != nil || !timedOut {
			return nil, err
		}
		if req.Method != http.MethodGet || try >= t.tries {
			return nil, &noAnswerError{method: req.Method, path: req.URL.Path, timeout: t.timeout, tries: try}
		}
	}
}

// cancelOnClose ends a request's own deadline when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// noAnswerError is a request that got no answer within its own deadline.
// It is a timeout (net.Error) and wraps context.DeadlineExceeded, so it is
// transient: a later try may get an answer.
type noAnswerError struct {
	method, path string
	timeout      time.Duration
	tries        int
}

func (e *noAnswerError) Error() string {
	if e.tries > 1 {
		return fmt.Sprintf("Proxmox did not answer %s %s within %s, %d times", e.method, e.path, e.timeout, e.tries)
	}
	return fmt.Sprintf("Proxmox did not answer %s %s within %s", e.method, e.path, e.timeout)
}

func (e *noAnswerError) Timeout() bool   { return true }
func (e *noAnswerError) Temporary() bool { return true }
func (e *noAnswerError) Unwrap() error   { return context.DeadlineExceeded }
