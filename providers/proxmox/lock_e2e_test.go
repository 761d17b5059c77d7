package proxmox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// Every state backend the CLI and the agent use can lock.
var (
	_ reconcile.Locker = state.Local{}
	_ reconcile.Locker = (*state.DirStore)(nil)
	_ reconcile.Locker = (*state.KubeStore)(nil)
)

// vmsByName counts the lab's VMs per name and MAC.
func vmsByName(w *world) (map[string]int, map[string]int) {
	names, macs := map[string]int{}, map[string]int{}
	for _, v := range w.lab.PVE.VMs() {
		names[v.Name]++
		for _, m := range v.MACs {
			macs[m]++
		}
	}
	return names, macs
}

// TestConcurrentConvergesOfOneCluster runs a second converge of the same
// cluster while the first holds it, after the first has planned and
// before its first mutation. Without waiting the second fails at once,
// naming the first; with --wait it runs after the first and finds nothing
// to do. Either way every machine has exactly one VM.
func TestConcurrentConvergesOfOneCluster(t *testing.T) {
	t.Parallel()
	for _, wait := range []bool{false, true} {
		name := "lockfail"
		if wait {
			name = "lockwait"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, name, 1)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			first, second := w.engine(t), w.engine(t)
			first.Holder = "taloscluster converge"
			second.Holder, second.WaitLock = "taloscluster converge", wait
			var secondOut strings.Builder
			second.Progress = &secondOut
			secondDone := make(chan error, 1)
			first.Approve = func(*plan.Plan) error {
				go func() { secondDone <- second.Converge(ctx) }()
				if !wait {
					// The second run must give up on its own while the
					// first holds the cluster.
					select {
					case err := <-secondDone:
						secondDone <- err
					case <-time.After(30 * time.Second):
						return errors.New("the second converge did not give up while the first held the cluster")
					}
				} else {
					time.Sleep(300 * time.Millisecond) // let it start waiting
				}
				return nil
			}
			if err := first.Converge(ctx); err != nil {
				t.Fatalf("first converge: %v", err)
			}
			err := <-secondDone
			if wait {
				if err != nil {
					t.Fatalf("second converge with wait: %v", err)
				}
				if !regexp.MustCompile(`cluster lockwait is being converged by taloscluster converge \(pid \d+.*\) since \S+: waiting`).MatchString(secondOut.String()) ||
					!strings.Contains(secondOut.String(), "no changes") {
					t.Errorf("the waiting run did not say whom it waited for, or found changes:\n%s", secondOut.String())
				}
			} else {
				var locked *state.LockedError
				if !errors.As(err, &locked) {
					t.Fatalf("second converge: %v; want a LockedError", err)
				}
				re := regexp.MustCompile(`^cluster lockfail is being converged by taloscluster converge \(pid \d+ on .*\) since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)
				if !re.MatchString(err.Error()) {
					t.Errorf("message %q does not match %s", err, re)
				}
			}
			names, macs := vmsByName(w)
			if len(names) != 4 {
				t.Errorf("VMs %v, want the 4 machines", names)
			}
			for n, c := range names {
				if c != 1 {
					t.Errorf("%s exists %d times", n, c)
				}
			}
			for m, c := range macs {
				if c != 1 {
					t.Errorf("MAC %s is on %d VMs", m, c)
				}
			}
		})
	}
}

// losingLocker is a Locker whose lock the test takes away, as a Lease that
// could not be renewed is.
type losingLocker struct {
	state.Local
	lose chan context.CancelCauseFunc
}

func (l losingLocker) Lock(ctx context.Context, _, _ string, _ bool) (context.Context, func(), error) {
	held, cancel := context.WithCancelCause(ctx)
	l.lose <- cancel
	return held, func() { cancel(nil) }, nil
}

// TestLostLockStopsConverge takes the lock away while a VM is being
// created: converge stops with ErrLockLost and sends no mutating request
// after that. (The create already sent may still take effect, as it would
// on a real Proxmox; the next run finds it by looking it up.)
func TestLostLockStopsConverge(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "lost", 0)
	w.lab.PVE.SetLatency("qemu.create", 2*time.Second)
	e := w.engine(t)
	lk := losingLocker{Local: state.Local{Dir: w.dir}, lose: make(chan context.CancelCauseFunc, 1)}
	e.State = lk
	lostAt := make(chan time.Time, 1)
	e.Approve = func(*plan.Plan) error {
		var lose context.CancelCauseFunc
		select {
		case lose = <-lk.lose:
		default:
			return errors.New("converge did not take the cluster's lock before its first mutation")
		}
		time.AfterFunc(500*time.Millisecond, func() {
			lostAt <- time.Now()
			lose(fmt.Errorf("%w: renewals failed (test)", state.ErrLockLost))
		})
		return nil
	}
	err := e.Converge(t.Context())
	if !errors.Is(err, state.ErrLockLost) {
		t.Fatalf("converge that lost its lock: %v; want ErrLockLost", err)
	}
	lost := <-lostAt
	time.Sleep(2500 * time.Millisecond) // past the slowed create
	creates := 0
	for _, op := range w.lab.PVE.Log() {
		if op.Name == "qemu.create" {
			creates++
		}
		// A request sent just before the loss may arrive a moment later.
		if op.Method != http.MethodGet && op.Time.After(lost.Add(100*time.Millisecond)) {
			t.Errorf("%s %s sent %s after the lock was lost", op.Method, op.Path, op.Time.Sub(lost).Round(time.Millisecond))
		}
	}
	if creates > 1 {
		t.Errorf("%d VM creates; the run went on after losing its lock", creates)
	}
}
