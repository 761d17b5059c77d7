// Package factory is an emulator of the Talos Image Factory endpoints the
// engine uses, following github.com/siderolabs/image-factory:
//
//   - POST /schematics registers a schematic and answers 201 with its ID
//     and canonical form. The document is decoded, validated and hashed the
//     factory's way (see schematic.go): every field of the factory's
//     schematic model is accepted and changes the ID exactly as it does
//     there, lists keep their order, unknown fields and an empty body are
//     refused with 400, and an owner with 400 (Enterprise only).
//   - GET /schematics/{id} answers the canonical YAML of a known schematic.
//   - GET and HEAD /image/{schematic}/{version}/{path} serve a small
//     deterministic stand-in for the asset (a valid ISO 9660 image for
//     *.iso), after the factory's checks in its order: the schematic must be
//     known (404), the version must be semver with an optional "v" (500
//     otherwise, as the factory does not tag that error), the path must be
//     an asset path the factory's profile parser accepts (400), and, when a
//     catalogue was given with SetOfficialExtensions, the schematic's
//     official extensions must be in it (400).
//
// The ID is computed by this package alone and never by the engine's code,
// so a test that compares the two checks the engine. Every request is
// logged, and requests can be made to fail.
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
)

// maxSchematic bounds the size of a posted schematic.
const maxSchematic = 1 << 20

// EmptySchematicID is the ID of the schematic without customizations,
// which the public factory knows (published in image-factory's
// pkg/schematic tests).
const EmptySchematicID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

// Request is one entry of the request log.
type Request struct {
	// Time is when the request arrived.
	Time time.Time
	// Op is "schematics.create", "schematics.get", "image.get" or
	// "unknown".
	Op string
	// Method and Path are the request's.
	Method, Path string
	// Status is the HTTP status answered.
	Status int
}

// stored is a registered schematic.
type stored struct {
	canonical  []byte
	extensions []string
}

// Server is the emulated Image Factory. It is safe for concurrent use.
type Server struct {
	mu         sync.Mutex
	schematics map[string]stored
	catalogue  map[string]bool // nil: every extension name is accepted
	fails      map[string][]*failRule
	log        []Request
}

type failRule struct {
	left, status int
}

// New returns a factory that knows the empty schematic (no
// customizations), as the public factory does.
func New() *Server {
	s := &Server{schematics: map[string]stored{}, fails: map[string][]*failRule{}}
	empty := &schematic{}
	if id, canonical, err := empty.id(); err == nil {
		s.schematics[id] = stored{canonical: canonical}
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
// extensions, in the order they were posted.
func (s *Server) Schematics() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]string, len(s.schematics))
	for id, st := range s.schematics {
		out[id] = slices.Clone(st.extensions)
	}
	return out
}

// SetOfficialExtensions sets the official extensions the factory offers
// (e.g. "siderolabs/qemu-guest-agent"). An image of a schematic naming
// another one is then refused with 400, as the factory refuses an
// extension that is not available for the requested Talos version. Without
// a catalogue (the default) every name is accepted; the emulator has no
// per-version catalogue of its own.
func (s *Server) SetOfficialExtensions(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.catalogue = map[string]bool{}
	for _, n := range names {
		s.catalogue[n] = true
	}
}

// Fail makes the next n requests of op ("schematics.create",
// "schematics.get" or "image.get") answer the given HTTP status (500 if it
// is not an HTTP status) without effect.
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

	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/schematics":
		entry.Op = "schematics.create"
		if r.Method != http.MethodPost {
			httpError(rec, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		if code := s.takeFail(entry.Op); code != 0 {
			httpError(rec, code, "emulated failure")
			return
		}
		s.createSchematic(rec, r)
	case len(parts) == 2 && parts[0] == "schematics" && parts[1] != "":
		entry.Op = "schematics.get"
		if r.Method != http.MethodGet {
			httpError(rec, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		if code := s.takeFail(entry.Op); code != 0 {
			httpError(rec, code, "emulated failure")
			return
		}
		s.getSchematic(rec, parts[1])
	case len(parts) == 4 && parts[0] == "image" && parts[1] != "" && parts[2] != "" && parts[3] != "":
		entry.Op = "image.get"
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			httpError(rec, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		if code := s.takeFail(entry.Op); code != 0 {
			httpError(rec, code, "emulated failure")
			return
		}
		s.getImage(rec, r, parts[1], parts[2], parts[3])
	default:
		httpError(rec, http.StatusNotFound, "404 page not found")
	}
}

func httpError(w http.ResponseWriter, code int, msg string) {
	http.Error(w, msg, code)
}

func (s *Server) createSchematic(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSchematic+1))
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if len(body) > maxSchematic {
		httpError(w, http.StatusRequestEntityTooLarge, "schematic too large")
		return
	}
	sc, err := parseSchematic(body)
	if err == nil {
		err = sc.validate()
	}
	var invalid *invalidError
	if errors.As(err, &invalid) {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		httpError(w, http.StatusInternalServerError, "internal server error")
		return
	}
	id, canonical, err := sc.id()
	if err != nil {
		httpError(w, http.StatusInternalServerError, "internal server error")
		return
	}
	s.mu.Lock()
	s.schematics[id] = stored{canonical: canonical, extensions: slices.Clone(sc.Customization.SystemExtensions.OfficialExtensions)}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(struct {
		ID        string `json:"id"`
		Schematic string `json:"schematic"`
	}{id, string(canonical)})
}

func (s *Server) lookup(id string) (stored, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.schematics[id]
	return st, ok
}

func (s *Server) getSchematic(w http.ResponseWriter, id string) {
	st, ok := s.lookup(id)
	if !ok {
		httpError(w, http.StatusNotFound, "schematic not found")
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(st.canonical)
}

// semverRE is Semantic Versioning 2.0.0, which the factory's
// blang/semver Parse requires after an optional leading "v".
var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

func (s *Server) getImage(w http.ResponseWriter, r *http.Request, id, version, file string) {
	st, ok := s.lookup(id)
	if !ok {
		httpError(w, http.StatusNotFound, fmt.Sprintf("schematic ID %q not found", id))
		return
	}
	version = strings.TrimPrefix(version, "v")
	if !semverRE.MatchString(version) {
		httpError(w, http.StatusInternalServerError, "internal server error")
		return
	}
	if err := checkProfilePath(file); err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	catalogue := s.catalogue
	s.mu.Unlock()
	if catalogue != nil {
		for _, e := range st.extensions {
			if !catalogue[e] {
				httpError(w, http.StatusBadRequest, fmt.Sprintf("official extension %q is not available for Talos version v%s", e, version))
				return
			}
		}
	}
	data := Image(id, "v"+version, file, st.extensions)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, file))
	http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(data))
}

// Image returns the stand-in image the factory serves for a schematic,
// version and file: an ISO 9660 image for *.iso (its root holds TALOS.TXT
// describing the request), a few KiB of deterministic bytes otherwise. Those
// bytes are compressed as the file's name says, as the factory serves its
// disk images: *.xz is an xz stream, *.tar.gz a gzip stream of a tar
// archive holding disk.raw (the GCP image's layout), any other *.gz a gzip
// stream. Other suffixes (*.zst included) are served uncompressed.
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
	return compress(file, out)
}
