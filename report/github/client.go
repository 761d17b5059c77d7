package github

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
	"github.com/taloscluster/taloscluster/report"
)

// CallTimeout bounds one GitHub call, retries and rate-limit waits
// included.
const CallTimeout = 2 * time.Minute

// MaxRateLimitWait bounds the wait for a rate limit inside one call; a
// longer one fails the call at once with go-github's rate-limit error
// (see RateLimited), so the agent can go on with work that needs no API.
const MaxRateLimitWait = time.Minute

// Client reports to one repository.
type Client struct {
	gh          *github.Client
	owner, repo string
	redact      *report.Redactor
}

// Options configure a Client.
type Options struct {
	// APIURL is the REST base URL, ending in "/" (https://api.github.com/,
	// a GitHub Enterprise .../api/v3/, or the lab forge).
	APIURL string
	// Repo is owner/name.
	Repo  string
	Token string
	// HTTPClient carries TLS settings; its transport is wrapped.
	HTTPClient *http.Client
	// Spacing is the least time between two mutating requests.
	Spacing time.Duration
	// Observe is told of every answer (see Transport.Observe).
	Observe func(req *http.Request, code int, remaining int)
	// Redact removes secrets from every body and description sent.
	Redact *report.Redactor
	// RequestTimeout bounds the wait for the answer to one request; zero
	// means RequestTimeout.
	RequestTimeout time.Duration
}

// RequestTimeout bounds the wait for the answer to one request. GitHub
// ends an API request it has worked on for 10 seconds itself ("Troubleshooting
// the REST API", timeouts), so an answer that has not begun after 20 is not
// coming: the request fails, and is retried where that is safe, instead of
// holding its caller for the whole CallTimeout.
const RequestTimeout = 20 * time.Second

// New returns a client for o.Repo.
func New(o Options) (*Client, error) {
	owner, repo, ok := strings.Cut(o.Repo, "/")
	if !ok || owner == "" || repo == "" {
		return nil, fmt.Errorf("github repository %q must be owner/name", o.Repo)
	}
	base := http.DefaultTransport
	if o.HTTPClient != nil && o.HTTPClient.Transport != nil {
		base = o.HTTPClient.Transport
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = RequestTimeout
	}
	if t, ok := base.(*http.Transport); ok {
		t = t.Clone()
		if t.ResponseHeaderTimeout == 0 || t.ResponseHeaderTimeout > o.RequestTimeout {
			t.ResponseHeaderTimeout = o.RequestTimeout
		}
		base = t
	}
	// The token goes with every request (WithAuthToken): a redirect is
	// never followed.
	hc := noredirect.Client(&Transport{Base: base, Spacing: o.Spacing, MaxWait: MaxRateLimitWait, Observe: o.Observe})
	gh := github.NewClient(hc).WithAuthToken(o.Token)
	u, err := url.Parse(o.APIURL)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("github api_url %q is not a URL", o.APIURL)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	gh.BaseURL, gh.UploadURL = u, u
	return &Client{gh: gh, owner: owner, repo: repo, redact: o.Redact}, nil
}

func (c *Client) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, CallTimeout)
}

// PR is what the agent needs to know of a pull request.
type PR struct {
	Number int
	Head   string // head commit sha
	Author string
	// Fork reports whether the head lives in another repository.
	Fork  bool
	Title string
}

// OpenPRs lists the open pull requests against base (all bases when empty).
func (c *Client) OpenPRs(ctx context.Context, base string) ([]PR, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	var out []PR
	opts := &github.PullRequestListOptions{State: "open", Base: base, ListOptions: github.ListOptions{PerPage: 100}}
	for {
		prs, resp, err := c.gh.PullRequests.List(ctx, c.owner, c.repo, opts)
		if err != nil {
			return nil, fmt.Errorf("listing open pull requests of %s/%s: %w", c.owner, c.repo, err)
		}
		for _, p := range prs {
			headRepo := p.GetHead().GetRepo().GetFullName()
			out = append(out, PR{
				Number: p.GetNumber(), Head: p.GetHead().GetSHA(), Author: p.GetUser().GetLogin(), Title: p.GetTitle(),
				Fork: p.GetHead().GetRepo().GetFork() || (headRepo != "" && !strings.EqualFold(headRepo, c.owner+"/"+c.repo)),
			})
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// Permission returns a user's permission on the repository: admin, write,
// read or none.
func (c *Client) Permission(ctx context.Context, user string) (string, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	p, _, err := c.gh.Repositories.GetPermissionLevel(ctx, c.owner, c.repo, user)
	if err != nil {
		return "", fmt.Errorf("reading the permission of %s on %s/%s: %w", user, c.owner, c.repo, err)
	}
	return p.GetPermission(), nil
}

// Status states.
const (
	StatePending = "pending"
	StateSuccess = "success"
	StateFailure = "failure"
	StateError   = "error"
)

// SetStatus sets a commit status; context and description are kept within
// GitHub's limits and the description is redacted.
func (c *Client) SetStatus(ctx context.Context, sha, context_, state, description, targetURL string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	st := &github.RepoStatus{
		State:       github.String(state),
		Context:     github.String(context_),
		Description: github.String(Description(c.redact.String(description))),
	}
	if targetURL != "" {
		st.TargetURL = github.String(targetURL)
	}
	if _, _, err := c.gh.Repositories.CreateStatus(ctx, c.owner, c.repo, sha, st); err != nil {
		return fmt.Errorf("setting status %q on %s: %w", context_, short(sha), err)
	}
	return nil
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// ownComments returns the agent's comments on a pull request by part:
// part 1 carries Marker, part n MarkerPart(n).
func (c *Client) ownComments(ctx context.Context, pr int) (map[int]*github.IssueComment, error) {
	out := map[int]*github.IssueComment{}
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		cs, resp, err := c.gh.Issues.ListComments(ctx, c.owner, c.repo, pr, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the comments of pull request %d: %w", pr, err)
		}
		for _, cm := range cs {
			body := cm.GetBody()
			switch {
			case strings.HasPrefix(body, Marker):
				if out[1] == nil {
					out[1] = cm
				}
			case strings.HasPrefix(body, "<!-- taloscluster:plan:"):
				var n int
				if _, err := fmt.Sscanf(body, "<!-- taloscluster:plan:%d -->", &n); err == nil && n >= 2 && out[n] == nil {
					out[n] = cm
				}
			}
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// UpsertComments makes the pull request's agent comments read bodies:
// existing ones (found by their markers) are edited in place, missing ones
// created, and parts no longer needed emptied. The comments are read again
// before every create, so a retried or restarted run never creates a
// second copy.
func (c *Client) UpsertComments(ctx context.Context, pr int, bodies []string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	existing, err := c.ownComments(ctx, pr)
	if err != nil {
		return err
	}
	for i, body := range bodies {
		body = c.redact.String(body)
		part := i + 1
		if cm := existing[part]; cm != nil {
			if cm.GetBody() == body {
				continue
			}
			if _, _, err := c.gh.Issues.EditComment(ctx, c.owner, c.repo, cm.GetID(), &github.IssueComment{Body: github.String(body)}); err != nil {
				return fmt.Errorf("updating the plan comment on pull request %d: %w", pr, err)
			}
			continue
		}
		if _, _, err := c.gh.Issues.CreateComment(ctx, c.owner, c.repo, pr, &github.IssueComment{Body: github.String(body)}); err != nil {
			// The comment may exist even though the answer was an error: a
			// later run finds it by its marker instead of creating another.
			return fmt.Errorf("creating the plan comment on pull request %d: %w", pr, err)
		}
	}
	for part, cm := range existing {
		if part > len(bodies) && !strings.Contains(cm.GetBody(), "no longer needed") {
			stale := MarkerPart(part) + "\n_This part of the plan is no longer needed._\n"
			if _, _, err := c.gh.Issues.EditComment(ctx, c.owner, c.repo, cm.GetID(), &github.IssueComment{Body: github.String(stale)}); err != nil {
				return fmt.Errorf("clearing an old part of the plan comment on pull request %d: %w", pr, err)
			}
		}
	}
	return nil
}

// ReportMarker marks a one-off comment with the key of the report it
// delivers, so a post that is tried again never makes a second copy.
func ReportMarker(key string) string { return "<!-- taloscluster:report:" + key + " -->" }

// Comment posts a one-off comment (converge results on a merged pull
// request), redacted, marked with ReportMarker(key). When a comment with
// that marker is on the pull request already (an earlier post whose
// answer was lost), it posts nothing.
func (c *Client) Comment(ctx context.Context, pr int, key, body string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	marker := ReportMarker(key)
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		cs, resp, err := c.gh.Issues.ListComments(ctx, c.owner, c.repo, pr, opts)
		if err != nil {
			return fmt.Errorf("listing the comments of pull request %d: %w", pr, err)
		}
		for _, cm := range cs {
			if strings.HasPrefix(cm.GetBody(), marker) {
				return nil
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	body = marker + "\n" + c.redact.String(body)
	if _, _, err := c.gh.Issues.CreateComment(ctx, c.owner, c.repo, pr, &github.IssueComment{Body: github.String(body)}); err != nil {
		return fmt.Errorf("commenting on pull request %d: %w", pr, err)
	}
	return nil
}

// Retryable reports whether a failed GitHub call may work when tried
// again: every failure but GitHub's 4xx answers other than 408 and 429
// (a pull request that is gone, a status GitHub finds invalid), which will
// not change. A lost answer, a reset connection or a timeout may.
func Retryable(err error) bool {
	if _, ok := RateLimited(err); ok {
		return true
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var refused *noredirect.Error
	if errors.As(err, &refused) {
		return false // the endpoint answers the same way next time
	}
	var er *github.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		code := er.Response.StatusCode
		return code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests
	}
	return true
}

// MergedPR returns the pull request whose merge produced commit sha.
func (c *Client) MergedPR(ctx context.Context, sha string) (int, bool, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	opts := &github.PullRequestListOptions{State: "closed", Sort: "updated", Direction: "desc", ListOptions: github.ListOptions{PerPage: 50}}
	prs, _, err := c.gh.PullRequests.List(ctx, c.owner, c.repo, opts)
	if err != nil {
		return 0, false, fmt.Errorf("finding the pull request merged as %s: %w", short(sha), err)
	}
	for _, p := range prs {
		if p.GetMergeCommitSHA() == sha {
			return p.GetNumber(), true, nil
		}
	}
	return 0, false, nil
}

// Reachable checks that the API answers, for readiness.
func (c *Client) Reachable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _, err := c.gh.Repositories.Get(ctx, c.owner, c.repo)
	var rl *github.RateLimitError
	if errors.As(err, &rl) {
		return nil // reachable, only limited
	}
	if err != nil {
		return fmt.Errorf("reaching GitHub: %w", err)
	}
	return nil
}
