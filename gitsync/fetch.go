package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

// spoolPattern names the temporary files packfiles are received into.
const spoolPattern = "fetch-*.pack"

// prSelection says which pull-request heads a fetch keeps.
type prSelection struct {
	all  bool         // every head the remote advertises
	open map[int]bool // otherwise: exactly these numbers
}

// Fetch brings the clone up to date with the remote's default branch and
// the heads of the given open pull requests (refs/pull/N/head on the
// remote), and prunes the local heads of every other pull request. Pass the
// open pull requests from the forge's API: GitHub keeps refs/pull/N/head
// for closed pull requests forever, so the advertisement alone cannot tell
// open from closed. An open pull request whose head the remote does not
// advertise (yet) is left out of Heads.PRs.
//
// Only objects the clone lacks are requested: when nothing moved, the fetch
// costs one ref advertisement and no packfile. The whole exchange runs under
// Options.Timeout. Errors never contain credentials.
func (r *Repo) Fetch(ctx context.Context, open []int) (Heads, error) {
	sel := prSelection{open: make(map[int]bool, len(open))}
	for _, n := range open {
		sel.open[n] = true
	}
	return r.fetch(ctx, sel)
}

// FetchAll is Fetch for every pull-request head the remote advertises, for
// servers that delete the refs of closed pull requests or when no forge API
// is at hand. Local heads the remote no longer advertises are pruned.
func (r *Repo) FetchAll(ctx context.Context) (Heads, error) {
	return r.fetch(ctx, prSelection{all: true})
}

func (r *Repo) fetch(ctx context.Context, sel prSelection) (Heads, error) {
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()

	return r.fetchLocked(ctx, sel)
}

// fetchLocked runs one fetch; the caller holds r.fetchMu.
func (r *Repo) fetchLocked(ctx context.Context, sel prSelection) (Heads, error) {
	sess, secrets, err := r.remote.session()
	if err != nil {
		return Heads{}, secrets.error(fmt.Errorf("fetching %s: %w", r.url, err))
	}
	defer sess.Close()
	fail := func(err error) (Heads, error) {
		return Heads{}, secrets.error(fmt.Errorf("fetching %s: %w", r.url, err))
	}

	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		return fail(err)
	}
	branch, err := r.defaultBranch(ar)
	if err != nil {
		return fail(err)
	}
	tip, ok := ar.References["refs/heads/"+branch]
	if !ok {
		return fail(fmt.Errorf("remote has no branch %q", branch))
	}

	heads := Heads{Default: tip.String(), DefaultBranch: branch, PRs: map[int]string{}}
	want := map[plumbing.ReferenceName]plumbing.Hash{
		plumbing.ReferenceName(branchPrefix + branch): tip,
	}
	for name, h := range ar.References {
		n, ok := remotePRNumber(name)
		if !ok || !(sel.all || sel.open[n]) {
			continue
		}
		heads.PRs[n] = h.String()
		want[localPRRef(n)] = h
	}
	for n := range sel.open {
		if _, ok := heads.PRs[n]; !ok {
			r.log.Debug("pull request head not advertised", "url", r.url, "pr", n)
		}
	}

	wants, haves, err := r.negotiate(want)
	if err != nil {
		return fail(err)
	}
	var packBytes int64
	if len(wants) > 0 {
		packBytes, err = r.fetchPack(ctx, sess, ar, wants, haves)
		if err != nil {
			return fail(err)
		}
	}
	updated, pruned, err := r.updateRefs(branch, want)
	if err != nil {
		return fail(err)
	}
	if len(wants) == 0 && updated == 0 && pruned == 0 {
		r.log.Debug("fetch up to date", "url", r.url, "prs", len(heads.PRs))
	} else {
		r.log.Info("fetched", "url", r.url, "branch", branch, "commit", heads.Default,
			"prs", len(heads.PRs), "refs_updated", updated, "refs_pruned", pruned,
			"pack_bytes", packBytes)
	}
	return heads, nil
}

// defaultBranch picks the configured branch, else the one the remote's HEAD
// points at: from the symref capability, or else by matching HEAD's hash.
func (r *Repo) defaultBranch(ar *packp.AdvRefs) (string, error) {
	if r.branch != "" {
		return r.branch, nil
	}
	for _, v := range ar.Capabilities.Get(capability.SymRef) {
		from, to, ok := strings.Cut(v, ":")
		if ok && from == "HEAD" && strings.HasPrefix(to, "refs/heads/") {
			return strings.TrimPrefix(to, "refs/heads/"), nil
		}
	}
	if len(ar.References) == 0 {
		return "", transport.ErrEmptyRemoteRepository
	}
	if ar.Head == nil {
		return "", errors.New("remote does not advertise HEAD; set the default branch")
	}
	var names []string
	for name, h := range ar.References {
		if h == *ar.Head && strings.HasPrefix(name, "refs/heads/") {
			names = append(names, strings.TrimPrefix(name, "refs/heads/"))
		}
	}
	if len(names) == 0 {
		return "", errors.New("remote HEAD matches no branch; set the default branch")
	}
	sort.Slice(names, func(i, j int) bool {
		return branchRank(names[i]) < branchRank(names[j]) ||
			branchRank(names[i]) == branchRank(names[j]) && names[i] < names[j]
	})
	return names[0], nil
}

func branchRank(name string) int {
	switch name {
	case "main":
		return 0
	case "master":
		return 1
	}
	return 2
}

// negotiate lists the tips the clone lacks and the local tips it can offer
// as common ground. A tip already recorded under the same ref needs no
// look-up, so an idle fetch touches no file.
func (r *Repo) negotiate(want map[plumbing.ReferenceName]plumbing.Hash) (wants, haves []plumbing.Hash, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()

	seen := hashSet{}
	for name, h := range want {
		if r.refs[name] == h || !seen.add(h) {
			continue
		}
		if r.st.HasEncodedObject(h) != nil {
			wants = append(wants, h)
		}
	}
	if len(wants) == 0 {
		return nil, nil, nil
	}
	offered := hashSet{}
	for _, h := range r.refs {
		if offered.add(h) && r.st.HasEncodedObject(h) == nil {
			haves = append(haves, h)
		}
	}
	sortHashes(wants)
	sortHashes(haves)
	return wants, haves, nil
}

func sortHashes(hs []plumbing.Hash) {
	sort.Slice(hs, func(i, j int) bool { return hs[i].String() < hs[j].String() })
}

// fetchPack requests the missing objects, spools the packfile to disk
// without holding the store lock, then indexes it into the object store.
func (r *Repo) fetchPack(ctx context.Context, sess transport.UploadPackSession, ar *packp.AdvRefs, wants, haves []plumbing.Hash) (int64, error) {
	req := packp.NewUploadPackRequestFromCapabilities(ar.Capabilities)
	if ar.Capabilities.Supports(capability.NoProgress) {
		if err := req.Capabilities.Set(capability.NoProgress); err != nil {
			return 0, err
		}
	}
	req.Wants = wants
	req.Haves = haves

	resp, err := sess.UploadPack(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("requesting packfile: %w", err)
	}
	defer resp.Close()

	var pack io.Reader = resp
	switch {
	case req.Capabilities.Supports(capability.Sideband64k):
		pack = sideband.NewDemuxer(sideband.Sideband64k, resp)
	case req.Capabilities.Supports(capability.Sideband):
		pack = sideband.NewDemuxer(sideband.Sideband, resp)
	}

	spool, err := os.CreateTemp(r.dir, spoolPattern)
	if err != nil {
		return 0, fmt.Errorf("creating packfile spool: %w", err)
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()
	n, err := io.Copy(spool, pack)
	if err != nil {
		return n, fmt.Errorf("receiving packfile: %w", err)
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return n, fmt.Errorf("rewinding packfile spool: %w", err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if err := packfile.UpdateObjectStorage(r.st, spool); err != nil {
		return n, fmt.Errorf("storing packfile: %w", err)
	}
	for _, h := range wants {
		if r.st.HasEncodedObject(h) != nil {
			return n, fmt.Errorf("remote did not send commit %s", h)
		}
	}
	return n, nil
}

// updateRefs points the local refs at the fetched tips and deletes the
// local refs the fetch no longer wants.
func (r *Repo) updateRefs(branch string, want map[plumbing.ReferenceName]plumbing.Hash) (updated, pruned int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()

	names := make([]plumbing.ReferenceName, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	for _, name := range names {
		h := want[name]
		if old, ok := r.refs[name]; ok && old == h {
			continue
		}
		if err := r.st.SetReference(plumbing.NewHashReference(name, h)); err != nil {
			return updated, pruned, fmt.Errorf("updating %s: %w", name, err)
		}
		r.refs[name] = h
		updated++
	}
	target := plumbing.ReferenceName(branchPrefix + branch)
	if r.head != target {
		if err := r.st.SetReference(plumbing.NewSymbolicReference(originHEAD, target)); err != nil {
			return updated, pruned, fmt.Errorf("updating %s: %w", originHEAD, err)
		}
		r.head = target
	}
	for name := range r.refs {
		if _, ok := want[name]; ok {
			continue
		}
		if err := r.st.RemoveReference(name); err != nil {
			return updated, pruned, fmt.Errorf("pruning %s: %w", name, err)
		}
		delete(r.refs, name)
		pruned++
	}
	return updated, pruned, nil
}

// ownRef reports whether a local ref is in a namespace this package
// maintains (and may therefore prune).
func ownRef(name plumbing.ReferenceName) bool {
	s := name.String()
	return strings.HasPrefix(s, branchPrefix) || strings.HasPrefix(s, pullPrefix)
}

// remotePRNumber parses refs/pull/N/head.
func remotePRNumber(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "refs/pull/")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, "/head")
	if !ok {
		return 0, false
	}
	return parsePRNumber(num)
}

// localPRNumber parses refs/remotes/pull/N/head.
func localPRNumber(name plumbing.ReferenceName) (int, bool) {
	rest, ok := strings.CutPrefix(name.String(), pullPrefix)
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, "/head")
	if !ok {
		return 0, false
	}
	return parsePRNumber(num)
}

func parsePRNumber(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

func localPRRef(n int) plumbing.ReferenceName {
	return plumbing.ReferenceName(pullPrefix + strconv.Itoa(n) + "/head")
}
