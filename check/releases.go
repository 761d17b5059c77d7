package check

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-github/v60/github"

	"github.com/taloscluster/taloscluster/internal/noredirect"
	ghreport "github.com/taloscluster/taloscluster/report/github"
)

// The repositories whose releases Run reads.
const (
	TalosRepository      = "siderolabs/talos"
	KubernetesRepository = "kubernetes/kubernetes"
)

// DefaultGitHubAPI is the REST API the releases are read from.
const DefaultGitHubAPI = "https://api.github.com/"

// DefaultCallTimeout bounds one request for a page of releases, its
// retries included.
const DefaultCallTimeout = 20 * time.Second

// maxPages bounds one listing: 100 releases a page, far more than either
// upstream repository has.
const maxPages = 50

// Release is one release of a repository, as a Source lists it.
type Release struct {
	// Tag is the release's tag name, such as v1.13.8.
	Tag string
	// Draft and Prerelease are GitHub's flags; Run ignores such releases
	// (and tags whose version is a prerelease) whatever the source says.
	Draft, Prerelease bool
}

// Source lists the releases of a repository. The GitHub type reads them
// from a GitHub REST API; the agent may wrap it in a cache.
type Source interface {
	// Releases returns every release of repo ("owner/name") the source
	// can see, in any order. An error means the list is not known: Run
	// then reports the check as incomplete, never as up to date.
	Releases(ctx context.Context, repo string) ([]Release, error)
}

// GitHubOptions configure a GitHub source.
type GitHubOptions struct {
	// APIURL is the REST base URL; empty means DefaultGitHubAPI. A GitHub
	// Enterprise URL ends in /api/v3/.
	APIURL string
	// Token authenticates the requests when not empty (a higher rate
	// limit than anonymous requests). It is never part of an error.
	Token string
	// HTTPClient carries the TLS settings (a private CA); nil means
	// http.DefaultClient's transport.
	HTTPClient *http.Client
	// CallTimeout bounds each page request with its retries; zero means
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// Attempts bounds the tries of one page request on a 5xx answer or a
	// network error; zero means 3.
	Attempts int
}

// GitHub lists releases through GitHub's REST API ("List releases",
// paginated). Answers are kept with their ETag and asked again
// conditionally, so a source that is used again and again (the agent's
// drift interval) spends little of the rate limit. It is safe for
// concurrent use.
type GitHub struct {
	gh      *github.Client
	timeout time.Duration
	token   string
}

// NewGitHub returns a GitHub source.
func NewGitHub(o GitHubOptions) (*GitHub, error) {
	api := o.APIURL
	if api == "" {
		api = DefaultGitHubAPI
	}
	u, err := url.Parse(api)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("the GitHub API URL %q is not an http(s) URL", api)
	}
	if u.User != nil {
		return nil, errors.New("the GitHub API URL must not carry credentials: give a token instead")
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	base := http.DefaultTransport
	if o.HTTPClient != nil && o.HTTPClient.Transport != nil {
		base = o.HTTPClient.Transport
	}
	attempts := o.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	timeout := o.CallTimeout
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	hc := noredirect.Client(&ghreport.Transport{Base: base, Attempts: attempts, MaxWait: timeout / 2})
	gh := github.NewClient(hc)
	if o.Token != "" {
		gh = gh.WithAuthToken(o.Token)
	}
	gh.BaseURL, gh.UploadURL = u, u
	return &GitHub{gh: gh, timeout: timeout, token: o.Token}, nil
}

// Releases lists every release of repo, page by page, each page bounded
// by the call timeout.
func (g *GitHub) Releases(ctx context.Context, repo string) ([]Release, error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("repository %q must be owner/name", repo)
	}
	var out []Release
	opts := &github.ListOptions{PerPage: 100}
	for page := 1; ; page++ {
		if page > maxPages {
			return nil, fmt.Errorf("listing the releases of %s: more than %d pages", repo, maxPages)
		}
		rels, resp, err := g.page(ctx, owner, name, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the releases of %s: %s", repo, g.reason(err))
		}
		for _, r := range rels {
			out = append(out, Release{Tag: r.GetTagName(), Draft: r.GetDraft(), Prerelease: r.GetPrerelease()})
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

func (g *GitHub) page(ctx context.Context, owner, name string, opts *github.ListOptions) ([]*github.RepositoryRelease, *github.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	rels, resp, err := g.gh.Repositories.ListReleases(ctx, owner, name, opts)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		return nil, nil, fmt.Errorf("no answer within %s", g.timeout)
	}
	return rels, resp, err
}

// reason is a short, token-free account of a failed request.
func (g *GitHub) reason(err error) string {
	var rate *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	var resp *github.ErrorResponse
	var msg string
	switch {
	case errors.As(err, &rate):
		msg = fmt.Sprintf("rate limited until %s", rate.Rate.Reset.Time.UTC().Format(time.RFC3339))
	case errors.As(err, &abuse):
		msg = "secondary rate limit: " + abuse.Message
	case errors.As(err, &resp) && resp.Response != nil:
		msg = resp.Response.Status
		if m := strings.TrimSpace(resp.Message); m != "" && !strings.HasSuffix(msg, m) {
			msg += ": " + m
		}
		if resp.Response.StatusCode == http.StatusUnauthorized {
			msg += " (the token is missing or refused)"
		}
	default:
		msg = err.Error()
	}
	if g.token != "" {
		msg = strings.ReplaceAll(msg, g.token, "***")
	}
	return strings.TrimSpace(msg)
}
