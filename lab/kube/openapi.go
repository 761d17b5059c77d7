package kube

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The OpenAPI v3 documents are served only as far as kubectl's and Helm's
// resource builders read them before sending objects: they ask whether
// the server validates fields itself (a fieldValidation query parameter
// on the kind's PATCH operation) and, when it does, skip client-side
// schema validation. Without a document the check fails and so does Helm
// (its install builds its objects with validation on). The documents here
// list, for every served kind, its PATCH operation with that parameter
// and nothing else: no schemas, so nothing can validate against them.
// The emulator accepts fieldValidation and ignores it.

// openAPIPath is the path of a group version's document.
func openAPIPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// served returns every served resource, built-in and custom.
func (s *Server) served() []*resource {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(append([]*resource{}, resources...), s.st.custom...)
}

// openAPI returns the OpenAPI v3 document for a path under /openapi/v3,
// or nil.
func (s *Server) openAPI(path string) any {
	rest := strings.Trim(strings.TrimPrefix(path, "/openapi/v3"), "/")
	rs := s.served()
	if rest == "" {
		paths := map[string]any{}
		for _, r := range rs {
			p := openAPIPath(r.gv)
			paths[p] = map[string]any{"serverRelativeURL": "/openapi/v3/" + p}
		}
		return map[string]any{"paths": paths}
	}
	paths := map[string]any{}
	for _, r := range rs {
		if openAPIPath(r.gv) != rest {
			continue
		}
		item := "/" + rest + "/" + r.name + "/{name}"
		if r.namespaced {
			item = "/" + rest + "/namespaces/{namespace}/" + r.name + "/{name}"
		}
		paths[item] = map[string]any{"patch": map[string]any{
			"x-kubernetes-group-version-kind": map[string]any{"group": r.gv.Group, "version": r.gv.Version, "kind": r.kind},
			"parameters": []any{map[string]any{
				"name": "fieldValidation", "in": "query", "schema": map[string]any{"type": "string", "uniqueItems": true},
			}},
		}}
	}
	if len(paths) == 0 {
		return nil
	}
	return map[string]any{
		"openapi": "3.0.0",
		"info":    map[string]any{"title": "Kubernetes", "version": s.Version()},
		"paths":   paths,
	}
}
