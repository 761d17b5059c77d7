package forge

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Limits GitHub puts on commit statuses.
const (
	// MaxStatusContext is the longest context accepted, in characters.
	MaxStatusContext = 255
	// MaxStatusDescription is the longest description accepted, in
	// characters; GitHub answers a longer one 422 Validation Failed
	// ("description is too long (maximum is 140 characters)").
	MaxStatusDescription = 140
	// MaxStatusesPerContext is how many statuses one commit can have per
	// context.
	MaxStatusesPerContext = 1000
)

// Status is a snapshot of a commit status.
type Status struct {
	// ID is the status's id, unique in the forge.
	ID int64
	// SHA is the commit it is for.
	SHA string
	// State is pending, success, failure or error.
	State string
	// Context, Description and TargetURL are as given.
	Context, Description, TargetURL string
	// Creator is the login of the user who created it.
	Creator string
	// Created is when it was created.
	Created time.Time
}

type status struct {
	id                                int64
	sha                               plumbing.Hash
	state, context, description, link string
	creator                           string
	created                           time.Time
}

// Statuses returns the statuses of a commit, newest first.
func (r *Repo) Statuses(sha string) []Status {
	h := plumbing.NewHash(sha)
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out []Status
	for i := len(r.statuses) - 1; i >= 0; i-- {
		s := r.statuses[i]
		if s.sha == h {
			out = append(out, Status{ID: s.id, SHA: s.sha.String(), State: s.state, Context: s.context,
				Description: s.description, TargetURL: s.link, Creator: s.creator, Created: s.created})
		}
	}
	return out
}

// resolveCommit resolves a commit hash, a branch, a tag or a full ref name
// to a commit. It reports false when there is none.
func (f *Forge) resolveCommit(r *Repo, ref string) (plumbing.Hash, bool, error) {
	f.gitMu.RLock()
	defer f.gitMu.RUnlock()
	st := openStorage(r.dir)
	if plumbing.IsHash(ref) {
		h := plumbing.NewHash(ref)
		if _, err := object.GetCommit(st, h); err == nil {
			return h, true, nil
		} else if !errors.Is(err, plumbing.ErrObjectNotFound) {
			return plumbing.ZeroHash, false, fmt.Errorf("reading commit %s: %w", h, err)
		}
		return plumbing.ZeroHash, false, nil
	}
	candidates := []string{"refs/heads/" + ref, "refs/tags/" + ref, "refs/" + ref}
	if strings.HasPrefix(ref, "refs/") {
		candidates = []string{ref}
	}
	for _, name := range candidates {
		h, err := refHash(st, plumbing.ReferenceName(name))
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		if h.IsZero() {
			continue
		}
		return peel(st, h)
	}
	return plumbing.ZeroHash, false, nil
}

// peel follows annotated tags to the commit they tag.
func peel(st storer.EncodedObjectStorer, h plumbing.Hash) (plumbing.Hash, bool, error) {
	for range 10 {
		obj, err := st.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return plumbing.ZeroHash, false, fmt.Errorf("reading object %s: %w", h, err)
		}
		switch obj.Type() {
		case plumbing.CommitObject:
			return h, true, nil
		case plumbing.TagObject:
			t, err := object.DecodeTag(st, obj)
			if err != nil {
				return plumbing.ZeroHash, false, fmt.Errorf("decoding tag %s: %w", h, err)
			}
			h = t.Target
		default:
			return plumbing.ZeroHash, false, nil
		}
	}
	return plumbing.ZeroHash, false, nil
}

func noCommit(ref string) *response {
	return fail(http.StatusUnprocessableEntity, "No commit found for SHA: "+ref)
}

// createStatusDocsURL is the documentation_url GitHub sends with the
// errors of "Create a commit status".
const createStatusDocsURL = "https://docs.github.com/rest/commits/statuses#create-a-commit-status"

// statusInvalid is GitHub's 422 Validation Failed for a commit status,
// one entry per field that failed, as GitHub reports every failed
// validation of the request at once.
func statusInvalid(errs ...fieldError) *response {
	resp := invalid(errs...)
	doc := resp.body.(apiError)
	doc.DocumentationURL = createStatusDocsURL
	resp.body = doc
	return resp
}

// validateStatus checks a new status's fields the way GitHub does and
// returns the failures, in field order.
func validateStatus(state, context, description string) []fieldError {
	var errs []fieldError
	switch state {
	case "pending", "success", "failure", "error":
	default:
		errs = append(errs, fieldError{Resource: "Status", Field: "state", Code: "custom",
			Message: "state is not included in the list"})
	}
	if utf8.RuneCountInString(context) > MaxStatusContext {
		errs = append(errs, fieldError{Resource: "Status", Field: "context", Code: "custom",
			Message: fmt.Sprintf("context is too long (maximum is %d characters)", MaxStatusContext)})
	}
	if utf8.RuneCountInString(description) > MaxStatusDescription {
		errs = append(errs, fieldError{Resource: "Status", Field: "description", Code: "custom",
			Message: fmt.Sprintf("description is too long (maximum is %d characters)", MaxStatusDescription)})
	}
	return errs
}

// statusDoc renders a status. The caller holds f.mu.
func (c *call) statusDoc(s *status) statusJSON {
	creator := c.userDoc(s.creator)
	return statusJSON{
		URL:         fmt.Sprintf("%s/repos/%s/statuses/%s", c.api, c.repo.FullName(), s.sha),
		AvatarURL:   strPtr(creator.AvatarURL),
		ID:          s.id,
		NodeID:      nodeID("StatusContext", s.id),
		State:       s.state,
		Description: strPtr(s.description),
		TargetURL:   strPtr(s.link),
		Context:     s.context,
		CreatedAt:   stamp(s.created),
		UpdatedAt:   stamp(s.created),
		Creator:     creator,
	}
}

func (f *Forge) createStatus(c *call) *response {
	var in struct {
		State       string `json:"state"`
		TargetURL   string `json:"target_url"`
		Description string `json:"description"`
		Context     string `json:"context"`
	}
	if resp := c.decode(&in); resp != nil {
		return resp
	}
	f.mu.Lock()
	perm := c.repo.permission(c.user.Login)
	f.mu.Unlock()
	if perm.rank() < PermissionWrite.rank() {
		return forbidden()
	}
	sha := c.param("sha")
	if !plumbing.IsHash(sha) {
		// GitHub takes only a full commit SHA here, never a ref.
		return statusInvalid(fieldError{Resource: "Status", Field: "sha", Code: "custom",
			Message: "sha must be a 40 character SHA1"})
	}
	h, ok, err := f.resolveCommit(c.repo, sha)
	if err != nil {
		f.logger.Error("forge could not resolve a commit", "repo", c.repo.FullName(), "sha", sha, "err", err)
		return fail(http.StatusInternalServerError, "Server Error")
	}
	if !ok {
		return noCommit(sha)
	}
	if in.Context == "" {
		in.Context = "default"
	}
	if errs := validateStatus(in.State, in.Context, in.Description); len(errs) > 0 {
		return statusInvalid(errs...)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	count := 0
	for _, s := range c.repo.statuses {
		if s.sha == h && s.context == in.Context {
			count++
		}
	}
	if count >= MaxStatusesPerContext {
		return statusInvalid(fieldError{Resource: "Status", Code: "custom",
			Message: "This SHA and context has reached the maximum number of statuses."})
	}
	f.nextID++
	s := &status{id: f.nextID, sha: h, state: in.State, context: in.Context, description: in.Description,
		link: in.TargetURL, creator: c.user.Login, created: time.Now()}
	c.repo.statuses = append(c.repo.statuses, s)
	resp := reply(http.StatusCreated, c.statusDoc(s))
	resp.header = http.Header{"Location": {fmt.Sprintf("%s/repos/%s/statuses/%s", c.api, c.repo.FullName(), h)}}
	return resp
}

// statusesOf returns the statuses of a commit, newest first. The caller
// holds f.mu.
func (r *Repo) statusesOf(h plumbing.Hash) []*status {
	var out []*status
	for i := len(r.statuses) - 1; i >= 0; i-- {
		if r.statuses[i].sha == h {
			out = append(out, r.statuses[i])
		}
	}
	return out
}

func (f *Forge) listStatuses(c *call) *response {
	ref := c.param("ref")
	h, ok, err := f.resolveCommit(c.repo, ref)
	if err != nil {
		f.logger.Error("forge could not resolve a commit", "repo", c.repo.FullName(), "ref", ref, "err", err)
		return fail(http.StatusInternalServerError, "Server Error")
	}
	docs := []statusJSON{}
	if !ok {
		return listReply(c, docs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range c.repo.statusesOf(h) {
		docs = append(docs, c.statusDoc(s))
	}
	return listReply(c, docs)
}

func (f *Forge) combinedStatus(c *call) *response {
	ref := c.param("ref")
	h, ok, err := f.resolveCommit(c.repo, ref)
	if err != nil {
		f.logger.Error("forge could not resolve a commit", "repo", c.repo.FullName(), "ref", ref, "err", err)
		return fail(http.StatusInternalServerError, "Server Error")
	}
	if !ok {
		return noCommit(ref)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	var latest []*status
	for _, s := range c.repo.statusesOf(h) {
		if !seen[s.context] {
			seen[s.context] = true
			latest = append(latest, s)
		}
	}
	state := "success"
	if len(latest) == 0 {
		state = "pending"
	}
	for _, s := range latest {
		switch s.state {
		case "error", "failure":
			state = "failure"
		case "pending":
			if state != "failure" {
				state = "pending"
			}
		}
	}
	p := c.paginate(len(latest))
	docs := []statusJSON{}
	for _, s := range latest[p.lo:p.hi] {
		docs = append(docs, c.statusDoc(s))
	}
	resp := reply(http.StatusOK, combinedJSON{
		State:      state,
		Statuses:   docs,
		SHA:        h.String(),
		TotalCount: len(latest),
		Repository: c.repoDoc(c.repo, false),
		CommitURL:  fmt.Sprintf("%s/repos/%s/commits/%s", c.api, c.repo.FullName(), h),
		URL:        fmt.Sprintf("%s/repos/%s/commits/%s/status", c.api, c.repo.FullName(), h),
	})
	if p.link != "" {
		resp.header = http.Header{"Link": {p.link}}
	}
	return resp
}
