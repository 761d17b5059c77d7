package reconcile

import (
	"context"
	"errors"
	"net/netip"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Infra is what the engine needs of a VM provider. The provider plans its
// own part of each phase from what it observed, and carries out the changes
// it planned; the engine runs the Talos and Kubernetes parts itself.
type Infra interface {
	// Observe reads, without changing anything, what the provider owns for
	// the cluster.
	Observe(ctx context.Context) (Inventory, error)
	// Empty returns the inventory of a cluster of which nothing exists,
	// for planning without asking the provider (plan --offline).
	Empty() Inventory
	// Plan lists the provider's steps for one phase, from what it observed
	// and nothing else: it does no I/O. Each step carries its typed
	// operation in Op. Refusals come back as changes with
	// plan.ActionRefuse, in the validate phase, before any mutation.
	Plan(phase plan.Phase, want *Desired, have Inventory) ([]plan.Change, error)
	// Apply carries out one step Plan returned, exactly as planned: it
	// checks the step's precondition against a fresh read and returns an
	// error wrapping ErrPrecondition when it no longer holds; it never
	// plans again.
	Apply(ctx context.Context, want *Desired, ch plan.Change) error
}

// ErrPrecondition is returned by a step whose precondition no longer holds
// when it is about to run: the world changed since the plan was made.
var ErrPrecondition = errors.New("precondition no longer holds")

// Inventory is what a provider observed. Providers keep their own detail
// behind it; the engine only needs the machines.
type Inventory interface {
	Machines() []Machine
}

// Machine is a machine the provider owns.
type Machine struct {
	Hostname string
	Role     spec.Role
	Running  bool
	// Addresses are the machine's addresses as the provider reports them
	// (the guest agent on Proxmox), empty while unknown.
	Addresses []netip.Addr
	// NoAddress says why a running machine reports no address, such as
	// the guest agent's answer; empty otherwise.
	NoAddress string
	// RestartPending lists the changes the provider made to the machine
	// that take effect only when it next restarts (such as "cores 2 -> 4");
	// empty when there are none.
	RestartPending []string
}

// Desired is what the cluster should be, as the provider needs it.
type Desired struct {
	Cluster  *spec.Cluster
	Machines []machineconfig.Machine
	// Configs holds the machine config of each machine that may have to be
	// created, by hostname. It is filled in once the cluster identity
	// exists; a plan without an identity leaves it empty.
	Configs map[string][]byte
	// ConfigAt generates a machine's config at the given Talos and
	// Kubernetes versions (a rollout's later steps); nil without an
	// identity. It does no I/O.
	ConfigAt func(hostname, talosVersion, kubernetesVersion string) ([]byte, error)
	// API is the cluster's Kubernetes API endpoint; not Known before the
	// provider allocated it (the configs are then made in a step after
	// the network phase, and Configs stays empty until then).
	API API
	// Restart asks for the restart of the machines whose provider changes
	// wait for one (converge --reboot).
	Restart bool
	// Plugins are the plugins the engine can run (Engine.Plugins).
	Plugins []Plugin
}

// machineIn returns the machine of ms with the given hostname.
func machineIn(ms []Machine, hostname string) (Machine, bool) {
	for _, m := range ms {
		if m.Hostname == hostname {
			return m, true
		}
	}
	return Machine{}, false
}

// machine returns the observed machine with the given hostname.
func machineNamed(inv Inventory, hostname string) (Machine, bool) {
	for _, m := range inv.Machines() {
		if m.Hostname == hostname {
			return m, true
		}
	}
	return Machine{}, false
}

// MachineReader is an optional capability of an Infra: the named machines
// as the provider reports them now, read without the rest of the
// inventory, so that a wait that polls a few machines does not read every
// machine each time. A name it does not find is absent from the result.
type MachineReader interface {
	ReadMachines(ctx context.Context, hostnames []string) ([]Machine, error)
}

// Warner is an optional capability of an Infra: warnings about what it
// observed that the plan should show (for example firewall rules it found
// and leaves alone).
type Warner interface {
	Warnings(have Inventory) []string
}

// Preflighter is an optional capability of an Infra: before the first
// mutation of a converge or destroy, it checks with read-only calls that
// the provider will allow every step of the plan (for example the API
// token's privileges), so a run never stops half-way for want of a
// permission it could have seen missing. An error names what is missing
// and where; converge then changes nothing.
type Preflighter interface {
	Preflight(ctx context.Context, p *plan.Plan) error
}

// Remover is an optional capability of an Infra: the provider's steps that
// delete one machine that is no longer desired (its VM or server with its
// disks), planned from what it observed, without I/O. The engine runs them
// after it has drained and reset the machine. Without it, a scale-down is
// refused.
type Remover interface {
	PlanRemove(hostname string, have Inventory) []plan.Change
}

// Restarter is an optional capability of an Infra: the provider's steps
// that restart one machine (a power cycle, which a guest reboot is not) so
// that changes waiting for a restart take effect, planned from what it
// observed, without I/O. The engine drains the node first and waits for it
// to come back healthy after.
type Restarter interface {
	PlanRestart(hostname string, have Inventory) []plan.Change
}

// Replacer is an optional capability of an Infra: the replacement of a
// machine that stays in cluster.yaml (a remediation), planned from what
// it observed, without I/O. PlanReplace returns the provider's steps that
// delete the machine (those of a removal, which the engine runs after it
// has drained and reset the node) and the inventory as it is once they
// ran, without the machine: the compute phase planned from that inventory
// creates the machine anew with the same hostname, and the phases after it
// treat it as any new machine (its addresses waited for, its first-boot
// media removed). A machine it cannot replace gets no steps and have back.
// Without the capability, a remediation is a warning.
type Replacer interface {
	PlanReplace(hostname string, have Inventory) (remove []plan.Change, after Inventory)
}
