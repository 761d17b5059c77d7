package forge

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// MaxCommentLength is the longest comment body GitHub accepts: 65,536
// characters. The forge counts bytes, the stricter measure, so a client
// that budgets characters of multi-byte text is caught.
const MaxCommentLength = 65536

// Comment is a snapshot of an issue comment on a pull request.
type Comment struct {
	// ID is the comment's id, unique in the forge.
	ID int64
	// Number is the pull request's number.
	Number int
	// Author is the login of the user who wrote it.
	Author string
	// Body is its current text.
	Body string
	// Created and Updated are when it was written and last edited.
	Created, Updated time.Time
}

type comment struct {
	id               int64
	number           int
	author, body     string
	created, updated time.Time
}

// Comments returns the comments on pull request n, oldest first.
func (r *Repo) Comments(n int) []Comment {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out []Comment
	for _, c := range r.comments {
		if c.number == n {
			out = append(out, Comment{ID: c.id, Number: c.number, Author: c.author, Body: c.body,
				Created: c.created, Updated: c.updated})
		}
	}
	return out
}

func bodyTooLong() *response {
	return invalid(fieldError{Resource: "IssueComment", Field: "data", Code: "unprocessable",
		Message: fmt.Sprintf("Body is too long (maximum is %d characters)", MaxCommentLength)})
}

// checkBody validates a comment body.
func checkBody(body *string) *response {
	switch {
	case body == nil || strings.TrimSpace(*body) == "":
		return invalid(fieldError{Resource: "IssueComment", Field: "body", Code: "missing_field"})
	case len(*body) > MaxCommentLength:
		return bodyTooLong()
	}
	return nil
}

// commentDoc renders a comment. The caller holds f.mu.
func (c *call) commentDoc(cm *comment) commentJSON {
	api := c.api + "/repos/" + c.repo.FullName()
	return commentJSON{
		ID:                cm.id,
		NodeID:            nodeID("IssueComment", cm.id),
		URL:               fmt.Sprintf("%s/issues/comments/%d", api, cm.id),
		HTMLURL:           fmt.Sprintf("%s/%s/pull/%d#issuecomment-%d", c.web, c.repo.FullName(), cm.number, cm.id),
		IssueURL:          fmt.Sprintf("%s/issues/%d", api, cm.number),
		Body:              cm.body,
		User:              c.userDoc(cm.author),
		CreatedAt:         stamp(cm.created),
		UpdatedAt:         stamp(cm.updated),
		AuthorAssociation: c.repo.association(cm.author),
	}
}

// sinceParam parses the since query parameter (an ISO 8601 timestamp).
func (c *call) sinceParam() (time.Time, *response) {
	s := c.r.URL.Query().Get("since")
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, invalid(fieldError{Resource: "IssueComment", Field: "since", Code: "invalid"})
	}
	return t, nil
}

func (f *Forge) listComments(c *call) *response {
	n, ok := c.intParam("number")
	if !ok {
		return notFound()
	}
	since, resp := c.sinceParam()
	if resp != nil {
		return resp
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.repo.pulls[int(n)] == nil {
		return notFound()
	}
	docs := []commentJSON{}
	for _, cm := range c.repo.comments {
		if cm.number == int(n) && !cm.updated.Before(since) {
			docs = append(docs, c.commentDoc(cm))
		}
	}
	return listReply(c, docs)
}

func (f *Forge) listRepoComments(c *call) *response {
	since, resp := c.sinceParam()
	if resp != nil {
		return resp
	}
	q := c.r.URL.Query()
	sortBy, dir := q.Get("sort"), q.Get("direction")
	f.mu.Lock()
	defer f.mu.Unlock()
	var cms []*comment
	for _, cm := range c.repo.comments {
		if !cm.updated.Before(since) {
			cms = append(cms, cm)
		}
	}
	if sortBy == "updated" {
		sort.SliceStable(cms, func(i, j int) bool { return cms[i].updated.Before(cms[j].updated) })
	}
	if dir == "desc" {
		for i, j := 0, len(cms)-1; i < j; i, j = i+1, j-1 {
			cms[i], cms[j] = cms[j], cms[i]
		}
	}
	docs := make([]commentJSON, 0, len(cms))
	for _, cm := range cms {
		docs = append(docs, c.commentDoc(cm))
	}
	return listReply(c, docs)
}

func (f *Forge) createComment(c *call) *response {
	n, ok := c.intParam("number")
	if !ok {
		return notFound()
	}
	var in struct {
		Body *string `json:"body"`
	}
	if resp := c.decode(&in); resp != nil {
		return resp
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.repo.pulls[int(n)] == nil {
		return notFound()
	}
	if resp := checkBody(in.Body); resp != nil {
		return resp
	}
	f.nextID++
	now := time.Now()
	cm := &comment{id: f.nextID, number: int(n), author: c.user.Login, body: *in.Body, created: now, updated: now}
	c.repo.comments = append(c.repo.comments, cm)
	resp := reply(http.StatusCreated, c.commentDoc(cm))
	resp.header = http.Header{"Location": {fmt.Sprintf("%s/repos/%s/issues/comments/%d", c.api, c.repo.FullName(), cm.id)}}
	return resp
}

// commentParam resolves the comment of the :id parameter. The caller holds
// f.mu.
func (c *call) commentParam() (int, *response) {
	id, ok := c.intParam("id")
	if !ok {
		return -1, notFound()
	}
	for i, cm := range c.repo.comments {
		if cm.id == id {
			return i, nil
		}
	}
	return -1, notFound()
}

func (f *Forge) getComment(c *call) *response {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, resp := c.commentParam()
	if resp != nil {
		return resp
	}
	return reply(http.StatusOK, c.commentDoc(c.repo.comments[i]))
}

// mayChange reports whether the caller may edit or delete a comment. The
// caller holds f.mu.
func (c *call) mayChange(cm *comment) bool {
	return strings.EqualFold(cm.author, c.user.Login) || c.repo.permission(c.user.Login).rank() >= PermissionWrite.rank()
}

func (f *Forge) updateComment(c *call) *response {
	var in struct {
		Body *string `json:"body"`
	}
	if resp := c.decode(&in); resp != nil {
		return resp
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i, resp := c.commentParam()
	if resp != nil {
		return resp
	}
	cm := c.repo.comments[i]
	if !c.mayChange(cm) {
		return forbidden()
	}
	if resp := checkBody(in.Body); resp != nil {
		return resp
	}
	cm.body, cm.updated = *in.Body, time.Now()
	return reply(http.StatusOK, c.commentDoc(cm))
}

func (f *Forge) deleteComment(c *call) *response {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, resp := c.commentParam()
	if resp != nil {
		return resp
	}
	if !c.mayChange(c.repo.comments[i]) {
		return forbidden()
	}
	c.repo.comments = append(c.repo.comments[:i:i], c.repo.comments[i+1:]...)
	return reply(http.StatusNoContent, nil)
}
