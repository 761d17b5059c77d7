package lab_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"

	"github.com/taloscluster/taloscluster/lab"
)

// TestControlPlaneFollowsConfig: the static pods of a control plane, its
// kubelet and the API's /version follow the node's machine config after a
// live apply, as Talos's Kubernetes upgrade waits for them.
func TestControlPlaneFollowsConfig(t *testing.T) {
	t.Parallel()

	c := startLabCluster(t, 251, lab.Options{})
	k, cs := c.kube(t)
	tc := c.talos(t)
	ctx := t.Context()

	pod := func(component, host string) (*corev1.Pod, error) {
		return cs.CoreV1().Pods("kube-system").Get(ctx, component+"-"+host, metav1.GetOptions{})
	}

	check := func(component, host, version, image string) error {
		p, err := pod(component, host)
		if err != nil {
			return err
		}

		ready := false
		for _, cond := range p.Status.Conditions {
			ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
		}

		switch {
		case p.Labels["k8s-app"] != component:
			return fmt.Errorf("labels %v", p.Labels)
		case p.Annotations["talos.dev/config-version"] != version:
			return fmt.Errorf("config version %q, want %q", p.Annotations["talos.dev/config-version"], version)
		case !strings.HasSuffix(p.Spec.Containers[0].Image, image):
			return fmt.Errorf("image %q", p.Spec.Containers[0].Image)
		case p.Status.HostIP != c.addrs[host].String():
			return fmt.Errorf("host IP %q", p.Status.HostIP)
		case !ready:
			return errors.New("not Ready")
		}

		return nil
	}

	for _, host := range []string{c.cp(1), c.cp(2), c.cp(3)} {
		for _, comp := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			eventually(t, comp+" on "+host, func() error { return check(comp, host, "1", "") })
		}
	}

	const target = "v1.37.9"

	patch, err := configpatcher.LoadPatch([]byte(`cluster:
  apiServer:
    image: registry.k8s.io/kube-apiserver:` + target + `
machine:
  kubelet:
    image: ghcr.io/siderolabs/kubelet:` + target + `
`))
	if err != nil {
		t.Fatal(err)
	}

	for _, host := range []string{c.cp(1), c.cp(2), c.cp(3)} {
		nctx := client.WithNode(ctx, c.addrs[host].String())

		mc, err := safe.StateGetByID[*configres.MachineConfig](nctx, tc.COSI, configres.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		out, err := configpatcher.Apply(configpatcher.WithConfig(mc.Provider()), []configpatcher.Patch{patch})
		if err != nil {
			t.Fatal(err)
		}

		data, err := out.Bytes()
		if err != nil {
			t.Fatal(err)
		}

		resp, err := tc.ApplyConfiguration(nctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
		if err != nil {
			t.Fatal(err)
		}

		if got := resp.GetMessages()[0].GetModeDetails(); got != "Applied configuration without a reboot" {
			t.Fatalf("apply to %s: %q", host, got)
		}

		eventually(t, "the new kube-apiserver on "+host, func() error { return check("kube-apiserver", host, "2", ":"+target) })
		eventually(t, "the new kubelet on "+host, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, host, metav1.GetOptions{})
			if err != nil {
				return err
			}

			if n.Status.NodeInfo.KubeletVersion != target || nodeReady(n) != corev1.ConditionTrue {
				return fmt.Errorf("kubelet %s, Ready %s", n.Status.NodeInfo.KubeletVersion, nodeReady(n))
			}

			return nil
		})

		if err := check("kube-scheduler", host, "1", ""); err != nil {
			t.Errorf("kube-scheduler on %s changed: %v", host, err)
		}
	}

	eventually(t, "/version to follow the API server", func() error {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			return err
		}

		if v.GitVersion != target || k.Version() != target {
			return fmt.Errorf("/version %s", v.GitVersion)
		}

		return nil
	})

	// The control API reports the versions.
	w := c.l.World()
	for _, n := range w.Nodes {
		if n.Cluster != c.name {
			continue
		}

		want := target
		if strings.Contains(n.Hostname, "-w-") {
			want = ""
		}

		if n.Talos == "" || n.Talos != n.Version || want != "" && (n.ConfigKubernetes != want || n.Kubelet != want) || want == "" && (n.ConfigKubernetes == "" || n.Kubelet != n.ConfigKubernetes) {
			t.Errorf("node view %+v", n)
		}
	}

	for _, cv := range w.Clusters {
		if cv.Name != c.name {
			continue
		}

		if cv.Kubernetes != target || len(cv.ControlPlane) != 3 || !strings.HasPrefix(cv.KubeProxy, "v1.") {
			t.Errorf("cluster view %+v", cv)
		}

		for _, cp := range cv.ControlPlane {
			if cp.APIServer != target || cp.ControllerManager == "" || cp.ControllerManager == target || cp.Scheduler != cp.ControllerManager {
				t.Errorf("control plane view %+v", cp)
			}
		}
	}
}

// TestKubeProxyDaemonSet: kube-proxy runs as the DaemonSet of Talos's
// bootstrap manifests, a Ready pod per node with the image of
// .cluster.proxy.image; a changed config alone does not touch it (the
// manifests are only created when missing), an update through the
// Kubernetes API rolls its pods to the new image one node at a time.
func TestKubeProxyDaemonSet(t *testing.T) {
	t.Parallel()

	c := startLabCluster(t, 252, lab.Options{})
	_, cs := c.kube(t)
	ctx := t.Context()

	proxyPods := func(image string) error {
		pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
		if err != nil {
			return err
		}

		on := map[string]bool{}
		for _, p := range pods.Items {
			if !strings.HasSuffix(p.Spec.Containers[0].Image, image) || p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s on %s: image %s", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image)
			}

			if p.Status.Phase != corev1.PodRunning || p.OwnerReferences[0].Kind != "DaemonSet" {
				return fmt.Errorf("pod %s on %s: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			}

			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status != corev1.ConditionTrue {
					return fmt.Errorf("pod %s on %s not Ready", p.Name, p.Spec.NodeName)
				}
			}

			on[p.Spec.NodeName] = true
		}

		for _, h := range c.hosts {
			if !on[h] {
				return fmt.Errorf("no kube-proxy on %s", h)
			}
		}

		return nil
	}

	var initial string

	eventually(t, "kube-proxy on every node", func() error {
		ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil {
			return err
		}

		initial = ds.Spec.Template.Spec.Containers[0].Image
		if !strings.HasPrefix(initial, "registry.k8s.io/kube-proxy:") {
			return fmt.Errorf("image %s", initial)
		}

		if ds.Status.NumberReady != int32(len(c.hosts)) || ds.Status.UpdatedNumberScheduled != int32(len(c.hosts)) {
			return fmt.Errorf("status %+v", ds.Status)
		}

		return proxyPods(initial)
	})

	const image = "registry.k8s.io/kube-proxy:v1.37.9"

	ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ds.Spec.Template.Spec.Containers[0].Image = image

	if _, err := cs.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// maxUnavailable 1: never more than one node without a Ready pod.
	for deadline := time.Now().Add(time.Minute); ; {
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy not rolled: %v", proxyPods(image))
		}

		pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
		if err != nil {
			t.Fatal(err)
		}

		ready := 0
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}

		if ready < len(c.hosts)-1 {
			t.Fatalf("%d of %d kube-proxy pods Ready during the rollout", ready, len(c.hosts))
		}

		if proxyPods(image) == nil {
			break
		}

		time.Sleep(20 * time.Millisecond)
	}

	got, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if got.Generation != 2 || got.Status.ObservedGeneration != 2 || got.Status.UpdatedNumberScheduled != int32(len(c.hosts)) {
		t.Errorf("generation %d, status %+v", got.Generation, got.Status)
	}

	// A strategic merge patch rolls it again.
	patch := `{"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy","image":"` + initial + `"}]}}}}`
	if _, err := cs.AppsV1().DaemonSets("kube-system").Patch(ctx, "kube-proxy", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	eventually(t, "kube-proxy back on "+initial, func() error { return proxyPods(initial) })
}

// TestLogNamesRolloutCalls: the lab's operation log names each Talos call
// of a rollout by its method and node, and the node's lifecycle: an apply
// that reboots, and a reboot, each show the node leaving and then joining
// again; talosctl's upgrade (ImageService.Pull, LifecycleService.Upgrade,
// then a Reboot) brings the node back on the new version with a new boot
// ID; and the legacy Upgrade also cycles the node. (A call is logged when
// it is answered, so with no shutdown delay the node may be seen leaving
// before the call that made it leave.)
func TestLogNamesRolloutCalls(t *testing.T) {
	t.Parallel()

	c := startLabCluster(t, 219, lab.Options{})
	tc := c.talos(t)
	ctx := t.Context()
	w1 := c.worker(1)
	addr := c.addrs[w1].String()
	nctx := client.WithNode(ctx, addr)

	mc, err := safe.StateGetByID[*configres.MachineConfig](nctx, tc.COSI, configres.ActiveID)
	if err != nil {
		t.Fatal(err)
	}

	patch, err := configpatcher.LoadPatch([]byte("machine:\n  env:\n    https_proxy: http://127.0.0.1:3128\n"))
	if err != nil {
		t.Fatal(err)
	}

	out, err := configpatcher.Apply(configpatcher.WithConfig(mc.Provider()), []configpatcher.Patch{patch})
	if err != nil {
		t.Fatal(err)
	}

	data, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	// since returns the log entries after mark.
	since := func(mark time.Time) []lab.LogEntry {
		var out []lab.LogEntry
		for _, e := range c.l.Log() {
			if e.Time.After(mark) {
				out = append(out, e)
			}
		}

		return out
	}

	find := func(log []lab.LogEntry, from int, source, op, target string) int {
		for i := from; i < len(log); i++ {
			named := log[i].Op == op || log[i].Service+"."+log[i].Op == op
			if log[i].Source == source && named && strings.Contains(log[i].Target, target) {
				return i
			}
		}

		return -1
	}

	cycle := func(what, method string, call func() error) {
		t.Helper()

		mark := time.Now()

		if err := call(); err != nil {
			t.Fatal(err)
		}

		eventually(t, what+" in the log", func() error {
			log := since(mark)
			called := find(log, 0, "talos", method, addr)
			left := find(log, 0, "lab", "node-left", w1)
			joined := find(log, max(left, 0), "lab", "node-joined", w1)

			if called < 0 || left < 0 || joined < 0 {
				return fmt.Errorf("%s at %d, node-left at %d, node-joined after it at %d", method, called, left, joined)
			}

			return nil
		})
	}

	cycle("an apply with a reboot", "ApplyConfiguration", func() error {
		resp, err := tc.ApplyConfiguration(nctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_AUTO})
		if err == nil && resp.GetMessages()[0].GetMode() != machine.ApplyConfigurationRequest_REBOOT {
			return fmt.Errorf("an environment change applied with mode %s, want a reboot", resp.GetMessages()[0].GetMode())
		}

		return err
	})

	eventually(t, w1+" up again", func() error {
		_, err := tc.Version(nctx)

		return err
	})

	cycle("a reboot", "Reboot", func() error { return tc.Reboot(nctx) })

	// talosctl upgrade's way: pull the installer, run the streaming
	// upgrade, then reboot; the node comes back on the new version with a
	// new boot ID.
	eventually(t, w1+" up again", func() error {
		_, err := tc.Version(nctx)

		return err
	})

	before, _ := c.l.Talos.Node(c.addrs[w1])
	bootID := readBootID(nctx, t, tc)

	target := "v1.13.9"
	if before.Version == target {
		target = "v1.13.10"
	}

	image := "ghcr.io/siderolabs/installer:" + target
	system := &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}
	mark := time.Now()

	pull, err := tc.ImageClient.Pull(nctx, &machine.ImageServicePullRequest{Containerd: system, ImageRef: image})
	if err != nil {
		t.Fatal(err)
	}

	for {
		if _, err := pull.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("pulling %s: %v", image, err)
		}
	}

	upgrade, err := tc.LifecycleClient.Upgrade(nctx, &machine.LifecycleServiceUpgradeRequest{
		Containerd: system,
		Source:     &machine.InstallArtifactsSource{ImageName: image},
	})
	if err != nil {
		t.Fatal(err)
	}

	exit := int32(-1)

	for {
		msg, err := upgrade.Recv()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("upgrading to %s: %v", image, err)
		}

		if p, ok := msg.GetProgress().GetResponse().(*machine.LifecycleServiceInstallProgress_ExitCode); ok {
			exit = p.ExitCode
		}
	}

	if exit != 0 {
		t.Fatalf("the upgrade exited with %d", exit)
	}

	eventually(t, "the pull and the upgrade in the log", func() error {
		log := since(mark)
		pulled := find(log, 0, "talos", "ImageService.Pull", addr)
		upgraded := find(log, max(pulled, 0), "talos", "LifecycleService.Upgrade", addr)

		if pulled < 0 || upgraded < 0 {
			return fmt.Errorf("ImageService.Pull at %d, LifecycleService.Upgrade after it at %d", pulled, upgraded)
		}

		return nil
	})

	cycle("the upgrade's reboot", "Reboot", func() error { return tc.Reboot(nctx) })

	eventually(t, w1+" on "+target+" with a new boot ID", func() error {
		v, err := tc.Version(nctx)
		if err != nil {
			return err
		}

		if got := v.GetMessages()[0].GetVersion().GetTag(); got != target {
			return fmt.Errorf("version %s", got)
		}

		if id := readBootID(nctx, t, tc); id == bootID || id != c.l.Talos.BootID(c.addrs[w1]) {
			return fmt.Errorf("boot ID %s, before the reboot %s", id, bootID)
		}

		return nil
	})

	// The legacy upgrade (MachineService.Upgrade) back to the first image
	// reboots by itself.
	cycle("a legacy upgrade", "Upgrade", func() error {
		//lint:ignore SA1019 the lab emulates the legacy upgrade too
		_, err := tc.UpgradeWithOptions(nctx, client.WithUpgradeImage(before.Image))

		return err
	})
}

// readBootID reads the node's boot ID as talosctl's reboot wait does
// (cmd/talosctl/pkg/talos/action/tracker.go, getBootID).
func readBootID(ctx context.Context, t *testing.T, tc *client.Client) string {
	t.Helper()

	r, err := tc.Read(ctx, "/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}

	defer r.Close() //nolint:errcheck

	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading the boot ID: %v", err)
	}

	return strings.TrimSpace(string(data))
}
