package talos_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/taloscluster/taloscluster/lab/talos"
)

var bootIDFile = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\n$`)

// readBootID reads the boot ID as talosctl's reboot and upgrade wait does.
func readBootID(ctx context.Context, t *testing.T, c *client.Client) string {
	t.Helper()

	// A node that just came up may still be settling under load (another
	// boot of the test's own making): Unavailable is tried again.
	var data []byte
	eventually(t, "reading the boot ID", func() error {
		var err error
		data, err = readFile(ctx, c, "/proc/sys/kernel/random/boot_id")
		if err != nil && client.StatusCode(err) != codes.Unavailable {
			t.Fatalf("reading the boot ID: %v", err)
		}
		return err
	})

	if !bootIDFile.Match(data) {
		t.Fatalf("boot ID %q is not a UUID and a newline", data)
	}

	return string(data[:len(data)-1])
}

// TestBootID: the boot ID reads as procfs gives it, is the one World
// reports, and is new at every boot; Read needs os:admin.
func TestBootID(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 22)
	w := newWorld(t, talos.Options{})
	addr := tc.addrs[tc.cp(1)]

	if err := w.Boot(t.Context(), addr, tc.configs[tc.cp(1)]); err != nil {
		t.Fatal(err)
	}

	st := waitUp(t, w, addr, talos.ModeRunning)
	c := tc.client(t, addr)
	first := readBootID(t.Context(), t, c)

	if first != w.BootID(addr) || first != st.BootID {
		t.Errorf("read %s, World.BootID %s, NodeState.BootID %s", first, w.BootID(addr), st.BootID)
	}

	if readBootID(t.Context(), t, c) != first {
		t.Error("the boot ID changed without a boot")
	}

	_, err := readFile(t.Context(), tc.client(t, addr, role.Reader), "/proc/sys/kernel/random/boot_id")
	if client.StatusCode(err) != codes.PermissionDenied {
		t.Errorf("a reader read the boot ID: %v", err)
	}

	if _, err := readFile(t.Context(), c, "/proc/sys/kernel/random"); err == nil || client.StatusCode(err) != codes.Unknown {
		t.Errorf("reading the directory: %v", err)
	}

	if err := c.Reboot(t.Context()); err != nil {
		t.Fatal(err)
	}

	waitRebooted(t, w, addr, st.Boots)

	second := readBootID(t.Context(), t, c)
	if second == first || second != w.BootID(addr) {
		t.Errorf("after the reboot the boot ID is %s (before %s, World %s)", second, first, w.BootID(addr))
	}

	st, _ = w.Node(addr)

	if err := w.PowerOff(addr); err != nil {
		t.Fatal(err)
	}

	if w.BootID(addr) != "" {
		t.Errorf("a node that is off has the boot ID %s", w.BootID(addr))
	}

	if err := w.Boot(t.Context(), addr, nil); err != nil {
		t.Fatal(err)
	}

	waitRebooted(t, w, addr, st.Boots)

	if third := readBootID(t.Context(), t, c); third == first || third == second {
		t.Errorf("after a power cycle the boot ID is %s again", third)
	}
}

// pull pulls ref into store through c, returning the name Pull answered.
func pull(ctx context.Context, c *client.Client, store talos.ImageStore, ref string) (string, error) {
	stream, err := c.ImageClient.Pull(ctx, &machine.ImageServicePullRequest{
		Containerd: &common.ContainerdInstance{Driver: store.Driver, Namespace: store.Namespace},
		ImageRef:   ref,
	})
	if err != nil {
		return "", err
	}

	var name string

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return name, nil
		}

		if err != nil {
			return "", err
		}

		if n := msg.GetName(); n != "" {
			name = n
		}
	}
}

// lifecycleUpgrade runs LifecycleService.Upgrade as talosctl upgrade does,
// returning the progress messages and the exit code.
func lifecycleUpgrade(ctx context.Context, c *client.Client, store *common.ContainerdInstance, image string) ([]string, int32, error) {
	stream, err := c.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{
		Containerd: store,
		Source:     &machine.InstallArtifactsSource{ImageName: image},
	})
	if err != nil {
		return nil, -1, err
	}

	var msgs []string

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return msgs, -1, errors.New("no exit code")
		}

		if err != nil {
			return msgs, -1, err
		}

		switch p := msg.GetProgress().GetResponse().(type) {
		case *machine.LifecycleServiceInstallProgress_Message:
			msgs = append(msgs, p.Message)
		case *machine.LifecycleServiceInstallProgress_ExitCode:
			return msgs, p.ExitCode, nil
		}
	}
}

func listImages(ctx context.Context, c *client.Client, store talos.ImageStore) ([]string, error) {
	stream, err := c.ImageClient.List(ctx, &machine.ImageServiceListRequest{
		Containerd: &common.ContainerdInstance{Driver: store.Driver, Namespace: store.Namespace},
	})
	if err != nil {
		return nil, err
	}

	var names []string

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return names, nil
		}

		if err != nil {
			return nil, err
		}

		names = append(names, msg.GetName())
	}
}

// TestLifecycleUpgrade: the streaming upgrade needs the installer image
// pulled into the store it names, as Talos's does; one runs at a time; it
// installs for the next boot, and the reboot the caller makes boots the
// new version. The CRI containerd's store survives the reboot, the system
// containerd's (in memory) does not.
func TestLifecycleUpgrade(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 23)
	w := newWorld(t, talos.Options{InstallDelay: 300 * time.Millisecond})
	addr := tc.addrs[tc.cp(1)]

	if err := w.Boot(t.Context(), addr, tc.configs[tc.cp(1)]); err != nil {
		t.Fatal(err)
	}

	st := waitUp(t, w, addr, talos.ModeRunning)
	c := tc.client(t, addr)
	ctx := t.Context()

	const image = "ghcr.io/siderolabs/installer:v1.13.9"

	system := &common.ContainerdInstance{Driver: talos.SystemImages.Driver, Namespace: talos.SystemImages.Namespace}

	_, _, err := lifecycleUpgrade(ctx, c, system, image)
	if client.StatusCode(err) != codes.Internal || client.Status(err).Message() != `upgrade failed: installer image "ghcr.io/siderolabs/installer:v1.13.9" not found in containerd store: image "ghcr.io/siderolabs/installer:v1.13.9": not found` {
		t.Errorf("upgrade before the pull: %v", err)
	}

	_, _, err = lifecycleUpgrade(ctx, c, nil, image)
	if client.StatusCode(err) != codes.Internal || client.Status(err).Message() != "upgrade failed: rpc error: code = InvalidArgument desc = invalid containerd namespace NS_UNKNOWN" {
		t.Errorf("upgrade without a containerd instance: %v", err)
	}

	name, err := pull(ctx, c, talos.SystemImages, image)
	if err != nil {
		t.Fatal(err)
	}

	if !regexp.MustCompile(`^ghcr\.io/siderolabs/installer@sha256:[0-9a-f]{64}$`).MatchString(name) {
		t.Errorf("pull answered %q", name)
	}

	if _, err := pull(ctx, c, talos.ImageStore{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_CRI}, image); client.StatusCode(err) != codes.InvalidArgument {
		t.Errorf("pull into the CRI namespace of the system containerd: %v", err)
	}

	if _, err := pull(ctx, c, talos.InMemoryImages, image); err != nil {
		t.Fatal(err)
	}

	listed, err := listImages(ctx, c, talos.SystemImages)
	if err != nil {
		t.Fatal(err)
	}

	if len(listed) != 3 || !slices.Contains(listed, image) || !slices.Contains(listed, name) || !slices.IsSorted(listed) {
		t.Errorf("listed %v", listed)
	}

	if got := w.Images(addr, talos.SystemImages); !slices.Equal(got, listed) {
		t.Errorf("World.Images %v, listed %v", got, listed)
	}

	// The k8s.io namespace of the same containerd does not have it.
	_, _, err = lifecycleUpgrade(ctx, c, &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_CRI}, image)
	if client.StatusCode(err) != codes.Internal {
		t.Errorf("upgrade from the k8s.io namespace: %v", err)
	}

	// A second upgrade while one runs is refused.
	first := make(chan error, 1)

	go func() {
		_, code, err := lifecycleUpgrade(ctx, c, system, image)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit code %d", code)
		}
		first <- err
	}()

	eventually(t, "the second upgrade to be refused", func() error {
		_, _, err := lifecycleUpgrade(ctx, c, system, image)
		if client.StatusCode(err) == codes.FailedPrecondition && client.Status(err).Message() == "another installation/upgrade is already in progress" {
			return nil
		}

		return fmt.Errorf("second upgrade: %v", err)
	})

	if err := <-first; err != nil {
		t.Fatal(err)
	}

	if now, _ := w.Node(addr); now.Version != talosVersion || now.Boots != st.Boots {
		t.Errorf("the upgrade alone changed the node: %+v", now)
	}

	bootID := w.BootID(addr)

	if err := c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}

	after := waitRebooted(t, w, addr, st.Boots)
	if after.Version != "v1.13.9" || after.BootID == bootID {
		t.Errorf("after the reboot: version %s, boot ID %s (before %s)", after.Version, after.BootID, bootID)
	}

	if got := w.Images(addr, talos.SystemImages); !slices.Equal(got, listed) {
		t.Errorf("the system namespace after the reboot: %v", got)
	}

	if got := w.Images(addr, talos.InMemoryImages); len(got) != 0 {
		t.Errorf("the in-memory containerd after the reboot: %v", got)
	}
}

// TestNeverRebootRestarts: with the never-reboot fault a node answers a
// reboot and an upgrade as Talos does and never goes down.
func TestNeverRebootRestarts(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 24)
	w := newWorld(t, talos.Options{})
	addr := tc.addrs[tc.cp(1)]
	w.NeverReboot(addr)

	if err := w.Boot(t.Context(), addr, tc.configs[tc.cp(1)]); err != nil {
		t.Fatal(err)
	}

	before := waitUp(t, w, addr, talos.ModeRunning)
	c := tc.client(t, addr)
	ctx := t.Context()

	resp, err := c.MachineClient.Reboot(ctx, &machine.RebootRequest{})
	if err != nil {
		t.Fatal(err)
	}

	if resp.GetMessages()[0].GetActorId() == "" {
		t.Error("the reboot answered no actor ID")
	}

	const image = "ghcr.io/siderolabs/installer:v1.13.9"

	//lint:ignore SA1019 the legacy upgrade is emulated too
	if _, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage(image)); err != nil {
		t.Fatal(err)
	}

	if _, err := pull(ctx, c, talos.SystemImages, image); err != nil {
		t.Fatal(err)
	}

	system := &common.ContainerdInstance{Driver: talos.SystemImages.Driver, Namespace: talos.SystemImages.Namespace}
	if _, code, err := lifecycleUpgrade(ctx, c, system, image); err != nil || code != 0 {
		t.Fatalf("upgrade: %v, exit code %d", err, code)
	}

	if err := c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}

	time.Sleep(200 * time.Millisecond)

	after, _ := w.Node(addr)
	if after.Boots != before.Boots || !after.Up || after.BootID != before.BootID || after.Version != before.Version {
		t.Errorf("the node went down: before %+v, after %+v", before, after)
	}
}

// TestKubeletRestartsOnImageChange: a live change of the kubelet's image
// restarts the kubelet: ServiceList shows it not running for a moment,
// then running, and the node registers the new kubelet version.
func TestKubeletRestartsOnImageChange(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 25)
	hooks := &hookRecorder{}
	w := newWorld(t, talos.Options{Hooks: hooks, KubeletRestartDelay: 300 * time.Millisecond})
	c := tc.bootstrapCluster(t, w)
	host := tc.worker(1)
	addr := tc.addrs[host]
	nctx := client.WithNode(t.Context(), addr.String())

	registered := func(version string) error {
		_, joined, _ := hooks.snapshot()
		for i := len(joined) - 1; i >= 0; i-- {
			if joined[i].Hostname == host {
				if joined[i].KubeletVersion != version {
					return fmt.Errorf("registered kubelet %s", joined[i].KubeletVersion)
				}

				return nil
			}
		}

		return errors.New("not registered")
	}

	kubelet := func() (string, error) {
		resp, err := c.ServiceList(nctx)
		if err != nil {
			return "", err
		}

		for _, s := range resp.GetMessages()[0].GetServices() {
			if s.GetId() == "kubelet" {
				return s.GetState(), nil
			}
		}

		return "", errors.New("no kubelet service")
	}

	eventually(t, "the kubelet registered", func() error { return registered(kubeVersion) })

	const target = "v1.35.2"

	data := tc.generate(t, tc.machine(t, host), []string{"machine:\n  kubelet:\n    image: ghcr.io/siderolabs/kubelet:" + target + "\n"})

	resp, err := c.ApplyConfiguration(nctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_AUTO})
	if err != nil {
		t.Fatal(err)
	}

	if mode := resp.GetMessages()[0].GetMode(); mode != machine.ApplyConfigurationRequest_NO_REBOOT {
		t.Fatalf("applied with mode %s", mode)
	}

	if state, err := kubelet(); err != nil || state == "Running" {
		t.Errorf("right after the apply the kubelet is %s (%v)", state, err)
	}

	if err := registered(kubeVersion); err != nil {
		t.Errorf("the restarting kubelet registered: %v", err)
	}

	eventually(t, "the kubelet running again", func() error {
		state, err := kubelet()
		if err == nil && state != "Running" {
			err = fmt.Errorf("kubelet %s", state)
		}

		return err
	})

	eventually(t, "the new kubelet registered", func() error { return registered(target) })

	if calls := hooks.callsOf(host); slices.ContainsFunc(calls, func(c string) bool { return c == "left "+host+" shutdown=true" }) {
		t.Errorf("the restart shut the node down: %v", calls)
	}
}
