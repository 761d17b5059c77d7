package state

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// The files of a cluster's state.
const (
	// IdentityFile is the cluster identity: create-only, never replaced.
	IdentityFile = "talossecrets.yaml"
	// TalosconfigFile is the Talos client config derived from the identity.
	TalosconfigFile = "talosconfig"
	// KubeconfigFile is the Kubernetes client config.
	KubeconfigFile = "kubeconfig"
	// JournalFile holds the run journal and the last converged commit. The
	// name is reserved: Store methods refuse it, the Journal methods keep it.
	JournalFile = "journal.json"
)

// ErrInvalidName is returned for a cluster path or a file name that cannot
// name state: empty, absolute, with a ".." or hidden segment, characters
// outside letters, digits, '.', '-' and '_', or the reserved JournalFile.
var ErrInvalidName = errors.New("invalid state name")

// ErrCreateOnly is returned by Put for IdentityFile: the identity can only
// be created, never replaced.
var ErrCreateOnly = errors.New("the cluster identity is create-only")

// ErrNoEntry is returned by Done for an id the journal does not hold.
var ErrNoEntry = errors.New("no such journal entry")

// ErrConflict is returned when a write kept meeting concurrent writers and
// gave up after a bounded number of attempts.
var ErrConflict = errors.New("concurrent writers kept changing the state")

// Store keeps the files of each cluster's state. Every method takes the
// cluster's path in the repository (for example "clusters/prod-a") and a
// file name such as IdentityFile.
type Store interface {
	// Get returns a file of a cluster's state; an error wrapping
	// fs.ErrNotExist when it is absent.
	Get(ctx context.Context, cluster, name string) ([]byte, error)
	// Create stores a file only if it is absent (the identity); an
	// existing one gives an error wrapping fs.ErrExist and is left as it
	// was, even when a concurrent writer created it a moment earlier.
	Create(ctx context.Context, cluster, name string, data []byte) error
	// Put replaces a derived file, creating it if absent. It refuses
	// IdentityFile with ErrCreateOnly.
	Put(ctx context.Context, cluster, name string, data []byte) error
	// Delete removes a file; an absent file is not an error. It is for
	// destroy, which removes the identity too.
	Delete(ctx context.Context, cluster, name string) error
}

// Journal records the intent of every mutation before it is made, so a run
// that crashed or was restarted resumes by looking the resource up rather
// than by retrying blindly. It also keeps the last commit a cluster was
// converged to.
type Journal interface {
	// Begin records the intent e (Op, Target and Commit; the journal sets
	// ID and Started) before the mutation and returns the entry's id.
	Begin(ctx context.Context, cluster string, e Entry) (string, error)
	// Done marks the entry finished, with err's first line when the
	// mutation failed. An unknown id gives ErrNoEntry; finishing an
	// entry twice keeps the first outcome.
	Done(ctx context.Context, cluster, id string, err error) error
	// Open returns the entries begun and not finished, oldest first:
	// after a restart, the mutations whose outcome is unknown.
	Open(ctx context.Context, cluster string) ([]Entry, error)
	// Entries returns the open entries and the most recent finished ones,
	// oldest first.
	Entries(ctx context.Context, cluster string) ([]Entry, error)
	// LastConverged returns the commit the cluster was last converged to,
	// or "" when it never was.
	LastConverged(ctx context.Context, cluster string) (string, error)
	// SetLastConverged records the commit a converge brought the cluster
	// to.
	SetLastConverged(ctx context.Context, cluster, commit string) error
}

// Backend is a Store with a Journal: what the engine and the agent keep
// per cluster.
type Backend interface {
	Store
	Journal
}

// Entry is one intended mutation in the journal.
type Entry struct {
	// ID identifies the entry within its cluster's journal.
	ID string `json:"id"`
	// Op is the mutation, for example "create-vm".
	Op string `json:"op"`
	// Target is what it mutates, for example "prod-a-worker-04".
	Target string `json:"target"`
	// Commit is the commit the run works from.
	Commit string `json:"commit,omitempty"`
	// Started is when the entry was begun.
	Started time.Time `json:"started"`
	// Finished is when it was marked done; the zero time while open.
	Finished time.Time `json:"finished,omitzero"`
	// Error is the first line of the mutation's error, if it failed.
	Error string `json:"error,omitempty"`
	// Boot is the boot ID of the target node when a step that restarts it
	// began: a later run tells from it whether the node restarted since.
	Boot string `json:"boot,omitempty"`
}

// keepFinished bounds how many finished entries a journal keeps.
const keepFinished = 32

// maxErrorText bounds the error text kept in an entry, in bytes.
const maxErrorText = 512

// journalVersion is the schema version of the journal document.
const journalVersion = 1

// journal is the document stored under JournalFile.
type journal struct {
	Version       int        `json:"version"`
	Entries       []Entry    `json:"entries"`
	LastConverged *converged `json:"lastConverged,omitempty"`
}

type converged struct {
	Commit string    `json:"commit"`
	Time   time.Time `json:"time"`
}

// decodeJournal reads a journal document; no data is an empty journal.
func decodeJournal(data []byte) (*journal, error) {
	j := &journal{Version: journalVersion}
	if len(data) == 0 {
		return j, nil
	}
	if err := json.Unmarshal(data, j); err != nil {
		return nil, fmt.Errorf("decoding the journal: %w", err)
	}
	if j.Version != journalVersion {
		return nil, fmt.Errorf("decoding the journal: unknown version %d", j.Version)
	}
	return j, nil
}

func (j *journal) encode() ([]byte, error) {
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the journal: %w", err)
	}
	return append(data, '\n'), nil
}

// begin adds an open entry and returns its id.
func (j *journal) begin(e Entry, now time.Time) (string, error) {
	if err := checkEntry(e); err != nil {
		return "", err
	}
	id, err := newID()
	if err != nil {
		return "", err
	}
	e.ID, e.Started, e.Finished, e.Error = id, now.UTC(), time.Time{}, ""
	j.Entries = append(j.Entries, e)
	return id, nil
}

// done finishes an entry and drops the oldest finished entries beyond
// keepFinished. It reports whether the journal changed.
func (j *journal) done(id string, failure error, now time.Time) (bool, error) {
	i := -1
	for k := range j.Entries {
		if j.Entries[k].ID == id {
			i = k
			break
		}
	}
	if i < 0 {
		return false, fmt.Errorf("finishing journal entry %q: %w", id, ErrNoEntry)
	}
	if !j.Entries[i].Finished.IsZero() {
		return false, nil
	}
	j.Entries[i].Finished = now.UTC()
	if failure != nil {
		j.Entries[i].Error = errorText(failure)
	}
	finished := 0
	for _, e := range j.Entries {
		if !e.Finished.IsZero() {
			finished++
		}
	}
	kept := j.Entries[:0]
	for _, e := range j.Entries {
		if !e.Finished.IsZero() && finished > keepFinished {
			finished--
			continue
		}
		kept = append(kept, e)
	}
	j.Entries = kept
	return true, nil
}

func (j *journal) open() []Entry {
	out := []Entry{}
	for _, e := range j.Entries {
		if e.Finished.IsZero() {
			out = append(out, e)
		}
	}
	return out
}

func (j *journal) entries() []Entry {
	return append([]Entry{}, j.Entries...)
}

func (j *journal) lastConverged() string {
	if j.LastConverged == nil {
		return ""
	}
	return j.LastConverged.Commit
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// setLastConverged records commit; it reports whether the journal changed.
func (j *journal) setLastConverged(commit string, now time.Time) (bool, error) {
	if !commitRE.MatchString(commit) {
		return false, fmt.Errorf("recording the converged commit %q: not a hexadecimal commit id", commit)
	}
	if j.LastConverged != nil && j.LastConverged.Commit == commit {
		return false, nil
	}
	j.LastConverged = &converged{Commit: commit, Time: now.UTC()}
	return true, nil
}

// checkEntry refuses an entry whose fields are not short single lines.
func checkEntry(e Entry) error {
	if e.Op == "" {
		return errors.New("beginning a journal entry: no op")
	}
	for _, f := range []struct{ field, value string }{{"op", e.Op}, {"target", e.Target}, {"commit", e.Commit}} {
		if len(f.value) > 256 || !utf8.ValidString(f.value) || strings.ContainsFunc(f.value, isControl) {
			return fmt.Errorf("beginning a journal entry: the %s must be a single line of at most 256 bytes", f.field)
		}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// errorText is the first line of err, without control characters, cut to
// maxErrorText bytes.
func errorText(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if isControl(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

func newID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making a journal entry id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// maxClusterPath bounds the length of a cluster path.
const maxClusterPath = 256

var (
	segmentRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`)
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$`)
)

// checkCluster refuses a cluster path that is not a clean relative path of
// safe segments.
func checkCluster(cluster string) error {
	if cluster == "" || len(cluster) > maxClusterPath {
		return fmt.Errorf("cluster path %q: %w", cluster, ErrInvalidName)
	}
	for seg := range strings.SplitSeq(cluster, "/") {
		if !segmentRE.MatchString(seg) {
			return fmt.Errorf("cluster path %q: %w", cluster, ErrInvalidName)
		}
	}
	return nil
}

// checkName refuses a file name that is not a plain name of safe
// characters, and the reserved JournalFile.
func checkName(name string) error {
	if !nameRE.MatchString(name) || name == JournalFile {
		return fmt.Errorf("state file name %q: %w", name, ErrInvalidName)
	}
	return nil
}

// slugLen bounds the readable part of a cluster's directory or Secret name.
const slugLen = 36

// Slug returns the name under which a cluster's state is kept: the path
// in lower case with every run of other characters turned into a dash, cut
// to 36 characters, then a dash and 12 hexadecimal digits of the path's
// SHA-256, so paths that read alike ("clusters/prod-a", "clusters/prod_a")
// never share state. The result is a valid DNS-1123 label.
func Slug(cluster string) (string, error) {
	if err := checkCluster(cluster); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(cluster))
	hash := hex.EncodeToString(sum[:])[:12]
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(cluster) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	readable := b.String()
	if len(readable) > slugLen {
		readable = readable[:slugLen]
	}
	readable = strings.Trim(readable, "-")
	if readable == "" {
		return hash, nil
	}
	return readable + "-" + hash, nil
}
