package github

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/go-github/v60/github"
)

// RateLimitedError says that GitHub's API refuses requests until a time:
// the primary rate limit is used up until its reset, or a secondary limit
// asked to wait. RateLimited turns go-github's rate-limit errors into it.
type RateLimitedError struct {
	// Until is when requests may be made again.
	Until time.Time
	// Secondary is set for a secondary limit (Retry-After), unset for the
	// primary one (X-RateLimit-Remaining 0 until X-RateLimit-Reset).
	Secondary bool
}

func (e *RateLimitedError) Error() string {
	at := e.Until.UTC().Format(time.RFC3339)
	if e.Secondary {
		return "GitHub API secondary rate limit: waiting until " + at
	}
	return "GitHub API rate limit exhausted until " + at
}

// secondaryDefaultWait is how long a secondary limit without Retry-After
// is waited out (GitHub: "at least a minute").
const secondaryDefaultWait = time.Minute

// RateLimited reports whether err, or an error it wraps, is GitHub's
// answer that a rate limit is exhausted (go-github's *RateLimitError or
// *AbuseRateLimitError, including the ones it returns without a request
// while it knows the limit is still exhausted), and until when.
func RateLimited(err error) (*RateLimitedError, bool) {
	if err == nil {
		return nil, false
	}
	var own *RateLimitedError
	if errors.As(err, &own) {
		return own, true
	}
	var primary *github.RateLimitError
	if errors.As(err, &primary) {
		until := primary.Rate.Reset.Time
		if until.IsZero() {
			until = time.Now().Add(secondaryDefaultWait)
		}
		return &RateLimitedError{Until: until.Truncate(time.Second)}, true
	}
	var secondary *github.AbuseRateLimitError
	if errors.As(err, &secondary) {
		wait := secondaryDefaultWait
		if secondary.RetryAfter != nil {
			wait = *secondary.RetryAfter
		}
		return &RateLimitedError{Until: time.Now().Add(wait).Truncate(time.Second).Add(time.Second), Secondary: true}, true
	}
	return nil, false
}

// Rate is the state of the token's primary rate limit.
type Rate struct {
	Limit, Remaining int
	Reset            time.Time
}

// RateLimit reads the token's primary (core) rate limit from GET
// /rate_limit, which does not count against it. It also tells the client
// the limit is back when it is, so requests go out again before the reset
// it last saw.
func (c *Client) RateLimit(ctx context.Context) (Rate, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rl, _, err := c.gh.RateLimit.Get(ctx)
	if err != nil {
		return Rate{}, fmt.Errorf("reading the rate limit of %s/%s: %w", c.owner, c.repo, err)
	}
	core := rl.GetCore()
	if core == nil {
		return Rate{}, errors.New("reading the rate limit: GitHub's answer has no core limit")
	}
	return Rate{Limit: core.Limit, Remaining: core.Remaining, Reset: core.Reset.Time}, nil
}
