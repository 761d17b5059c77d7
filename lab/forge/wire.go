package forge

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// The JSON shapes below are the fields of GitHub's REST documents that
// go-github v60 decodes and the agent reads; GitHub sends more.

type userJSON struct {
	Login     string `json:"login"`
	ID        int64  `json:"id"`
	NodeID    string `json:"node_id"`
	AvatarURL string `json:"avatar_url"`
	URL       string `json:"url"`
	HTMLURL   string `json:"html_url"`
	Type      string `json:"type"`
	SiteAdmin bool   `json:"site_admin"`
	Name      string `json:"name,omitempty"`
	Email     string `json:"email,omitempty"`
}

type repoPermsJSON struct {
	Admin bool `json:"admin"`
	Push  bool `json:"push"`
	Pull  bool `json:"pull"`
}

type repoJSON struct {
	ID            int64          `json:"id"`
	NodeID        string         `json:"node_id"`
	Name          string         `json:"name"`
	FullName      string         `json:"full_name"`
	Owner         userJSON       `json:"owner"`
	Private       bool           `json:"private"`
	Visibility    string         `json:"visibility"`
	HTMLURL       string         `json:"html_url"`
	Fork          bool           `json:"fork"`
	URL           string         `json:"url"`
	CloneURL      string         `json:"clone_url"`
	DefaultBranch string         `json:"default_branch"`
	CreatedAt     string         `json:"created_at"`
	Parent        *repoJSON      `json:"parent,omitempty"`
	Permissions   *repoPermsJSON `json:"permissions,omitempty"`
}

type branchJSON struct {
	Label string    `json:"label"`
	Ref   string    `json:"ref"`
	SHA   string    `json:"sha"`
	User  userJSON  `json:"user"`
	Repo  *repoJSON `json:"repo"`
}

type pullJSON struct {
	URL               string     `json:"url"`
	ID                int64      `json:"id"`
	NodeID            string     `json:"node_id"`
	HTMLURL           string     `json:"html_url"`
	DiffURL           string     `json:"diff_url"`
	PatchURL          string     `json:"patch_url"`
	IssueURL          string     `json:"issue_url"`
	CommentsURL       string     `json:"comments_url"`
	StatusesURL       string     `json:"statuses_url"`
	Number            int        `json:"number"`
	State             string     `json:"state"`
	Locked            bool       `json:"locked"`
	Title             string     `json:"title"`
	User              userJSON   `json:"user"`
	Body              *string    `json:"body"`
	CreatedAt         string     `json:"created_at"`
	UpdatedAt         string     `json:"updated_at"`
	ClosedAt          *string    `json:"closed_at"`
	MergedAt          *string    `json:"merged_at"`
	MergeCommitSHA    *string    `json:"merge_commit_sha"`
	Draft             bool       `json:"draft"`
	Head              branchJSON `json:"head"`
	Base              branchJSON `json:"base"`
	AuthorAssociation string     `json:"author_association"`

	// Only in a single pull request, not in lists.
	Merged         *bool     `json:"merged,omitempty"`
	Mergeable      *bool     `json:"mergeable,omitempty"`
	MergeableState string    `json:"mergeable_state,omitempty"`
	MergedBy       *userJSON `json:"merged_by,omitempty"`
}

type fileJSON struct {
	SHA       string `json:"sha"`
	Filename  string `json:"filename"`
	Status    string `json:"status"`
	Additions int    `json:"additions"`
	Deletions int    `json:"deletions"`
	Changes   int    `json:"changes"`
	BlobURL   string `json:"blob_url"`
	RawURL    string `json:"raw_url"`
}

type mergeResultJSON struct {
	SHA     string `json:"sha"`
	Merged  bool   `json:"merged"`
	Message string `json:"message"`
}

type commentJSON struct {
	ID                int64    `json:"id"`
	NodeID            string   `json:"node_id"`
	URL               string   `json:"url"`
	HTMLURL           string   `json:"html_url"`
	IssueURL          string   `json:"issue_url"`
	Body              string   `json:"body"`
	User              userJSON `json:"user"`
	CreatedAt         string   `json:"created_at"`
	UpdatedAt         string   `json:"updated_at"`
	AuthorAssociation string   `json:"author_association"`
}

type statusJSON struct {
	URL         string   `json:"url"`
	AvatarURL   *string  `json:"avatar_url"`
	ID          int64    `json:"id"`
	NodeID      string   `json:"node_id"`
	State       string   `json:"state"`
	Description *string  `json:"description"`
	TargetURL   *string  `json:"target_url"`
	Context     string   `json:"context"`
	CreatedAt   string   `json:"created_at"`
	UpdatedAt   string   `json:"updated_at"`
	Creator     userJSON `json:"creator"`
}

type combinedJSON struct {
	State      string       `json:"state"`
	Statuses   []statusJSON `json:"statuses"`
	SHA        string       `json:"sha"`
	TotalCount int          `json:"total_count"`
	Repository repoJSON     `json:"repository"`
	CommitURL  string       `json:"commit_url"`
	URL        string       `json:"url"`
}

type releaseJSON struct {
	URL             string     `json:"url"`
	HTMLURL         string     `json:"html_url"`
	AssetsURL       string     `json:"assets_url"`
	UploadURL       string     `json:"upload_url"`
	TarballURL      *string    `json:"tarball_url"`
	ZipballURL      *string    `json:"zipball_url"`
	ID              int64      `json:"id"`
	NodeID          string     `json:"node_id"`
	TagName         string     `json:"tag_name"`
	TargetCommitish string     `json:"target_commitish"`
	Name            *string    `json:"name"`
	Body            *string    `json:"body"`
	Draft           bool       `json:"draft"`
	Prerelease      bool       `json:"prerelease"`
	CreatedAt       string     `json:"created_at"`
	PublishedAt     *string    `json:"published_at"`
	Author          userJSON   `json:"author"`
	Assets          []struct{} `json:"assets"`
}

type permissionJSON struct {
	Permission string   `json:"permission"`
	RoleName   string   `json:"role_name"`
	User       userJSON `json:"user"`
}

type rateJSON struct {
	Limit     int    `json:"limit"`
	Remaining int    `json:"remaining"`
	Reset     int64  `json:"reset"`
	Used      int    `json:"used"`
	Resource  string `json:"resource"`
}

type rateLimitJSON struct {
	Resources map[string]rateJSON `json:"resources"`
	Rate      rateJSON            `json:"rate"`
}

// stamp formats a time the way GitHub does: RFC 3339 in UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

func stampPtr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := stamp(t)
	return &s
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nodeID(kind string, id int64) string {
	return base64.RawStdEncoding.EncodeToString([]byte(fmt.Sprintf("0:%s%d", kind, id)))
}

// userDoc renders a login. A login without an account (an organisation
// owning repositories) renders as an organisation. The caller holds f.mu,
// as for every renderer.
func (c *call) userDoc(login string) userJSON {
	a := c.f.lookupUser(login)
	u := userJSON{Login: login, Type: "Organization"}
	if a != nil {
		u.Login, u.ID, u.Type = a.Login, a.id, "User"
	}
	u.NodeID = nodeID(u.Type, u.ID)
	u.AvatarURL = c.web + "/" + u.Login + ".png"
	u.URL = c.api + "/users/" + u.Login
	u.HTMLURL = c.web + "/" + u.Login
	return u
}

func (c *call) repoDoc(r *Repo, withParent bool) repoJSON {
	doc := repoJSON{
		ID:            r.id,
		NodeID:        nodeID("Repository", r.id),
		Name:          r.name,
		FullName:      r.FullName(),
		Owner:         c.userDoc(r.owner),
		Visibility:    "public",
		HTMLURL:       c.web + "/" + r.FullName(),
		Fork:          r.parent != nil,
		URL:           c.api + "/repos/" + r.FullName(),
		CloneURL:      c.web + "/" + r.FullName() + ".git",
		DefaultBranch: r.defaultBranch,
		CreatedAt:     stamp(r.created),
	}
	if withParent && r.parent != nil {
		p := c.repoDoc(r.parent, false)
		doc.Parent = &p
	}
	return doc
}

// association is GitHub's author_association of a login on a repository.
// The caller holds f.mu.
func (r *Repo) association(login string) string {
	switch {
	case strings.EqualFold(login, r.owner):
		return "OWNER"
	case r.permission(login).rank() >= PermissionRead.rank():
		return "COLLABORATOR"
	}
	return "NONE"
}
