package talos_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// TestApplyLock: machined takes one apply at a time, and refuses applies
// once an apply started a reboot.
func TestApplyLock(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 19)
	w := newWorld(t, talos.Options{ApplyDelay: 300 * time.Millisecond, ShutdownDelay: 1500 * time.Millisecond})

	addr := tc.addrs[tc.cp(1)]
	if err := w.Boot(t.Context(), addr, tc.configs[tc.cp(1)]); err != nil {
		t.Fatal(err)
	}

	waitUp(t, w, addr, talos.ModeRunning)

	c := tc.client(t, addr)
	m := tc.machine(t, tc.cp(1))
	labelled := tc.generate(t, m, []string{"machine:\n  nodeLabels:\n    lab/extra: \"yes\"\n"})
	envChange := tc.generate(t, m, []string{envPatch})

	apply := func(data []byte, mode machine.ApplyConfigurationRequest_Mode) (*machine.ApplyConfigurationResponse, error) {
		return c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: data, Mode: mode})
	}

	t.Run("concurrent", func(t *testing.T) {
		var (
			wg   sync.WaitGroup
			errs [2]error
		)

		for i := range errs {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 100 * time.Millisecond)
				_, errs[i] = apply(labelled, machine.ApplyConfigurationRequest_NO_REBOOT)
			})
		}

		wg.Wait()

		// Whichever came first (on a busy machine the later call may
		// arrive first) went through; the other was refused.
		ok, refused := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case client.StatusCode(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "another apply configuration is already in progress"):
				refused++
			default:
				t.Errorf("apply: %v", err)
			}
		}

		if ok != 1 || refused != 1 {
			t.Errorf("two applies at once: %d went through and %d were refused, want one each: %v", ok, refused, errs)
		}

		// Once the first answered, the next apply goes through.
		if _, err := apply(labelled, machine.ApplyConfigurationRequest_NO_REBOOT); err != nil {
			t.Errorf("apply after the first: %v", err)
		}
	})

	t.Run("while rebooting", func(t *testing.T) {
		before, _ := w.Node(addr)

		resp, err := apply(envChange, machine.ApplyConfigurationRequest_AUTO)
		if err != nil {
			t.Fatal(err)
		}

		if msg := resp.GetMessages()[0]; msg.GetMode() != machine.ApplyConfigurationRequest_REBOOT ||
			!strings.HasPrefix(msg.GetModeDetails(), "Applied configuration with a reboot: this config change can't be applied in immediate mode") {
			t.Errorf("apply answered %q (%s)", msg.GetModeDetails(), msg.GetMode())
		}

		_, err = apply(labelled, machine.ApplyConfigurationRequest_AUTO)
		if client.StatusCode(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "configuration was already applied and node is rebooting") {
			t.Errorf("apply during the reboot: %v", err)
		}

		waitRebooted(t, w, addr, before.Boots)

		// The persisted config is the one booted: applying it is no change.
		// (The client's connection to the instance that went down may
		// answer once more before it reconnects.)
		eventually(t, "a dry run after the reboot", func() error {
			resp, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: envChange, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
			if err != nil {
				return err
			}
			if d := resp.GetMessages()[0].GetModeDetails(); !strings.HasSuffix(d, "No changes.") {
				t.Errorf("config after the reboot: %s", d)
			}

			return nil
		})
	})
}

// TestApplyTalos114: a node running Talos 1.14 applies every change live
// and has no REBOOT mode outside maintenance.
func TestApplyTalos114(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 20)
	w := newWorld(t, talos.Options{})

	const installer = "ghcr.io/siderolabs/installer:v1.14.0-rc.1"

	addr := tc.addrs[tc.cp(1)]
	m := tc.machine(t, tc.cp(1))
	image := "machine:\n  install:\n    image: " + installer + "\n"

	if err := w.Boot(t.Context(), addr, tc.generate(t, m, []string{image})); err != nil {
		t.Fatal(err)
	}

	if st := waitUp(t, w, addr, talos.ModeRunning); st.Version != "v1.14.0-rc.1" {
		t.Fatalf("version %q", st.Version)
	}

	c := tc.client(t, addr)
	envChange := tc.generate(t, m, []string{image, envPatch})

	_, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: envChange, Mode: machine.ApplyConfigurationRequest_REBOOT})
	if client.StatusCode(err) != codes.Unimplemented {
		t.Errorf("REBOOT on 1.14: %v", err)
	}

	before, _ := w.Node(addr)

	resp, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: envChange, Mode: machine.ApplyConfigurationRequest_AUTO})
	if err != nil {
		t.Fatal(err)
	}

	if msg := resp.GetMessages()[0]; msg.GetModeDetails() != "Applied configuration without a reboot" || msg.GetMode() != machine.ApplyConfigurationRequest_NO_REBOOT {
		t.Errorf("AUTO on 1.14 answered %q (%s)", msg.GetModeDetails(), msg.GetMode())
	}

	time.Sleep(100 * time.Millisecond)

	if after, _ := w.Node(addr); after.Boots != before.Boots || !after.Up {
		t.Errorf("AUTO on 1.14 rebooted the node: %+v", after)
	}
}

// TestApplyNeverReboot: with the never-reboot fault a node answers an apply
// that needs a reboot as Talos does but stays up on its old config.
func TestApplyNeverReboot(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 21)
	w := newWorld(t, talos.Options{})

	addr := tc.addrs[tc.cp(1)]
	w.NeverReboot(addr)

	if err := w.Boot(t.Context(), addr, tc.configs[tc.cp(1)]); err != nil {
		t.Fatal(err)
	}

	waitUp(t, w, addr, talos.ModeRunning)

	c := tc.client(t, addr)
	m := tc.machine(t, tc.cp(1))
	envChange := tc.generate(t, m, []string{envPatch})
	before, _ := w.Node(addr)

	resp, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: envChange, Mode: machine.ApplyConfigurationRequest_AUTO})
	if err != nil {
		t.Fatal(err)
	}

	if msg := resp.GetMessages()[0]; msg.GetMode() != machine.ApplyConfigurationRequest_REBOOT || !strings.HasPrefix(msg.GetModeDetails(), "Applied configuration with a reboot") {
		t.Errorf("apply answered %q (%s)", msg.GetModeDetails(), msg.GetMode())
	}

	time.Sleep(200 * time.Millisecond)

	if after, _ := w.Node(addr); after.Boots != before.Boots || !after.Up {
		t.Errorf("the node rebooted: %+v", after)
	}

	_, err = c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: envChange, Mode: machine.ApplyConfigurationRequest_AUTO})
	if client.StatusCode(err) != codes.FailedPrecondition {
		t.Errorf("apply after the stuck reboot: %v", err)
	}
}
