package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/taloscluster/taloscluster/lab/internal/connabort"
)

// DefaultVersion is the Kubernetes version the emulator reports when
// Options.Version is empty.
const DefaultVersion = "v1.36.1"

// DefaultNodeMonitorGracePeriod is kube-controller-manager's default
// --node-monitor-grace-period (50 s since Kubernetes v1.32;
// pkg/controller/nodelifecycle/config/v1alpha1/defaults.go).
const DefaultNodeMonitorGracePeriod = 50 * time.Second

// Options configure a Server.
type Options struct {
	// CACert and CAKey are the cluster's Kubernetes CA in PEM form. The
	// server presents a certificate signed by it and accepts only client
	// certificates signed by it.
	CACert, CAKey []byte
	// Addr is the address to listen on: a loopback address, normally the
	// cluster endpoint's 127.x.y.z:6443. Port 0 picks a free port.
	Addr netip.AddrPort
	// SANs are extra names and addresses for the serving certificate, besides
	// Addr's IP and the in-cluster names of the kubernetes service.
	SANs []string
	// Version is the Kubernetes version served at /version, like "v1.36.1";
	// empty means DefaultVersion.
	Version string
	// ReadyDelay is how long a node added with AddNode stays NotReady before
	// its simulated kubelet reports Ready.
	ReadyDelay time.Duration
	// NodeMonitorGracePeriod is how long after a node's kubelet stopped
	// (StopKubelet) the node lifecycle controller of kube-controller-manager
	// marks the node Unknown: kube-controller-manager's
	// --node-monitor-grace-period, whose default is
	// DefaultNodeMonitorGracePeriod. Zero or less marks it at once.
	NodeMonitorGracePeriod time.Duration
	// NamespaceFinalizeDelay is how long an emptied namespace stays
	// Terminating before it is gone: the namespace controller of
	// kube-controller-manager removes its finalizer only after its
	// deletion sweep, seconds after the delete was answered. Zero removes
	// it before the delete is answered.
	NamespaceFinalizeDelay time.Duration
	// DeploymentsAvailable plays the Deployment controller and the
	// kubelets of a Deployment's pods at once: every Deployment written
	// shows all its replicas updated, ready and available, with the
	// condition Available True, as it would once its pods run. No pod is
	// made. Off, a Deployment's status is what clients write, as in a
	// cluster without kube-controller-manager.
	DeploymentsAvailable bool
	// Logger receives the HTTP server's own errors (TLS handshakes that
	// failed, for one); nil discards them.
	Logger *slog.Logger
}

// Server is the emulated Kubernetes API of one cluster. Its methods are safe
// for concurrent use.
type Server struct {
	opts   Options
	tls    *tls.Config
	caPool *x509.CertPool

	mu      sync.Mutex
	version string
	addr    netip.AddrPort // the primary address: Options.Addr as bound, then the first of SetEndpoints
	srv     *http.Server
	lns     map[netip.AddrPort]net.Listener // the addresses served now (SetServing, SetEndpoints)
	def     *tls.Certificate                // the certificate for Options.Addr and Options.SANs
	certs   map[netip.AddrPort]*tls.Certificate
	issued  map[string]*tls.Certificate // by the host list it was issued for
	conns   map[net.Conn]struct{}
	closed  chan struct{}
	st      *state
	log     []*Op
	faults  []*fault
	timers  map[string]*time.Timer // ReadyDelay, by node
	lost    map[string]*time.Timer // NodeMonitorGracePeriod, by node
	closing bool
}

// New validates opts and prepares a server; Start makes it listen.
func New(opts Options) (*Server, error) {
	if !opts.Addr.IsValid() {
		return nil, errors.New("creating the Kubernetes API emulator: no listen address")
	}
	if !opts.Addr.Addr().IsLoopback() {
		return nil, fmt.Errorf("creating the Kubernetes API emulator: %s is not a loopback address", opts.Addr.Addr())
	}
	if opts.Version == "" {
		opts.Version = DefaultVersion
	}
	if _, _, err := parseVersion(opts.Version); err != nil {
		return nil, fmt.Errorf("creating the Kubernetes API emulator: %w", err)
	}
	hosts := append([]string{
		opts.Addr.Addr().String(), "localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}, opts.SANs...)
	cfg, pool, err := serverTLS(opts.CACert, opts.CAKey, hosts...)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes API emulator: %w", err)
	}
	s := &Server{
		opts:    opts,
		tls:     cfg,
		caPool:  pool,
		version: opts.Version,
		addr:    opts.Addr,
		closed:  make(chan struct{}),
		timers:  map[string]*time.Timer{},
		lost:    map[string]*time.Timer{},
		conns:   map[net.Conn]struct{}{},
		lns:     map[netip.AddrPort]net.Listener{},
		certs:   map[netip.AddrPort]*tls.Certificate{},
		issued:  map[string]*tls.Certificate{},
	}
	s.def = &cfg.Certificates[0]
	// A client dialling an IP address sends no server name, so the
	// certificate is chosen by the address the connection came in on.
	cfg.Certificates = nil
	cfg.GetCertificate = s.certificateFor
	s.st = newState()
	s.st.deploymentsAvailable = opts.DeploymentsAvailable
	s.st.namespaceLinger = opts.NamespaceFinalizeDelay
	return s, nil
}

// Start listens on Options.Addr and serves until ctx ends or Close is
// called. It returns once the listener is bound.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil || s.closing {
		return errors.New("starting the Kubernetes API emulator: already started")
	}
	errLog := log.New(io.Discard, "", 0)
	if s.opts.Logger != nil {
		errLog = slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelDebug)
	}
	s.srv = &http.Server{
		Handler:           s,
		TLSConfig:         s.tls,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          errLog,
		// ResetConn and LoseReply reset HTTP/2 connections through it.
		ConnContext: connabort.ConnContext,
		ConnState:   s.trackConn,
	}
	if err := s.listen(ctx, s.addr); err != nil {
		s.srv = nil
		return err
	}
	context.AfterFunc(ctx, func() { _ = s.Close() })
	return nil
}

// listen binds a listener on addr and serves on it; when addr is the
// primary address with port 0, the primary address takes the port picked.
// s.mu is held.
func (s *Server) listen(ctx context.Context, addr netip.AddrPort) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr.String())
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	bound := addr
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok {
		bound = netip.AddrPortFrom(tcp.AddrPort().Addr().Unmap(), tcp.AddrPort().Port())
	}
	if addr == s.addr {
		s.addr = bound
	}
	s.lns[bound] = ln
	srv := s.srv
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return nil
}

// unlisten closes the listener on addr and resets the connections that
// came in on it. s.mu is held.
func (s *Server) unlisten(addr netip.AddrPort) {
	ln, ok := s.lns[addr]
	if !ok {
		return
	}
	_ = ln.Close()
	delete(s.lns, addr)
	delete(s.certs, addr)
	for c := range s.conns {
		if localAddrPort(c) == addr {
			_ = connabort.Reset(c)
			delete(s.conns, c)
		}
	}
}

// localAddrPort is the address a connection came in on.
func localAddrPort(c net.Conn) netip.AddrPort {
	tcp, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}
	}
	a := tcp.AddrPort()
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// certificateFor picks the serving certificate of the address a TLS
// connection came in on: the one SetEndpoints issued for it, else the
// certificate for Options.Addr and Options.SANs.
func (s *Server) certificateFor(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hello.Conn != nil {
		if c, ok := s.certs[localAddrPort(hello.Conn)]; ok {
			return c, nil
		}
	}
	return s.def, nil
}

// trackConn keeps the open connections, for SetServing.
func (s *Server) trackConn(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	}
}

// SetServing stops serving or serves again, as the cluster's API endpoint
// does when no kube-apiserver is behind it and when one is again (a
// Layer-2 VIP without holder, every control plane down). Stopping closes
// the listener and every open connection: new connections are refused, as
// where nothing listens, and requests under way get no answer. Serving
// again listens on the same address; the state (objects, log, faults) is
// kept. Serving reports whether the server serves now.
func (s *Server) SetServing(serving bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil || s.closing {
		return errors.New("the Kubernetes API emulator is not running")
	}
	if serving == (len(s.lns) > 0) {
		return nil
	}
	if serving {
		return s.listen(context.Background(), s.addr)
	}
	for addr := range s.lns {
		s.unlisten(addr)
	}
	return nil
}

// Endpoint is one address the API answers at, with the names and
// addresses of the serving certificate presented there.
type Endpoint struct {
	Addr netip.AddrPort
	// Hosts are the certificate's DNS names and IP addresses; empty means
	// the certificate for Options.Addr and Options.SANs.
	Hosts []string
}

// SetEndpoints makes the server answer at exactly the given addresses, as
// a kube-apiserver bound to every address answers at each address its
// machine holds: it listens on the new ones, closes the others (resetting
// their connections, as SetServing(false) does) and presents at each one
// the certificate for its Hosts, issued once per host list from the
// cluster's CA. The first endpoint becomes the primary address (Addr,
// URL, ClientConfig); with none the server answers nowhere and keeps its
// primary address. On a listen error the addresses bound so far stay.
func (s *Server) SetEndpoints(eps []Endpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil || s.closing {
		return errors.New("the Kubernetes API emulator is not running")
	}
	want := map[netip.AddrPort]bool{}
	for _, ep := range eps {
		want[ep.Addr] = true
	}
	for addr := range s.lns {
		if !want[addr] {
			s.unlisten(addr)
		}
	}
	for _, ep := range eps {
		cert := s.def
		if len(ep.Hosts) > 0 {
			key := strings.Join(ep.Hosts, ",")
			if cert = s.issued[key]; cert == nil {
				pem, keyPEM, err := ServingCert(s.opts.CACert, s.opts.CAKey, ep.Hosts...)
				if err != nil {
					return fmt.Errorf("issuing the serving certificate for %s: %w", ep.Addr, err)
				}
				pair, err := tls.X509KeyPair(pem, keyPEM)
				if err != nil {
					return fmt.Errorf("loading the serving certificate for %s: %w", ep.Addr, err)
				}
				cert = &pair
				s.issued[key] = cert
			}
		}
		s.certs[ep.Addr] = cert
		if _, ok := s.lns[ep.Addr]; ok {
			continue
		}
		if err := s.listen(context.Background(), ep.Addr); err != nil {
			delete(s.certs, ep.Addr)
			return err
		}
	}
	if len(eps) > 0 {
		s.addr = eps[0].Addr
	}
	return nil
}

// Serving reports whether the server accepts connections now, at any
// address.
func (s *Server) Serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lns) > 0 && !s.closing
}

// Addrs returns the addresses the server answers at now, the primary one
// first.
func (s *Server) Addrs() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	var others []netip.AddrPort
	for addr := range s.lns {
		if addr != s.addr {
			others = append(others, addr)
		}
	}
	slices.SortFunc(others, func(a, b netip.AddrPort) int { return a.Compare(b) })
	if _, ok := s.lns[s.addr]; ok {
		return append([]netip.AddrPort{s.addr}, others...)
	}
	return others
}

// Close stops the server: it closes the listener and every connection (so
// hung requests end) and stops the simulated kubelets' timers.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	close(s.closed)
	for name, t := range s.timers {
		t.Stop()
		delete(s.timers, name)
	}
	for name, t := range s.lost {
		t.Stop()
		delete(s.lost, name)
	}
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Close(); err != nil {
		return fmt.Errorf("closing the Kubernetes API emulator: %w", err)
	}
	return nil
}

// Addr returns the address the server listens on (with the port it picked
// if Options.Addr had port 0).
func (s *Server) Addr() netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL returns the server's base URL, https://IP:port.
func (s *Server) URL() string {
	return "https://" + s.Addr().String()
}

// SetVersion changes the version served at /version and the default
// kubelet version of nodes added afterwards, as an upgrade of the control
// plane would.
func (s *Server) SetVersion(v string) error {
	if _, _, err := parseVersion(v); err != nil {
		return fmt.Errorf("setting the Kubernetes version: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = v
	return nil
}

// Version returns the version served at /version.
func (s *Server) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// ClientConfig returns a client-go configuration for the server: its URL,
// the CA to verify it with, and a client certificate for user in groups
// signed by the cluster's CA. Call it after Start when Options.Addr has
// port 0.
func (s *Server) ClientConfig(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := ClientCert(s.opts.CACert, s.opts.CAKey, user, groups...)
	if err != nil {
		return nil, fmt.Errorf("issuing a client certificate for %q: %w", user, err)
	}
	return &rest.Config{
		Host: s.URL(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   s.opts.CACert,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
	}, nil
}

// AdminConfig returns ClientConfig for the cluster administrator: user
// "admin" in group system:masters, as in a Talos admin kubeconfig.
func (s *Server) AdminConfig() (*rest.Config, error) {
	return s.ClientConfig("admin", "system:masters")
}
