package forge

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/utils/merkletrie"
)

// PullRequest is a snapshot of a pull request.
type PullRequest struct {
	// Number is the pull request's number in its repository.
	Number int
	// Title and Body are as given when it was opened or last edited.
	Title, Body string
	// Author is the login of the user who opened it.
	Author string
	// HeadRepo is the full name of the repository holding the head branch:
	// the base repository itself or a fork of it.
	HeadRepo string
	// HeadRef is the head branch and HeadSHA the commit it pointed to when
	// the pull request was last brought up to date (refs/pull/N/head).
	HeadRef, HeadSHA string
	// BaseRef is the branch the pull request merges into and BaseSHA its
	// commit when the pull request was last brought up to date.
	BaseRef, BaseSHA string
	// State is "open" or "closed".
	State string
	// Merged reports whether it was merged; MergeCommitSHA is then the
	// merge commit on the base branch.
	Merged         bool
	MergeCommitSHA string
	// MergedBy is the login of the user who merged it.
	MergedBy string
	// Mergeable reports whether the head merges into the base without
	// conflicts; Conflicts lists the conflicting paths when it does not.
	// TestMergeSHA is the commit refs/pull/N/merge points to while the pull
	// request is open and mergeable.
	Mergeable    bool
	Conflicts    []string
	TestMergeSHA string
	// Created and Updated are when it was opened and last changed.
	Created, Updated time.Time
}

type pull struct {
	id          int64
	number      int
	title, body string
	author      string
	headRepo    *Repo
	headRef     string
	baseRef     string
	headSHA     plumbing.Hash
	baseSHA     plumbing.Hash
	state       string
	draft       bool

	mergeKey  [2]plumbing.Hash // base and head the fields below were computed for
	mergeable bool
	conflicts []string
	testMerge plumbing.Hash

	merged      bool
	mergedBy    string
	mergeCommit plumbing.Hash

	created, updated, closedAt, mergedAt time.Time
}

func (p *pull) snapshot() PullRequest {
	pr := PullRequest{
		Number:       p.number,
		Title:        p.title,
		Body:         p.body,
		Author:       p.author,
		HeadRepo:     p.headRepo.FullName(),
		HeadRef:      p.headRef,
		HeadSHA:      hashString(p.headSHA),
		BaseRef:      p.baseRef,
		BaseSHA:      hashString(p.baseSHA),
		State:        p.state,
		Merged:       p.merged,
		MergedBy:     p.mergedBy,
		Mergeable:    p.mergeable && p.state == "open",
		Conflicts:    slices.Clone(p.conflicts),
		TestMergeSHA: hashString(p.testMerge),
		Created:      p.created,
		Updated:      p.updated,
	}
	if p.merged {
		pr.MergeCommitSHA = p.mergeCommit.String()
	}
	return pr
}

func hashString(h plumbing.Hash) string {
	if h.IsZero() {
		return ""
	}
	return h.String()
}

func pullHeadRef(n int) plumbing.ReferenceName {
	return plumbing.ReferenceName(fmt.Sprintf("refs/pull/%d/head", n))
}

func pullMergeRef(n int) plumbing.ReferenceName {
	return plumbing.ReferenceName(fmt.Sprintf("refs/pull/%d/merge", n))
}

// githubSig is the committer of the commits GitHub makes.
func githubSig() object.Signature {
	return object.Signature{Name: "GitHub", Email: "noreply@github.com", When: time.Now()}
}

// PR returns a snapshot of pull request number n, after bringing it up to
// date with its head branch.
func (r *Repo) PR(n int) (PullRequest, bool) {
	_ = r.f.syncPulls() // a snapshot is still useful if the refs cannot be read
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	p := r.pulls[n]
	if p == nil {
		return PullRequest{}, false
	}
	return p.snapshot(), true
}

// PRs returns snapshots of all pull requests, by number.
func (r *Repo) PRs() []PullRequest {
	_ = r.f.syncPulls()
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out []PullRequest
	for _, p := range r.pulls {
		out = append(out, p.snapshot())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

// OpenPR opens a pull request by author from head ("branch" in this
// repository, or "owner:branch" in owner's fork of it) into the base
// branch (the default branch when empty), as POST /pulls does.
func (r *Repo) OpenPR(author, head, base, title string) (PullRequest, error) {
	if base == "" {
		base = r.defaultBranch
	}
	p, verr, err := r.f.openPull(r, author, newPull{Title: title, Head: head, Base: base})
	if err != nil {
		return PullRequest{}, fmt.Errorf("opening a pull request on %s: %w", r.FullName(), err)
	}
	if verr != nil {
		return PullRequest{}, fmt.Errorf("opening a pull request on %s: %s", r.FullName(), describe(verr))
	}
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	return p.snapshot(), nil
}

// Merge merges pull request n as merger with a merge commit, as PUT
// /pulls/{n}/merge does, and returns the merge commit's hash.
func (r *Repo) Merge(n int, merger string) (string, error) {
	sha, refusal, err := r.f.merge(r, n, merger, mergeRequest{})
	if err != nil {
		return "", fmt.Errorf("merging pull request #%d of %s: %w", n, r.FullName(), err)
	}
	if refusal != nil {
		return "", fmt.Errorf("merging pull request #%d of %s: %s", n, r.FullName(), describe(refusal))
	}
	return sha, nil
}

// describe renders an API error response for a Go error message.
func describe(resp *response) string {
	e, ok := resp.body.(apiError)
	if !ok {
		return http.StatusText(resp.status)
	}
	msg := fmt.Sprintf("%d %s", resp.status, e.Message)
	for _, fe := range e.Errors {
		if fe.Message != "" {
			msg += ": " + fe.Message
		} else {
			msg += fmt.Sprintf(": %s %s %s", fe.Resource, fe.Field, fe.Code)
		}
	}
	return msg
}

// syncPulls brings every open pull request up to date with its head and
// base branches: refs/pull/N/head follows the head branch (copying a
// fork's objects into the base repository), and mergeability and
// refs/pull/N/merge are recomputed when either side moved.
func (f *Forge) syncPulls() error {
	f.gitMu.Lock()
	defer f.gitMu.Unlock()
	return f.syncPullsLocked()
}

// syncPullsLocked is syncPulls for a caller holding gitMu for writing.
func (f *Forge) syncPullsLocked() error {
	type item struct {
		repo *Repo
		p    *pull
	}
	f.mu.Lock()
	var items []item
	for _, r := range f.order {
		for _, p := range r.pulls {
			if p.state == "open" {
				items = append(items, item{r, p})
			}
		}
	}
	f.mu.Unlock()
	var errs []error
	for _, it := range items {
		if err := f.syncPull(it.repo, it.p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// syncPull brings one pull request up to date. The caller holds gitMu for
// writing, so only mu guards against readers.
func (f *Forge) syncPull(r *Repo, p *pull) error {
	f.mu.Lock()
	headRepo, headRef, baseRef, number := p.headRepo, p.headRef, p.baseRef, p.number
	oldHead, key := p.headSHA, p.mergeKey
	mergeable, conflicts, testMerge := p.mergeable, p.conflicts, p.testMerge
	f.mu.Unlock()

	base := openStorage(r.dir)
	head := base
	if headRepo != r {
		head = openStorage(headRepo.dir)
	}
	h, err := refHash(head, plumbing.NewBranchReferenceName(headRef))
	if err != nil {
		return fmt.Errorf("syncing pull request #%d of %s: %w", number, r.FullName(), err)
	}
	b, err := refHash(base, plumbing.NewBranchReferenceName(baseRef))
	if err != nil {
		return fmt.Errorf("syncing pull request #%d of %s: %w", number, r.FullName(), err)
	}
	newHead := oldHead
	if !h.IsZero() && h != oldHead { // a deleted head branch leaves the pull request where it was
		if headRepo != r {
			if err := copyObjects(base, head, h); err != nil {
				return fmt.Errorf("syncing pull request #%d of %s: %w", number, r.FullName(), err)
			}
		}
		if err := base.SetReference(plumbing.NewHashReference(pullHeadRef(number), h)); err != nil {
			return fmt.Errorf("syncing pull request #%d of %s: setting its head ref: %w", number, r.FullName(), err)
		}
		newHead = h
	}
	newKey := [2]plumbing.Hash{b, newHead}
	if newKey != key && !newHead.IsZero() {
		mergeable, conflicts, testMerge = false, nil, plumbing.ZeroHash
		if !b.IsZero() {
			tree, cs, err := threeWayMerge(base, b, newHead)
			if err != nil {
				return fmt.Errorf("syncing pull request #%d of %s: %w", number, r.FullName(), err)
			}
			conflicts = cs
			if len(cs) == 0 {
				msg := fmt.Sprintf("Merge %s into %s\n", newHead, b)
				sig := githubSig()
				if testMerge, err = writeCommit(base, tree, []plumbing.Hash{b, newHead}, msg, sig, sig); err != nil {
					return fmt.Errorf("syncing pull request #%d of %s: %w", number, r.FullName(), err)
				}
				mergeable = true
			}
		}
		if err := setOrRemoveRef(base, pullMergeRef(number), testMerge); err != nil {
			return fmt.Errorf("syncing pull request #%d of %s: %w", number, r.FullName(), err)
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if newHead != oldHead {
		p.updated = time.Now()
	}
	p.headSHA, p.baseSHA, p.mergeKey = newHead, b, newKey
	p.mergeable, p.conflicts, p.testMerge = mergeable, conflicts, testMerge
	return nil
}

// setOrRemoveRef points ref at h, or removes it when h is zero.
func setOrRemoveRef(st storer.ReferenceStorer, ref plumbing.ReferenceName, h plumbing.Hash) error {
	if h.IsZero() {
		if err := st.RemoveReference(ref); err != nil && !errors.Is(err, plumbing.ErrReferenceNotFound) {
			return fmt.Errorf("removing %s: %w", ref, err)
		}
		return nil
	}
	if err := st.SetReference(plumbing.NewHashReference(ref, h)); err != nil {
		return fmt.Errorf("setting %s: %w", ref, err)
	}
	return nil
}

type newPull struct {
	Title    string `json:"title"`
	Head     string `json:"head"`
	HeadRepo string `json:"head_repo"`
	Base     string `json:"base"`
	Body     string `json:"body"`
	Draft    bool   `json:"draft"`
}

// networkRoot returns the repository at the root of r's fork network.
func networkRoot(r *Repo) *Repo {
	for r.parent != nil {
		r = r.parent
	}
	return r
}

// forkOf returns owner's repository in r's fork network, or nil. The
// caller holds f.mu.
func (f *Forge) forkOf(r *Repo, owner string) *Repo {
	root := networkRoot(r)
	for _, o := range f.order {
		if strings.EqualFold(o.owner, owner) && networkRoot(o) == root {
			return o
		}
	}
	return nil
}

// openPull opens a pull request. It returns a validation failure as an
// API response, and other failures as errors.
func (f *Forge) openPull(r *Repo, author string, in newPull) (*pull, *response, error) {
	var missing []fieldError
	for _, m := range []struct{ field, v string }{{"title", in.Title}, {"head", in.Head}, {"base", in.Base}} {
		if strings.TrimSpace(m.v) == "" {
			missing = append(missing, fieldError{Resource: "PullRequest", Field: m.field, Code: "missing_field"})
		}
	}
	if len(missing) > 0 {
		return nil, invalid(missing...), nil
	}
	headInvalid := invalid(fieldError{Resource: "PullRequest", Field: "head", Code: "invalid"})

	f.mu.Lock()
	headRepo, headRef := r, in.Head
	if owner, ref, ok := strings.Cut(in.Head, ":"); ok {
		headRef = ref
		if !strings.EqualFold(owner, r.owner) {
			headRepo = f.forkOf(r, owner)
		}
	}
	if in.HeadRepo != "" {
		hr := f.repos[strings.ToLower(in.HeadRepo)]
		if hr == nil || networkRoot(hr) != networkRoot(r) {
			headRepo = nil
		} else {
			headRepo = hr
		}
	}
	f.mu.Unlock()
	if headRepo == nil {
		return nil, headInvalid, nil
	}

	f.gitMu.Lock()
	defer f.gitMu.Unlock()
	base := openStorage(r.dir)
	b, err := refHash(base, plumbing.NewBranchReferenceName(in.Base))
	if err != nil {
		return nil, nil, err
	}
	if b.IsZero() {
		return nil, invalid(fieldError{Resource: "PullRequest", Field: "base", Code: "invalid"}), nil
	}
	headSt := base
	if headRepo != r {
		headSt = openStorage(headRepo.dir)
	}
	h, err := refHash(headSt, plumbing.NewBranchReferenceName(headRef))
	if err != nil {
		return nil, nil, err
	}
	if h.IsZero() {
		return nil, headInvalid, nil
	}
	if headRepo != r {
		if err := copyObjects(base, headSt, h); err != nil {
			return nil, nil, err
		}
	}
	merged, err := isAncestor(base, h, b)
	if err != nil {
		return nil, nil, err
	}
	if merged {
		return nil, invalid(fieldError{Resource: "PullRequest", Code: "custom",
			Message: fmt.Sprintf("No commits between %s and %s", in.Base, in.Head)}), nil
	}

	f.mu.Lock()
	for _, o := range r.pulls {
		if o.state == "open" && o.headRepo == headRepo && o.headRef == headRef && o.baseRef == in.Base {
			f.mu.Unlock()
			return nil, invalid(fieldError{Resource: "PullRequest", Code: "custom",
				Message: fmt.Sprintf("A pull request already exists for %s:%s.", headRepo.owner, headRef)}), nil
		}
	}
	f.nextID++
	now := time.Now()
	p := &pull{
		id:       f.nextID,
		number:   r.nextNumber,
		title:    in.Title,
		body:     in.Body,
		author:   author,
		headRepo: headRepo,
		headRef:  headRef,
		baseRef:  in.Base,
		state:    "open",
		draft:    in.Draft,
		created:  now,
		updated:  now,
	}
	r.nextNumber++
	r.pulls[p.number] = p
	f.mu.Unlock()

	if err := f.syncPull(r, p); err != nil {
		return p, nil, err
	}
	return p, nil, nil
}

type mergeRequest struct {
	CommitTitle   string  `json:"commit_title"`
	CommitMessage *string `json:"commit_message"`
	SHA           string  `json:"sha"`
	MergeMethod   string  `json:"merge_method"`
}

// merge merges a pull request. It returns a refusal as an API response and
// other failures as errors.
func (f *Forge) merge(r *Repo, n int, merger string, in mergeRequest) (string, *response, error) {
	switch in.MergeMethod {
	case "", "merge", "squash":
	case "rebase":
		return "", fail(http.StatusMethodNotAllowed, "Rebase merges are not allowed on this repository."), nil
	default:
		return "", invalid(fieldError{Resource: "PullRequest", Field: "merge_method", Code: "invalid"}), nil
	}
	f.gitMu.Lock()
	defer f.gitMu.Unlock()
	if err := f.syncPullsLocked(); err != nil {
		return "", nil, err
	}

	f.mu.Lock()
	p := r.pulls[n]
	if p == nil {
		f.mu.Unlock()
		return "", notFound(), nil
	}
	snap := p.snapshot()
	name, email := merger, merger+"@users.noreply.github.com"
	if a := f.lookupUser(merger); a != nil {
		merger, name, email = a.Login, a.Name, a.Email
	}
	f.mu.Unlock()
	switch {
	case snap.Merged || snap.State != "open":
		return "", fail(http.StatusMethodNotAllowed, "Pull Request is not mergeable"), nil
	case in.SHA != "" && in.SHA != snap.HeadSHA:
		return "", fail(http.StatusConflict, "Head branch was modified. Review and try the merge again."), nil
	case !snap.Mergeable:
		return "", fail(http.StatusMethodNotAllowed, "Pull Request is not mergeable"), nil
	}

	st := openStorage(r.dir)
	baseRef := plumbing.NewBranchReferenceName(snap.BaseRef)
	b, err := refHash(st, baseRef)
	if err != nil {
		return "", nil, err
	}
	head := plumbing.NewHash(snap.HeadSHA)
	tree, conflicts, err := threeWayMerge(st, b, head)
	if err != nil {
		return "", nil, err
	}
	if len(conflicts) > 0 {
		return "", fail(http.StatusMethodNotAllowed, "Pull Request is not mergeable"), nil
	}
	title, body := in.CommitTitle, ""
	if in.CommitMessage != nil {
		body = *in.CommitMessage
	}
	parents := []plumbing.Hash{b, head}
	if in.MergeMethod == "squash" {
		parents = parents[:1]
		if title == "" {
			title = fmt.Sprintf("%s (#%d)", snap.Title, n)
		}
	} else {
		if title == "" {
			headOwner, _, _ := strings.Cut(snap.HeadRepo, "/")
			title = fmt.Sprintf("Merge pull request #%d from %s/%s", n, headOwner, snap.HeadRef)
		}
		if in.CommitMessage == nil {
			body = snap.Title
		}
	}
	msg := title + "\n"
	if body != "" {
		msg += "\n" + ensureNewline(body)
	}
	now := time.Now()
	author := object.Signature{Name: name, Email: email, When: now}
	commit, err := writeCommit(st, tree, parents, msg, author, githubSig())
	if err != nil {
		return "", nil, err
	}
	if err := st.SetReference(plumbing.NewHashReference(baseRef, commit)); err != nil {
		return "", nil, fmt.Errorf("updating %s: %w", baseRef, err)
	}
	if err := setOrRemoveRef(st, pullMergeRef(n), plumbing.ZeroHash); err != nil {
		return "", nil, err
	}
	f.mu.Lock()
	p.merged, p.mergedBy, p.mergeCommit = true, merger, commit
	p.state, p.mergedAt, p.closedAt, p.updated = "closed", now, now, now
	p.testMerge = plumbing.ZeroHash
	f.mu.Unlock()
	if err := f.syncPullsLocked(); err != nil {
		return commit.String(), nil, err
	}
	return commit.String(), nil, nil
}

// pullDoc renders a pull request; full adds the fields GitHub only sends
// for a single pull request. The caller holds f.mu.
func (c *call) pullDoc(r *Repo, p *pull, full bool) pullJSON {
	api := c.api + "/repos/" + r.FullName()
	doc := pullJSON{
		URL:               fmt.Sprintf("%s/pulls/%d", api, p.number),
		ID:                p.id,
		NodeID:            nodeID("PullRequest", p.id),
		HTMLURL:           fmt.Sprintf("%s/%s/pull/%d", c.web, r.FullName(), p.number),
		DiffURL:           fmt.Sprintf("%s/%s/pull/%d.diff", c.web, r.FullName(), p.number),
		PatchURL:          fmt.Sprintf("%s/%s/pull/%d.patch", c.web, r.FullName(), p.number),
		IssueURL:          fmt.Sprintf("%s/issues/%d", api, p.number),
		CommentsURL:       fmt.Sprintf("%s/issues/%d/comments", api, p.number),
		StatusesURL:       fmt.Sprintf("%s/statuses/%s", api, hashString(p.headSHA)),
		Number:            p.number,
		State:             p.state,
		Title:             p.title,
		User:              c.userDoc(p.author),
		Body:              strPtr(p.body),
		CreatedAt:         stamp(p.created),
		UpdatedAt:         stamp(p.updated),
		ClosedAt:          stampPtr(p.closedAt),
		MergedAt:          stampPtr(p.mergedAt),
		Draft:             p.draft,
		AuthorAssociation: r.association(p.author),
	}
	switch {
	case p.merged:
		doc.MergeCommitSHA = strPtr(p.mergeCommit.String())
	case !p.testMerge.IsZero():
		doc.MergeCommitSHA = strPtr(p.testMerge.String())
	}
	headRepo := c.repoDoc(p.headRepo, false)
	baseRepo := c.repoDoc(r, false)
	doc.Head = branchJSON{Label: p.headRepo.owner + ":" + p.headRef, Ref: p.headRef, SHA: hashString(p.headSHA),
		User: headRepo.Owner, Repo: &headRepo}
	doc.Base = branchJSON{Label: r.owner + ":" + p.baseRef, Ref: p.baseRef, SHA: hashString(p.baseSHA),
		User: baseRepo.Owner, Repo: &baseRepo}
	if full {
		merged := p.merged
		doc.Merged = &merged
		if p.state == "open" {
			mergeable := p.mergeable
			doc.Mergeable = &mergeable
			doc.MergeableState = "clean"
			if !mergeable {
				doc.MergeableState = "dirty"
			}
		}
		if p.merged {
			by := c.userDoc(p.mergedBy)
			doc.MergedBy = &by
		}
	}
	return doc
}

// pullParam resolves the pull request of the :number parameter.
func (c *call) pullParam() (*pull, *response) {
	n, ok := c.intParam("number")
	if !ok {
		return nil, notFound()
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	p := c.repo.pulls[int(n)]
	if p == nil {
		return nil, notFound()
	}
	return p, nil
}

func (f *Forge) listPulls(c *call) *response {
	if err := f.syncPulls(); err != nil {
		f.logger.Warn("forge sync failed", "err", err)
	}
	q := c.r.URL.Query()
	state := q.Get("state")
	switch state {
	case "":
		state = "open"
	case "open", "closed", "all":
	default:
		return invalid(fieldError{Resource: "PullRequest", Field: "state", Code: "invalid"})
	}
	sortBy, dir := q.Get("sort"), q.Get("direction")
	if dir == "" {
		dir = "asc"
		if sortBy == "" || sortBy == "created" {
			dir = "desc"
		}
	}
	headOwner, headRef, headFilter := strings.Cut(q.Get("head"), ":")
	baseFilter := q.Get("base")

	f.mu.Lock()
	var ps []*pull
	for _, p := range c.repo.pulls {
		if state != "all" && p.state != state {
			continue
		}
		if headFilter && (!strings.EqualFold(p.headRepo.owner, headOwner) || p.headRef != headRef) {
			continue
		}
		if baseFilter != "" && p.baseRef != baseFilter {
			continue
		}
		ps = append(ps, p)
	}
	less := func(a, b *pull) bool {
		if sortBy == "updated" && !a.updated.Equal(b.updated) {
			return a.updated.Before(b.updated)
		}
		return a.number < b.number
	}
	sort.Slice(ps, func(i, j int) bool {
		if dir == "desc" {
			return less(ps[j], ps[i])
		}
		return less(ps[i], ps[j])
	})
	docs := make([]pullJSON, 0, len(ps))
	for _, p := range ps {
		docs = append(docs, c.pullDoc(c.repo, p, false))
	}
	f.mu.Unlock()
	return listReply(c, docs)
}

func (f *Forge) createPull(c *call) *response {
	var in newPull
	if resp := c.decode(&in); resp != nil {
		return resp
	}
	p, verr, err := f.openPull(c.repo, c.user.Login, in)
	if err != nil {
		f.logger.Error("forge could not open a pull request", "repo", c.repo.FullName(), "err", err)
		if p == nil {
			return fail(http.StatusInternalServerError, "Server Error")
		}
	}
	if verr != nil {
		return verr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := reply(http.StatusCreated, c.pullDoc(c.repo, p, true))
	resp.header = http.Header{"Location": {fmt.Sprintf("%s/repos/%s/pulls/%d", c.api, c.repo.FullName(), p.number)}}
	return resp
}

func (f *Forge) getPull(c *call) *response {
	if err := f.syncPulls(); err != nil {
		f.logger.Warn("forge sync failed", "err", err)
	}
	p, resp := c.pullParam()
	if resp != nil {
		return resp
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return reply(http.StatusOK, c.pullDoc(c.repo, p, true))
}

func (f *Forge) updatePull(c *call) *response {
	var in struct {
		Title *string `json:"title"`
		Body  *string `json:"body"`
		State *string `json:"state"`
		Base  *string `json:"base"`
	}
	if resp := c.decode(&in); resp != nil {
		return resp
	}
	p, resp := c.pullParam()
	if resp != nil {
		return resp
	}
	if in.Base != nil {
		return fail(http.StatusNotImplemented, "Not Implemented: the forge does not change a pull request's base")
	}
	if in.State != nil && *in.State != "open" && *in.State != "closed" {
		return invalid(fieldError{Resource: "PullRequest", Field: "state", Code: "invalid"})
	}
	f.gitMu.Lock()
	defer f.gitMu.Unlock()
	f.mu.Lock()
	if !strings.EqualFold(p.author, c.user.Login) && c.repo.permission(c.user.Login).rank() < PermissionWrite.rank() {
		f.mu.Unlock()
		return forbidden()
	}
	if in.State != nil && *in.State == "open" && p.merged {
		f.mu.Unlock()
		return invalid(fieldError{Resource: "PullRequest", Field: "state", Code: "custom",
			Message: "state cannot be changed. The pull request cannot be reopened."})
	}
	now := time.Now()
	if in.Title != nil {
		p.title = *in.Title
	}
	if in.Body != nil {
		p.body = *in.Body
	}
	reopened, closed := false, false
	if in.State != nil && *in.State != p.state {
		p.state = *in.State
		if p.state == "closed" {
			p.closedAt, closed = now, true
		} else {
			p.closedAt, reopened = time.Time{}, true
			p.mergeKey = [2]plumbing.Hash{}
		}
	}
	p.updated = now
	number := p.number
	f.mu.Unlock()

	if closed {
		if err := setOrRemoveRef(openStorage(c.repo.dir), pullMergeRef(number), plumbing.ZeroHash); err != nil {
			f.logger.Warn("forge could not remove a merge ref", "repo", c.repo.FullName(), "err", err)
		}
		f.mu.Lock()
		p.testMerge = plumbing.ZeroHash
		f.mu.Unlock()
	}
	if reopened {
		if err := f.syncPull(c.repo, p); err != nil {
			f.logger.Warn("forge sync failed", "err", err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return reply(http.StatusOK, c.pullDoc(c.repo, p, true))
}

func forbidden() *response {
	return fail(http.StatusForbidden, "Resource not accessible by personal access token")
}

func (f *Forge) isMerged(c *call) *response {
	p, resp := c.pullParam()
	if resp != nil {
		return resp
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.merged {
		return reply(http.StatusNoContent, nil)
	}
	return notFound()
}

func (f *Forge) mergePull(c *call) *response {
	var in mergeRequest
	if c.r.ContentLength != 0 {
		if resp := c.decode(&in); resp != nil {
			return resp
		}
	}
	n, ok := c.intParam("number")
	if !ok {
		return notFound()
	}
	f.mu.Lock()
	perm := c.repo.permission(c.user.Login)
	f.mu.Unlock()
	if perm.rank() < PermissionWrite.rank() {
		return forbidden()
	}
	sha, refusal, err := f.merge(c.repo, int(n), c.user.Login, in)
	if err != nil {
		f.logger.Error("forge could not merge", "repo", c.repo.FullName(), "pull", n, "err", err)
		if sha == "" {
			return fail(http.StatusInternalServerError, "Server Error")
		}
	}
	if refusal != nil {
		return refusal
	}
	return reply(http.StatusOK, mergeResultJSON{SHA: sha, Merged: true, Message: "Pull Request successfully merged"})
}

func (f *Forge) listPullFiles(c *call) *response {
	if err := f.syncPulls(); err != nil {
		f.logger.Warn("forge sync failed", "err", err)
	}
	p, resp := c.pullParam()
	if resp != nil {
		return resp
	}
	f.mu.Lock()
	base, head := p.baseSHA, p.headSHA
	f.mu.Unlock()
	files, err := f.pullFiles(c.repo, base, head)
	if err != nil {
		f.logger.Error("forge could not diff a pull request", "repo", c.repo.FullName(), "err", err)
		return fail(http.StatusInternalServerError, "Server Error")
	}
	for i := range files {
		files[i].BlobURL = fmt.Sprintf("%s/%s/blob/%s/%s", c.web, c.repo.FullName(), head, files[i].Filename)
		files[i].RawURL = fmt.Sprintf("%s/%s/raw/%s/%s", c.web, c.repo.FullName(), head, files[i].Filename)
	}
	return listReply(c, files)
}

// pullFiles lists the files a pull request changes: the difference
// between the merge base of base and head, and head.
func (f *Forge) pullFiles(r *Repo, base, head plumbing.Hash) ([]fileJSON, error) {
	f.gitMu.RLock()
	defer f.gitMu.RUnlock()
	st := openStorage(r.dir)
	hc, err := object.GetCommit(st, head)
	if err != nil {
		return nil, fmt.Errorf("reading commit %s: %w", head, err)
	}
	from := &object.Tree{}
	if !base.IsZero() {
		bc, err := object.GetCommit(st, base)
		if err != nil {
			return nil, fmt.Errorf("reading commit %s: %w", base, err)
		}
		mbs, err := bc.MergeBase(hc)
		if err != nil {
			return nil, fmt.Errorf("finding a merge base: %w", err)
		}
		if len(mbs) > 0 {
			if from, err = mbs[0].Tree(); err != nil {
				return nil, fmt.Errorf("reading a tree: %w", err)
			}
		}
	}
	to, err := hc.Tree()
	if err != nil {
		return nil, fmt.Errorf("reading a tree: %w", err)
	}
	changes, err := object.DiffTree(from, to)
	if err != nil {
		return nil, fmt.Errorf("diffing trees: %w", err)
	}
	patch, err := changes.Patch()
	if err != nil {
		return nil, fmt.Errorf("making a patch: %w", err)
	}
	stats := map[string][2]int{}
	for _, s := range patch.Stats() {
		stats[s.Name] = [2]int{s.Addition, s.Deletion}
	}
	var files []fileJSON
	for _, ch := range changes {
		action, err := ch.Action()
		if err != nil {
			return nil, fmt.Errorf("classifying a change: %w", err)
		}
		fj := fileJSON{Filename: ch.To.Name, SHA: ch.To.TreeEntry.Hash.String()}
		switch action {
		case merkletrie.Insert:
			fj.Status = "added"
		case merkletrie.Delete:
			fj.Status = "removed"
			fj.Filename, fj.SHA = ch.From.Name, ch.From.TreeEntry.Hash.String()
		default:
			fj.Status = "modified"
		}
		s := stats[fj.Filename]
		fj.Additions, fj.Deletions, fj.Changes = s[0], s[1], s[0]+s[1]
		files = append(files, fj)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Filename < files[j].Filename })
	return files, nil
}
