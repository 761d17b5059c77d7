package forge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/taloscluster/taloscluster/lab/internal/connabort"
)

const (
	docsURL = "https://docs.github.com/rest"
	// secondaryDocsURL ends the way go-github's CheckResponse expects of a
	// secondary rate limit ("secondary-rate-limits").
	secondaryDocsURL = "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
	primaryDocsURL   = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-primary-rate-limits"
	secondaryMessage = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. " +
		"If you reach out to GitHub Support for help, please include the request ID %s."
)

// apiError is GitHub's error document.
type apiError struct {
	Message          string       `json:"message"`
	Errors           []fieldError `json:"errors,omitempty"`
	DocumentationURL string       `json:"documentation_url,omitempty"`
}

// fieldError is one entry of a 422 Validation Failed document.
type fieldError struct {
	Resource string `json:"resource"`
	Field    string `json:"field,omitempty"`
	Code     string `json:"code"`
	Message  string `json:"message,omitempty"`
}

// response is what an API handler answers; serveAPI writes it.
type response struct {
	status int
	body   any
	header http.Header
}

func reply(status int, body any) *response { return &response{status: status, body: body} }

func fail(status int, msg string) *response {
	return reply(status, apiError{Message: msg, DocumentationURL: docsURL})
}

func notFound() *response { return fail(http.StatusNotFound, "Not Found") }

func invalid(errs ...fieldError) *response {
	return reply(http.StatusUnprocessableEntity, apiError{Message: "Validation Failed", Errors: errs, DocumentationURL: docsURL})
}

// route is one API endpoint. Pattern segments are literals, ":name" for
// one path segment or "*name" for one or more (at most one per pattern).
type route struct {
	method string
	segs   []string
	op     string
	handle func(*call) *response
}

func (rt *route) match(method string, segs []string) (map[string]string, bool) {
	if method != rt.method {
		return nil, false
	}
	star := -1
	for i, s := range rt.segs {
		if strings.HasPrefix(s, "*") {
			star = i
		}
	}
	if star < 0 && len(segs) != len(rt.segs) || star >= 0 && len(segs) < len(rt.segs) {
		return nil, false
	}
	params := map[string]string{}
	matchSeg := func(p, s string) bool {
		if strings.HasPrefix(p, ":") {
			params[p[1:]] = s
			return s != ""
		}
		return p == s
	}
	if star < 0 {
		for i, p := range rt.segs {
			if !matchSeg(p, segs[i]) {
				return nil, false
			}
		}
		return params, true
	}
	for i := 0; i < star; i++ {
		if !matchSeg(rt.segs[i], segs[i]) {
			return nil, false
		}
	}
	tail := len(rt.segs) - star - 1
	for i := 0; i < tail; i++ {
		if !matchSeg(rt.segs[star+1+i], segs[len(segs)-tail+i]) {
			return nil, false
		}
	}
	params[rt.segs[star][1:]] = strings.Join(segs[star:len(segs)-tail], "/")
	return params, true
}

// splitPath splits an escaped URL path into unescaped segments. It reports
// false for paths with empty or undecodable segments other than a trailing
// slash.
func splitPath(escaped string) ([]string, bool) {
	escaped = strings.TrimSuffix(strings.TrimPrefix(escaped, "/"), "/")
	if escaped == "" {
		return nil, true
	}
	var segs []string
	for _, s := range strings.Split(escaped, "/") {
		u, err := url.PathUnescape(s)
		if err != nil || u == "" {
			return nil, false
		}
		segs = append(segs, u)
	}
	return segs, true
}

// call is one API request being handled.
type call struct {
	f      *Forge
	r      *http.Request
	user   *account
	params map[string]string
	repo   *Repo
	// api and web are the origins of the API (with any /api/v3 prefix) and
	// of the web and git URLs, as the client reached the forge.
	api, web string
}

func (c *call) param(name string) string { return c.params[name] }

// intParam parses a positive decimal path parameter.
func (c *call) intParam(name string) (int64, bool) {
	n, err := strconv.ParseInt(c.params[name], 10, 64)
	return n, err == nil && n > 0
}

// decode reads the JSON request body into v.
func (c *call) decode(v any) *response {
	dec := json.NewDecoder(http.MaxBytesReader(nil, c.r.Body, 16<<20))
	if err := dec.Decode(v); err != nil {
		return fail(http.StatusBadRequest, "Problems parsing JSON")
	}
	return nil
}

func (f *Forge) apiRoutes() []route {
	rs := []struct {
		method, pattern, op string
		handle              func(*call) *response
	}{
		{"GET", "/user", "user.get", f.getAuthenticatedUser},
		{"GET", "/users/:login", "users.get", f.getUser},
		{"GET", "/rate_limit", "ratelimit.get", f.getRateLimit},
		{"GET", "/repos/:owner/:repo", "repos.get", f.getRepo},
		{"GET", "/repos/:owner/:repo/pulls", "pulls.list", f.listPulls},
		{"POST", "/repos/:owner/:repo/pulls", "pulls.create", f.createPull},
		{"GET", "/repos/:owner/:repo/pulls/:number", "pulls.get", f.getPull},
		{"PATCH", "/repos/:owner/:repo/pulls/:number", "pulls.update", f.updatePull},
		{"GET", "/repos/:owner/:repo/pulls/:number/files", "pulls.files", f.listPullFiles},
		{"GET", "/repos/:owner/:repo/pulls/:number/merge", "pulls.merged", f.isMerged},
		{"PUT", "/repos/:owner/:repo/pulls/:number/merge", "pulls.merge", f.mergePull},
		{"GET", "/repos/:owner/:repo/issues/comments", "comments.list-repo", f.listRepoComments},
		{"GET", "/repos/:owner/:repo/issues/comments/:id", "comments.get", f.getComment},
		{"PATCH", "/repos/:owner/:repo/issues/comments/:id", "comments.update", f.updateComment},
		{"DELETE", "/repos/:owner/:repo/issues/comments/:id", "comments.delete", f.deleteComment},
		{"GET", "/repos/:owner/:repo/issues/:number/comments", "comments.list", f.listComments},
		{"POST", "/repos/:owner/:repo/issues/:number/comments", "comments.create", f.createComment},
		{"POST", "/repos/:owner/:repo/statuses/:sha", "statuses.create", f.createStatus},
		{"GET", "/repos/:owner/:repo/statuses/*ref", "statuses.list", f.listStatuses},
		{"GET", "/repos/:owner/:repo/commits/*ref/statuses", "statuses.list", f.listStatuses},
		{"GET", "/repos/:owner/:repo/commits/*ref/status", "status.combined", f.combinedStatus},
		{"GET", "/repos/:owner/:repo/collaborators/:user/permission", "collaborators.permission", f.getPermission},
		{"GET", "/repos/:owner/:repo/releases", "releases.list", f.listReleases},
		{"GET", "/repos/:owner/:repo/releases/latest", "releases.latest", f.latestReleaseDoc},
		{"GET", "/repos/:owner/:repo/releases/tags/*tag", "releases.get", f.releaseByTagDoc},
	}
	out := make([]route, 0, len(rs))
	for _, r := range rs {
		segs, _ := splitPath(r.pattern)
		out = append(out, route{method: r.method, segs: segs, op: r.op, handle: r.handle})
	}
	return out
}

// serveAPI runs one API request through latency, authentication, the rate
// limits and injected failures to its handler, and answers with the
// rate-limit headers and, for GET, an ETag.
func (f *Forge) serveAPI(w http.ResponseWriter, r *http.Request, rt *route, params map[string]string, prefix string) {
	rec := Request{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Op: rt.op}
	// The request is logged before its answer goes out (so a client never
	// sees an answer the log lacks), or on return when it got none.
	logged := false
	logNow := func() {
		if !logged {
			logged = true
			f.record(rec)
		}
	}
	defer logNow()
	reqID := fmt.Sprintf("F0%05X:%06X", f.requestSeq(), time.Now().UnixNano()&0xffffff)
	w.Header().Set("X-GitHub-Request-Id", reqID)
	w.Header().Set("X-GitHub-Media-Type", "github.v3; format=json")

	if !f.delay(r, rt.op) {
		return // the client gave up: no answer, no effect
	}
	acct, refusal := f.authenticate(r)
	if acct == nil {
		// Unauthenticated requests share GitHub's anonymous budget.
		f.mu.Lock()
		f.anon.roll(time.Now())
		f.anon.used++
		setRateHeaders(w.Header(), anonymousRateLimit, f.anon)
		f.mu.Unlock()
		rec.Status = http.StatusUnauthorized
		logNow()
		writeJSON(w, rec.Status, apiError{Message: refusal, DocumentationURL: docsURL})
		return
	}
	rec.User = acct.Login
	counted := rt.op != "ratelimit.get"

	now := time.Now()
	f.mu.Lock()
	acct.roll(now)
	var early *response
	var drop dropKind
	switch {
	case counted && acct.used >= f.limit:
		msg := fmt.Sprintf("API rate limit exceeded for user ID %d. If you reach out to GitHub Support "+
			"for help, please include the request ID %s and timestamp %s.",
			acct.id, reqID, now.UTC().Format("2006-01-02 15:04:05 MST"))
		early = reply(http.StatusForbidden, apiError{Message: msg, DocumentationURL: primaryDocsURL})
		counted = false
	default:
		if rule := f.faults.takeSecondary(rt.op); rule != nil {
			secs := int64(math.Ceil(rule.retryAfter.Seconds()))
			early = reply(http.StatusForbidden, apiError{Message: fmt.Sprintf(secondaryMessage, reqID), DocumentationURL: secondaryDocsURL})
			early.header = http.Header{"Retry-After": {strconv.FormatInt(secs, 10)}}
		} else if rule := f.faults.takeFail(rt.op); rule != nil {
			early = fail(rule.status, http.StatusText(rule.status))
		} else {
			drop = f.faults.takeDrop(rt.op)
		}
	}
	f.mu.Unlock()
	switch drop {
	case dropHang:
		rec.Fault = string(drop)
		f.hold(w, r)
		return
	case dropReset:
		rec.Fault = string(drop)
		logNow() // before the client can notice
		connabort.HTTP(w, r)
		return
	}

	resp := early
	var c *call
	if resp == nil {
		c = &call{f: f, r: r, user: acct, params: params}
		c.web = "http://" + r.Host
		if r.TLS != nil {
			c.web = "https://" + r.Host
		}
		c.api = c.web + prefix
		if owner, name := params["owner"], params["repo"]; owner != "" && name != "" {
			c.repo = f.Repo(owner, name)
			if c.repo == nil {
				resp = notFound()
			}
		}
		if resp == nil {
			resp = rt.handle(c)
		}
	}

	var body []byte
	if resp.body != nil {
		var err error
		if body, err = json.Marshal(resp.body); err != nil {
			resp, body = fail(http.StatusInternalServerError, "encoding the response"), nil
			body, _ = json.Marshal(resp.body)
		}
	}
	status := resp.status
	if r.Method == http.MethodGet && status == http.StatusOK {
		sum := sha256.Sum256(body)
		etag := `W/"` + hex.EncodeToString(sum[:16]) + `"`
		w.Header().Set("ETag", etag)
		if etagMatch(r.Header.Get("If-None-Match"), etag) {
			status, body, counted = http.StatusNotModified, nil, false
		}
	}

	h := w.Header()
	f.mu.Lock()
	if counted {
		acct.used++
	}
	setRateHeaders(h, f.limit, acct)
	f.mu.Unlock()
	for k, v := range resp.header {
		h[k] = v
	}
	rec.Status = status
	if drop == dropLost {
		// Carried out and logged; the answer is lost with the connection.
		rec.Fault = string(drop)
		logNow()
		connabort.HTTP(w, r)
		return
	}
	logNow()
	if body == nil {
		w.WriteHeader(status)
		return
	}
	h.Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// anonymousRateLimit is GitHub's hourly budget for unauthenticated
// requests.
const anonymousRateLimit = 60

// setRateHeaders sets the rate-limit headers for an account with the
// given budget. The caller holds f.mu.
func setRateHeaders(h http.Header, limit int, a *account) {
	h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(limit-a.used, 0)))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(a.reset.Unix(), 10))
	h.Set("X-RateLimit-Used", strconv.Itoa(min(a.used, limit)))
	h.Set("X-RateLimit-Resource", "core")
}

func (f *Forge) requestSeq() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.log) + 1
}

// etagMatch reports whether an If-None-Match header names etag, comparing
// weakly as HTTP requires for If-None-Match.
func etagMatch(header, etag string) bool {
	if header == "" {
		return false
	}
	want := strings.TrimPrefix(etag, "W/")
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == want {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// page is the slice of a list one request asks for, with the Link header
// that points to the others.
type page struct {
	lo, hi int
	link   string
}

// paginate applies the per_page (default 30, at most 100) and page
// parameters to a list of n items, building GitHub's Link header.
func (c *call) paginate(n int) page {
	q := c.r.URL.Query()
	per, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || per <= 0 {
		per = 30
	}
	per = min(per, 100)
	num, err := strconv.Atoi(q.Get("page"))
	if err != nil || num <= 0 {
		num = 1
	}
	last := max((n+per-1)/per, 1)
	lo := min((num-1)*per, n)
	hi := min(lo+per, n)
	link := func(p int, rel string) string {
		q.Set("page", strconv.Itoa(p))
		q.Set("per_page", strconv.Itoa(per))
		return fmt.Sprintf(`<%s%s?%s>; rel="%s"`, c.api, strings.TrimPrefix(c.r.URL.EscapedPath(), c.apiPrefixPath()), q.Encode(), rel)
	}
	var links []string
	if num > 1 {
		links = append(links, link(min(num-1, last), "prev"))
	}
	if num < last {
		links = append(links, link(num+1, "next"), link(last, "last"))
	}
	if num > 1 {
		links = append(links, link(1, "first"))
	}
	return page{lo: lo, hi: hi, link: strings.Join(links, ", ")}
}

// apiPrefixPath returns the path prefix (empty or /api/v3) of the request.
func (c *call) apiPrefixPath() string {
	return strings.TrimPrefix(c.api, c.web)
}

// listReply answers with one page of items and its Link header.
func listReply[T any](c *call, items []T) *response {
	p := c.paginate(len(items))
	resp := reply(http.StatusOK, append([]T{}, items[p.lo:p.hi]...))
	if p.link != "" {
		resp.header = http.Header{"Link": {p.link}}
	}
	return resp
}
