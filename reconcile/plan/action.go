package plan

// Action is what a Change does to its resource. Its value is the stable
// string used in the JSON form of a plan.
type Action string

// Actions a change can carry. The comment on each gives the symbol the text
// renderers print for it.
const (
	// ActionCreate creates a resource that does not exist yet ("+").
	ActionCreate Action = "create"
	// ActionUpdate changes an existing resource in place ("~").
	ActionUpdate Action = "update"
	// ActionReplace deletes a resource and creates it again, because the
	// change cannot be made in place ("-/+").
	ActionReplace Action = "replace"
	// ActionDelete removes a resource ("-").
	ActionDelete Action = "delete"
	// ActionApplyConfig pushes a new machine configuration to a running
	// node (">").
	ActionApplyConfig Action = "apply-config"
	// ActionUpgradeTalos moves a node to another Talos version or schematic
	// ("^").
	ActionUpgradeTalos Action = "upgrade-talos"
	// ActionUpgradeKubernetes moves the cluster to another Kubernetes
	// version ("^").
	ActionUpgradeKubernetes Action = "upgrade-kubernetes"
	// ActionBootstrap initialises etcd on the first control plane ("*").
	ActionBootstrap Action = "bootstrap"
	// ActionDrain evicts a node's pods through the eviction API, honouring
	// PodDisruptionBudgets ("v").
	ActionDrain Action = "drain"
	// ActionReset resets a node through Talos: drained, out of etcd, its
	// disk wiped, powered off ("x").
	ActionReset Action = "reset"
	// ActionRestart restarts a running machine: a Talos reboot, or a power
	// cycle by its provider so that pending hardware changes take effect
	// ("@").
	ActionRestart Action = "restart"
	// ActionWait is a gate: it changes nothing and waits until a condition
	// holds, or stops the run ("=").
	ActionWait Action = "wait"
	// ActionRefuse marks a change that cluster.yaml asks for but that will
	// not be made, because it cannot be made safely ("!").
	ActionRefuse Action = "refuse"
)

// actions lists every known action in sort order.
var actions = []Action{
	ActionCreate,
	ActionUpdate,
	ActionReplace,
	ActionDelete,
	ActionApplyConfig,
	ActionUpgradeTalos,
	ActionUpgradeKubernetes,
	ActionBootstrap,
	ActionDrain,
	ActionReset,
	ActionRestart,
	ActionWait,
	ActionRefuse,
}

// Actions returns every known action, in the order a sorted plan lists
// changes to the same resource.
func Actions() []Action {
	return append([]Action(nil), actions...)
}

// Valid reports whether a is one of the known actions.
func (a Action) Valid() bool {
	return indexOf(actions, a) < len(actions)
}

// Symbol returns the short marker the text renderers print in front of a
// change: "+", "~", "-/+", "-", ">", "^", "*", "v", "x", "@", "=" or "!". An unknown action
// gives "?".
func (a Action) Symbol() string {
	switch a {
	case ActionCreate:
		return "+"
	case ActionUpdate:
		return "~"
	case ActionReplace:
		return "-/+"
	case ActionDelete:
		return "-"
	case ActionApplyConfig:
		return ">"
	case ActionUpgradeTalos, ActionUpgradeKubernetes:
		return "^"
	case ActionBootstrap:
		return "*"
	case ActionDrain:
		return "v"
	case ActionReset:
		return "x"
	case ActionRestart:
		return "@"
	case ActionWait:
		return "="
	case ActionRefuse:
		return "!"
	default:
		return "?"
	}
}

// CompareActions orders actions by their position in Actions. Unknown
// actions sort after every known one, by name. It returns a negative number
// when a sorts before b, zero when they are equal and a positive number
// otherwise.
func CompareActions(a, b Action) int {
	return compareOrdered(actions, a, b)
}
