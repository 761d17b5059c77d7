package rancher

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure the emulator.
type Options struct {
	// Token is the API token it accepts as "Authorization: Bearer
	// <token>"; required.
	Token string
	// Creator is the principal of the token's user: the creator of the
	// clusters it makes, bound as their cluster-owner
	// (local://u-creator when empty).
	Creator string
	// NamespaceDelay is how long after its creation a cluster's
	// BackingNamespaceCreated condition turns "True" (200 ms when zero;
	// negative for at once).
	NamespaceDelay time.Duration
	// ServerURL is Rancher's server-url setting: the origin the
	// registration commands name. Empty: the origin of the request that
	// reads them.
	ServerURL string
	// UnfilteredBindings answers the binding list whole, every cluster's,
	// whatever the query filters on: as a Rancher or proxy that drops the
	// query would.
	UnfilteredBindings bool
}

// Cluster is a cluster as the emulator keeps it.
type Cluster struct {
	ID, Name, State string
	Created         time.Time
}

// Binding is a cluster role template binding.
type Binding struct {
	ID, ClusterID, UserPrincipalID, GroupPrincipalID, RoleTemplateID string
}

// Principal is a user or group a principal search finds.
type Principal struct {
	// ID is the principal id (local://u-xxxxx,
	// openldap_user://uid=alice,ou=People,dc=example,dc=org).
	ID string
	// Type is "user" or "group".
	Type string
	// Login and Name are the login name (users) and display name the
	// search matches.
	Login, Name string
	// Provider is the auth provider (local, openldap, ...).
	Provider string
}

// Fault makes the emulator answer a method and path its way instead.
type Fault struct {
	// Status is the answer's HTTP status; with Location it is a redirect
	// (307 when zero), otherwise an error in Rancher's shape with
	// Message (500 when zero).
	Status  int
	Message string
	// Location redirects there.
	Location string
	// Hang answers nothing until the client gives up.
	Hang bool
	// Times is how many requests it answers (0: every one).
	Times int
}

// Request is one request the emulator answered, for tests.
type Request struct {
	// Host is the host (and port) the request named.
	Host                string
	Method, Path, Query string
	// Bearer is set when the request carried an Authorization header;
	// Authorized when it held the emulator's token.
	Bearer, Authorized bool
	// Body is a JSON request body (the plugin sends no secret in one).
	Body string
}

// regToken is a cluster registration token.
type regToken struct {
	id, clusterID, token string
}

// Server is the emulator.
type Server struct {
	opts Options

	mu         sync.Mutex
	clusters   []*Cluster
	bindings   []*Binding
	tokens     []*regToken
	principals []Principal
	faults     map[string]*Fault
	log        []Request
}

// New returns an emulator with no clusters and no principals.
func New(opts Options) *Server {
	if opts.Creator == "" {
		opts.Creator = "local://u-creator"
	}
	if opts.NamespaceDelay == 0 {
		opts.NamespaceDelay = 200 * time.Millisecond
	}
	return &Server{opts: opts, faults: map[string]*Fault{}}
}

// AddUser adds a user principal of the provider ("local" or an LDAP-like
// one such as "openldap") and returns it: a local user's id is
// local://u-<random>, an LDAP user's <provider>_user://uid=<login>,ou=People,dc=example,dc=org.
func (s *Server) AddUser(provider, login, name string) Principal {
	p := Principal{Type: "user", Login: login, Name: name, Provider: provider}
	if provider == "local" {
		p.ID = "local://u-" + randomID(5)
	} else {
		p.ID = provider + "_user://uid=" + login + ",ou=People,dc=example,dc=org"
	}
	s.AddPrincipal(p)
	return p
}

// AddGroup adds a group principal of the provider and returns it.
func (s *Server) AddGroup(provider, name string) Principal {
	p := Principal{Type: "group", Name: name, Provider: provider,
		ID: provider + "_group://cn=" + name + ",ou=Groups,dc=example,dc=org"}
	s.AddPrincipal(p)
	return p
}

// AddPrincipal adds a principal as it is.
func (s *Server) AddPrincipal(p Principal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.principals = append(s.principals, p)
}

// AddCluster adds a cluster made outside the plugin (another cluster's
// registration), in state, with its namespace made.
func (s *Server) AddCluster(name, state string) Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.newCluster(name)
	cl.State, cl.Created = state, time.Time{}
	return *cl
}

// SetState sets a cluster's state (active once its agent connected);
// false when there is no such cluster.
func (s *Server) SetState(id, state string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cl := s.cluster(id); cl != nil {
		cl.State = state
		return true
	}
	return false
}

// Clusters returns the clusters.
func (s *Server) Clusters() []Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Cluster, len(s.clusters))
	for i, cl := range s.clusters {
		out[i] = *cl
	}
	return out
}

// AddBinding adds a binding made outside the plugin (an id is made when
// it has none) and returns it.
func (s *Server) AddBinding(b Binding) Binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.ID == "" {
		b.ID = b.ClusterID + ":crtb-" + randomID(5)
	}
	s.bindings = append(s.bindings, &b)
	return b
}

// Bindings returns the cluster's bindings.
func (s *Server) Bindings(clusterID string) []Binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Binding
	for _, b := range s.bindings {
		if b.ClusterID == clusterID {
			out = append(out, *b)
		}
	}
	return out
}

// Fault makes method and path (exactly, without the query) answer f's
// way; a zero Fault removes it.
func (s *Server) Fault(method, path string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := method + " " + path
	if f == (Fault{}) {
		delete(s.faults, key)
		return
	}
	s.faults[key] = &f
}

// Requests returns the requests answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// ServeHTTP answers one request of the v3 API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	auth := r.Header.Get("Authorization")
	authorized := s.opts.Token != "" && auth == "Bearer "+s.opts.Token
	s.mu.Lock()
	s.log = append(s.log, Request{Host: r.Host, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Bearer: auth != "", Authorized: authorized, Body: string(body)})
	f := s.fault(r.Method + " " + r.URL.Path)
	s.mu.Unlock()
	if f != nil {
		serveFault(w, r, f)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/v3/import/") && r.Method == http.MethodGet {
		// The import manifest is reached without a login: the
		// registration token in its name is the credential.
		s.serveImport(w, r)
		return
	}
	if !authorized {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"type": "error", "status": "401", "message": "must authenticate"})
		return
	}
	s.route(w, r, body)
}

// fault returns the fault of key and counts its use; nil for none.
func (s *Server) fault(key string) *Fault {
	f := s.faults[key]
	if f == nil {
		return nil
	}
	out := *f
	if f.Times > 0 {
		if f.Times--; f.Times == 0 {
			delete(s.faults, key)
		}
	}
	return &out
}

func serveFault(w http.ResponseWriter, r *http.Request, f *Fault) {
	switch {
	case f.Hang:
		<-r.Context().Done()
	case f.Location != "":
		status := f.Status
		if status == 0 {
			status = http.StatusTemporaryRedirect
		}
		w.Header().Set("Location", f.Location)
		w.WriteHeader(status)
	default:
		status := f.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		msg := f.Message
		if msg == "" {
			msg = http.StatusText(status)
		}
		apiError(w, status, codeOf(status), msg)
	}
}

// route dispatches an authorized request by its path.
func (s *Server) route(w http.ResponseWriter, r *http.Request, body []byte) {
	segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(segs) < 2 || segs[0] != "v3" {
		apiError(w, http.StatusNotFound, "NotFound", "not found")
		return
	}
	// Norman matches a schema's plural name without regard to case.
	kind := strings.ToLower(segs[1])
	rest := segs[2:]
	m := r.Method
	switch {
	case kind == "clusters" && len(rest) == 0 && m == http.MethodGet:
		s.listClusters(w, r)
	case kind == "clusters" && len(rest) == 0 && m == http.MethodPost:
		s.createCluster(w, r, body)
	case kind == "clusters" && len(rest) == 1 && m == http.MethodGet:
		s.getCluster(w, r, rest[0])
	case kind == "clusters" && len(rest) == 1 && m == http.MethodDelete:
		s.deleteCluster(w, r, rest[0])
	case kind == "clusters" && len(rest) == 2 && strings.EqualFold(rest[1], "clusterregistrationtokens") && m == http.MethodGet:
		s.listTokens(w, r, rest[0])
	case kind == "clusterregistrationtokens" && len(rest) == 0 && m == http.MethodPost:
		s.createToken(w, r, body)
	case kind == "principals" && len(rest) == 0 && m == http.MethodPost && r.URL.Query().Get("action") == "search":
		s.searchPrincipals(w, body)
	case kind == "clusterroletemplatebindings" && len(rest) == 0 && m == http.MethodGet:
		s.listBindings(w, r)
	case kind == "clusterroletemplatebindings" && len(rest) == 0 && m == http.MethodPost:
		s.createBinding(w, body)
	case kind == "clusterroletemplatebindings" && len(rest) == 1 && m == http.MethodDelete:
		s.deleteBinding(w, rest[0])
	case slices.Contains([]string{"clusters", "clusterregistrationtokens", "principals", "clusterroletemplatebindings"}, kind):
		apiError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "Method "+m+" not supported")
	default:
		apiError(w, http.StatusNotFound, "NotFound", "not found")
	}
}

// apiError answers in Rancher's error shape.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "baseType": "error", "status": fmt.Sprint(status), "code": code, "message": msg})
}

// fieldError is Rancher's error about one field of the request.
func fieldError(w http.ResponseWriter, status int, code, field, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "baseType": "error", "status": fmt.Sprint(status), "code": code,
		"fieldName": field, "message": msg})
}

func codeOf(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "InvalidBodyContent"
	case http.StatusUnauthorized:
		return "Unauthorized"
	case http.StatusForbidden:
		return "PermissionDenied"
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusConflict:
		return "Conflict"
	case http.StatusUnprocessableEntity:
		return "InvalidFormat"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	}
	return "ServerError"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// collection answers items in Rancher's list shape, at most limit
// (norman's default 100, at most 3000).
func collection(w http.ResponseWriter, r *http.Request, resource string, items []map[string]any) {
	limit := 100
	if n, err := fmt.Sscan(r.URL.Query().Get("limit"), &limit); n != 1 || err != nil || limit <= 0 {
		limit = 100
	}
	limit = min(limit, 3000)
	pagination := map[string]any{"limit": limit, "total": len(items)}
	if len(items) > limit {
		items = items[:limit]
		pagination["partial"] = true
	}
	if items == nil {
		items = []map[string]any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"type": "collection", "resourceType": resource,
		"pagination": pagination, "data": items})
}

// origin is the scheme and host the request reached.
func origin(r *http.Request) string {
	scheme := "https"
	if r.TLS == nil {
		scheme = "http"
	}
	return scheme + "://" + r.Host
}

// randomID is n random lower-case letters and digits, as Rancher's
// generated names.
func randomID(n int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, n)
	for i := range b {
		k, _ := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		b[i] = alphabet[k.Int64()]
	}
	return string(b)
}
