package talos

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
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

// ImageStore names one image store of a node: a containerd instance and
// namespace, as a request's ContainerdInstance does.
type ImageStore struct {
	Driver    common.ContainerDriver
	Namespace common.ContainerdNamespace
}

// The stores talosctl names with its --namespace flag
// (cmd/talosctl/cmd/talos/image.go, containerdInstance).
var (
	// SystemImages is "system", talosctl upgrade's default: the CRI
	// containerd, namespace system. It is on EPHEMERAL: it survives
	// reboots and upgrades, a reset of EPHEMERAL wipes it.
	SystemImages = ImageStore{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}
	// CRIImages is "cri": the CRI containerd, namespace k8s.io, where the
	// kubelet's images are; also on EPHEMERAL.
	CRIImages = ImageStore{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_CRI}
	// InMemoryImages is "inmem": the system containerd, whose root
	// (/system/var/lib/containerd) is in memory: empty at every boot.
	InMemoryImages = ImageStore{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_SYSTEM}
)

// containerdStore is a containerd instance (its socket) and namespace.
type containerdStore struct {
	address   string
	namespace string
}

func (s ImageStore) key() containerdStore {
	k, _ := containerdInstance(&common.ContainerdInstance{Driver: s.Driver, Namespace: s.Namespace})

	return k
}

// containerdInstance picks the containerd instance and namespace a request
// names, refusing what Talos refuses
// (internal/app/internal/ctrhelper/ctrhelper.go, ContainerdInstanceHelper).
// A request without one names the system containerd and no namespace,
// which is refused.
func containerdInstance(req *common.ContainerdInstance) (containerdStore, error) {
	var k containerdStore

	switch req.GetDriver() {
	case common.ContainerDriver_CONTAINERD:
		k.address = constants.SystemContainerdAddress
	case common.ContainerDriver_CRI:
		k.address = constants.CRIContainerdAddress
	default:
		return k, status.Errorf(codes.InvalidArgument, "invalid containerd driver %s", req.GetDriver())
	}

	switch req.GetNamespace() {
	case common.ContainerdNamespace_NS_CRI:
		k.namespace = constants.K8sContainerdNamespace
	case common.ContainerdNamespace_NS_SYSTEM:
		k.namespace = constants.SystemContainerdNamespace
	default:
		return k, status.Errorf(codes.InvalidArgument, "invalid containerd namespace %s", req.GetNamespace())
	}

	if req.GetDriver() == common.ContainerDriver_CONTAINERD && req.GetNamespace() == common.ContainerdNamespace_NS_CRI {
		return k, status.Errorf(codes.InvalidArgument, "cannot use CRI namespace with containerd driver")
	}

	return k, nil
}

// storedImage is an image record of a containerd store.
type storedImage struct {
	digest  string
	created time.Time
}

// imageStore returns the images of one of n's stores by name, creating
// the store when create is set. Called with w.mu held.
func (n *node) imageStore(k containerdStore, create bool) map[string]storedImage {
	stores := &n.images
	if k.address == constants.SystemContainerdAddress {
		stores = &n.memImages
	}

	if *stores == nil {
		if !create {
			return nil
		}

		*stores = map[containerdStore]map[string]storedImage{}
	}

	if (*stores)[k] == nil && create {
		(*stores)[k] = map[string]storedImage{}
	}

	return (*stores)[k]
}

// imageRef is an image reference normalised the way Talos's pull does
// (distribution/reference ParseDockerRef): a registry host (docker.io when
// none), library/ for a one-part Docker Hub name, the tag latest when there
// is neither tag nor digest, and no tag when there is a digest.
type imageRef struct {
	name, tag, digest string
}

var (
	refComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	refDomain    = regexp.MustCompile(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?$`)
	refTag       = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	refDigest    = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
)

var errInvalidReference = errors.New("invalid reference format")

func parseImageRef(ref string) (imageRef, error) {
	var r imageRef

	rest := ref
	if i := strings.Index(rest, "@"); i >= 0 {
		rest, r.digest = rest[:i], rest[i+1:]
		if !refDigest.MatchString(r.digest) {
			return r, errInvalidReference
		}
	}

	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		rest, r.tag = rest[:i], rest[i+1:]
		if !refTag.MatchString(r.tag) {
			return r, errInvalidReference
		}
	}

	parts := strings.Split(rest, "/")
	domain := "docker.io"

	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		domain, parts = parts[0], parts[1:]
		if !refDomain.MatchString(domain) {
			return r, errInvalidReference
		}
	}

	if domain == "index.docker.io" {
		domain = "docker.io"
	}

	if domain == "docker.io" && len(parts) == 1 {
		parts = append([]string{"library"}, parts...)
	}

	for _, p := range parts {
		if !refComponent.MatchString(p) {
			return r, errInvalidReference
		}
	}

	r.name = domain + "/" + strings.Join(parts, "/")

	switch {
	case r.digest != "":
		r.tag = ""
	case r.tag == "":
		r.tag = "latest"
	}

	return r, nil
}

func (r imageRef) String() string {
	s := r.name
	if r.tag != "" {
		s += ":" + r.tag
	}

	if r.digest != "" {
		s += "@" + r.digest
	}

	return s
}

// labDigest is the digest the lab gives the image a reference names: the
// one it carries, else one derived from the name and tag (the lab has no
// registry; the same reference always has the same digest).
func (r imageRef) labDigest() string {
	if r.digest != "" {
		return r.digest
	}

	sum := sha256.Sum256([]byte("taloslab image " + r.String()))

	return "sha256:" + hex.EncodeToString(sum[:])
}

// imageServer is the ImageService of machined
// (internal/app/images/images.go). The lab has no registry: every valid
// reference pulls.
type imageServer struct {
	machine.UnimplementedImageServiceServer
}

// List lists the images of the store the request names, by name.
func (imageServer) List(req *machine.ImageServiceListRequest, srv grpc.ServerStreamingServer[machine.ImageServiceListResponse]) error {
	c := callOf(srv.Context())
	if err := c.lock(); err != nil {
		return err
	}

	k, err := containerdInstance(req.GetContainerd())
	if err != nil {
		c.unlock()

		return err
	}

	store := c.node.imageStore(k, false)
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range store {
			if !yield(name) {
				return
			}
		}
	})

	out := make([]*machine.ImageServiceListResponse, 0, len(names))
	for _, name := range names {
		img := store[name]
		out = append(out, &machine.ImageServiceListResponse{
			Name:      name,
			Digest:    img.digest,
			CreatedAt: timestamppb.New(img.created),
		})
	}

	c.unlock()

	for _, msg := range out {
		if err := srv.Send(msg); err != nil {
			return err
		}
	}

	return nil
}

// Pull pulls an image into the store the request names, like Talos's
// image.Pull: the reference is normalised, and the store then holds the
// image under its digest, its tagged name (when it has a tag) and its
// name pinned to the digest. The answer is the pinned name.
func (imageServer) Pull(req *machine.ImageServicePullRequest, srv grpc.ServerStreamingServer[machine.ImageServicePullResponse]) error {
	c := callOf(srv.Context())
	if err := c.lock(); err != nil {
		return err
	}

	k, err := containerdInstance(req.GetContainerd())
	if err != nil {
		c.unlock()

		return err
	}

	ref, err := parseImageRef(req.GetImageRef())
	if err != nil {
		c.unlock()

		return fmt.Errorf("failed to parse image reference %q: %w", req.GetImageRef(), err)
	}

	digest := ref.labDigest()
	pinned := ref.name + "@" + digest
	names := []string{digest, pinned}

	if ref.tag != "" {
		names = append(names, ref.String())
	}

	store := c.node.imageStore(k, true)
	now := time.Now()

	for _, name := range names {
		if old, ok := store[name]; !ok || old.digest != digest {
			store[name] = storedImage{digest: digest, created: now}
		}
	}

	c.unlock()

	return srv.Send(&machine.ImageServicePullResponse{
		Response: &machine.ImageServicePullResponse_Name{Name: pinned},
	})
}

// lifecycleServer is machined's LifecycleService
// (internal/app/lifecycle/lifecycle.go). Its upgrade runs the installer
// image, which must already be in the store the request names, to install
// the new system for the next boot; it neither drains nor reboots: the
// caller does.
type lifecycleServer struct {
	machine.UnimplementedLifecycleServiceServer
}

// Upgrade installs the installer image for the next boot, streaming
// progress and an exit code. One install or upgrade runs at a time on a
// node; the installer runs for InstallDelay.
func (lifecycleServer) Upgrade(req *machine.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machine.LifecycleServiceUpgradeResponse]) error {
	c := callOf(srv.Context())
	if err := c.lock(); err != nil {
		return err
	}

	w, n := c.w, c.node

	fail := func(err error) error {
		c.unlock()

		return err
	}

	// Talos added the service in 1.13.
	if !versionAtLeast(n.version(), 1, 13) {
		return fail(status.Error(codes.Unimplemented, "unknown service machine.LifecycleService"))
	}

	if n.upgrading {
		return fail(status.Error(codes.FailedPrecondition, "another installation/upgrade is already in progress"))
	}

	if !n.installed || n.mode != ModeRunning {
		return fail(status.Error(codes.FailedPrecondition, "machine is not installed"))
	}

	image := req.GetSource().GetImageName()
	if image == "" {
		return fail(status.Error(codes.InvalidArgument, "installer image name is required"))
	}

	k, err := containerdInstance(req.GetContainerd())
	if err != nil {
		return fail(status.Error(codes.Internal, fmt.Sprintf("upgrade failed: %v", err)))
	}

	// containerd looks the name up as given, not normalised
	// (core/metadata/images.go, Get).
	if _, ok := n.imageStore(k, false)[image]; !ok {
		return fail(status.Error(codes.Internal, fmt.Sprintf("upgrade failed: installer image %q not found in containerd store: image %q: not found", image, image)))
	}

	if err := validateInstaller(image); err != nil {
		return fail(status.Errorf(codes.Internal, "upgrade failed: %v", err))
	}

	n.upgrading = true
	gen := n.gen

	c.unlock()

	version, _ := parseImage(image)
	sendErr := sendProgress(srv, "starting upgrade: installer_image="+image)

	// The installer runs on even when the client has gone.
	t := time.NewTimer(w.opts.InstallDelay)
	<-t.C

	w.mu.Lock()

	if n.gen == gen {
		n.nextImage = image
		n.upgrading = false
	}

	w.mu.Unlock()

	if sendErr != nil {
		return sendErr
	}

	if err := sendProgress(srv, "installed Talos "+version+" for the next boot"); err != nil {
		return err
	}

	return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
		Response: &machine.LifecycleServiceInstallProgress_ExitCode{ExitCode: 0},
	}})
}

func sendProgress(srv grpc.ServerStreamingServer[machine.LifecycleServiceUpgradeResponse], msg string) error {
	return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
		Response: &machine.LifecycleServiceInstallProgress_Message{Message: msg},
	}})
}
