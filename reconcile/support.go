package reconcile

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// implementedTalos lists the Talos minors whose API behaviour this engine
// implements and the lab emulates (lab/talos copies Talos v1.13.9; see
// lab/FIDELITY.md). It is the one place the range is kept: validate still
// accepts every version the Python tool accepts (spec.MinTalosVersion and
// newer; a minor spec.KubernetesRange does not know is unknown, not
// incompatible), but plan and converge refuse a talos.version outside it
// before the first mutation, as the engine would otherwise guess the
// behaviour of an API it was not built for. A minor is added here when the
// engine implements its behaviour and the lab emulates it.
var implementedTalos = [][2]uint{{1, 13}}

// talosDifferences says, for minors known not to be implemented, how their
// API behaviour differs from the implemented range (read in
// siderolabs/talos v1.14.0-rc.1, machined ApplyConfiguration).
var talosDifferences = map[[2]uint]string{
	{1, 14}: "Talos 1.14 changes apply-config: AUTO always applies without a reboot, and REBOOT is refused outside maintenance mode",
}

// ImplementedTalos is the range of Talos versions the engine implements, as
// people read it, such as "v1.13.x".
func ImplementedTalos() string {
	out := make([]string, len(implementedTalos))
	for i, m := range implementedTalos {
		out[i] = fmt.Sprintf("v%d.%d.x", m[0], m[1])
	}
	return strings.Join(out, ", ")
}

// TalosImplemented says whether the engine implements the API behaviour of
// Talos version v; when it does not, why says so, naming the range.
func TalosImplemented(v string) (ok bool, why string) {
	parsed, err := version.ParseSemantic(v)
	if err != nil {
		return false, fmt.Sprintf("talos.version %s does not parse as a version (%v); this engine implements Talos %s only", v, err, ImplementedTalos())
	}
	minor := [2]uint{parsed.Major(), parsed.Minor()}
	for _, m := range implementedTalos {
		if m == minor {
			return true, ""
		}
	}
	diff := "the engine was not built for its API, whose behaviour is not guessed"
	if d, known := talosDifferences[minor]; known {
		diff = "its API behaviour differs: " + d
	}
	return false, fmt.Sprintf("talos.version %s: this engine implements Talos %s only (%s); use a Talos %s release, or a taloscluster release that implements Talos v%d.%d",
		v, ImplementedTalos(), diff, ImplementedTalos(), minor[0], minor[1])
}

// refuseUnimplementedTalos refuses, before the first mutation, a
// talos.version whose API behaviour the engine does not implement.
func refuseUnimplementedTalos(p *plan.Plan, want *Desired) {
	if ok, why := TalosImplemented(want.Cluster.Talos.Version); !ok {
		p.Refuse(plan.Resource{Kind: plan.KindCluster, Name: "talos.version"}, why)
	}
}
