package forge_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gogit "github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/object"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/google/go-github/v60/github"

	"github.com/taloscluster/taloscluster/lab/forge"
)

// isReset reports whether err is what a client sees of a connection reset
// by the server, and not an answer: ECONNRESET, or an EOF when another
// goroutine of the client's transport took the reset error first.
func isReset(err error) bool {
	var answer *github.ErrorResponse
	if errors.As(err, &answer) {
		return false
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// isGitReset is isReset for go-git, which flattens the transport's error
// into its message.
func isGitReset(err error) bool {
	return err != nil && (isReset(err) || strings.Contains(err.Error(), "connection reset by peer") || strings.HasSuffix(err.Error(), "EOF"))
}

// faultsLogged returns "op fault status" for every logged request a fault
// kept from its client.
func faultsLogged(f *forge.Forge) []string {
	var out []string
	for _, r := range f.Log() {
		if r.Fault != "" {
			out = append(out, r.Op+" "+r.Fault+" "+strconv.Itoa(r.Status))
		}
	}
	return out
}

// TestAPIConnectionFaults checks reset, lost-reply and hang with go-github:
// a reset comment is not stored, a comment or status whose reply is lost
// is, a hung request times out on the client's context, and the next
// request is answered.
func TestAPIConnectionFaults(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pr := openFeaturePR(t, w, "feature", "a.txt")
	ctx := t.Context()
	gh := w.client(t, agent)
	comment := func(body string) error {
		_, _, err := gh.Issues.CreateComment(ctx, "acme", "clusters", pr.Number, &github.IssueComment{Body: ptr(body)})
		return err
	}

	w.f.ResetConn("comments.create", 1)
	if err := comment("reset"); !isReset(err) {
		t.Fatalf("reset comment: %v, want a connection reset", err)
	}
	if got := w.repo.Comments(pr.Number); len(got) != 0 {
		t.Errorf("the reset comment was stored: %+v", got)
	}

	w.f.LoseReply("comments.create", 1)
	if err := comment("lost"); !isReset(err) {
		t.Fatalf("comment with a lost reply: %v, want a connection reset", err)
	}
	if got := w.repo.Comments(pr.Number); len(got) != 1 || got[0].Body != "lost" {
		t.Errorf("comments after the lost reply: %+v", got)
	}

	w.f.LoseReply("statuses.*", 1)
	_, _, err := gh.Repositories.CreateStatus(ctx, "acme", "clusters", pr.HeadSHA,
		&github.RepoStatus{State: ptr("pending"), Context: ptr("taloscluster/plan")})
	if !isReset(err) {
		t.Fatalf("status with a lost reply: %v, want a connection reset", err)
	}
	if got := w.repo.Statuses(pr.HeadSHA); len(got) != 1 {
		t.Errorf("statuses after the lost reply: %+v", got)
	}

	w.f.Hang("pulls.get", 1)
	hctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _, err = gh.PullRequests.Get(hctx, "acme", "clusters", pr.Number)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung request: %v, want the client's deadline", err)
	}
	if _, _, err := gh.PullRequests.Get(ctx, "acme", "clusters", pr.Number); err != nil {
		t.Fatalf("the request after the hang: %v", err)
	}
	if err := comment("answered"); err != nil {
		t.Fatalf("the comment after the faults: %v", err)
	}

	waitFor(t, "the hung request in the log", func() bool { return len(faultsLogged(w.f)) == 4 })
	want := []string{"comments.create reset 0", "comments.create lost-reply 201", "statuses.create lost-reply 201", "pulls.get hang 0"}
	if got := faultsLogged(w.f); !slices.Equal(got, want) {
		t.Errorf("faults in the log %q, want %q", got, want)
	}
}

// TestGitConnectionFaults checks reset, lost-reply and hang with go-git: a
// reset push does not move the branch, a push whose reply is lost does, a
// hung fetch times out on the client's context, and the next fetch works.
func TestGitConnectionFaults(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	base := w.seed(t, 1)
	ctx := t.Context()
	ca, err := os.ReadFile(w.caFile)
	if err != nil {
		t.Fatal(err)
	}
	auth := &githttp.BasicAuth{Username: "x-access-token", Password: agent.Token}
	repo, err := gogit.PlainCloneContext(ctx, filepath.Join(t.TempDir(), "clone"), false, &gogit.CloneOptions{
		URL: w.srv.URL + "/acme/clusters.git", Auth: auth, CABundle: ca,
	})
	if err != nil {
		t.Fatal(err)
	}
	head := commit(t, repo, "clusters/prod-a/patch.yaml", "machine: {}\n")
	push := func() error {
		return repo.PushContext(ctx, &gogit.PushOptions{
			Auth: auth, CABundle: ca, RefSpecs: []gitconfig.RefSpec{"refs/heads/main:refs/heads/main"},
		})
	}
	branch := func() string {
		sha, err := w.repo.Branch("main")
		if err != nil {
			t.Fatal(err)
		}
		return sha
	}

	w.f.ResetConn("git.receive-pack", 1)
	if err := push(); !isGitReset(err) {
		t.Fatalf("reset push: %v, want a connection reset", err)
	}
	if got := branch(); got != base {
		t.Fatalf("after the reset push main is %s, want %s", got, base)
	}

	w.f.LoseReply("git.receive-pack", 1)
	if err := push(); !isGitReset(err) {
		t.Fatalf("push with a lost reply: %v, want a connection reset", err)
	}
	if got := branch(); got != head {
		t.Fatalf("after the push whose reply was lost main is %s, want %s", got, head)
	}

	fetch := func(ctx context.Context) error {
		err := repo.FetchContext(ctx, &gogit.FetchOptions{Auth: auth, CABundle: ca})
		if errors.Is(err, gogit.NoErrAlreadyUpToDate) {
			return nil
		}
		return err
	}
	w.f.Hang("git.upload-pack.refs", 1)
	hctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = fetch(hctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung fetch: %v, want the client's deadline", err)
	}
	if err := fetch(ctx); err != nil {
		t.Fatalf("the fetch after the hang: %v", err)
	}

	waitFor(t, "the hung fetch in the log", func() bool { return len(faultsLogged(w.f)) == 3 })
	want := []string{"git.receive-pack reset 0", "git.receive-pack lost-reply 200", "git.upload-pack.refs hang 0"}
	if got := faultsLogged(w.f); !slices.Equal(got, want) {
		t.Errorf("faults in the log %q, want %q", got, want)
	}
}

// TestHangEndsOnClose checks that Close releases a hung request.
func TestHangEndsOnClose(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gh := w.client(t, agent)
	w.f.Hang("user.get", 1)
	done := make(chan error, 1)
	go func() {
		_, _, err := gh.Users.Get(t.Context(), "")
		done <- err
	}()
	// Whether the request is held already or arrives after Close, it
	// gets no answer.
	time.Sleep(100 * time.Millisecond)
	w.f.Close()
	select {
	case err := <-done:
		if !isReset(err) {
			t.Fatalf("released request: %v, want a connection reset", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not release the hung request")
	}
}

// commit writes a file in the work tree of repo and commits it on the
// current branch.
func commit(t *testing.T, repo *gogit.Repository, name, content string) string {
	t.Helper()
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(wt.Filesystem.Root(), name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Add(name); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "Test Author", Email: "author@example.com", When: time.Now()}
	h, err := wt.Commit("add "+name, &gogit.CommitOptions{Author: sig, Committer: sig})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
