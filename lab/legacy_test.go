package lab_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/lab"
)

// TestLegacyClusterRuns: the cluster the Python taloscluster would have
// left runs in the lab: its VMs in their pool with the Python tags, boot
// ISO on ide2 and no config ISO, etcd bootstrapped on three members, and
// the kubeconfig written beside cluster.yaml answers with every node.
func TestLegacyClusterRuns(t *testing.T) {
	t.Parallel()

	l, err := lab.Start(t.Context(), lab.Options{
		Bridges:       map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix("127.71.0.0/24")},
		TaskDuration:  -1,
		StatsInterval: -1,
		BootDelay:     20 * time.Millisecond, InstallDelay: 20 * time.Millisecond, ReadyDelay: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)

	dir := t.TempDir()
	if err := l.WriteLegacyCluster(t.Context(), dir, lab.Cluster{Name: "legacy", Workers: 1, Bridge: "vmbr0"}); err != nil {
		t.Fatal(err)
	}

	for _, f := range []string{"cluster.yaml", "secrets.yaml", "ca.pem", "talossecrets.yaml", "talosconfig", "kubeconfig"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}

	vms := l.PVE.VMs()
	if len(vms) != 4 {
		t.Fatalf("%d VMs, want 4", len(vms))
	}
	for _, vm := range vms {
		if vm.Pool != "taloscluster-legacy" || !vm.Running || !slices.Contains(vm.Tags, "cluster_legacy") {
			t.Errorf("VM %s: pool %q, running %v, tags %v", vm.Name, vm.Pool, vm.Running, vm.Tags)
		}
		if !strings.Contains(vm.Config["ide2"], "talos-v1.13.8-tailscale.iso") || vm.Config["ide3"] != "" {
			t.Errorf("VM %s: ide2 %q, ide3 %q; want the boot ISO and no config ISO", vm.Name, vm.Config["ide2"], vm.Config["ide3"])
		}
		if vm.FirewallOptions["dhcp"] != "1" || len(vm.FirewallRules) != 7 {
			t.Errorf("VM %s: firewall options %v, %d rules", vm.Name, vm.FirewallOptions, len(vm.FirewallRules))
		}
	}
	for _, v := range l.PVE.Volumes() {
		if strings.Contains(v.VolID, "cidata") {
			t.Errorf("config ISO %s left", v.VolID)
		}
	}
	if got := l.Talos.EtcdMembers("legacy"); len(got) != 3 {
		t.Errorf("%d etcd members, want 3", len(got))
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := kc.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 4 {
		t.Errorf("%d Kubernetes nodes, want 4", len(nodes.Items))
	}
}
