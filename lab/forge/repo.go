package forge

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

var (
	loginPattern = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$`)
	repoPattern  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
)

// Repo is a repository of the forge: a bare git repository on disk and the
// pull requests, comments, statuses and releases GitHub keeps beside it. It is safe
// for concurrent use.
type Repo struct {
	f             *Forge
	id            int64
	owner, name   string
	defaultBranch string
	dir           string
	parent        *Repo
	created       time.Time

	// Guarded by f.mu.
	perms      map[string]Permission // by lower-case login
	pulls      map[int]*pull
	nextNumber int
	comments   []*comment
	statuses   []*status
	releases   []*Release // in the order added
	latest     *Release   // the release last added with MakeLatest
}

// CreateRepo creates an empty repository owner/name whose default branch
// (HEAD) is defaultBranch ("main" when empty). A user whose login is owner
// is the repository's admin.
func (f *Forge) CreateRepo(owner, name, defaultBranch string) (*Repo, error) {
	return f.createRepo(owner, name, defaultBranch, nil)
}

// CreateFork creates forkOwner/name as a fork of owner/name holding all of
// its branches. Pull requests on owner/name can then name a head
// "forkOwner:branch"; they report head.repo.fork as true.
func (f *Forge) CreateFork(owner, name, forkOwner string) (*Repo, error) {
	parent := f.Repo(owner, name)
	if parent == nil {
		return nil, fmt.Errorf("forking %s/%s: no such repository", owner, name)
	}
	fork, err := f.createRepo(forkOwner, parent.name, parent.defaultBranch, parent)
	if err != nil {
		return nil, err
	}
	f.gitMu.Lock()
	defer f.gitMu.Unlock()
	src, dst := openStorage(parent.dir), openStorage(fork.dir)
	refs, err := src.IterReferences()
	if err != nil {
		return nil, fmt.Errorf("listing the branches of %s: %w", parent.FullName(), err)
	}
	err = refs.ForEach(func(ref *plumbing.Reference) error {
		if !ref.Name().IsBranch() || ref.Type() != plumbing.HashReference {
			return nil
		}
		if err := copyObjects(dst, src, ref.Hash()); err != nil {
			return err
		}
		if err := dst.SetReference(ref); err != nil {
			return fmt.Errorf("setting %s: %w", ref.Name(), err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("forking %s: %w", parent.FullName(), err)
	}
	return fork, nil
}

func (f *Forge) createRepo(owner, name, defaultBranch string, parent *Repo) (*Repo, error) {
	full := owner + "/" + name
	if !loginPattern.MatchString(owner) {
		return nil, fmt.Errorf("creating repository %q: invalid owner", full)
	}
	if !repoPattern.MatchString(name) || name == "." || name == ".." || strings.HasSuffix(strings.ToLower(name), ".git") {
		return nil, fmt.Errorf("creating repository %q: invalid name", full)
	}
	if defaultBranch == "" {
		defaultBranch = "main"
	}
	branchRef := plumbing.NewBranchReferenceName(defaultBranch)
	if err := branchRef.Validate(); err != nil {
		return nil, fmt.Errorf("creating repository %q: invalid default branch %q: %w", full, defaultBranch, err)
	}
	key := strings.ToLower(full)
	r := &Repo{
		f:             f,
		owner:         owner,
		name:          name,
		defaultBranch: defaultBranch,
		dir:           filepath.Join(f.dir, owner, name+".git"),
		parent:        parent,
		created:       time.Now(),
		perms:         map[string]Permission{},
		pulls:         map[int]*pull{},
		nextNumber:    1,
	}
	f.mu.Lock()
	if _, ok := f.repos[key]; ok {
		f.mu.Unlock()
		return nil, fmt.Errorf("creating repository %q: it exists", full)
	}
	f.nextID++
	r.id = f.nextID
	f.repos[key] = r // reserved; removed again if the repository cannot be made
	f.mu.Unlock()

	if err := initBare(r.dir, branchRef); err != nil {
		f.mu.Lock()
		delete(f.repos, key)
		f.mu.Unlock()
		return nil, fmt.Errorf("creating repository %q: %w", full, err)
	}
	f.mu.Lock()
	f.order = append(f.order, r)
	f.mu.Unlock()
	return r, nil
}

// initBare creates a bare repository configured for git http-backend the
// way GitHub behaves: pushes are allowed (the forge authorises them), the
// refs/pull/ namespace is read-only and hidden from pushers, and nothing
// is garbage-collected behind the forge's back.
func initBare(dir string, head plumbing.ReferenceName) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("creating the owner directory: %w", err)
	}
	repo, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{
		Bare:        true,
		InitOptions: git.InitOptions{DefaultBranch: head},
	})
	if err != nil {
		return fmt.Errorf("initialising the bare repository: %w", err)
	}
	cfg, err := repo.Config()
	if err != nil {
		return fmt.Errorf("reading the repository configuration: %w", err)
	}
	cfg.Raw.Section("http").SetOption("receivepack", "true")
	cfg.Raw.Section("receive").SetOption("hideRefs", "refs/pull")
	cfg.Raw.Section("receive").SetOption("autogc", "false")
	cfg.Raw.Section("gc").SetOption("auto", "0")
	cfg.Raw.Section("uploadpack").SetOption("allowReachableSHA1InWant", "true")
	if err := repo.Storer.SetConfig(cfg); err != nil {
		return fmt.Errorf("writing the repository configuration: %w", err)
	}
	return nil
}

// Repo returns the repository owner/name (without regard to case), or nil
// if there is none.
func (f *Forge) Repo(owner, name string) *Repo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.repos[strings.ToLower(owner+"/"+name)]
}

// Owner returns the login of the repository's owner.
func (r *Repo) Owner() string { return r.owner }

// Name returns the repository's name.
func (r *Repo) Name() string { return r.name }

// FullName returns owner/name.
func (r *Repo) FullName() string { return r.owner + "/" + r.name }

// DefaultBranch returns the name of the default branch.
func (r *Repo) DefaultBranch() string { return r.defaultBranch }

// Dir returns the path of the bare repository on disk.
func (r *Repo) Dir() string { return r.dir }

// Parent returns the repository this one is a fork of, or nil.
func (r *Repo) Parent() *Repo { return r.parent }

// Grant sets a user's permission on the repository. PermissionNone
// removes it. The owner is always admin.
func (r *Repo) Grant(login string, p Permission) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if p.rank() == 0 {
		delete(r.perms, strings.ToLower(login))
		return
	}
	r.perms[strings.ToLower(login)] = p
}

// Permission returns a user's permission on the repository.
func (r *Repo) Permission(login string) Permission {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	return r.permission(login)
}

// permission is Permission for a caller holding f.mu.
func (r *Repo) permission(login string) Permission {
	if strings.EqualFold(login, r.owner) {
		return PermissionAdmin
	}
	if p, ok := r.perms[strings.ToLower(login)]; ok {
		return p
	}
	return PermissionNone
}

// Branch returns the commit a branch points to.
func (r *Repo) Branch(name string) (string, error) {
	r.f.gitMu.RLock()
	defer r.f.gitMu.RUnlock()
	h, err := refHash(openStorage(r.dir), plumbing.NewBranchReferenceName(name))
	if err != nil {
		return "", fmt.Errorf("reading branch %q of %s: %w", name, r.FullName(), err)
	}
	if h.IsZero() {
		return "", fmt.Errorf("reading branch %q of %s: %w", name, r.FullName(), ErrNoBranch)
	}
	return h.String(), nil
}

// ErrNoBranch is returned for a branch that does not exist.
var ErrNoBranch = errors.New("no such branch")

// Commit commits files (path to content, as regular files) on top of
// branch, creating the branch from the default branch if it does not exist
// (or as a root commit in an empty repository), and returns the new
// commit's hash. Open pull requests whose head is the branch move with it.
func (r *Repo) Commit(branch string, files map[string]string, message string) (string, error) {
	if len(files) == 0 {
		return "", fmt.Errorf("committing to %s on %s: no files", branch, r.FullName())
	}
	return r.change(branch, message, func(tree map[string]treeEntry, st storer.EncodedObjectStorer) error {
		paths := make([]string, 0, len(files))
		for p := range files {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			c, err := cleanPath(p)
			if err != nil {
				return err
			}
			h, err := writeBlob(st, []byte(files[p]))
			if err != nil {
				return err
			}
			tree[c] = treeEntry{hash: h, mode: filemode.Regular}
		}
		return nil
	})
}

// Symlink commits a symbolic link at path pointing to target on top of
// branch, like Commit: git stores a link as a blob holding the target with
// the tree entry mode 120000.
func (r *Repo) Symlink(branch, path, target, message string) (string, error) {
	return r.change(branch, message, func(tree map[string]treeEntry, st storer.EncodedObjectStorer) error {
		c, err := cleanPath(path)
		if err != nil {
			return err
		}
		h, err := writeBlob(st, []byte(target))
		if err != nil {
			return err
		}
		tree[c] = treeEntry{hash: h, mode: filemode.Symlink}
		return nil
	})
}

// Remove commits the removal of files (or whole directories) from branch,
// like Commit, and returns the new commit's hash.
func (r *Repo) Remove(branch string, paths []string, message string) (string, error) {
	return r.change(branch, message, func(tree map[string]treeEntry, _ storer.EncodedObjectStorer) error {
		for _, p := range paths {
			c, err := cleanPath(p)
			if err != nil {
				return err
			}
			found := false
			for have := range tree {
				if have == c || strings.HasPrefix(have, c+"/") {
					delete(tree, have)
					found = true
				}
			}
			if !found {
				return fmt.Errorf("removing %q: no such file", p)
			}
		}
		return nil
	})
}

// change commits the result of edit applied to branch's files.
func (r *Repo) change(branch, message string, edit func(map[string]treeEntry, storer.EncodedObjectStorer) error) (string, error) {
	ref := plumbing.NewBranchReferenceName(branch)
	if err := ref.Validate(); err != nil {
		return "", fmt.Errorf("committing to %q on %s: invalid branch: %w", branch, r.FullName(), err)
	}
	if message == "" {
		message = "Update files"
	}
	sha, err := func() (plumbing.Hash, error) {
		r.f.gitMu.Lock()
		defer r.f.gitMu.Unlock()
		st := openStorage(r.dir)
		parent, err := refHash(st, ref)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if parent.IsZero() {
			if parent, err = refHash(st, plumbing.NewBranchReferenceName(r.defaultBranch)); err != nil {
				return plumbing.ZeroHash, err
			}
		}
		files, err := treeFiles(st, parent)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if err := edit(files, st); err != nil {
			return plumbing.ZeroHash, err
		}
		tree, err := writeTree(st, files)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		var parents []plumbing.Hash
		if !parent.IsZero() {
			parents = []plumbing.Hash{parent}
		}
		sig := object.Signature{Name: "Lab Forge", Email: "forge@users.noreply.github.com", When: time.Now()}
		commit, err := writeCommit(st, tree, parents, ensureNewline(message), sig, sig)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if err := st.SetReference(plumbing.NewHashReference(ref, commit)); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("updating %s: %w", ref, err)
		}
		return commit, nil
	}()
	if err != nil {
		return "", fmt.Errorf("committing to %q on %s: %w", branch, r.FullName(), err)
	}
	if err := r.f.syncPulls(); err != nil {
		return sha.String(), fmt.Errorf("updating pull requests after committing to %q on %s: %w", branch, r.FullName(), err)
	}
	return sha.String(), nil
}

func ensureNewline(s string) string {
	if strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}
