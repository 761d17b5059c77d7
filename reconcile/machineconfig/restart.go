package machineconfig

import (
	"crypto/sha256"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// liveMachineKeys are the keys of .machine whose changes a running node
// takes without a restart, as Talos 1.13 decides it (its
// Runtime.CanApplyImmediate, internal/app/machined/pkg/runtime/v1alpha1/
// v1alpha1_runtime.go, v1.13.9): everything else under .machine, and the
// top-level keys other than .debug and .cluster, take effect at the next
// boot. Talos 1.14 applies every change without a reboot and says so,
// which is why the engine decides from the change and not from the reply.
var liveMachineKeys = []string{
	"ca", "acceptedCAs", "time", "certSANs", "install", "network", "sysfs", "sysctls",
	"logging", "controlPlane", "kubelet", "kernel", "registries", "pods", "seccompProfiles",
	"nodeAnnotations", "nodeLabels", "nodeTaints",
}

// liveFeatureKeys are the keys of .machine.features that apply live.
var liveFeatureKeys = []string{"kubernetesTalosAPIAccess", "kubePrism", "hostDNS", "imageCache", "nodeAddressSortAlgorithm"}

// RestartPaths returns the paths of the machine config (such as
// .machine.files) whose change from running to desired takes effect only
// when the node restarts; none when every change applies live. Documents
// other than v1alpha1 apply live, as on Talos 1.13.
func RestartPaths(running, desired []byte) ([]string, error) {
	cur, err := Parse(running)
	if err != nil {
		return nil, fmt.Errorf("reading the running machine config: %w", err)
	}
	next, err := Parse(desired)
	if err != nil {
		return nil, fmt.Errorf("reading the desired machine config: %w", err)
	}
	a, b := cur.RawV1Alpha1(), next.RawV1Alpha1()
	switch {
	case a == nil && b == nil:
		return nil, nil
	case a == nil || b == nil:
		return []string{"v1alpha1"}, nil
	}
	var out []string
	if a.ConfigVersion != b.ConfigVersion {
		out = append(out, ".version")
	}
	switch {
	case a.MachineConfig == nil && b.MachineConfig == nil:
	case a.MachineConfig == nil || b.MachineConfig == nil:
		out = append(out, ".machine")
	default:
		out = append(out, changedKeys(".machine", reflect.ValueOf(*a.MachineConfig), reflect.ValueOf(*b.MachineConfig), liveMachineKeys, "features")...)
		fa, fb := a.MachineConfig.MachineFeatures, b.MachineConfig.MachineFeatures
		switch {
		case fa == nil && fb == nil:
		case fa == nil || fb == nil:
			out = append(out, ".machine.features")
		default:
			out = append(out, changedKeys(".machine.features", reflect.ValueOf(*fa), reflect.ValueOf(*fb), liveFeatureKeys, "")...)
		}
	}
	return out, nil
}

// changedKeys lists the fields of two structs of the same type that
// differ, by their YAML key under prefix, leaving out the live keys and
// the one key that the caller compares itself.
func changedKeys(prefix string, a, b reflect.Value, live []string, skip string) []string {
	var out []string
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || key == "" || key == "-" || key == skip || slices.Contains(live, key) {
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, prefix+"."+key)
		}
	}
	return out
}

// Kubernetes components a Kubernetes upgrade moves one at a time, in the
// order Talos's own upgrade tooling does on each control plane.
const (
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
)

// WithComponentVersion returns the encoded machine config with the image
// of one control-plane component (APIServer, ControllerManager,
// Scheduler) at another Kubernetes version, its repository kept, and
// nothing else changed.
func WithComponentVersion(data []byte, component, version string) ([]byte, error) {
	cfg, err := Parse(data)
	if err != nil {
		return nil, err
	}
	patched, err := cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error {
		cl := c.ClusterConfig
		if cl == nil {
			return fmt.Errorf("the machine config has no cluster section")
		}
		switch component {
		case APIServer:
			if cl.APIServerConfig == nil {
				cl.APIServerConfig = &v1alpha1.APIServerConfig{}
			}
			cl.APIServerConfig.ContainerImage = retag(cl.APIServerConfig.Image(), version)
		case ControllerManager:
			if cl.ControllerManagerConfig == nil {
				cl.ControllerManagerConfig = &v1alpha1.ControllerManagerConfig{}
			}
			cl.ControllerManagerConfig.ContainerImage = retag(cl.ControllerManagerConfig.Image(), version)
		case Scheduler:
			if cl.SchedulerConfig == nil {
				cl.SchedulerConfig = &v1alpha1.SchedulerConfig{}
			}
			cl.SchedulerConfig.ContainerImage = retag(cl.SchedulerConfig.Image(), version)
		default:
			return fmt.Errorf("unknown control-plane component %q", component)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("setting %s to %s: %w", component, version, err)
	}
	return Encode(patched)
}

// ComponentImage returns the image the machine config names for a
// control-plane component. A plan asks this of the same configs many
// times over (each component of each control plane, desired and
// running), so the images of the configs seen last are kept by digest.
func ComponentImage(data []byte, component string) (string, error) {
	imgs, err := componentImagesOf(data)
	if err != nil {
		return "", err
	}
	switch component {
	case APIServer:
		return imgs[0], nil
	case ControllerManager:
		return imgs[1], nil
	case Scheduler:
		return imgs[2], nil
	}
	return "", fmt.Errorf("unknown control-plane component %q", component)
}

// componentImages keeps the control-plane images of the configs parsed
// last, by the SHA-256 of their bytes; it starts over when full.
var componentImages = struct {
	sync.Mutex
	byDigest map[[sha256.Size]byte][3]string
}{byDigest: map[[sha256.Size]byte][3]string{}}

const maxComponentImages = 1024

func componentImagesOf(data []byte) ([3]string, error) {
	key := sha256.Sum256(data)
	componentImages.Lock()
	imgs, ok := componentImages.byDigest[key]
	componentImages.Unlock()
	if ok {
		return imgs, nil
	}
	cfg, err := Parse(data)
	if err != nil {
		return imgs, err
	}
	cl := cfg.Cluster()
	if cl == nil {
		return imgs, fmt.Errorf("the machine config has no cluster section")
	}
	imgs = [3]string{cl.APIServer().Image(), cl.ControllerManager().Image(), cl.Scheduler().Image()}
	componentImages.Lock()
	if len(componentImages.byDigest) >= maxComponentImages {
		clear(componentImages.byDigest)
	}
	componentImages.byDigest[key] = imgs
	componentImages.Unlock()
	return imgs, nil
}

// retag returns image with its tag replaced by tag (a registry's port is
// not a tag).
func retag(image, tag string) string {
	name := image
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndexByte(name, ':'); i >= 0 && !strings.ContainsRune(name[i:], '/') {
		name = name[:i]
	}
	return name + ":" + tag
}
