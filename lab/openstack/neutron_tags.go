package openstack

import (
	"net/http"
	"strings"
)

// tagOp is one operation of the standard-attr-tag extension.
type tagOp int

const (
	tagList      tagOp = iota // GET .../tags: 200 {"tags"}
	tagReplace                // PUT .../tags {"tags"}: 200, the body back
	tagDeleteAll              // DELETE .../tags: 204
	tagCheck                  // GET .../tags/{tag}: 204, or 404 TagNotFound
	tagAdd                    // PUT .../tags/{tag}: 201 without a body
	tagDelete                 // DELETE .../tags/{tag}: 204, or 404 TagNotFound
)

// maxTags is the tagging extension's MAX_TAGS_COUNT; maxTagLen its
// MAX_TAG_LEN.
const (
	maxTags   = 50
	maxTagLen = 255
)

// taggable finds the standard attributes of a resource of a collection
// the caller sees.
func (s *Server) taggable(coll, id string) *std {
	switch coll {
	case "networks":
		if n := s.net.networks[id]; n != nil && s.netVisible(n) {
			return &n.std
		}
	case "subnets":
		if sn, err := s.subnetFor(id); err == nil {
			return &sn.std
		}
	case "ports":
		if p, err := s.portFor(id); err == nil {
			return &p.std
		}
	case "routers":
		if rt, err := s.routerFor(id); err == nil {
			return &rt.std
		}
	case "floatingips":
		if f, err := s.fipFor(id); err == nil {
			return &f.std
		}
	case "security-groups":
		if g, err := s.groupFor(id); err == nil {
			return &g.std
		}
	}
	return nil
}

// tagsHandler serves one tag operation on a collection.
func (s *Server) tagsHandler(coll string, op tagOp) neutronHandler {
	objType := strings.ReplaceAll(coll, "-", "_")
	return func(r *http.Request) (int, any, error) {
		id, tag := r.PathValue("id"), r.PathValue("tag")
		if (op == tagCheck || op == tagAdd || op == tagDelete) && len(tag) > maxTagLen {
			return 0, nil, invalidInput("'%s' exceeds maximum length of %d", tag, maxTagLen)
		}
		var body struct {
			Tags *[]string `json:"tags"`
		}
		if op == tagReplace {
			if err := decodeJSON(r, &body); err != nil || body.Tags == nil {
				return 0, nil, invalidInput("Invalid tags body")
			}
			seen := map[string]bool{}
			for _, t := range *body.Tags {
				if len(t) > maxTagLen {
					return 0, nil, invalidInput("'%s' exceeds maximum length of %d", t, maxTagLen)
				}
				if seen[t] {
					return 0, nil, invalidInput("Duplicate items in the list: '%s'", t)
				}
				seen[t] = true
			}
		}
		a := s.taggable(coll, id)
		if a == nil {
			return 0, nil, nerr(http.StatusNotFound, "TagResourceNotFound", "Resource %s %s could not be found.", objType, id)
		}
		if op != tagList && op != tagCheck && !s.visible(a.project) {
			action := map[tagOp]string{tagReplace: "update", tagAdd: "update", tagDelete: "delete", tagDeleteAll: "delete"}[op]
			member := strings.TrimSuffix(objType, "s") // networks -> network
			return 0, nil, policyDenied(action + "_" + member + ":tags")
		}
		has := func(t string) bool {
			for _, x := range a.tags {
				if x == t {
					return true
				}
			}
			return false
		}
		switch op {
		case tagList:
			return http.StatusOK, map[string]any{"tags": append([]string{}, a.tags...)}, nil
		case tagCheck:
			if !has(tag) {
				return 0, nil, nerr(http.StatusNotFound, "TagNotFound", "Tag %s could not be found.", tag)
			}
			return http.StatusNoContent, nil, nil
		case tagReplace:
			if len(*body.Tags) > maxTags {
				return 0, nil, badRequest(objType, "The number of tags exceed the per-resource limit of %d", maxTags)
			}
			a.tags = uniqueSorted(*body.Tags)
			s.touch(a)
			return http.StatusOK, map[string]any{"tags": *body.Tags}, nil
		case tagAdd:
			if !has(tag) {
				if len(a.tags)+1 > maxTags {
					return 0, nil, badRequest(objType, "The number of tags exceed the per-resource limit of %d", maxTags)
				}
				a.tags = uniqueSorted(append(a.tags, tag))
				s.touch(a)
			}
			return http.StatusCreated, nil, nil
		case tagDelete:
			if !has(tag) {
				return 0, nil, nerr(http.StatusNotFound, "TagNotFound", "Tag %s could not be found.", tag)
			}
			var kept []string
			for _, x := range a.tags {
				if x != tag {
					kept = append(kept, x)
				}
			}
			a.tags = kept
			s.touch(a)
			return http.StatusNoContent, nil, nil
		default: // tagDeleteAll
			a.tags = nil
			s.touch(a)
			return http.StatusNoContent, nil, nil
		}
	}
}
