package retry

import (
	"errors"
	"time"
)

// WaitingError is a run that stopped on something that will change on its
// own, such as a PodDisruptionBudget that blocks a drain or a node that is
// still booting: not a failure, and worth running again after RetryAfter.
type WaitingError struct {
	// Reason says, for a person, what the run waits for.
	Reason string
	// RetryAfter is when another run is worth it; zero lets the caller
	// choose.
	RetryAfter time.Duration
	// Err is the error that stopped the run, if any.
	Err error
}

func (w *WaitingError) Error() string {
	if w.Err != nil {
		return "waiting: " + w.Reason + ": " + w.Err.Error()
	}
	return "waiting: " + w.Reason
}

func (w *WaitingError) Unwrap() error { return w.Err }

// Waiting marks a run that stopped on what will change on its own. It is
// also transient: IsTransient reports true for it.
func Waiting(reason string, after time.Duration, err error) error {
	return &marked{err: &WaitingError{Reason: reason, RetryAfter: after, Err: err}, transient: true}
}

// IsWaiting returns the WaitingError in err's chain, if there is one.
func IsWaiting(err error) (*WaitingError, bool) {
	var w *WaitingError
	if errors.As(err, &w) {
		return w, true
	}
	return nil, false
}
