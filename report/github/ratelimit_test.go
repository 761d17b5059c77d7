package github_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gh "github.com/taloscluster/taloscluster/report/github"
)

// limitedServer answers every request but GET /rate_limit with GitHub's
// primary-rate-limit refusal until lifted, and counts what reached it.
type limitedServer struct {
	*httptest.Server
	reset  time.Time
	lifted atomic.Bool
	calls  atomic.Int32
}

func newLimitedServer(t *testing.T, reset time.Time) *limitedServer {
	t.Helper()
	s := &limitedServer{reset: reset}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		remaining := "0"
		if s.lifted.Load() {
			remaining = "5000"
		}
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", remaining)
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(s.reset.Unix(), 10))
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/rate_limit":
			_, _ = w.Write([]byte(`{"resources":{"core":{"limit":5000,"remaining":` + remaining + `,"reset":` + strconv.FormatInt(s.reset.Unix(), 10) + `}}}`))
		case !s.lifted.Load():
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-primary-rate-limits"}`))
		default:
			_, _ = w.Write([]byte(`[]`))
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// A primary limit with its reset an hour ahead fails the call at once with
// an error RateLimited reads the reset from; later calls fail without a
// request; GET /rate_limit, which the limit does not cover, tells the
// client when the limit is back.
func TestRateLimitFailsFastAndIsRead(t *testing.T) {
	t.Parallel()
	reset := time.Now().Add(time.Hour).Truncate(time.Second)
	srv := newLimitedServer(t, reset)
	c, err := gh.New(gh.Options{APIURL: srv.URL + "/", Repo: "org/clusters", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.OpenPRs(ctx, "main")
	if time.Since(start) > 2*time.Second {
		t.Fatalf("the call waited %v for a reset an hour ahead", time.Since(start))
	}
	l, ok := gh.RateLimited(err)
	if !ok || !l.Until.Equal(reset) || l.Secondary {
		t.Fatalf("RateLimited(%v) = %+v, %v; want the reset %v", err, l, ok, reset)
	}
	if want := "GitHub API rate limit exhausted until " + reset.UTC().Format(time.RFC3339); l.Error() != want {
		t.Fatalf("%q, want %q", l.Error(), want)
	}
	calls := srv.calls.Load()
	if err := c.SetStatus(ctx, "abc", "ctx", gh.StatePending, "x", ""); err == nil {
		t.Fatal("a status was set under the rate limit")
	} else if _, ok := gh.RateLimited(err); !ok {
		t.Fatalf("not a rate limit: %v", err)
	}
	if srv.calls.Load() != calls {
		t.Fatal("a request went out while the client knew the limit")
	}
	rate, err := c.RateLimit(ctx)
	if err != nil || rate.Remaining != 0 || !rate.Reset.Equal(reset) {
		t.Fatalf("RateLimit: %+v, %v", rate, err)
	}
	srv.lifted.Store(true)
	if rate, err = c.RateLimit(ctx); err != nil || rate.Remaining != 5000 {
		t.Fatalf("RateLimit after the lift: %+v, %v", rate, err)
	}
	if _, err := c.OpenPRs(ctx, "main"); err != nil {
		t.Fatalf("after /rate_limit said the limit is back: %v", err)
	}
}

// A rate-limit wait that would outlast the request's deadline is not made:
// the refusal comes back at once.
func TestTransportDoesNotWaitPastTheDeadline(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusForbidden)
	}))
	defer srv.Close()
	c := &http.Client{Transport: &gh.Transport{MaxWait: time.Minute}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%v after %v; want the 403 at once", err, time.Since(start))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || time.Since(start) > time.Second {
		t.Fatalf("status %d after %v", resp.StatusCode, time.Since(start))
	}
}

// A 304 replays the cached answer with the 304's own rate-limit headers.
func TestTransportReplayCarriesFreshRateHeaders(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(int(4000-n.Add(1))))
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write([]byte(`[]`))
	}))
	defer srv.Close()
	c := &http.Client{Transport: &gh.Transport{}}
	var got []string
	for range 2 {
		resp, err := c.Get(srv.URL + "/pulls")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got = append(got, resp.Header.Get("X-RateLimit-Remaining"))
	}
	if strings.Join(got, ",") != "3999,3998" {
		t.Fatalf("remaining %v, want 3999,3998", got)
	}
}
