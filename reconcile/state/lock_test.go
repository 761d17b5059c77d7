package state_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/taloscluster/taloscluster/reconcile/state"
)

// locker is what the engine asks of a state backend that can lock
// (reconcile.Locker).
type locker interface {
	Lock(ctx context.Context, cluster, holder string, wait bool) (context.Context, func(), error)
}

// lockers opens handles on one lock, as separate runs would have.
type lockerCase struct {
	name string
	// setup returns a function that opens a new handle, and the path of
	// the lock file for the directory backends.
	setup func(t *testing.T) (open func() locker, file string)
}

func lockers() []lockerCase {
	return []lockerCase{
		{"local", func(t *testing.T) (func() locker, string) {
			dir := t.TempDir()
			return func() locker { return state.Local{Dir: dir} }, filepath.Join(dir, state.LockFile)
		}},
		{"dir", func(t *testing.T) (func() locker, string) {
			root := t.TempDir()
			d, err := state.NewDirStore(root).Dir(prodA)
			if err != nil {
				t.Fatal(err)
			}
			return func() locker { return state.NewDirStore(root) }, filepath.Join(d, state.LockFile)
		}},
		{"kube", func(t *testing.T) (func() locker, string) {
			api := newSecretsAPI(t)
			return func() locker { return newKubeStore(t, api) }, ""
		}},
	}
}

// lockedRE is the message of a LockedError for a converge of this process.
func lockedRE(t *testing.T, cluster string) *regexp.Regexp {
	t.Helper()
	host, _ := os.Hostname()
	return regexp.MustCompile("^cluster " + regexp.QuoteMeta(cluster) + " is being converged by taloscluster converge \\(pid " +
		strconv.Itoa(os.Getpid()) + " on " + regexp.QuoteMeta(host) + "\\) since \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ$")
}

func TestLockExcludesASecondRun(t *testing.T) {
	t.Parallel()
	for _, lc := range lockers() {
		t.Run(lc.name, func(t *testing.T) {
			t.Parallel()
			open, file := lc.setup(t)
			ctx := t.Context()
			held, release, err := open().Lock(ctx, prodA, "taloscluster converge", false)
			if err != nil {
				t.Fatal(err)
			}
			if held.Err() != nil {
				t.Fatal("the held context ended at once")
			}
			if file != "" {
				data, err := os.ReadFile(file)
				if err != nil || !strings.Contains(string(data), fmt.Sprintf(`"pid":%d`, os.Getpid())) {
					t.Fatalf("lock file %s: %q, %v; want the holder record", file, data, err)
				}
			}
			_, _, err = open().Lock(ctx, prodA, "taloscluster destroy", false)
			var locked *state.LockedError
			if !errors.As(err, &locked) || !errors.Is(err, state.ErrLocked) {
				t.Fatalf("second lock: %v; want a LockedError", err)
			}
			if cluster := locked.Cluster; cluster == "" {
				t.Errorf("the LockedError names no cluster")
			}
			locked.Cluster = "alpha"
			if re := lockedRE(t, "alpha"); !re.MatchString(locked.Error()) {
				t.Errorf("message %q does not match %s", locked.Error(), re)
			}
			release()
			release() // twice is harmless
			if held.Err() == nil {
				t.Error("release did not end the held context")
			}
			if file != "" {
				if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the lock file is still there after release: %v", err)
				}
			}
			_, release2, err := open().Lock(ctx, prodA, "taloscluster destroy", false)
			if err != nil {
				t.Fatalf("lock after release: %v", err)
			}
			release2()
		})
	}
}

func TestLockWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	for _, lc := range lockers() {
		t.Run(lc.name, func(t *testing.T) {
			t.Parallel()
			open, _ := lc.setup(t)
			ctx := t.Context()
			_, release, err := open().Lock(ctx, prodA, "taloscluster converge", false)
			if err != nil {
				t.Fatal(err)
			}
			// Waiting is bounded by the context (long enough for a first
			// read of the Lease on a busy machine).
			short, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, _, err = open().Lock(short, prodA, "taloscluster converge", true)
			if !errors.Is(err, state.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("wait with a deadline: %v; want the holder and the deadline", err)
			}
			releasedAt := make(chan time.Time, 1)
			go func() {
				time.Sleep(300 * time.Millisecond)
				releasedAt <- time.Now()
				release()
			}()
			_, release2, err := open().Lock(ctx, prodA, "taloscluster converge", true)
			if err != nil {
				t.Fatalf("waiting lock: %v", err)
			}
			defer release2()
			if at := <-releasedAt; time.Now().Before(at) {
				t.Fatal("the waiting run got the lock before the holder released it")
			}
		})
	}
}

// TestDirLockDiesWithItsProcess takes the lock in another process, then
// kills it: the kernel drops the lock and the next run takes it.
func TestDirLockDiesWithItsProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), "STATE_LOCK_HELPER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	_, _, err = state.Local{Dir: dir}.Lock(t.Context(), "alpha", "taloscluster converge", false)
	var locked *state.LockedError
	if !errors.As(err, &locked) || locked.Holder.PID != cmd.Process.Pid || locked.Holder.Command != "taloscluster converge --helper" {
		t.Fatalf("lock held by the helper: %v (%+v); want a LockedError naming pid %d", err, locked, cmd.Process.Pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	_, release, err := state.Local{Dir: dir}.Lock(t.Context(), "alpha", "taloscluster converge", false)
	if err != nil {
		t.Fatalf("lock after the holder died: %v", err)
	}
	release()
}

// TestLockHelperProcess is the other process of TestDirLockDiesWithItsProcess.
func TestLockHelperProcess(t *testing.T) {
	dir := os.Getenv("STATE_LOCK_HELPER_DIR")
	if dir == "" {
		t.Skip("run by TestDirLockDiesWithItsProcess")
	}
	if _, _, err := (state.Local{Dir: dir}).Lock(context.Background(), "alpha", "taloscluster converge --helper", false); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute)
	os.Exit(0)
}

func newLeaseStore(t *testing.T, api *secretsAPI, d time.Duration) *state.KubeStore {
	t.Helper()
	s, err := state.NewKubeStore(api.client(t), state.KubeOptions{Namespace: namespace, LeaseDuration: d})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func leaseName(t *testing.T) string {
	t.Helper()
	name, err := state.LeaseName(prodA)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func TestLeaseShapeRenewalAndRelease(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s := newLeaseStore(t, api, time.Second)
	held, release, err := s.Lock(t.Context(), prodA, "agent converge", false)
	if err != nil {
		t.Fatal(err)
	}
	l := api.lease(namespace, leaseName(t))
	if l == nil {
		t.Fatal("no Lease")
	}
	if l.Annotations[state.ClusterAnnotation] != prodA || !strings.Contains(l.Annotations[state.HolderAnnotation], `"command":"agent converge"`) {
		t.Errorf("annotations %v", l.Annotations)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 1 {
		t.Errorf("spec %+v", l.Spec)
	}
	first := l.Spec.RenewTime.Time
	time.Sleep(1500 * time.Millisecond) // longer than the lease: only renewals keep it
	if held.Err() != nil {
		t.Fatalf("the run was stopped: %v", context.Cause(held))
	}
	l = api.lease(namespace, leaseName(t))
	if !l.Spec.RenewTime.After(first) || time.Since(l.Spec.RenewTime.Time) > time.Second {
		t.Errorf("renewTime %v (first %v): not renewed", l.Spec.RenewTime, first)
	}
	release()
	if api.lease(namespace, leaseName(t)) != nil {
		t.Error("the Lease is still there after release")
	}
}

// TestLeaseLostStopsTheRun makes every renewal fail: the run's context
// ends with ErrLockLost before the Lease expires, so no other run can
// start while this one still mutates.
func TestLeaseLostStopsTheRun(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	const d = 3 * time.Second
	s := newLeaseStore(t, api, d)
	held, release, err := s.Lock(t.Context(), prodA, "agent converge", false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	acquired := api.lease(namespace, leaseName(t)).Spec.RenewTime.Time
	codes := make([]int, 200)
	for i := range codes {
		codes[i] = http.StatusServiceUnavailable
	}
	api.failLeases(http.MethodPut, codes...)
	select {
	case <-held.Done():
	case <-time.After(2 * d):
		t.Fatal("the run was not stopped when the Lease could not be renewed")
	}
	stopped := time.Now()
	if cause := context.Cause(held); !errors.Is(cause, state.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if l := api.lease(namespace, leaseName(t)); !l.Spec.RenewTime.Time.Equal(acquired) {
		t.Fatalf("the Lease was renewed (%v) despite the faults", l.Spec.RenewTime)
	}
	if expiry := acquired.Add(d); !stopped.Before(expiry) {
		t.Fatalf("the run stopped at %v, after the Lease expired at %v", stopped, expiry)
	}
}

func TestLeaseTakenOverStopsTheRun(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s := newLeaseStore(t, api, 3*time.Second)
	held, release, err := s.Lock(t.Context(), prodA, "agent converge", false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	l := api.lease(namespace, leaseName(t))
	other := "someone-else"
	l.Spec.HolderIdentity = &other
	api.putLease(l)
	select {
	case <-held.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the run was not stopped when its Lease was taken")
	}
	if cause := context.Cause(held); !errors.Is(cause, state.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	release()
	if l := api.lease(namespace, leaseName(t)); l == nil || *l.Spec.HolderIdentity != other {
		t.Fatal("release deleted a Lease that another run holds")
	}
}

func TestLeaseOfAnotherHolder(t *testing.T) {
	t.Parallel()
	for _, expired := range []bool{false, true} {
		t.Run(fmt.Sprintf("expired=%v", expired), func(t *testing.T) {
			t.Parallel()
			api := newSecretsAPI(t)
			s := newLeaseStore(t, api, 0)
			renewed := time.Now().Add(-5 * time.Second)
			if expired {
				renewed = time.Now().Add(-time.Hour)
			}
			since := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
			identity, secs := "build-01_4242_abc", int32(30)
			api.putLease(&coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: leaseName(t), Namespace: namespace, Annotations: map[string]string{
					state.ClusterAnnotation: prodA,
					state.HolderAnnotation:  fmt.Sprintf(`{"command":"agent destroy","pid":4242,"hostname":"build-01","since":%q}`, since.Format(time.RFC3339)),
				}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &identity, LeaseDurationSeconds: &secs,
					AcquireTime: &metav1.MicroTime{Time: renewed}, RenewTime: &metav1.MicroTime{Time: renewed}},
			})
			_, release, err := s.Lock(t.Context(), prodA, "agent converge", false)
			if !expired {
				want := "cluster " + prodA + " is being destroyed by agent destroy (pid 4242 on build-01) since 2030-01-02T03:04:05Z"
				if err == nil || err.Error() != want {
					t.Fatalf("lock of a held Lease: %v; want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("lock of an expired Lease: %v", err)
			}
			defer release()
			l := api.lease(namespace, leaseName(t))
			if *l.Spec.HolderIdentity == identity || l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions != 1 {
				t.Fatalf("expired Lease not taken over: %+v", l.Spec)
			}
		})
	}
}
