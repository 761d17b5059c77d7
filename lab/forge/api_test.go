package forge_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v60/github"

	"github.com/taloscluster/taloscluster/lab/forge"
)

// openFeaturePR seeds main, commits a branch with the forge's helpers and
// opens a pull request from it.
func openFeaturePR(t *testing.T, w *world, branch, file string) forge.PullRequest {
	t.Helper()
	if _, err := w.repo.Branch("main"); err != nil {
		w.seed(t, 2)
	}
	if _, err := w.repo.Commit(branch, map[string]string{file: "changed by " + branch + "\n"}, "change "+file); err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR(alice.Login, branch, "main", "Change "+file)
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

func TestIssueComments(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pr := openFeaturePR(t, w, "feature", "clusters/staging/cluster.yaml")
	ctx := t.Context()
	bot := w.client(t, agent)

	const marker = "<!-- taloscluster:plan -->"
	created, _, err := bot.Issues.CreateComment(ctx, "acme", "clusters", pr.Number, &github.IssueComment{Body: ptr(marker + "\nplan: 1 change")})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetUser().GetLogin() != agent.Login || created.GetID() == 0 {
		t.Fatalf("created comment: user %q id %d", created.GetUser().GetLogin(), created.GetID())
	}
	for i := range 4 {
		if _, _, err := w.client(t, carol).Issues.CreateComment(ctx, "acme", "clusters", pr.Number,
			&github.IssueComment{Body: ptr(fmt.Sprintf("comment %d", i))}); err != nil {
			t.Fatal(err)
		}
	}

	// Pagination the way go-github follows it.
	var all []*github.IssueComment
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 2}}
	pages := 0
	for {
		cs, resp, err := bot.Issues.ListComments(ctx, "acme", "clusters", pr.Number, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if pages == 1 && (resp.NextPage != 2 || resp.LastPage != 3) {
			t.Errorf("first page: next %d last %d, want 2 3", resp.NextPage, resp.LastPage)
		}
		all = append(all, cs...)
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	if len(all) != 5 || pages != 3 || all[0].GetID() != created.GetID() {
		t.Fatalf("listed %d comments in %d pages, first %d", len(all), pages, all[0].GetID())
	}

	edited, _, err := bot.Issues.EditComment(ctx, "acme", "clusters", created.GetID(), &github.IssueComment{Body: ptr(marker + "\nplan: 2 changes")})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := bot.Issues.GetComment(ctx, "acme", "clusters", created.GetID())
	if err != nil {
		t.Fatal(err)
	}
	if got.GetBody() != edited.GetBody() || !strings.HasSuffix(got.GetBody(), "2 changes") {
		t.Errorf("comment after edit: %q", got.GetBody())
	}

	// carol may not edit the bot's comment.
	if _, resp, err := w.client(t, carol).Issues.EditComment(ctx, "acme", "clusters", created.GetID(), &github.IssueComment{Body: ptr("x")}); err == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("carol's edit: %v", err)
	}

	// The 65,536 limit, on create and on edit.
	for _, tc := range []struct {
		name string
		n    int
		ok   bool
	}{{"at the limit", 65536, true}, {"one over", 65537, false}} {
		body := strings.Repeat("x", tc.n)
		_, _, err := bot.Issues.CreateComment(ctx, "acme", "clusters", pr.Number, &github.IssueComment{Body: &body})
		checkTooLong(t, "create "+tc.name, err, tc.ok)
		_, _, err = bot.Issues.EditComment(ctx, "acme", "clusters", created.GetID(), &github.IssueComment{Body: &body})
		checkTooLong(t, "edit "+tc.name, err, tc.ok)
	}
	// Multi-byte text is measured in bytes: 40,000 two-byte characters are too long.
	wide := strings.Repeat("é", 40000)
	_, _, err = bot.Issues.CreateComment(ctx, "acme", "clusters", pr.Number, &github.IssueComment{Body: &wide})
	checkTooLong(t, "multi-byte", err, false)

	if n := len(ops(w.f, "comments.create", http.StatusCreated)); n != 6 {
		t.Errorf("%d comments created according to the log, want 6", n)
	}
	if got := w.repo.Comments(pr.Number); len(got) != 6 || got[0].Author != agent.Login {
		t.Errorf("Comments() = %d comments", len(got))
	}

	// A comment on a pull request that does not exist.
	if _, resp, err := bot.Issues.CreateComment(ctx, "acme", "clusters", 99, &github.IssueComment{Body: ptr("x")}); err == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("comment on #99: %v", err)
	}
}

func checkTooLong(t *testing.T, name string, err error, ok bool) {
	t.Helper()
	if ok {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		return
	}
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Response.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("%s: err %v, want a 422 *github.ErrorResponse", name, err)
	}
	if er.Message != "Validation Failed" || len(er.Errors) != 1 || !strings.HasPrefix(er.Errors[0].Message, "Body is too long") {
		t.Errorf("%s: error document %+v", name, er)
	}
}

func TestStatuses(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pr := openFeaturePR(t, w, "feature", "clusters/prod-a/cluster.yaml")
	ctx := t.Context()
	bot := w.client(t, agent)
	ctxName := "taloscluster/plan: clusters/prod-a"

	create := func(state, context, desc string) (*github.RepoStatus, error) {
		s, _, err := bot.Repositories.CreateStatus(ctx, "acme", "clusters", pr.HeadSHA, &github.RepoStatus{
			State: &state, Context: &context, Description: &desc, TargetURL: ptr("https://agent.example/plans/1"),
		})
		return s, err
	}
	if _, err := create("pending", ctxName, "planning"); err != nil {
		t.Fatal(err)
	}
	if _, err := create("success", ctxName, "1 change"); err != nil {
		t.Fatal(err)
	}
	// 140 characters is the most GitHub takes, counted in characters, not
	// bytes.
	if _, err := create("failure", "taloscluster/plan: clusters/staging", strings.Repeat("é", 140)); err != nil {
		t.Fatal(err)
	}

	list, _, err := bot.Repositories.ListStatuses(ctx, "acme", "clusters", pr.HeadSHA, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].GetState() != "failure" || list[2].GetState() != "pending" {
		t.Fatalf("statuses not newest first: %v", states(list))
	}
	if list[0].GetDescription() != strings.Repeat("é", 140) {
		t.Errorf("description was not kept as given")
	}
	// By branch name too.
	byRef, _, err := bot.Repositories.ListStatuses(ctx, "acme", "clusters", "feature", nil)
	if err != nil || len(byRef) != 3 {
		t.Errorf("statuses by branch: %d, %v", len(byRef), err)
	}

	comb, _, err := bot.Repositories.GetCombinedStatus(ctx, "acme", "clusters", pr.HeadSHA, nil)
	if err != nil {
		t.Fatal(err)
	}
	if comb.GetState() != "failure" || comb.GetTotalCount() != 2 || comb.GetSHA() != pr.HeadSHA {
		t.Errorf("combined: state %s total %d sha %s", comb.GetState(), comb.GetTotalCount(), comb.GetSHA())
	}

	for _, tc := range []struct {
		name, state, context, description string
		status                            int
	}{
		{"context of 255", "success", strings.Repeat("c", 255), "", http.StatusCreated},
		{"context of 256", "success", strings.Repeat("c", 256), "", http.StatusUnprocessableEntity},
		{"bad state", "done", "x", "", http.StatusUnprocessableEntity},
		{"description of 141", "success", "x", strings.Repeat("d", 141), http.StatusUnprocessableEntity},
	} {
		_, err := create(tc.state, tc.context, tc.description)
		code := http.StatusCreated
		var er *github.ErrorResponse
		if errors.As(err, &er) {
			code = er.Response.StatusCode
		} else if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if code != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, code, tc.status)
		}
	}

	// An unknown commit, and a user without write permission.
	if _, resp, err := bot.Repositories.CreateStatus(ctx, "acme", "clusters", strings.Repeat("a", 40), &github.RepoStatus{State: ptr("success")}); err == nil || resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("status on an unknown commit: %v", err)
	}
	if _, resp, err := w.client(t, carol).Repositories.CreateStatus(ctx, "acme", "clusters", pr.HeadSHA, &github.RepoStatus{State: ptr("success")}); err == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("status by a reader: %v", err)
	}
	if got := w.repo.Statuses(pr.HeadSHA); len(got) != 4 || got[0].Creator != agent.Login {
		t.Errorf("Statuses() = %+v", got)
	}
}

func states(ss []*github.RepoStatus) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.GetState())
	}
	return out
}

func TestMergeCreatesMergeCommit(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	pr := openFeaturePR(t, w, "feature", "clusters/staging/cluster.yaml")
	// main moves on meanwhile, so the merge is a real merge.
	baseBefore, err := w.repo.Commit("main", map[string]string{"README.md": "clusters\n"}, "readme")
	if err != nil {
		t.Fatal(err)
	}
	gh := w.client(t, alice)

	if _, resp, err := w.client(t, carol).PullRequests.Merge(ctx, "acme", "clusters", pr.Number, "", nil); err == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("merge by a reader: %v", err)
	}
	if _, resp, err := gh.PullRequests.Merge(ctx, "acme", "clusters", pr.Number, "", &github.PullRequestOptions{SHA: baseBefore}); err == nil || resp.StatusCode != http.StatusConflict {
		t.Errorf("merge with a stale head sha: %v", err)
	}
	res, _, err := gh.PullRequests.Merge(ctx, "acme", "clusters", pr.Number, "", &github.PullRequestOptions{SHA: pr.HeadSHA})
	if err != nil {
		t.Fatal(err)
	}
	if !res.GetMerged() || len(res.GetSHA()) != 40 {
		t.Fatalf("merge result %+v", res)
	}

	dir := w.clone(t, agent, "acme/clusters")
	parents := strings.Fields(w.git(t, dir, "log", "-1", "--format=%P", "origin/main"))
	if got := w.git(t, dir, "rev-parse", "origin/main"); got != res.GetSHA() {
		t.Errorf("main is %s, want the merge commit %s", got, res.GetSHA())
	}
	if len(parents) != 2 || parents[0] != baseBefore || parents[1] != pr.HeadSHA {
		t.Errorf("merge commit parents %v, want [%s %s]", parents, baseBefore, pr.HeadSHA)
	}
	if subject := w.git(t, dir, "log", "-1", "--format=%s", "origin/main"); subject != "Merge pull request #1 from acme/feature" {
		t.Errorf("merge commit subject %q", subject)
	}
	if got := w.git(t, dir, "show", "origin/main:README.md") + "|" + w.git(t, dir, "show", "origin/main:clusters/staging/cluster.yaml"); got != "clusters|changed by feature" {
		t.Errorf("merged tree: %q", got)
	}

	got, _, err := gh.PullRequests.Get(ctx, "acme", "clusters", pr.Number)
	if err != nil {
		t.Fatal(err)
	}
	if !got.GetMerged() || got.GetState() != "closed" || got.GetMergeCommitSHA() != res.GetSHA() || got.GetMergedBy().GetLogin() != "alice" {
		t.Errorf("merged pull request: merged %v state %s merge_commit_sha %s merged_by %s",
			got.GetMerged(), got.GetState(), got.GetMergeCommitSHA(), got.GetMergedBy().GetLogin())
	}
	if merged, _, err := gh.PullRequests.IsMerged(ctx, "acme", "clusters", pr.Number); err != nil || !merged {
		t.Errorf("IsMerged = %v, %v", merged, err)
	}
	if _, resp, err := gh.PullRequests.Merge(ctx, "acme", "clusters", pr.Number, "", nil); err == nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("second merge: %v, want 405", err)
	}
	open, _, err := gh.PullRequests.List(ctx, "acme", "clusters", nil)
	if err != nil || len(open) != 0 {
		t.Errorf("open pull requests after the merge: %d, %v", len(open), err)
	}
	closed, _, err := gh.PullRequests.List(ctx, "acme", "clusters", &github.PullRequestListOptions{State: "closed"})
	if err != nil || len(closed) != 1 {
		t.Errorf("closed pull requests after the merge: %d, %v", len(closed), err)
	}
}

func TestConflictingPullRequestIsNotMergeable(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	w.seed(t, 1)
	if _, err := w.repo.Commit("left", map[string]string{"clusters/prod-a/cluster.yaml": "left\n"}, "left"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.repo.Commit("right", map[string]string{"clusters/prod-a/cluster.yaml": "right\n"}, "right"); err != nil {
		t.Fatal(err)
	}
	left, err := w.repo.OpenPR(alice.Login, "left", "main", "Left")
	if err != nil {
		t.Fatal(err)
	}
	right, err := w.repo.OpenPR(alice.Login, "right", "main", "Right")
	if err != nil {
		t.Fatal(err)
	}
	if !left.Mergeable || !right.Mergeable {
		t.Fatalf("both pull requests should be mergeable before either is merged")
	}
	if _, err := w.repo.Merge(left.Number, alice.Login); err != nil {
		t.Fatal(err)
	}
	gh := w.client(t, alice)
	got, _, err := gh.PullRequests.Get(ctx, "acme", "clusters", right.Number)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetMergeable() || got.GetMergeableState() != "dirty" {
		t.Errorf("conflicting pull request: mergeable %v state %s", got.GetMergeable(), got.GetMergeableState())
	}
	if _, resp, err := gh.PullRequests.Merge(ctx, "acme", "clusters", right.Number, "", nil); err == nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("merging a conflicting pull request: %v, want 405", err)
	}
	if snap, _ := w.repo.PR(right.Number); len(snap.Conflicts) != 1 || snap.Conflicts[0] != "clusters/prod-a/cluster.yaml" {
		t.Errorf("conflicts %v", snap.Conflicts)
	}
}

func TestCollaboratorPermission(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	if err := w.f.AddUser(forge.User{Login: "dave", Token: "tok-dave"}); err != nil {
		t.Fatal(err)
	}
	acme, err := w.f.CreateRepo("alice", "dotfiles", "")
	if err != nil {
		t.Fatal(err)
	}
	gh := w.client(t, agent)
	for _, tc := range []struct{ repo, user, want string }{
		{"clusters", "alice", "admin"},
		{"clusters", "taloscluster-bot", "write"},
		{"clusters", "carol", "read"},
		{"clusters", "dave", "none"},
		{"clusters", "mallory", "none"},
		{acme.Name(), "alice", "admin"}, // the owner
	} {
		owner := "acme"
		if tc.repo == acme.Name() {
			owner = "alice"
		}
		p, _, err := gh.Repositories.GetPermissionLevel(t.Context(), owner, tc.repo, tc.user)
		if err != nil {
			t.Fatalf("%s on %s: %v", tc.user, tc.repo, err)
		}
		if p.GetPermission() != tc.want || p.GetUser().GetLogin() != tc.user {
			t.Errorf("%s on %s: %s, want %s", tc.user, tc.repo, p.GetPermission(), tc.want)
		}
	}
	if _, resp, err := gh.Repositories.GetPermissionLevel(t.Context(), "acme", "clusters", "nobody"); err == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown user: %v", err)
	}
	if _, resp, err := gh.Repositories.GetPermissionLevel(t.Context(), "acme", "missing", "alice"); err == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown repository: %v", err)
	}
}

func TestConditionalRequestsDoNotCount(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(o *forge.Options) { o.RateLimit = 100 })
	pr := openFeaturePR(t, w, "feature", "a.txt")
	ctx := t.Context()
	gh := w.client(t, agent)

	for _, path := range []string{
		"repos/acme/clusters/pulls",
		fmt.Sprintf("repos/acme/clusters/pulls/%d", pr.Number),
		fmt.Sprintf("repos/acme/clusters/issues/%d/comments", pr.Number),
		fmt.Sprintf("repos/acme/clusters/commits/%s/statuses", pr.HeadSHA),
	} {
		req, err := gh.NewRequest("GET", path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := gh.Do(ctx, req, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		etag := resp.Header.Get("ETag")
		before := resp.Rate.Remaining
		if etag == "" || before != w.f.RateRemaining(agent.Login) {
			t.Fatalf("%s: etag %q, remaining %d vs %d", path, etag, before, w.f.RateRemaining(agent.Login))
		}

		req.Header.Set("If-None-Match", etag)
		resp, err = gh.Do(ctx, req, io.Discard)
		if resp == nil || resp.StatusCode != http.StatusNotModified {
			t.Fatalf("%s: conditional request: %v, want 304", path, err)
		}
		if resp.Rate.Remaining != before || w.f.RateRemaining(agent.Login) != before {
			t.Errorf("%s: a 304 counted: remaining %d, was %d", path, resp.Rate.Remaining, before)
		}
		if resp.Rate.Limit != 100 || resp.Header.Get("X-RateLimit-Used") == "" || resp.Rate.Reset.IsZero() {
			t.Errorf("%s: rate headers %v", path, resp.Header)
		}

		req.Header.Set("If-None-Match", `W/"other"`)
		resp, err = gh.Do(ctx, req, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Rate.Remaining != before-1 {
			t.Errorf("%s: a 200 did not count: remaining %d, was %d", path, resp.Rate.Remaining, before)
		}
	}

	// A change makes the old ETag stale.
	req, _ := gh.NewRequest("GET", fmt.Sprintf("repos/acme/clusters/issues/%d/comments", pr.Number), nil)
	resp, err := gh.Do(ctx, req, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := gh.Issues.CreateComment(ctx, "acme", "clusters", pr.Number, &github.IssueComment{Body: ptr("x")}); err != nil {
		t.Fatal(err)
	}
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	if resp, err := gh.Do(ctx, req, io.Discard); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("after a new comment: %v", err)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pr := openFeaturePR(t, w, "feature", "a.txt")
	ctx := t.Context()

	t.Run("injected 502", func(t *testing.T) {
		t.Parallel()
		gh := w.client(t, agent)
		w.f.Fail("pulls.get", 1, http.StatusBadGateway)
		_, _, err := gh.PullRequests.Get(ctx, "acme", "clusters", pr.Number)
		var er *github.ErrorResponse
		if !errors.As(err, &er) || er.Response.StatusCode != http.StatusBadGateway {
			t.Fatalf("err %v, want a 502 *github.ErrorResponse", err)
		}
		if _, _, err := gh.PullRequests.Get(ctx, "acme", "clusters", pr.Number); err != nil {
			t.Fatalf("the second request failed too: %v", err)
		}
	})

	t.Run("secondary rate limit", func(t *testing.T) {
		t.Parallel()
		gh := w.client(t, carol)
		w.f.SecondaryRateLimit("comments.*", 1, 1500*time.Millisecond)
		_, _, err := gh.Issues.CreateComment(ctx, "acme", "clusters", pr.Number, &github.IssueComment{Body: ptr("hello")})
		var ae *github.AbuseRateLimitError
		if !errors.As(err, &ae) {
			t.Fatalf("err %T %v, want *github.AbuseRateLimitError", err, err)
		}
		if ae.RetryAfter == nil || *ae.RetryAfter != 2*time.Second {
			t.Errorf("RetryAfter %v, want 2s", ae.RetryAfter)
		}
		if len(w.repo.Comments(pr.Number)) != 0 {
			t.Errorf("the refused comment was created")
		}
		if got := ops(w.f, "comments.create", http.StatusForbidden); len(got) != 1 || got[0].User != "carol" {
			t.Errorf("log: %+v", got)
		}
	})

	t.Run("latency", func(t *testing.T) {
		t.Parallel()
		gh := w.client(t, agent)
		w.f.Latency("pulls.list", 2*time.Second)
		defer w.f.Latency("pulls.list", 0)
		c, cancel := contextWithTimeout(t, 100*time.Millisecond)
		defer cancel()
		if _, _, err := gh.PullRequests.List(c, "acme", "clusters", nil); err == nil {
			t.Fatalf("a slow request did not time out")
		}
	})
}

func TestPrimaryRateLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(o *forge.Options) { o.RateLimit = 3 })
	w.seed(t, 1)
	ctx := t.Context()

	gh := w.client(t, carol)
	for i := range 3 {
		_, resp, err := gh.Repositories.Get(ctx, "acme", "clusters")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Rate.Remaining != 2-i {
			t.Errorf("request %d: remaining %d", i, resp.Rate.Remaining)
		}
	}
	_, _, err := gh.Repositories.Get(ctx, "acme", "clusters")
	var rle *github.RateLimitError
	if !errors.As(err, &rle) {
		t.Fatalf("err %T %v, want *github.RateLimitError", err, err)
	}
	// Other users have their own budget, until the forge exhausts them all.
	bot := w.client(t, agent)
	if _, _, err := bot.Repositories.Get(ctx, "acme", "clusters"); err != nil {
		t.Fatal(err)
	}
	reset := time.Now().Add(time.Hour).Truncate(time.Second)
	w.f.PrimaryExhausted(reset)
	_, _, err = bot.Repositories.Get(ctx, "acme", "clusters")
	if !errors.As(err, &rle) || !rle.Rate.Reset.Time.Equal(reset) || rle.Rate.Remaining != 0 {
		t.Fatalf("err %v, want *github.RateLimitError resetting at %v", err, reset)
	}
	// The rate-limit endpoint itself does not count and still answers.
	rl, _, err := w.client(t, alice).RateLimit.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rl.GetCore().Remaining != 0 || rl.GetCore().Limit != 3 {
		t.Errorf("core rate %+v", rl.GetCore())
	}
}

func TestForkPullRequest(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	base := w.seed(t, 3)
	fork, err := w.f.CreateFork("acme", "clusters", "mallory")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fork.Branch("main"); err != nil || got != base {
		t.Fatalf("the fork's main is %s (%v), want %s", got, err, base)
	}

	// mallory pushes to her fork with plain git and opens a pull request on acme/clusters.
	dir := w.clone(t, mallory, "mallory/clusters")
	w.git(t, dir, "checkout", "--quiet", "-b", "evil")
	head1 := w.commitFile(t, dir, ".taloscluster/policy.yaml", "allow: everything\n", "relax policy")
	w.git(t, dir, "push", "--quiet", "origin", "evil")
	// She cannot push to acme/clusters itself.
	if out, err := w.gitCmd(t, dir, "push", w.remote(mallory, "acme/clusters"), "evil"); err == nil {
		t.Errorf("mallory pushed to acme/clusters:\n%s", out)
	}

	gh := w.client(t, mallory)
	pr, _, err := gh.PullRequests.Create(ctx, "acme", "clusters", &github.NewPullRequest{
		Title: ptr("Relax policy"), Head: ptr("mallory:evil"), Base: ptr("main"),
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := w.client(t, agent).PullRequests.Get(ctx, "acme", "clusters", pr.GetNumber())
	if err != nil {
		t.Fatal(err)
	}
	if !got.GetHead().GetRepo().GetFork() || got.GetHead().GetRepo().GetFullName() != "mallory/clusters" ||
		got.GetBase().GetRepo().GetFullName() != "acme/clusters" || got.GetBase().GetRepo().GetFork() ||
		got.GetHead().GetSHA() != head1 || got.GetUser().GetLogin() != "mallory" || got.GetHead().GetLabel() != "mallory:evil" {
		t.Fatalf("fork pull request: head repo %s fork %v, base repo %s, head %s, user %s",
			got.GetHead().GetRepo().GetFullName(), got.GetHead().GetRepo().GetFork(),
			got.GetBase().GetRepo().GetFullName(), got.GetHead().GetSHA(), got.GetUser().GetLogin())
	}
	if got.GetAuthorAssociation() != "NONE" {
		t.Errorf("author association %s", got.GetAuthorAssociation())
	}

	// The base repository serves the fork's commits under refs/pull/N/head.
	agentDir := w.clone(t, agent, "acme/clusters")
	refspec := fmt.Sprintf("+refs/pull/%d/head:refs/remotes/origin/pr", pr.GetNumber())
	w.git(t, agentDir, "fetch", "--quiet", "origin", refspec)
	if sha := w.git(t, agentDir, "rev-parse", "refs/remotes/origin/pr"); sha != head1 {
		t.Fatalf("fetched %s, want %s", sha, head1)
	}
	head2 := w.commitFile(t, dir, ".taloscluster/policy.yaml", "allow: more\n", "relax more")
	w.git(t, dir, "push", "--quiet", "origin", "evil")
	w.git(t, agentDir, "fetch", "--quiet", "origin", refspec)
	if sha := w.git(t, agentDir, "rev-parse", "refs/remotes/origin/pr"); sha != head2 {
		t.Fatalf("after a push to the fork, fetched %s, want %s", sha, head2)
	}

	// An unknown fork owner is a validation failure.
	_, resp, err := gh.PullRequests.Create(ctx, "acme", "clusters", &github.NewPullRequest{
		Title: ptr("x"), Head: ptr("carol:evil"), Base: ptr("main"),
	})
	if err == nil || resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("a pull request from a missing fork: %v", err)
	}
}

func TestPullRequestValidationAndListing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	w.seed(t, 1)
	gh := w.client(t, alice)
	for i := range 3 {
		if _, err := w.repo.Commit(fmt.Sprintf("b%d", i), map[string]string{fmt.Sprintf("f%d", i): "x"}, "x"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := gh.PullRequests.Create(ctx, "acme", "clusters", &github.NewPullRequest{
			Title: ptr(fmt.Sprintf("PR %d", i)), Head: ptr(fmt.Sprintf("b%d", i)), Base: ptr("main"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		in   github.NewPullRequest
	}{
		{"duplicate", github.NewPullRequest{Title: ptr("again"), Head: ptr("b0"), Base: ptr("main")}},
		{"missing head", github.NewPullRequest{Title: ptr("x"), Head: ptr("nope"), Base: ptr("main")}},
		{"missing base", github.NewPullRequest{Title: ptr("x"), Head: ptr("b0"), Base: ptr("nope")}},
		{"no commits", github.NewPullRequest{Title: ptr("x"), Head: ptr("main"), Base: ptr("main")}},
		{"no title", github.NewPullRequest{Head: ptr("b1"), Base: ptr("main")}},
	} {
		_, resp, err := gh.PullRequests.Create(ctx, "acme", "clusters", &tc.in)
		if err == nil || resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("%s: %v, want 422", tc.name, err)
		}
	}

	prs, resp, err := gh.PullRequests.List(ctx, "acme", "clusters", &github.PullRequestListOptions{ListOptions: github.ListOptions{PerPage: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if len(prs) != 2 || prs[0].GetNumber() != 3 || resp.NextPage != 2 {
		t.Errorf("first page: %d pull requests, first #%d, next page %d", len(prs), prs[0].GetNumber(), resp.NextPage)
	}
	prs, _, err = gh.PullRequests.List(ctx, "acme", "clusters", &github.PullRequestListOptions{Head: "acme:b1"})
	if err != nil || len(prs) != 1 || prs[0].GetNumber() != 2 {
		t.Errorf("filtered by head: %v", err)
	}
	if _, _, err := gh.PullRequests.Edit(ctx, "acme", "clusters", 1, &github.PullRequest{State: ptr("closed")}); err != nil {
		t.Fatal(err)
	}
	prs, _, err = gh.PullRequests.List(ctx, "acme", "clusters", &github.PullRequestListOptions{State: "all"})
	if err != nil || len(prs) != 3 {
		t.Errorf("all pull requests: %d, %v", len(prs), err)
	}
	prs, _, err = gh.PullRequests.List(ctx, "acme", "clusters", nil)
	if err != nil || len(prs) != 2 {
		t.Errorf("open pull requests after closing one: %d, %v", len(prs), err)
	}
}

func TestUnimplementedEndpoint(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gh := w.client(t, agent)
	_, _, err := gh.Repositories.ListTags(t.Context(), "acme", "clusters", nil)
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Response.StatusCode != http.StatusNotImplemented {
		t.Fatalf("err %v, want 501", err)
	}
	if !strings.Contains(er.Message, "GET /repos/acme/clusters/tags") {
		t.Errorf("message %q does not name the method and path", er.Message)
	}
	if got := ops(w.f, "unimplemented", http.StatusNotImplemented); len(got) != 1 {
		t.Errorf("log: %+v", got)
	}
}

func TestAuthorizationSchemes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for _, tc := range []struct {
		name, header string
		status       int
	}{
		{"token", "token " + carol.Token, http.StatusOK},
		{"bearer", "Bearer " + carol.Token, http.StatusOK},
		{"basic with the token as password", basic("carol", carol.Token), http.StatusOK},
		{"basic with the token as user", basic(carol.Token, "x-oauth-basic"), http.StatusOK},
		{"none", "", http.StatusUnauthorized},
		{"bad token", "token nope", http.StatusUnauthorized},
	} {
		req, err := http.NewRequestWithContext(t.Context(), "GET", w.srv.URL+"/user", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		resp, err := w.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.status)
		}
		wantLimit := "5000"
		if tc.status == http.StatusUnauthorized {
			wantLimit = "60" // the anonymous budget
		}
		if got := resp.Header.Get("X-RateLimit-Limit"); got != wantLimit {
			t.Errorf("%s: X-RateLimit-Limit %q, want %s", tc.name, got, wantLimit)
		}
		if tc.status == http.StatusOK && !strings.Contains(string(body), `"login":"carol"`) {
			t.Errorf("%s: body %s", tc.name, body)
		}
	}
}
