//go:build !unix

package state

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// holdFile fails where flock does not exist: a mutating run is never
// started without its lock.
func holdFile(_ context.Context, _, cluster, _ string, _ bool, _ func() time.Time) (context.Context, func(), error) {
	return nil, nil, fmt.Errorf("locking cluster %q: advisory file locks are not supported on %s", cluster, runtime.GOOS)
}

// LockDataDir fails where flock does not exist: an agent never starts
// without its data directory's lock.
func LockDataDir(dir, _ string) (func(), error) {
	return nil, fmt.Errorf("locking the data directory %s: advisory file locks are not supported on %s", dir, runtime.GOOS)
}
