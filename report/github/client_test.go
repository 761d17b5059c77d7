package github_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab/forge"
	gh "github.com/taloscluster/taloscluster/report/github"
)

// labForge starts the lab's GitHub emulator with one repository, one pull
// request and a client for it.
func labForge(t *testing.T) (*forge.Forge, *forge.Repo, int, *gh.Client) {
	t.Helper()
	f, err := forge.New(forge.Options{Dir: t.TempDir(), Users: []forge.User{{Login: "bot", Token: "ghp_bot0123456789"}, {Login: "alice", Token: "ghp_alice0123456789"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f.Handler())
	t.Cleanup(srv.Close)
	repo, err := f.CreateRepo("org", "clusters", "main")
	if err != nil {
		t.Fatal(err)
	}
	repo.Grant("bot", forge.PermissionWrite)
	repo.Grant("alice", forge.PermissionWrite)
	if _, err := repo.Commit("main", map[string]string{"README.md": "x\n"}, "init"); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Commit("grow", map[string]string{"a.txt": "a\n"}, "grow"); err != nil {
		t.Fatal(err)
	}
	pr, err := repo.OpenPR("alice", "grow", "main", "Grow")
	if err != nil {
		t.Fatal(err)
	}
	c, err := gh.New(gh.Options{APIURL: srv.URL + "/", Repo: "org/clusters", Token: "ghp_bot0123456789", Spacing: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return f, repo, pr.Number, c
}

// A comment posted again under the same key (its first answer was lost,
// or the agent restarted before it learned the outcome) is not posted
// twice; another key is another comment.
func TestCommentIsPostedOncePerKey(t *testing.T) {
	t.Parallel()
	_, repo, pr, c := labForge(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for range 2 {
		if err := c.Comment(ctx, pr, "k1", "converged"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Comment(ctx, pr, "k2", "converged again"); err != nil {
		t.Fatal(err)
	}
	got := repo.Comments(pr)
	if len(got) != 2 || !strings.HasPrefix(got[0].Body, gh.ReportMarker("k1")) || !strings.HasSuffix(got[0].Body, "converged") {
		t.Fatalf("comments %+v, want one per key", got)
	}
}

// What a failed call says decides whether the outbox tries it again.
func TestRetryable(t *testing.T) {
	t.Parallel()
	f, _, pr, c := labForge(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	f.Fail("comments.create", 1, 502)
	err := c.Comment(ctx, pr, "k", "x")
	if err == nil || !gh.Retryable(err) {
		t.Errorf("a 502: %v, retryable %v; want retryable", err, gh.Retryable(err))
	}
	err = c.Comment(ctx, 9999, "k", "x") // no such pull request
	if err == nil || gh.Retryable(err) {
		t.Errorf("a missing pull request: %v, retryable %v; want not", err, gh.Retryable(err))
	}
	cancelled, stop := context.WithCancel(ctx)
	stop()
	if err := c.Comment(cancelled, pr, "k", "x"); err == nil || gh.Retryable(err) {
		t.Errorf("a cancelled call: %v; want not retryable", err)
	}
}

// A request that GitHub accepts and never answers fails after the request
// bound, not after the whole call's: the caller is not held.
func TestHungRequestEndsAtTheRequestBound(t *testing.T) {
	t.Parallel()
	f, _, pr, _ := labForge(t)
	srv := httptest.NewServer(f.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(f.Close) // first: it ends the hung request
	c, err := gh.New(gh.Options{APIURL: srv.URL + "/", Repo: "org/clusters", Token: "ghp_bot0123456789",
		Spacing: time.Millisecond, RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.Hang("comments.create", 1)
	start := time.Now()
	err = c.Comment(t.Context(), pr, "k", "x")
	if err == nil || !gh.Retryable(err) {
		t.Fatalf("a hung comment: %v, want a retryable error", err)
	}
	if waited := time.Since(start); waited > 20*time.Second {
		t.Fatalf("the hung request held the caller %v", waited)
	}
}
