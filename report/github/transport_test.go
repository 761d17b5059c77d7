package github_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gh "github.com/taloscluster/taloscluster/report/github"
)

func TestTransportRetriesIdempotentRequestsOn5xx(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) < 3 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c := &http.Client{Transport: &gh.Transport{}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPatch, srv.URL, strings.NewReader("hello"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello" || n.Load() != 3 {
		t.Fatalf("status %d body %q after %d tries", resp.StatusCode, body, n.Load())
	}
}

func TestTransportDoesNotRetryPost(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	c := &http.Client{Transport: &gh.Transport{}}
	resp, err := c.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n.Load() != 1 {
		t.Fatalf("a POST was sent %d times", n.Load())
	}
}

func TestTransportHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"message":"You have exceeded a secondary rate limit"}`))
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	c := &http.Client{Transport: &gh.Transport{}}
	start := time.Now()
	resp, err := c.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || time.Since(start) < time.Second {
		t.Fatalf("status %d after %v; want a wait of Retry-After then success", resp.StatusCode, time.Since(start))
	}
}

func TestTransportSpacesMutations(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	c := &http.Client{Transport: &gh.Transport{Spacing: 200 * time.Millisecond}}
	start := time.Now()
	for i := 0; i < 3; i++ {
		resp, err := c.Post(srv.URL, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("three mutations in %v; want at least 2 x 200ms apart", d)
	}
}

func TestTransportConditionalGet(t *testing.T) {
	t.Parallel()
	var full, notModified atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"v1"` {
			notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		full.Add(1)
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write([]byte(`[{"number":1}]`))
	}))
	defer srv.Close()
	c := &http.Client{Transport: &gh.Transport{}}
	for i := 0; i < 3; i++ {
		resp, err := c.Get(srv.URL + "/pulls")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != `[{"number":1}]` {
			t.Fatalf("try %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if full.Load() != 1 || notModified.Load() != 2 {
		t.Fatalf("%d full answers and %d 304s; want 1 and 2", full.Load(), notModified.Load())
	}
}
