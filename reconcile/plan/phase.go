package plan

import (
	"cmp"
	"slices"
)

// Phase is a step of converge. Converge runs the phases in the order of
// Phases, and a plan groups its changes by the phase that would make them.
type Phase string

// Converge phases, in the order they run.
const (
	// PhaseValidate checks cluster.yaml against the provider and refuses
	// changes that cannot be made in place, before any mutation.
	PhaseValidate Phase = "validate"
	// PhaseImage ensures the boot image or ISO.
	PhaseImage Phase = "image"
	// PhaseSecrets creates the cluster identity when none exists.
	PhaseSecrets Phase = "secrets"
	// PhaseNetwork ensures networks, ports, security groups, pools and
	// firewall, and writes talosconfig.
	PhaseNetwork Phase = "network"
	// PhaseDiscover learns the API endpoint the network phase allocated
	// (OpenStack) and makes the new machines' configs from it.
	PhaseDiscover Phase = "discover"
	// PhaseScaleDown drains, resets and removes surplus machines.
	PhaseScaleDown Phase = "scale-down"
	// PhaseApplyConfig pushes machine configurations to existing nodes.
	PhaseApplyConfig Phase = "apply-config"
	// PhaseUpgrade upgrades Talos node by node, then Kubernetes.
	PhaseUpgrade Phase = "upgrade"
	// PhaseCompute creates machines and grows existing ones.
	PhaseCompute Phase = "compute"
	// PhaseBootstrap bootstraps etcd on the first control plane.
	PhaseBootstrap Phase = "bootstrap"
	// PhaseKubeconfig fetches the kubeconfig.
	PhaseKubeconfig Phase = "kubeconfig"
	// PhaseHealth waits for a healthy cluster and finalises machines.
	PhaseHealth Phase = "health"
	// PhasePlugins runs the configured plugins.
	PhasePlugins Phase = "plugins"
	// PhaseDestroy deletes the cluster's machines and resources; only a
	// destroy runs it.
	PhaseDestroy Phase = "destroy"
)

// phases lists every phase in converge order.
var phases = []Phase{
	PhaseValidate,
	PhaseImage,
	PhaseSecrets,
	PhaseNetwork,
	PhaseDiscover,
	PhaseScaleDown,
	PhaseApplyConfig,
	PhaseUpgrade,
	PhaseCompute,
	PhaseBootstrap,
	PhaseKubeconfig,
	PhaseHealth,
	PhasePlugins,
	PhaseDestroy,
}

// Phases returns every phase in the order converge runs them.
func Phases() []Phase {
	return append([]Phase(nil), phases...)
}

// Valid reports whether p is one of the known phases.
func (p Phase) Valid() bool {
	return p.Order() < len(phases)
}

// Order returns the position of p in Phases, counting from zero. An unknown
// phase gives len(Phases()), after every known one.
func (p Phase) Order() int {
	return indexOf(phases, p)
}

// ComparePhases orders phases the way converge runs them. Unknown phases
// sort after every known one, by name.
func ComparePhases(a, b Phase) int {
	return compareOrdered(phases, a, b)
}

// indexOf returns the position of v in list, or len(list) when v is absent.
func indexOf[T comparable](list []T, v T) int {
	if i := slices.Index(list, v); i >= 0 {
		return i
	}
	return len(list)
}

// compareOrdered compares a and b by their position in list, then by value,
// so unknown values sort last and deterministically.
func compareOrdered[T cmp.Ordered](list []T, a, b T) int {
	if c := cmp.Compare(indexOf(list, a), indexOf(list, b)); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}
