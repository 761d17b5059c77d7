package talos_test

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// getConfig reads a node's machine config over COSI the way production
// does: through one endpoint, with the node in the "node" metadata.
func getConfig(ctx context.Context, c *client.Client, node netip.Addr, id resource.ID) (*configres.MachineConfig, error) {
	return safe.StateGetByID[*configres.MachineConfig](client.WithNode(ctx, node.String()), c.COSI, id)
}

// checkConfig checks that the resource holds want, byte for byte and as a
// parsed config, with the metadata machined gives it.
func checkConfig(t *testing.T, mc *configres.MachineConfig, id resource.ID, want []byte, version string) {
	t.Helper()

	got, err := mc.Provider().Bytes()
	if err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(got, want) {
		t.Errorf("%s: config bytes differ from the ones the node received:\n%s", id, got)
	}

	gotEnc, err := mc.Provider().EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	wantCfg, err := configloader.NewFromBytes(want)
	if err != nil {
		t.Fatal(err)
	}

	wantEnc, err := wantCfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(gotEnc, wantEnc) {
		t.Errorf("%s: the config encodes differently from the one the node received", id)
	}

	md := mc.Metadata()
	if md.Namespace() != configres.NamespaceName || md.Type() != configres.MachineConfigType || md.ID() != id ||
		md.Version().String() != version || md.Phase() != resource.PhaseRunning || md.Owner() != "" {
		t.Errorf("metadata %s: version %s, phase %s, owner %q; want %s version %s, running, no owner",
			md, md.Version(), md.Phase(), md.Owner(), id, version)
	}

	if md.Created().IsZero() || md.Updated().Before(md.Created()) || time.Since(md.Created()) > time.Minute {
		t.Errorf("metadata %s: created %s, updated %s", md, md.Created(), md.Updated())
	}

	if v, ok := md.Annotations().Get("talos.dev/yaml-spec"); !ok || v != "1" {
		t.Errorf("metadata %s: annotations %v", md, md.Annotations().Raw())
	}
}

// TestCOSIMachineConfig reads the running and the persistent machine
// config over the COSI State API with the machinery client, as production
// does on Talos 1.13, where STATE is not readable as a file.
func TestCOSIMachineConfig(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 12)
	w := newWorld(t, talos.Options{})

	cp1, worker := tc.addrs[tc.cp(1)], tc.addrs[tc.worker(1)]
	maint := netip.MustParseAddr("127.77.12.30")

	for _, host := range []string{tc.cp(1), tc.worker(1)} {
		if err := w.Boot(t.Context(), tc.addrs[host], tc.configs[host]); err != nil {
			t.Fatal(err)
		}
	}

	if err := w.Boot(t.Context(), maint, nil); err != nil {
		t.Fatal(err)
	}

	waitUp(t, w, cp1, talos.ModeRunning)
	waitUp(t, w, worker, talos.ModeRunning)
	waitUp(t, w, maint, talos.ModeMaintenance)

	c := tc.client(t, cp1)

	t.Run("booted config", func(t *testing.T) {
		for _, host := range []string{tc.cp(1), tc.worker(1)} {
			mc, err := getConfig(t.Context(), c, tc.addrs[host], configres.ActiveID)
			if err != nil {
				t.Fatalf("%s: %v", host, err)
			}

			checkConfig(t, mc, configres.ActiveID, tc.configs[host], "1")
		}

		// Without node metadata, the endpoint answers for itself.
		mc, err := safe.StateGetByID[*configres.MachineConfig](t.Context(), c.COSI, configres.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		checkConfig(t, mc, configres.ActiveID, tc.configs[tc.cp(1)], "1")

		// Booted from its disk: nothing was persisted in this boot.
		if _, err := getConfig(t.Context(), c, worker, configres.PersistentID); !state.IsNotFoundError(err) {
			t.Errorf("persistent config after a boot from disk: %v, want NotFound", err)
		}

		var proxied bool

		for _, op := range w.Log() {
			if op.Call == "/cosi.resource.State/Get" && op.Node == worker && op.Endpoint == cp1 && op.Code == codes.OK {
				proxied = true
			}
		}

		if !proxied {
			t.Error("the proxied Get is not in the operation log")
		}
	})

	live := tc.generate(t, tc.machine(t, tc.worker(1)), []string{"machine:\n  nodeLabels:\n    lab/cosi: live\n"})
	staged := tc.generate(t, tc.machine(t, tc.worker(1)), []string{"machine:\n  nodeLabels:\n    lab/cosi: staged\n"})

	t.Run("after apply", func(t *testing.T) {
		apply(t, c, worker, live, machine.ApplyConfigurationRequest_NO_REBOOT)

		mc, err := getConfig(t.Context(), c, worker, configres.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		checkConfig(t, mc, configres.ActiveID, live, "2")

		if mc.Config().Machine().NodeLabels()["lab/cosi"] != "live" {
			t.Errorf("labels %v", mc.Config().Machine().NodeLabels())
		}

		mc, err = getConfig(t.Context(), c, worker, configres.PersistentID)
		if err != nil {
			t.Fatal(err)
		}

		checkConfig(t, mc, configres.PersistentID, live, "1")
	})

	t.Run("after a staged apply", func(t *testing.T) {
		apply(t, c, worker, staged, machine.ApplyConfigurationRequest_STAGED)

		mc, err := getConfig(t.Context(), c, worker, configres.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		checkConfig(t, mc, configres.ActiveID, live, "2")

		mc, err = getConfig(t.Context(), c, worker, configres.PersistentID)
		if err != nil {
			t.Fatal(err)
		}

		checkConfig(t, mc, configres.PersistentID, staged, "2")
	})

	t.Run("after a reboot", func(t *testing.T) {
		before, _ := w.Node(worker)

		if err := c.Reboot(client.WithNode(t.Context(), worker.String())); err != nil {
			t.Fatal(err)
		}

		waitRebooted(t, w, worker, before.Boots)

		var mc *configres.MachineConfig

		eventually(t, "the config of the rebooted worker", func() error {
			var err error

			mc, err = getConfig(t.Context(), c, worker, configres.ActiveID)

			return err
		})

		checkConfig(t, mc, configres.ActiveID, staged, "1")

		if _, err := getConfig(t.Context(), c, worker, configres.PersistentID); !state.IsNotFoundError(err) {
			t.Errorf("persistent config after a reboot: %v, want NotFound", err)
		}
	})

	t.Run("not found", func(t *testing.T) {
		_, err := getConfig(t.Context(), c, worker, "v1alpha2")
		if !state.IsNotFoundError(err) ||
			!strings.Contains(err.Error(), "resource MachineConfigs.config.talos.dev(config/v1alpha2@undefined) doesn't exist") {
			t.Fatalf("unknown id: %v, want NotFound", err)
		}

		// A registered namespace without the resource.
		_, err = c.COSI.Get(client.WithNode(t.Context(), worker.String()),
			resource.NewMetadata("runtime", configres.MachineConfigType, configres.ActiveID, resource.VersionUndefined))
		if !state.IsNotFoundError(err) {
			t.Errorf("machine config in namespace runtime: %v, want NotFound", err)
		}
	})

	t.Run("access policy", func(t *testing.T) {
		_, err := c.COSI.Get(client.WithNode(t.Context(), worker.String()),
			resource.NewMetadata("bogus", configres.MachineConfigType, configres.ActiveID, resource.VersionUndefined))
		if client.StatusCode(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `namespace "bogus" is not supported`) {
			t.Errorf("unregistered namespace: %v, want PermissionDenied", err)
		}

		for _, r := range []role.Role{role.Reader, role.Operator} {
			_, err := getConfig(t.Context(), tc.client(t, cp1, r), worker, configres.ActiveID)
			if client.StatusCode(err) != codes.PermissionDenied || state.IsNotFoundError(err) {
				t.Errorf("%s: %v, want PermissionDenied", r, err)
			}
		}

		// In maintenance mode every client is a reader.
		_, err = safe.StateGetByID[*configres.MachineConfig](t.Context(), insecureClient(t, maint).COSI, configres.ActiveID)
		if client.StatusCode(err) != codes.PermissionDenied {
			t.Errorf("maintenance mode: %v, want PermissionDenied", err)
		}
	})

	t.Run("unmodelled", func(t *testing.T) {
		_, err := safe.StateListAll[*configres.MachineConfig](client.WithNode(t.Context(), worker.String()), c.COSI)
		if client.StatusCode(err) != codes.Unimplemented {
			t.Errorf("list: %v, want Unimplemented", err)
		}

		_, err = c.COSI.Get(client.WithNode(t.Context(), worker.String()),
			resource.NewMetadata("network", "HostnameStatuses.net.talos.dev", "hostname", resource.VersionUndefined))
		if client.StatusCode(err) != codes.Unimplemented {
			t.Errorf("another type: %v, want Unimplemented", err)
		}

		// apid proxies COSI to one node only.
		_, err = safe.StateGetByID[*configres.MachineConfig](client.WithNodes(t.Context(), cp1.String(), worker.String()), c.COSI, configres.ActiveID)
		if client.StatusCode(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "one-2-many proxying is not supported for method /cosi.resource.State/Get") {
			t.Errorf("nodes metadata: %v, want InvalidArgument", err)
		}
	})

	t.Run("reset to maintenance", func(t *testing.T) {
		if err := c.ResetGeneric(client.WithNode(t.Context(), worker.String()), &machine.ResetRequest{Reboot: true}); err != nil {
			t.Fatal(err)
		}

		waitUp(t, w, worker, talos.ModeMaintenance)

		_, err := safe.StateGetByID[*configres.MachineConfig](t.Context(), insecureClient(t, worker).COSI, configres.ActiveID)
		if client.StatusCode(err) != codes.PermissionDenied {
			t.Errorf("after the reset: %v, want PermissionDenied", err)
		}
	})
}

func apply(t *testing.T, c *client.Client, node netip.Addr, data []byte, mode machine.ApplyConfigurationRequest_Mode) {
	t.Helper()

	resp, err := c.ApplyConfiguration(client.WithNode(t.Context(), node.String()), &machine.ApplyConfigurationRequest{Data: data, Mode: mode})
	if err != nil {
		t.Fatalf("apply %s: %v", mode, err)
	}

	if got := resp.GetMessages()[0].GetMode(); got != mode {
		t.Fatalf("apply %s answered mode %s", mode, got)
	}
}
