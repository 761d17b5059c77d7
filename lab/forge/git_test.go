package forge_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gogit "github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/google/go-github/v60/github"

	"github.com/taloscluster/taloscluster/lab/forge"
)

func TestGitPushOpenPullRequestFetchHeadAndFollowPushes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()

	// alice pushes main and a branch with plain git.
	work := filepath.Join(t.TempDir(), "alice")
	w.git(t, "", "clone", "--quiet", w.remote(alice, "acme/clusters"), work) // an empty repository
	for i := range 20 {                                                      // enough history that fetches negotiate in rounds
		w.commitFile(t, work, "clusters/prod-a/cluster.yaml", fmt.Sprintf("revision: %d\n", i), fmt.Sprintf("revision %d", i))
	}
	w.git(t, work, "push", "--quiet", "origin", "HEAD:refs/heads/main")
	w.git(t, work, "checkout", "--quiet", "-b", "bump-prod-a")
	head1 := w.commitFile(t, work, "clusters/prod-a/cluster.yaml", "revision: bump\n", "bump prod-a")
	w.git(t, work, "push", "--quiet", "origin", "bump-prod-a")

	// alice opens the pull request through the API.
	gh := w.client(t, alice)
	pr, _, err := gh.PullRequests.Create(ctx, "acme", "clusters", &github.NewPullRequest{
		Title: ptr("Bump prod-a"), Head: ptr("bump-prod-a"), Base: ptr("main"), Body: ptr("please"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if pr.GetNumber() != 1 || pr.GetHead().GetSHA() != head1 || pr.GetUser().GetLogin() != "alice" {
		t.Fatalf("created pull request: number %d head %s user %s, want 1 %s alice",
			pr.GetNumber(), pr.GetHead().GetSHA(), pr.GetUser().GetLogin(), head1)
	}

	// The agent clones with its own token and fetches refs/pull/1/head with an explicit refspec.
	agentDir := w.clone(t, agent, "acme/clusters")
	w.git(t, agentDir, "fetch", "--quiet", "origin", "+refs/pull/1/head:refs/remotes/origin/pr/1")
	if got := w.git(t, agentDir, "rev-parse", "refs/remotes/origin/pr/1"); got != head1 {
		t.Fatalf("refs/pull/1/head = %s, want %s", got, head1)
	}
	if out := w.git(t, agentDir, "ls-remote", "origin"); !strings.Contains(out, "refs/pull/1/merge") {
		t.Errorf("ls-remote does not show refs/pull/1/merge for a mergeable pull request:\n%s", out)
	}

	// alice pushes again: the pull request's head moves with the branch.
	head2 := w.commitFile(t, work, "clusters/prod-a/patches/a.yaml", "machine: {}\n", "add a patch")
	w.git(t, work, "push", "--quiet", "origin", "bump-prod-a")
	pr, _, err = gh.PullRequests.Get(ctx, "acme", "clusters", 1)
	if err != nil {
		t.Fatal(err)
	}
	if pr.GetHead().GetSHA() != head2 {
		t.Fatalf("after a push the head is %s, want %s", pr.GetHead().GetSHA(), head2)
	}
	if !pr.GetMergeable() || pr.GetMerged() || pr.GetBase().GetRef() != "main" || pr.GetHead().GetRepo().GetFork() {
		t.Errorf("pull request: mergeable %v merged %v base %q fork %v", pr.GetMergeable(), pr.GetMerged(),
			pr.GetBase().GetRef(), pr.GetHead().GetRepo().GetFork())
	}
	w.git(t, agentDir, "fetch", "--quiet", "origin", "+refs/pull/1/head:refs/remotes/origin/pr/1")
	if got := w.git(t, agentDir, "rev-parse", "refs/remotes/origin/pr/1"); got != head2 {
		t.Fatalf("refs/pull/1/head after the push = %s, want %s", got, head2)
	}

	// refs/pull/ is read-only, as on GitHub.
	if out, err := w.gitCmd(t, work, "push", "origin", "HEAD:refs/pull/1/head"); err == nil {
		t.Errorf("pushing to refs/pull/1/head succeeded:\n%s", out)
	}

	files, _, err := gh.PullRequests.ListFiles(ctx, "acme", "clusters", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.GetFilename()+":"+f.GetStatus())
	}
	if got, want := strings.Join(names, " "), "clusters/prod-a/cluster.yaml:modified clusters/prod-a/patches/a.yaml:added"; got != want {
		t.Errorf("files = %s, want %s", got, want)
	}
}

func TestGitAuthentication(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.seed(t, 1)
	tmp := t.TempDir()

	if out, err := w.gitCmd(t, tmp, "ls-remote", w.remote(forge.User{Login: "alice"}, "acme/clusters")); err == nil {
		t.Errorf("ls-remote without credentials succeeded:\n%s", out)
	}
	if out, err := w.gitCmd(t, tmp, "ls-remote", w.remote(forge.User{Login: "alice", Token: "wrong"}, "acme/clusters")); err == nil {
		t.Errorf("ls-remote with a wrong token succeeded:\n%s", out)
	}
	// The token alone as the user name also works (x-oauth-basic style).
	host := strings.TrimPrefix(w.srv.URL, "https://")
	w.git(t, tmp, "ls-remote", fmt.Sprintf("https://%s@%s/acme/clusters", carol.Token, host))

	// carol can read but not push.
	dir := w.clone(t, carol, "acme/clusters")
	w.commitFile(t, dir, "README.md", "hi\n", "readme")
	out, err := w.gitCmd(t, dir, "push", "origin", "HEAD:refs/heads/carol")
	if err == nil || !strings.Contains(out, "403") {
		t.Errorf("carol's push: err %v, output %s; want a 403 refusal", err, out)
	}
	if got := ops(w.f, "git.receive-pack.refs", http.StatusForbidden); len(got) != 1 || got[0].User != "carol" {
		t.Errorf("log of refused pushes = %+v", got)
	}
	if got := ops(w.f, "git.upload-pack.refs", http.StatusUnauthorized); len(got) == 0 {
		t.Errorf("the log has no unauthenticated upload-pack advertisement")
	}

	// API: no token, a wrong token.
	for _, u := range []struct {
		name string
		user string
		tok  string
	}{{"no token", "x", ""}, {"wrong token", "x", "nope"}} {
		c := w.client(t, forge.User{Login: u.user, Token: u.tok})
		_, resp, err := c.PullRequests.List(t.Context(), "acme", "clusters", nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: err %v, want 401", u.name, err)
		}
	}
}

func TestGoGitClientFetchesPullRequestHead(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.seed(t, 3)
	head, err := w.repo.Commit("feature", map[string]string{"clusters/staging/cluster.yaml": "name: staging\n"}, "add staging")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR(alice.Login, "feature", "", "Add staging")
	if err != nil {
		t.Fatal(err)
	}
	if pr.HeadSHA != head || pr.Number != 1 || !pr.Mergeable {
		t.Fatalf("OpenPR = %+v", pr)
	}

	ca, err := os.ReadFile(w.caFile)
	if err != nil {
		t.Fatal(err)
	}
	auth := &githttp.BasicAuth{Username: "x-access-token", Password: agent.Token}
	repo, err := gogit.PlainCloneContext(t.Context(), filepath.Join(t.TempDir(), "clone"), true, &gogit.CloneOptions{
		URL: w.srv.URL + "/acme/clusters.git", Auth: auth, CABundle: ca,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = repo.FetchContext(t.Context(), &gogit.FetchOptions{
		Auth: auth, CABundle: ca,
		RefSpecs: []gitconfig.RefSpec{"+refs/pull/1/head:refs/remotes/origin/pr/1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := repo.Reference(plumbing.ReferenceName("refs/remotes/origin/pr/1"), true)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Hash().String() != head {
		t.Fatalf("go-git fetched %s for refs/pull/1/head, want %s", ref.Hash(), head)
	}
}

func TestGitFaults(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.seed(t, 1)
	tmp := t.TempDir()
	w.f.Fail("git.upload-pack.refs", 1, http.StatusBadGateway)
	out, err := w.gitCmd(t, tmp, "ls-remote", w.remote(agent, "acme/clusters"))
	if err == nil || !strings.Contains(out, "502") {
		t.Fatalf("ls-remote with an injected 502: err %v, output %s", err, out)
	}
	w.git(t, tmp, "ls-remote", w.remote(agent, "acme/clusters"))
	// git first asks without credentials and is challenged (401).
	var statuses []int
	for _, r := range ops(w.f, "git.upload-pack.refs", 0) {
		statuses = append(statuses, r.Status)
	}
	if fmt.Sprint(statuses) != "[401 502 401 200]" {
		t.Errorf("statuses in the log: %v", statuses)
	}
}
