package forge

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// Release is a release of a repository, as AddRelease takes it and
// Releases returns it.
type Release struct {
	// ID is the release's id, unique in the forge. AddRelease assigns it
	// and ignores the value given.
	ID int64
	// Tag is the release's tag name (tag_name), unique among the
	// repository's releases and a valid git tag name. The tag need not
	// exist in the git repository.
	Tag string
	// Name is the release's title; empty is answered as null.
	Name string
	// Body is the release notes; empty is answered as null.
	Body string
	// Target is target_commitish; empty means the default branch.
	Target string
	// Author is the login of the user who made the release; empty means
	// the repository's owner.
	Author string
	// Draft marks an unpublished release: listed only to users with push
	// access, never the latest, not found by its tag.
	Draft bool
	// Prerelease marks a release that is not a full release: never the
	// latest.
	Prerelease bool
	// Created is created_at, the time GitHub orders releases by and
	// chooses the latest by; zero means now.
	Created time.Time
	// Published is published_at; zero means Created. A draft has none.
	Published time.Time
	// MakeLatest marks the release as the repository's latest explicitly,
	// as creating a release with make_latest=true does: from then on
	// /releases/latest answers it whatever the dates, until another
	// release is added with MakeLatest. Without any such release the
	// latest is the newest full release by Created (GitHub's documented
	// rule). Drafts and prereleases cannot be made latest.
	MakeLatest bool
}

// AddRelease adds a release to the repository. It refuses a tag that is
// empty, not a valid tag name or already released, and a draft or
// prerelease marked MakeLatest.
func (r *Repo) AddRelease(rel Release) error {
	if rel.Tag == "" {
		return fmt.Errorf("adding a release to %s: no tag", r.FullName())
	}
	if err := plumbing.NewTagReferenceName(rel.Tag).Validate(); err != nil {
		return fmt.Errorf("adding release %q to %s: invalid tag name: %w", rel.Tag, r.FullName(), err)
	}
	if rel.MakeLatest && (rel.Draft || rel.Prerelease) {
		return fmt.Errorf("adding release %q to %s: drafts and prereleases cannot be set as latest", rel.Tag, r.FullName())
	}
	if rel.Author != "" && !loginPattern.MatchString(rel.Author) {
		return fmt.Errorf("adding release %q to %s: invalid author %q", rel.Tag, r.FullName(), rel.Author)
	}
	if rel.Created.IsZero() {
		rel.Created = time.Now()
	}
	if rel.Draft {
		rel.Published = time.Time{}
	} else if rel.Published.IsZero() {
		rel.Published = rel.Created
	}
	if rel.Target == "" {
		rel.Target = r.defaultBranch
	}
	if rel.Author == "" {
		rel.Author = r.owner
	}
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if r.releaseByTag(rel.Tag) != nil {
		return fmt.Errorf("adding release %q to %s: %w", rel.Tag, r.FullName(), ErrReleaseExists)
	}
	r.f.nextID++
	rel.ID = r.f.nextID
	stored := &rel
	r.releases = append(r.releases, stored)
	if rel.MakeLatest {
		r.latest = stored
	}
	return nil
}

// ErrReleaseExists is returned by AddRelease for a tag that already has a
// release.
var ErrReleaseExists = errors.New("a release with this tag exists")

// Releases returns the repository's releases, drafts included, in the
// order GitHub lists them: newest first by Created.
func (r *Repo) Releases() []Release {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out []Release
	for _, rel := range r.sortedReleases() {
		out = append(out, *rel)
	}
	return out
}

// LatestRelease returns the release /releases/latest answers, and false
// when there is none.
func (r *Repo) LatestRelease() (Release, bool) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if rel := r.latestRelease(); rel != nil {
		return *rel, true
	}
	return Release{}, false
}

// sortedReleases returns the releases newest first by creation, the
// later added first among equal times. The caller holds f.mu.
func (r *Repo) sortedReleases() []*Release {
	out := slices.Clone(r.releases)
	slices.SortStableFunc(out, func(a, b *Release) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return out
}

// latestRelease is the release marked latest, or else the newest full
// release by creation; nil if there is none. The caller holds f.mu.
func (r *Repo) latestRelease() *Release {
	if r.latest != nil {
		return r.latest
	}
	for _, rel := range r.sortedReleases() {
		if !rel.Draft && !rel.Prerelease {
			return rel
		}
	}
	return nil
}

// releaseByTag returns the release with the tag, draft or not. The caller
// holds f.mu.
func (r *Repo) releaseByTag(tag string) *Release {
	for _, rel := range r.releases {
		if rel.Tag == tag {
			return rel
		}
	}
	return nil
}

// releaseDoc renders a release. The caller holds f.mu.
func (c *call) releaseDoc(rel *Release) releaseJSON {
	api := c.api + "/repos/" + c.repo.FullName()
	doc := releaseJSON{
		URL:             fmt.Sprintf("%s/releases/%d", api, rel.ID),
		HTMLURL:         c.web + "/" + c.repo.FullName() + "/releases/tag/" + rel.Tag,
		AssetsURL:       fmt.Sprintf("%s/releases/%d/assets", api, rel.ID),
		UploadURL:       fmt.Sprintf("%s/releases/%d/assets{?name,label}", api, rel.ID),
		ID:              rel.ID,
		NodeID:          nodeID("Release", rel.ID),
		TagName:         rel.Tag,
		TargetCommitish: rel.Target,
		Name:            strPtr(rel.Name),
		Body:            strPtr(rel.Body),
		Draft:           rel.Draft,
		Prerelease:      rel.Prerelease,
		CreatedAt:       stamp(rel.Created),
		PublishedAt:     stampPtr(rel.Published),
		Author:          c.userDoc(rel.Author),
		Assets:          []struct{}{},
	}
	if !rel.Draft {
		doc.TarballURL = strPtr(api + "/tarball/" + rel.Tag)
		doc.ZipballURL = strPtr(api + "/zipball/" + rel.Tag)
	}
	return doc
}

// listReleases answers "List releases": newest first, drafts only for
// users with push access.
func (f *Forge) listReleases(c *call) *response {
	f.mu.Lock()
	defer f.mu.Unlock()
	push := c.repo.permission(c.user.Login).rank() >= PermissionWrite.rank()
	docs := []releaseJSON{}
	for _, rel := range c.repo.sortedReleases() {
		if !rel.Draft || push {
			docs = append(docs, c.releaseDoc(rel))
		}
	}
	return listReply(c, docs)
}

// latestReleaseDoc answers "Get the latest release".
func (f *Forge) latestReleaseDoc(c *call) *response {
	f.mu.Lock()
	defer f.mu.Unlock()
	rel := c.repo.latestRelease()
	if rel == nil {
		return notFound()
	}
	return reply(http.StatusOK, c.releaseDoc(rel))
}

// releaseByTagDoc answers "Get a release by tag name": published releases
// only.
func (f *Forge) releaseByTagDoc(c *call) *response {
	f.mu.Lock()
	defer f.mu.Unlock()
	rel := c.repo.releaseByTag(c.param("tag"))
	if rel == nil || rel.Draft {
		return notFound()
	}
	return reply(http.StatusOK, c.releaseDoc(rel))
}
