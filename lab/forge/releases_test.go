package forge_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v60/github"

	"github.com/taloscluster/taloscluster/lab/forge"
)

// upstreamWorld is a world whose forge also holds the upstream
// repositories with their seeded releases.
func upstreamWorld(t *testing.T, opts ...func(*forge.Options)) *world {
	t.Helper()
	w := newWorld(t, opts...)
	if err := w.f.SeedUpstreamReleases(); err != nil {
		t.Fatal(err)
	}
	return w
}

func tags(rels []*github.RepositoryRelease) []string {
	var out []string
	for _, r := range rels {
		out = append(out, r.GetTagName())
	}
	return out
}

// seededTags returns the tags of a seeded history newest first, the order
// GitHub lists them in.
func seededTags(rels []forge.Release) []string {
	var out []string
	for _, r := range slices.Backward(rels) {
		out = append(out, r.Tag)
	}
	return out
}

// statusOf returns the HTTP status of a go-github error, or 0.
func statusOf(err error) int {
	var e *github.ErrorResponse
	if errors.As(err, &e) && e.Response != nil {
		return e.Response.StatusCode
	}
	return 0
}

// TestSeededUpstreamReleases checks the seeded history against its
// documented constants: every patch of every line, one prerelease last,
// created_at increasing with the version, within 2025 and 2026.
func TestSeededUpstreamReleases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		rels       []forge.Release
		want       []string // the newest patch of each line
		prerelease string
		count      int
	}{
		{"talos", forge.TalosReleases(), []string{"v1.11.6", "v1.12.4", "v1.13.8"}, "v1.14.0-beta.0", 7 + 5 + 9 + 1},
		{"kubernetes", forge.KubernetesReleases(), []string{"v1.34.5", "v1.35.3", "v1.36.3", "v1.37.2"}, "v1.38.0-alpha.1", 6 + 4 + 4 + 3 + 1},
	} {
		if len(tc.rels) != tc.count {
			t.Errorf("%s: %d releases, want %d", tc.name, len(tc.rels), tc.count)
		}
		last := tc.rels[len(tc.rels)-1]
		if last.Tag != tc.prerelease || !last.Prerelease {
			t.Errorf("%s: last release %+v, want the prerelease %s", tc.name, last, tc.prerelease)
		}
		for i, r := range tc.rels {
			if r.Draft || r.Prerelease != (i == len(tc.rels)-1) || r.Name == "" || !strings.Contains(r.Name, r.Tag) {
				t.Errorf("%s: release %+v", tc.name, r)
			}
			if i > 0 && !r.Created.After(tc.rels[i-1].Created) {
				t.Errorf("%s: %s is not created after %s", tc.name, r.Tag, tc.rels[i-1].Tag)
			}
			if y := r.Created.Year(); y < 2025 || y > 2026 || r.Created.After(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)) {
				t.Errorf("%s: %s created %s", tc.name, r.Tag, r.Created)
			}
		}
		for _, newest := range tc.want {
			i := slices.IndexFunc(tc.rels, func(r forge.Release) bool { return r.Tag == newest })
			if i < 0 || strings.HasPrefix(tc.rels[i+1].Tag, newest[:strings.LastIndex(newest, ".")+1]) {
				t.Errorf("%s: %s is not the newest patch of its line", tc.name, newest)
			}
		}
	}
	if forge.TalosLatest != "v1.13.8" || forge.KubernetesLatest != "v1.37.2" || forge.TalosV113Newest != forge.TalosLatest {
		t.Errorf("latest constants: %s %s", forge.TalosLatest, forge.KubernetesLatest)
	}

	// Seeding twice changes nothing; releases added since stay.
	w := upstreamWorld(t)
	talos := w.f.Repo("siderolabs", "talos")
	if talos == nil || talos.DefaultBranch() != "main" || w.f.Repo("kubernetes", "kubernetes").DefaultBranch() != "master" {
		t.Fatalf("upstream repositories missing or with the wrong default branch")
	}
	if err := talos.AddRelease(forge.Release{Tag: "v1.13.9", Created: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	if err := w.f.SeedUpstreamReleases(); err != nil {
		t.Fatal(err)
	}
	if got := talos.Releases(); len(got) != len(forge.TalosReleases())+1 || got[0].Tag != "v1.13.9" {
		t.Errorf("after seeding again: %d releases, newest %s", len(got), got[0].Tag)
	}
}

// TestListReleases lists releases with go-github across pages: newest
// first by created_at, per_page default 30 and at most 100, and the Link
// header go-github follows.
func TestListReleases(t *testing.T) {
	t.Parallel()
	w := upstreamWorld(t)
	ctx := t.Context()
	gh := w.client(t, carol)
	want := seededTags(forge.TalosReleases())

	var all []*github.RepositoryRelease
	opts := &github.ListOptions{PerPage: 5}
	pages := 0
	for {
		rels, resp, err := gh.Repositories.ListReleases(ctx, "siderolabs", "talos", opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if pages == 1 && (resp.NextPage != 2 || resp.LastPage != 5 || resp.PrevPage != 0) {
			t.Errorf("first page: next %d last %d prev %d, want 2 5 0", resp.NextPage, resp.LastPage, resp.PrevPage)
		}
		if pages == 5 && (resp.NextPage != 0 || resp.PrevPage != 4 || resp.FirstPage != 1 || len(rels) != 2) {
			t.Errorf("last page: next %d prev %d first %d, %d releases", resp.NextPage, resp.PrevPage, resp.FirstPage, len(rels))
		}
		all = append(all, rels...)
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	if got := tags(all); pages != 5 || !slices.Equal(got, want) {
		t.Fatalf("%d pages listed %v, want 5 pages of %v", pages, got, want)
	}
	if got := all[0]; got.GetTagName() != forge.TalosPrerelease || !got.GetPrerelease() {
		t.Errorf("the newest release %s prerelease %v, want %s", got.GetTagName(), got.GetPrerelease(), forge.TalosPrerelease)
	}

	// Without per_page: 30 a page, so one page and no Link header.
	rels, resp, err := gh.Repositories.ListReleases(ctx, "siderolabs", "talos", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tags(rels), want) || resp.Header.Get("Link") != "" {
		t.Errorf("default page: %v, Link %q", tags(rels), resp.Header.Get("Link"))
	}
	// per_page is capped at 100.
	repo := w.f.Repo("kubernetes", "kubernetes")
	base := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100 {
		if err := repo.AddRelease(forge.Release{Tag: fmt.Sprintf("v2.0.%d", i), Created: base.Add(time.Duration(i) * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	rels, resp, err = gh.Repositories.ListReleases(ctx, "kubernetes", "kubernetes", &github.ListOptions{PerPage: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) != 100 || resp.NextPage != 2 || resp.LastPage != 2 {
		t.Errorf("per_page=500: %d releases, next %d last %d, want 100, 2, 2", len(rels), resp.NextPage, resp.LastPage)
	}

	// The fields go-github decodes.
	rels, _, err = gh.Repositories.ListReleases(ctx, "siderolabs", "talos", &github.ListOptions{PerPage: 2, Page: 2})
	if err != nil {
		t.Fatal(err)
	}
	seeded := forge.TalosReleases()
	v1137 := seeded[len(seeded)-3] // the page holds v1.13.7 and v1.13.6
	r := rels[0]
	if r.GetTagName() != "v1.13.7" || r.GetName() != "v1.13.7" || r.GetDraft() || r.GetPrerelease() ||
		!r.GetCreatedAt().Time.Equal(v1137.Created) || !r.GetPublishedAt().Time.Equal(v1137.Created) ||
		r.GetTargetCommitish() != "main" || r.GetID() == 0 || r.GetNodeID() == "" ||
		r.GetHTMLURL() != w.srv.URL+"/siderolabs/talos/releases/tag/v1.13.7" ||
		r.GetURL() != w.srv.URL+"/repos/siderolabs/talos/releases/"+strconv.FormatInt(r.GetID(), 10) ||
		r.GetTarballURL() != w.srv.URL+"/repos/siderolabs/talos/tarball/v1.13.7" ||
		r.GetAuthor().GetLogin() != "siderolabs" {
		got, _ := json.Marshal(r)
		t.Errorf("release document %s", got)
	}
}

// TestLatestRelease checks /releases/latest: the newest full release by
// created_at, skipping prereleases and drafts; a newer patch added by a
// test becomes the latest; 404 when there is none.
func TestLatestRelease(t *testing.T) {
	t.Parallel()
	w := upstreamWorld(t)
	ctx := t.Context()
	gh := w.client(t, agent)
	latest := func(owner, name string) string {
		t.Helper()
		rel, _, err := gh.Repositories.GetLatestRelease(ctx, owner, name)
		if err != nil {
			t.Fatal(err)
		}
		return rel.GetTagName()
	}
	if got := latest("siderolabs", "talos"); got != forge.TalosLatest {
		t.Errorf("latest talos %s, want %s", got, forge.TalosLatest)
	}
	if got := latest("kubernetes", "kubernetes"); got != forge.KubernetesLatest {
		t.Errorf("latest kubernetes %s, want %s", got, forge.KubernetesLatest)
	}

	// A newer draft and a newer prerelease do not change it; a newer
	// patch does.
	talos := w.f.Repo("siderolabs", "talos")
	after := forge.TalosReleases()[len(forge.TalosReleases())-1].Created
	for i, rel := range []forge.Release{
		{Tag: "v1.14.0", Draft: true},
		{Tag: "v1.14.0-rc.0", Prerelease: true},
		{Tag: "v1.13.9"},
	} {
		rel.Created = after.Add(time.Duration(i+1) * 24 * time.Hour)
		if err := talos.AddRelease(rel); err != nil {
			t.Fatal(err)
		}
		want := forge.TalosLatest
		if !rel.Draft && !rel.Prerelease {
			want = rel.Tag
		}
		if got := latest("siderolabs", "talos"); got != want {
			t.Errorf("after adding %+v: latest %s, want %s", rel, got, want)
		}
	}
	// A backport of an older line created later is the latest by
	// created_at, as GitHub documents; one created earlier is not.
	if err := talos.AddRelease(forge.Release{Tag: "v1.12.5", Created: after}); err != nil {
		t.Fatal(err)
	}
	if got := latest("siderolabs", "talos"); got != "v1.13.9" {
		t.Errorf("after an older backport: latest %s, want v1.13.9", got)
	}
	// A release marked latest explicitly (make_latest) is the latest
	// whatever the dates.
	if err := talos.AddRelease(forge.Release{Tag: "v1.11.7", Created: after, MakeLatest: true}); err != nil {
		t.Fatal(err)
	}
	if got := latest("siderolabs", "talos"); got != "v1.11.7" {
		t.Errorf("after make_latest: latest %s, want v1.11.7", got)
	}
	if rel, ok := talos.LatestRelease(); !ok || rel.Tag != "v1.11.7" {
		t.Errorf("LatestRelease() = %+v %v", rel, ok)
	}

	// No full release: 404 Not Found.
	only, err := w.f.CreateRepo("acme", "prereleases", "main")
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []forge.Release{{Tag: "v0.1.0-alpha.0", Prerelease: true}, {Tag: "v0.1.0", Draft: true}} {
		if err := only.AddRelease(rel); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"prereleases", "clusters", "nonexistent"} {
		_, _, err := gh.Repositories.GetLatestRelease(ctx, "acme", name)
		var e *github.ErrorResponse
		if !errors.As(err, &e) || e.Response.StatusCode != http.StatusNotFound || e.Message != "Not Found" {
			t.Errorf("latest release of acme/%s: %v, want 404 Not Found", name, err)
		}
	}
}

// TestGetReleaseByTag gets a published release by its tag; an absent tag
// and a draft's tag are 404.
func TestGetReleaseByTag(t *testing.T) {
	t.Parallel()
	w := upstreamWorld(t)
	ctx := t.Context()
	gh := w.client(t, carol)
	rel, _, err := gh.Repositories.GetReleaseByTag(ctx, "kubernetes", "kubernetes", "v1.36.1")
	if err != nil {
		t.Fatal(err)
	}
	if rel.GetTagName() != "v1.36.1" || rel.GetName() != "Kubernetes v1.36.1" || rel.GetTargetCommitish() != "master" || rel.GetPrerelease() {
		t.Errorf("v1.36.1: %s %q %s prerelease %v", rel.GetTagName(), rel.GetName(), rel.GetTargetCommitish(), rel.GetPrerelease())
	}
	rel, _, err = gh.Repositories.GetReleaseByTag(ctx, "kubernetes", "kubernetes", forge.KubernetesPrerelease)
	if err != nil || !rel.GetPrerelease() {
		t.Errorf("the prerelease by tag: %v prerelease %v", err, rel.GetPrerelease())
	}
	if err := w.f.Repo("kubernetes", "kubernetes").AddRelease(forge.Release{Tag: "v1.38.0", Draft: true}); err != nil {
		t.Fatal(err)
	}
	w.f.Repo("kubernetes", "kubernetes").Grant(alice.Login, forge.PermissionAdmin)
	for _, tc := range []struct {
		user       forge.User
		owner, tag string
	}{
		{carol, "kubernetes", "v1.36.9"},
		{carol, "kubernetes", "v1.38.0"},
		{alice, "kubernetes", "v1.38.0"}, // a draft is not published, even to an admin
		{carol, "nobody", "v1.36.1"},
	} {
		_, _, err := w.client(t, tc.user).Repositories.GetReleaseByTag(ctx, tc.owner, "kubernetes", tc.tag)
		if statusOf(err) != http.StatusNotFound {
			t.Errorf("%s: %s/kubernetes tag %s: %v, want 404", tc.user.Login, tc.owner, tc.tag, err)
		}
	}
}

// TestDraftReleaseVisibility: drafts are listed only to users with push
// access, with no published_at and no archive URLs.
func TestDraftReleaseVisibility(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	day := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	for _, rel := range []forge.Release{
		{Tag: "v1.0.0", Name: "First", Body: "notes", Created: day},
		{Tag: "v1.1.0", Draft: true, Created: day.Add(time.Hour), Published: day.Add(2 * time.Hour)},
	} {
		if err := w.repo.AddRelease(rel); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		user forge.User
		want []string
	}{
		{alice, []string{"v1.1.0", "v1.0.0"}}, // admin
		{agent, []string{"v1.1.0", "v1.0.0"}}, // write
		{carol, []string{"v1.0.0"}},           // read
		{mallory, []string{"v1.0.0"}},         // no permission
	} {
		rels, _, err := w.client(t, tc.user).Repositories.ListReleases(ctx, "acme", "clusters", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := tags(rels); !slices.Equal(got, tc.want) {
			t.Errorf("%s lists %v, want %v", tc.user.Login, got, tc.want)
		}
	}

	var docs []map[string]any
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.srv.URL+"/repos/acme/clusters/releases", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+agent.Token)
	resp, err := w.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&docs); err != nil || len(docs) != 2 {
		t.Fatalf("decoding the list: %v, %d documents", err, len(docs))
	}
	draft, published := docs[0], docs[1]
	for _, key := range []string{"published_at", "tarball_url", "zipball_url", "name", "body"} {
		if v, ok := draft[key]; !ok || v != nil {
			t.Errorf("the draft's %s: %v (present %v), want null", key, v, ok)
		}
	}
	if draft["draft"] != true || published["draft"] != false || published["name"] != "First" || published["body"] != "notes" {
		t.Errorf("documents %v %v", draft, published)
	}
	for _, key := range []string{"url", "html_url", "assets_url", "upload_url", "tarball_url", "zipball_url", "id", "node_id",
		"tag_name", "target_commitish", "name", "body", "draft", "prerelease", "created_at", "published_at", "author", "assets"} {
		if _, ok := published[key]; !ok {
			t.Errorf("the release document lacks %s: %v", key, published)
		}
	}
	if assets, ok := published["assets"].([]any); !ok || len(assets) != 0 {
		t.Errorf("assets %v, want []", published["assets"])
	}
	if published["target_commitish"] != "main" || published["created_at"] != "2026-01-10T12:00:00Z" {
		t.Errorf("target %v created %v", published["target_commitish"], published["created_at"])
	}
}

// TestReleasesConditionalRequests: the release endpoints carry ETags and
// the rate-limit headers; a 304 does not count.
func TestReleasesConditionalRequests(t *testing.T) {
	t.Parallel()
	w := upstreamWorld(t, func(o *forge.Options) { o.RateLimit = 100 })
	ctx := t.Context()
	gh := w.client(t, carol)
	for _, path := range []string{
		"repos/siderolabs/talos/releases",
		"repos/siderolabs/talos/releases?per_page=3&page=2",
		"repos/siderolabs/talos/releases/latest",
		"repos/siderolabs/talos/releases/tags/v1.12.0",
	} {
		req, err := gh.NewRequest("GET", path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := gh.Do(ctx, req, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		etag, before := resp.Header.Get("ETag"), resp.Rate.Remaining
		if etag == "" || resp.Rate.Limit != 100 || before != w.f.RateRemaining(carol.Login) || resp.Header.Get("X-RateLimit-Used") == "" {
			t.Fatalf("%s: ETag %q, rate headers %v", path, etag, resp.Header)
		}
		req.Header.Set("If-None-Match", etag)
		resp, err = gh.Do(ctx, req, io.Discard)
		if resp == nil || resp.StatusCode != http.StatusNotModified {
			t.Fatalf("%s: conditional request: %v, want 304", path, err)
		}
		if w.f.RateRemaining(carol.Login) != before {
			t.Errorf("%s: a 304 counted", path)
		}
	}
	// A new release makes the list's and the latest's ETags stale.
	req, _ := gh.NewRequest("GET", "repos/siderolabs/talos/releases/latest", nil)
	resp, err := gh.Do(ctx, req, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.f.Repo("siderolabs", "talos").AddRelease(forge.Release{Tag: "v1.13.9"}); err != nil {
		t.Fatal(err)
	}
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	var rel github.RepositoryRelease
	if resp, err := gh.Do(ctx, req, &rel); err != nil || resp.StatusCode != http.StatusOK || rel.GetTagName() != "v1.13.9" {
		t.Errorf("after a new release: %v, latest %s", err, rel.GetTagName())
	}
}

// TestReleasesFaultsAndAuth: the release operations are named for faults
// and the log; an injected failure makes the list answer 502 once; the
// forge wants a token, as for every API call.
func TestReleasesFaultsAndAuth(t *testing.T) {
	t.Parallel()
	w := upstreamWorld(t)
	ctx := t.Context()
	for _, op := range []string{"releases.list", "releases.latest", "releases.get"} {
		if !slices.Contains(w.f.Operations(), op) {
			t.Errorf("Operations() lacks %s", op)
		}
	}
	if !w.f.MatchesOperation("releases.*") {
		t.Errorf("releases.* matches no operation")
	}
	gh := w.client(t, agent)
	w.f.Fail("releases.list", 1, http.StatusBadGateway)
	if _, _, err := gh.Repositories.ListReleases(ctx, "siderolabs", "talos", nil); statusOf(err) != http.StatusBadGateway {
		t.Errorf("with the fault: %v, want 502", err)
	}
	if _, _, err := gh.Repositories.GetLatestRelease(ctx, "siderolabs", "talos"); err != nil {
		t.Errorf("the fault hit another operation: %v", err)
	}
	if rels, _, err := gh.Repositories.ListReleases(ctx, "siderolabs", "talos", nil); err != nil || len(rels) != len(forge.TalosReleases()) {
		t.Errorf("after the fault: %v, %d releases", err, len(rels))
	}
	if got := ops(w.f, "releases.list", 0); len(got) != 2 || got[0].Status != http.StatusBadGateway || got[1].Status != http.StatusOK ||
		got[0].Path != "/repos/siderolabs/talos/releases" || got[0].User != agent.Login {
		t.Errorf("the log's releases.list requests: %+v", got)
	}
	if got := ops(w.f, "releases.latest", http.StatusOK); len(got) != 1 {
		t.Errorf("the log's releases.latest requests: %+v", got)
	}

	anon := w.client(t, forge.User{})
	if _, _, err := anon.Repositories.GetLatestRelease(ctx, "siderolabs", "talos"); statusOf(err) != http.StatusUnauthorized {
		t.Errorf("without a token: %v, want 401", err)
	}
}

func TestAddReleaseRefusals(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	if err := w.repo.AddRelease(forge.Release{Tag: "v1.0.0"}); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []forge.Release{
		{},
		{Tag: "v1..0"},
		{Tag: "v1.0.0 rc"},
		{Tag: "v1.1.0-rc.0", Prerelease: true, MakeLatest: true},
		{Tag: "v1.1.0", Draft: true, MakeLatest: true},
		{Tag: "v1.1.0", Author: "-bad-"},
	} {
		if err := w.repo.AddRelease(rel); err == nil {
			t.Errorf("AddRelease(%+v) succeeded", rel)
		}
	}
	if err := w.repo.AddRelease(forge.Release{Tag: "v1.0.0"}); !errors.Is(err, forge.ErrReleaseExists) {
		t.Errorf("a second v1.0.0: %v, want ErrReleaseExists", err)
	}
	got := w.repo.Releases()
	if len(got) != 1 || got[0].Target != "main" || got[0].Author != "acme" || got[0].Created.IsZero() || !got[0].Published.Equal(got[0].Created) {
		t.Errorf("Releases() = %+v", got)
	}
}
