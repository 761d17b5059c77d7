package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// ObserveTimeout bounds each Talos and Kubernetes call of an observation:
// a node that does not answer by then is unknown, with the reason.
const ObserveTimeout = 10 * time.Second

// Observation is what one read-only look at a cluster found: the
// provider's inventory, the state files, each node's Talos facts, etcd and
// Kubernetes. Every part that could not be read says why in its Unknown
// field; an unknown part is never taken for an empty one.
type Observation struct {
	// Offline is set when nothing was asked: plan --offline plans from an
	// observation of a cluster of which nothing exists.
	Offline bool
	// At is when the observation was made, by the Engine's clock; zero
	// when nothing was asked. The planner measures how long a node has
	// been NotReady from it, and is otherwise free of the clock.
	At time.Time
	// Inventory is what the provider owns for the cluster.
	Inventory Inventory
	// API is the cluster's API endpoint as the inventory shows it.
	API API
	// State is which of the cluster's state files exist.
	State StateFacts
	// Nodes holds the Talos facts of each owned machine that has an
	// address, by hostname.
	Nodes map[string]NodeFacts
	// TalosUnknown says why no node was asked, "" when they were.
	TalosUnknown string
	Etcd         EtcdFacts
	Kube         KubeFacts
	// Journal holds the mutations an earlier run began and never finished
	// (it was killed, or lost its lock): the planner plans from what
	// they left, and converge closes them once its plan re-checked them.
	Journal []state.Entry
	// Plugins holds what each configured plugin read, by name; nil
	// without plugins.
	Plugins map[string]pluginFacts
}

// StateFacts is what the cluster's state holds.
type StateFacts struct {
	Secrets, Talosconfig, Kubeconfig bool
	// TalosconfigContext is the context (cluster) name the existing
	// talosconfig was made for, "" without one.
	TalosconfigContext string
	// TalosconfigEndpoints are its endpoints.
	TalosconfigEndpoints []string
	// KubeconfigServer is the API server the kubeconfig names, "" without
	// one.
	KubeconfigServer string
}

// NodeFacts is what a node's Talos API told.
type NodeFacts struct {
	Address string
	// Unknown says why the node could not be read; "" when it answered.
	Unknown string
	// Version is the Talos version the node runs, such as v1.13.2.
	Version string
	// Maintenance is set when the node runs without a machine config
	// (maintenance mode): it answered only without the cluster's
	// credentials.
	Maintenance bool
	// ForeignIdentity is set when the node's Talos API serves a
	// certificate that the cluster identity's CA did not sign: the node
	// was built with another talossecrets.yaml.
	ForeignIdentity bool
	// Installer is the installer image of the running config (its
	// schematic and version), empty when unknown.
	Installer string
	// Config is the machine config the node runs with; nil when unknown,
	// and then ConfigUnknown says why.
	Config        []byte
	ConfigUnknown string
	// Etcd is the state of a control plane's etcd service ("Running",
	// "Preparing", ...); empty on workers or when unknown.
	Etcd string
	// BootID is the node's boot ID, read only when an interrupted run
	// left a restart of the node open in the journal; "" otherwise.
	BootID string
}

// EtcdFacts is the etcd membership as a healthy control plane sees it.
type EtcdFacts struct {
	// Unknown says why the membership could not be read, "" when it was.
	Unknown string
	Members []talos.Member
	// From is the control plane that answered.
	From string
}

// KubeFacts is what the cluster's Kubernetes API told.
type KubeFacts struct {
	// Unknown says why the API could not be read, "" when it answered.
	Unknown string
	// Version is the API server's version.
	Version string
	Nodes   []kube.Node
	// Recovered is set when the kubeconfig used came from a control plane
	// because the state has none.
	Recovered bool
}

// Bootstrapped reports whether the cluster was bootstrapped, from etcd and
// the Kubernetes API only: the API answers, or a control plane's etcd runs
// or lists members. known is false when that cannot be decided: machines
// exist but neither answered.
func (o *Observation) Bootstrapped() (yes, known bool) {
	if o.Kube.Unknown == "" {
		return true, true
	}
	if len(o.Etcd.Members) > 0 {
		return true, true
	}
	allAnswered := true
	for _, m := range o.Inventory.Machines() {
		if m.Role != spec.RoleControlPlane {
			continue
		}
		n, ok := o.Nodes[m.Hostname]
		switch {
		case !ok || n.Unknown != "":
			allAnswered = false
		case n.Etcd == "Running":
			return true, true
		}
	}
	if len(o.Inventory.Machines()) == 0 {
		return false, true
	}
	return false, allAnswered && o.TalosUnknown == ""
}

// Observe reads the cluster without changing anything.
func (e *Engine) Observe(ctx context.Context) (*Observation, error) {
	inv, err := e.Infra.Observe(ctx)
	if err != nil {
		return nil, err
	}
	obs := &Observation{Inventory: inv, Nodes: map[string]NodeFacts{}, At: e.now(), API: EndpointOf(e.Cluster, e.Infra, inv)}
	if err := e.observeState(ctx, obs); err != nil {
		return nil, err
	}
	if e.Journal != nil {
		if obs.Journal, err = e.Journal.Open(ctx, e.Key); err != nil {
			return nil, fmt.Errorf("reading the run journal: %w", err)
		}
	}
	bundle, err := e.bundle(ctx)
	if err != nil {
		return nil, err
	}
	var tc *talos.Client
	if bundle == nil {
		obs.TalosUnknown = "the cluster has no identity (" + TalosSecretsFile + ") yet"
	} else if tc, err = e.observeNodes(ctx, obs, bundle); err != nil {
		obs.TalosUnknown = err.Error()
	}
	if tc != nil {
		defer tc.Close()
	}
	e.observeEtcd(ctx, obs, tc)
	e.observeKube(ctx, obs, tc)
	return obs, nil
}

// Offline returns the observation of a cluster of which nothing exists,
// without asking anything: the basis of plan --offline.
func Offline(infra Infra) *Observation {
	return &Observation{
		Offline:      true,
		Inventory:    infra.Empty(),
		Nodes:        map[string]NodeFacts{},
		TalosUnknown: "offline: nothing was asked",
		Etcd:         EtcdFacts{Unknown: "offline: nothing was asked"},
		Kube:         KubeFacts{Unknown: "offline: nothing was asked"},
	}
}

func (e *Engine) observeState(ctx context.Context, obs *Observation) error {
	var err error
	if obs.State.Secrets, err = e.exists(ctx, TalosSecretsFile); err != nil {
		return err
	}
	kubeconfig, err := e.read(ctx, KubeconfigFile)
	if err != nil {
		return err
	}
	obs.State.Kubeconfig = len(kubeconfig) > 0
	obs.State.KubeconfigServer = kube.Server(kubeconfig)
	data, err := e.read(ctx, TalosconfigFile)
	if err != nil {
		return err
	}
	if len(data) > 0 {
		obs.State.Talosconfig = true
		obs.State.TalosconfigContext, obs.State.TalosconfigEndpoints = talos.ConfigContext(data)
	}
	return nil
}

// bundle loads the cluster identity, nil when there is none.
func (e *Engine) bundle(ctx context.Context) (*secrets.Bundle, error) {
	data, err := e.read(ctx, TalosSecretsFile)
	if err != nil || len(data) == 0 {
		return nil, err
	}
	return machineconfig.ParseSecrets(TalosSecretsFile, data)
}

// observeNodes asks every owned machine with an address for its version,
// running config and (on control planes) etcd service, in parallel.
func (e *Engine) observeNodes(ctx context.Context, obs *Observation, bundle *secrets.Bundle) (*talos.Client, error) {
	var endpoints []string
	type target struct {
		host, addr string
		cp         bool
	}
	var targets []target
	for _, m := range obs.Inventory.Machines() {
		if len(m.Addresses) == 0 {
			continue
		}
		t := target{host: m.Hostname, addr: m.Addresses[0].String(), cp: m.Role == spec.RoleControlPlane}
		targets = append(targets, t)
		if t.cp {
			endpoints = append(endpoints, t.addr)
		}
	}
	if len(targets) == 0 {
		return nil, errors.New("no machine reports an address yet")
	}
	if len(endpoints) == 0 {
		return nil, errors.New("no control plane reports an address yet")
	}
	tc, err := talos.Dial(ctx, e.Cluster.Name, bundle, endpoints)
	if err != nil {
		return nil, err
	}
	restarting := map[string]bool{}
	for _, en := range obs.Journal {
		restarting[en.Target] = restarting[en.Target] || en.Boot != ""
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() {
			f := nodeFacts(ctx, tc, bundle, t.addr, t.cp)
			if restarting[t.host] && f.Unknown == "" && !f.Maintenance {
				// An interrupted run asked for its restart: did it happen?
				f.BootID, _ = tc.BootID(ctx, t.addr)
			}
			mu.Lock()
			obs.Nodes[t.host] = f
			mu.Unlock()
		})
	}
	wg.Wait()
	return tc, nil
}

func nodeFacts(ctx context.Context, tc *talos.Client, bundle *secrets.Bundle, addr string, cp bool) NodeFacts {
	ctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
	defer cancel()
	f := NodeFacts{Address: addr}
	v, err := tc.Version(ctx, addr)
	if err != nil {
		if mv, merr := talos.MaintenanceVersion(ctx, addr); merr == nil {
			f.Version, f.Maintenance = mv, true
			return f
		}
		f.Unknown = err.Error()
		if ours, perr := talos.ServedByIdentity(ctx, addr, bundle); perr == nil && !ours {
			f.ForeignIdentity = true
			f.Unknown = "its Talos API certificate is not signed by this cluster's identity"
		}
		return f
	}
	f.Version = v
	if f.Config, err = tc.RunningConfig(ctx, addr); err != nil {
		f.Config, f.ConfigUnknown = nil, err.Error()
	} else if cfg, err := machineconfig.Parse(f.Config); err == nil && cfg.Machine() != nil {
		f.Installer = cfg.Machine().Install().Image()
	}
	if cp {
		if s, ok, err := tc.Service(ctx, addr, "etcd"); err == nil && ok {
			f.Etcd = s.State
		}
	}
	return f
}

// observeEtcd lists the etcd members from the first control plane whose
// etcd runs.
func (e *Engine) observeEtcd(ctx context.Context, obs *Observation, tc *talos.Client) {
	if tc == nil {
		obs.Etcd.Unknown = obs.TalosUnknown
		return
	}
	var reasons []string
	for _, m := range obs.Inventory.Machines() {
		n, ok := obs.Nodes[m.Hostname]
		if !ok || m.Role != spec.RoleControlPlane || n.Etcd != "Running" {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
		members, err := tc.EtcdMembers(cctx, n.Address)
		cancel()
		if err == nil {
			obs.Etcd.Members, obs.Etcd.From = members, m.Hostname
			return
		}
		reasons = append(reasons, err.Error())
	}
	if len(reasons) == 0 {
		obs.Etcd.Unknown = "no control plane's etcd is running"
		return
	}
	obs.Etcd.Unknown = reasons[0]
}

// observeKube probes the Kubernetes API with the state's kubeconfig, or
// with one a control plane serves when the state has none (kept in memory
// only: observing writes nothing).
func (e *Engine) observeKube(ctx context.Context, obs *Observation, tc *talos.Client) {
	data, err := e.read(ctx, KubeconfigFile)
	if err != nil {
		obs.Kube.Unknown = err.Error()
		return
	}
	if len(data) == 0 {
		if data = e.recoverKubeconfig(ctx, obs, tc); data == nil {
			obs.Kube.Unknown = "no kubeconfig, and no control plane served one"
			return
		}
		obs.Kube.Recovered = true
	}
	kc, err := kubeClient(data, obs.API)
	if err != nil {
		obs.Kube.Unknown = err.Error()
		return
	}
	// A few tries, so that one failure is never taken for a cluster that
	// was never bootstrapped.
	err = retry.Do(ctx, retry.Policy{Initial: e.poll() / 4, Max: e.poll(), Attempts: 3}, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
		defer cancel()
		v, err := kc.Version(cctx)
		if err != nil {
			return retry.Transient(err)
		}
		nodes, err := kc.Nodes(cctx)
		if err != nil {
			return retry.Transient(err)
		}
		obs.Kube.Version, obs.Kube.Nodes = v, nodes
		return nil
	})
	if err != nil {
		obs.Kube.Unknown = "the Kubernetes API does not answer: " + err.Error()
	}
}

func (e *Engine) recoverKubeconfig(ctx context.Context, obs *Observation, tc *talos.Client) []byte {
	if tc == nil {
		return nil
	}
	for _, m := range obs.Inventory.Machines() {
		n, ok := obs.Nodes[m.Hostname]
		if !ok || n.Unknown != "" || m.Role != spec.RoleControlPlane {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
		data, err := tc.Kubeconfig(cctx, n.Address)
		cancel()
		if err == nil {
			return data
		}
	}
	return nil
}

// controlPlanes returns the hostnames of the desired control planes, in
// order.
func controlPlanes(want *Desired) []string {
	var out []string
	for _, m := range want.Machines {
		if m.Role() == spec.RoleControlPlane {
			out = append(out, m.Hostname)
		}
	}
	return out
}
