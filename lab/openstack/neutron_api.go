package openstack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// neutronHandler is a Neutron operation run with s.mu held: it returns
// the status and the body to answer, or an error (a *neutronError, or
// anything else for a 500).
type neutronHandler func(r *http.Request) (int, any, error)

// handleNeutron registers a Neutron operation: the token check, the
// path's wildcards, the lock, Neutron's error body, and the floating IP
// hook calls the operation queued.
func (s *Server) handleNeutron(pattern, name string, fn neutronHandler) {
	_, path, _ := strings.Cut(pattern, " ")
	wild := strings.Split(path, "/")
	s.handle(pattern, name, func(w http.ResponseWriter, r *http.Request) int {
		// The server routes with ServeMux.Handler, which leaves the
		// request's path values unset: they are set from the pattern here.
		for i, seg := range strings.Split(r.URL.Path, "/") {
			if i < len(wild) && strings.HasPrefix(wild[i], "{") && wild[i] != "{$}" {
				r.SetPathValue(strings.Trim(wild[i], "{}"), seg)
			}
		}
		if !s.authorized(r) {
			return s.unauthorized(w)
		}
		s.mu.Lock()
		status, body, err := fn(r)
		s.mu.Unlock()
		s.flushFloatingIPs()
		if err != nil {
			ne, ok := err.(*neutronError)
			if !ok {
				ne = &neutronError{http.StatusInternalServerError, "HTTPInternalServerError",
					"Request Failed: internal server error while processing your request."}
			}
			return writeJSON(w, ne.status, map[string]any{"NeutronError": map[string]any{
				"type": ne.typ, "message": ne.message, "detail": "",
			}})
		}
		if body == nil {
			w.WriteHeader(status)
			return status
		}
		return writeJSON(w, status, body)
	})
}

// neutronError is an error answered as
// {"NeutronError": {"type", "message", "detail": ""}}, type being the name
// of the Python exception class (api_common.get_exception_data).
type neutronError struct {
	status       int
	typ, message string
}

func (e *neutronError) Error() string { return e.typ + ": " + e.message }

// nerr builds a neutronError with a formatted message.
func nerr(status int, typ, format string, args ...any) *neutronError {
	return &neutronError{status, typ, fmt.Sprintf(format, args...)}
}

// badRequest is neutron_lib's BadRequest: "Bad <resource> request: <msg>."
func badRequest(resource, format string, args ...any) *neutronError {
	return nerr(http.StatusBadRequest, "BadRequest", "Bad %s request: %s.", resource, fmt.Sprintf(format, args...))
}

// invalidInput is neutron_lib's InvalidInput.
func invalidInput(format string, args ...any) *neutronError {
	return nerr(http.StatusBadRequest, "InvalidInput", "Invalid input for operation: %s.", fmt.Sprintf(format, args...))
}

// httpBadRequest is webob's HTTPBadRequest with an explanation, as the API
// layer raises for malformed bodies and filters.
func httpBadRequest(format string, args ...any) *neutronError {
	return nerr(http.StatusBadRequest, "HTTPBadRequest", format, args...)
}

// policyDenied is the 403 of an attribute the member role may not set.
func policyDenied(rule string) *neutronError {
	return nerr(http.StatusForbidden, "PolicyNotAuthorized", "(rule:%s) is disallowed by policy", rule)
}

// attrs is a resource's body: attribute name -> raw JSON value.
type attrs map[string]json.RawMessage

// readBody decodes {"<resource>": {...}} and refuses attributes outside
// allowed with Neutron's "Unrecognized attribute(s)" (the API layer's
// verify_attributes).
func readBody(r *http.Request, resource string, allowed ...string) (attrs, error) {
	var doc map[string]json.RawMessage
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20)).Decode(&doc); err != nil {
		return nil, httpBadRequest("Malformed request body")
	}
	raw, ok := doc[resource]
	if !ok {
		return nil, httpBadRequest("Resource body required")
	}
	var a attrs
	if err := json.Unmarshal(raw, &a); err != nil || a == nil {
		return nil, httpBadRequest("Invalid format: %s", raw)
	}
	var extra []string
	for k := range a {
		known := false
		for _, al := range allowed {
			if k == al {
				known = true
				break
			}
		}
		if !known {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, httpBadRequest("Unrecognized attribute(s) '%s'", strings.Join(extra, ", "))
	}
	return a, nil
}

// decodeJSON decodes a body that is not wrapped in a resource key.
func decodeJSON(r *http.Request, dst any) error {
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20)).Decode(dst); err != nil {
		return httpBadRequest("Malformed request body")
	}
	return nil
}

// has reports whether the attribute was given (null included).
func (a attrs) has(k string) bool { _, ok := a[k]; return ok }

// null reports whether the attribute was given as null.
func (a attrs) null(k string) bool { v, ok := a[k]; return ok && string(v) == "null" }

// get decodes attribute k into dst when it is given and not null; a value
// of the wrong type is Neutron's "Invalid input for <k>" 400.
func (a attrs) get(k string, dst any) (bool, error) {
	v, ok := a[k]
	if !ok || string(v) == "null" {
		return false, nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return false, httpBadRequest("Invalid input for %s. Reason: '%s' is not a valid value.", k, strings.Trim(string(v), `"`))
	}
	return true, nil
}

// checkIfMatch enforces the If-Match: revision_number=N precondition of
// the revision-if-match extension (412 when the resource moved on).
func checkIfMatch(r *http.Request, current int) error {
	h := r.Header.Get("If-Match")
	if h == "" {
		return nil
	}
	for _, part := range strings.Split(h, ",") {
		part = strings.TrimSpace(part)
		if v, ok := strings.CutPrefix(part, "revision_number="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return badRequest("if-match", "If-Match header without revision_number=<int>")
			}
			if n != current {
				return nerr(http.StatusPreconditionFailed, "RevisionNumberConstraintFailed",
					"Constrained to %d, but current revision is %d", n, current)
			}
		}
	}
	return nil
}

// listQuery is the parsed query of a list request.
type listQuery struct {
	filters url.Values
	limit   int
	marker  string
	fields  []string
}

// parseList splits a list query into filters (refusing those not in
// filterable, as filter-validation does) and the paging parameters.
func parseList(r *http.Request, filterable ...string) (listQuery, error) {
	q := listQuery{filters: url.Values{}}
	var invalid []string
	for k, vs := range r.URL.Query() {
		switch k {
		case "limit":
			n, err := strconv.Atoi(vs[0])
			if err != nil || n < 0 {
				return q, badRequest("limit", "Limit must be an integer 0 or greater and not '%s'", vs[0])
			}
			q.limit = n
			continue
		case "marker":
			q.marker = vs[0]
			continue
		case "fields":
			q.fields = append(q.fields, vs...)
			continue
		case "sort_key", "sort_dir", "page_reverse":
			continue
		}
		ok := false
		for _, f := range filterable {
			if f == k {
				ok = true
				break
			}
		}
		if !ok {
			invalid = append(invalid, "'"+k+"'")
			continue
		}
		for _, v := range vs {
			if v != "" {
				q.filters.Add(k, v)
			}
		}
	}
	if len(invalid) > 0 {
		sort.Strings(invalid)
		return q, httpBadRequest("[%s] is invalid attribute for filtering", strings.Join(invalid, ", "))
	}
	return q, nil
}

// match reports whether a resource's answer passes the filters: every
// filter must match one of its values; tags (all of), tags-any (one of),
// not-tags and not-tags-any take comma-separated lists.
func (q listQuery) match(m map[string]any) bool {
	for k, vs := range q.filters {
		switch k {
		case "tags", "tags-any", "not-tags", "not-tags-any":
			have := map[string]bool{}
			for _, t := range m["tags"].([]string) {
				have[t] = true
			}
			var want []string
			for _, v := range vs {
				want = append(want, strings.Split(v, ",")...)
			}
			all, any := true, false
			for _, t := range want {
				all = all && have[t]
				any = any || have[t]
			}
			if (k == "tags" && !all) || (k == "tags-any" && !any) ||
				(k == "not-tags" && all) || (k == "not-tags-any" && any) {
				return false
			}
			continue
		}
		if !matchValue(m[k], vs) {
			return false
		}
	}
	return true
}

// matchValue compares an attribute with filter values as Neutron's query
// does after converting them: booleans accept true/false/1/0 in any case,
// lists match when they hold one of the values.
func matchValue(v any, want []string) bool {
	for _, w := range want {
		switch x := v.(type) {
		case string:
			if x == w {
				return true
			}
		case bool:
			if b, err := strconv.ParseBool(strings.ToLower(w)); err == nil && b == x {
				return true
			}
		case int:
			if strconv.Itoa(x) == w {
				return true
			}
		case *int:
			if x != nil && strconv.Itoa(*x) == w {
				return true
			}
		case []string:
			for _, e := range x {
				if e == w {
					return true
				}
			}
		case nil:
		default:
			if fmt.Sprint(x) == w {
				return true
			}
		}
	}
	return false
}

// page answers a list: the matching items in creation order, cut by
// limit and marker, with a "next" link when more remain (Neutron's
// native pagination) and only the asked fields.
func (s *Server) page(r *http.Request, coll string, q listQuery, items []map[string]any) map[string]any {
	var out []map[string]any
	for _, m := range items {
		if q.match(m) {
			out = append(out, m)
		}
	}
	if q.marker != "" {
		for i, m := range out {
			if m["id"] == q.marker {
				out = out[i+1:]
				break
			}
		}
	}
	doc := map[string]any{}
	if q.limit > 0 && len(out) > q.limit {
		out = out[:q.limit]
		v := r.URL.Query()
		v.Set("limit", strconv.Itoa(q.limit))
		v.Set("marker", out[len(out)-1]["id"].(string))
		doc[coll+"_links"] = []map[string]string{{"rel": "next", "href": s.url + r.URL.Path + "?" + v.Encode()}}
	}
	if len(q.fields) > 0 {
		for i, m := range out {
			cut := map[string]any{}
			for _, f := range q.fields {
				if v, ok := m[f]; ok {
					cut[f] = v
				}
			}
			out[i] = cut
		}
	}
	if out == nil {
		out = []map[string]any{}
	}
	doc[coll] = out
	return doc
}

// bySeq sorts resources in creation order.
func bySeq[T any](m map[string]T, seq func(T) int) []T {
	out := make([]T, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return seq(out[i]) < seq(out[j]) })
	return out
}
