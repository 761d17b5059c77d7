package openstack

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Nova's microversion range: 2.1 up to the maximum of the 2025.1 (Epoxy)
// release (nova/api/openstack/api_version_request.py).
var (
	novaMinVersion = microversion{2, 1}
	novaMaxVersion = microversion{2, 100}
)

// computePrefix is where Nova lives under the base URL.
const computePrefix = "/compute/v2.1"

// microversion is a Nova API microversion, major.minor.
type microversion struct{ major, minor int }

func (v microversion) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

// atLeast reports whether v >= major.minor.
func (v microversion) atLeast(major, minor int) bool {
	return v.major > major || (v.major == major && v.minor >= minor)
}

var microversionRE = regexp.MustCompile(`^([1-9]\d*)\.([1-9]\d*|0)$`)

type mvKey struct{}

// requestVersion is the microversion a compute handler runs at.
func requestVersion(r *http.Request) microversion {
	if v, ok := r.Context().Value(mvKey{}).(microversion); ok {
		return v
	}
	return novaMinVersion
}

// computeRoutes registers Nova's operations under /compute/v2.1.
func (s *Server) computeRoutes() {
	s.nova = newNovaState()
	s.handle("GET /compute", "compute.versions", s.computeVersions)
	s.handle("GET /compute/{$}", "compute.versions", s.computeVersions)
	s.handle("GET "+computePrefix, "compute.version", s.computeVersion)
	s.handle("GET "+computePrefix+"/{$}", "compute.version", s.computeVersion)

	api := func(pattern, name string, fn func(w http.ResponseWriter, r *http.Request) int) {
		method, path, _ := strings.Cut(pattern, " ")
		full := method + " " + computePrefix + path
		s.handle(full, name, s.novaAPI(withPathValues(full, fn)))
	}
	api("GET /flavors", "compute.flavor.list", s.listFlavors)
	api("GET /flavors/detail", "compute.flavor.list", s.listFlavors)
	api("GET /flavors/{id}", "compute.flavor.get", s.getFlavor)
	api("GET /os-availability-zone", "compute.availability_zone.list", s.listAvailabilityZones)
	api("POST /servers", "compute.server.create", s.createServer)
	api("GET /servers", "compute.server.list", s.listServers)
	api("GET /servers/detail", "compute.server.list", s.listServers)
	api("GET /servers/{id}", "compute.server.get", s.getServer)
	api("DELETE /servers/{id}", "compute.server.delete", s.deleteServer)
	api("POST /servers/{id}/action", "compute.server.action", s.serverAction)
	api("GET /servers/{id}/tags", "compute.server.tag.list", s.listServerTags)
	api("PUT /servers/{id}/tags", "compute.server.tag.replace", s.replaceServerTags)
	api("DELETE /servers/{id}/tags", "compute.server.tag.clear", s.clearServerTags)
	api("GET /servers/{id}/tags/{tag}", "compute.server.tag.check", s.checkServerTag)
	api("PUT /servers/{id}/tags/{tag}", "compute.server.tag.add", s.addServerTag)
	api("DELETE /servers/{id}/tags/{tag}", "compute.server.tag.delete", s.deleteServerTag)
}

// novaAPI wraps a compute handler the way Nova's pipeline does: the token
// is checked first (keystonemiddleware), then the microversion is read
// from OpenStack-API-Version ("compute 2.x") or X-OpenStack-Nova-API-Version
// and echoed in both headers of the answer, with request IDs.
func (s *Server) novaAPI(fn func(w http.ResponseWriter, r *http.Request) int) func(w http.ResponseWriter, r *http.Request) int {
	return func(w http.ResponseWriter, r *http.Request) int {
		if !s.authorized(r) {
			return s.unauthorized(w)
		}
		reqID := "req-" + uuid.NewString()
		w.Header().Set("X-Openstack-Request-Id", reqID)
		w.Header().Set("X-Compute-Request-Id", reqID)
		raw := requestedMicroversion(r.Header)
		v := novaMinVersion
		switch {
		case raw == "":
		case raw == "latest":
			v = novaMaxVersion
		default:
			m := microversionRE.FindStringSubmatch(raw)
			if m == nil {
				return novaFault(w, http.StatusBadRequest, fmt.Sprintf(
					"API Version String %s is of invalid format. Must be of format MajorNum.MinorNum.", raw))
			}
			v.major, _ = strconv.Atoi(m[1])
			v.minor, _ = strconv.Atoi(m[2])
			setVersionHeaders(w, v)
			if !v.atLeast(novaMinVersion.major, novaMinVersion.minor) || novaMaxVersion.less(v) {
				return novaFault(w, http.StatusNotAcceptable, fmt.Sprintf(
					"Version %s is not supported by the API. Minimum is %s and maximum is %s.", v, novaMinVersion, novaMaxVersion))
			}
		}
		setVersionHeaders(w, v)
		return fn(w, r.WithContext(context.WithValue(r.Context(), mvKey{}, v)))
	}
}

func (v microversion) less(o microversion) bool {
	return v.major < o.major || (v.major == o.major && v.minor < o.minor)
}

// requestedMicroversion reads the version as microversion-parse does: the
// "compute" entry of OpenStack-API-Version wins over the legacy header.
func requestedMicroversion(h http.Header) string {
	for _, line := range h.Values("OpenStack-API-Version") {
		for _, item := range strings.Split(line, ",") {
			fields := strings.Fields(item)
			if len(fields) == 2 && strings.EqualFold(fields[0], "compute") {
				return strings.ToLower(fields[1])
			}
		}
	}
	return strings.ToLower(strings.TrimSpace(h.Get("X-OpenStack-Nova-API-Version")))
}

func setVersionHeaders(w http.ResponseWriter, v microversion) {
	h := w.Header()
	h.Set("OpenStack-API-Version", "compute "+v.String())
	h.Set("X-OpenStack-Nova-API-Version", v.String())
	h.Del("Vary")
	h.Add("Vary", "OpenStack-API-Version")
	h.Add("Vary", "X-OpenStack-Nova-API-Version")
}

// novaFaultNames are the keys of Nova's fault bodies by status
// (nova/api/openstack/wsgi.py Fault); other statuses use computeFault.
var novaFaultNames = map[int]string{
	400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound",
	405: "badMethod", 409: "conflictingRequest", 413: "overLimit", 415: "badMediaType",
	429: "overLimit", 501: "notImplemented", 503: "serviceUnavailable",
}

// novaFault answers Nova's error body {"<name>": {"code", "message"}}.
func novaFault(w http.ResponseWriter, status int, message string) int {
	name, ok := novaFaultNames[status]
	if !ok {
		name = "computeFault"
	}
	return writeJSON(w, status, map[string]any{name: map[string]any{"code": status, "message": message}})
}

// computeVersionDoc is one entry of Nova's version documents
// (nova/api/openstack/compute/versions.py VERSIONS).
func (s *Server) computeVersionDoc(id string) map[string]any {
	doc := map[string]any{
		"id": "v2.0", "status": "SUPPORTED", "version": "", "min_version": "",
		"updated": "2011-01-21T11:33:21Z",
	}
	media := "application/vnd.openstack.compute+json;version=2"
	if id == "v2.1" {
		doc = map[string]any{
			"id": "v2.1", "status": "CURRENT", "version": novaMaxVersion.String(),
			"min_version": novaMinVersion.String(), "updated": "2013-07-23T11:33:21Z",
		}
		media = "application/vnd.openstack.compute+json;version=2.1"
	}
	doc["media-types"] = []map[string]string{{"base": "application/json", "type": media}}
	return doc
}

// computeVersions answers GET /compute/: both API versions, 200, no token
// needed (the versions app is outside keystonemiddleware).
func (s *Server) computeVersions(w http.ResponseWriter, _ *http.Request) int {
	var out []map[string]any
	for _, id := range []string{"v2.0", "v2.1"} {
		doc := s.computeVersionDoc(id)
		href := s.url + "/compute/v2/"
		if id == "v2.1" {
			href = s.url + "/compute/v2.1/"
		}
		doc["links"] = []map[string]string{{"rel": "self", "href": href}}
		delete(doc, "media-types")
		out = append(out, doc)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"versions": out})
}

// computeVersion answers GET /compute/v2.1/.
func (s *Server) computeVersion(w http.ResponseWriter, _ *http.Request) int {
	doc := s.computeVersionDoc("v2.1")
	doc["links"] = []map[string]string{
		{"rel": "self", "href": s.url + computePrefix + "/"},
		{"rel": "describedby", "type": "text/html", "href": "http://docs.openstack.org/"},
	}
	return writeJSON(w, http.StatusOK, map[string]any{"version": doc})
}

// computeLinks are Nova's self and bookmark links of a resource.
func (s *Server) computeLinks(collection, id string) []map[string]string {
	return []map[string]string{
		{"rel": "self", "href": s.url + computePrefix + "/" + collection + "/" + id},
		{"rel": "bookmark", "href": s.url + "/compute/" + collection + "/" + id},
	}
}
