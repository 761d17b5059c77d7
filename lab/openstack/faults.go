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
