// Package factory is an emulator of the Talos Image Factory endpoints the
// engine uses: POST /schematics registers a schematic of official system
// extensions and answers its ID, computed exactly like
// reconcile/machineconfig.SchematicID, and GET /image/{schematic}/{version}/{file}
// serves a small deterministic stand-in image (a valid ISO 9660 image for
// *.iso files). Every request is logged, and requests can be made to fail.
//
// The package provides an http.Handler; the caller serves it on a loopback
// address.
package factory

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
)

// maxSchematic bounds the size of a posted schematic.
const maxSchematic = 1 << 20

// Request is one entry of the request log.
type Request struct {
	// Time is when the request arrived.
	Time time.Time
	// Op is "schematics.create", "image.get" or "unknown".
	Op string
	// Method and Path are the request's.
	Method, Path string
	// Status is the HTTP status answered.
	Status int
}

// Server is the emulated Image Factory. It is safe for concurrent use.
type Server struct {
	mu         sync.Mutex
	schematics map[string][]string // ID -> sorted official extensions
	fails      map[string][]*failRule
	log        []Request
}

type failRule struct {
	left, status int
}

// New returns a factory that knows the empty schematic (no extensions), as
// the real factory does.
func New() *Server {
	s := &Server{schematics: map[string][]string{}, fails: map[string][]*failRule{}}
	if id, err := machineconfig.SchematicID(nil); err == nil {
		s.schematics[id] = nil
	}
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Log returns a copy of the request log.
func (s *Server) Log() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// Schematics returns the known schematic IDs with their official
// extensions.
func (s *Server) Schematics() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]string, len(s.schematics))
	for id, exts := range s.schematics {
		out[id] = slices.Clone(exts)
	}
	return out
}

// Fail makes the next n requests of op ("schematics.create" or
// "image.get") answer the given HTTP status (500 if it is not an HTTP
// status) without effect.
func (s *Server) Fail(op string, n, status int) {
	if n <= 0 {
		return
	}
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails[op] = append(s.fails[op], &failRule{left: n, status: status})
}

func (s *Server) takeFail(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	rules := s.fails[op]
	for len(rules) > 0 && rules[0].left <= 0 {
		rules = rules[1:]
	}
	s.fails[op] = rules
	if len(rules) == 0 {
		return 0
	}
	rules[0].left--
	return rules[0].status
}

// recorder notes the status of an answer and logs the request before the
// answer goes out, so a client never sees an answer the log lacks.
type recorder struct {
	http.ResponseWriter
	status int
	logged func(status int)
}

func (w *recorder) note(code int) {
	if w.status == 0 {
		w.status = code
		w.logged(code)
	}
}

func (w *recorder) WriteHeader(code int) {
	w.note(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	w.note(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

var imagePathRE = regexp.MustCompile(`^/image/([0-9a-f]{64})/([^/]+)/([^/]+)$`)

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	entry := Request{Time: time.Now(), Op: "unknown", Method: r.Method, Path: r.URL.Path}
	rec := &recorder{ResponseWriter: w, logged: func(status int) {
		entry.Status = status
		s.mu.Lock()
		s.log = append(s.log, entry)
		s.mu.Unlock()
	}}
	// A handler that wrote nothing answered 200.
	defer rec.note(http.StatusOK)

	switch {
	case r.URL.Path == "/schematics":
		entry.Op = "schematics.create"
		if r.Method != http.MethodPost {
			httpError(rec, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		if code := s.takeFail(entry.Op); code != 0 {
			httpError(rec, code, "emulated failure")
			return
		}
		s.createSchematic(rec, r)
	case strings.HasPrefix(r.URL.Path, "/image/"):
		entry.Op = "image.get"
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			httpError(rec, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		if code := s.takeFail(entry.Op); code != 0 {
			httpError(rec, code, "emulated failure")
			return
		}
		m := imagePathRE.FindStringSubmatch(r.URL.Path)
		if m == nil {
			httpError(rec, http.StatusNotFound, "not found")
			return
		}
		s.getImage(rec, r, m[1], m[2], m[3])
	default:
		httpError(rec, http.StatusNotFound, "not found")
	}
}

func httpError(w http.ResponseWriter, code int, msg string) {
	http.Error(w, msg, code)
}

// schematicDoc is the part of a schematic the emulator accepts. Other
// customizations (kernel arguments, overlays, meta) change the ID in ways
// machineconfig.SchematicID does not model, so they are refused.
type schematicDoc struct {
	Customization struct {
		SystemExtensions struct {
			OfficialExtensions []string `yaml:"officialExtensions"`
		} `yaml:"systemExtensions"`
	} `yaml:"customization"`
}

func (s *Server) createSchematic(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSchematic+1))
	if err != nil {
		httpError(w, http.StatusBadRequest, "reading the schematic: "+err.Error())
		return
	}
	if len(body) > maxSchematic {
		httpError(w, http.StatusRequestEntityTooLarge, "schematic too large")
		return
	}
	var doc schematicDoc
	dec := yaml.NewDecoder(bytes.NewReader(body))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		httpError(w, http.StatusBadRequest, "invalid schematic: "+err.Error())
		return
	}
	exts := doc.Customization.SystemExtensions.OfficialExtensions
	for _, e := range exts {
		if e == "" || strings.ContainsAny(e, " \t\n") {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("invalid schematic: invalid extension name %q", e))
			return
		}
	}
	id, err := machineconfig.SchematicID(exts)
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	exts = slices.Clone(exts)
	slices.Sort(exts)
	exts = slices.Compact(exts)
	s.mu.Lock()
	s.schematics[id] = exts
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{"id": id})
}

var (
	versionRE = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.\-]+)?$`)
	fileRE    = regexp.MustCompile(`^(?:[a-z0-9]+-(?:amd64|arm64)(?:-secureboot)?\.(?:iso|raw\.xz|raw\.zst|qcow2|vhd\.xz|ova|tar\.gz)|(?:kernel|initramfs|cmdline)-(?:amd64|arm64)(?:\.xz)?|installer-(?:amd64|arm64)\.tar)$`)
)

func (s *Server) getImage(w http.ResponseWriter, r *http.Request, id, version, file string) {
	s.mu.Lock()
	exts, ok := s.schematics[id]
	s.mu.Unlock()
	if !ok {
		httpError(w, http.StatusNotFound, "schematic not found")
		return
	}
	if !versionRE.MatchString(version) {
		httpError(w, http.StatusNotFound, "version not found")
		return
	}
	if !fileRE.MatchString(file) {
		httpError(w, http.StatusNotFound, "unknown image")
		return
	}
	data := Image(id, version, file, exts)
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(data))
}

// Image returns the stand-in image the factory serves for a schematic,
// version and file: an ISO 9660 image for *.iso (its root holds TALOS.TXT
// describing the request), a few KiB of deterministic bytes otherwise.
func Image(schematic, version, file string, extensions []string) []byte {
	var info strings.Builder
	fmt.Fprintf(&info, "schematic: %s\nversion: %s\nfile: %s\nextensions:\n", schematic, version, file)
	for _, e := range extensions {
		fmt.Fprintf(&info, "  - %s\n", e)
	}
	if strings.HasSuffix(file, ".iso") {
		return buildISO("TALOS", []isoFile{{name: "TALOS.TXT", data: []byte(info.String())}})
	}
	out := []byte("TALOSCLUSTER LAB IMAGE\n" + info.String())
	seed := sha256.Sum256(out)
	for len(out) < 4096 {
		seed = sha256.Sum256(seed[:])
		out = append(out, seed[:]...)
	}
	return out
}
