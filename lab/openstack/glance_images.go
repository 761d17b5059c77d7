package openstack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// glanceState is Glance's part of the Server. Guarded by Server.mu.
type glanceState struct {
	images map[string]*glanceImage
}

// glanceImage is an image and its data.
type glanceImage struct {
	id, name                    string
	diskFormat, containerFormat string
	visibility                  string
	status                      string
	size, virtualSize           int64
	hasSize                     bool
	checksum, hashValue         string
	protected, hidden           bool
	minDisk, minRAM             int
	tags                        []string
	props                       map[string]any
	created, updated            time.Time
	data, staged                []byte
}

// Glance's defaults (glance/common/config.py [image_format]).
var (
	glanceDiskFormats      = []string{"ami", "ari", "aki", "vhd", "vhdx", "vmdk", "raw", "qcow2", "vdi", "iso", "ploop"}
	glanceContainerFormats = []string{"ami", "ari", "aki", "bare", "ovf", "ova", "docker", "compressed"}
	glanceVisibilities     = []string{"public", "private", "shared", "community"}
)

// glanceTime is timeutils.isotime, the form of created_at and updated_at.
const glanceTime = "2006-01-02T15:04:05Z"

// imageBody is an image as Glance's ResponseSerializer shows it.
func (s *Server) imageBody(img *glanceImage) map[string]any {
	b := map[string]any{}
	for k, v := range img.props {
		b[k] = v
	}
	str := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	b["name"] = str(img.name)
	b["disk_format"] = str(img.diskFormat)
	b["container_format"] = str(img.containerFormat)
	b["visibility"] = img.visibility
	b["size"], b["virtual_size"] = nil, nil
	if img.hasSize {
		b["size"], b["virtual_size"] = img.size, img.virtualSize
	}
	b["status"] = img.status
	b["checksum"] = str(img.checksum)
	b["protected"] = img.protected
	b["min_ram"] = img.minRAM
	b["min_disk"] = img.minDisk
	b["owner"] = s.opts.ProjectID
	b["os_hidden"] = img.hidden
	b["os_hash_algo"], b["os_hash_value"] = nil, nil
	if img.hashValue != "" {
		b["os_hash_algo"], b["os_hash_value"] = "sha512", img.hashValue
	}
	b["id"] = img.id
	b["created_at"] = img.created.Format(glanceTime)
	b["updated_at"] = img.updated.Format(glanceTime)
	b["tags"] = append([]string{}, img.tags...)
	b["self"] = "/v2/images/" + img.id
	b["file"] = "/v2/images/" + img.id + "/file"
	b["schema"] = "/v2/schemas/image"
	return b
}

// imageProperties is the "properties" of a server's image at Nova 2.98:
// the image's base properties Nova keeps and its extra properties. The
// caller holds s.mu.
func (s *Server) imageProperties(id string) map[string]any {
	out := map[string]any{}
	img := s.glance.images[id]
	if img == nil {
		return out
	}
	for k, v := range img.props {
		out[k] = fmt.Sprint(v)
	}
	out["min_disk"] = strconv.Itoa(img.minDisk)
	out["min_ram"] = strconv.Itoa(img.minRAM)
	if img.diskFormat != "" {
		out["disk_format"] = img.diskFormat
	}
	if img.containerFormat != "" {
		out["container_format"] = img.containerFormat
	}
	return out
}

// Glance's property classes (glance/api/v2/images.py RequestDeserializer,
// glance/domain ImageFactory).
var (
	imageDisallowed = []string{"direct_url", "self", "file", "schema", "stores"}
	imageReadonly   = []string{"created_at", "updated_at", "status", "checksum", "os_hash_algo", "os_hash_value", "size", "virtual_size"}
	imageReserved   = []string{"owner", "location", "locations", "deleted", "deleted_at"}
)

// schemaError is InvalidObject's message for the image schema, with the
// first line of jsonschema's text.
func schemaError(reason string) string {
	return "Provided object does not match schema 'image': " + reason
}

// createImage answers POST /v2/images: 201 with the queued image and its
// Location, OpenStack-image-import-methods header.
func (s *Server) createImage(w http.ResponseWriter, r *http.Request) int {
	var body map[string]any
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil || body == nil {
		return glanceError(w, r, http.StatusBadRequest, "Body expected in request.")
	}
	for _, k := range imageDisallowed {
		if _, ok := body[k]; ok {
			return glanceError(w, r, http.StatusForbidden, "Attribute '"+k+"' is read-only.")
		}
	}
	now := s.now().UTC()
	img := &glanceImage{
		id: newUUID(), visibility: "shared", status: "queued", created: now, updated: now,
		tags: []string{}, props: map[string]any{},
	}
	for k, v := range body {
		if msg, status := s.setImageField(img, k, v, true); msg != "" {
			return glanceError(w, r, status, msg)
		}
	}
	s.mu.Lock()
	if _, exists := s.glance.images[img.id]; exists {
		s.mu.Unlock()
		return glanceError(w, r, http.StatusConflict, "An image with identifier "+img.id+" already exists")
	}
	s.glance.images[img.id] = img
	out := s.imageBody(img)
	s.mu.Unlock()
	// Glance sets Location to /v2/images/<id>; webob makes it absolute
	// against the request URL, which drops the /image prefix.
	w.Header().Set("Location", s.url+"/v2/images/"+img.id)
	w.Header().Set("OpenStack-image-import-methods", strings.Join(glanceImportMethods, ","))
	return writeJSON(w, http.StatusCreated, out)
}

// setImageField sets one property of a created or patched image as the
// image schema and Glance's property classes allow; it returns Glance's
// message and status on refusal.
func (s *Server) setImageField(img *glanceImage, k string, v any, creating bool) (string, int) {
	str, isStr := v.(string)
	enum := func(allowed []string) (string, int) {
		if !isStr || !contains(allowed, str) {
			return schemaError(fmt.Sprintf("%s is not one of %s", pyAny(v), pyList(allowed))), http.StatusBadRequest
		}
		return "", 0
	}
	nonNeg := func() (int, string, int) {
		n, ok := v.(json.Number)
		i, err := strconv.Atoi(string(n))
		if !ok || err != nil {
			return 0, schemaError(fmt.Sprintf("%s is not of type 'integer'", pyAny(v))), http.StatusBadRequest
		}
		if i < 0 {
			return 0, schemaError(fmt.Sprintf("%d is less than the minimum of 0", i)), http.StatusBadRequest
		}
		return i, "", 0
	}
	switch k {
	case "id":
		if !creating {
			return "Attribute 'id' is read-only.", http.StatusForbidden
		}
		if !isStr || !isUUID(str) {
			return schemaError(fmt.Sprintf("%s does not match '^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$'", pyAny(v))), http.StatusBadRequest
		}
		img.id = str
	case "name":
		if v == nil {
			img.name = ""
			return "", 0
		}
		if !isStr || len([]rune(str)) > 255 {
			return schemaError(fmt.Sprintf("%s is too long", pyAny(v))), http.StatusBadRequest
		}
		img.name = str
	case "disk_format":
		if v == nil {
			img.diskFormat = ""
			return "", 0
		}
		if msg, st := enum(glanceDiskFormats); msg != "" {
			return msg, st
		}
		img.diskFormat = str
	case "container_format":
		if v == nil {
			img.containerFormat = ""
			return "", 0
		}
		if msg, st := enum(glanceContainerFormats); msg != "" {
			return msg, st
		}
		img.containerFormat = str
	case "visibility":
		if msg, st := enum(glanceVisibilities); msg != "" {
			return msg, st
		}
		img.visibility = str
	case "min_disk", "min_ram":
		n, msg, st := nonNeg()
		if msg != "" {
			return msg, st
		}
		if k == "min_disk" {
			img.minDisk = n
		} else {
			img.minRAM = n
		}
	case "protected", "os_hidden":
		b, ok := v.(bool)
		if !ok {
			return schemaError(fmt.Sprintf("%s is not of type 'boolean'", pyAny(v))), http.StatusBadRequest
		}
		if k == "protected" {
			img.protected = b
		} else {
			img.hidden = b
		}
	case "tags":
		list, ok := v.([]any)
		if !ok {
			return schemaError(fmt.Sprintf("%s is not of type 'array'", pyAny(v))), http.StatusBadRequest
		}
		img.tags = []string{}
		for _, t := range list {
			ts, ok := t.(string)
			if !ok {
				return schemaError(fmt.Sprintf("%s is not of type 'string'", pyAny(t))), http.StatusBadRequest
			}
			if !contains(img.tags, ts) {
				img.tags = append(img.tags, ts)
			}
		}
	default:
		if contains(imageReadonly, k) {
			return "Attribute '" + k + "' is read-only.", http.StatusForbidden
		}
		if contains(imageReserved, k) || strings.HasPrefix(k, "os_glance") {
			return "Attribute '" + k + "' is reserved.", http.StatusForbidden
		}
		if len(k) > 255 {
			return "Custom property should not be greater than 255 characters.", http.StatusBadRequest
		}
		if n, ok := v.(json.Number); ok {
			v = n.String()
		}
		img.props[k] = v
	}
	return "", 0
}

// pyAny is Python's repr of a decoded JSON value, for schema messages.
func pyAny(v any) string {
	switch t := v.(type) {
	case string:
		return pyRepr(t)
	case nil:
		return "None"
	case bool:
		if t {
			return "True"
		}
		return "False"
	case json.Number:
		return t.String()
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// lookupImage finds an image or answers Glance's 404. The caller holds
// s.mu.
func (s *Server) lookupImage(w http.ResponseWriter, r *http.Request, id string) (*glanceImage, int) {
	img := s.glance.images[id]
	if img == nil {
		return nil, glanceError(w, r, http.StatusNotFound, "No image found with ID "+id)
	}
	return img, 0
}

// getImage answers GET /v2/images/{id}.
func (s *Server) getImage(w http.ResponseWriter, r *http.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, code := s.lookupImage(w, r, r.PathValue("id"))
	if img == nil {
		return code
	}
	return writeJSON(w, http.StatusOK, s.imageBody(img))
}

// deleteImage answers DELETE /v2/images/{id}: 204, 403 for a protected
// image, 404 "Failed to find image <id> to delete".
func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) int {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	img := s.glance.images[id]
	if img == nil {
		return glanceError(w, r, http.StatusNotFound, "Failed to find image "+id+" to delete")
	}
	if img.protected {
		return glanceError(w, r, http.StatusForbidden, "Image "+id+" is protected and cannot be deleted.")
	}
	delete(s.glance.images, id)
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// listImages answers GET /v2/images: newest first (created_at desc, then
// id desc), filters name, status, visibility, tag (repeatable, all),
// os_hidden (default false), disk_format, container_format, any other
// parameter as an extra property; limit (default 25, at most 1000) and
// marker, with "next" when a page is full, as Glance builds it.
func (s *Server) listImages(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	get := func(k string) (string, bool) {
		vals, ok := q[k]
		if !ok || len(vals) == 0 {
			return "", false
		}
		return vals[len(vals)-1], true
	}
	limit := 25
	if l, ok := get("limit"); ok {
		n, err := strconv.Atoi(l)
		if err != nil {
			return glanceError(w, r, http.StatusBadRequest, "limit param must be an integer")
		}
		if n < 0 {
			return glanceError(w, r, http.StatusBadRequest, "limit param must be positive")
		}
		limit = min(n, 1000)
	}
	if vis, ok := get("visibility"); ok && vis != "" && !contains(append([]string{"all"}, glanceVisibilities...), vis) {
		return glanceError(w, r, http.StatusBadRequest, "Invalid visibility value: "+vis)
	}
	hidden := "false"
	if h, ok := get("os_hidden"); ok {
		hidden = strings.ToLower(h)
		if hidden != "true" && hidden != "false" {
			return glanceError(w, r, http.StatusBadRequest, "Invalid value '"+h+"' for 'os_hidden' filter. Valid values are 'true' or 'false'.")
		}
	}
	var tags []string
	for _, t := range q["tag"] {
		tags = append(tags, strings.TrimSpace(t))
	}
	marker, hasMarker := get("marker")

	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*glanceImage
	for _, img := range s.glance.images {
		all = append(all, img)
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].created.Equal(all[j].created) {
			return all[i].created.After(all[j].created)
		}
		return all[i].id > all[j].id
	})
	var matched []*glanceImage
	for _, img := range all {
		if img.hidden != (hidden == "true") {
			continue
		}
		ok := true
		for k, vals := range q {
			val := vals[len(vals)-1]
			switch k {
			case "limit", "marker", "tag", "os_hidden", "sort", "sort_key", "sort_dir", "member_status":
			case "name":
				ok = ok && img.name == val
			case "status":
				ok = ok && img.status == val
			case "visibility":
				ok = ok && (val == "all" || img.visibility == val)
			case "disk_format":
				ok = ok && img.diskFormat == val
			case "container_format":
				ok = ok && img.containerFormat == val
			case "id":
				ok = ok && img.id == val
			case "owner":
				// Every image here is the one project's (see imageBody).
				ok = ok && s.opts.ProjectID == val
			default:
				ok = ok && fmt.Sprint(img.props[k]) == val && img.props[k] != nil
			}
		}
		for _, t := range tags {
			ok = ok && contains(img.tags, t)
		}
		if ok {
			matched = append(matched, img)
		}
	}
	if hasMarker {
		at := -1
		for i, img := range all {
			if img.id == marker {
				at = i
			}
		}
		if at < 0 {
			return glanceError(w, r, http.StatusBadRequest, "No image found with ID "+marker)
		}
		markerImg := all[at]
		var rest []*glanceImage
		for _, img := range matched {
			if img.created.Before(markerImg.created) || (img.created.Equal(markerImg.created) && img.id < markerImg.id) {
				rest = append(rest, img)
			}
		}
		matched = rest
	}
	if len(matched) > limit {
		matched = matched[:limit]
	}
	out := []map[string]any{}
	for _, img := range matched {
		out = append(out, s.imageBody(img))
	}
	// The links keep one value per parameter (Python's dict of the query)
	// in the order of first appearance.
	params := url.Values{}
	var order []string
	for _, kv := range strings.Split(r.URL.RawQuery, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if k, err := url.QueryUnescape(k); err == nil && k != "" && k != "marker" && !contains(order, k) {
			order = append(order, k)
			params.Set(k, q[k][len(q[k])-1])
		}
	}
	encode := func(extra ...string) string {
		var parts []string
		for _, k := range order {
			parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(params.Get(k)))
		}
		if len(extra) == 2 {
			parts = append(parts, extra[0]+"="+url.QueryEscape(extra[1]))
		}
		return strings.Join(parts, "&")
	}
	body := map[string]any{"images": out, "first": "/v2/images", "schema": "/v2/schemas/images"}
	if q := encode(); q != "" {
		body["first"] = "/v2/images?" + q
	}
	if len(matched) != 0 && len(matched) == limit {
		body["next"] = "/v2/images?" + encode("marker", matched[len(matched)-1].id)
	}
	return writeJSON(w, http.StatusOK, body)
}

// updateImage answers PATCH /v2/images/{id} with a JSON patch
// (application/openstack-images-v2.1-json-patch): add, replace and remove
// of top-level properties.
func (s *Server) updateImage(w http.ResponseWriter, r *http.Request) int {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	ct = strings.TrimSpace(ct)
	if ct != "application/openstack-images-v2.1-json-patch" && ct != "application/openstack-images-v2.0-json-patch" {
		return glanceError(w, r, http.StatusUnsupportedMediaType, "Invalid content type "+ct)
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		return glanceError(w, r, http.StatusBadRequest, "Body expected in request.")
	}
	var changes []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &changes); err != nil {
		return glanceError(w, r, http.StatusBadRequest, "Request body must be a JSON array of operation objects.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	img, code := s.lookupImage(w, r, r.PathValue("id"))
	if img == nil {
		return code
	}
	next := *img
	next.props = map[string]any{}
	for k, v := range img.props {
		next.props[k] = v
	}
	next.tags = append([]string{}, img.tags...)
	for _, c := range changes {
		var op, path string
		_ = json.Unmarshal(c["op"], &op)
		_ = json.Unmarshal(c["path"], &path)
		key := strings.TrimPrefix(path, "/")
		if !strings.HasPrefix(path, "/") || strings.Contains(key, "/") {
			return glanceError(w, r, http.StatusBadRequest, "Invalid JSON pointer for this resource: '"+path+"'")
		}
		if contains(imageReadonly, key) || contains(imageDisallowed, key) || key == "id" {
			return glanceError(w, r, http.StatusForbidden, "Attribute '"+key+"' is read-only.")
		}
		base := contains([]string{"name", "disk_format", "container_format", "visibility", "min_disk", "min_ram", "protected", "os_hidden", "tags"}, key)
		switch op {
		case "add", "replace":
			if op == "replace" && !base {
				if _, ok := next.props[key]; !ok {
					return glanceError(w, r, http.StatusConflict, "Property "+key+" does not exist.")
				}
			}
			var val any
			d := json.NewDecoder(strings.NewReader(string(c["value"])))
			d.UseNumber()
			if err := d.Decode(&val); err != nil {
				return glanceError(w, r, http.StatusBadRequest, "Operation objects must contain exactly one member named \"value\".")
			}
			if msg, st := s.setImageField(&next, key, val, false); msg != "" {
				return glanceError(w, r, st, msg)
			}
		case "remove":
			if base {
				return glanceError(w, r, http.StatusForbidden, "Property "+key+" may not be removed.")
			}
			if _, ok := next.props[key]; !ok {
				return glanceError(w, r, http.StatusConflict, "Property "+key+" does not exist.")
			}
			delete(next.props, key)
		default:
			return glanceError(w, r, http.StatusBadRequest, "Invalid operation: `"+op+"`. It must be one of the following: add, remove, replace.")
		}
	}
	next.updated = s.now().UTC()
	*img = next
	return writeJSON(w, http.StatusOK, s.imageBody(img))
}
