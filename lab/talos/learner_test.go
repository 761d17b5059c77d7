package talos_test

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// memberAt returns the member of the node at addr.
func memberAt(members []talos.Member, addr netip.Addr) (talos.Member, bool) {
	for _, m := range members {
		if m.Addr == addr {
			return m, true
		}
	}

	return talos.Member{}, false
}

// checkQuorumHistory checks that etcd kept a majority of started voters at
// every moment of the history since it first had one.
func checkQuorumHistory(t *testing.T, history []talos.EtcdSnapshot) {
	t.Helper()

	for i, s := range history {
		if !s.Quorum() {
			t.Errorf("history entry %d (%s %s) without a majority: voters %v, started %v", i, s.Event, s.Member, s.Voters, s.StartedVoters)
		}
	}
}

// TestEtcdLearners: control planes join etcd as learners, one at a time,
// without a name until their etcd starts, and are promoted by their node;
// a learner refuses calls through itself, reports its etcd unhealthy and
// never holds the VIP.
func TestEtcdLearners(t *testing.T) {
	t.Parallel()

	// Long enough for the checks made while a learner exists, on a busy
	// machine and under the race detector.
	const promote = 2 * time.Second

	tc := newTestCluster(t, 16)
	w := newWorld(t, talos.Options{EtcdStartDelay: 150 * time.Millisecond, LearnerPromoteDelay: promote})

	cp1, cp2, cp3 := tc.addrs[tc.cp(1)], tc.addrs[tc.cp(2)], tc.addrs[tc.cp(3)]

	tc.bootAll(t, w)
	waitUp(t, w, cp1, talos.ModeRunning)

	c := tc.client(t, cp1)
	if err := c.Bootstrap(t.Context(), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	// The first to join is a learner without a name.
	var learner netip.Addr

	eventually(t, "a learner", func() error {
		for _, m := range w.EtcdMembers(tc.name) {
			if m.Learner {
				learner = m.Addr

				return nil
			}
		}

		return errors.New("no learner")
	})

	other := cp2
	if learner == cp2 {
		other = cp3
	}

	resp, err := c.EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}

	var listed []string
	for _, m := range resp.GetMessages()[0].GetMembers() {
		listed = append(listed, fmt.Sprintf("%q learner=%t", m.GetHostname(), m.GetIsLearner()))
	}

	if !slices.Contains(listed, `"" learner=true`) {
		t.Errorf("members before the learner started: %v, want a learner without a name", listed)
	}

	eventually(t, "the learner's etcd to start", func() error {
		if m, ok := memberAt(w.EtcdMembers(tc.name), learner); !ok || !m.Started || m.Hostname == "" {
			return fmt.Errorf("learner %+v", m)
		}

		return nil
	})

	t.Run("a learner meanwhile", func(t *testing.T) {
		m, _ := memberAt(w.EtcdMembers(tc.name), learner)
		if !m.Learner {
			t.Skip("promoted already")
		}

		cl := tc.client(t, learner)

		_, err := cl.EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{QueryLocal: true})
		if err == nil || !strings.Contains(err.Error(), "rpc not supported for learner") {
			t.Errorf("member list on the learner itself: %v", err)
		}

		if _, err := cl.EtcdStatus(t.Context()); err != nil {
			t.Errorf("status on the learner: %v", err)
		}

		svcs, err := cl.ServiceList(t.Context())
		if err != nil {
			t.Fatal(err)
		}

		for _, s := range svcs.GetMessages()[0].GetServices() {
			if s.GetId() == "etcd" && (s.GetState() != "Running" || s.GetHealth().GetHealthy()) {
				t.Errorf("etcd of a learner is %s, healthy %t", s.GetState(), s.GetHealth().GetHealthy())
			}
		}

		if holder, _ := w.VIPHolder(tc.vip); holder != cp1 {
			t.Errorf("VIP holder %s, want the only voter %s", holder, cp1)
		}

		//lint:ignore SA1019 the MachineService upgrade checks etcd first
		_, err = c.Upgrade(t.Context(), "factory.talos.dev/installer/0123456789abcdef:v1.13.9", false, false)
		if err == nil {
			t.Error("an upgrade was accepted while etcd has a learner")
		}

		// One learner at a time: the other control plane waits. One look
		// at the members, as the learner may be promoted by now (the calls
		// above take a while on a busy machine).
		members := w.EtcdMembers(tc.name)
		if l, _ := memberAt(members, learner); l.Learner {
			if _, ok := memberAt(members, other); ok {
				t.Errorf("%s joined while %s is a learner: %+v", other, learner, members)
			}
		}
	})

	eventually(t, "three voters", func() error {
		if got := startedMembers(w.EtcdMembers(tc.name)); got != 3 {
			return fmt.Errorf("%d started voters: %+v", got, w.EtcdMembers(tc.name))
		}

		return nil
	})

	checkHealthy(t, c, []netip.Addr{cp1, cp2, cp3}, []netip.Addr{tc.addrs[tc.worker(1)]})

	t.Run("history", func(t *testing.T) {
		history := w.EtcdHistory(tc.name)

		var events []string
		for _, s := range history {
			events = append(events, s.Event+" "+s.Member)
		}

		want := []string{
			"bootstrap " + tc.cp(1),
			"add-learner " + tc.hostAt(learner),
			"start " + tc.hostAt(learner),
			"promote " + tc.hostAt(learner),
			"add-learner " + tc.hostAt(other),
			"start " + tc.hostAt(other),
			"promote " + tc.hostAt(other),
		}
		if !slices.Equal(events, want) {
			t.Errorf("history %v, want %v", events, want)
		}

		checkQuorumHistory(t, history)

		if last := history[len(history)-1]; len(last.Voters) != 3 || len(last.StartedVoters) != 3 || len(last.Learners) != 0 {
			t.Errorf("last entry %+v", last)
		}
	})

	t.Run("a learner that rebooted stays a learner", func(t *testing.T) {
		// cp3 leaves, and joins again as a learner; it reboots before its
		// promotion, and Talos does not try again in the next boot.
		c3 := tc.client(t, cp3)
		if err := c3.EtcdLeaveCluster(t.Context(), &machine.EtcdLeaveClusterRequest{}); err != nil {
			t.Fatal(err)
		}

		st, _ := w.Node(cp3)
		if err := w.PowerOff(cp3); err != nil {
			t.Fatal(err)
		}

		if err := w.Boot(t.Context(), cp3, nil); err != nil {
			t.Fatal(err)
		}

		waitRebooted(t, w, cp3, st.Boots)

		eventually(t, "cp3 to start as a learner", func() error {
			if m, ok := memberAt(w.EtcdMembers(tc.name), cp3); !ok || !m.Learner || !m.Started {
				return fmt.Errorf("cp3 %+v", m)
			}

			return nil
		})

		st, _ = w.Node(cp3)
		if err := c.Reboot(client.WithNode(t.Context(), cp3.String())); err != nil {
			t.Fatal(err)
		}

		waitRebooted(t, w, cp3, st.Boots)
		time.Sleep(3 * promote)

		if m, ok := memberAt(w.EtcdMembers(tc.name), cp3); !ok || !m.Learner || !m.Started {
			t.Errorf("cp3 after its reboot: %+v, want a started learner", m)
		}
	})
}

// hostAt returns the hostname of the machine at addr.
func (tc *testCluster) hostAt(addr netip.Addr) string {
	for h, a := range tc.addrs {
		if a == addr {
			return h
		}
	}

	return ""
}
