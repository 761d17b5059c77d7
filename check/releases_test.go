package check

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// releasesServer answers "List releases" for one repository with n
// releases, per_page at a time, linking the next page as GitHub does.
func releasesServer(t *testing.T, n int, handle func(w http.ResponseWriter, r *http.Request) bool) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if handle != nil && handle(w, r) {
			return
		}
		if r.URL.Path != "/repos/kubernetes/kubernetes/releases" {
			http.NotFound(w, r)
			return
		}
		per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		if per <= 0 {
			per = 30
		}
		if page <= 0 {
			page = 1
		}
		var docs []map[string]any
		for i := (page - 1) * per; i < page*per && i < n; i++ {
			docs = append(docs, map[string]any{"id": i + 1, "tag_name": fmt.Sprintf("v1.%d.%d", 30+i/10, i%10),
				"draft": i == 3, "prerelease": i == 4})
		}
		if page*per < n {
			next := fmt.Sprintf("http://%s%s?page=%d&per_page=%d", r.Host, r.URL.Path, page+1, per)
			w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next"`, next))
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(docs)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// TestGitHubReleasesPaginates reads every page, a hundred at a time, and
// passes the draft and prerelease flags on.
func TestGitHubReleasesPaginates(t *testing.T) {
	t.Parallel()
	var auth atomic.Value
	srv, calls := releasesServer(t, 250, func(_ http.ResponseWriter, r *http.Request) bool {
		auth.Store(r.Header.Get("Authorization"))
		return false
	})
	g, err := NewGitHub(GitHubOptions{APIURL: srv.URL, Token: "tok-123456"})
	if err != nil {
		t.Fatal(err)
	}
	rels, err := g.Releases(context.Background(), KubernetesRepository)
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) != 250 || calls.Load() != 3 {
		t.Fatalf("%d releases in %d calls, want 250 in 3", len(rels), calls.Load())
	}
	if !rels[3].Draft || !rels[4].Prerelease || rels[0].Tag != "v1.30.0" {
		t.Errorf("flags or tags lost: %+v", rels[:5])
	}
	if got := auth.Load(); got != "Bearer tok-123456" {
		t.Errorf("Authorization %q", got)
	}
	if ix := NewIndex(rels); ix.Len() != 248 {
		t.Errorf("index of %d releases, want 248", ix.Len())
	}
}

// TestGitHubReleasesFailures: an error answer, after its retries, is an
// error naming the repository and the status, never the token; a server
// that does not answer is given up on after the call timeout.
func TestGitHubReleasesFailures(t *testing.T) {
	t.Parallel()
	const token = "ghp_never-printed-0123456789"
	bad, calls := releasesServer(t, 10, func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, `{"message":"upstream failed for %s"}`, r.Header.Get("Authorization"))
		return true
	})
	g, err := NewGitHub(GitHubOptions{APIURL: bad.URL + "/", Token: token, Attempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Releases(context.Background(), KubernetesRepository)
	if err == nil || !strings.Contains(err.Error(), "listing the releases of kubernetes/kubernetes: 502 Bad Gateway") {
		t.Fatalf("error %v", err)
	}
	if strings.Contains(err.Error(), token) {
		t.Errorf("the token is in the error: %v", err)
	}
	if calls.Load() != 2 {
		t.Errorf("%d calls, want 2 (one retry)", calls.Load())
	}

	release := make(chan struct{})
	hang, _ := releasesServer(t, 10, func(http.ResponseWriter, *http.Request) bool { <-release; return true })
	defer close(release)
	g, err = NewGitHub(GitHubOptions{APIURL: hang.URL, CallTimeout: 200 * time.Millisecond, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = g.Releases(context.Background(), KubernetesRepository)
	if err == nil || !strings.Contains(err.Error(), "no answer within 200ms") || time.Since(start) > 5*time.Second {
		t.Errorf("hanging server: %v after %s", err, time.Since(start))
	}
}

func TestNewGitHubRefusesBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"ftp://example.com/", "not a url", "https://user:pass@example.com/", "/relative"} {
		if _, err := NewGitHub(GitHubOptions{APIURL: u}); err == nil {
			t.Errorf("NewGitHub(%q) accepted", u)
		}
	}
	g, err := NewGitHub(GitHubOptions{})
	if err != nil || g.gh.BaseURL.String() != DefaultGitHubAPI {
		t.Errorf("default API: %v %v", g, err)
	}
	if _, err := g.Releases(context.Background(), "nope"); err == nil {
		t.Error("a repository without owner was accepted")
	}
}
