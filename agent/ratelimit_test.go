package agent_test

import (
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/taloscluster/taloscluster/agent"
	gh "github.com/taloscluster/taloscluster/report/github"
)

// Under GitHub's rate limit a merge is converged; its statuses and comment
// wait, the newest status per commit and context only; pull requests are
// not listed nor planned, and GitHub is not asked again until the limit is
// over (or GET /rate_limit says it is back).
func TestRateLimitHoldsReportsAndPlansButNotConverges(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *agent.Config) { c.Repository.PollInterval = agent.Duration(time.Millisecond) })
	w.openPR(1, "h1", "cp-1")
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	w.forge.limit(until)
	w.land(1, "m1", "cp-1")
	w.repo.mu.Lock()
	w.repo.trees["h2"] = w.repo.trees["m1"]
	w.repo.heads.PRs = map[int]string{2: "h2"}
	w.repo.mu.Unlock()
	w.forge.mu.Lock()
	w.forge.open = append(w.forge.open, w.forge.open...)
	w.forge.mu.Unlock()

	for i := range 5 {
		err := w.agent.Poll(t.Context())
		if err == nil || !strings.Contains(err.Error(), "GitHub API rate limit exhausted until") {
			t.Fatalf("poll %d under the rate limit: %v", i, err)
		}
		w.agent.Wait()
	}
	w.runner.mu.Lock()
	created := w.runner.created["cp-1"]
	w.runner.mu.Unlock()
	if !created {
		t.Fatal("the merge was not converged under the rate limit")
	}
	if got := w.forge.statusesOf("m1", convergeContext); len(got) != 0 {
		t.Fatalf("statuses posted under the rate limit: %+v", got)
	}
	w.forge.mu.Lock()
	refused := w.forge.refused
	w.forge.mu.Unlock()
	// The poll and the report delivery run side by side: each may meet
	// the limit once before the agent knows it, never once a poll.
	if refused < 1 || refused > 2 {
		t.Errorf("GitHub was asked %d times under the limit over 5 polls, want once per caller (then the agent knows)", refused)
	}
	// A fetch within three poll intervals (milliseconds here) comes
	// first: poll right before asking.
	_ = w.agent.Poll(t.Context())
	w.agent.Wait()
	if err := w.agent.Ready(); err == nil || !strings.Contains(err.Error(), "GitHub API rate limit exhausted until "+until.UTC().Format(time.RFC3339)) {
		t.Errorf("Ready: %v", err)
	}

	w.forge.limit(time.Time{})
	w.forge.mu.Lock()
	w.forge.open = nil
	w.forge.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // a poll interval: the agent asks /rate_limit again
	w.poll()
	got := w.forge.statusesOf("m1", convergeContext)
	if len(got) != 1 || got[0].state != "success" {
		t.Fatalf("statuses after the limit: %+v, want the newest only (success)", got)
	}
	if cs := w.forge.commentsOn(1); len(cs) != 1 || !strings.Contains(cs[0], "taloscluster converge") || !strings.Contains(cs[0], "rate limit") {
		t.Fatalf("comments on the merged pull request after the limit: %q", cs)
	}
	// Ready also wants a fetch within three poll intervals, which are
	// milliseconds here: poll again right before asking, a few times on a
	// loaded machine.
	var err error
	for range 5 {
		w.poll()
		if err = w.agent.Ready(); err == nil {
			break
		}
	}
	if err != nil {
		t.Errorf("Ready after the limit: %v", err)
	}
}

// A pull request whose author's permission could not be read for the
// rate limit is planned after it, not marked untrusted.
func TestRateLimitedPermissionIsReadAfterTheLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *agent.Config) { c.Repository.PollInterval = agent.Duration(200 * time.Millisecond) })
	w.forge.mu.Lock()
	w.forge.limitedUntil, w.forge.limitOnly = time.Now().Add(time.Hour), "Permission"
	w.forge.mu.Unlock()
	w.repo.mu.Lock()
	w.repo.trees["h1"] = fstest.MapFS{cluster + "/cluster.yaml": {Data: []byte("cp-1")}}
	w.repo.heads.PRs = map[int]string{1: "h1"}
	w.repo.mu.Unlock()
	w.forge.mu.Lock()
	w.forge.open = []gh.PR{{Number: 1, Head: "h1", Author: "alice", Title: "grow"}}
	w.forge.mu.Unlock()
	w.poll()
	if err := w.agent.Ready(); err == nil || !strings.Contains(err.Error(), "rate limit") {
		t.Fatalf("Ready: %v", err)
	}
	w.forge.limit(time.Time{})
	time.Sleep(210 * time.Millisecond) // a poll interval: the agent asks /rate_limit again
	w.poll()
	if got := w.last("h1", planContext); got.state != "success" {
		t.Fatalf("plan status after the limit: %+v", got)
	}
	for _, s := range w.forge.statusesOf("h1", "taloscluster/plan") {
		t.Errorf("marked untrusted under the rate limit: %+v", s)
	}
}
