package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// LockFile is the file of a directory backend (Local, DirStore) that holds
// a cluster's mutation lock while a run holds it: an advisory lock on the
// open file, with a Holder record as its content. It is removed when the
// lock is released; one left behind by a process that died holds nothing.
const LockFile = ".taloscluster.lock"

// ErrLocked is matched by a LockedError: another run holds the cluster's
// mutation lock.
var ErrLocked = errors.New("the cluster is locked by another run")

// ErrLockLost is the cause of a held lock's context when the lock could
// not be kept (a Lease that could not be renewed in time or was taken
// over): the run must stop mutating.
var ErrLockLost = errors.New("the cluster's mutation lock was lost")

// Holder says who holds a cluster's mutation lock.
type Holder struct {
	// Command is what the run does, for example "taloscluster converge".
	Command string `json:"command"`
	// PID is the holding process's id.
	PID int `json:"pid"`
	// Hostname is the host the holding process runs on.
	Hostname string `json:"hostname"`
	// Since is when the lock was taken.
	Since time.Time `json:"since"`
}

// newHolder describes this process running command.
func newHolder(command string, now time.Time) Holder {
	host, _ := os.Hostname()
	if command == "" {
		command = "a mutating run"
	}
	return Holder{Command: oneLine(command), PID: os.Getpid(), Hostname: host, Since: now.UTC().Truncate(time.Second)}
}

// String reads like "taloscluster converge (pid 4242 on build-01)".
func (h Holder) String() string {
	if h.Command == "" && h.PID == 0 {
		return "another run (its holder record is not written yet)"
	}
	where := fmt.Sprintf("pid %d", h.PID)
	if h.Hostname != "" {
		where += " on " + h.Hostname
	}
	return h.Command + " (" + where + ")"
}

func (h Holder) encode() []byte {
	data, _ := json.Marshal(h)
	return append(data, '\n')
}

// decodeHolder reads a holder record; anything unreadable is an unknown
// holder, never an error: the lock itself is what counts.
func decodeHolder(data []byte) Holder {
	var h Holder
	_ = json.Unmarshal(data, &h)
	h.Command, h.Hostname = oneLine(h.Command), oneLine(h.Hostname)
	return h
}

// oneLine keeps a short single line of s, for messages.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if isControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.TrimSpace(s)
}

// LockedError is returned when another run holds the cluster's mutation
// lock. It matches ErrLocked.
type LockedError struct {
	// Cluster names the cluster.
	Cluster string
	// Holder is who holds the lock, as its record says.
	Holder Holder
}

func (e *LockedError) Error() string {
	verb := "converged"
	if strings.Contains(e.Holder.Command, "destroy") {
		verb = "destroyed"
	}
	since := "an unknown time"
	if !e.Holder.Since.IsZero() {
		since = e.Holder.Since.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("cluster %s is being %s by %s since %s", e.Cluster, verb, e.Holder, since)
}

// Is makes a LockedError match ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// lockPolicy paces the tries of a run that waits for a lock.
var lockPolicy = retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}

// acquire calls try until it takes the lock. A LockedError ends it at once
// unless wait is set; then try is called again with backoff until it
// succeeds, fails otherwise, or ctx ends. errRetryNow asks for another try
// without a pause.
func acquire(ctx context.Context, wait bool, try func() error) error {
	var locked *LockedError
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			if locked != nil {
				return fmt.Errorf("%w; stopped waiting: %w", locked, err)
			}
			return err
		}
		err := try()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errRetryNow) && n < 100:
			continue
		case !errors.As(err, &locked) || !wait:
			return err
		}
		if werr := retry.Sleep(ctx, lockPolicy.Backoff(n)); werr != nil {
			return fmt.Errorf("%w; stopped waiting: %w", locked, werr)
		}
	}
}

// errRetryNow is returned by a try that lost a benign race (the lock file
// was replaced, the Lease changed under it) and should be tried again.
var errRetryNow = errors.New("try again")

// DataDirLockFile is the file in an agent's data directory that the agent
// holds an advisory lock on for as long as it runs, with a Holder record
// as its content.
const DataDirLockFile = "agent.lock"

// dataDirLockPatience is how long LockDataDir asks again for a data
// directory's lock that is held before it names the holder.
const dataDirLockPatience = 2 * time.Second

// DataDirInUseError is returned by LockDataDir when another process holds
// the data directory.
type DataDirInUseError struct {
	// Dir is the data directory.
	Dir string
	// Holder is the agent that holds it, as its record says.
	Holder Holder
}

func (e *DataDirInUseError) Error() string {
	since := "an unknown time"
	if !e.Holder.Since.IsZero() {
		since = e.Holder.Since.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("data directory %s is in use by %s since %s: one agent per data directory (run replicas with the kubernetes state backend to run several)",
		e.Dir, e.Holder, since)
}
