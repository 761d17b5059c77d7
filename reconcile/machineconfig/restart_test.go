package machineconfig_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
)

// TestRestartPaths: whether a change needs a restart is decided from the
// paths it changes, as Talos 1.13's CanApplyImmediate lists what applies
// live; the other documents apply live.
func TestRestartPaths(t *testing.T) {
	t.Parallel()
	prox := proxmoxCluster()
	in := proxmoxInput(t, prox)
	base := generate(t, in, machine(t, in.Cluster, "lab-controlplane-01"))
	running, err := machineconfig.Encode(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		patch string
		want  []string
	}{
		{"sysctls apply live", "machine:\n  sysctls:\n    net.core.somaxconn: \"4096\"\n", nil},
		{"kubelet args apply live", "machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"200\"\n", nil},
		{"node labels apply live", "machine:\n  nodeLabels:\n    tier: gold\n", nil},
		{"the cluster section applies live", "cluster:\n  apiServer:\n    extraArgs:\n      audit-log-maxage: \"7\"\n", nil},
		{"the install section applies live", "machine:\n  install:\n    extraKernelArgs: [console=ttyS1]\n", nil},
		{"environment needs a restart", "machine:\n  env:\n    HTTP_PROXY: http://proxy:3128\n", []string{".machine.env"}},
		{"files need a restart", "machine:\n  files:\n    - path: /var/etc/x\n      permissions: 0o644\n      op: create\n      content: x\n", []string{".machine.files"}},
		{"a feature outside the live ones needs a restart", "machine:\n  features:\n    diskQuotaSupport: false\n", []string{".machine.features.diskQuotaSupport"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			patched := patched(t, running, tc.patch)
			got, err := machineconfig.RestartPaths(running, patched)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("RestartPaths = %v, want %v", got, tc.want)
			}
		})
	}
	if got, err := machineconfig.RestartPaths(running, running); err != nil || len(got) != 0 {
		t.Errorf("RestartPaths of equal configs = %v, %v", got, err)
	}
}

// TestWithComponentVersion moves one component's image and nothing else.
func TestWithComponentVersion(t *testing.T) {
	t.Parallel()
	cfg, _ := controlPlaneConfig(t)
	out, err := machineconfig.WithComponentVersion(cfg, machineconfig.ControllerManager, "v1.37.0")
	if err != nil {
		t.Fatal(err)
	}
	img, err := machineconfig.ComponentImage(out, machineconfig.ControllerManager)
	if err != nil || !strings.HasSuffix(img, "/kube-controller-manager:v1.37.0") {
		t.Fatalf("controller manager image %q, %v", img, err)
	}
	diff, err := machineconfig.DiffBytes(cfg, out)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, l := range strings.Split(diff, "\n") {
		if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++") {
			changed++
		}
	}
	if changed != 1 {
		t.Errorf("the diff changes %d lines, want 1:\n%s", changed, diff)
	}
	paths, err := machineconfig.RestartPaths(cfg, out)
	if err != nil || len(paths) != 0 {
		t.Errorf("a component's version needs a restart: %v %v", paths, err)
	}
}

// controlPlaneConfig is the encoded config of the lab cluster's first
// control plane, and its Kubernetes version.
func controlPlaneConfig(t *testing.T) ([]byte, string) {
	t.Helper()
	prox := proxmoxCluster()
	in := proxmoxInput(t, prox)
	cfg, err := machineconfig.Encode(generate(t, in, machine(t, in.Cluster, "lab-controlplane-01")))
	if err != nil {
		t.Fatal(err)
	}
	return cfg, prox.Kubernetes.Version
}

// patched applies a strategic merge patch to an encoded config.
func patched(t *testing.T, data []byte, patch string) []byte {
	t.Helper()
	p, err := configpatcher.LoadPatch([]byte(patch))
	if err != nil {
		t.Fatal(err)
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes(data), []configpatcher.Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	b, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestComponentImageOfEachConfig: the images kept by digest are each
// config's own, asked in any order, and a config that cannot be read is an
// error every time.
func TestComponentImageOfEachConfig(t *testing.T) {
	t.Parallel()
	cfg, kubernetes := controlPlaneConfig(t)
	moved, err := machineconfig.WithComponentVersion(cfg, machineconfig.Scheduler, "v1.37.0")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for _, tc := range []struct {
			data   []byte
			suffix string
		}{{cfg, "/kube-scheduler:" + kubernetes}, {moved, "/kube-scheduler:v1.37.0"}} {
			img, err := machineconfig.ComponentImage(tc.data, machineconfig.Scheduler)
			if err != nil || !strings.HasSuffix(img, tc.suffix) {
				t.Fatalf("scheduler image %q, %v; want one ending in %s", img, err, tc.suffix)
			}
			api, err := machineconfig.ComponentImage(tc.data, machineconfig.APIServer)
			if err != nil || !strings.Contains(api, "/kube-apiserver:") {
				t.Fatalf("API server image %q, %v", api, err)
			}
		}
		if _, err := machineconfig.ComponentImage([]byte("version: v1alpha1\nmachine: [\n"), machineconfig.Scheduler); err == nil {
			t.Fatal("a config that cannot be parsed gave an image")
		}
	}
	if _, err := machineconfig.ComponentImage(cfg, "etcd"); err == nil {
		t.Fatal("an unknown component gave an image")
	}
}
