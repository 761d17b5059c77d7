package forge_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-github/v60/github"

	"github.com/taloscluster/taloscluster/lab/forge"
)

func TestRepoHelpers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	if _, err := w.repo.Branch("main"); !errors.Is(err, forge.ErrNoBranch) {
		t.Fatalf("Branch of an empty repository: %v, want ErrNoBranch", err)
	}
	root, err := w.repo.Commit("main", map[string]string{"a/b.txt": "b\n", "c.txt": "c\n"}, "root")
	if err != nil {
		t.Fatal(err)
	}
	// A new branch starts from the default branch.
	feat, err := w.repo.Commit("feature/x", map[string]string{"a/d.txt": "d\n"}, "add d")
	if err != nil {
		t.Fatal(err)
	}
	rm, err := w.repo.Remove("feature/x", []string{"a"}, "drop a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.repo.Remove("feature/x", []string{"missing"}, "x"); err == nil {
		t.Errorf("removing a missing file succeeded")
	}
	if _, err := w.repo.Commit("main", map[string]string{"../escape": "x"}, "x"); err == nil {
		t.Errorf("committing a path outside the repository succeeded")
	}

	dir := w.clone(t, agent, "acme/clusters")
	if got := w.git(t, dir, "log", "--format=%P", "-1", feat); got != root {
		t.Errorf("the branch's first commit has parent %q, want %s", got, root)
	}
	if got := w.git(t, dir, "ls-tree", "-r", "--name-only", rm); got != "c.txt" {
		t.Errorf("tree after removal: %q", got)
	}
	if got := w.git(t, dir, "fsck", "--strict", "--no-progress"); strings.Contains(got, "error") {
		t.Errorf("fsck: %s", got)
	}
}

func TestSquashMerge(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	base := w.seed(t, 1)
	head, err := w.repo.Commit("feature", map[string]string{"x.txt": "x\n"}, "x")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR(carol.Login, "feature", "", "Add x")
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := w.client(t, alice).PullRequests.Merge(t.Context(), "acme", "clusters", pr.Number, "",
		&github.PullRequestOptions{MergeMethod: "squash", SHA: head})
	if err != nil {
		t.Fatal(err)
	}
	dir := w.clone(t, agent, "acme/clusters")
	if got := w.git(t, dir, "log", "-1", "--format=%P%n%s", res.GetSHA()); got != base+"\nAdd x (#1)" {
		t.Errorf("squash commit parents and subject: %q", got)
	}
	snap, _ := w.repo.PR(pr.Number)
	if !snap.Merged || snap.MergeCommitSHA != res.GetSHA() || snap.MergedBy != alice.Login || snap.State != "closed" {
		t.Errorf("PR after squash: %+v", snap)
	}
	if _, err := w.repo.Merge(pr.Number, alice.Login); err == nil || !strings.Contains(err.Error(), "405") {
		t.Errorf("merging again: %v", err)
	}
}

func TestRefusesNonLoopbackClients(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(t.Context(), "GET", "/user", nil) // RemoteAddr 192.0.2.1
	req.Header.Set("Authorization", "token "+alice.Token)
	w.f.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("status %d, want 403", rec.Code)
	}
}

func TestEnterprisePrefix(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gh, err := github.NewClient(w.srv.Client()).WithAuthToken(agent.Token).WithEnterpriseURLs(w.srv.URL, w.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := gh.Users.Get(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if u.GetLogin() != agent.Login {
		t.Errorf("login %q", u.GetLogin())
	}
	repo, _, err := gh.Repositories.Get(t.Context(), "acme", "clusters")
	if err != nil {
		t.Fatal(err)
	}
	if repo.GetDefaultBranch() != "main" || !repo.GetPermissions()["push"] || repo.GetPermissions()["admin"] {
		t.Errorf("repository %s default %s permissions %v", repo.GetFullName(), repo.GetDefaultBranch(), repo.GetPermissions())
	}
}
