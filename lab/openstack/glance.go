package openstack

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"strings"
)

// imagePrefix is where Glance lives under the base URL.
const imagePrefix = "/image"

// glanceImportMethods is the lab deployment's enabled_import_methods:
// glance-direct alone (the emulator downloads nothing).
var glanceImportMethods = []string{"glance-direct"}

// imageRoutes registers Glance's operations under /image.
func (s *Server) imageRoutes() {
	s.glance = &glanceState{images: map[string]*glanceImage{}}
	s.handle("GET /image", "image.versions", s.imageVersions)
	s.handle("GET /image/{$}", "image.versions", s.imageVersions)
	s.handle("GET /image/versions", "image.versions", s.imageVersions)

	api := func(pattern, name string, fn func(w http.ResponseWriter, r *http.Request) int) {
		method, path, _ := strings.Cut(pattern, " ")
		full := method + " " + imagePrefix + "/v2" + path
		s.handle(full, name, s.glanceAPI(withPathValues(full, fn)))
	}
	api("POST /images", "image.image.create", s.createImage)
	api("GET /images", "image.image.list", s.listImages)
	api("GET /images/{id}", "image.image.get", s.getImage)
	api("PATCH /images/{id}", "image.image.update", s.updateImage)
	api("DELETE /images/{id}", "image.image.delete", s.deleteImage)
	api("PUT /images/{id}/file", "image.image.upload", s.uploadImage)
	api("GET /images/{id}/file", "image.image.download", s.downloadImage)
	api("PUT /images/{id}/stage", "image.image.stage", s.stageImage)
	api("POST /images/{id}/import", "image.image.import", s.importImage)
	api("GET /info/import", "image.info.import", s.importInfo)
}

// glanceAPI checks the token as keystonemiddleware does in Glance's
// pipeline (after version negotiation) and adds a request ID.
func (s *Server) glanceAPI(fn func(w http.ResponseWriter, r *http.Request) int) func(w http.ResponseWriter, r *http.Request) int {
	return func(w http.ResponseWriter, r *http.Request) int {
		if !s.authorized(r) {
			return s.unauthorized(w)
		}
		w.Header().Set("X-Openstack-Request-Id", "req-"+newUUID())
		return fn(w, r)
	}
}

// imageVersions answers GET /image/ (300 Multiple Choices) and
// /image/versions (200), without a token: Glance's version negotiation
// runs before authentication. The list is glance/api/versions.py's for a
// deployment with an image cache and a single store (2025.1).
func (s *Server) imageVersions(w http.ResponseWriter, r *http.Request) int {
	status := http.StatusMultipleChoices
	if strings.HasSuffix(r.URL.Path, "/versions") {
		status = http.StatusOK
	}
	var out []map[string]any
	for _, v := range []struct{ id, status string }{
		{"2.16", "SUPPORTED"}, {"2.15", "SUPPORTED"}, {"2.14", "SUPPORTED"}, {"2.9", "SUPPORTED"},
		{"2.17", "CURRENT"}, {"2.7", "SUPPORTED"}, {"2.6", "SUPPORTED"}, {"2.5", "SUPPORTED"},
		{"2.4", "SUPPORTED"}, {"2.3", "SUPPORTED"}, {"2.2", "SUPPORTED"}, {"2.1", "SUPPORTED"},
		{"2.0", "SUPPORTED"},
	} {
		out = append(out, map[string]any{
			"id": "v" + v.id, "status": v.status,
			"links": []map[string]string{{"rel": "self", "href": s.url + imagePrefix + "/v2/"}},
		})
	}
	return writeJSON(w, status, map[string]any{"versions": out})
}

// importInfo answers GET /v2/info/import.
func (s *Server) importInfo(w http.ResponseWriter, _ *http.Request) int {
	return writeJSON(w, http.StatusOK, map[string]any{"import-methods": map[string]any{
		"description": "Import methods available.", "type": "array", "value": glanceImportMethods,
	}})
}

// glanceError answers an error the way Glance's webob exceptions do: the
// body follows the request's Accept header (JSON for application/json,
// HTML for text/html, plain text otherwise), built from webob's templates
// with the message as the explanation.
func glanceError(w http.ResponseWriter, r *http.Request, status int, message string) int {
	statusLine := fmt.Sprintf("%d %s", status, http.StatusText(status))
	body := message + "<br /><br />\n\n\n"
	var ct, out string
	switch acceptOffer(r.Header.Get("Accept")) {
	case "text/html":
		ct = "text/html"
		out = "<html>\n <head>\n  <title>" + statusLine + "</title>\n </head>\n <body>\n  <h1>" + statusLine +
			"</h1>\n  " + strings.ReplaceAll(html.EscapeString(message), "&#39;", "&#x27;") + "<br /><br />\n\n\n\n </body>\n</html>"
	case "application/json":
		ct = "application/json"
		b, _ := json.Marshal(map[string]string{"message": body, "code": statusLine, "title": http.StatusText(status)})
		out = string(b)
	default:
		ct = "text/plain"
		out = statusLine + "\n\n" + message + "\n\n   "
	}
	w.Header().Set("Content-Type", ct+"; charset=UTF-8")
	w.Header().Set("Content-Length", fmt.Sprint(len(out)))
	w.WriteHeader(status)
	_, _ = w.Write([]byte(out))
	return status
}

// acceptOffer picks text/html or application/json from an Accept header
// as webob's acceptable_offers does (first by quality, then by the order
// offered), or "" when neither is acceptable. A request without Accept has
// none (webob parses the missing header as an empty one).
func acceptOffer(accept string) string {
	best, bestQ := "", 0.0
	for _, offer := range []string{"text/html", "application/json"} {
		q := 0.0
		for _, part := range strings.Split(accept, ",") {
			fields := strings.Split(part, ";")
			mt := strings.ToLower(strings.TrimSpace(fields[0]))
			pq := 1.0
			for _, p := range fields[1:] {
				if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && k == "q" {
					_, _ = fmt.Sscanf(v, "%g", &pq)
				}
			}
			typ, _, _ := strings.Cut(offer, "/")
			if mt == offer || mt == "*/*" || mt == typ+"/*" {
				q = max(q, pq)
			}
		}
		if q > bestQ {
			best, bestQ = offer, q
		}
	}
	return best
}
