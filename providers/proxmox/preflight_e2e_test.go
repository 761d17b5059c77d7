package proxmox_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// useToken writes the cluster's secrets.yaml with another Proxmox token.
func (w *world) useToken(t *testing.T, id, secret string) {
	t.Helper()
	body := fmt.Sprintf("proxmox:\n  token_id: %q\n  token_secret: %q\n", id, secret)
	if err := os.WriteFile(filepath.Join(w.dir, "secrets.yaml"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// provider is the cluster's provider, as the engine gets it.
func (w *world) provider(t *testing.T, opts ...proxmox.Option) *proxmox.Provider {
	t.Helper()
	c, _, err := spec.Load(w.dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxmox.New(c, os.DirFS(w.dir), nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// readOnlySince returns the Proxmox calls after the first n of the lab's
// log that were not GETs, and whether GET /access/permissions was among
// them.
func readOnlySince(w *world, n int) (writes []string, permissions bool) {
	for _, op := range w.lab.PVE.Log()[n:] {
		if op.Method != http.MethodGet {
			writes = append(writes, op.Method+" "+op.Path)
		}
		permissions = permissions || op.Name == "access.permissions"
	}
	return writes, permissions
}

// TestPreflightRefusesCreatesWithTheRestrictedToken: with the lab's
// restricted token a first converge is refused before any change, naming
// each missing privilege and its path; only GET calls reach Proxmox. With
// the full token the same plan passes the preflight.
func TestPreflightRefusesCreatesWithTheRestrictedToken(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "pfc", 1)
	w.useToken(t, w.lab.RestrictedTokenID, w.lab.RestrictedTokenSecret)

	err := w.engine(t).Converge(t.Context())
	if !errors.Is(err, reconcile.ErrRefused) || retry.IsTransient(err) {
		t.Fatalf("converge with the restricted token: %v; want a refusal", err)
	}
	machines := "pfc-controlplane-01, pfc-controlplane-02, pfc-controlplane-03 and pfc-worker-01"
	for _, want := range []string{
		"converge refused, nothing was changed: the Proxmox token lacks ",
		"Datastore.AllocateTemplate on /storage/local (needed to upload the boot ISO talos-",
		" to local on pve1, pve2 and pve3, and to upload the config ISO of " + machines + ")",
		"; Pool.Allocate on /pool/taloscluster-pfc (needed to create pool taloscluster-pfc); ",
		"; Datastore.Allocate on /storage/local (needed to delete the config ISO of " + machines + "); ",
		"; VM.Allocate, VM.Config.Options, VM.Config.Disk, VM.Config.CPU, VM.Config.Memory, VM.Config.HWType on /vms/<new id> or /pool/taloscluster-pfc (needed to create VM " + machines + "); ",
		"; VM.Config.Network on /vms/<new id> or /pool/taloscluster-pfc (needed to create VM " + machines + ", and to set the firewall of " + machines + "); ",
		"; SDN.Use on /sdn/zones/localnetwork/vmbr0 (needed to create VM " + machines + "); ",
		"; Datastore.AllocateSpace on /storage/local-lvm (needed to create VM " + machines + "); ",
		"; VM.Config.Options on /vms/<new id> (needed to set the tags of VM " + machines + "); ",
		"grant them to " + w.lab.RestrictedTokenID,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	// What it holds is not named: VM.PowerMgmt comes with PVEVMUser on
	// /vms, and the ISOs may be attached with Datastore.Audit.
	for _, held := range []string{"VM.PowerMgmt", "Datastore.Audit", "Pool.Audit"} {
		if strings.Contains(err.Error(), held) {
			t.Errorf("the refusal names %s, which the token holds:\n%v", held, err)
		}
	}
	if strings.Contains(err.Error(), w.lab.RestrictedTokenSecret) {
		t.Fatal("the token secret is in the error")
	}
	writes, asked := readOnlySince(w, 0)
	if len(writes) != 0 || !asked {
		t.Fatalf("the refused converge made calls other than GETs: %v (asked for the permissions: %v)", writes, asked)
	}
	if vms := w.lab.PVE.VMs(); len(vms) != 0 {
		t.Fatalf("%d VMs were created", len(vms))
	}

	// The full token: the plan's preflight passes, with GETs only.
	w.useToken(t, w.lab.TokenID, w.lab.TokenSecret)
	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	seen := len(w.lab.PVE.Log())
	if err := w.provider(t).Preflight(t.Context(), p); err != nil {
		t.Fatalf("preflight with the full token: %v", err)
	}
	if writes, asked := readOnlySince(w, seen); len(writes) != 0 || !asked {
		t.Fatalf("preflight made calls other than GETs: %v (asked for the permissions: %v)", writes, asked)
	}
}

// TestPreflightRefusesDestroyWithTheRestrictedToken: a cluster built with
// the full token cannot be destroyed with the restricted one: the destroy
// is refused naming VM.Allocate on each VM's path, nothing but GETs reach
// Proxmox, and every VM is still there. The full token's destroy passes
// the same preflight and deletes them.
func TestPreflightRefusesDestroyWithTheRestrictedToken(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "pfd", 1)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	vms := w.lab.PVE.VMs()
	if len(vms) != 4 {
		t.Fatalf("%d VMs, want 4", len(vms))
	}
	w.useToken(t, w.lab.RestrictedTokenID, w.lab.RestrictedTokenSecret)

	// The provider's preflight of the destroy plan, directly.
	p, err := w.engine(t).PlanDestroy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	seen := len(w.lab.PVE.Log())
	err = w.provider(t).Preflight(t.Context(), p)
	if err == nil {
		t.Fatal("the restricted token's destroy passed the preflight")
	}
	t.Logf("the refusal: %v", err)
	for _, v := range vms {
		want := fmt.Sprintf("VM.Allocate on /vms/%d (needed to delete VM %s)", v.ID, v.Name)
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	for _, want := range []string{"Pool.Allocate on /pool/taloscluster-pfd (needed to delete pool taloscluster-pfd)",
		"Datastore.Allocate on /storage/local (needed to delete the config ISO of pfd-"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "VM.PowerMgmt") {
		t.Errorf("the refusal names VM.PowerMgmt, which the token holds on /vms:\n%v", err)
	}
	if retry.IsTransient(err) {
		t.Errorf("a missing privilege is transient: %v", err)
	}

	// Through the engine: refused, nothing changed.
	err = w.engine(t).Destroy(t.Context())
	if !errors.Is(err, reconcile.ErrRefused) || !strings.Contains(err.Error(), fmt.Sprintf("VM.Allocate on /vms/%d", vms[0].ID)) {
		t.Fatalf("destroy with the restricted token: %v; want a refusal naming VM.Allocate", err)
	}
	if writes, asked := readOnlySince(w, seen); len(writes) != 0 || !asked {
		t.Fatalf("the refused destroy made calls other than GETs: %v (asked for the permissions: %v)", writes, asked)
	}
	if n := len(w.lab.PVE.VMs()); n != 4 {
		t.Fatalf("%d VMs left after a refused destroy, want 4", n)
	}
	for _, f := range []string{"talossecrets.yaml", "talosconfig", "kubeconfig"} {
		if _, err := os.Stat(filepath.Join(w.dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}

	// The full token passes the same check and destroys.
	w.useToken(t, w.lab.TokenID, w.lab.TokenSecret)
	if err := w.provider(t).Preflight(t.Context(), p); err != nil {
		t.Fatalf("preflight of the destroy with the full token: %v", err)
	}
	if err := w.engine(t).Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(w.lab.PVE.VMs()); n != 0 {
		t.Fatalf("%d VMs left", n)
	}
}

// TestPreflightOfChangesToExistingVMs: once the cluster exists, a plan
// that grows a disk and resizes a VM is checked on that VM's own path; the
// restricted token lacks VM.Config.Disk, VM.Config.CPU and
// VM.Config.Memory there.
func TestPreflightOfChangesToExistingVMs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "pfx", 0)
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(w.dir, "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	grown := strings.Replace(string(data), "disk: 20\n", "disk: 30\n", 1)
	grown = strings.Replace(grown, "cores: 2\n", "cores: 3\n", 1)
	if grown == string(data) {
		t.Fatalf("cluster.yaml has no disk or cores to change:\n%s", data)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "cluster.yaml"), []byte(grown), 0o644); err != nil {
		t.Fatal(err)
	}
	w.useToken(t, w.lab.RestrictedTokenID, w.lab.RestrictedTokenSecret)
	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var vm *int
	for _, v := range w.lab.PVE.VMs() {
		if v.Name == "pfx-controlplane-01" {
			vm = &v.ID
		}
	}
	if vm == nil {
		t.Fatal("no pfx-controlplane-01")
	}
	err = w.provider(t).Preflight(t.Context(), p)
	for _, want := range []string{
		fmt.Sprintf("VM.Config.Disk on /vms/%d (needed to grow the disk of pfx-controlplane-01)", *vm),
		"Datastore.AllocateSpace on /storage/local-lvm (needed to grow the disk of pfx-controlplane-01, pfx-controlplane-02 and pfx-controlplane-03)",
		fmt.Sprintf("VM.Config.CPU, VM.Config.Memory on /vms/%d (needed to resize pfx-controlplane-01)", *vm),
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("preflight: %v; want it to say %q", err, want)
		}
	}
	w.useToken(t, w.lab.TokenID, w.lab.TokenSecret)
	if err := w.provider(t).Preflight(t.Context(), p); err != nil {
		t.Fatalf("preflight with the full token: %v", err)
	}
}

// TestUnreadablePermissionsAreTransient: when GET /access/permissions
// gets no answer, the preflight fails with an error worth another try.
func TestUnreadablePermissionsAreTransient(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "pft", 0)
	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.lab.Inject(lab.Fault{Kind: "proxmox-hang", Op: "access.permissions", N: 100}); err != nil {
		t.Fatal(err)
	}
	err = w.provider(t, proxmox.WithRequestTimeout(200*time.Millisecond)).Preflight(t.Context(), p)
	if err == nil || !retry.IsTransient(err) || !strings.Contains(err.Error(), "GET /access/permissions") {
		t.Fatalf("preflight without an answer: %v; want a transient error naming the call", err)
	}
	if strings.Contains(err.Error(), w.lab.TokenSecret) {
		t.Fatal("the token secret is in the error")
	}
}
