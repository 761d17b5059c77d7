package proxmox_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// hungOps counts the requests of op that the lab never answered.
func hungOps(w *world, op string) int {
	n := 0
	for _, o := range w.lab.PVE.Log() {
		if o.Name == op && o.Status == 0 {
			n++
		}
	}
	return n
}

// TestHungProxmoxRequestsDoNotStallConverge hangs one request each of an
// inventory read, a task status poll and a guest agent poll. Each request
// has its own deadline, far below the call's, and a read that got no
// answer is sent again: converge goes on at once instead of waiting for
// the call's two minutes, and the tasks are still waited for.
func TestHungProxmoxRequestsDoNotStallConverge(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "hung", 0)
	hung := []string{"cluster.resources", "task.status", "qemu.agent.interfaces", "cluster.firewall.options.get"}
	for _, op := range hung {
		if err := w.lab.Inject(lab.Fault{Kind: "proxmox-hang", Op: op, N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	start := time.Now()
	if err := w.engine(t, proxmox.WithRequestTimeout(300*time.Millisecond)).Converge(ctx); err != nil {
		t.Fatalf("converge with hung requests: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	for _, op := range hung {
		if n := hungOps(w, op); n != 1 {
			t.Errorf("%s: %d requests went unanswered, want the 1 hung one", op, n)
		}
	}
	if got := len(w.lab.PVE.VMs()); got != 3 {
		t.Errorf("%d VMs, want 3", got)
	}
}

// TestUnansweredReadIsATransientError hangs every try of a read: the call
// fails after a few tries of a request deadline each (proxmox-api-go tries
// some reads three times itself) with an error that says so and that is
// worth another try later.
func TestUnansweredReadIsATransientError(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "mute", 0)
	if err := w.lab.Inject(lab.Fault{Kind: "proxmox-hang", Op: "version.get", N: 100}); err != nil {
		t.Fatal(err)
	}
	c, _, err := spec.Load(w.dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxmox.New(c, os.DirFS(w.dir), nil, proxmox.WithRequestTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = p.Observe(t.Context())
	took := time.Since(start)
	const want = "Proxmox did not answer GET /api2/json/version within 200ms, 3 times"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("observe: %v; want %q", err, want)
	}
	if !retry.IsTransient(err) {
		t.Errorf("%v is not transient", err)
	}
	if took > 15*time.Second {
		t.Errorf("the call took %s", took)
	}
	if n := hungOps(w, "version.get"); n < 3 {
		t.Errorf("%d unanswered version requests, want at least 3", n)
	}
}

// TestCancelledObservationIsAnError cancels an observation while it waits
// for the last VM's guest agent: Observe ends with the cancellation
// instead of taking the unanswered reads that follow (the guest agent,
// each node's ISO list) for "no address yet" and "no ISO", and returning
// an inventory that looks complete.
func TestCancelledObservationIsAnError(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "cancel", 0)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	c, _, err := spec.Load(w.dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxmox.New(c, os.DirFS(w.dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.lab.PVE.SetLatency("qemu.agent.interfaces", 2*time.Second)
	seen := len(w.lab.PVE.Log())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	vms := len(w.lab.PVE.VMs())
	go func() {
		// A VM's guest agent is asked right after its firewall rules; the
		// last VM's is the last read of a VM.
		for {
			rules := 0
			for _, op := range w.lab.PVE.Log()[seen:] {
				if op.Name == "firewall.rules.list" {
					rules++
				}
			}
			if rules == vms {
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	inv, err := p.Observe(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("observe cancelled while it waited for the guest agent: inventory %v, error %v; want the cancellation", inv, err)
	}
}
