package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/forge"
)

// githubFaultKinds are the fault kinds of the forge that the control API
// takes beside the lab's own, in the lab's JSON shape (lab.Fault):
//
//	github-fail             the next n requests whose operation matches op
//	                        answer status (default 500), without effect
//	github-secondary-limit  the next n API requests matching op (default
//	                        "*") answer 403 with Retry-After: millis rounded
//	                        up to seconds (default 1 s), as a secondary
//	                        rate limit does
//	github-rate-limit       every user's primary limit is used up for
//	                        millis (default 60 s): 403 with
//	                        X-RateLimit-Remaining: 0 until then
//	github-latency          requests matching op take millis longer (0
//	                        removes the delay)
//	github-hang             the next n requests matching op never answer:
//	                        they are held, without effect, until the
//	                        client gives up
//	github-reset            the next n requests matching op get their TCP
//	                        connection reset (RST), without effect
//	github-lost-reply       the next n requests matching op take effect
//	                        (the comment or status is stored, the push
//	                        received), then their connection is reset
//	                        instead of answering
//
// op is a forge operation name such as pulls.get, comments.create,
// statuses.create, releases.list or git.upload-pack, or a path.Match
// pattern of them
// (comments.*, *); GET /lab/v1/ lists the names.
var githubFaultKinds = []string{"github-fail", "github-secondary-limit", "github-rate-limit", "github-latency",
	"github-hang", "github-reset", "github-lost-reply"}

// controlAPI is the lab's control API with the forge added: the github-*
// fault kinds on POST /lab/v1/faults, the forge's requests in GET
// /lab/v1/log (source "github"), and both listed by GET /lab/v1/.
// Everything else is the lab's own handler.
type controlAPI struct {
	lab     http.Handler
	forge   *forge.Forge
	rancher *rancherLab
	charts  *chartsLab

	mu     sync.Mutex
	events []lab.LogEntry // the github faults injected
}

func newControlAPI(l *lab.Lab, f *forge.Forge, r *rancherLab, c *chartsLab) *controlAPI {
	return &controlAPI{lab: l.ControlHandler(), forge: f, rancher: r, charts: c}
}

func (c *controlAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/lab/v1/faults":
		c.faults(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/lab/v1/":
		c.index(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/lab/v1/log":
		c.log(w, r)
	default:
		c.lab.ServeHTTP(w, r)
	}
}

// faults injects a github-*, rancher-* or charts-* fault and hands every
// other kind to the lab.
func (c *controlAPI) faults(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "reading the fault: " + err.Error()})
		return
	}
	var f lab.Fault
	inject := c.injector(body, &f)
	if inject == nil {
		r2 := r.Clone(r.Context())
		r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		c.lab.ServeHTTP(w, r2)
		return
	}
	detail, err := inject(f)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	c.mu.Lock()
	c.events = append(c.events, lab.LogEntry{Time: time.Now(), Source: "lab", Op: "fault", Target: f.Kind, Result: detail})
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"injected": f.Kind})
}

// injector decodes a fault into f and returns what injects it beside the
// lab's own: the forge's, the Rancher emulator's or the chart
// repository's; nil for the lab's kinds.
func (c *controlAPI) injector(body []byte, f *lab.Fault) func(lab.Fault) (string, error) {
	if json.Unmarshal(body, f) != nil {
		return nil
	}
	switch {
	case strings.HasPrefix(f.Kind, "github-"):
		return c.inject
	case strings.HasPrefix(f.Kind, "rancher-") && c.rancher != nil:
		return c.rancher.inject
	case strings.HasPrefix(f.Kind, "charts-") && c.charts != nil:
		return c.charts.inject
	}
	return nil
}

// inject applies a github-* fault to the forge and describes it.
func (c *controlAPI) inject(f lab.Fault) (string, error) {
	if f.N <= 0 {
		f.N = 1
	}
	if f.Millis < 0 {
		return "", fmt.Errorf("fault %s: millis must not be negative", f.Kind)
	}
	needOp := func() error {
		if !c.forge.MatchesOperation(f.Op) {
			return fmt.Errorf("fault %s needs op, a forge operation or a pattern of them (such as comments.* or *); operations: %s",
				f.Kind, strings.Join(c.forge.Operations(), ", "))
		}
		return nil
	}
	switch f.Kind {
	case "github-fail":
		if err := needOp(); err != nil {
			return "", err
		}
		if f.Status == 0 {
			f.Status = http.StatusInternalServerError
		}
		if f.Status < 400 || f.Status > 599 {
			return "", fmt.Errorf("fault github-fail: status %d is not an HTTP error status (400 to 599)", f.Status)
		}
		c.forge.Fail(f.Op, f.N, f.Status)
		return fmt.Sprintf("op=%s n=%d status=%d", f.Op, f.N, f.Status), nil
	case "github-secondary-limit":
		if f.Op == "" {
			f.Op = forge.AnyOp
		}
		if err := needOp(); err != nil {
			return "", err
		}
		d := time.Duration(f.Millis) * time.Millisecond
		if d == 0 {
			d = time.Second
		}
		c.forge.SecondaryRateLimit(f.Op, f.N, d)
		return fmt.Sprintf("op=%s n=%d retry_after=%s", f.Op, f.N, d), nil
	case "github-rate-limit":
		d := time.Duration(f.Millis) * time.Millisecond
		if d == 0 {
			d = time.Minute
		}
		reset := time.Now().Add(d)
		c.forge.PrimaryExhausted(reset)
		return "reset=" + reset.UTC().Format(time.RFC3339), nil
	case "github-latency":
		if err := needOp(); err != nil {
			return "", err
		}
		d := time.Duration(f.Millis) * time.Millisecond
		c.forge.Latency(f.Op, d)
		return fmt.Sprintf("op=%s latency=%s", f.Op, d), nil
	case "github-hang", "github-reset", "github-lost-reply":
		if err := needOp(); err != nil {
			return "", err
		}
		switch f.Kind {
		case "github-hang":
			c.forge.Hang(f.Op, f.N)
		case "github-reset":
			c.forge.ResetConn(f.Op, f.N)
		default:
			c.forge.LoseReply(f.Op, f.N)
		}
		return fmt.Sprintf("op=%s n=%d", f.Op, f.N), nil
	}
	return "", fmt.Errorf("unknown fault kind %q; the forge's kinds: %s", f.Kind, strings.Join(githubFaultKinds, ", "))
}

// index is the lab's endpoint list with the forge's fault kinds and
// operations added.
func (c *controlAPI) index(w http.ResponseWriter, r *http.Request) {
	var doc map[string]any
	if status, err := c.labJSON(r, &doc); err != nil || status != http.StatusOK {
		c.lab.ServeHTTP(w, r)
		return
	}
	kinds, _ := doc["fault_kinds"].([]any)
	for _, k := range githubFaultKinds {
		kinds = append(kinds, k)
	}
	if c.rancher != nil {
		for _, k := range rancherFaultKinds {
			kinds = append(kinds, k)
		}
	}
	if c.charts != nil {
		for _, k := range chartsFaultKinds {
			kinds = append(kinds, k)
		}
	}
	doc["fault_kinds"] = kinds
	doc["github_operations"] = c.forge.Operations()
	writeJSON(w, http.StatusOK, doc)
}

// log is the lab's log with the forge's requests and faults merged in, in
// time order.
func (c *controlAPI) log(w http.ResponseWriter, r *http.Request) {
	var entries []lab.LogEntry
	if status, err := c.labJSON(r, &entries); err != nil || status != http.StatusOK {
		c.lab.ServeHTTP(w, r)
		return
	}
	for _, q := range c.forge.Log() {
		res := strconv.Itoa(q.Status)
		if q.Status == 0 {
			res = "no answer"
		}
		entries = append(entries, lab.LogEntry{Time: q.Time, Source: "github", Op: q.Op, Target: q.Method + " " + q.Path,
			Result: lab.FaultResult(res, q.Fault)})
	}
	c.mu.Lock()
	entries = append(entries, c.events...)
	c.mu.Unlock()
	slices.SortStableFunc(entries, func(a, b lab.LogEntry) int { return a.Time.Compare(b.Time) })
	if entries == nil {
		entries = []lab.LogEntry{}
	}
	writeJSON(w, http.StatusOK, entries)
}

// labJSON asks the lab's own handler and decodes its answer.
func (c *controlAPI) labJSON(r *http.Request, v any) (int, error) {
	rec := httptest.NewRecorder()
	c.lab.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		return rec.Code, nil
	}
	return rec.Code, json.Unmarshal(rec.Body.Bytes(), v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
