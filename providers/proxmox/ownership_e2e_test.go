package proxmox_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// pve calls the lab's Proxmox API directly, as another tool or an operator
// would, and fails the test unless it answers 2xx.
func (w *world) pve(t *testing.T, method, path string, form url.Values) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.lab.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(t.Context(), method, w.lab.PVEURL+"/api2/json"+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+w.lab.TokenID+"="+w.lab.TokenSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, body)
	}
}

// createVM creates a stopped VM through the lab's Proxmox API and waits
// until its create task has finished.
func (w *world) createVM(t *testing.T, node string, id int, name, pool string, tags ...string) {
	t.Helper()
	form := url.Values{"vmid": {strconv.Itoa(id)}, "name": {name}, "tags": {strings.Join(tags, ";")},
		"cores": {"2"}, "memory": {"4096"}, "net0": {"virtio,bridge=vmbr0,firewall=1"}}
	if pool != "" {
		form.Set("pool", pool)
	}
	w.pve(t, http.MethodPost, "/nodes/"+node+"/qemu", form)
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, v := range w.lab.PVE.VMs() {
			if v.ID == id && v.Name == name {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM %d (%s) was not created", id, name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// refusalsOf returns the reasons of a plan's refusals of a machine.
func refusalsOf(p *plan.Plan, machine string) []string {
	var out []string
	for _, r := range p.Refusals {
		if r.Resource.Kind == plan.KindMachine && r.Resource.Name == machine {
			out = append(out, r.Reason)
		}
	}
	return out
}

// TestTwoVMsForOneMachineAreRefused adds a second VM of the cluster with
// the name of an existing machine: the plan refuses both, naming their
// ids, and converge changes neither; destroy deletes both.
func TestTwoVMsForOneMachineAreRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "twins", 0)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	var orig int
	for _, v := range w.lab.PVE.VMs() {
		if v.Name == "twins-controlplane-02" {
			orig = v.ID
		}
	}
	const twin = 990
	w.createVM(t, "pve1", twin, "twins-controlplane-02", "taloscluster-twins",
		"taloscluster", "cluster_twins", "role_controlplane", "pool_controlplane")

	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	reasons := refusalsOf(p, "twins-controlplane-02")
	if len(reasons) != 1 || !strings.Contains(reasons[0], strconv.Itoa(orig)) || !strings.Contains(reasons[0], strconv.Itoa(twin)) {
		t.Fatalf("refusals of twins-controlplane-02: %q; want one naming VMs %d and %d", reasons, orig, twin)
	}
	for _, ch := range p.Changes {
		if ch.Action != plan.ActionRefuse && ch.Resource.Name == "twins-controlplane-02" {
			t.Errorf("a step for the doubled machine: %s", ch.Step())
		}
	}
	before := w.mutations()
	err = w.engine(t).Converge(t.Context())
	if !errors.Is(err, reconcile.ErrRefused) || !strings.Contains(err.Error(), strconv.Itoa(twin)) {
		t.Fatalf("converge: %v; want a refusal naming VM %d", err, twin)
	}
	if n := w.mutations() - before; n != 0 {
		t.Fatalf("the refused converge made %d mutating calls", n)
	}
	for _, v := range w.lab.PVE.VMs() {
		if v.ID == twin && (v.Running || v.FirewallOptions["enable"] == "1") {
			t.Errorf("the twin was adopted: running=%v firewall=%v", v.Running, v.FirewallOptions)
		}
	}

	e := w.engine(t)
	if err := e.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if vms := w.lab.PVE.VMs(); len(vms) != 0 {
		t.Fatalf("%d VMs left after destroy: %+v", len(vms), vms)
	}
}

// TestVMsOfAnotherClusterArePassedOver puts VMs with this cluster's tags
// into another cluster's pool (one with a machine's name, one without) and
// a VM with another cluster's tags into this cluster's pool: converge
// refuses all three, naming each VM and pool, and touches none of them;
// destroy leaves them alone.
func TestVMsOfAnotherClusterArePassedOver(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "mine", 0)
	w.pve(t, http.MethodPost, "/pools", url.Values{"poolid": {"taloscluster-other"}, "comment": {"managed-by=taloscluster cluster=other"}})
	w.pve(t, http.MethodPost, "/pools", url.Values{"poolid": {"taloscluster-mine"}, "comment": {"managed-by=taloscluster cluster=mine"}})
	ours := []string{"taloscluster", "cluster_mine", "role_controlplane", "pool_controlplane"}
	w.createVM(t, "pve1", 901, "mine-controlplane-01", "taloscluster-other", ours...)
	w.createVM(t, "pve2", 902, "mine-stray", "taloscluster-other", ours...)
	w.createVM(t, "pve3", 903, "other-worker-01", "taloscluster-mine", "taloscluster", "cluster_other", "role_worker", "pool_worker")

	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		machine, id, pool string
	}{
		{"mine-controlplane-01", "901", "taloscluster-other"},
		{"mine-stray", "902", "taloscluster-other"},
		{"other-worker-01", "903", "taloscluster-mine"},
	} {
		reasons := refusalsOf(p, c.machine)
		if len(reasons) != 1 || !strings.Contains(reasons[0], "VM "+c.id+" ") || !strings.Contains(reasons[0], c.pool) {
			t.Errorf("refusals of %s: %q; want one naming VM %s and pool %s", c.machine, reasons, c.id, c.pool)
		}
	}
	before := w.mutations()
	err = w.engine(t).Converge(t.Context())
	if !errors.Is(err, reconcile.ErrRefused) || !strings.Contains(err.Error(), "VM 901 ") {
		t.Fatalf("converge: %v; want a refusal naming VM 901", err)
	}
	if n := w.mutations() - before; n != 0 {
		t.Fatalf("the refused converge made %d mutating calls", n)
	}
	// Destroy deletes nothing that is not this cluster's, and keeps the
	// pool that holds VM 903 (proxmox-api-go would empty it first).
	err = w.engine(t).Destroy(t.Context())
	if !errors.Is(err, reconcile.ErrPrecondition) || !strings.Contains(err.Error(), "VM 903") {
		t.Fatalf("destroy: %v; want it to keep the pool that holds VM 903", err)
	}
	left := map[int]bool{}
	for _, v := range w.lab.PVE.VMs() {
		left[v.ID] = true
		if v.Running || v.FirewallOptions["enable"] == "1" {
			t.Errorf("VM %d (%s) was touched: running=%v firewall=%v", v.ID, v.Name, v.Running, v.FirewallOptions)
		}
	}
	for _, id := range []int{901, 902, 903} {
		if !left[id] {
			t.Errorf("destroy deleted VM %d, which is not this cluster's", id)
		}
	}
	for _, v := range w.lab.PVE.VMs() {
		if v.ID == 903 && v.Pool != "taloscluster-mine" {
			t.Errorf("VM 903 was moved out of its pool to %q", v.Pool)
		}
	}
}

// TestUnownedVMBeingCreatedIsWaitedFor creates, through the lab's Proxmox
// API, a VM with a machine's name and no ownership, whose create task is
// still running when the plan is made: its config holds only
// `lock: create` and /cluster/resources has no name for it. The plan waits
// for its name (the create task ends after 2 s) and then refuses it, never
// taking the name it could not read yet for no name.
func TestUnownedVMBeingCreatedIsWaitedFor(t *testing.T) {
	t.Parallel()
	l, err := lab.Start(t.Context(), lab.Options{
		Bridges:      map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix("127.245.0.0/24")},
		TaskDuration: 2 * time.Second,
		// pvestatd's broadcast, late: the VM stays unnamed in
		// /cluster/resources for the whole test.
		StatsInterval: 10 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	dir := t.TempDir()
	if err := l.WriteCluster(dir, lab.Cluster{Name: "slow", Bridge: "vmbr0"}); err != nil {
		t.Fatal(err)
	}
	w := &world{lab: l, dir: dir, name: "slow"}
	w.pve(t, http.MethodGet, "/cluster/resources", nil) // the broadcast is taken before the VM exists
	w.pve(t, http.MethodPost, "/nodes/pve3/qemu", url.Values{"vmid": {"777"}, "name": {"slow-controlplane-01"},
		"cores": {"2"}, "memory": {"2048"}, "net0": {"virtio,bridge=vmbr0"}})
	start := time.Now()
	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	reasons := refusalsOf(p, "slow-controlplane-01")
	if len(reasons) != 1 || !strings.HasPrefix(reasons[0], "refusing to adopt unowned VM slow-controlplane-01 (id 777) on pve3: ") {
		t.Fatalf("refusals of slow-controlplane-01: %q; want the unowned VM 777 refused", reasons)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("the plan took %s: it did not wait for the VM's create task", waited)
	}
}
