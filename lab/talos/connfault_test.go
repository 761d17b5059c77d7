package talos_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// transportFailure fails the test unless err is a failure of the gRPC
// transport (Unavailable, raised by the client's transport when the
// connection was reset), not a status the server sent.
func transportFailure(t *testing.T, what string, err error) {
	t.Helper()

	if code := client.StatusCode(err); code != codes.Unavailable {
		t.Fatalf("%s: %v (code %s), want Unavailable", what, err, code)
	}

	if msg := err.Error(); strings.Contains(msg, "injected fault") || !strings.Contains(msg, "reset") && !strings.Contains(msg, "EOF") && !strings.Contains(msg, "closed") {
		t.Fatalf("%s: %v, want the transport's error for a reset connection", what, err)
	}
}

func bootstrapped(w *talos.World, cluster string) bool {
	for _, c := range w.Clusters() {
		if c.Name == cluster {
			return c.Bootstrapped
		}
	}

	return false
}

// TestConnectionFaults checks reset, lost-reply and hang with the
// machinery client: a reset Bootstrap has no effect, a Bootstrap whose
// reply is lost bootstraps, a hung call ends with the client's deadline,
// and after each the client reconnects and is served.
func TestConnectionFaults(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 14)
	w := newWorld(t, talos.Options{})

	cp1, worker := tc.addrs[tc.cp(1)], tc.addrs[tc.worker(1)]

	for _, host := range []string{tc.cp(1), tc.worker(1)} {
		if err := w.Boot(t.Context(), tc.addrs[host], tc.configs[host]); err != nil {
			t.Fatal(err)
		}
	}

	waitUp(t, w, cp1, talos.ModeRunning)
	waitUp(t, w, worker, talos.ModeRunning)

	c := tc.client(t, cp1)
	ctx := t.Context()

	w.ResetCalls(cp1, "Bootstrap", 1)
	transportFailure(t, "reset bootstrap", c.Bootstrap(ctx, &machine.BootstrapRequest{}))

	if bootstrapped(w, tc.name) {
		t.Fatal("the reset bootstrap took effect")
	}

	w.LoseReplies(cp1, "Bootstrap", 1)
	transportFailure(t, "bootstrap with a lost reply", c.Bootstrap(ctx, &machine.BootstrapRequest{}))

	if !bootstrapped(w, tc.name) {
		t.Fatal("the bootstrap whose reply was lost took no effect")
	}

	// The client reconnects; a bootstrap retried after a lost reply finds
	// etcd bootstrapped, as it would on Talos.
	err := c.Bootstrap(ctx, &machine.BootstrapRequest{})
	if code := client.StatusCode(err); code != codes.AlreadyExists {
		t.Fatalf("bootstrap after the lost reply: %v, want AlreadyExists", err)
	}

	// A streaming call whose reply is lost is cut at its first message.
	w.LoseReplies(cp1, "Kubeconfig", 1)

	_, err = c.Kubeconfig(ctx)
	transportFailure(t, "kubeconfig with a lost reply", err)

	if _, err := c.Kubeconfig(ctx); err != nil {
		t.Fatalf("kubeconfig after the lost reply: %v", err)
	}

	// Faults follow the target node of a proxied call.
	w.ResetCalls(worker, "Version", 1)

	_, err = c.Version(client.WithNode(ctx, worker.String()))
	transportFailure(t, "reset version through the control plane", err)

	w.HangCalls(cp1, "Version", 1)

	hctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	_, err = c.Version(hctx)

	cancel()

	if code := client.StatusCode(err); code != codes.DeadlineExceeded {
		t.Fatalf("hung version: %v, want DeadlineExceeded", err)
	}

	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("the hung call returned after %v", d)
	}

	for _, addr := range []string{cp1.String(), worker.String()} {
		if _, err := c.Version(client.WithNode(ctx, addr)); err != nil {
			t.Fatalf("version of %s after the faults: %v", addr, err)
		}
	}

	var faults []string

	eventually(t, "the hung call in the log", func() error {
		faults = nil

		for _, op := range w.Log() {
			if op.Fault != "" {
				faults = append(faults, fmt.Sprintf("%s %s %s", op.Short(), op.Node, op.Fault))
			}
		}

		if len(faults) < 5 {
			return fmt.Errorf("faults logged: %q", faults)
		}

		return nil
	})

	want := []string{
		"Bootstrap " + cp1.String() + " reset",
		"Bootstrap " + cp1.String() + " lost-reply",
		"Kubeconfig " + cp1.String() + " lost-reply",
		"Version " + worker.String() + " reset",
		"Version " + cp1.String() + " hang",
	}
	// A lost reply is logged when its connection is cut, which may come
	// after the next call's entry: the faults are compared as a set.
	slices.Sort(faults)
	slices.Sort(want)
	if !slices.Equal(faults, want) {
		t.Errorf("faults in the log %q, want %q", faults, want)
	}
}

// TestHangEndsWhenTheNodeStops checks that a hung call does not outlive
// its node's API.
func TestHangEndsWhenTheNodeStops(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 15)
	w := newWorld(t, talos.Options{})
	cp1 := tc.addrs[tc.cp(1)]

	if err := w.Boot(t.Context(), cp1, tc.configs[tc.cp(1)]); err != nil {
		t.Fatal(err)
	}

	waitUp(t, w, cp1, talos.ModeRunning)

	c := tc.client(t, cp1)

	w.HangCalls(cp1, "Hostname", 1)

	done := make(chan error, 1)

	go func() {
		_, err := c.MachineClient.Hostname(t.Context(), &emptypb.Empty{})
		done <- err
	}()

	time.Sleep(100 * time.Millisecond)

	if err := w.PowerOff(cp1); err != nil {
		t.Fatal(err)
	}

	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a hung call succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a hung call outlived its node")
	}
}
