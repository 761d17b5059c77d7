package openstack

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/taloscluster/taloscluster/lab/labca"
)

// DefaultRegion is the region of every catalog endpoint when Options.Region
// is empty (DevStack's and keystone-manage bootstrap's default).
const DefaultRegion = "RegionOne"

// DefaultTokenTTL is how long an issued token is valid when Options.TokenTTL
// is zero: Keystone's [token] expiration default, 3600 seconds.
const DefaultTokenTTL = time.Hour

// DefaultCredential is the application credential accepted when
// Options.Credentials is empty. Its secret is a lab value, not a credential.
var DefaultCredential = Credential{
	ID:     "0a1b2c3d4e5f40718293a4b5c6d7e8f9",
	Name:   "taloslab",
	Secret: "lab-secret-0000-4000-8000-00000000cafe",
}

// Credential is an application credential: Keystone authenticates it by ID
// and secret, and the token it issues is scoped to the credential's project
// with the credential's roles.
type Credential struct {
	ID, Name, Secret string
	// Roles are the role names delegated to the credential; nil means
	// "member" and "reader".
	Roles []string
	// Unrestricted is the credential's "unrestricted" flag; tokens report
	// "restricted": !Unrestricted.
	Unrestricted bool
}

// Options configures a Server. The zero value is usable.
type Options struct {
	// Region names the region of every catalog endpoint; empty means
	// DefaultRegion.
	Region string
	// Credentials are the application credentials accepted; empty means
	// DefaultCredential alone.
	Credentials []Credential
	// ProjectID, ProjectName, UserID and UserName describe the project the
	// credentials belong to and the user who created them; empty values
	// get lab defaults (project "taloslab", user "taloslab", both in the
	// "Default" domain).
	ProjectID, ProjectName, UserID, UserName string
	// TokenTTL is how long an issued token is valid; zero means
	// DefaultTokenTTL.
	TokenTTL time.Duration
	// CA issues the server certificate; nil means a new CA of its own
	// (see Server.CA).
	CA *labca.CA
	// Addr is the listen address; empty means 127.0.0.1:0. It must be a
	// loopback address.
	Addr string
	// Now is the clock for issuing and expiring tokens; nil means time.Now.
	Now func() time.Time

	// ExternalNetworks are the provider networks that exist before any
	// client call (router:external, shared), with the subnet floating IPs
	// are allocated from; empty means one network "ext-net" on
	// 127.44.0.0/24.
	ExternalNetworks []ExternalNetwork
	// Flavors are the Nova flavors; empty means DefaultFlavors.
	Flavors []Flavor
	// AvailabilityZones are Nova's zones; empty means "nova" alone.
	AvailabilityZones []string
	// BuildDelay is how long a server stays in BUILD before it turns
	// ACTIVE (or ERROR); zero means 50 ms.
	BuildDelay time.Duration
	// Machines, when set, is told when servers boot, stop and go away,
	// so that the lab can run a simulated machine for each.
	Machines MachineHooks
	// FloatingIPs, when set, is called with the whole table of associated
	// floating IPs (floating address -> fixed address) each time it
	// changes, so that the lab can forward traffic (Neutron's NAT). It is
	// called without the server's lock held, in order.
	FloatingIPs func(table map[netip.Addr]netip.Addr)
}

// ExternalNetwork is a provider network with router:external set.
type ExternalNetwork struct {
	Name string
	// CIDR is the network's one subnet; floating IPs and router gateway
	// addresses come from its hosts .10 and up.
	CIDR netip.Prefix
}

// Flavor is a Nova flavor.
type Flavor struct {
	ID, Name string
	VCPUs    int
	RAMMB    int
	DiskGB   int
}

// DefaultFlavors are the flavors of a Server whose Options name none.
var DefaultFlavors = []Flavor{
	{ID: "1", Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20},
	{ID: "2", Name: "gp.medium", VCPUs: 2, RAMMB: 4096, DiskGB: 40},
	{ID: "3", Name: "gp.large", VCPUs: 4, RAMMB: 8192, DiskGB: 80},
	{ID: "4", Name: "gp.xlarge", VCPUs: 8, RAMMB: 16384, DiskGB: 160},
}

// MachineHooks lets the lab turn servers into simulated machines. The
// calls come from one goroutine, in the order the servers changed state,
// without the server's lock held, so they may call the Server.
type MachineHooks interface {
	// ServerUp is called when a server starts running: when it first
	// turns ACTIVE and when it comes back from a reboot.
	ServerUp(s ServerInfo)
	// ServerDown is called when a running server stops (a reboot calls
	// ServerDown then ServerUp).
	ServerDown(id string)
	// ServerDeleted is called once a server is gone with its boot volume
	// (after ServerDown if it ran).
	ServerDeleted(id string)
}

// ServerInfo describes a server to MachineHooks.ServerUp. Slices are
// copies.
type ServerInfo struct {
	ID, Name string
	// Addrs are the fixed IP addresses of the server's ports, in the
	// order of its networks.
	Addrs []netip.Addr
	// UserData is the decoded user data the server was created with, as
	// the guest can read it: from the config drive (config_drive true) or
	// from the metadata service when a security group of its ports lets
	// it reach 169.254.169.254 over TCP 80. Empty when none, or when
	// neither way reaches it (UserDataUnreachable is then set).
	UserData            []byte
	UserDataUnreachable bool
	// Image is the ID of the Glance image the boot volume was made from.
	Image string
	// Flavor, AvailabilityZone and Tags are the server's.
	Flavor, AvailabilityZone string
	Tags                     []string
}

// Op is one entry of the request log.
type Op struct {
	// Time is when the request arrived.
	Time time.Time
	// Name is the operation: "identity.versions", "identity.version",
	// "identity.token.create", "identity.token.get", or "unknown".
	Name string
	// Method and Path are the request's; Path is the full URL path.
	Method, Path string
	// Status is the HTTP status answered.
	Status int
	// Fault is "fail" when the answer was an injected failure (FailNext),
	// "hang" when no answer was sent (Hang; Status is then 0).
	Fault string
}

// Server is the emulated OpenStack cloud. It is safe for concurrent use.
type Server struct {
	opts  Options
	ca    *labca.CA
	now   func() time.Time
	ttl   time.Duration
	ln    net.Listener
	hs    *http.Server
	mux   *http.ServeMux
	url   string
	done  chan error
	close sync.Once

	mu     sync.Mutex
	tokens map[string]*token
	log    []Op
	faults map[string]*fault
	// latency and hang are the Latency and Hang faults, by operation
	// pattern (see matchOp).
	latency map[string]time.Duration
	hang    map[string]int

	// net is Neutron's state (neutron.go), guarded by mu.
	net *neutron

	// nova and glance are those services' state, guarded by mu.
	nova   *novaState
	glance *glanceState
}

type fault struct {
	n      int
	status int
}

// New starts a Server listening on a loopback address over HTTPS.
func New(o Options) (*Server, error) {
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if len(o.Credentials) == 0 {
		o.Credentials = []Credential{DefaultCredential}
	}
	if o.ProjectID == "" {
		o.ProjectID = "5f3e1c0a9b8d4e2f8a7b6c5d4e3f2a1b"
	}
	if o.ProjectName == "" {
		o.ProjectName = "taloslab"
	}
	if o.UserID == "" {
		o.UserID = "9d8c7b6a5f4e4d3c8b2a1f0e9d8c7b6a"
	}
	if o.UserName == "" {
		o.UserName = "taloslab"
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	s := &Server{
		opts:   o,
		ca:     o.CA,
		now:    o.Now,
		ttl:    o.TokenTTL,
		mux:    http.NewServeMux(),
		done:   make(chan error, 1),
		tokens: map[string]*token{},
		faults: map[string]*fault{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.ttl == 0 {
		s.ttl = DefaultTokenTTL
	}
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", o.Addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("listen address %q is not a loopback IP address", o.Addr)
	}
	if s.ca == nil {
		if s.ca, err = labca.New("lab OpenStack CA"); err != nil {
			return nil, err
		}
	}
	tlsConf, err := s.ca.ServerTLS(host)
	if err != nil {
		return nil, err
	}
	s.routes()
	if s.ln, err = net.Listen("tcp", o.Addr); err != nil {
		return nil, fmt.Errorf("listening on %s: %w", o.Addr, err)
	}
	s.url = "https://" + s.ln.Addr().String()
	s.hs = &http.Server{Handler: s, TLSConfig: tlsConf, ReadHeaderTimeout: 10 * time.Second}
	go func() { s.done <- s.hs.ServeTLS(s.ln, "", "") }()
	return s, nil
}

// URL is the server's base URL, https://127.0.0.1:port without a trailing
// slash. Keystone is at URL()+"/identity/v3".
func (s *Server) URL() string { return s.url }

// CA is the certificate authority whose certificate the server presents.
func (s *Server) CA() *labca.CA { return s.ca }

// Close stops the server and waits for it to stop serving.
func (s *Server) Close() error {
	var err error
	s.close.Do(func() {
		err = s.hs.Close()
		if e := <-s.done; e != nil && !errors.Is(e, http.ErrServerClosed) && err == nil {
			err = e
		}
	})
	return err
}

// Log returns a copy of the request log.
func (s *Server) Log() []Op {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Op(nil), s.log...)
}

// FailNext makes the next n requests of operation name (see Op.Name) answer
// status with the service's error body, without their effect. name may be a
// pattern (see matchOp): "compute" or "compute.*" is every operation of
// Nova, "*" every operation. n <= 0 removes the fault.
func (s *Server) FailNext(name string, n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		delete(s.faults, name)
		return
	}
	s.faults[name] = &fault{n: n, status: status}
}

// Latency delays every request of the operations name matches (as in
// FailNext) by d before it is handled; d <= 0 removes the delay.
func (s *Server) Latency(name string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		delete(s.latency, name)
		return
	}
	if s.latency == nil {
		s.latency = map[string]time.Duration{}
	}
	s.latency[name] = d
}

// Hang makes the next n requests of the operations name matches (as in
// FailNext) never answer, without their effect: each is held until its
// client gives up or the server closes, then its connection is dropped.
// n <= 0 removes the fault.
func (s *Server) Hang(name string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		delete(s.hang, name)
		return
	}
	if s.hang == nil {
		s.hang = map[string]int{}
	}
	s.hang[name] += n
}

// matchOp reports whether a fault's operation pattern covers the operation
// name: the name itself, "*" for every operation, or a service prefix,
// written "compute" or "compute.*" (every operation whose name starts with
// "compute."; "compute.server" and "compute.server.*" likewise cover every
// operation on servers).
func matchOp(pattern, name string) bool {
	switch {
	case pattern == name || pattern == "*":
		return true
	case strings.HasSuffix(pattern, ".*"):
		return strings.HasPrefix(name, strings.TrimSuffix(pattern, "*"))
	}
	return strings.HasPrefix(name, pattern+".")
}

// bestMatch returns the most specific key of m that covers name (the name
// itself, then the longest prefix), and whether there is one.
func bestMatch[V any](m map[string]V, name string) (string, bool) {
	best, found := "", false
	for p := range m {
		if !matchOp(p, name) {
			continue
		}
		if !found || p == name || (best != name && len(p) > len(best)) {
			best, found = p, true
		}
	}
	return best, found
}

// opHandler is an operation: a name for the log and faults, and its handler.
type opHandler struct {
	name string
	fn   func(w http.ResponseWriter, r *http.Request) int
}

// handle registers an operation on the mux.
func (s *Server) handle(pattern, name string, fn func(w http.ResponseWriter, r *http.Request) int) {
	s.mux.Handle(pattern, opHandler{name: name, fn: fn})
}

func (opHandler) ServeHTTP(http.ResponseWriter, *http.Request) {} // routing only

// ServeHTTP routes a request, applies faults and records it in the log.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	h, _ := s.mux.Handler(r)
	op, ok := h.(opHandler)
	if !ok {
		op = opHandler{name: "unknown", fn: func(w http.ResponseWriter, r *http.Request) int {
			return writeError(w, http.StatusNotFound, "The resource could not be found.", "Not Found")
		}}
	}
	entry := Op{Time: start, Name: op.name, Method: r.Method, Path: r.URL.Path}
	s.mu.Lock()
	var delay time.Duration
	if p, ok := bestMatch(s.latency, op.name); ok {
		delay = s.latency[p]
	}
	s.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			panic(http.ErrAbortHandler) // the client is gone: answer nothing
		}
	}
	s.mu.Lock()
	hang := false
	if p, ok := bestMatch(s.hang, op.name); ok {
		hang = true
		if s.hang[p]--; s.hang[p] <= 0 {
			delete(s.hang, p)
		}
	}
	var f *fault
	if p, ok := bestMatch(s.faults, op.name); ok && !hang {
		f = s.faults[p]
		if f.n--; f.n <= 0 {
			delete(s.faults, p)
		}
	}
	if hang {
		entry.Fault = "hang"
		s.log = append(s.log, entry)
	}
	s.mu.Unlock()
	if hang {
		// Held until the client gives up or Close drops the connection;
		// nothing is answered. The body is read first: net/http notices a
		// closed connection (and ends the context) only once it has been.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		panic(http.ErrAbortHandler)
	}
	if f != nil {
		entry.Fault = "fail"
		entry.Status = writeInjected(w, r, op.name, f.status)
	} else {
		entry.Status = op.fn(w, r)
	}
	s.mu.Lock()
	s.log = append(s.log, entry)
	s.mu.Unlock()
}

// writeJSON answers v as JSON with status and returns status.
func writeJSON(w http.ResponseWriter, status int, v any) int {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return status
}

// writeError answers Keystone's error document
// {"error": {"code", "message", "title"}}.
func writeError(w http.ResponseWriter, status int, message, title string) int {
	return writeJSON(w, status, map[string]any{"error": map[string]any{
		"code": status, "message": message, "title": title,
	}})
}

// newID returns 32 random hex digits, the form of Keystone's IDs.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// stableID is 32 hex digits derived from kind and name, so that IDs of
// catalog entries and roles are the same in every run.
func stableID(kind, name string) string {
	sum := sha256.Sum256([]byte(kind + "/" + name))
	return hex.EncodeToString(sum[:16])
}
