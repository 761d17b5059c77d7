package forge_test

import (
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-github/v60/github"

	"github.com/taloscluster/taloscluster/lab/forge"
)

// The lab's accounts: the cluster team's owner, a collaborator, the agent's
// bot and an outsider who works from a fork.
var (
	alice   = forge.User{Login: "alice", Token: "tok-alice"}
	carol   = forge.User{Login: "carol", Token: "tok-carol"}
	agent   = forge.User{Login: "taloscluster-bot", Token: "tok-agent"}
	mallory = forge.User{Login: "mallory", Token: "tok-mallory"}
)

// world is a forge served over TLS with an acme/clusters repository whose
// admin is alice, carol can read and the agent can write.
type world struct {
	f      *forge.Forge
	srv    *httptest.Server
	repo   *forge.Repo
	caFile string
	home   string
}

func newWorld(t *testing.T, opts ...func(*forge.Options)) *world {
	t.Helper()
	dir := t.TempDir()
	o := forge.Options{Dir: dir, Users: []forge.User{alice, carol, agent, mallory}}
	for _, opt := range opts {
		opt(&o)
	}
	f, err := forge.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(f.Handler())
	t.Cleanup(func() {
		f.Close() // releases hung requests
		srv.Close()
	})
	home := t.TempDir()
	caFile := filepath.Join(home, "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	repo, err := f.CreateRepo("acme", "clusters", "main")
	if err != nil {
		t.Fatal(err)
	}
	repo.Grant(alice.Login, forge.PermissionAdmin)
	repo.Grant(carol.Login, forge.PermissionRead)
	repo.Grant(agent.Login, forge.PermissionWrite)
	return &world{f: f, srv: srv, repo: repo, caFile: caFile, home: home}
}

// client returns a go-github client authenticating with the user's token.
func (w *world) client(t *testing.T, u forge.User) *github.Client {
	t.Helper()
	c := github.NewClient(w.srv.Client())
	if u.Token != "" {
		c = c.WithAuthToken(u.Token)
	}
	base, err := url.Parse(w.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	c.BaseURL, c.UploadURL = base, base
	return c
}

// remote returns the HTTPS URL of a repository with the user's token as
// password; an empty token gives a URL without credentials.
func (w *world) remote(u forge.User, fullName string) string {
	host := strings.TrimPrefix(w.srv.URL, "https://")
	if u.Token == "" {
		return fmt.Sprintf("https://%s/%s.git", host, fullName)
	}
	return fmt.Sprintf("https://%s:%s@%s/%s.git", u.Login, u.Token, host, fullName)
}

// gitCmd runs plain git in dir, isolated from the machine's configuration.
func (w *world) gitCmd(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_SSL_CAINFO="+w.caFile,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=/bin/false",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"HOME="+w.home,
		"GIT_AUTHOR_NAME=Test Author", "GIT_AUTHOR_EMAIL=author@example.com",
		"GIT_COMMITTER_NAME=Test Author", "GIT_COMMITTER_EMAIL=author@example.com",
	)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// git runs plain git and fails the test if it fails.
func (w *world) git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := w.gitCmd(t, dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// clone clones a repository as the user into a new directory.
func (w *world) clone(t *testing.T, u forge.User, fullName string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "work")
	w.git(t, "", "clone", "--quiet", w.remote(u, fullName), dir)
	w.git(t, dir, "config", "user.name", "Test Author")
	w.git(t, dir, "config", "user.email", "author@example.com")
	return dir
}

// commitFile writes a file in a work tree and commits it.
func (w *world) commitFile(t *testing.T, dir, name, content, msg string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	w.git(t, dir, "add", "--all")
	w.git(t, dir, "commit", "--quiet", "-m", msg)
	return w.git(t, dir, "rev-parse", "HEAD")
}

// seed gives the repository a main branch with n commits, made with go-git
// by the forge, and returns its head.
func (w *world) seed(t *testing.T, n int) string {
	t.Helper()
	var sha string
	for i := range n {
		var err error
		sha, err = w.repo.Commit("main", map[string]string{
			"clusters/prod-a/cluster.yaml": fmt.Sprintf("name: prod-a\nrevision: %d\n", i),
		}, fmt.Sprintf("prod-a revision %d", i))
		if err != nil {
			t.Fatal(err)
		}
	}
	return sha
}

// ops returns the requests of the log with the operation and status.
func ops(f *forge.Forge, op string, status int) []forge.Request {
	var out []forge.Request
	for _, r := range f.Log() {
		if r.Op == op && (status == 0 || r.Status == status) {
			out = append(out, r)
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }
