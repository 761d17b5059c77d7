package talos_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// TestDestroyedControlPlane follows a control plane whose VM is deleted and
// rebuilt: the machine's member stays in etcd until the new machine of the
// same hostname joins and, as Talos does, replaces it.
func TestDestroyedControlPlane(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 10)
	w := newWorld(t, talos.Options{})

	tc.bootstrapCluster(t, w)

	cp3 := tc.addrs[tc.cp(3)]

	memberAt := func() (talos.Member, bool) {
		for _, m := range w.EtcdMembers(tc.name) {
			if m.Addr == cp3 {
				return m, true
			}
		}

		return talos.Member{}, false
	}

	old, ok := memberAt()
	if !ok {
		t.Fatal("cp3 is not a member")
	}

	if err := w.Destroy(cp3); err != nil {
		t.Fatal(err)
	}

	t.Run("the machine is gone", func(t *testing.T) {
		if _, ok := w.Node(cp3); ok {
			t.Error("a destroyed node is still known")
		}
	})

	t.Run("its member stays", func(t *testing.T) {
		members := w.EtcdMembers(tc.name)
		if len(members) != 3 || startedMembers(members) != 2 {
			t.Fatalf("members after the deletion: %+v", members)
		}

		if m, ok := memberAt(); !ok || m.ID != old.ID || m.Started {
			t.Errorf("the deleted machine's member is %+v", m)
		}
	})

	t.Run("a new machine of the same name replaces it", func(t *testing.T) {
		if err := w.Boot(t.Context(), cp3, tc.configs[tc.cp(3)]); err != nil {
			t.Fatal(err)
		}

		if st := waitUp(t, w, cp3, talos.ModeRunning); st.Boots != 1 {
			t.Errorf("the new machine booted %d times", st.Boots)
		}

		eventually(t, "the new machine to join etcd", func() error {
			members := w.EtcdMembers(tc.name)
			if len(members) != 3 || startedMembers(members) != 3 {
				return fmt.Errorf("members %+v", members)
			}

			return nil
		})

		members := w.EtcdMembers(tc.name)
		if slices.ContainsFunc(members, func(m talos.Member) bool { return m.ID == old.ID }) {
			t.Errorf("the deleted machine's member is still there: %+v", members)
		}

		if m, _ := memberAt(); m.Hostname != tc.cp(3) {
			t.Errorf("the new member is %+v", m)
		}
	})
}
