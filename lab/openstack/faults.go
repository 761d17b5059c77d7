package openstack

import (
	"net/http"
	"strings"
)

// writeInjected answers an injected failure (FailNext) with the error body
// of the service the operation belongs to.
func writeInjected(w http.ResponseWriter, r *http.Request, op string, status int) int {
	switch {
	case strings.HasPrefix(op, "compute."):
		return novaFault(w, status, "injected failure")
	case strings.HasPrefix(op, "image."):
		return glanceError(w, r, status, "injected failure")
	}
	return writeError(w, status, "injected failure", http.StatusText(status))
}

// withPathValues sets the request's path values from pattern's {name}
// segments before calling fn: Server.ServeHTTP picks the handler with
// ServeMux.Handler, which matches the pattern but does not fill them.
func withPathValues(pattern string, fn func(w http.ResponseWriter, r *http.Request) int) func(w http.ResponseWriter, r *http.Request) int {
	_, path, _ := strings.Cut(pattern, " ")
	names := strings.Split(path, "/")
	return func(w http.ResponseWriter, r *http.Request) int {
		segs := strings.Split(r.URL.Path, "/")
		for i, n := range names {
			if strings.HasPrefix(n, "{") && strings.HasSuffix(n, "}") && n != "{$}" && i < len(segs) {
				r.SetPathValue(strings.Trim(n, "{}"), segs[i])
			}
		}
		return fn(w, r)
	}
}
