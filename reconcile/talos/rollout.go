package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// UpgradeTimeout bounds the pull of an installer image and its
// installation, which download hundreds of megabytes.
const UpgradeTimeout = 10 * time.Minute

// bootIDPath is the kernel's random boot ID: it changes at every boot, so
// a node that shows another one than before has rebooted. talosctl's own
// reboot and upgrade wait read the same file.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// BootID returns the node's current boot ID.
func (c *Client) BootID(ctx context.Context, node string) (string, error) {
	ctx, cancel := call(ctx, node)
	defer cancel()
	r, err := c.c.Read(ctx, bootIDPath)
	if err != nil {
		return "", fmt.Errorf("reading the boot ID of %s: %w", node, err)
	}
	defer r.Close() //nolint:errcheck // the read's own error is what counts
	body, err := io.ReadAll(io.LimitReader(r, 128))
	if err != nil {
		return "", fmt.Errorf("reading the boot ID of %s: %w", node, err)
	}
	id := strings.TrimSpace(string(body))
	if id == "" {
		return "", fmt.Errorf("reading the boot ID of %s: empty answer", node)
	}
	return id, nil
}

// ApplyConfig gives a running node a new machine config. live asks for
// the NO_REBOOT mode, which Talos 1.13 refuses when the change cannot be
// applied without a reboot; otherwise the config is STAGED for the next
// boot, which the caller causes: the same on Talos 1.13 and 1.14, whose
// AUTO mode differ (1.14 never reboots). It returns the node's own words,
// such as "Applied configuration without a reboot".
func (c *Client) ApplyConfig(ctx context.Context, node string, data []byte, live bool) (details string, err error) {
	ctx, cancel := call(ctx, node)
	defer cancel()
	mode := machineapi.ApplyConfigurationRequest_STAGED
	if live {
		mode = machineapi.ApplyConfigurationRequest_NO_REBOOT
	}
	resp, err := c.c.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: data, Mode: mode})
	if err != nil {
		return "", fmt.Errorf("applying the machine config to %s: %w", node, err)
	}
	for _, m := range resp.GetMessages() {
		details = strings.TrimSpace(m.GetModeDetails())
	}
	return details, nil
}

// NotLive reports whether an apply was refused because the change cannot
// be applied without a reboot (Talos 1.13, mode NO_REBOOT).
func NotLive(err error) bool {
	return status.Code(err) == codes.InvalidArgument && strings.Contains(err.Error(), "immediate")
}

// Reboot asks a node to reboot; it answers at once, and the node goes down
// afterwards. Talos does not drain the node for a reboot.
func (c *Client) Reboot(ctx context.Context, node string) error {
	ctx, cancel := call(ctx, node)
	defer cancel()
	if err := c.c.Reboot(ctx); err != nil {
		return fmt.Errorf("rebooting %s: %w", node, err)
	}
	return nil
}

// systemContainerd is the containerd instance talosctl upgrade pulls the
// installer into by default (its "system" namespace).
var systemContainerd = &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}

// Install pulls an installer image onto a node and installs it for the
// next boot, as talosctl upgrade does through the lifecycle service: the
// node keeps running its current system until it reboots, which the
// caller asks for. legacy is set when the node does not serve the image
// or the lifecycle service (Talos before 1.13): it was then upgraded with
// the older call, which cordons, drains and reboots by itself.
func (c *Client) Install(ctx context.Context, node, image string) (legacy bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, UpgradeTimeout)
	defer cancel()
	ctx = client.WithNode(ctx, node)
	pull, err := c.c.ImageClient.Pull(ctx, &machineapi.ImageServicePullRequest{Containerd: systemContainerd, ImageRef: image})
	if err == nil {
		err = drain(pull)
	}
	if status.Code(err) == codes.Unimplemented {
		return true, c.legacyUpgrade(ctx, node, image)
	}
	if err != nil {
		return false, fmt.Errorf("pulling the installer %s on %s: %w", image, node, err)
	}
	up, err := c.c.LifecycleClient.Upgrade(ctx, &machineapi.LifecycleServiceUpgradeRequest{
		Containerd: systemContainerd,
		Source:     &machineapi.InstallArtifactsSource{ImageName: image},
	})
	if status.Code(err) == codes.Unimplemented {
		return true, c.legacyUpgrade(ctx, node, image)
	}
	if err != nil {
		return false, fmt.Errorf("installing %s on %s: %w", image, node, err)
	}
	var last string
	for first := true; ; first = false {
		msg, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return false, fmt.Errorf("installing %s on %s: the node ended the upgrade without an exit code (last: %q)", image, node, last)
		}
		if first && status.Code(err) == codes.Unimplemented {
			// A node that pulls images but has no lifecycle service.
			return true, c.legacyUpgrade(ctx, node, image)
		}
		if err != nil {
			return false, fmt.Errorf("installing %s on %s: %w", image, node, err)
		}
		p := msg.GetProgress()
		if m := p.GetMessage(); m != "" {
			last = m
		}
		if ec, ok := p.GetResponse().(*machineapi.LifecycleServiceInstallProgress_ExitCode); ok {
			if ec.ExitCode != 0 {
				return false, fmt.Errorf("installing %s on %s: the installer exited with code %d (last: %q)", image, node, ec.ExitCode, last)
			}
			return false, nil
		}
	}
}

// legacyUpgrade upgrades a node with MachineService.Upgrade.
func (c *Client) legacyUpgrade(ctx context.Context, node, image string) error {
	//lint:ignore SA1019 the fallback for nodes without the lifecycle service, as talosctl has
	if _, err := c.c.UpgradeWithOptions(ctx, client.WithUpgradeImage(image)); err != nil {
		return fmt.Errorf("upgrading %s to %s: %w", node, image, err)
	}
	return nil
}

// receiver is a server stream.
type receiver[T any] interface{ Recv() (T, error) }

// drain reads a stream to its end.
func drain[T any](s receiver[T]) error {
	for {
		if _, err := s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// criContainerd is the containerd instance of Kubernetes's images (the
// CRI's "k8s.io" namespace).
var criContainerd = &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_CRI}

// Pull pulls an image onto a node ahead of its use, as Talos's Kubernetes
// upgrade tooling pre-pulls a hop's images: into the CRI's namespace, or
// with system into Talos's own (the kubelet's image). pulled is false
// when the node does not serve image pulls.
func (c *Client) Pull(ctx context.Context, node, image string, system bool) (pulled bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, UpgradeTimeout)
	defer cancel()
	instance := criContainerd
	if system {
		instance = systemContainerd
	}
	stream, err := c.c.ImageClient.Pull(client.WithNode(ctx, node), &machineapi.ImageServicePullRequest{Containerd: instance, ImageRef: image})
	if err == nil {
		err = drain(stream)
	}
	switch {
	case status.Code(err) == codes.Unimplemented:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("pulling %s on %s: %w", image, node, err)
	}
	return true, nil
}
