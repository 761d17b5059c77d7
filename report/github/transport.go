package github

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// Transport wraps an http.RoundTripper for GitHub's REST API:
//   - GET, HEAD, PATCH and PUT are retried on 5xx and network errors with
//     capped exponential backoff and jitter (POST is not: a comment that
//     was created before the error must not be created twice, and the
//     agent's outbox retries statuses and comments itself, logging each
//     failed attempt);
//   - on 403/429 with Retry-After it waits that long, and when
//     X-RateLimit-Remaining is 0 it waits until X-RateLimit-Reset, then
//     retries; a wait longer than MaxWait, or one that would outlast the
//     request's context, is not made: the refusal is returned at once, so
//     the caller learns the reset (go-github's *RateLimitError) and can
//     do other work meanwhile instead of blocking until its deadline;
//   - mutating requests are made one at a time, at least Spacing apart;
//   - GET answers are kept with their ETag and asked again with
//     If-None-Match, so an unchanged answer (304) costs no rate limit; the
//     replayed answer carries the 304's fresh rate-limit headers.
type Transport struct {
	Base    http.RoundTripper
	Spacing time.Duration
	// MaxWait bounds one wait for a rate limit; longer ones fail.
	MaxWait time.Duration
	// Attempts bounds the tries of one request; 0 means 5.
	Attempts int
	// Observe, when set, is told of every answer: the request, the status
	// code, and the remaining rate limit (-1 when not reported).
	Observe func(req *http.Request, code int, remaining int)

	mutate sync.Mutex
	last   time.Time

	cacheMu sync.Mutex
	cache   map[string]cached
}

type cached struct {
	etag string
	raw  []byte // the whole response, as httputil.DumpResponse wrote it
}

const maxCached = 512

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// RoundTrip sends one request with the policies above.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if mutating(req.Method) {
		t.mutate.Lock()
		defer t.mutate.Unlock()
		if wait := t.Spacing - time.Since(t.last); wait > 0 {
			if err := retry.Sleep(req.Context(), wait); err != nil {
				return nil, err
			}
		}
		defer func() { t.last = time.Now() }()
	}
	attempts := t.Attempts
	if attempts <= 0 {
		attempts = 5
	}
	key := req.URL.String()
	var etagged *cached
	if req.Method == http.MethodGet {
		t.cacheMu.Lock()
		if c, ok := t.cache[key]; ok {
			etagged = &c
		}
		t.cacheMu.Unlock()
	}
	backoff := retry.Policy{Initial: 500 * time.Millisecond, Max: 30 * time.Second}
	for try := 1; ; try++ {
		r, err := t.attempt(req, etagged)
		if err != nil {
			if try >= attempts || !retryable(req) || req.Context().Err() != nil {
				return nil, err
			}
			if err := retry.Sleep(req.Context(), backoff.Backoff(try)); err != nil {
				return nil, err
			}
			continue
		}
		remaining := headerInt(r.Header, "X-RateLimit-Remaining", -1)
		if t.Observe != nil {
			t.Observe(req, r.StatusCode, remaining)
		}
		switch {
		case r.StatusCode == http.StatusNotModified && etagged != nil:
			r.Body.Close()
			out, err := replay(etagged.raw, req)
			if err == nil {
				for _, h := range rateHeaders {
					if v := r.Header.Get(h); v != "" {
						out.Header.Set(h, v)
					}
				}
			}
			return out, err
		case r.StatusCode == http.StatusForbidden || r.StatusCode == http.StatusTooManyRequests:
			wait, limited := rateLimitWait(r.Header)
			if !limited || try >= attempts {
				return r, nil
			}
			if t.MaxWait > 0 && wait > t.MaxWait {
				return r, nil
			}
			if deadline, ok := req.Context().Deadline(); ok && time.Until(deadline) < wait {
				return r, nil
			}
			r.Body.Close()
			if err := retry.Sleep(req.Context(), wait); err != nil {
				return nil, err
			}
			continue
		case r.StatusCode >= 500 && retryable(req) && try < attempts:
			r.Body.Close()
			if err := retry.Sleep(req.Context(), backoff.Backoff(try)); err != nil {
				return nil, err
			}
			continue
		}
		if req.Method == http.MethodGet && r.StatusCode == http.StatusOK && r.Header.Get("ETag") != "" {
			return t.remember(key, r)
		}
		return r, nil
	}
}

// attempt sends one try of req, with If-None-Match when an answer is
// cached, and a fresh body for a retry.
func (t *Transport) attempt(req *http.Request, etagged *cached) (*http.Response, error) {
	r := req.Clone(req.Context())
	if req.Body != nil && req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("rewinding the request body: %w", err)
		}
		r.Body = body
	}
	if etagged != nil {
		r.Header.Set("If-None-Match", etagged.etag)
	}
	return t.base().RoundTrip(r)
}

// remember stores a GET answer with its ETag and returns a copy of it.
func (t *Transport) remember(key string, r *http.Response) (*http.Response, error) {
	raw, err := httputil.DumpResponse(r, true)
	r.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	t.cacheMu.Lock()
	if t.cache == nil || len(t.cache) >= maxCached {
		t.cache = map[string]cached{}
	}
	t.cache[key] = cached{etag: r.Header.Get("ETag"), raw: raw}
	t.cacheMu.Unlock()
	return replay(raw, r.Request)
}

func replay(raw []byte, req *http.Request) (*http.Response, error) {
	r, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), req)
	if err != nil {
		return nil, fmt.Errorf("replaying a cached answer: %w", err)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return r, nil
}

// rateHeaders are the primary rate limit's headers.
var rateHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Used", "X-RateLimit-Resource"}

func mutating(m string) bool {
	return m == http.MethodPost || m == http.MethodPatch || m == http.MethodPut || m == http.MethodDelete
}

// retryable: requests whose repetition cannot duplicate anything. Setting
// the same commit status twice only repeats it; creating a comment twice
// would duplicate it, so comment creation is not retried here.
func retryable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPatch, http.MethodPut:
		return true
	}
	return false
}

// rateLimitWait reads how long GitHub asks to wait: Retry-After, or the
// primary limit's reset when nothing remains, or a minute for a secondary
// limit without either.
func rateLimitWait(h http.Header) (time.Duration, bool) {
	if s := h.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			return time.Duration(n) * time.Second, true
		}
	}
	if headerInt(h, "X-RateLimit-Remaining", -1) == 0 {
		if reset := headerInt(h, "X-RateLimit-Reset", 0); reset > 0 {
			return max(time.Until(time.Unix(int64(reset), 0)), 0) + time.Second, true
		}
	}
	return 0, false
}

func headerInt(h http.Header, key string, def int) int {
	if v, err := strconv.Atoi(h.Get(key)); err == nil {
		return v
	}
	return def
}
