package proxmox_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// worldNets are the second octets of the /24s this package's lab worlds
// use, one each: 127.176 to 127.182, 127.221 to 127.230 (but 223, 227 and
// 229), 127.246 to 127.248, 127.1 to 127.20, and 127.171 and 127.183,
// whose 127.N.0.0/24 only the benchmarks use, which never run beside the
// tests (cmd/taloscluster's tests use 127.183.64.0/24 and up), then
// 127.183.1.0/24 to 127.183.16.0/24 (extraNets). They are clear of the
// networks other packages' tests use, as packages' tests run at the same
// time: the lab's (up to 127.100), providers/scenario's (127.101 to
// 127.119, 127.167 to 127.169, 127.233 to 127.235 and 127.239),
// cmd/taloscluster's fault matrix (127.120 to 127.166), providers/openstack's
// (127.172 to 127.175 and 127.184 to 127.199), the benchmarks' (127.171 and
// 127.183), cmd/taloscluster's browser test (127.170), cmd/taloslab's (127.200 to
// 127.218 and 127.249/250/255) and the lab's defaults (127.251 to 127.254).
var worldNets = func() []int {
	var out []int
	for n := 176; n <= 182; n++ {
		out = append(out, n)
	}
	out = append(out, 221, 222, 224, 225, 226, 228, 230, 246, 247, 248)
	for n := 1; n <= 20; n++ {
		out = append(out, n)
	}
	return append(out, 171, 183)
}()

// extraNets are the third octets of the /24s of 127.183 the package's lab
// worlds use once worldNets are all taken.
var extraNets = 16

// nextNet returns the next network of worldNets, one per lab world.
func nextNet(t *testing.T) netip.Prefix {
	t.Helper()
	i := int(netSeq.Add(1)) - 1
	switch {
	case i < len(worldNets):
		return netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/24", worldNets[i]))
	case i < len(worldNets)+extraNets:
		return netip.MustParsePrefix(fmt.Sprintf("127.183.%d.0/24", i-len(worldNets)+1))
	}
	t.Fatalf("more than %d lab worlds in this package: give worldNets more networks", len(worldNets)+extraNets)
	return netip.Prefix{}
}

// netSeq hands each test its own loopback networks, so tests run in
// parallel without address clashes.
var netSeq atomic.Int32

type world struct {
	lab  *lab.Lab
	dir  string
	net  netip.Prefix
	name string
	// addrs remembers Talos addresses by hostname (nodeAddr).
	addrs map[string]string
}

// newWorld starts a lab and writes a cluster directory pointing at it.
func newWorld(t *testing.T, name string, workers int) *world {
	t.Helper()
	clusterNet := nextNet(t)
	l, err := lab.Start(t.Context(), lab.Options{
		Bridges:      map[string]netip.Prefix{"vmbr0": clusterNet},
		TaskDuration: -1,
		BootDelay:    20 * time.Millisecond, InstallDelay: 20 * time.Millisecond, RebootDelay: 20 * time.Millisecond,
		ReadyDelay: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	dir := t.TempDir()
	if err := l.WriteCluster(dir, lab.Cluster{Name: name, Workers: workers, Bridge: "vmbr0"}); err != nil {
		t.Fatal(err)
	}
	return &world{lab: l, dir: dir, net: clusterNet, name: name}
}

func (w *world) engine(t *testing.T, opts ...proxmox.Option) *reconcile.Engine {
	t.Helper()
	c, warns, err := spec.Load(w.dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxmox.New(c, os.DirFS(w.dir), nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("converge progress:\n%s", out.String())
		}
	})
	return &reconcile.Engine{Cluster: c, Warnings: warns, State: state.Local{Dir: w.dir}, Key: w.name, Infra: p, Progress: &out,
		BootTimeout: 60 * time.Second, PollInterval: 50 * time.Millisecond}
}

// mutations counts the Proxmox API calls that change something.
func (w *world) mutations() int {
	n := 0
	for _, op := range w.lab.PVE.Log() {
		if op.Method != http.MethodGet {
			n++
		}
	}
	return n
}

func TestFirstBuildThenIdempotent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "alpha", 2)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	p, err := w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Counts(); c.Create < 5 {
		t.Fatalf("first plan creates %d things, want every VM and more: %s", c.Create, p.Summary())
	}
	if n := w.mutations(); n != 0 {
		t.Fatalf("plan made %d mutating calls", n)
	}

	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("first converge: %v", err)
	}
	vms := w.lab.PVE.VMs()
	if len(vms) != 5 {
		t.Fatalf("%d VMs, want 5", len(vms))
	}
	for _, v := range vms {
		if !v.Running || v.Pool != "taloscluster-alpha" || v.FirewallOptions["enable"] != "1" {
			t.Errorf("VM %s: running=%v pool=%q firewall=%v", v.Name, v.Running, v.Pool, v.FirewallOptions)
		}
		if _, ok := v.CDROMs["ide3"]; ok {
			t.Errorf("VM %s still has its config ISO attached", v.Name)
		}
	}
	for _, f := range []string{"talossecrets.yaml", "talosconfig", "kubeconfig"} {
		st, err := os.Stat(filepath.Join(w.dir, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	members := w.lab.Talos.EtcdMembers("alpha")
	if len(members) != 3 {
		t.Errorf("%d etcd members, want 3", len(members))
	}
	// Bootstrapping again is refused by Talos and taken as success.
	tcData, err := os.ReadFile(filepath.Join(w.dir, "talosconfig"))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := talos.New(ctx, tcData)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	first := w.lab.Talos.Nodes()[0].Addr.String() // leases start at .100: cp-01
	if err := tc.Bootstrap(ctx, first); err != nil {
		t.Errorf("a second bootstrap is not taken as success: %v", err)
	}
	if ms, err := tc.EtcdMembers(ctx, first); err != nil || len(ms) != 3 {
		t.Errorf("etcd members through the Talos API: %v, %v", ms, err)
	}

	before := w.mutations()
	p, err = w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Empty() {
		t.Errorf("plan after converge is not empty: %s\n%+v", p.Summary(), p.Changes)
	}
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("second converge: %v", err)
	}
	if n := w.mutations() - before; n != 0 {
		var calls []string
		for _, op := range w.lab.PVE.Log()[len(w.lab.PVE.Log())-n:] {
			calls = append(calls, op.Method+" "+op.Path)
		}
		t.Errorf("second converge made %d mutating Proxmox calls: %v", n, calls)
	}
}

func countOps(w *world, name string) int {
	n := 0
	for _, op := range w.lab.PVE.Log() {
		if op.Name == name && op.Status < 300 {
			n++
		}
	}
	return n
}

func TestFirstBuildRequestLog(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "logged", 2)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	for op, want := range map[string]int{
		"pool.create":          1,
		"qemu.create":          5,
		"qemu.start":           5,
		"storage.upload":       3 + 5, // the boot ISO on each node, one config ISO per VM
		"firewall.options.set": 5,
	} {
		if got := countOps(w, op); got != want {
			t.Errorf("%s: %d successful calls, want %d", op, got, want)
		}
	}
	if got := countOps(w, "firewall.rules.create"); got < 5*4 {
		t.Errorf("firewall.rules.create: %d calls, want at least 4 per VM", got)
	}
}

func TestMissingIdentityWithMachinesAborts(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "guard", 1)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w.dir, "talossecrets.yaml")); err != nil {
		t.Fatal(err)
	}
	before := w.mutations()
	err := w.engine(t).Converge(t.Context())
	if !errors.Is(err, reconcile.ErrRefused) || !strings.Contains(err.Error(), "restore") {
		t.Fatalf("converge without the identity: %v; want a refusal saying to restore from backup", err)
	}
	if n := w.mutations() - before; n != 0 {
		t.Fatalf("the refused converge made %d mutating calls", n)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "talossecrets.yaml")); err == nil {
		t.Fatal("a new talossecrets.yaml was minted over a live cluster")
	}
	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Refusals) == 0 {
		t.Fatal("plan does not show the refusal")
	}
}

func TestTaskWarningsCountAsSuccess(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "warn", 1)
	w.lab.PVE.TaskWarnings("qemu.create", 2, 2)
	w.lab.PVE.TaskWarnings("storage.upload", 1, 2)
	w.lab.PVE.TaskWarnings("qemu.start", 1, 2)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatalf("converge with WARNINGS: 2 tasks: %v", err)
	}
	if got := len(w.lab.PVE.VMs()); got != 4 {
		t.Fatalf("%d VMs, want 4", got)
	}
}

func TestCreateFailureThenRetryMakesNoDuplicate(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "retry", 1)
	w.lab.PVE.Fail("qemu.create", 1, http.StatusInternalServerError, "injected: storage is busy")
	err := w.engine(t).Converge(t.Context())
	if err == nil || !strings.Contains(err.Error(), "creating VM retry-controlplane-01") || !strings.Contains(err.Error(), "storage is busy") {
		t.Fatalf("converge with a failing create: %v; want a clear error naming the VM and the cause", err)
	}
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatalf("second converge: %v", err)
	}
	names := map[string]int{}
	for _, v := range w.lab.PVE.VMs() {
		names[v.Name]++
	}
	if len(names) != 4 {
		t.Fatalf("VMs %v, want exactly the 4 machines", names)
	}
	for n, c := range names {
		if c != 1 {
			t.Errorf("%s exists %d times", n, c)
		}
	}
}

func TestSecretsNeverInErrors(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "secret", 0)
	w.lab.PVE.Fail("qemu.create", 1, http.StatusInternalServerError, "boom")
	err := w.engine(t).Converge(t.Context())
	if err == nil {
		t.Fatal("want an error")
	}
	if strings.Contains(err.Error(), w.lab.TokenSecret) {
		t.Fatal("the Proxmox token secret appears in an error")
	}
}

func TestUnreachableClusterIsNotTouched(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "dark", 1)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	k, ok := w.lab.Kube("dark")
	if !ok {
		t.Fatal("no Kubernetes API")
	}
	k.Fail("get version", 100, http.StatusServiceUnavailable)
	// Grow the cluster: an unreachable cluster must not get new machines.
	data, err := os.ReadFile(filepath.Join(w.dir, "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	grown := strings.Replace(string(data), "count: 1\n", "count: 2\n", 1)
	if err := os.WriteFile(filepath.Join(w.dir, "cluster.yaml"), []byte(grown), 0o600); err != nil {
		t.Fatal(err)
	}
	creates := countOps(w, "qemu.create")
	err = w.engine(t).Converge(t.Context())
	if !errors.Is(err, reconcile.ErrUnreachable) {
		t.Fatalf("converge of an unreachable cluster: %v, want ErrUnreachable", err)
	}
	if got := countOps(w, "qemu.create"); got != creates {
		t.Fatalf("%d VMs were created for an unreachable cluster", got-creates)
	}
}

func TestMissingKubeconfigIsRecoveredNotBootstrapped(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "recover", 1)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w.dir, "kubeconfig")); err != nil {
		t.Fatal(err)
	}
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "kubeconfig")); err != nil {
		t.Fatalf("kubeconfig not recovered: %v", err)
	}
	bootstraps := 0
	for _, op := range w.lab.Talos.Log() {
		if op.Short() == "Bootstrap" {
			bootstraps++
		}
	}
	if bootstraps != 1 {
		t.Fatalf("%d Bootstrap calls; a recovered cluster must not be bootstrapped again", bootstraps)
	}
}

func TestInterruptedRunIsReported(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "journal", 0)
	store := state.NewDirStore(t.TempDir())
	// A run that died after recording its intent and before finishing.
	if _, err := store.Begin(t.Context(), "journal", state.Entry{Op: "create machine", Target: "journal-controlplane-01"}); err != nil {
		t.Fatal(err)
	}
	e := w.engine(t)
	e.State, e.Journal = store, store
	var out strings.Builder
	e.Progress = &out
	if err := e.Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "interrupted during create machine journal-controlplane-01") {
		t.Fatalf("the interrupted intent is not reported:\n%s", out.String())
	}
	open, err := store.Open(t.Context(), "journal")
	if err != nil || len(open) != 0 {
		t.Fatalf("open journal entries after a converge: %v, %v", open, err)
	}
	entries, err := store.Entries(t.Context(), "journal")
	if err != nil {
		t.Fatal(err)
	}
	creates := 0
	for _, en := range entries {
		if en.Op == "create machine" && en.Error == "" {
			creates++
		}
	}
	if creates != 3 {
		t.Fatalf("%d finished machine creates in the journal, want 3", creates)
	}
}

func TestDestroyDeletesEverythingOwned(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "gone", 1)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	p, err := w.engine(t).PlanDestroy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Counts(); c.Delete != 4+1+3 { // VMs, pool, three state files
		t.Fatalf("destroy plan deletes %d things: %s", c.Delete, p.Summary())
	}
	if err := w.engine(t).Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(w.lab.PVE.VMs()); n != 0 {
		t.Fatalf("%d VMs left", n)
	}
	for _, f := range []string{"talossecrets.yaml", "talosconfig", "kubeconfig"} {
		if _, err := os.Stat(filepath.Join(w.dir, f)); err == nil {
			t.Errorf("%s is still there", f)
		}
	}
	for _, v := range w.lab.PVE.Volumes() {
		if strings.Contains(v.VolID, "cidata-gone") {
			t.Errorf("config ISO %s left behind", v.VolID)
		}
	}
}

func TestForeignFirewallRuleIsLeftAloneAndReported(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "fw", 0)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	vm := w.lab.PVE.VMs()[0]
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.lab.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	form := url.Values{"type": {"in"}, "action": {"ACCEPT"}, "proto": {"tcp"}, "dport": {"22"}, "source": {"10.9.0.0/16"}, "enable": {"1"}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost,
		fmt.Sprintf("%s/api2/json/nodes/%s/qemu/%d/firewall/rules", w.lab.PVEURL, vm.Node, vm.ID), strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "PVEAPIToken="+w.lab.TokenID+"="+w.lab.TokenSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 0 {
		t.Fatalf("a rule on an ungoverned port produced changes: %+v", p.Changes)
	}
	found := false
	for _, msg := range p.Warnings {
		found = found || strings.Contains(msg, "tcp/22")
	}
	if !found {
		t.Fatalf("the foreign rule is not reported: %v", p.Warnings)
	}
}
