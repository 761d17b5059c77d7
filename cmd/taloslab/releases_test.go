package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-github/v60/github"

	"github.com/taloscluster/taloscluster/lab/forge"
)

// TestUpstreamReleases reads the seeded upstream releases of `taloslab
// up` with go-github and makes the release index fail through the
// control API: {"kind":"github-fail","op":"releases.list","status":502}.
func TestUpstreamReleases(t *testing.T) {
	t.Parallel()
	l := startUp(t, "--subnet", "127.215.0.0/24,127.216.0.0/24")
	ctx := t.Context()
	base, err := url.Parse(l.env["TALOSLAB_GITHUB_API"])
	if err != nil {
		t.Fatal(err)
	}
	gh := github.NewClient(l.http).WithAuthToken(l.env["TALOSLAB_GITHUB_TOKEN"])
	gh.BaseURL, gh.UploadURL = base, base

	for _, tc := range []struct{ owner, repo, want string }{
		{"siderolabs", "talos", forge.TalosLatest},
		{"kubernetes", "kubernetes", forge.KubernetesLatest},
	} {
		rel, _, err := gh.Repositories.GetLatestRelease(ctx, tc.owner, tc.repo)
		if err != nil || rel.GetTagName() != tc.want {
			t.Errorf("the latest release of %s/%s: %v %s, want %s", tc.owner, tc.repo, err, rel.GetTagName(), tc.want)
		}
	}
	env, err := os.ReadFile(filepath.Join(l.dir, "lab.env"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(env), "siderolabs/talos\n# (latest "+forge.TalosLatest+")") {
		t.Errorf("lab.env does not name the upstream releases:\n%s", env)
	}

	inject := func(body string, want int) {
		t.Helper()
		if status, resp := l.control(t, http.MethodPost, "/lab/v1/faults", body); status != want {
			t.Fatalf("POST /lab/v1/faults %s: %d %s, want %d", body, status, resp, want)
		}
	}
	inject(`{"kind":"github-fail","op":"releases.list","status":502}`, http.StatusOK)
	_, _, err = gh.Repositories.ListReleases(ctx, "siderolabs", "talos", nil)
	var e *github.ErrorResponse
	if !errors.As(err, &e) || e.Response.StatusCode != http.StatusBadGateway {
		t.Fatalf("the release index with github-fail: %v, want 502", err)
	}
	rels, _, err := gh.Repositories.ListReleases(ctx, "siderolabs", "talos", nil)
	if err != nil || len(rels) != len(forge.TalosReleases()) || rels[0].GetTagName() != forge.TalosPrerelease {
		t.Fatalf("the release index after the fault: %v, %d releases", err, len(rels))
	}
	inject(`{"kind":"github-fail","op":"release.list"}`, http.StatusBadRequest)

	status, body := l.control(t, http.MethodGet, "/lab/v1/", "")
	var index struct {
		Ops []string `json:"github_operations"`
	}
	if err := json.Unmarshal(body, &index); status != http.StatusOK || err != nil {
		t.Fatalf("GET /lab/v1/: %d %s", status, body)
	}
	for _, op := range []string{"releases.list", "releases.latest", "releases.get"} {
		if !slices.Contains(index.Ops, op) {
			t.Errorf("GET /lab/v1/ github_operations lacks %s: %v", op, index.Ops)
		}
	}

	status, body = l.control(t, http.MethodGet, "/lab/v1/log", "")
	var entries []struct {
		Source, Op, Target, Result string
	}
	if err := json.Unmarshal(body, &entries); status != http.StatusOK || err != nil {
		t.Fatalf("GET /lab/v1/log: %d %s", status, body)
	}
	var results []string
	for _, e := range entries {
		if e.Source == "github" && strings.HasPrefix(e.Op, "releases.") {
			results = append(results, e.Op+" "+e.Target+": "+e.Result)
		}
	}
	want := []string{
		"releases.latest GET /repos/siderolabs/talos/releases/latest: 200",
		"releases.latest GET /repos/kubernetes/kubernetes/releases/latest: 200",
		"releases.list GET /repos/siderolabs/talos/releases: 502",
		"releases.list GET /repos/siderolabs/talos/releases: 200",
	}
	if !slices.Equal(results, want) {
		t.Errorf("the log's release requests %q, want %q", results, want)
	}
}
