package connabort_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/taloscluster/taloscluster/lab/internal/connabort"
)

// abortServer serves a handler that resets every connection, over TLS,
// with HTTP/2 or HTTP/1 and with or without the ConnContext hook. With
// noHijack, the handler hides the hijacker from connabort.HTTP.
func abortServer(t *testing.T, h2, connContext, noHijack bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && !h2 {
			t.Errorf("served over %s", r.Proto)
		}
		w.Header().Set("X-Never", "sent")
		if noHijack {
			w = struct{ http.ResponseWriter }{w}
		}
		connabort.HTTP(w, r)
	}))
	srv.EnableHTTP2 = h2
	if connContext {
		srv.Config.ConnContext = connabort.ConnContext
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, srv *httptest.Server) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/x", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// TestHTTPResetsTheConnection checks that net/http clients get no answer
// and see their connection fail, over HTTP/1 (hijacked) and HTTP/2
// (through ConnContext).
func TestHTTPResetsTheConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h2   bool
	}{{"HTTP/1.1", false}, {"HTTP/2", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, err := post(t, abortServer(t, tc.h2, true, false))
			if err == nil {
				t.Fatalf("got an answer %s", resp.Status)
			}
			if !isReset(err) {
				t.Errorf("error %v, want a connection reset", err)
			}
		})
	}
}

// isReset reports whether err is what a client sees of a reset
// connection: ECONNRESET, or an unexpected EOF when another goroutine of
// the client (an HTTP/2 writer) took the reset error first.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// TestHTTPSendsRST checks on the wire that the connection ends with a TCP
// reset, not an orderly close: a client that only reads gets ECONNRESET,
// whether the connection was hijacked or found through ConnContext.
func TestHTTPSendsRST(t *testing.T) {
	t.Parallel()
	for _, noHijack := range []bool{false, true} {
		srv := abortServer(t, false, true, noHijack)
		conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), srv.Client().Transport.(*http.Transport).TLSClientConfig)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: lab\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("without hijacking %v: read %q, %v; want ECONNRESET", noHijack, buf[:n], err)
		}
	}
}

// TestHTTPWithoutConnContext checks the fallback for HTTP/2 without the
// hook: the stream is reset, still without an answer.
func TestHTTPWithoutConnContext(t *testing.T) {
	t.Parallel()
	resp, err := post(t, abortServer(t, true, false, false))
	if err == nil {
		t.Fatalf("got an answer %s", resp.Status)
	}
}

// TestUnsent checks that the writer keeps the status and drops the rest.
func TestUnsent(t *testing.T) {
	t.Parallel()
	var u connabort.Unsent
	u.Header().Set("A", "b")
	if _, err := u.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	u.WriteHeader(http.StatusCreated)
	if u.Code != http.StatusOK {
		t.Errorf("Code %d, want 200 (the first status)", u.Code)
	}
}
