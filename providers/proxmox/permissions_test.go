package proxmox

import (
	"fmt"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestGrantsResolveAsProxmox: a listed path is taken as Proxmox computed
// it; an unlisted one holds what the nearest listed ancestor propagates,
// passing over an ancestor whose entries do not propagate, and no further
// than the first one that propagates anything.
func TestGrantsResolveAsProxmox(t *testing.T) {
	t.Parallel()
	g := grants{
		"/":        {"Sys.Audit": true, "VM.Audit": true},
		"/vms":     {"VM.Allocate": false}, // a non-propagating entry on /vms
		"/vms/100": {"VM.PowerMgmt": false, "VM.Audit": true},
		"/storage": {"Datastore.Audit": true},
		"/pool":    {"Pool.Audit": true},
		"/pool/x":  {"Pool.Allocate": true, "VM.Allocate": false},
	}
	for _, tc := range []struct {
		path, priv string
		want       bool
	}{
		{"/vms", "VM.Allocate", true},       // listed: held there, flag 0 or not
		{"/vms/100", "VM.PowerMgmt", true},  // listed (a pool member, or an ACL)
		{"/vms/100", "Sys.Audit", false},    // listed without it
		{"/vms/101", "VM.Allocate", false},  // /vms does not propagate it
		{"/vms/101", "VM.Audit", true},      // ... so / decides
		{"/vms/<new id>", "VM.Audit", true}, // a new VM: the same
		{"/storage/local", "Datastore.Audit", true},
		{"/storage/local", "Sys.Audit", false}, // /storage propagates, / is not reached
		{"/pool/x/sub", "Pool.Allocate", true},
		{"/pool/x/sub", "VM.Allocate", false},
		{"/sdn/zones/localnetwork/vmbr0", "Sys.Audit", true},
		{"/sdn/zones/localnetwork/vmbr0", "SDN.Use", false},
	} {
		if got := g.holds(tc.path, tc.priv); got != tc.want {
			t.Errorf("%s on %s: %v, want %v", tc.priv, tc.path, got, tc.want)
		}
	}
	if (grants{}).holds("/vms/1", "VM.Audit") {
		t.Error("an empty answer grants something")
	}
	// check_vm_perm: the pool's privileges are enough.
	n := need{privs: []string{"VM.Allocate"}, paths: []string{"/vms/<new id>", "/pool/x"}}
	if !g.met(n) {
		t.Error("VM.Allocate on the pool does not allow a create in it")
	}
	if g.met(need{privs: []string{"SDN.Use", "VM.Audit"}, paths: []string{"/vms/101"}}) {
		t.Error("a need of two privileges is met by one")
	}
	if !g.met(need{privs: []string{"SDN.Use", "VM.Audit"}, anyOf: true, paths: []string{"/vms/101"}}) {
		t.Error("an any-of need is not met by one of them")
	}
}

func exampleProvider(t *testing.T) *Provider {
	t.Helper()
	c, _, err := spec.Load("../../examples/proxmox-bridge", spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &Provider{c: c}
}

// TestEveryCreateParameterIsChecked: each parameter the provider sends to
// create a VM maps to the check create_vm makes for it, so a parameter
// added to vmParams without a privilege fails here.
func TestEveryCreateParameterIsChecked(t *testing.T) {
	t.Parallel()
	p := exampleProvider(t)
	m := machineconfig.Machines(p.c)[0]
	name, _, err := p.bootISO()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range p.vmParams(m, 100, name) {
		switch {
		case k == "vmid" || k == "pool" || k == "tags":
		case driveKeyRE.MatchString(k):
			if s := fmt.Sprint(v); !strings.Contains(s, "media=cdrom") && !newDiskRE.MatchString(strings.Split(s, ",")[0]) {
				t.Errorf("%s=%s is neither an ISO nor a new disk", k, s)
			}
		case netKeyRE.MatchString(k), strings.HasPrefix(k, "serial"):
		default:
			if configPrivs[k] == "" {
				t.Errorf("create parameter %s has no privilege in configPrivs", k)
			}
		}
	}
	needs := p.createNeeds(m.Hostname, "localnetwork")
	var got []string
	for _, n := range needs {
		got = append(got, strings.Join(n.privs, "|")+" "+strings.Join(n.paths, "|"))
	}
	for _, want := range []string{
		"VM.Allocate /vms/<new id>|/pool/" + p.poolName(),
		"Datastore.AllocateSpace /storage/" + p.c.Proxmox.Storage,
		"Datastore.Allocate|Datastore.AllocateSpace|Datastore.Audit /storage/" + p.c.Proxmox.ISOStorage,
		"VM.Config.Network /vms/<new id>|/pool/" + p.poolName(),
		"VM.Config.HWType /vms/<new id>|/pool/" + p.poolName(),
		"VM.Config.Options /vms/<new id>",
		"SDN.Use /sdn/zones/localnetwork/" + p.clusterBridge(),
	} {
		found := false
		for _, g := range got {
			found = found || g == want
		}
		if !found {
			t.Errorf("create needs %v, missing %q", got, want)
		}
	}
}

// TestMissingPrivilegesAreNamedOnce: each missing privilege is named with
// its path and every step that needs it, in the plan's order; what is held
// is not named. A VM deleted in a scale-down is checked as in a destroy.
func TestMissingPrivilegesAreNamedOnce(t *testing.T) {
	t.Parallel()
	p := exampleProvider(t)
	p.c.Proxmox.TokenID = "ops@pve!taloscluster"
	ids := map[string]int{}
	var steps []plan.Change
	for i, m := range machineconfig.Machines(p.c) {
		ids[m.Hostname] = 104 + i
		// A machine removed by a scale-down is deleted as in a destroy.
		phase := plan.PhaseDestroy
		if i == 0 {
			phase = plan.PhaseScaleDown
		}
		steps = append(steps, plan.Change{Phase: phase, Domain: plan.DomainProvider, Action: plan.ActionDelete,
			Op: deleteVM{hostname: m.Hostname, id: 104 + i}})
	}
	steps = append(steps, plan.Change{Phase: plan.PhaseDestroy, Domain: plan.DomainProvider, Action: plan.ActionDelete, Op: deletePool{}})
	var needs []need
	for _, ch := range steps {
		needs = append(needs, p.stepNeeds(ch, ids, "localnetwork")...)
	}
	g := grants{"/": {"VM.PowerMgmt": true, "Datastore.Allocate": true, "Pool.Allocate": true}, "/vms/105": {"VM.Allocate": false, "VM.PowerMgmt": false}}
	err := missingError(g, needs, p.c.Proxmox.TokenID)
	first := machineconfig.Machines(p.c)[0].Hostname
	if err == nil || !strings.HasPrefix(err.Error(), "the Proxmox token lacks VM.Allocate on /vms/104 (needed to delete VM "+first+"); ") {
		t.Fatalf("error %v", err)
	}
	if strings.Contains(err.Error(), "/vms/105") || strings.Contains(err.Error(), "Pool.Allocate") || strings.Contains(err.Error(), "PowerMgmt") {
		t.Errorf("a held privilege is named: %v", err)
	}
	if !strings.HasSuffix(err.Error(), "; grant them to ops@pve!taloscluster and run again") {
		t.Errorf("error %v", err)
	}
	// An entry on /vms that propagates replaces / below it: VM.PowerMgmt
	// from / no longer reaches the VMs.
	g["/vms"] = map[string]bool{"VM.Allocate": true}
	if err := missingError(g, needs, "x"); err == nil || !strings.Contains(err.Error(), "VM.PowerMgmt on /vms/104") || strings.Contains(err.Error(), "VM.Allocate") {
		t.Errorf("VM.Allocate propagated from /vms: %v", err)
	}
	g["/vms"]["VM.PowerMgmt"] = true
	if err := missingError(g, needs, "x"); err != nil {
		t.Errorf("VM.Allocate and VM.PowerMgmt propagated from /vms: %v", err)
	}
}
