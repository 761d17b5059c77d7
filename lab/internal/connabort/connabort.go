// Package connabort cuts connections with a TCP reset (RST), the way a
// crashed server or proxy drops them. The emulators use it for their
// reset and lost-reply faults: the client sees its connection reset and no
// answer at all, not an error status.
package connabort

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
)

type connKey struct{}

// ConnContext is a hook for http.Server.ConnContext: it keeps each
// connection in the context of its requests, so that HTTP can reset
// HTTP/2 connections too, which cannot be hijacked.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// HTTP resets the connection carrying r without sending an answer; the
// handler must then return without writing. w is the request's
// ResponseWriter, or a wrapper of it with an Unwrap method. An HTTP/1
// connection is hijacked; an HTTP/2 connection is found through
// ConnContext. When neither works, HTTP panics with http.ErrAbortHandler,
// which makes net/http drop the connection (HTTP/1) or reset the stream
// (HTTP/2), so the client still gets no answer.
func HTTP(w http.ResponseWriter, r *http.Request) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = Reset(c) // the connection is closed either way
		return
	}
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && Reset(c) == nil {
		return
	}
	panic(http.ErrAbortHandler)
}

// Reset closes c so that the peer sees a TCP reset instead of an orderly
// close: it sets SO_LINGER to zero on the TCP connection beneath any TLS
// layer and closes it. A connection that is not TCP is only closed, and
// Reset then reports an error.
func Reset(c net.Conn) error {
	raw := c
	for {
		inner, ok := raw.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		raw = inner.NetConn()
	}
	tcp, ok := raw.(*net.TCPConn)
	if !ok {
		_ = raw.Close()
		return fmt.Errorf("resetting a %T connection: %w", raw, errNotTCP)
	}
	if err := tcp.SetLinger(0); err != nil {
		_ = tcp.Close()
		return fmt.Errorf("resetting the connection from %s: %w", tcp.RemoteAddr(), err)
	}
	if err := tcp.Close(); err != nil {
		return fmt.Errorf("resetting the connection from %s: %w", tcp.RemoteAddr(), err)
	}
	return nil
}

var errNotTCP = errors.New("not a TCP connection")

// Unsent is a ResponseWriter for an answer that will never be sent, as
// when a reply is lost: it notes the status code and discards the rest.
type Unsent struct {
	header http.Header
	// Code is the status code the answer would have had; 0 until the
	// handler writes.
	Code int
}

// Header returns the answer's header, which is never sent.
func (u *Unsent) Header() http.Header {
	if u.header == nil {
		u.header = http.Header{}
	}
	return u.header
}

// WriteHeader notes the status code.
func (u *Unsent) WriteHeader(code int) {
	if u.Code == 0 {
		u.Code = code
	}
}

// Write discards b.
func (u *Unsent) Write(b []byte) (int, error) {
	u.WriteHeader(http.StatusOK)
	return len(b), nil
}
