// Package gitsync is the agent's view of the cluster repository: a bare
// clone kept in the agent's data directory, refreshed on demand with the
// default branch and the heads of open pull requests, and read commit by
// commit without a work tree.
//
// Everything goes through go-git; nothing shells out to git (a local path
// or file:// remote is served by go-git's in-process upload-pack, not by
// the git-upload-pack binary go-git's file transport would run). A Repo is
// safe for concurrent use: fetches are serialised, and every read of the
// object store takes a short lock, so two jobs can read the trees of two
// different commits at the same time without sharing a checkout.
//
// The fetch speaks the upload-pack protocol through go-git's transport
// sessions rather than Remote.Fetch, for two reasons: go-git installs
// transports process-wide, while each Repo here carries its own HTTP
// client; and it lets a fetch map exactly the refs it wants and stop after
// the ref advertisement when nothing moved.
//
// Local refs live in their own namespaces so that they never collide with
// anything a human might create in the clone:
//
//	refs/remotes/origin/<default-branch>   the remote's default branch
//	refs/remotes/origin/HEAD               symbolic, points at the above
//	refs/remotes/pull/<N>/head             the head of pull request N
package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage"
)

// DefaultTimeout bounds one fetch (ref advertisement plus packfile) when
// Options.Timeout is zero.
const DefaultTimeout = 2 * time.Minute

// DefaultUsername is the basic-auth username sent with an HTTPS token when
// Auth.Username is empty; GitHub accepts it for installation and personal
// tokens alike.
const DefaultUsername = "x-access-token"

// ErrRemoteMismatch is returned by Open when Options.Dir already holds a
// clone of a different remote.
var ErrRemoteMismatch = errors.New("clone belongs to a different remote")

// Options configure Open.
type Options struct {
	// URL is the remote: https://..., ssh://... or user@host:path, or a
	// local path or file:// URL (served in process, for tests and demos).
	// Credentials embedded in an HTTP(S) URL are used as basic auth but are
	// never stored, logged or returned in errors.
	URL string
	// Dir is where the bare clone lives. Open clones into it when it is
	// missing or empty.
	Dir string
	// Auth selects the credentials.
	Auth Auth
	// HTTPClient, if set, carries every HTTP(S) request: use it for custom
	// TLS roots, proxies or instrumentation. Its Timeout should be zero;
	// deadlines come from the context and Timeout.
	HTTPClient *http.Client
	// DefaultBranch names the branch to follow, without refs/heads/. Empty
	// means the branch the remote's HEAD points at.
	DefaultBranch string
	// Timeout bounds each fetch; zero means DefaultTimeout.
	Timeout time.Duration
	// Logger receives debug and info records; nil discards them.
	Logger *slog.Logger
}

// Auth holds the credentials for the remote. The secret files are read on
// every fetch, so a rotated token is picked up without a restart.
type Auth struct {
	// TokenFile holds an HTTPS token, sent as the basic-auth password.
	TokenFile string
	// Username is the basic-auth username sent with the token; empty means
	// DefaultUsername.
	Username string
	// SSHKeyFile holds an unencrypted private key for ssh remotes.
	SSHKeyFile string
	// KnownHostsFile lists the ssh host keys to trust; required with
	// SSHKeyFile.
	KnownHostsFile string
}

// Heads are the tips the last fetch recorded.
type Heads struct {
	// Default is the commit at the tip of the default branch.
	Default string
	// DefaultBranch is the default branch's name, without refs/heads/.
	DefaultBranch string
	// PRs maps a pull-request number to the commit at its head.
	PRs map[int]string
}

// Repo is a bare clone of the cluster repository. Use Open to get one; its
// methods are safe for concurrent use.
type Repo struct {
	dir     string
	url     string // credential-free, for logs, errors and the stored config
	remote  *remote
	branch  string // configured default branch, may be empty
	timeout time.Duration
	log     *slog.Logger

	fetchMu sync.Mutex // one fetch at a time

	mu   sync.Mutex // guards every access to repo, st, refs and head
	repo *git.Repository
	st   storage.Storer
	// refs mirrors the hash refs in this package's namespaces, and head the
	// target of refs/remotes/origin/HEAD ("" before the first fetch). This
	// Repo is their only writer, so an idle fetch needs no disk I/O.
	refs map[plumbing.ReferenceName]plumbing.Hash
	head plumbing.ReferenceName

	// dirs keeps ClusterDirs' answers by commit hash and roots: a
	// commit's tree never changes, and each poll asks again for the
	// default branch's and every open pull request's.
	dirsMu sync.Mutex
	dirs   map[string][]string
}

const (
	remoteName   = "origin"
	branchPrefix = "refs/remotes/origin/"
	pullPrefix   = "refs/remotes/pull/"
	originHEAD   = plumbing.ReferenceName("refs/remotes/origin/HEAD")
)

// Open returns the clone in o.Dir. When the directory is missing or empty it
// clones o.URL into it first (the default branch only; pull requests come
// with Fetch); otherwise it opens the existing clone and checks that it was
// made from the same remote, returning ErrRemoteMismatch if not. Open does
// not fetch an existing clone.
func Open(ctx context.Context, o Options) (*Repo, error) {
	if o.URL == "" {
		return nil, errors.New("opening repository: no remote URL")
	}
	if o.Dir == "" {
		return nil, errors.New("opening repository: no directory")
	}
	rem, err := newRemote(o)
	if err != nil {
		return nil, err
	}
	r := &Repo{
		dir:     o.Dir,
		url:     rem.safeURL,
		remote:  rem,
		branch:  strings.TrimPrefix(o.DefaultBranch, "refs/heads/"),
		timeout: o.Timeout,
		log:     o.Logger,
	}
	if r.timeout <= 0 {
		r.timeout = DefaultTimeout
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}

	empty, err := dirEmpty(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("opening repository at %s: %w", o.Dir, err)
	}
	if !empty {
		if err := r.openExisting(); err != nil {
			return nil, err
		}
		r.log.Debug("opened clone", "dir", r.dir, "url", r.url)
		return r, nil
	}

	if err := r.initBare(); err != nil {
		return nil, err
	}
	r.log.Info("cloning", "dir", r.dir, "url", r.url)
	if _, err := r.Fetch(ctx, nil); err != nil {
		return nil, err
	}
	return r, nil
}

func dirEmpty(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return len(entries) == 0, nil
}

func (r *Repo) initBare() error {
	repo, err := git.PlainInit(r.dir, true)
	if err != nil {
		return fmt.Errorf("initialising bare repository at %s: %w", r.dir, err)
	}
	_, err = repo.CreateRemote(&config.RemoteConfig{
		Name: remoteName,
		URLs: []string{r.url},
		// Informational: the refspecs this package maintains, so a human
		// inspecting the clone sees where refs come from.
		Fetch: []config.RefSpec{
			config.RefSpec("+refs/heads/*:" + branchPrefix + "*"),
			config.RefSpec("+refs/pull/*/head:" + pullPrefix + "*/head"),
		},
	})
	if err != nil {
		return fmt.Errorf("configuring remote in %s: %w", r.dir, err)
	}
	r.repo, r.st = repo, repo.Storer
	r.refs = map[plumbing.ReferenceName]plumbing.Hash{}
	return nil
}

func (r *Repo) openExisting() error {
	repo, err := git.PlainOpen(r.dir)
	if err != nil {
		return fmt.Errorf("opening repository at %s: %w", r.dir, err)
	}
	cfg, err := repo.Config()
	if err != nil {
		return fmt.Errorf("reading configuration of %s: %w", r.dir, err)
	}
	if !cfg.Core.IsBare {
		return fmt.Errorf("opening repository at %s: not a bare repository", r.dir)
	}
	rc, ok := cfg.Remotes[remoteName]
	if !ok || len(rc.URLs) == 0 {
		return fmt.Errorf("%w: %s has no remote %q", ErrRemoteMismatch, r.dir, remoteName)
	}
	if have := strings.TrimSuffix(rc.URLs[0], "/"); have != strings.TrimSuffix(r.url, "/") {
		return fmt.Errorf("%w: %s was cloned from %s, not %s", ErrRemoteMismatch, r.dir, have, r.url)
	}
	r.repo, r.st = repo, repo.Storer
	// Packfile spools a crash left behind.
	if stale, _ := filepath.Glob(filepath.Join(r.dir, spoolPattern)); len(stale) > 0 {
		for _, f := range stale {
			_ = os.Remove(f)
		}
	}
	return r.loadRefs()
}

// loadRefs fills the ref table from the clone.
func (r *Repo) loadRefs() error {
	r.refs = map[plumbing.ReferenceName]plumbing.Hash{}
	refs, err := r.st.IterReferences()
	if err != nil {
		return fmt.Errorf("listing references in %s: %w", r.dir, err)
	}
	defer refs.Close()
	err = refs.ForEach(func(ref *plumbing.Reference) error {
		switch {
		case ref.Name() == originHEAD && ref.Type() == plumbing.SymbolicReference:
			r.head = ref.Target()
		case ownRef(ref.Name()) && ref.Type() == plumbing.HashReference:
			r.refs[ref.Name()] = ref.Hash()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing references in %s: %w", r.dir, err)
	}
	return nil
}

// Compact repacks the clone into one packfile holding only what the local
// refs reach, which drops the objects of pruned pull requests. Every fetch
// that brings objects adds a packfile and lookups slow down as they pile
// up, so call Compact now and then (daily, say). It waits for a running
// fetch and holds the store lock throughout: reads wait for it.
func (r *Repo) Compact() error {
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.repo.RepackObjects(&git.RepackConfig{}); err != nil {
		return fmt.Errorf("repacking %s: %w", r.dir, err)
	}
	// The store caches pack indexes; the old packs are gone.
	if ri, ok := r.st.(interface{ Reindex() }); ok {
		ri.Reindex()
	}
	return nil
}

// Dir returns the directory of the bare clone.
func (r *Repo) Dir() string { return r.dir }

// URL returns the remote URL with any credentials removed.
func (r *Repo) URL() string { return r.url }

// Heads returns the tips recorded by the last fetch, without network I/O.
func (r *Repo) Heads() (Heads, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tip, ok := r.refs[r.head]
	if r.head == "" || !ok {
		return Heads{}, fmt.Errorf("reading heads in %s: nothing fetched yet", r.dir)
	}
	h := Heads{
		Default:       tip.String(),
		DefaultBranch: strings.TrimPrefix(r.head.String(), branchPrefix),
		PRs:           map[int]string{},
	}
	for name, hash := range r.refs {
		if n, ok := localPRNumber(name); ok {
			h.PRs[n] = hash.String()
		}
	}
	return h, nil
}

// resolve turns a commit SHA (or any revision go-git resolves, such as a
// local ref name) into a hash. The caller holds r.mu.
func (r *Repo) resolve(commit string) (plumbing.Hash, error) {
	if commit == "" {
		return plumbing.ZeroHash, errors.New("resolving commit: empty revision")
	}
	if plumbing.IsHash(commit) {
		return plumbing.NewHash(commit), nil
	}
	h, err := r.repo.ResolveRevision(plumbing.Revision(commit))
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("resolving commit %q: %w", commit, err)
	}
	return *h, nil
}

// absLocal makes a local path absolute so that the stored remote URL does
// not depend on the working directory.
func absLocal(ep *transport.Endpoint) error {
	if ep.Protocol != "file" {
		return nil
	}
	abs, err := filepath.Abs(ep.Path)
	if err != nil {
		return err
	}
	ep.Path = abs
	return nil
}
