package talos

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// parseImage returns the tag of an image reference and, for an Image Factory
// installer (<host>/installer/<schematic>:<tag>, or a platform installer
// such as <host>/nocloud-installer/<schematic>:<tag>), its schematic ID.
func parseImage(ref string) (tag, schematic string) {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}

	name := ref
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		tag, name = ref[i+1:], ref[:i]
	}

	parts := strings.Split(name, "/")
	if len(parts) >= 3 && strings.HasSuffix(parts[len(parts)-2], "installer") {
		schematic = parts[len(parts)-1]
	}

	return tag, schematic
}

var versionTag = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// validateInstaller checks an installer image reference the way pulling it
// would: it needs a name and a Talos version tag.
func validateInstaller(ref string) error {
	if ref == "" {
		return errors.New("image reference is empty")
	}

	tag, _ := parseImage(ref)
	if !versionTag.MatchString(tag) {
		return fmt.Errorf("failed to resolve reference %q: not a Talos installer version tag", ref)
	}

	return nil
}

// lifecycleServer implements the LifecycleService upgrade: it installs the
// image, which boots at the next reboot; the caller reboots the node.
type lifecycleServer struct {
	machine.UnimplementedLifecycleServiceServer
}

// Upgrade installs the installer image for the next boot, streaming progress
// and an exit code.
func (lifecycleServer) Upgrade(req *machine.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machine.LifecycleServiceUpgradeResponse]) error {
	c := callOf(srv.Context())
	if err := c.lock(); err != nil {
		return err
	}

	n := c.node

	if !n.installed || n.mode != ModeRunning {
		c.unlock()

		return status.Error(codes.FailedPrecondition, "machine is not installed")
	}

	image := req.GetSource().GetImageName()
	if image == "" {
		c.unlock()

		return status.Error(codes.InvalidArgument, "installer image name is required")
	}

	if err := validateInstaller(image); err != nil {
		c.unlock()

		return status.Errorf(codes.Internal, "upgrade failed: %v", err)
	}

	n.nextImage = image
	c.unlock()

	for _, msg := range []string{
		"starting upgrade: installer_image=" + image,
		"installing Talos " + func() string { v, _ := parseImage(image); return v }(),
		"upgrade completed",
	} {
		if err := srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
			Response: &machine.LifecycleServiceInstallProgress_Message{Message: msg},
		}}); err != nil {
			return err
		}
	}

	return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
		Response: &machine.LifecycleServiceInstallProgress_ExitCode{ExitCode: 0},
	}})
}

// imageServer answers image pulls (which always succeed) and lists no
// images.
type imageServer struct {
	machine.UnimplementedImageServiceServer
}

// List lists no images.
func (imageServer) List(*machine.ImageServiceListRequest, grpc.ServerStreamingServer[machine.ImageServiceListResponse]) error {
	return nil
}

// Pull answers the pulled image's name.
func (imageServer) Pull(req *machine.ImageServicePullRequest, srv grpc.ServerStreamingServer[machine.ImageServicePullResponse]) error {
	if req.GetImageRef() == "" {
		return status.Error(codes.InvalidArgument, "image reference is required")
	}

	return srv.Send(&machine.ImageServicePullResponse{
		Response: &machine.ImageServicePullResponse_Name{Name: req.GetImageRef()},
	})
}
