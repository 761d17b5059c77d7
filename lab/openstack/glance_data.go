package openstack

import (
	"bytes"
	"crypto/md5"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxImageData bounds what the emulator keeps of an upload.
const maxImageData = 1 << 30

// octetStream checks the upload's content type as Glance's deserializer
// does; it answers 415 and returns its status, or 0.
func octetStream(w http.ResponseWriter, r *http.Request) int {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	ct = strings.TrimSpace(ct)
	if ct != "application/octet-stream" {
		return glanceError(w, r, http.StatusUnsupportedMediaType, "Invalid content type "+ct)
	}
	return 0
}

// transition applies Glance's image status state machine
// (glance/domain Image.status). It returns the 409 message of a refused
// transition, or a 400 message when the formats are missing.
func transition(img *glanceImage, to string) (int, string) {
	valid := map[string][]string{
		"queued":      {"saving", "uploading", "importing", "active", "deleted"},
		"saving":      {"active", "killed", "deleted", "queued"},
		"uploading":   {"importing", "queued", "deleted"},
		"importing":   {"active", "deleted", "queued"},
		"active":      {"pending_delete", "deleted", "deactivated"},
		"deactivated": {"active", "deleted"},
	}
	if !contains(valid[img.status], to) {
		return http.StatusConflict, fmt.Sprintf("Image status transition from %s to %s is not allowed", img.status, to)
	}
	if (img.status == "queued" || img.status == "uploading") && contains([]string{"saving", "active", "importing"}, to) {
		var missing []string
		if img.diskFormat == "" {
			missing = append(missing, "disk_format")
		}
		if img.containerFormat == "" {
			missing = append(missing, "container_format")
		}
		switch len(missing) {
		case 1:
			return http.StatusBadRequest, "Property " + missing[0] + " must be set prior to saving data."
		case 2:
			return http.StatusBadRequest, "Properties " + strings.Join(missing, ", ") + " must be set prior to saving data."
		}
	}
	img.status = to
	if to == "queued" {
		img.hasSize, img.size, img.virtualSize = false, 0, 0
	}
	return 0, ""
}

// readBody reads the whole request body; a body cut short (fewer bytes
// than Content-Length, or a broken chunked stream) is an error.
func readImageBody(r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxImageData+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxImageData {
		return nil, fmt.Errorf("image data over %d bytes", maxImageData)
	}
	if r.ContentLength >= 0 && int64(len(data)) != r.ContentLength {
		return nil, io.ErrUnexpectedEOF
	}
	return data, nil
}

// uploadImage answers PUT /v2/images/{id}/file: the image goes saving
// while the data arrives and is stored, then active with its size, MD5
// checksum and SHA-512 hash; 204. An upload that fails midway puts the
// image back to queued, as Glance restores it.
func (s *Server) uploadImage(w http.ResponseWriter, r *http.Request) int {
	if c := octetStream(w, r); c != 0 {
		return c
	}
	id := r.PathValue("id")
	s.mu.Lock()
	img, code := s.lookupImage(w, r, id)
	if img == nil {
		s.mu.Unlock()
		return code
	}
	if st, msg := transition(img, "saving"); st != 0 {
		s.mu.Unlock()
		return glanceError(w, r, st, msg)
	}
	img.updated = s.now().UTC()
	s.mu.Unlock()

	data, err := readImageBody(r)
	if err == nil {
		// The store write: saving stays visible for a moment.
		time.Sleep(s.buildDelay())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.glance.images[id] != img {
		return glanceError(w, r, http.StatusGone, "Image "+id+" could not be found after upload. The image may have been deleted during the upload, cleaning up the chunks uploaded.")
	}
	if err != nil {
		_, _ = transition(img, "queued")
		return glanceError(w, r, http.StatusInternalServerError, "The server has either erred or is incapable of performing the requested operation.")
	}
	if msg := s.storeData(img, data); msg != "" {
		_, _ = transition(img, "queued")
		return glanceError(w, r, http.StatusUnsupportedMediaType, msg)
	}
	_, _ = transition(img, "active")
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// storeData checks the data's format as Glance's in-flight inspection
// does for "bare" containers and records the data, its size and hashes.
// It returns InvalidImageData's message on a mismatch. The caller holds
// s.mu.
func (s *Server) storeData(img *glanceImage, data []byte) string {
	virtual := int64(len(data))
	if img.containerFormat == "bare" {
		format, vsize := detectFormat(data)
		switch {
		case format == img.diskFormat:
			if vsize > 0 {
				virtual = vsize
			}
		case format == "raw" && !contains([]string{"raw", "qcow2", "vmdk", "vhd", "vhdx", "vdi", "iso", "ploop"}, img.diskFormat):
		case img.diskFormat == "raw":
		default:
			return fmt.Sprintf("Image disk_format %s does not match stream data %s", img.diskFormat, format)
		}
	}
	sum := md5.Sum(data)
	hash := sha512.Sum512(data)
	img.data = data
	img.size, img.virtualSize, img.hasSize = int64(len(data)), virtual, true
	img.checksum = hex.EncodeToString(sum[:])
	img.hashValue = hex.EncodeToString(hash[:])
	img.updated = s.now().UTC()
	return ""
}

// detectFormat recognizes the formats oslo's format_inspector tells
// apart by their magic (qcow2, vmdk, vhdx, vdi, iso); anything else is
// raw. vsize is the virtual size when the header gives it.
func detectFormat(data []byte) (format string, vsize int64) {
	switch {
	case len(data) >= 32 && bytes.Equal(data[:4], []byte("QFI\xfb")):
		return "qcow2", int64(binary.BigEndian.Uint64(data[24:32]))
	case len(data) >= 4 && bytes.Equal(data[:4], []byte("KDMV")):
		return "vmdk", 0
	case len(data) >= 8 && bytes.Equal(data[:8], []byte("vhdxfile")):
		return "vhdx", 0
	case len(data) >= 0x44 && binary.LittleEndian.Uint32(data[0x40:0x44]) == 0xbeda107f:
		return "vdi", 0
	case len(data) >= 0x8006 && bytes.Equal(data[0x8001:0x8006], []byte("CD001")):
		return "iso", 0
	}
	return "raw", 0
}

// downloadImage answers GET /v2/images/{id}/file: the data with its
// Content-MD5, 204 when the image has none.
func (s *Server) downloadImage(w http.ResponseWriter, r *http.Request) int {
	s.mu.Lock()
	img, code := s.lookupImage(w, r, r.PathValue("id"))
	if img == nil {
		s.mu.Unlock()
		return code
	}
	if img.status == "deactivated" {
		s.mu.Unlock()
		return glanceError(w, r, http.StatusForbidden, "The requested image has been deactivated. Image data download is forbidden.")
	}
	data, checksum := img.data, img.checksum
	s.mu.Unlock()
	if data == nil {
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-MD5", checksum)
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return http.StatusOK
}

// stageImage answers PUT /v2/images/{id}/stage (interoperable import,
// glance-direct): the image goes uploading with its data staged; 204.
func (s *Server) stageImage(w http.ResponseWriter, r *http.Request) int {
	if c := octetStream(w, r); c != 0 {
		return c
	}
	id := r.PathValue("id")
	s.mu.Lock()
	img, code := s.lookupImage(w, r, id)
	if img == nil {
		s.mu.Unlock()
		return code
	}
	if img.staged != nil {
		s.mu.Unlock()
		return glanceError(w, r, http.StatusConflict, "The image "+id+" has data on staging")
	}
	if st, msg := transition(img, "uploading"); st != 0 {
		s.mu.Unlock()
		return glanceError(w, r, st, msg)
	}
	img.updated = s.now().UTC()
	s.mu.Unlock()

	data, err := readImageBody(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.glance.images[id] != img {
		return glanceError(w, r, http.StatusNotFound, "No image found with ID "+id)
	}
	if err != nil {
		_, _ = transition(img, "queued")
		return glanceError(w, r, http.StatusInternalServerError, "The server has either erred or is incapable of performing the requested operation.")
	}
	img.staged = data
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// importImage answers POST /v2/images/{id}/import for glance-direct: 202,
// the image goes importing and, after the transition delay, active with
// the staged data (or back to queued if the data does not pass the format
// check).
func (s *Server) importImage(w http.ResponseWriter, r *http.Request) int {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil || body == nil {
		return glanceError(w, r, http.StatusBadRequest, "Body expected in request.")
	}
	rawMethod, ok := body["method"]
	if !ok {
		return glanceError(w, r, http.StatusBadRequest, "Import request requires a 'method' field.")
	}
	var method map[string]any
	_ = json.Unmarshal(rawMethod, &method)
	name, ok := method["name"].(string)
	if !ok {
		return glanceError(w, r, http.StatusBadRequest, "Import request requires a 'name' field.")
	}
	if !contains(glanceImportMethods, name) {
		return glanceError(w, r, http.StatusBadRequest, "Unknown import method name '"+name+"'.")
	}
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	img, code := s.lookupImage(w, r, id)
	if img == nil {
		return code
	}
	switch {
	case img.status == "active":
		return glanceError(w, r, http.StatusConflict, "Image with status active cannot be target for import")
	case img.status != "uploading":
		return glanceError(w, r, http.StatusConflict, "Image needs to be staged before 'glance-direct' method can be used")
	case img.containerFormat == "":
		return glanceError(w, r, http.StatusConflict, "'container_format' needs to be set before import")
	case img.diskFormat == "":
		return glanceError(w, r, http.StatusConflict, "'disk_format' needs to be set before import")
	}
	if st, msg := transition(img, "importing"); st != 0 {
		return glanceError(w, r, st, msg)
	}
	img.updated = s.now().UTC()
	time.AfterFunc(s.buildDelay(), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.glance.images[id] != img || img.status != "importing" {
			return
		}
		data := img.staged
		img.staged = nil
		if msg := s.storeData(img, data); msg != "" {
			_, _ = transition(img, "queued")
			return
		}
		_, _ = transition(img, "active")
	})
	w.WriteHeader(http.StatusAccepted)
	return http.StatusAccepted
}
