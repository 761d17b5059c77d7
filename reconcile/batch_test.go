package reconcile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// TestWorstOfABatch: the outcome of a batch is its worst machine's, so
// that a terminal failure is never retried because another machine of the
// same batch waits on a PodDisruptionBudget.
func TestWorstOfABatch(t *testing.T) {
	t.Parallel()
	waiting := retry.Waiting("a PodDisruptionBudget blocks the drain of w1", time.Minute, errors.New("blocked"))
	transient := retry.Transient(errors.New("the Talos API of w2 did not answer"))
	failed := retry.Terminal(errors.New("w3 came back running Talos v1.13.8, not v1.13.9"))
	for _, tc := range []struct {
		name string
		errs []error
		want Outcome
	}{
		{"none", []error{nil, nil}, Succeeded},
		{"a wait", []error{nil, waiting}, Waiting},
		{"a wait and a failure", []error{waiting, failed}, Failed},
		{"a failure and a wait", []error{failed, waiting}, Failed},
		{"a wait and a transient error", []error{waiting, transient}, Transient},
		{"all three", []error{transient, waiting, failed}, Failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := worst(tc.errs)
			if got := Settle(err).Outcome; got != tc.want {
				t.Fatalf("outcome %s, want %s (%v)", got, tc.want, err)
			}
			for _, e := range tc.errs {
				if e != nil && !strings.Contains(err.Error(), e.Error()) {
					t.Errorf("the batch's error %q does not name %q", err, e)
				}
			}
		})
	}
}
