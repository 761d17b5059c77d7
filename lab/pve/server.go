package pve

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Version is the Proxmox VE version the emulator reports.
const Version = "9.0.10"

// DefaultTokenID is the API token accepted when Options.TokenID is empty.
const DefaultTokenID = "root@pam!taloslab"

// DefaultTokenSecret is the token secret accepted when Options.TokenSecret is
// empty. It is a lab value, not a credential.
const DefaultTokenSecret = "c0ffee00-0000-4000-8000-00000000cafe"

// DefaultTaskDuration is how long an asynchronous task runs when
// Options.TaskDuration is zero.
const DefaultTaskDuration = 5 * time.Millisecond

const apiPrefix = "/api2/json"

// Options configures a Server. The zero value is usable: three nodes
// (pve1, pve2, pve3), the default token, the default storages and bridges.
type Options struct {
	// Nodes are the cluster's node names; empty means pve1, pve2, pve3.
	Nodes []string
	// TokenID (user@realm!name) and TokenSecret are the primary API token;
	// empty values mean DefaultTokenID and DefaultTokenSecret. The token is
	// not privilege-separated, and its user holds every privilege: root@pam
	// does without an ACL, any other user gets Administrator on /.
	TokenID, TokenSecret string
	// Tokens are further API tokens accepted besides the primary one
	// (RestrictedToken, for example).
	Tokens []Token
	// ACLs are the access control list entries of user.cfg (see
	// RestrictedACLs); Roles are custom roles (name -> privileges) next to
	// the predefined ones, and Groups the groups (name -> user IDs) ACL
	// entries may name. Every request is checked against them the way
	// Proxmox VE 9 checks it: 403 "Permission check failed (<path>,
	// <privilege>)".
	ACLs   []ACL
	Roles  map[string][]string
	Groups map[string][]string
	// TaskDuration is how long an asynchronous task stays "running"; its
	// effect (VM created, configuration changed, VM started or stopped,
	// disk resized, VM destroyed, volume uploaded or deleted) is applied
	// when it ends, as a Proxmox VE worker's is. Zero means
	// DefaultTaskDuration; a negative value makes tasks end, with their
	// effect, before the call that started them answers. proxmox-api-go
	// polls a running task every two seconds, so tests that want speed use
	// a negative value.
	TaskDuration time.Duration
	// StatsInterval is how often pvestatd broadcasts guest status: the
	// name, status, uptime and resource figures of VMs in
	// /cluster/resources (and pool member lists) are those of the last
	// broadcast, as Proxmox VE reads them from the RRD, and a VM not yet
	// broadcast shows only its ID, node, type, tags, lock, pool and status
	// "unknown". Proxmox VE broadcasts every 10 seconds (pvestatd's
	// $updatetime). Zero reports live values, a leniency: a client that
	// reads names or power states there right after a change sees them
	// sooner than it would on Proxmox VE.
	StatsInterval time.Duration
	// Machines turns started VMs into simulated machines; nil means VMs only
	// change state and their guest agent never answers.
	Machines MachineHooks
	// Storages replaces DefaultStorages when not nil.
	Storages []Storage
	// Bridges are the network bridges (or SDN VNets) every node has; nil
	// means vmbr0 and vmbr1. Starting a VM whose NIC names another bridge
	// fails like it does on Proxmox VE.
	Bridges []string
	// DatacenterFirewall is the initial state of the datacenter firewall
	// (off on a fresh Proxmox VE installation).
	DatacenterFirewall bool
	// HTTPClient fetches the URLs given to download-url; nil means
	// http.DefaultClient.
	HTTPClient *http.Client
	// Logger receives one debug record per request (method, path, operation,
	// status); nil discards them. Credentials are never logged.
	Logger *slog.Logger
}

// Op is one entry of the operation log.
type Op struct {
	// Time is when the request arrived.
	Time time.Time
	// Name is the operation name (see Handler), "auth" for a request refused
	// for its credentials, or "unimplemented".
	Name string
	// Method and Path are the request's; Path has the /api2/json prefix
	// removed. Query is the raw query string.
	Method, Path, Query string
	// Status is the HTTP status answered, or 0 when the client gave up
	// before an answer (for example on a hung operation) or the connection
	// was reset. For a lost reply it is the status the answer would have
	// had.
	Status int
	// Message is the error message of a failed request, empty on success.
	Message string
	// Fault is the injected fault that kept the answer from the client:
	// "hang", "reset" or "lost-reply"; empty otherwise.
	Fault string
}

// Server is the emulated Proxmox VE cluster. It is safe for concurrent use.
type Server struct {
	opts    Options
	tokenID string
	secret  string
	// others are the further tokens, with their secrets.
	others   []Token
	taskTime time.Duration
	logger   *slog.Logger
	mux      *http.ServeMux
	hooks    hookQueue
	closed   chan struct{}
	closeMu  sync.Once
	started  time.Time

	mu        sync.Mutex
	nodes     []*node
	storages  []Storage
	volumes   map[volKey]*volume
	vms       map[int]*vm
	pools     map[string]*pool
	poolOrder []string
	// rootPrivs are root@pam's privileges (permissions), made once.
	rootOnce  sync.Once
	rootPrivs map[string]bool
	tasks     map[string]*task
	active    []*task                // tasks not yet ended
	rrd       map[int]map[string]any // last pvestatd broadcast, by VM ID
	rrdTick   int64
	taskSeq   int
	clusterFW map[string]string
	faults    faultTable
	access    *access
	log       []Op
}

type node struct {
	name   string
	online bool
}

// New returns a Server with the given options.
func New(o Options) *Server {
	if len(o.Nodes) == 0 {
		o.Nodes = []string{"pve1", "pve2", "pve3"}
	}
	if o.TokenID == "" {
		o.TokenID = DefaultTokenID
	}
	if o.TokenSecret == "" {
		o.TokenSecret = DefaultTokenSecret
	}
	if o.Bridges == nil {
		o.Bridges = []string{"vmbr0", "vmbr1"}
	}
	storages := o.Storages
	if storages == nil {
		storages = DefaultStorages()
	}
	taskTime := o.TaskDuration
	switch {
	case taskTime == 0:
		taskTime = DefaultTaskDuration
	case taskTime < 0:
		taskTime = 0
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:      o,
		tokenID:   o.TokenID,
		secret:    o.TokenSecret,
		taskTime:  taskTime,
		logger:    logger,
		closed:    make(chan struct{}),
		started:   time.Now(),
		volumes:   map[volKey]*volume{},
		vms:       map[int]*vm{},
		pools:     map[string]*pool{},
		tasks:     map[string]*task{},
		clusterFW: map[string]string{},
		faults:    newFaultTable(),
		access:    newAccess(o, Token{ID: o.TokenID}),
		others:    append([]Token(nil), o.Tokens...),
	}
	s.opts.TokenSecret = "" // kept only in s.secret
	s.opts.Tokens = nil     // kept only in s.others
	s.hooks.h = o.Machines
	for _, n := range o.Nodes {
		s.nodes = append(s.nodes, &node{name: n, online: true})
	}
	for _, st := range storages {
		st.Content = append([]string(nil), st.Content...)
		st.Nodes = append([]string(nil), st.Nodes...)
		s.storages = append(s.storages, st)
	}
	if o.DatacenterFirewall {
		s.clusterFW["enable"] = "1"
	}
	s.mux = http.NewServeMux()
	s.routes()
	return s
}

// Handler returns the HTTP handler serving the API under /api2/json.
//
// Operation names, used by the log and by fault injection:
//
//	version.get            GET    /version
//	nodes.list             GET    /nodes
//	node.status            GET    /nodes/{node}/status
//	node.network           GET    /nodes/{node}/network
//	cluster.status         GET    /cluster/status
//	cluster.resources      GET    /cluster/resources
//	cluster.nextid         GET    /cluster/nextid
//	access.permissions     GET    /access/permissions
//	ha.resources.list      GET    /cluster/ha/resources
//	ha.resources.get       GET    /cluster/ha/resources/{sid}
//	storage.config.list    GET    /storage
//	storage.config.get     GET    /storage/{storage}
//	storage.list           GET    /nodes/{node}/storage
//	storage.get            GET    /nodes/{node}/storage/{storage}
//	storage.status         GET    /nodes/{node}/storage/{storage}/status
//	storage.content.list   GET    /nodes/{node}/storage/{storage}/content
//	storage.content.get    GET    /nodes/{node}/storage/{storage}/content/{volume}
//	storage.content.delete DELETE /nodes/{node}/storage/{storage}/content/{volume}  (task imgdel)
//	storage.upload         POST   /nodes/{node}/storage/{storage}/upload           (task imgcopy)
//	storage.download       POST   /nodes/{node}/storage/{storage}/download-url     (task download)
//	pool.list              GET    /pools
//	pool.create            POST   /pools
//	pool.get               GET    /pools/{pool}
//	pool.update            PUT    /pools/{pool} and PUT /pools
//	pool.delete            DELETE /pools/{pool} and DELETE /pools
//	qemu.list              GET    /nodes/{node}/qemu
//	qemu.create            POST   /nodes/{node}/qemu                               (task qmcreate)
//	qemu.config.get        GET    /nodes/{node}/qemu/{vmid}/config
//	qemu.config.update     POST   /nodes/{node}/qemu/{vmid}/config                 (task qmconfig)
//	qemu.config.set        PUT    /nodes/{node}/qemu/{vmid}/config
//	qemu.pending           GET    /nodes/{node}/qemu/{vmid}/pending
//	qemu.resize            PUT    /nodes/{node}/qemu/{vmid}/resize                 (task resize)
//	qemu.status            GET    /nodes/{node}/qemu/{vmid}/status/current
//	qemu.start             POST   /nodes/{node}/qemu/{vmid}/status/start           (task qmstart)
//	qemu.stop              POST   /nodes/{node}/qemu/{vmid}/status/stop            (task qmstop)
//	qemu.shutdown          POST   /nodes/{node}/qemu/{vmid}/status/shutdown        (task qmshutdown)
//	qemu.reboot            POST   /nodes/{node}/qemu/{vmid}/status/reboot          (task qmreboot)
//	qemu.reset             POST   /nodes/{node}/qemu/{vmid}/status/reset           (task qmreset)
//	qemu.delete            DELETE /nodes/{node}/qemu/{vmid}                        (task qmdestroy)
//	qemu.agent.interfaces  GET    /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces
//	qemu.agent.ping        POST   /nodes/{node}/qemu/{vmid}/agent/ping
//	firewall.options.get   GET    /nodes/{node}/qemu/{vmid}/firewall/options
//	firewall.options.set   PUT    /nodes/{node}/qemu/{vmid}/firewall/options
//	firewall.rules.list    GET    /nodes/{node}/qemu/{vmid}/firewall/rules
//	firewall.rules.create  POST   /nodes/{node}/qemu/{vmid}/firewall/rules
//	firewall.rules.get     GET    /nodes/{node}/qemu/{vmid}/firewall/rules/{pos}
//	firewall.rules.update  PUT    /nodes/{node}/qemu/{vmid}/firewall/rules/{pos}
//	firewall.rules.delete  DELETE /nodes/{node}/qemu/{vmid}/firewall/rules/{pos}
//	cluster.firewall.options.get GET /cluster/firewall/options
//	cluster.firewall.options.set PUT /cluster/firewall/options
//	task.list              GET    /nodes/{node}/tasks
//	task.status            GET    /nodes/{node}/tasks/{upid}/status
//	task.log               GET    /nodes/{node}/tasks/{upid}/log
//	sdn                    any    /cluster/sdn/... (answers 501 for now)
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Log returns a copy of the operation log, in the order the answers were
// given.
func (s *Server) Log() []Op {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Op(nil), s.log...)
}

// Close releases hung requests. The handler keeps working afterwards, but
// Hang no longer blocks.
func (s *Server) Close() {
	s.closeMu.Do(func() { close(s.closed) })
}

// SetNodeOnline marks a node online or offline. Requests for an offline
// node's resources answer 595 like a Proxmox VE cluster whose node is
// unreachable, and the node is reported offline in lists.
func (s *Server) SetNodeOnline(name string, online bool) {
	s.lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if n.name == name {
			n.online = online
		}
	}
}

type ctxKey struct{}

// statusWriter notes an answer's status and logs the request before the
// answer goes out, so a client never sees an answer the log lacks.
type statusWriter struct {
	http.ResponseWriter
	status int
	msg    string
	logged bool
	log    func()
}

func (w *statusWriter) note(code int) {
	if w.status == 0 {
		w.status = code
	}
	if !w.logged {
		w.logged = true
		w.log()
	}
}

// logNow logs the request now, with the status noted so far, unless it
// was logged already.
func (w *statusWriter) logNow() {
	if !w.logged {
		w.logged = true
		w.log()
	}
}

func (w *statusWriter) WriteHeader(code int) {
	w.note(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.note(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, apiPrefix)
	if path != "/" {
		path = strings.TrimRight(path, "/")
	}
	rec := &Op{Time: time.Now(), Method: r.Method, Path: path, Query: r.URL.RawQuery}
	sw := &statusWriter{ResponseWriter: w}
	sw.log = func() {
		rec.Status = sw.status
		rec.Message = sw.msg
		s.mu.Lock()
		s.log = append(s.log, *rec)
		s.mu.Unlock()
		s.logger.Debug("pve request", "method", rec.Method, "path", rec.Path, "op", rec.Name, "status", rec.Status)
	}
	// A hung request that never answered is logged with status 0.
	defer sw.logNow()

	if !strings.HasPrefix(r.URL.Path, apiPrefix+"/") {
		rec.Name = "unimplemented"
		s.notImplemented(sw, r.Method, r.URL.Path)
		return
	}
	authid, msg, ok := s.authorize(r)
	if !ok {
		rec.Name = "auth"
		writeError(sw, &apiError{status: http.StatusUnauthorized, msg: msg})
		return
	}
	ctx := context.WithValue(context.WithValue(r.Context(), ctxKey{}, rec), authKey{}, authid)
	r2 := r.Clone(ctx)
	r2.URL.Path = apiPrefix + path
	r2.URL.RawPath = ""
	s.mux.ServeHTTP(sw, r2)
}

// authorize checks the API token and returns its ID, which the
// permission checks use. The message never contains the secret.
func (s *Server) authorize(r *http.Request) (string, string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", "No ticket", false
	}
	v, ok := strings.CutPrefix(h, "PVEAPIToken=")
	if !ok {
		return "", "No ticket", false
	}
	id, secret, ok := strings.Cut(v, "=")
	if !ok {
		return "", "invalid token value!", false
	}
	match := func(tokenID, tokenSecret string) bool {
		idOK := subtle.ConstantTimeCompare([]byte(id), []byte(tokenID)) == 1
		secretOK := subtle.ConstantTimeCompare([]byte(secret), []byte(tokenSecret)) == 1
		return idOK && secretOK
	}
	if match(s.tokenID, s.secret) {
		return s.tokenID, "", true
	}
	for _, t := range s.others {
		if match(t.ID, t.Secret) {
			return t.ID, "", true
		}
	}
	return "", "invalid token value!", false
}

// authKey is the context key of the ID of the token a request carries.
type authKey struct{}

// caller returns the ID of the token the request was authorized with.
func caller(r *http.Request) string {
	id, _ := r.Context().Value(authKey{}).(string)
	return id
}

// handlerFunc is an API handler: it returns the value of "data" or an error.
type handlerFunc func(r *http.Request) (any, error)

// route registers a handler under an operation name; fault injection runs
// before the handler.
func (s *Server) route(method, path, op string, h handlerFunc) {
	s.mux.HandleFunc(method+" "+apiPrefix+path, func(w http.ResponseWriter, r *http.Request) {
		if rec, ok := r.Context().Value(ctxKey{}).(*Op); ok {
			rec.Name = op
		}
		handle, lose := s.inject(w, r, op)
		if !handle {
			return
		}
		var data any
		err := s.checkAPIPermissions(r, op)
		if err == nil {
			data, err = h(r)
		}
		if lose {
			loseReply(w, r, err)
			return
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": data})
	})
}

func (s *Server) notImplemented(w http.ResponseWriter, method, path string) {
	writeError(w, notImplementedError(method, path))
}

func notImplementedError(method, path string) *apiError {
	return &apiError{
		status: http.StatusNotImplemented,
		msg:    fmt.Sprintf("Method '%s %s' not implemented", method, strings.TrimPrefix(path, apiPrefix)),
	}
}

// apiError is an error answered with a status code and the Proxmox VE error
// body.
type apiError struct {
	status int
	msg    string
	errs   map[string]string
}

func (e *apiError) Error() string { return e.msg }

// errorf is a 500 error, the status Proxmox VE answers when an API call
// dies.
func errorf(format string, args ...any) *apiError {
	return &apiError{status: http.StatusInternalServerError, msg: fmt.Sprintf(format, args...)}
}

// paramError is a 400 "Parameter verification failed." error.
func paramError(errs map[string]string) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", errs: errs}
}

func paramErr(key, msg string) *apiError { return paramError(map[string]string{key: msg}) }

func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = errorf("%s", err.Error())
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.msg = ae.msg
	}
	body := map[string]any{"data": nil, "message": ae.msg + "\n"}
	if len(ae.errs) > 0 {
		errs := map[string]string{}
		for k, v := range ae.errs {
			errs[k] = v + "\n"
		}
		body["errors"] = errs
	}
	writeJSON(w, ae.status, body)
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"data":null,"message":"encoding the answer\n"}`)
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.Header().Set("Cache-Control", "max-age=0")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// form parses the request's parameters: the query string for GET and
// DELETE, the url-encoded body (and the query) for POST and PUT.
func form(r *http.Request) (url.Values, error) {
	if err := r.ParseForm(); err != nil {
		return nil, paramErr("body", "unable to parse the request body: "+err.Error())
	}
	return r.Form, nil
}

// lookupNode checks that a node exists and is online. The caller holds s.mu.
func (s *Server) lookupNode(name string) (*node, error) {
	for _, n := range s.nodes {
		if n.name == name {
			if !n.online {
				return nil, &apiError{status: 595, msg: fmt.Sprintf("Connection refused (node '%s' is offline)", name)}
			}
			return n, nil
		}
	}
	return nil, errorf("no such cluster node '%s'", name)
}

// requestOp returns the operation name of the request being served.
func requestOp(r *http.Request) string {
	if rec, ok := r.Context().Value(ctxKey{}).(*Op); ok {
		return rec.Name
	}
	return ""
}
