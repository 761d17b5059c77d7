package gitsync_test

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/gitsync"
)

func TestOpenClonesBareAndReopens(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.write(map[string]string{"clusters/a/cluster.yaml": "name: a\n"})
	first := o.commit("first")
	o.pushMain()

	dir := filepath.Join(t.TempDir(), "clone")
	r := open(t, ctx, gitsync.Options{URL: o.bare, Dir: dir})

	// A bare clone: git's own files at the top, no work tree.
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		t.Fatalf("clone is not bare: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "clusters")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("clone has a work tree: %v", err)
	}
	h, err := r.Heads()
	if err != nil {
		t.Fatal(err)
	}
	if h.Default != first || h.DefaultBranch != "main" || len(h.PRs) != 0 {
		t.Fatalf("Heads after clone = %+v, want main at %s", h, first)
	}
	if want := "file://" + o.bare; r.URL() != want {
		t.Fatalf("URL() = %q, want %q", r.URL(), want)
	}

	// Reopening the same directory with the same remote (spelt as a
	// file:// URL this time) works without network I/O.
	r2 := open(t, ctx, gitsync.Options{URL: "file://" + o.bare, Dir: dir})
	h2, err := r2.Heads()
	if err != nil {
		t.Fatal(err)
	}
	if h2.Default != first {
		t.Fatalf("reopened Heads = %+v", h2)
	}

	// Another remote is refused.
	other := newOrigin(t)
	other.commit("x")
	other.pushMain()
	_, err = gitsync.Open(ctx, gitsync.Options{URL: other.bare, Dir: dir})
	if !errors.Is(err, gitsync.ErrRemoteMismatch) {
		t.Fatalf("Open with another remote: err = %v, want ErrRemoteMismatch", err)
	}

	// A non-empty directory that is not a clone is refused.
	junk := t.TempDir()
	if err := os.WriteFile(filepath.Join(junk, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := gitsync.Open(ctx, gitsync.Options{URL: o.bare, Dir: junk}); err == nil {
		t.Fatal("Open on a non-repository directory succeeded")
	}
}

func TestFetchFollowsBranchAndPullRequests(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.write(map[string]string{"clusters/a/cluster.yaml": "name: a\n"})
	c1 := o.commit("first")
	o.pushMain()
	_, url := o.gitHTTP(false, nil)
	r := open(t, ctx, gitsync.Options{URL: url})

	h, err := r.Fetch(ctx, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if h.Default != c1 || len(h.PRs) != 0 {
		t.Fatalf("Heads = %+v, want main at %s and no PRs (PR 1 not advertised yet)", h, c1)
	}

	// A new commit on main and a new PR head.
	o.write(map[string]string{"clusters/a/cluster.yaml": "name: a\nversion: 2\n"})
	c2 := o.commit("second")
	o.pushMain()
	o.git(o.work, "checkout", "-q", "-b", "pr-1")
	o.write(map[string]string{"clusters/b/cluster.yaml": "name: b\n"})
	p1 := o.commit("add b")
	o.openPR(1, p1)

	h, err = r.Fetch(ctx, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	want := gitsync.Heads{Default: c2, DefaultBranch: "main", PRs: map[int]string{1: p1}}
	if !sameHeads(h, want) {
		t.Fatalf("Heads = %+v, want %+v", h, want)
	}
	readAt(t, r, p1, "clusters/b/cluster.yaml", "name: b\n")
	readAt(t, r, "refs/remotes/pull/1/head", "clusters/b/cluster.yaml", "name: b\n")
	readAt(t, r, c2, "clusters/a/cluster.yaml", "name: a\nversion: 2\n")

	// The PR head moves (a force-push that drops p1).
	o.git(o.work, "checkout", "-q", "-B", "pr-1", "main")
	o.write(map[string]string{"clusters/b/cluster.yaml": "name: b\nnodes: 3\n"})
	p1b := o.commit("add b, take two")
	o.openPR(1, p1b)
	h, err = r.Fetch(ctx, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	want.PRs[1] = p1b
	if !sameHeads(h, want) {
		t.Fatalf("Heads after move = %+v, want %+v", h, want)
	}
	readAt(t, r, "refs/remotes/pull/1/head", "clusters/b/cluster.yaml", "name: b\nnodes: 3\n")

	local, err := r.Heads()
	if err != nil {
		t.Fatal(err)
	}
	if !sameHeads(local, want) {
		t.Fatalf("local Heads = %+v, want %+v", local, want)
	}
}

func TestIdleFetchTransfersOnlyTheRefAdvertisement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.write(map[string]string{"clusters/a/cluster.yaml": "name: a\n", "clusters/b/cluster.yaml": "name: b\n"})
	o.commit("first")
	o.pushMain()
	for n := 1; n <= 3; n++ {
		o.git(o.work, "checkout", "-q", "-B", "pr", "main")
		o.write(map[string]string{"clusters/a/patch.yaml": strings.Repeat("x", n)})
		o.openPR(n, o.commit("pr"))
	}
	_, url := o.gitHTTP(false, nil)
	var w wire
	r := open(t, ctx, gitsync.Options{URL: url, HTTPClient: w.client(nil)})
	if _, err := r.FetchAll(ctx); err != nil {
		t.Fatal(err)
	}
	if !hasPOST(w.requests()) {
		t.Fatalf("the first fetches requested no packfile: %v", w.requests())
	}

	w.reset()
	h, err := r.FetchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.PRs) != 3 {
		t.Fatalf("Heads = %+v, want 3 PRs", h)
	}
	reqs := w.requests()
	if len(reqs) != 1 || !strings.HasPrefix(reqs[0], "GET ") || !strings.HasSuffix(reqs[0], "/info/refs") {
		t.Fatalf("idle fetch made requests %v, want one GET .../info/refs", reqs)
	}
	if hasPOST(reqs) {
		t.Fatalf("idle fetch requested a packfile: %v", reqs)
	}
	n := w.bytes.Load()
	t.Logf("idle fetch: %d bytes on the wire (4 refs)", n)
	if n == 0 || n >= 2048 {
		t.Fatalf("idle fetch moved %d bytes, want 0 < n < 2048", n)
	}
}

func hasPOST(reqs []string) bool {
	for _, r := range reqs {
		if strings.HasPrefix(r, "POST ") {
			return true
		}
	}
	return false
}

func TestClosedPullRequestIsPruned(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.write(map[string]string{"clusters/a/cluster.yaml": "name: a\n"})
	base := o.commit("first")
	o.pushMain()
	o.git(o.work, "checkout", "-q", "-b", "pr")
	o.write(map[string]string{"clusters/a/patch.yaml": "p\n"})
	p := o.commit("pr")
	o.openPR(1, p)
	o.openPR(2, p)
	o.openPR(3, base)

	r := open(t, ctx, gitsync.Options{URL: o.bare})

	// With the forge's list of open PRs: PR 2 was closed but GitHub keeps
	// advertising its head; the local ref goes anyway.
	h, err := r.Fetch(ctx, []int{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.PRs) != 3 {
		t.Fatalf("Heads = %+v, want 3 PRs", h)
	}
	h, err = r.Fetch(ctx, []int{1, 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.PRs[2]; ok || len(h.PRs) != 2 {
		t.Fatalf("Heads after closing PR 2 = %+v", h)
	}
	assertNoLocalPR(t, r, 2)

	// With the advertisement: PR 3's ref is deleted on the remote.
	o.closePR(3)
	h, err = r.FetchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int]string{1: p, 2: p}; !maps.Equal(h.PRs, want) {
		t.Fatalf("FetchAll PRs = %v, want %v", h.PRs, want)
	}
	assertNoLocalPR(t, r, 3)
	if _, err := r.Tree("refs/remotes/pull/3/head"); err == nil {
		t.Fatal("the pruned ref still resolves")
	}
}

func assertNoLocalPR(t *testing.T, r *gitsync.Repo, n int) {
	t.Helper()
	local, err := r.Heads()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := local.PRs[n]; ok {
		t.Fatalf("local refs still hold PR %d: %+v", n, local)
	}
}

func TestDefaultBranchOption(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	main := o.commit("on main")
	o.pushMain()
	o.git(o.work, "checkout", "-q", "-b", "release")
	rel := o.commit("on release")
	o.git(o.work, "push", "-q", "origin", "release")

	r := open(t, ctx, gitsync.Options{URL: o.bare, DefaultBranch: "release"})
	h, err := r.Fetch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.DefaultBranch != "release" || h.Default != rel {
		t.Fatalf("Heads = %+v, want release at %s (main is %s)", h, rel, main)
	}

	_, err = gitsync.Open(ctx, gitsync.Options{URL: o.bare, Dir: filepath.Join(t.TempDir(), "c"), DefaultBranch: "nope"})
	if err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Open with a missing branch: err = %v", err)
	}
}

func TestTLSWithCustomRoots(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	c := o.commit("first")
	o.pushMain()
	srv, url := o.gitHTTP(true, nil)

	// The system roots do not trust the test CA.
	_, err := gitsync.Open(ctx, gitsync.Options{URL: url, Dir: filepath.Join(t.TempDir(), "c")})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Open without the CA: err = %v, want a certificate error", err)
	}
	if !strings.Contains(err.Error(), "fetching "+url) {
		t.Fatalf("error %q does not name the remote", err)
	}

	r := open(t, ctx, gitsync.Options{URL: url, HTTPClient: srv.Client()})
	h, err := r.Heads()
	if err != nil {
		t.Fatal(err)
	}
	if h.Default != c {
		t.Fatalf("Heads = %+v, want %s", h, c)
	}
}

// TestCredentialsNeverInErrors seeds a token and checks that it reaches
// the server as basic auth but never an error, the logs or the clone's
// configuration, even when the server echoes it back.
func TestCredentialsNeverInErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const token = "ghs_S3cr3tT0kenValue1234567890"
	o := newOrigin(t)
	o.commit("first")
	o.pushMain()
	var seenUser atomic.Value
	_, url := o.gitHTTP(false, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			user, pass, ok := req.BasicAuth()
			if !ok || pass != token {
				// A badly behaved server that echoes what it got.
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte("bad credentials: " + user + ":" + pass + " " + req.Header.Get("Authorization")))
				return
			}
			seenUser.Store(user)
			next.ServeHTTP(w, req)
		})
	})
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	r := open(t, ctx, gitsync.Options{URL: url, Auth: gitsync.Auth{TokenFile: tokenFile}, Logger: newTextLogger(&logs)})
	if u, _ := seenUser.Load().(string); u != gitsync.DefaultUsername {
		t.Fatalf("server saw user %q, want %q", u, gitsync.DefaultUsername)
	}
	cfg, err := os.ReadFile(filepath.Join(r.Dir(), "config"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cfg), token) {
		t.Fatal("the token is in the clone's configuration")
	}

	// Rotate the token file to a wrong value that the server echoes back.
	wrong := "ghs_WrongT0kenValue0987654321"
	if err := os.WriteFile(tokenFile, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = r.Fetch(ctx, nil)
	assertClean(t, err, wrong, token)

	// Credentials embedded in the URL: used, never shown.
	withCreds := strings.Replace(url, "http://", "http://"+gitsync.DefaultUsername+":"+wrong+"@", 1)
	_, err = gitsync.Open(ctx, gitsync.Options{URL: withCreds, Dir: filepath.Join(dir, "c2")})
	assertClean(t, err, wrong)
	_, err = gitsync.Open(ctx, gitsync.Options{URL: strings.Replace(url, "http://", "http://"+wrong+"@", 1), Dir: filepath.Join(dir, "c3")})
	assertClean(t, err, wrong)
	// Unparseable URL carrying credentials.
	_, err = gitsync.Open(ctx, gitsync.Options{URL: "http://u:" + wrong + "@127.0.0.1:notaport/x", Dir: filepath.Join(dir, "c4")})
	assertClean(t, err, wrong)
	// Right token in the URL works, and the stored URL has no credentials.
	good := open(t, ctx, gitsync.Options{URL: strings.Replace(url, "http://", "http://me:"+token+"@", 1)})
	if strings.Contains(good.URL(), token) {
		t.Fatalf("URL() = %q", good.URL())
	}

	if strings.Contains(logs.String(), token) || strings.Contains(logs.String(), wrong) {
		t.Fatalf("a credential reached the logs:\n%s", logs.String())
	}
}

// assertClean fails unless err is an error and no secret appears in its
// text or in the text of anything it wraps.
func assertClean(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("want an error")
	}
	t.Logf("error: %v", err)
	for _, e := range unwrapAll(err) {
		for _, s := range secrets {
			if strings.Contains(e.Error(), s) {
				t.Fatalf("error %q contains a credential", e.Error())
			}
		}
	}
}

func unwrapAll(err error) []error {
	out := []error{err}
	switch x := err.(type) {
	case interface{ Unwrap() error }:
		if inner := x.Unwrap(); inner != nil {
			out = append(out, unwrapAll(inner)...)
		}
	case interface{ Unwrap() []error }:
		for _, inner := range x.Unwrap() {
			out = append(out, unwrapAll(inner)...)
		}
	}
	return out
}

func sameHeads(a, b gitsync.Heads) bool {
	return a.Default == b.Default && a.DefaultBranch == b.DefaultBranch && maps.Equal(a.PRs, b.PRs)
}

func readAt(t *testing.T, r *gitsync.Repo, commit, name, want string) {
	t.Helper()
	fsys, err := r.Tree(commit)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		t.Fatalf("%s at %s: %v", name, commit, err)
	}
	if string(b) != want {
		t.Fatalf("%s at %s = %q, want %q", name, commit, b, want)
	}
}

func TestFetchHonoursTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.commit("first")
	o.pushMain()
	var hang atomic.Bool
	_, url := o.gitHTTP(false, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if hang.Load() {
				<-req.Context().Done() // a server that never answers
				return
			}
			next.ServeHTTP(w, req)
		})
	})
	// The clone gets the default timeout, so a busy machine cannot fail it;
	// the same clone opened again bounds its fetches at 300ms.
	dir := filepath.Join(t.TempDir(), "clone")
	open(t, ctx, gitsync.Options{URL: url, Dir: dir})
	r := open(t, ctx, gitsync.Options{URL: url, Dir: dir, Timeout: 300 * time.Millisecond})
	hang.Store(true)
	start := time.Now()
	_, err := r.Fetch(ctx, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fetch against a hung server: err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Fetch took %v", d)
	}
	if !strings.Contains(err.Error(), "fetching "+url) {
		t.Fatalf("error %q does not name the remote", err)
	}
}

func TestCompactKeepsWhatRefsReach(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.write(map[string]string{"clusters/a/cluster.yaml": "v1\n"})
	o.commit("one")
	o.pushMain()
	r := open(t, ctx, gitsync.Options{URL: o.bare})
	o.git(o.work, "checkout", "-q", "-b", "pr")
	o.write(map[string]string{"clusters/a/cluster.yaml": "pr\n"})
	p := o.commit("pr")
	o.openPR(1, p)
	if _, err := r.Fetch(ctx, []int{1}); err != nil {
		t.Fatal(err)
	}
	o.git(o.work, "checkout", "-q", "main")
	o.write(map[string]string{"clusters/a/cluster.yaml": "v2\n"})
	c2 := o.commit("two")
	o.pushMain()
	if _, err := r.Fetch(ctx, nil); err != nil { // PR 1 closed
		t.Fatal(err)
	}
	packs := func() int {
		m, err := filepath.Glob(filepath.Join(r.Dir(), "objects", "pack", "*.pack"))
		if err != nil {
			t.Fatal(err)
		}
		return len(m)
	}
	if n := packs(); n != 3 {
		t.Fatalf("%d packs before Compact, want 3", n)
	}
	if err := r.Compact(); err != nil {
		t.Fatal(err)
	}
	if n := packs(); n != 1 {
		t.Fatalf("%d packs after Compact, want 1", n)
	}
	readAt(t, r, c2, "clusters/a/cluster.yaml", "v2\n")
	if _, err := r.Tree(p); err == nil {
		t.Fatal("the pruned PR's commit survived Compact")
	}
	// Fetching after a compaction still works incrementally.
	o.write(map[string]string{"clusters/a/cluster.yaml": "v3\n"})
	c3 := o.commit("three")
	o.pushMain()
	if h, err := r.Fetch(ctx, nil); err != nil || h.Default != c3 {
		t.Fatalf("Fetch after Compact = %+v, %v", h, err)
	}
	readAt(t, r, c3, "clusters/a/cluster.yaml", "v3\n")
}
