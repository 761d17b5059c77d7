package forge

import (
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultRateLimit is each user's hourly request budget when
// Options.RateLimit is zero: GitHub's primary rate limit for a personal
// access token.
const DefaultRateLimit = 5000

// Options configures a Forge.
type Options struct {
	// Dir is the directory the bare repositories are created in, as
	// Dir/owner/name.git. It must exist; tests pass t.TempDir().
	Dir string
	// Users are the forge's accounts. More can be added with AddUser.
	Users []User
	// RateLimit is each user's primary rate limit per hour; zero means
	// DefaultRateLimit.
	RateLimit int
	// Git is the git executable whose http-backend serves smart HTTP; empty
	// means "git" found on PATH.
	Git string
	// Logger receives one debug record per request and git
	// http-backend's error output; nil discards them. Tokens are never
	// logged.
	Logger *slog.Logger
}

// User is an account of the forge.
type User struct {
	// Login is the user name, unique without regard to case.
	Login string
	// Token is the credential the user authenticates with, to the API and
	// to git. A user without a token exists (it can be granted
	// permissions and be asked about) but cannot authenticate.
	Token string
	// Name and Email are the identity of the merge commits the user makes;
	// empty values mean the login and login@users.noreply.github.com.
	Name, Email string
}

// Permission is a user's access to a repository, as the collaborator
// permission endpoint reports it.
type Permission string

// The permission levels, from the most to the least.
const (
	PermissionAdmin Permission = "admin"
	PermissionWrite Permission = "write"
	PermissionRead  Permission = "read"
	PermissionNone  Permission = "none"
)

func (p Permission) rank() int {
	switch p {
	case PermissionAdmin:
		return 3
	case PermissionWrite:
		return 2
	case PermissionRead:
		return 1
	}
	return 0
}

// Request is one entry of the request log.
type Request struct {
	// Time is when the request arrived.
	Time time.Time
	// Method and Path are the request's; Query is its raw query string.
	Method, Path, Query string
	// Op is the operation name (see Handler), or "unimplemented".
	Op string
	// Status is the HTTP status answered, or 0 when the client gave up
	// before an answer or the connection was reset. For a lost reply it is
	// the status the answer would have had.
	Status int
	// User is the authenticated login, empty when the request carried no
	// valid credentials.
	User string
	// Fault is the injected fault that kept the answer from the client:
	// "hang", "reset" or "lost-reply"; empty otherwise.
	Fault string
}

// Forge is the emulated GitHub. It is safe for concurrent use.
type Forge struct {
	dir    string
	git    string
	limit  int
	logger *slog.Logger
	routes []route

	// gitMu serialises writes to the repositories on disk (pushes, the
	// forge's own commits and ref updates) against each other and against
	// reads by git http-backend. It is taken before mu, never while mu is
	// held.
	gitMu sync.RWMutex

	// closed is closed by Close, releasing hung requests.
	closed    chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	users  map[string]*account // by lower-case login
	anon   *account            // the unauthenticated requests' budget
	repos  map[string]*Repo    // by lower-case owner/name
	order  []*Repo
	nextID int64
	faults faultTable
	log    []Request
}

type account struct {
	User
	id    int64
	used  int
	reset time.Time
}

// New returns a Forge keeping its repositories under o.Dir.
func New(o Options) (*Forge, error) {
	if o.Dir == "" {
		return nil, errors.New("creating the forge: no repository directory given")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving the repository directory: %w", err)
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("checking the repository directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("checking the repository directory: %s is not a directory", dir)
	}
	gitName := o.Git
	if gitName == "" {
		gitName = "git"
	}
	gitPath, err := exec.LookPath(gitName)
	if err != nil {
		return nil, fmt.Errorf("finding the git executable: %w", err)
	}
	if gitPath, err = filepath.Abs(gitPath); err != nil {
		return nil, fmt.Errorf("resolving the git executable: %w", err)
	}
	limit := o.RateLimit
	if limit <= 0 {
		limit = DefaultRateLimit
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := &Forge{
		dir:    dir,
		git:    gitPath,
		limit:  limit,
		logger: logger,
		users:  map[string]*account{},
		anon:   &account{},
		repos:  map[string]*Repo{},
		closed: make(chan struct{}),
	}
	f.routes = f.apiRoutes()
	for _, u := range o.Users {
		if err := f.AddUser(u); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// AddUser adds an account. Logins are unique without regard to case, and
// so are tokens.
func (f *Forge) AddUser(u User) error {
	if !loginPattern.MatchString(u.Login) {
		return fmt.Errorf("adding user %q: invalid login", u.Login)
	}
	if u.Name == "" {
		u.Name = u.Login
	}
	if u.Email == "" {
		u.Email = u.Login + "@users.noreply.github.com"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.users[strings.ToLower(u.Login)]; ok {
		return fmt.Errorf("adding user %q: the login is taken", u.Login)
	}
	if u.Token != "" {
		for _, a := range f.users {
			if a.Token == u.Token {
				return fmt.Errorf("adding user %q: the token belongs to another user", u.Login)
			}
		}
	}
	f.nextID++
	f.users[strings.ToLower(u.Login)] = &account{User: u, id: f.nextID}
	return nil
}

// RateRemaining returns the requests left in the user's current rate-limit
// window, as the X-RateLimit-Remaining header reports it.
func (f *Forge) RateRemaining(login string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.users[strings.ToLower(login)]
	if a == nil {
		return 0
	}
	a.roll(time.Now())
	return max(f.limit-a.used, 0)
}

// Log returns a copy of the request log, in the order the requests were
// answered.
func (f *Forge) Log() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// Handler returns the HTTP handler serving the REST API at the root (and
// under /api/v3, the GitHub Enterprise prefix) and git smart HTTP at
// /{owner}/{repo}.git and /{owner}/{repo}.
//
// Operation names, used by the log and by fault injection:
//
//	user.get                 GET    /user
//	users.get                GET    /users/{login}
//	ratelimit.get            GET    /rate_limit                      (not counted)
//	repos.get                GET    /repos/{o}/{r}
//	pulls.list               GET    /repos/{o}/{r}/pulls
//	pulls.create             POST   /repos/{o}/{r}/pulls
//	pulls.get                GET    /repos/{o}/{r}/pulls/{n}
//	pulls.update             PATCH  /repos/{o}/{r}/pulls/{n}
//	pulls.files              GET    /repos/{o}/{r}/pulls/{n}/files
//	pulls.merged             GET    /repos/{o}/{r}/pulls/{n}/merge
//	pulls.merge              PUT    /repos/{o}/{r}/pulls/{n}/merge
//	comments.list            GET    /repos/{o}/{r}/issues/{n}/comments
//	comments.create          POST   /repos/{o}/{r}/issues/{n}/comments
//	comments.list-repo       GET    /repos/{o}/{r}/issues/comments
//	comments.get             GET    /repos/{o}/{r}/issues/comments/{id}
//	comments.update          PATCH  /repos/{o}/{r}/issues/comments/{id}
//	comments.delete          DELETE /repos/{o}/{r}/issues/comments/{id}
//	statuses.create          POST   /repos/{o}/{r}/statuses/{sha}
//	statuses.list            GET    /repos/{o}/{r}/commits/{ref}/statuses (and /statuses/{ref})
//	status.combined          GET    /repos/{o}/{r}/commits/{ref}/status
//	collaborators.permission GET    /repos/{o}/{r}/collaborators/{user}/permission
//	releases.list            GET    /repos/{o}/{r}/releases
//	releases.latest          GET    /repos/{o}/{r}/releases/latest
//	releases.get             GET    /repos/{o}/{r}/releases/tags/{tag}
//	git.upload-pack.refs     GET    /{o}/{r}.git/info/refs?service=git-upload-pack
//	git.upload-pack          POST   /{o}/{r}.git/git-upload-pack
//	git.receive-pack.refs    GET    /{o}/{r}.git/info/refs?service=git-receive-pack
//	git.receive-pack         POST   /{o}/{r}.git/git-receive-pack
//
// API requests authenticate with "Authorization: token T", "Bearer T" or
// basic authentication with the token as password (or as user name with an
// empty or "x-oauth-basic" password); git requests with basic
// authentication after a 401 challenge. Reading is open to every
// authenticated user, as on a public repository; pushing, merging and
// creating statuses need the write permission, and only users with it see
// draft releases.
func (f *Forge) Handler() http.Handler {
	return http.HandlerFunc(f.serveHTTP)
}

func (f *Forge) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err != nil || !ap.Addr().Unmap().IsLoopback() {
		http.Error(w, "the forge serves loopback clients only", http.StatusForbidden)
		return
	}
	segs, ok := splitPath(r.URL.EscapedPath())
	if !ok {
		f.unimplemented(w, r)
		return
	}
	if g, ok := matchGit(r, segs); ok {
		f.serveGit(w, r, g)
		return
	}
	prefix := ""
	if len(segs) >= 2 && segs[0] == "api" && segs[1] == "v3" {
		segs, prefix = segs[2:], "/api/v3"
	}
	for i := range f.routes {
		rt := &f.routes[i]
		if params, ok := rt.match(r.Method, segs); ok {
			f.serveAPI(w, r, rt, params, prefix)
			return
		}
	}
	f.unimplemented(w, r)
}

func (f *Forge) unimplemented(w http.ResponseWriter, r *http.Request) {
	msg := fmt.Sprintf("Not Implemented: the forge does not emulate %s %s", r.Method, r.URL.Path)
	writeJSON(w, http.StatusNotImplemented, apiError{Message: msg, DocumentationURL: docsURL})
	f.record(Request{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Op: "unimplemented", Status: http.StatusNotImplemented})
}

func (f *Forge) record(rec Request) {
	f.mu.Lock()
	f.log = append(f.log, rec)
	f.mu.Unlock()
	f.logger.Debug("forge request", "method", rec.Method, "path", rec.Path, "op", rec.Op,
		"status", rec.Status, "user", rec.User)
}

// authenticate returns the account a request's credentials belong to. It
// returns nil and the message to answer with when there are none or they
// are wrong.
func (f *Forge) authenticate(r *http.Request) (*account, string) {
	token, ok := credential(r)
	if !ok {
		return nil, "Requires authentication"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var found *account
	for _, a := range f.users {
		if a.Token != "" && subtle.ConstantTimeCompare([]byte(a.Token), []byte(token)) == 1 {
			found = a
		}
	}
	if found == nil {
		return nil, "Bad credentials"
	}
	return found, ""
}

// credential extracts the token from the Authorization header.
func credential(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	switch strings.ToLower(scheme) {
	case "token", "bearer":
		return rest, rest != ""
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return "", false
		}
		user, pass, _ := strings.Cut(string(raw), ":")
		if pass == "" || pass == "x-oauth-basic" {
			return user, user != ""
		}
		return pass, true
	}
	return "", false
}

// lookupUser returns the account with the login. The caller holds f.mu.
func (f *Forge) lookupUser(login string) *account {
	return f.users[strings.ToLower(login)]
}

// roll starts a new rate-limit window when the current one has ended.
func (a *account) roll(now time.Time) {
	if !now.Before(a.reset) {
		a.used = 0
		a.reset = now.Add(time.Hour).Truncate(time.Second)
	}
}
