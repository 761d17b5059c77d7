package talos_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// stepsOf returns the names of the recorded sequence steps of the node at
// addr, with their errors.
func stepsOf(w *talos.World, addr netip.Addr) []string {
	var out []string

	for _, s := range w.Steps() {
		if s.Node != addr {
			continue
		}

		if s.Err != "" {
			out = append(out, s.Step+": "+s.Err)
		} else {
			out = append(out, s.Step)
		}
	}

	return out
}

// TestResetSequence: a graceful reset cordons and drains the Node, stops
// the kubelet through its graceful shutdown, leaves etcd, then wipes, in
// Talos's order; a reset that is not graceful only stops the kubelet and
// wipes; a reset that fails after its cleanup leaves the node up, its
// kubelet stopped and its member in etcd.
func TestResetSequence(t *testing.T) {
	t.Parallel()

	hooks := &hookRecorder{}
	tc := newTestCluster(t, 17)
	w := newWorld(t, talos.Options{Hooks: hooks, EtcdRetry: 20 * time.Millisecond})

	cp2, cp3, worker := tc.addrs[tc.cp(2)], tc.addrs[tc.cp(3)], tc.addrs[tc.worker(1)]
	c := tc.bootstrapCluster(t, w)

	eventually(t, "every node to register", func() error {
		for _, m := range tc.machines {
			if st, _ := w.Node(tc.addrs[m.Hostname]); !st.Registered {
				return fmt.Errorf("%s has not registered", m.Hostname)
			}
		}

		return nil
	})

	t.Run("graceful", func(t *testing.T) {
		if err := c.ResetGeneric(client.WithNode(t.Context(), cp3.String()), &machine.ResetRequest{Graceful: true}); err != nil {
			t.Fatal(err)
		}

		eventually(t, "cp3 to power off", func() error {
			if st, _ := w.Node(cp3); st.Mode != talos.ModeOff {
				return fmt.Errorf("cp3 %+v", st)
			}

			return nil
		})

		want := []string{"reset-cordon", "reset-drain", "kubelet-stopped", "etcd-leave", "wipe"}
		if got := stepsOf(w, cp3); !slices.Equal(got, want) {
			t.Errorf("steps %v, want %v", got, want)
		}

		wantCalls := []string{"cordon " + tc.cp(3), "drain " + tc.cp(3), "left " + tc.cp(3) + " shutdown=true"}
		if got := hooks.callsOf(tc.cp(3)); len(got) < 4 || !slices.Equal(got[len(got)-3:], wantCalls) {
			t.Errorf("hook calls %v, want them to end with %v", got, wantCalls)
		}

		// The member went between the kubelet's stop and the wipe.
		var stopped, wiped time.Time

		for _, s := range w.Steps() {
			switch {
			case s.Node == cp3 && s.Step == "kubelet-stopped":
				stopped = s.Time
			case s.Node == cp3 && s.Step == "wipe":
				wiped = s.Time
			}
		}

		removed := false

		for _, s := range w.EtcdHistory(tc.name) {
			if s.Event == "remove" && s.Member == tc.cp(3) {
				removed = !s.Time.Before(stopped) && !s.Time.After(wiped)
			}
		}

		if !removed {
			t.Errorf("no removal of cp3's member between %v and %v: %+v", stopped, wiped, w.EtcdHistory(tc.name))
		}

		checkQuorumHistory(t, w.EtcdHistory(tc.name))
	})

	t.Run("not graceful", func(t *testing.T) {
		if err := c.ResetGeneric(client.WithNode(t.Context(), worker.String()), &machine.ResetRequest{Graceful: false, Reboot: true}); err != nil {
			t.Fatal(err)
		}

		waitUp(t, w, worker, talos.ModeMaintenance)

		if got := stepsOf(w, worker); !slices.Equal(got, []string{"kubelet-stopped", "wipe"}) {
			t.Errorf("steps %v", got)
		}

		if got := hooks.callsOf(tc.worker(1)); slices.Contains(got, "cordon "+tc.worker(1)) || !slices.Contains(got, "left "+tc.worker(1)+" shutdown=true") {
			t.Errorf("hook calls %v", got)
		}
	})

	t.Run("failing after the cleanup", func(t *testing.T) {
		w.FailReset(cp2, 1)
		checkResetFails(t, w, c, tc, cp2, "injected")

		if got := stepsOf(w, cp2); !slices.Equal(got, []string{"reset-cordon", "reset-drain", "kubelet-stopped", "reset-failed: reset failed: injected fault"}) {
			t.Errorf("steps %v", got)
		}

		st, _ := w.Node(cp2)
		if !st.Up || st.Registered || st.EtcdMemberID == 0 {
			t.Errorf("node after the failed reset: %+v, want up, its kubelet stopped, in etcd", st)
		}

		svcs, err := c.ServiceList(client.WithNode(t.Context(), cp2.String()))
		if err != nil {
			t.Fatal(err)
		}

		for _, s := range svcs.GetMessages()[0].GetServices() {
			if s.GetId() == "kubelet" && s.GetState() != "Finished" {
				t.Errorf("kubelet after the failed reset: %s", s.GetState())
			}
		}

		if m, ok := memberAt(w.EtcdMembers(tc.name), cp2); !ok || !m.Started {
			t.Errorf("cp2's member after the failed reset: %+v", m)
		}
	})
}

// TestAPIServing: the cluster's Kubernetes API is served while a control
// plane holds its VIP, and kubelets register only then.
func TestAPIServing(t *testing.T) {
	t.Parallel()

	hooks := &hookRecorder{}
	tc := newTestCluster(t, 18)
	w := newWorld(t, talos.Options{Hooks: hooks})

	cp1, cp2, cp3, worker := tc.addrs[tc.cp(1)], tc.addrs[tc.cp(2)], tc.addrs[tc.cp(3)], tc.addrs[tc.worker(1)]
	tc.bootstrapCluster(t, w)

	eventually(t, "the API to be served", func() error {
		if got := hooks.servingHistory(); !slices.Equal(got, []bool{true}) || !w.APIServing(tc.name) {
			return fmt.Errorf("serving %v", got)
		}

		return nil
	})

	// Two control planes off: etcd loses its majority, nobody holds the
	// VIP and the API is gone.
	for _, a := range []netip.Addr{cp2, cp3} {
		if err := w.PowerOff(a); err != nil {
			t.Fatal(err)
		}
	}

	if w.APIServing(tc.name) {
		t.Error("the API is served without a majority")
	}

	if holder, ok := w.VIPHolder(tc.vip); ok {
		t.Errorf("%s holds the VIP without a majority", holder)
	}

	// A worker that comes up meanwhile does not register.
	before := len(hooks.callsOf(tc.worker(1)))

	if err := w.PowerOff(worker); err != nil {
		t.Fatal(err)
	}

	if err := w.Boot(t.Context(), worker, nil); err != nil {
		t.Fatal(err)
	}

	waitUp(t, w, worker, talos.ModeRunning)
	time.Sleep(100 * time.Millisecond)

	if got := hooks.callsOf(tc.worker(1)); slices.Contains(got[before:], "joined "+tc.worker(1)) {
		t.Errorf("the worker registered without an API: %v", got[before:])
	}

	if err := w.Boot(t.Context(), cp2, nil); err != nil {
		t.Fatal(err)
	}

	eventually(t, "the API and the worker back", func() error {
		if !w.APIServing(tc.name) {
			return fmt.Errorf("not served; serving history %v", hooks.servingHistory())
		}

		if got := hooks.callsOf(tc.worker(1)); !slices.Contains(got[before:], "joined "+tc.worker(1)) {
			return fmt.Errorf("worker calls %v", got[before:])
		}

		return nil
	})

	if got := hooks.servingHistory(); !slices.Equal(got, []bool{true, false, true}) {
		t.Errorf("serving %v", got)
	}

	if holder, _ := w.VIPHolder(tc.vip); holder != cp1 && holder != cp2 {
		t.Errorf("VIP holder %s", holder)
	}
}
