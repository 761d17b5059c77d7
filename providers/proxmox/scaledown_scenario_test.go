package proxmox_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/lab"
	labkube "github.com/taloscluster/taloscluster/lab/kube"
	"github.com/taloscluster/taloscluster/lab/pve"
	labtalos "github.com/taloscluster/taloscluster/lab/talos"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// Scale-down scenarios: each proves one rule of docs/safety.md against the
// lab, from the lab's operation log.

// built starts a lab and converges a cluster of three control planes and
// the given workers.
func built(t *testing.T, name string, workers int) (*world, context.Context) {
	t.Helper()
	w := newWorld(t, name, workers)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	t.Cleanup(cancel)
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("first converge: %v", err)
	}
	return w, ctx
}

// set changes keys of the world's cluster.yaml in place.
func (w *world) set(t *testing.T, kv ...string) {
	t.Helper()
	path := filepath.Join(w.dir, "cluster.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		var val yaml.Node
		if err := yaml.Unmarshal([]byte(kv[i+1]), &val); err != nil {
			t.Fatal(err)
		}
		setPath(t, doc.Content[0], strings.Split(kv[i], "."), val.Content[0])
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// kube returns the lab's Kubernetes server of the world's cluster and a
// client-go clientset with the cluster's kubeconfig.
func (w *world) kube(t *testing.T) (*labkube.Server, kubernetes.Interface) {
	t.Helper()
	k, ok := w.lab.Kube(w.name)
	if !ok {
		t.Fatal("the cluster has no Kubernetes API")
	}
	data, err := os.ReadFile(filepath.Join(w.dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k, cs
}

// since returns the lab's log entries after mark.
func since(l *lab.Lab, mark time.Time) []lab.LogEntry {
	var out []lab.LogEntry
	for _, e := range l.Log() {
		if e.Time.After(mark) {
			out = append(out, e)
		}
	}
	return out
}

// find returns the index of the first entry from start on that matches
// source, op (a Talos call's method, or its service and method such as
// LifecycleService.Upgrade) and a target containing target; -1 when there
// is none.
func find(log []lab.LogEntry, start int, source, op, target string) int {
	for i := max(start, 0); i < len(log); i++ {
		e := log[i]
		if e.Source == source && (e.Op == op || e.Service+"."+e.Op == op) && strings.Contains(e.Target, target) && !strings.HasPrefix(e.Result, "4") && !strings.HasPrefix(e.Result, "5") {
			return i
		}
	}
	return -1
}

// inOrder checks that the steps happen in the log in this order.
func inOrder(t *testing.T, log []lab.LogEntry, steps ...[3]string) {
	t.Helper()
	at := 0
	for _, s := range steps {
		i := find(log, at, s[0], s[1], s[2])
		if i < 0 {
			var lines []string
			for _, e := range log {
				if e.Op != "get nodes" && e.Op != "list nodes" && !strings.HasPrefix(e.Op, "qemu.status") {
					lines = append(lines, e.Source+" "+e.Op+" "+e.Target+" "+e.Result)
				}
			}
			t.Fatalf("no %s %s %s after entry %d; the log:\n%s", s[0], s[1], s[2], at, strings.Join(lines, "\n"))
		}
		at = i + 1
	}
}

func vmID(t *testing.T, w *world, name string) (string, bool) {
	t.Helper()
	for _, v := range w.lab.PVE.VMs() {
		if v.Name == name {
			return "/qemu/" + strconv.Itoa(v.ID), true
		}
	}
	return "", false
}

func TestScenarioWorkerRemovalOrder(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "shrink", 2)
	k, _ := w.kube(t)
	victim := w.name + "-worker-02"
	if _, err := k.AddPod(labkube.Pod{Node: victim, Labels: map[string]string{"app": "web"}, OwnerKind: "ReplicaSet", OwnerName: "web"}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.AddPod(labkube.Pod{Node: victim, Labels: map[string]string{"app": "agent"}, OwnerKind: "DaemonSet", OwnerName: "agent"}); err != nil {
		t.Fatal(err)
	}
	vm, ok := vmID(t, w, victim)
	if !ok {
		t.Fatal("no VM of the victim")
	}
	w.set(t, "workers.worker.count", "1")
	p, err := w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, ch := range p.Changes {
		if ch.Resource.Name == victim {
			steps = append(steps, string(ch.Action)+" "+string(ch.Resource.Kind))
		}
	}
	want := []string{"update node", "drain node", "reset machine", "delete node", "delete machine"}
	if !slices.Equal(steps, want) {
		t.Fatalf("steps for %s: %v, want %v", victim, steps, want)
	}
	mark := time.Now()
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("converge of the scale-down: %v", err)
	}
	log := since(w.lab, mark)
	inOrder(t, log,
		[3]string{"kubernetes", "patch nodes", victim},
		[3]string{"kubernetes", "create pods/eviction", "web"},
		[3]string{"talos", "Reset", ""},
		[3]string{"kubernetes", "delete nodes", victim},
		[3]string{"proxmox", "qemu.delete", vm},
	)
	if find(log, 0, "kubernetes", "create pods/eviction", "agent") >= 0 {
		t.Error("the DaemonSet pod was evicted")
	}
	if _, ok := vmID(t, w, victim); ok {
		t.Error("the VM is still there")
	}
	if _, ok := vmID(t, w, w.name+"-worker-01"); !ok {
		t.Error("worker-01 is gone")
	}
	if n := len(w.lab.Talos.EtcdMembers(w.name)); n != 3 {
		t.Errorf("%d etcd members, want 3", n)
	}
	// Idempotent: nothing is left to do.
	p, err = w.engine(t).Plan(ctx)
	if err != nil || !p.Empty() {
		t.Fatalf("plan after the scale-down: %v %s", err, p.Summary())
	}
}

func TestScenarioDisruptionBudgetMakesTheRunWait(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "pdb", 2)
	k, cs := w.kube(t)
	victim := w.name + "-worker-02"
	guarded(t, k, cs, victim)
	w.set(t, "workers.worker.count", "1")
	e := w.engine(t)
	e.DrainTimeout = 2 * time.Second
	mark := time.Now()
	err := e.Converge(ctx)
	s := reconcile.Settle(err)
	if s.Outcome != reconcile.Waiting || !strings.Contains(s.Reason, "PodDisruptionBudget") {
		t.Fatalf("converge with a blocking budget: %v (outcome %s), want waiting on the budget", err, s.Outcome)
	}
	log := since(w.lab, mark)
	if find(log, 0, "talos", "Reset", "") >= 0 || find(log, 0, "kubernetes", "delete nodes", victim) >= 0 || find(log, 0, "proxmox", "qemu.delete", "") >= 0 {
		t.Fatal("a run waiting on a drain reset or deleted something")
	}
	// The pull request is reverted: the node the engine cordoned is
	// uncordoned, since Talos never would.
	w.set(t, "workers.worker.count", "2")
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("converge after restoring the count: %v", err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil || n.Spec.Unschedulable {
		t.Fatalf("node %s after the revert: unschedulable=%v err=%v, want schedulable", victim, n.Spec.Unschedulable, err)
	}
}

func TestScenarioControlPlanesOneAtATime(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "cpdown", 0)
	vm3, vm2 := w.vm(t, w.name+"-controlplane-03").ID, w.vm(t, w.name+"-controlplane-02").ID
	w.nodeAddr(t, w.name+"-controlplane-03")
	w.nodeAddr(t, w.name+"-controlplane-02")
	w.set(t, "controlplane.count", "1")
	mark := time.Now()
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("converge 3 -> 1 control planes: %v", err)
	}
	log := since(w.lab, mark)
	cp3, cp2 := w.name+"-controlplane-03", w.name+"-controlplane-02"
	inOrder(t, log,
		[3]string{"talos", "EtcdMemberList", ""}, // the gate before controlplane-03
		[3]string{"talos", "Reset", w.nodeAddr(t, cp3)},
		[3]string{"kubernetes", "delete nodes", cp3},
		[3]string{"proxmox", "qemu.delete", "/qemu/" + strconv.Itoa(vm3)},
		[3]string{"talos", "EtcdMemberList", ""}, // the gate before controlplane-02
		[3]string{"talos", "Reset", w.nodeAddr(t, cp2)},
		[3]string{"kubernetes", "delete nodes", cp2},
		[3]string{"proxmox", "qemu.delete", "/qemu/" + strconv.Itoa(vm2)},
	)
	members := w.lab.Talos.EtcdMembers(w.name)
	if len(members) != 1 {
		t.Fatalf("etcd members after 3 -> 1: %v", members)
	}
	p, err := w.engine(t).Plan(ctx)
	if err != nil || !p.Empty() {
		t.Fatalf("plan after the scale-down: %v %s", err, p.Summary())
	}
}

func TestScenarioEvenControlPlaneCountRefused(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "even", 0)
	w.set(t, "controlplane.count", "2")
	before := w.mutations()
	err := w.engine(t).Converge(ctx)
	if err == nil || !strings.Contains(err.Error(), "two etcd members") {
		t.Fatalf("converge 3 -> 2: %v, want a refusal naming two etcd members", err)
	}
	if reconcile.Settle(err).Outcome != reconcile.Failed {
		t.Errorf("outcome %s, want failure", reconcile.Settle(err).Outcome)
	}
	if w.mutations() != before {
		t.Error("a refused scale-down changed something")
	}
}

func TestScenarioFailedControlPlaneResetKeepsTheVM(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "cpfail", 0)
	cp3 := w.name + "-controlplane-03"
	var addr string
	for _, n := range w.lab.Talos.Nodes() {
		if n.Hostname == cp3 {
			addr = n.Addr.String()
		}
	}
	if addr == "" {
		t.Fatal("no node of controlplane-03")
	}
	if err := w.lab.Inject(lab.Fault{Kind: "talos-reset-fails", Addr: addr, N: 1}); err != nil {
		t.Fatal(err)
	}
	w.set(t, "controlplane.count", "1")
	mark := time.Now()
	err := w.engine(t).Converge(ctx)
	if reconcile.Settle(err).Outcome != reconcile.Failed || !strings.Contains(err.Error(), "VM is kept") {
		t.Fatalf("converge with a failing reset: %v (outcome %s), want a failure that keeps the VM", err, reconcile.Settle(err).Outcome)
	}
	log := since(w.lab, mark)
	if find(log, 0, "proxmox", "qemu.delete", "") >= 0 || find(log, 0, "kubernetes", "delete nodes", "") >= 0 {
		t.Fatal("a control plane whose reset failed was deleted")
	}
	if _, ok := vmID(t, w, cp3); !ok {
		t.Fatal("the VM of the control plane whose reset failed is gone")
	}
	if n := len(w.lab.Talos.EtcdMembers(w.name)); n != 3 {
		t.Fatalf("%d etcd members, want 3 (nothing left etcd)", n)
	}
}

// nodeAddr returns the Talos address of the machine of that hostname,
// remembered from the first look (a reset node forgets its name).
func (w *world) nodeAddr(t *testing.T, hostname string) string {
	t.Helper()
	if a, ok := w.addrs[hostname]; ok {
		return a
	}
	for _, n := range w.lab.Talos.Nodes() {
		if n.Hostname == hostname {
			if w.addrs == nil {
				w.addrs = map[string]string{}
			}
			w.addrs[hostname] = n.Addr.String()
			return n.Addr.String()
		}
	}
	t.Fatalf("no Talos node %s", hostname)
	return ""
}

// vm returns the lab's VM of that name.
func (w *world) vm(t *testing.T, name string) pve.VMState {
	t.Helper()
	for _, v := range w.lab.PVE.VMs() {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no VM %s", name)
	return pve.VMState{}
}

// stopVM powers a VM off through the Proxmox API, as a crash would look,
// and waits until it is stopped.
func (w *world) stopVM(t *testing.T, name string) {
	t.Helper()
	v := w.vm(t, name)
	w.pve(t, http.MethodPost, fmt.Sprintf("/nodes/%s/qemu/%d/status/stop", v.Node, v.ID), nil)
	waitFor(t, name+" stopped", func() bool { return !w.vm(t, name).Running })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestScenarioMachineWithoutNodeIsDeleted(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "nonode", 2)
	_, cs := w.kube(t)
	victim := w.name + "-worker-02"
	// A prior run reset the node and deleted its Node, then its VM delete
	// failed: the VM is there, powered off, with no Node.
	w.stopVM(t, victim)
	if err := cs.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.set(t, "workers.worker.count", "1")
	mark := time.Now()
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("converge: %v", err)
	}
	log := since(w.lab, mark)
	if find(log, 0, "talos", "Reset", "") >= 0 {
		t.Error("a powered-off machine was reset")
	}
	inOrder(t, log, [3]string{"proxmox", "qemu.delete", ""})
	if _, ok := vmID(t, w, victim); ok {
		t.Fatal("the VM without a Node was left")
	}
}

func TestScenarioNodeWithoutMachineIsDeleted(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "novm", 2)
	_, cs := w.kube(t)
	victim := w.name + "-worker-02"
	v := w.vm(t, victim)
	w.stopVM(t, victim)
	w.pve(t, http.MethodDelete, fmt.Sprintf("/nodes/%s/qemu/%d", v.Node, v.ID), nil)
	waitFor(t, victim+" deleted", func() bool { _, ok := vmID(t, w, victim); return !ok })
	waitFor(t, victim+" NotReady", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status != "True"
			}
		}
		return false
	})
	w.set(t, "workers.worker.count", "1")
	mark := time.Now()
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("converge: %v", err)
	}
	log := since(w.lab, mark)
	inOrder(t, log, [3]string{"kubernetes", "delete nodes", victim})
	if find(log, 0, "proxmox", "qemu.delete", "") >= 0 || find(log, 0, "talos", "Reset", "") >= 0 {
		t.Error("a Node without a VM made the engine reset or delete a VM")
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{}); err == nil {
		t.Fatal("the Node whose VM is gone is still there")
	}
}

func TestScenarioDeadControlPlaneLeavesThroughTheSurvivors(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "deadcp", 0)
	cp3 := w.name + "-controlplane-03"
	w.stopVM(t, cp3)
	w.set(t, "controlplane.count", "1")
	mark := time.Now()
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("converge 3 -> 1 with controlplane-03 dead: %v", err)
	}
	log := since(w.lab, mark)
	inOrder(t, log,
		[3]string{"talos", "EtcdRemoveMemberByID", ""},
		[3]string{"kubernetes", "delete nodes", cp3},
		[3]string{"proxmox", "qemu.delete", ""},
		[3]string{"talos", "Reset", ""},
		[3]string{"kubernetes", "delete nodes", w.name + "-controlplane-02"},
	)
	if ms := w.lab.Talos.EtcdMembers(w.name); len(ms) != 1 {
		t.Fatalf("etcd members after 3 -> 1: %v", ms)
	}
}

func TestScenarioUnreadableMembersKeepTheMachine(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "nolist", 0)
	cp3 := w.name + "-controlplane-03"
	w.stopVM(t, cp3)
	w.set(t, "controlplane.count", "1")
	e := w.engine(t)
	e.ReadBudget = time.Second
	// Observation reads the members first; the fault hits the reads
	// after it.
	p, err := e.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Removals(p)) == 0 {
		t.Fatalf("no removal planned: %s", p.Summary())
	}
	for _, n := range w.lab.Talos.Nodes() {
		if n.Cluster == w.name {
			if err := w.lab.Inject(lab.Fault{Kind: "talos-fail", Op: "EtcdMemberList", Addr: n.Addr.String(), N: 1000}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mark := time.Now()
	err = e.Converge(ctx)
	if err == nil || !strings.Contains(err.Error(), "etcd-member "+cp3) || !strings.Contains(err.Error(), "could not be read from any surviving control plane") {
		t.Fatalf("converge without the etcd members: %v, want the etcd-member step of %s to stop on the unread list", err, cp3)
	}
	if s := reconcile.Settle(err); s.Outcome != reconcile.Transient {
		t.Errorf("outcome %s, want transient: the members may be read again", s.Outcome)
	}
	log := since(w.lab, mark)
	if find(log, 0, "proxmox", "qemu.delete", "") >= 0 || find(log, 0, "talos", "EtcdRemoveMemberByID", "") >= 0 {
		t.Fatalf("the members could not be read, yet a member or VM was removed: %v", err)
	}
	if _, ok := vmID(t, w, cp3); !ok {
		t.Fatal("the dead control plane's VM is gone")
	}
}

func TestScenarioEtcdGateIgnoresTheAPI(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "gate", 0)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	w.set(t, "controlplane.count", "5")
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("first converge: %v", err)
	}
	// controlplane-02 stays but is down. The API still answers through
	// the VIP and etcd keeps its majority (four of five), so only etcd's
	// own health tells that removing controlplane-05 now would leave the
	// cluster one failure from losing quorum.
	w.stopVM(t, w.name+"-controlplane-02")
	w.set(t, "controlplane.count", "3")
	e := w.engine(t)
	// Long enough for a few whole looks at etcd on a busy machine.
	e.BootTimeout = 30 * time.Second
	mark := time.Now()
	err := e.Converge(ctx)
	if err == nil || !strings.Contains(err.Error(), "waiting for a healthy etcd before removing "+w.name+"-controlplane-05") || !strings.Contains(err.Error(), "controlplane-02") {
		t.Fatalf("converge while a control plane that stays is down: %v, want a stop naming it", err)
	}
	for _, e := range since(w.lab, mark) {
		if e.Source == "talos" && e.Op == "Reset" || e.Source == "proxmox" && e.Op == "qemu.delete" {
			t.Fatalf("a control plane was removed while etcd was not healthy: %v", err)
		}
	}
	if n := len(w.lab.Talos.EtcdMembers(w.name)); n != 5 {
		t.Errorf("%d etcd members, want all 5 still", n)
	}
}

func TestScenarioRestrictedTokenRefusesScaleDown(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "perm", 2)
	secrets := fmt.Sprintf("proxmox:\n  token_id: %q\n  token_secret: %q\n", w.lab.RestrictedTokenID, w.lab.RestrictedTokenSecret)
	if err := os.WriteFile(filepath.Join(w.dir, "secrets.yaml"), []byte(secrets), 0o600); err != nil {
		t.Fatal(err)
	}
	w.set(t, "workers.worker.count", "1")
	mark := time.Now()
	err := w.engine(t).Converge(ctx)
	if err == nil || !strings.Contains(err.Error(), "VM.Allocate on /vms/") || !strings.Contains(err.Error(), w.name+"-worker-02") {
		t.Fatalf("scale-down with a token that cannot delete VMs: %v, want a refusal naming VM.Allocate, the path and the machine", err)
	}
	for _, e := range since(w.lab, mark) {
		if e.Source == "proxmox" && !strings.HasPrefix(e.Target, "GET ") {
			t.Errorf("the refused scale-down called %s %s", e.Op, e.Target)
		}
		if e.Source == "kubernetes" && !strings.HasPrefix(e.Op, "get ") && !strings.HasPrefix(e.Op, "list ") {
			t.Errorf("the refused scale-down changed Kubernetes: %s %s", e.Op, e.Target)
		}
		if e.Source == "talos" && e.Op == "Reset" {
			t.Error("the refused scale-down reset a node")
		}
	}
}

func TestScenarioNodelessControlPlaneNeedsEtcdEvidence(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "nodeless", 0)
	_, cs := w.kube(t)
	cp3 := w.name + "-controlplane-03"
	// A control plane without its Node, whose reset fails and which is
	// still an etcd member: the failed reset is not fatal by itself, but
	// the membership check then keeps its VM.
	if err := cs.CoreV1().Nodes().Delete(ctx, cp3, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var addr string
	for _, n := range w.lab.Talos.Nodes() {
		if n.Hostname == cp3 {
			addr = n.Addr.String()
		}
	}
	if err := w.lab.Inject(lab.Fault{Kind: "talos-reset-fails", Addr: addr, N: 1}); err != nil {
		t.Fatal(err)
	}
	w.set(t, "controlplane.count", "1")
	mark := time.Now()
	err := w.engine(t).Converge(ctx)
	if reconcile.Settle(err).Outcome != reconcile.Failed || !strings.Contains(err.Error(), "still an etcd member") {
		t.Fatalf("converge: %v, want a failure: still an etcd member", err)
	}
	log := since(w.lab, mark)
	inOrder(t, log, [3]string{"talos", "Reset", ""}, [3]string{"talos", "EtcdMemberList", ""})
	if find(log, 0, "proxmox", "qemu.delete", "") >= 0 {
		t.Fatal("the VM of a control plane that is still an etcd member was deleted")
	}
}

// TestScenarioResumedResetIsFollowedNotRepeated: a run killed while a
// node resets leaves the reset running on the node; the next run follows
// that reset to its end instead of asking for a second one.
func TestScenarioResumedResetIsFollowedNotRepeated(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "resume", 2)
	victim := w.name + "-worker-02"
	addr := w.nodeAddr(t, victim)
	k, cs := w.kube(t)
	// A budget holds Talos's own drain for its whole timeout (two
	// seconds in the lab), so the reset runs for a while.
	guarded(t, k, cs, victim)
	secrets, err := os.ReadFile(filepath.Join(w.dir, "talossecrets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := machineconfig.ParseSecrets("talossecrets.yaml", secrets)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := talos.Dial(ctx, w.name, bundle, []string{w.nodeAddr(t, w.name+"-controlplane-01")})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	// The first run asks for the reset and dies while it runs.
	killed, kill := context.WithTimeout(ctx, 300*time.Millisecond)
	defer kill()
	if err := tc.Reset(killed, addr, true); err == nil {
		t.Fatal("the reset ended within 300ms, though a budget holds its drain")
	}
	// The next run.
	if err := tc.ResetOnce(ctx, addr, true); err != nil {
		t.Fatalf("resuming the reset: %v", err)
	}
	resets := 0
	for _, op := range w.lab.Talos.Log() {
		if op.Short() == "Reset" && op.Node.String() == addr {
			resets++
		}
	}
	if resets != 1 {
		t.Fatalf("%d Reset calls for %s, want 1: the running reset is followed, not asked for again", resets, victim)
	}
	if st, _ := w.lab.Talos.Node(netip.MustParseAddr(addr)); st.Mode != labtalos.ModeOff {
		t.Fatalf("%s after the followed reset: %s, want off", victim, st.Mode)
	}
}

// TestScenarioOrphanedConfigISOIsDeleted: a config ISO of a machine that
// has no VM and is not desired (a run was killed between deleting a VM
// and its ISO, or a create failed) holds a machine config: converge and
// destroy delete it. One of another cluster whose name starts with this
// one's is left alone.
func TestScenarioOrphanedConfigISOIsDeleted(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "orphan", 1)
	upload := func(name string) {
		t.Helper()
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		_ = mw.WriteField("content", "iso")
		fw, err := mw.CreateFormFile("filename", name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fw.Write([]byte("machine config"))
		_ = mw.Close()
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.lab.CA.Pool(), MinVersion: tls.VersionTLS12}}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.lab.PVEURL+"/api2/json/nodes/pve1/storage/local/upload", &body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "PVEAPIToken="+w.lab.TokenID+"="+w.lab.TokenSecret)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("upload %s: %s", name, resp.Status)
		}
		waitFor(t, name+" uploaded", func() bool { return hasVolume(w, "local:iso/"+name) })
	}
	mine, theirs := "cidata-"+w.name+"-worker-07.iso", "cidata-"+w.name+"-x-worker-01.iso"
	upload(mine)
	upload(theirs)
	p, err := w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(p.Changes, func(ch plan.Change) bool {
		return ch.Resource.Kind == plan.KindCIData && ch.Action == plan.ActionDelete && ch.Resource.Name == w.name+"-worker-07"
	}) {
		t.Fatalf("the orphaned config ISO is not deleted by the plan: %s", p.Summary())
	}
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("converge: %v", err)
	}
	if hasVolume(w, "local:iso/"+mine) {
		t.Error("the orphaned config ISO is still there")
	}
	if !hasVolume(w, "local:iso/"+theirs) {
		t.Error("the config ISO of another cluster was deleted")
	}
}

func hasVolume(w *world, volid string) bool {
	for _, v := range w.lab.PVE.Volumes() {
		if v.VolID == volid {
			return true
		}
	}
	return false
}

// guarded puts a StatefulSet pod on node with a PodDisruptionBudget that
// lets none of its pods go: its eviction is refused (429) for good.
func guarded(t *testing.T, k *labkube.Server, cs kubernetes.Interface, node string) {
	t.Helper()
	if _, err := k.AddPod(labkube.Pod{Node: node, Labels: map[string]string{"app": "db"}, OwnerKind: "StatefulSet", OwnerName: "db"}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(t.Context(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
