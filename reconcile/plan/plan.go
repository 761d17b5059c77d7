// Package plan holds the Plan model: the typed changes that converge would
// make to one cluster, grouped by the phase that makes them, with the
// warnings and refused changes found on the way.
//
// A Plan is pure data. It does no I/O, knows nothing of providers, Git or
// GitHub, and serialises to the versioned JSON schema documented in
// docs/plan-json.md. Planning code fills a Plan with Add, Warn and Refuse;
// renderers and executors read it, usually through Sorted so that every
// output is deterministic.
package plan

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// SchemaVersion is the version of the JSON schema this package writes. It
// changes only when the schema changes in a way old readers cannot follow.
const SchemaVersion = 2

// Resource identifies the thing a change touches.
type Resource struct {
	// Kind is the kind of resource.
	Kind ResourceKind `json:"kind"`
	// Name is the resource's name as the provider or the cluster knows it,
	// such as a hostname or a firewall rule name.
	Name string `json:"name"`
}

// String returns the kind and name separated by a space.
func (r Resource) String() string {
	return string(r.Kind) + " " + r.Name
}

// Attribute is one labelled detail of a change, such as cores=4 or
// source=100.64.0.0/10. Values are display text, already formatted.
type Attribute struct {
	// Key names the detail.
	Key string `json:"key"`
	// Value is the detail's value, or the transition "old -> new".
	Value string `json:"value"`
}

// Domain says which world a step acts on.
type Domain string

// Domains of a step.
const (
	// DomainProvider steps change the provider's resources (VMs, ISOs,
	// pools, firewalls).
	DomainProvider Domain = "provider"
	// DomainState steps write the cluster's state: talossecrets.yaml,
	// talosconfig, kubeconfig.
	DomainState Domain = "state"
	// DomainTalos steps call the Talos API (bootstrap, apply config,
	// upgrade, reset).
	DomainTalos Domain = "talos"
	// DomainKube steps call the Kubernetes API (cordon, drain, delete a
	// node).
	DomainKube Domain = "kube"
	// DomainGate steps change nothing: they wait until a condition holds
	// (addresses known, cluster healthy) and stop the run when it does not.
	DomainGate Domain = "gate"
)

// Change is one step of a plan: one thing converge does, in order.
type Change struct {
	// Phase is the converge phase that makes the change.
	Phase Phase `json:"phase"`
	// Domain is the world the step acts on. Empty in a refusal-only
	// change.
	Domain Domain `json:"domain,omitempty"`
	// Action is what the change does.
	Action Action `json:"action"`
	// Resource is what the change touches.
	Resource Resource `json:"resource"`
	// Reason says, for a person, why the change is needed.
	Reason string `json:"reason"`
	// Attributes are details worth showing with the change.
	Attributes []Attribute `json:"attributes"`
	// Expects is the step's precondition, for a person: what it expects
	// of the world. Converge checks it again just before the step runs and
	// stops when it no longer holds.
	Expects string `json:"expects,omitempty"`
	// Diff is an optional text diff, for example of a machine
	// configuration. It must be redacted before it is put here.
	Diff string `json:"diff,omitempty"`
	// Batch, when not zero, marks a step that runs in parallel with the
	// other steps of the same batch: converge runs each machine's steps of
	// a batch in order (a machine's steps name it as their resource), and
	// the machines of the batch at the same time; the next step after the
	// batch starts once every machine's steps are done.
	Batch int `json:"batch,omitempty"`
	// Op is the typed operation the executor of the step's domain runs.
	// It is not part of the JSON form: a plan is shown from the other
	// fields and executed from this one, never from display text.
	Op any `json:"-"`
}

// Destructive reports whether the step deletes or replaces a machine (and
// the data on it).
func (c Change) Destructive() bool {
	return c.Resource.Kind == KindMachine && (c.Action == ActionDelete || c.Action == ActionReplace)
}

// Step returns a one-line identity of the change: phase, domain, action
// and resource. Two plans list the same steps when these lines are equal.
func (c Change) Step() string {
	return fmt.Sprintf("%s %s %s %s", c.Phase, c.Domain, c.Action, c.Resource)
}

// MarshalJSON writes the change with attributes as an array, never null.
func (c Change) MarshalJSON() ([]byte, error) {
	type wire Change
	w := wire(c)
	if w.Attributes == nil {
		w.Attributes = []Attribute{}
	}
	return marshal(w)
}

// Refusal is a change that cluster.yaml asks for and converge will not make,
// because it cannot be made safely. A plan with refusals stops converge
// before its first mutation.
type Refusal struct {
	// Resource is what the refused change would touch.
	Resource Resource `json:"resource"`
	// Reason says why the change is refused and what to do instead.
	Reason string `json:"reason"`
	// Waits is set when what is refused is a condition that changes on its
	// own (a node still shutting down): converge then ends as waiting and
	// is worth running again, rather than failed.
	Waits bool `json:"waits,omitempty"`
}

// Plan is everything converge would do to one cluster at one commit.
//
// The zero value is an empty plan ready to use. Changes, Warnings and
// Refusals always serialise as JSON arrays, empty when there is nothing in
// them, and Version serialises as SchemaVersion when it is zero.
type Plan struct {
	// Version is the schema version of the JSON form; see SchemaVersion.
	Version int `json:"version"`
	// Cluster is the name of the cluster.
	Cluster string `json:"cluster"`
	// Commit is the Git commit the plan was made for, when known.
	Commit string `json:"commit,omitempty"`
	// Changes are the changes converge would make.
	Changes []Change `json:"changes"`
	// Warnings are messages for a person that do not block converge.
	Warnings []string `json:"warnings"`
	// Refusals are the changes converge will not make.
	Refusals []Refusal `json:"refusals"`
	// Incomplete is set when a part of the cluster could not be read: the
	// plan compares only what was read, so it is never "no changes".
	Incomplete bool `json:"incomplete"`
	// IncompleteReasons say what could not be read, each as "<what> could
	// not be read: <reason>".
	IncompleteReasons []string `json:"incomplete_reasons"`
}

// New returns an empty plan for the named cluster at the current schema
// version.
func New(cluster string) *Plan {
	return &Plan{
		Version:  SchemaVersion,
		Cluster:  cluster,
		Changes:  []Change{},
		Warnings: []string{},
		Refusals: []Refusal{},

		IncompleteReasons: []string{},
	}
}

// MarshalJSON writes the plan with every list as an array, never null.
func (p Plan) MarshalJSON() ([]byte, error) {
	type wire Plan
	w := wire(p)
	if w.Version == 0 {
		w.Version = SchemaVersion
	}
	if w.Changes == nil {
		w.Changes = []Change{}
	}
	if w.Warnings == nil {
		w.Warnings = []string{}
	}
	if w.IncompleteReasons == nil {
		w.IncompleteReasons = []string{}
	}
	if w.Refusals == nil {
		w.Refusals = []Refusal{}
	}
	return marshal(w)
}

// marshal encodes v without escaping '<', '>' and '&'. A caller that wants
// them escaped (json.Marshal does by default) still gets them escaped, since
// the encoding package escapes the output of MarshalJSON itself.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Add records a change. A change whose action is ActionRefuse is also
// recorded as a refusal, so Refusals always lists every refused change.
func (p *Plan) Add(c Change) {
	p.Changes = append(p.Changes, c)
	if c.Action == ActionRefuse {
		p.Refuse(c.Resource, c.Reason)
	}
}

// Warn records a warning. A warning already in the plan is not repeated.
func (p *Plan) Warn(msg string) {
	if slices.Contains(p.Warnings, msg) {
		return
	}
	p.Warnings = append(p.Warnings, msg)
}

// Unread records that what could not be read, and why: the plan becomes
// incomplete. The same reason is not repeated.
func (p *Plan) Unread(what, reason string) {
	msg := what + " could not be read: " + reason
	p.Incomplete = true
	if !slices.Contains(p.IncompleteReasons, msg) {
		p.IncompleteReasons = append(p.IncompleteReasons, msg)
	}
}

// Refuse records a refused change to r. The same refusal is not repeated.
func (p *Plan) Refuse(r Resource, reason string) {
	p.addRefusal(Refusal{Resource: r, Reason: reason})
}

// RefuseForNow records a refusal of a condition that changes on its own,
// such as a node whose state is still settling: a run refused only by such
// refusals waits and is tried again.
func (p *Plan) RefuseForNow(r Resource, reason string) {
	p.addRefusal(Refusal{Resource: r, Reason: reason, Waits: true})
}

func (p *Plan) addRefusal(ref Refusal) {
	if slices.Contains(p.Refusals, ref) {
		return
	}
	p.Refusals = append(p.Refusals, ref)
}

// Empty reports whether the plan has no changes and no refusals. Warnings
// alone leave a plan empty. A nil plan is empty.
func (p *Plan) Empty() bool {
	return p == nil || (len(p.Changes) == 0 && len(p.Refusals) == 0)
}

// Sort puts the plan in its deterministic order, in place: changes by phase
// (in converge order), keeping the order the planner gave them within a
// phase, which is the order converge runs them in; the attributes of each
// change by key; refusals by kind, name and reason. Warnings keep the order
// they were recorded in.
func (p *Plan) Sort() {
	slices.SortStableFunc(p.Changes, compareChanges)
	for i := range p.Changes {
		slices.SortStableFunc(p.Changes[i].Attributes, func(a, b Attribute) int {
			return cmp.Compare(a.Key, b.Key)
		})
	}
	slices.SortStableFunc(p.Refusals, func(a, b Refusal) int {
		if c := compareResources(a.Resource, b.Resource); c != 0 {
			return c
		}
		return cmp.Compare(a.Reason, b.Reason)
	})
}

// Sorted returns a sorted deep copy of the plan and leaves p untouched. The
// copy's lists, including each change's attributes, are never nil, and its
// Version is SchemaVersion when p's is zero. A nil plan gives an empty plan.
func (p *Plan) Sorted() *Plan {
	out := New("")
	if p == nil {
		return out
	}
	out.Cluster = p.Cluster
	out.Commit = p.Commit
	if p.Version != 0 {
		out.Version = p.Version
	}
	out.Changes = make([]Change, len(p.Changes))
	for i, c := range p.Changes {
		c.Attributes = append([]Attribute{}, c.Attributes...)
		out.Changes[i] = c
	}
	out.Warnings = append(out.Warnings, p.Warnings...)
	out.Refusals = append(out.Refusals, p.Refusals...)
	out.Incomplete = p.Incomplete
	out.IncompleteReasons = append(out.IncompleteReasons, p.IncompleteReasons...)
	out.Sort()
	return out
}

// Validate checks that every change and refusal names a known phase, action
// and kind and a non-empty resource name, and that the plan's schema
// version is one this package understands. It returns every problem found,
// joined, or nil.
func (p *Plan) Validate() error {
	if p == nil {
		return nil
	}
	var errs []error
	if p.Version < 0 || p.Version > SchemaVersion {
		errs = append(errs, fmt.Errorf("unsupported schema version %d (this build reads up to %d)", p.Version, SchemaVersion))
	}
	for i, c := range p.Changes {
		where := fmt.Sprintf("change %d (%s)", i, c.Resource)
		if !c.Phase.Valid() {
			errs = append(errs, fmt.Errorf("%s: unknown phase %q", where, c.Phase))
		}
		if !c.Action.Valid() {
			errs = append(errs, fmt.Errorf("%s: unknown action %q", where, c.Action))
		}
		errs = append(errs, validateResource(where, c.Resource)...)
	}
	for i, r := range p.Refusals {
		errs = append(errs, validateResource(fmt.Sprintf("refusal %d (%s)", i, r.Resource), r.Resource)...)
	}
	return errors.Join(errs...)
}

// validateResource returns the problems with r, prefixed by where.
func validateResource(where string, r Resource) []error {
	var errs []error
	if !r.Kind.Valid() {
		errs = append(errs, fmt.Errorf("%s: unknown resource kind %q", where, r.Kind))
	}
	if r.Name == "" {
		errs = append(errs, fmt.Errorf("%s: empty resource name", where))
	}
	return errs
}

// compareChanges is the sort order of Sort: by phase only.
func compareChanges(a, b Change) int {
	return ComparePhases(a.Phase, b.Phase)
}

// compareResources orders resources by kind, then name.
func compareResources(a, b Resource) int {
	if c := CompareKinds(a.Kind, b.Kind); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// Removals returns the hostnames of the machines the plan removes from
// the cluster (its VM or server, its Kubernetes node or its etcd member),
// in the order they go; a person must see them before anything else.
func Removals(p *Plan) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, c := range p.Changes {
		if c.Action != ActionDelete || c.Phase == PhaseDestroy {
			continue
		}
		switch c.Resource.Kind {
		case KindMachine, KindNode, KindEtcdMember:
			if !slices.Contains(out, c.Resource.Name) {
				out = append(out, c.Resource.Name)
			}
		}
	}
	return out
}
