// Package retry decides, in one place, whether an error is worth another
// try, and retries the ones that are with a capped, jittered backoff.
//
// An error is transient when it may go away on its own: a peer that did not
// answer, a deadline that ran out, a server that asked to be called later.
// Anything else is terminal: a refused change, bad input, a permission
// error. Code that knows better marks an error explicitly with Transient or
// Terminal; an explicit mark always wins over the classification by type.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// marked is an error with an explicit classification.
type marked struct {
	err       error
	transient bool
}

func (m *marked) Error() string { return m.err.Error() }
func (m *marked) Unwrap() error { return m.err }

// GRPCStatus keeps the wrapped error's gRPC status visible to status.Code.
func (m *marked) GRPCStatus() *status.Status {
	s, _ := status.FromError(m.err)
	return s
}

// Transient marks err as worth retrying. A nil err stays nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, transient: true}
}

// Terminal marks err as final: retrying cannot help. A nil err stays nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, transient: false}
}

// IsTransient reports whether err may go away on its own. The outermost
// explicit mark decides; without one, timeouts, refused or reset
// connections, the gRPC codes Unavailable, DeadlineExceeded, Aborted and
// ResourceExhausted, and the Kubernetes API's timeouts, 429, 503 and 500
// count as transient. A cancelled context is terminal: somebody chose to
// stop.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var m *marked
	if errors.As(err, &m) {
		return m.transient
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.OK && s.Code() != codes.Unknown {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted:
			return true
		}
		return false
	}
	if apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Policy shapes the waits between tries.
type Policy struct {
	// Initial is the first wait; zero means 200ms.
	Initial time.Duration
	// Max caps a wait; zero means 5s.
	Max time.Duration
	// Attempts bounds the tries; zero means until the context ends.
	Attempts int
}

func (p Policy) initial() time.Duration {
	if p.Initial > 0 {
		return p.Initial
	}
	return 200 * time.Millisecond
}

func (p Policy) max() time.Duration {
	if p.Max > 0 {
		return p.Max
	}
	return 5 * time.Second
}

// Backoff returns the wait before try n+1 (n counts from 1): doubling from
// Initial, capped at Max, with up to a fifth of jitter either way.
func (p Policy) Backoff(n int) time.Duration {
	d := p.initial()
	for i := 1; i < n && d < p.max(); i++ {
		d *= 2
	}
	d = min(d, p.max())
	j := time.Duration(rand.Int64N(int64(d)/5 + 1))
	if rand.IntN(2) == 0 {
		return d - j
	}
	return d + j
}

// Do calls f until it succeeds, fails with a terminal error, runs out of
// attempts or ctx ends. The error returned is f's last one, with the
// reason the retries stopped when that is not f's own verdict.
func Do(ctx context.Context, p Policy, f func(context.Context) error) error {
	for n := 1; ; n++ {
		err := f(ctx)
		if err == nil || !IsTransient(err) {
			return err
		}
		if p.Attempts > 0 && n >= p.Attempts {
			return fmt.Errorf("%w (gave up after %d tries)", err, n)
		}
		if werr := Sleep(ctx, p.Backoff(n)); werr != nil {
			return fmt.Errorf("%w (gave up: %w)", err, werr)
		}
	}
}

// Sleep waits for d or until ctx ends, whichever comes first, and returns
// the context's error in the second case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
