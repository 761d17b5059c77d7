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
