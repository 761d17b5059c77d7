package lab_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/kube"
	"github.com/taloscluster/taloscluster/lab/talos"
	"github.com/taloscluster/taloscluster/providers/proxmox"
)

// labCluster is a cluster of three control planes and two workers built on
// the lab's Proxmox, as a provider would: one VM per machine with its
// config ISO.
type labCluster struct {
	l     *lab.Lab
	api   pveAPI
	name  string
	vip   netip.Addr
	tc    *clientconfig.Config
	vmids map[string]int        // by hostname
	addrs map[string]netip.Addr // by hostname
	hosts []string
}

func (c *labCluster) cp(i int) string     { return fmt.Sprintf("%s-cp-%d", c.name, i) }
func (c *labCluster) worker(i int) string { return fmt.Sprintf("%s-w-%d", c.name, i) }

// machineConfig is the config of one machine of the cluster: hostname and,
// on control planes, the API VIP.
func machineConfig(t *testing.T, in *generate.Input, typ machinetype.Type, hostname string, vip netip.Addr) []byte {
	t.Helper()

	cfg, err := in.Config(typ)
	if err != nil {
		t.Fatal(err)
	}

	var docs []configconfig.Document

	for _, d := range cfg.Documents() {
		if d.Kind() != network.HostnameKind {
			docs = append(docs, d)
		}
	}

	host := network.NewHostnameConfigV1Alpha1()
	host.ConfigHostname = hostname
	docs = append(docs, host)

	if typ == machinetype.TypeControlPlane {
		doc := network.NewLayer2VIPConfigV1Alpha1(vip.String())
		doc.LinkName = "eth0"
		docs = append(docs, doc)
	}

	out, err := container.New(docs...)
	if err != nil {
		t.Fatal(err)
	}

	data, err := out.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}

	return data
}

// startLabCluster starts a lab on subnet (127.N.0.0/24), builds the
// cluster's VMs, bootstraps it and waits until its three control planes
// are etcd voters and its five Kubernetes nodes Ready.
func startLabCluster(t *testing.T, subnet byte, opts lab.Options) *labCluster {
	t.Helper()

	opts.Bridges = map[string]netip.Prefix{"vmbr0": netip.PrefixFrom(netip.AddrFrom4([4]byte{127, subnet, 0, 0}), 24)}
	opts.TaskDuration = -1

	l, err := lab.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(l.Close)

	c := &labCluster{
		l: l, api: newPVEAPI(l), name: fmt.Sprintf("s%d", subnet), vip: netip.AddrFrom4([4]byte{127, subnet, 0, 5}),
		vmids: map[string]int{}, addrs: map[string]netip.Addr{},
	}

	contract, err := config.ParseContractFromVersion("v1.13.0")
	if err != nil {
		t.Fatal(err)
	}

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		t.Fatal(err)
	}

	in, err := generate.NewInput(c.name, "https://"+net.JoinHostPort(c.vip.String(), "6443"), "1.35.1",
		generate.WithSecretsBundle(bundle), generate.WithVersionContract(contract))
	if err != nil {
		t.Fatal(err)
	}

	if c.tc, err = in.Talosconfig(); err != nil {
		t.Fatal(err)
	}

	c.hosts = []string{c.cp(1), c.cp(2), c.cp(3), c.worker(1), c.worker(2)}

	for i, host := range c.hosts {
		typ := machinetype.TypeWorker
		if strings.Contains(host, "-cp-") {
			typ = machinetype.TypeControlPlane
		}

		iso, err := proxmox.CIDataISO(host, machineConfig(t, in, typ, host, c.vip))
		if err != nil {
			t.Fatal(err)
		}

		id := 100 + i
		c.vmids[host] = id
		c.api.startVM(t, id, fmt.Sprintf("02:00:00:%02x:00:%02x", subnet, i+1), "cidata-"+host+".iso", iso)
	}

	eventually(t, "every node up", func() error {
		for _, n := range l.Talos.Nodes() {
			if n.Up && n.Mode == talos.ModeRunning {
				c.addrs[n.Hostname] = n.Addr
			}
		}

		if len(c.addrs) != len(c.hosts) {
			return fmt.Errorf("%d nodes up", len(c.addrs))
		}

		return nil
	})

	bootstrap(t, c.tc, c.addrs[c.cp(1)])

	eventually(t, "three voters and five Ready nodes", func() error {
		voters := 0

		for _, m := range l.Talos.EtcdMembers(c.name) {
			if m.Started && !m.Learner {
				voters++
			}
		}

		k, ok := l.Kube(c.name)
		if !ok || voters != 3 {
			return fmt.Errorf("%d voters", voters)
		}

		ready := 0

		for _, n := range k.Nodes() {
			if nodeReady(&n) == corev1.ConditionTrue {
				ready++
			}
		}

		if ready != len(c.hosts) {
			return fmt.Errorf("%d Ready nodes", ready)
		}

		return nil
	})

	return c
}

func (c *labCluster) kube(t *testing.T) (*kube.Server, kubernetes.Interface) {
	t.Helper()

	k, ok := c.l.Kube(c.name)
	if !ok {
		t.Fatal("no Kubernetes API")
	}

	cfg, err := k.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	return k, cs
}

func (c *labCluster) talos(t *testing.T) *client.Client {
	t.Helper()

	tc, err := client.New(t.Context(), client.WithConfig(c.tc), client.WithEndpoints(c.addrs[c.cp(1)].String()))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { tc.Close() }) //nolint:errcheck

	return tc
}

func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}

	return ""
}

// logIndex returns the index of the first log entry from i on that matches.
func logIndex(log []lab.LogEntry, from int, source, op, target string) int {
	for i := max(from, 0); i < len(log); i++ {
		if e := log[i]; e.Source == source && e.Op == op && strings.HasSuffix(e.Target, target) {
			return i
		}
	}

	return -1
}

// TestScaleDownThroughTheLab: pods and disruption budgets created through
// the Kubernetes API run on lab nodes and are evicted with the budgets'
// rules; a graceful reset cordons, drains, stops the kubelet (the Node
// NotReady, then Unknown after the grace period), leaves etcd and wipes,
// and the lab's log shows every step in order with the engine's Node and
// VM deletions after it; etcd keeps a majority throughout.
func TestScaleDownThroughTheLab(t *testing.T) {
	t.Parallel()

	const grace = time.Second

	c := startLabCluster(t, 253, lab.Options{NodeMonitorGracePeriod: grace, DrainTimeout: time.Second, EvictionRetry: 20 * time.Millisecond})
	k, cs := c.kube(t)
	ctx := t.Context()
	w1, w2 := c.worker(1), c.worker(2)

	controller := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: new(true)}}
	}

	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "web-a", Labels: map[string]string{"app": "web"}, OwnerReferences: controller("ReplicaSet", "web-1")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Labels: map[string]string{"app": "db"}, OwnerReferences: controller("StatefulSet", "db")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bare", Labels: map[string]string{"app": "bare"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "agent-w1", Labels: map[string]string{"app": "agent"}, OwnerReferences: controller("DaemonSet", "agent")}},
	}

	for _, p := range pods {
		p.Spec = corev1.PodSpec{NodeName: w1, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	one := intstr.FromInt32(1)

	for name, spec := range map[string]policyv1.PodDisruptionBudgetSpec{
		"web":  {MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		"db":   {MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
		"bare": {MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "bare"}}},
	} {
		if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("pods created through the API run on the lab node", func(t *testing.T) {
		for _, p := range pods {
			got, err := cs.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil || got.Status.Phase != corev1.PodRunning || got.Status.HostIP != c.addrs[w1].String() {
				t.Errorf("pod %s: %v, phase %s on %s", p.Name, err, got.Status.Phase, got.Status.HostIP)
			}
		}

		err := cs.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "default"}})
		if !apierrors.IsTooManyRequests(err) {
			t.Errorf("evicting the only pod of a budget of one: %v, want 429", err)
		}
	})

	tc := c.talos(t)
	hostIdx := len(c.l.Log())

	t.Run("graceful reset of a worker", func(t *testing.T) {
		if err := tc.ResetGeneric(client.WithNode(ctx, c.addrs[w1].String()), &machine.ResetRequest{Graceful: true}); err != nil {
			t.Fatal(err)
		}

		eventually(t, "the worker off", func() error {
			if st, _ := c.l.Talos.Node(c.addrs[w1]); st.Mode != talos.ModeOff {
				return fmt.Errorf("%+v", st)
			}

			return nil
		})

		// The guest powered its machine off: Proxmox lists the VM stopped.
		eventually(t, "the worker's VM stopped", func() error {
			for _, v := range c.l.PVE.VMs() {
				if v.ID == c.vmids[w1] && v.Running {
					return fmt.Errorf("VM %d (%s) is still running", v.ID, v.Name)
				}
			}

			return nil
		})

		var node *corev1.Node

		for _, n := range k.Nodes() {
			if n.Name == w1 {
				node = &n
			}
		}

		if node == nil || !node.Spec.Unschedulable || node.Annotations[lab.AnnotationCordoned] != "true" {
			t.Fatalf("the reset node %+v, want it cordoned by Talos", node)
		}

		if nodeReady(node) != corev1.ConditionFalse {
			t.Errorf("Ready of the reset node right after it stopped: %s, want False (node is shutting down)", nodeReady(node))
		}

		status := map[string]string{}

		for _, p := range k.Pods() {
			status[p.Name] = string(p.Status.Phase) + " on " + p.Spec.NodeName
		}

		if _, ok := status["web-a"]; ok {
			t.Errorf("web-a was not evicted: %v", status)
		}

		if status["bare"] != "Failed on "+w1 || status["db-0"] != "Running on "+w2 {
			t.Errorf("pods after the reset %v: bare is skipped by the drain and fails, db-0 (its budget refused the eviction) fails and comes back on %s", status, w2)
		}

		log := c.l.Log()
		cordon := logIndex(log, hostIdx, "kubernetes", "update nodes", " "+w1)
		cordoned := logIndex(log, cordon, "lab", "reset-cordon", w1)
		evict := logIndex(log, cordoned, "kubernetes", "create pods/eviction", " web-a")
		refused := logIndex(log, cordoned, "kubernetes", "create pods/eviction", " db-0")
		drained := logIndex(log, evict, "lab", "reset-drain", w1)
		stopped := logIndex(log, drained, "lab", "kubelet-stopped", w1)
		wiped := logIndex(log, stopped, "lab", "wipe", w1)

		if cordon < 0 || cordoned < 0 || evict < 0 || refused < 0 || drained < 0 || stopped < 0 || wiped < 0 {
			var lines []string
			for _, e := range log[hostIdx:] {
				lines = append(lines, fmt.Sprintf("%s %s %s %s", e.Source, e.Op, e.Target, e.Result))
			}

			t.Fatalf("reset steps out of order (cordon %d, %d; evictions %d, %d; drain %d; kubelet %d; wipe %d):\n%s",
				cordon, cordoned, evict, refused, drained, stopped, wiped, strings.Join(lines, "\n"))
		}

		if log[refused].Result != "429" {
			t.Errorf("the eviction of db-0 answered %s, want 429", log[refused].Result)
		}

		if w := logIndex(log, refused, "lab", "drain-warning", w1); w < 0 || w > drained || !strings.Contains(log[w].Result, "default/db-0") {
			t.Errorf("no drain warning for db-0 before the drain ended")
		}

		// The engine deletes the Node, then the VM.
		if err := cs.CoreV1().Nodes().Delete(ctx, w1, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		// The lab's Proxmox does not see a guest power itself off, so the
		// VM is stopped first.
		c.api.task(t, http.MethodPost, "/nodes/pve1/qemu/"+fmt.Sprint(c.vmids[w1])+"/status/stop", nil)
		c.api.task(t, http.MethodDelete, "/nodes/pve1/qemu/"+fmt.Sprint(c.vmids[w1]), url.Values{"purge": {"1"}})

		log = c.l.Log()
		deleted := logIndex(log, wiped, "kubernetes", "delete nodes", " "+w1)
		vmDeleted := logIndex(log, deleted, "proxmox", "qemu.delete", "")

		if deleted < 0 || vmDeleted < 0 {
			t.Errorf("Node deletion %d and VM deletion %d not after the wipe %d", deleted, vmDeleted, wiped)
		}

		for _, p := range k.Pods() {
			if p.Spec.NodeName == w1 {
				t.Errorf("pod %s still bound to the deleted node", p.Name)
			}
		}
	})

	t.Run("a node whose machine stops turns NotReady after the grace period", func(t *testing.T) {
		c.api.task(t, http.MethodPost, "/nodes/pve1/qemu/"+fmt.Sprint(c.vmids[w2])+"/status/stop", nil)

		stoppedAt := time.Now()

		for _, n := range k.Nodes() {
			if n.Name == w2 && nodeReady(&n) != corev1.ConditionTrue {
				t.Fatalf("Ready of %s right after its VM stopped: %s, want True until the grace period ends", w2, nodeReady(&n))
			}
		}

		eventually(t, w2+" Unknown", func() error {
			for _, n := range k.Nodes() {
				if n.Name == w2 && nodeReady(&n) != corev1.ConditionUnknown {
					return fmt.Errorf("Ready %s", nodeReady(&n))
				}
			}

			return nil
		})

		if d := time.Since(stoppedAt); d < grace*9/10 {
			t.Errorf("Unknown after %v, before the grace period of %v", d, grace)
		}
	})

	t.Run("graceful reset of a control plane", func(t *testing.T) {
		cp3 := c.cp(3)
		before := len(c.l.Log())

		if err := tc.ResetGeneric(client.WithNode(ctx, c.addrs[cp3].String()), &machine.ResetRequest{Graceful: true}); err != nil {
			t.Fatal(err)
		}

		eventually(t, "cp3 off", func() error {
			if st, _ := c.l.Talos.Node(c.addrs[cp3]); st.Mode != talos.ModeOff {
				return fmt.Errorf("%+v", st)
			}

			return nil
		})

		log := c.l.Log()
		stopped := logIndex(log, before, "lab", "kubelet-stopped", cp3)
		removed := logIndex(log, stopped, "etcd", "remove", " "+cp3)
		left := logIndex(log, removed, "lab", "etcd-leave", cp3)
		wiped := logIndex(log, left, "lab", "wipe", cp3)

		if stopped < 0 || removed < 0 || left < 0 || wiped < 0 {
			t.Errorf("control plane reset out of order: kubelet %d, removal %d, leave %d, wipe %d", stopped, removed, left, wiped)
		}

		history := c.l.Talos.EtcdHistory(c.name)
		for i, s := range history {
			if !s.Quorum() {
				t.Errorf("etcd without a majority at entry %d: %+v", i, s)
			}
		}

		if last := history[len(history)-1]; len(last.Voters) != 2 || slices.Contains(last.Voters, cp3) {
			t.Errorf("voters after the reset: %+v", last)
		}
	})

	nodeOf := func(name string) *corev1.Node {
		for _, n := range k.Nodes() {
			if n.Name == name {
				return &n
			}
		}

		t.Fatalf("no Node %s", name)

		return nil
	}

	waitRegistered := func(name string) {
		t.Helper()

		eventually(t, name+" Ready again", func() error {
			if !k.KubeletRunning(name) || nodeReady(nodeOf(name)) != corev1.ConditionTrue {
				return fmt.Errorf("Ready %s", nodeReady(nodeOf(name)))
			}

			return nil
		})
	}

	t.Run("a reset that fails part-way", func(t *testing.T) {
		cp2 := c.cp(2)
		if err := c.l.Inject(lab.Fault{Kind: "talos-reset-fails", Addr: c.addrs[cp2].String()}); err != nil {
			t.Fatal(err)
		}

		if err := tc.ResetGeneric(client.WithNode(ctx, c.addrs[cp2].String()), &machine.ResetRequest{Graceful: true}); err != nil {
			t.Fatal(err)
		}

		eventually(t, "the reset to fail", func() error {
			if i := logIndex(c.l.Log(), 0, "lab", "reset-failed", cp2); i < 0 {
				return errors.New("not yet")
			}

			return nil
		})

		n := nodeOf(cp2)
		if !n.Spec.Unschedulable || n.Annotations[lab.AnnotationCordoned] != "true" || nodeReady(n) == corev1.ConditionTrue || k.KubeletRunning(cp2) {
			t.Errorf("Node after the failed reset: unschedulable %t, annotations %v, Ready %s, kubelet running %t",
				n.Spec.Unschedulable, n.Annotations, nodeReady(n), k.KubeletRunning(cp2))
		}

		if _, err := tc.Version(client.WithNode(ctx, c.addrs[cp2].String())); err != nil {
			t.Errorf("the Talos API after the failed reset: %v", err)
		}

		started := 0

		for _, m := range c.l.Talos.EtcdMembers(c.name) {
			if m.Hostname == cp2 && m.Started && !m.Learner {
				started++
			}
		}

		if started != 1 {
			t.Errorf("cp2's etcd member after the failed reset: %+v", c.l.Talos.EtcdMembers(c.name))
		}
	})

	t.Run("on boot Talos uncordons only the Nodes it cordoned", func(t *testing.T) {
		cp1, cp2 := c.cp(1), c.cp(2)

		n := nodeOf(cp1)
		n.Spec.Unschedulable = true

		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}

		for _, host := range []string{cp2, cp1} {
			before, _ := c.l.Talos.Node(c.addrs[host])

			if err := tc.Reboot(client.WithNode(ctx, c.addrs[host].String())); err != nil {
				t.Fatal(err)
			}

			// Booted again (on a busy machine the moment it was down can be
			// too short to see).
			eventually(t, host+" to reboot", func() error {
				if st, _ := c.l.Talos.Node(c.addrs[host]); st.Boots <= before.Boots {
					return errors.New("not rebooted yet")
				}

				return nil
			})

			waitRegistered(host)
		}

		eventually(t, "cp2 uncordoned", func() error {
			if n := nodeOf(cp2); n.Spec.Unschedulable || n.Annotations[lab.AnnotationCordoned] != "" {
				return fmt.Errorf("cp2 unschedulable %t, annotations %v", n.Spec.Unschedulable, n.Annotations)
			}

			return nil
		})

		if n := nodeOf(cp1); !n.Spec.Unschedulable {
			t.Error("Talos uncordoned a Node it had not cordoned")
		}
	})
}

// TestKubernetesAPIFollowsTheVIP: the API endpoint refuses connections
// while no control plane holds the VIP and answers again once one does;
// kubelets register only while it answers.
func TestKubernetesAPIFollowsTheVIP(t *testing.T) {
	t.Parallel()

	c := startLabCluster(t, 254, lab.Options{NodeMonitorGracePeriod: 200 * time.Millisecond})
	k, cs := c.kube(t)
	ctx := t.Context()

	for _, host := range []string{c.cp(1), c.cp(2), c.cp(3)} {
		c.api.task(t, http.MethodPost, "/nodes/pve1/qemu/"+fmt.Sprint(c.vmids[host])+"/status/stop", nil)
	}

	eventually(t, "the API endpoint to close", func() error {
		if k.Serving() {
			return errors.New("still serving")
		}

		return nil
	})

	conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.vip.String(), "6443"), time.Second)
	if err == nil {
		conn.Close()
		t.Fatal("the API endpoint accepted a connection with every control plane off")
	}

	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dialing the API endpoint: %v, want connection refused", err)
	}

	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("the API answered with every control plane off")
	}

	// A worker that reboots meanwhile cannot register; the Node stays as
	// it was.
	w1 := c.worker(1)
	c.api.task(t, http.MethodPost, "/nodes/pve1/qemu/"+fmt.Sprint(c.vmids[w1])+"/status/stop", nil)
	c.api.task(t, http.MethodPost, "/nodes/pve1/qemu/"+fmt.Sprint(c.vmids[w1])+"/status/start", nil)

	eventually(t, "the worker up", func() error {
		if st, _ := c.l.Talos.Node(c.addrs[w1]); !st.Up || st.Mode != talos.ModeRunning {
			return fmt.Errorf("%+v", st)
		}

		return nil
	})

	time.Sleep(100 * time.Millisecond)

	if k.KubeletRunning(w1) {
		t.Error("the worker's kubelet registered without an API")
	}

	for _, host := range []string{c.cp(1), c.cp(2)} {
		c.api.task(t, http.MethodPost, "/nodes/pve1/qemu/"+fmt.Sprint(c.vmids[host])+"/status/start", nil)
	}

	eventually(t, "the API and the worker's kubelet back", func() error {
		if _, err := cs.CoreV1().Nodes().Get(ctx, w1, metav1.GetOptions{}); err != nil {
			return err
		}

		if !k.KubeletRunning(w1) {
			return errors.New("the worker has not registered")
		}

		return nil
	})

	var ops []string

	for _, e := range c.l.Log() {
		if e.Source == "lab" && strings.HasPrefix(e.Op, "kube-api-") {
			ops = append(ops, e.Op)
		}
	}

	if !slices.Equal(ops, []string{"kube-api-up", "kube-api-down", "kube-api-up"}) {
		t.Errorf("API events %v", ops)
	}
}
