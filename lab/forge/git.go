package forge

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cgi"
	"strings"
	"time"

	"github.com/taloscluster/taloscluster/lab/internal/connabort"
)

// maxGitBody bounds a git request body the forge buffers because its
// length is not known up front (CGI needs CONTENT_LENGTH).
const maxGitBody = 1 << 30

// gitRequest is a smart-HTTP request for a repository.
type gitRequest struct {
	owner, name string
	// tail is the part of the path after the repository:
	// info/refs, git-upload-pack or git-receive-pack.
	tail    string
	op      string
	receive bool // a push
	post    bool // the request carrying the pack (not the advertisement)
}

// matchGit recognises the smart-HTTP endpoints of a repository, with or
// without the .git suffix. The dumb protocol is not served.
func matchGit(r *http.Request, segs []string) (gitRequest, bool) {
	var g gitRequest
	switch {
	case len(segs) == 4 && segs[2] == "info" && segs[3] == "refs" && r.Method == http.MethodGet:
		g.tail = "info/refs"
		switch r.URL.Query().Get("service") {
		case "git-upload-pack":
			g.op = "git.upload-pack.refs"
		case "git-receive-pack":
			g.op, g.receive = "git.receive-pack.refs", true
		default:
			return g, false
		}
	case len(segs) == 3 && r.Method == http.MethodPost && segs[2] == "git-upload-pack":
		g.tail, g.op, g.post = segs[2], "git.upload-pack", true
	case len(segs) == 3 && r.Method == http.MethodPost && segs[2] == "git-receive-pack":
		g.tail, g.op, g.post, g.receive = segs[2], "git.receive-pack", true, true
	default:
		return g, false
	}
	g.owner, g.name = segs[0], strings.TrimSuffix(segs[1], ".git")
	return g, true
}

// statusWriter records the status a handler answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush sends buffered data to the client, so packs stream.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveGit serves one smart-HTTP request by running git http-backend as a
// CGI program on the repository, after authenticating and authorising it
// like GitHub: 401 with a Basic challenge without valid credentials, 404
// for an unknown repository, 403 for a push without write permission.
// After a push, open pull requests follow their head branches.
func (f *Forge) serveGit(w http.ResponseWriter, r *http.Request, g gitRequest) {
	rec := Request{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Op: g.op}
	sw := &statusWriter{ResponseWriter: w}
	logged := false
	logNow := func() {
		if !logged {
			logged = true
			rec.Status = sw.status
			f.record(rec)
		}
	}
	defer logNow()
	if !f.delay(r, g.op) {
		return
	}
	acct, _ := f.authenticate(r)
	if acct == nil {
		sw.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		http.Error(sw, "Invalid username or token. Password authentication is not supported for Git operations.", http.StatusUnauthorized)
		return
	}
	rec.User = acct.Login
	repo := f.Repo(g.owner, g.name)
	if repo == nil {
		http.Error(sw, "Repository not found.", http.StatusNotFound)
		return
	}
	f.mu.Lock()
	perm := repo.permission(acct.Login)
	rule := f.faults.takeFail(g.op)
	var drop dropKind
	if rule == nil {
		drop = f.faults.takeDrop(g.op)
	}
	f.mu.Unlock()
	if g.receive && perm.rank() < PermissionWrite.rank() {
		http.Error(sw, fmt.Sprintf("Permission to %s.git denied to %s.", repo.FullName(), acct.Login), http.StatusForbidden)
		return
	}
	rec.Fault = string(drop)
	switch {
	case rule != nil:
		http.Error(sw, http.StatusText(rule.status), rule.status)
	case drop == dropHang:
		f.hold(w, r)
	case drop == dropReset:
		logNow() // before the client can notice
		connabort.HTTP(w, r)
	case drop == dropLost:
		// git answers into nothing; the request is logged with the status
		// git gave, then its connection is reset.
		sw.ResponseWriter = &connabort.Unsent{}
		f.runBackend(sw, r, g, repo, acct.Login)
		logNow()
		connabort.HTTP(w, r)
	default:
		f.runBackend(sw, r, g, repo, acct.Login)
	}
}

// runBackend runs git http-backend for an authorised smart-HTTP request of
// login on repo, and brings open pull requests up to date after a push.
func (f *Forge) runBackend(sw *statusWriter, r *http.Request, g gitRequest, repo *Repo, login string) {
	req := r.Clone(r.Context())
	req.Header.Del("Authorization") // the CGI program sees headers as HTTP_* variables
	req.URL.Path = "/" + repo.FullName() + ".git/" + g.tail
	req.URL.RawPath = ""
	if g.post && (req.ContentLength < 0 || len(req.TransferEncoding) > 0) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxGitBody+1))
		if err != nil || len(body) > maxGitBody {
			http.Error(sw, "request body unreadable or too large", http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.TransferEncoding = nil
	}
	var stderr bytes.Buffer
	backend := &cgi.Handler{
		Path: f.git,
		Args: []string{"http-backend"},
		Root: "/",
		Dir:  f.dir,
		Env: []string{
			"GIT_PROJECT_ROOT=" + f.dir,
			"GIT_HTTP_EXPORT_ALL=1",
			"REMOTE_USER=" + login,
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=/dev/null",
			"HOME=" + f.dir,
		},
		Stderr: &stderr,
		Logger: slog.NewLogLogger(f.logger.Handler(), slog.LevelWarn),
	}
	if g.receive && g.post {
		f.gitMu.Lock()
		backend.ServeHTTP(sw, req)
		f.gitMu.Unlock()
	} else {
		f.gitMu.RLock()
		backend.ServeHTTP(sw, req)
		f.gitMu.RUnlock()
	}
	if stderr.Len() > 0 {
		f.logger.Debug("forge git http-backend output", "repo", repo.FullName(), "op", g.op,
			"stderr", strings.TrimSpace(stderr.String()))
	}
	if g.receive && g.post && sw.status == http.StatusOK {
		if err := f.syncPulls(); err != nil {
			f.logger.Warn("forge sync after a push failed", "repo", repo.FullName(), "err", err)
		}
	}
}
