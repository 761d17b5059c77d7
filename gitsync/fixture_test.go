package gitsync_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/gitsync"
)

// origin is a fixture remote built with plain git: a bare repository that
// plays GitHub, and a work tree that commits and pushes to it. Pull-request
// heads are refs/pull/N/head in the bare repository, as on GitHub.
type origin struct {
	t     testing.TB
	root  string // holds remote.git and work
	bare  string
	work  string
	clock int
}

func newOrigin(t testing.TB) *origin {
	t.Helper()
	root := t.TempDir()
	o := &origin{t: t, root: root, bare: filepath.Join(root, "remote.git"), work: filepath.Join(root, "work")}
	o.git(root, "init", "-q", "--bare", "-b", "main", o.bare)
	o.git(root, "init", "-q", "-b", "main", o.work)
	o.git(o.work, "remote", "add", "origin", o.bare)
	return o
}

// git runs git in dir with a clean, deterministic environment and returns
// its trimmed output.
func (o *origin) git(dir string, args ...string) string {
	o.t.Helper()
	o.clock++
	date := fmt.Sprintf("%d +0000", 1_700_000_000+o.clock*60)
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+o.root,
		"GIT_AUTHOR_NAME=Ada Author", "GIT_AUTHOR_EMAIL=ada@example.test",
		"GIT_COMMITTER_NAME=Cy Committer", "GIT_COMMITTER_EMAIL=cy@example.test",
		"GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date,
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		o.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// write sets files in the work tree (slash paths to contents).
func (o *origin) write(files map[string]string) {
	o.t.Helper()
	for p, content := range files {
		full := filepath.Join(o.work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			o.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			o.t.Fatal(err)
		}
	}
}

// remove deletes paths from the work tree.
func (o *origin) remove(paths ...string) {
	o.t.Helper()
	for _, p := range paths {
		if err := os.RemoveAll(filepath.Join(o.work, filepath.FromSlash(p))); err != nil {
			o.t.Fatal(err)
		}
	}
}

// symlink creates a symbolic link in the work tree.
func (o *origin) symlink(p, target string) {
	o.t.Helper()
	full := filepath.Join(o.work, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		o.t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		o.t.Fatal(err)
	}
}

// commit commits the whole work tree and returns the new commit's SHA.
func (o *origin) commit(msg string) string {
	o.t.Helper()
	o.git(o.work, "add", "-A")
	o.git(o.work, "commit", "-q", "--allow-empty", "-m", msg)
	return o.git(o.work, "rev-parse", "HEAD")
}

// pushMain publishes the work tree's HEAD as the remote's main.
func (o *origin) pushMain() {
	o.t.Helper()
	o.git(o.work, "push", "-q", "-f", "origin", "HEAD:refs/heads/main")
}

// openPR publishes sha as the head of pull request n.
func (o *origin) openPR(n int, sha string) {
	o.t.Helper()
	o.git(o.work, "push", "-q", "-f", "origin", fmt.Sprintf("%s:refs/pull/%d/head", sha, n))
}

// closePR deletes the head of pull request n from the remote.
func (o *origin) closePR(n int) {
	o.t.Helper()
	o.git(o.bare, "update-ref", "-d", fmt.Sprintf("refs/pull/%d/head", n))
}

// wire counts the bytes that cross the connections of an HTTP client and
// records the requests it makes.
type wire struct {
	bytes atomic.Int64
	mu    sync.Mutex
	reqs  []string
}

func (w *wire) reset() {
	w.bytes.Store(0)
	w.mu.Lock()
	w.reqs = nil
	w.mu.Unlock()
}

func (w *wire) requests() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.reqs...)
}

// client returns an HTTP client whose connections are counted. base, if
// set, supplies the TLS configuration.
func (w *wire) client(base *http.Client) *http.Client {
	tr := &http.Transport{}
	if base != nil {
		tr = base.Transport.(*http.Transport).Clone()
	}
	dial := (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: c, n: &w.bytes}, nil
	}
	return &http.Client{Transport: &recorder{next: tr, w: w}}
}

type recorder struct {
	next http.RoundTripper
	w    *wire
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.w.mu.Lock()
	r.w.reqs = append(r.w.reqs, req.Method+" "+req.URL.Path)
	r.w.mu.Unlock()
	return r.next.RoundTrip(req)
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// gitHTTP serves the origin's bare repository over smart HTTP with the
// git http-backend CGI; wrap, if set, sits in front of it.
func (o *origin) gitHTTP(tls bool, wrap func(http.Handler) http.Handler) (*httptest.Server, string) {
	o.t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		o.t.Fatal(err)
	}
	var h http.Handler = &cgi.Handler{
		Path: gitPath,
		Args: []string{"http-backend"},
		Env: []string{
			"GIT_PROJECT_ROOT=" + o.root, "GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		},
	}
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	o.t.Cleanup(srv.Close)
	return srv, srv.URL + "/remote.git"
}

// open clones the origin over the given URL into a fresh directory.
func open(t testing.TB, ctx context.Context, o gitsync.Options) *gitsync.Repo {
	t.Helper()
	if o.Dir == "" {
		o.Dir = filepath.Join(t.TempDir(), "clone")
	}
	r, err := gitsync.Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

// newTextLogger logs everything, debug included, to w.
func newTextLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
