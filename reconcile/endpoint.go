package reconcile

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// UnknownEndpoint is how a plan shows the Kubernetes API endpoint before
// the provider has allocated its address (in the network phase).
const UnknownEndpoint = "(known after network)"

// API is the cluster's Kubernetes API endpoint.
type API struct {
	// URL is the endpoint the machine configs name and the engine talks
	// to, such as https://10.0.0.10:6443: the Layer-2 VIP the control
	// planes share. Empty while not Known.
	URL string
	// VIP is the address in URL.
	VIP netip.Addr
	// Public is the endpoint written in the kubeconfig for people when it
	// differs from URL (OpenStack's floating IP in front of the VIP); ""
	// otherwise. PublicAddr is its address, which the certificates name.
	Public     string
	PublicAddr netip.Addr
	// Known is false while the provider has not allocated the VIP.
	Known bool
	// Allocated is set when the provider, not cluster.yaml, allocates the
	// addresses (Endpointer): the engine then always talks to URL,
	// whatever address the stored kubeconfig names.
	Allocated bool
	// PublicPending is set when the provider fronts the VIP with a public
	// address that does not exist yet (its network phase makes it).
	PublicPending bool
}

// Kubeconfig returns the server the kubeconfig for people names: Public
// when there is one, else URL; UnknownEndpoint while not known.
func (a API) Kubeconfig() string {
	switch {
	case !a.Known || a.PublicPending:
		return UnknownEndpoint
	case a.Public != "":
		return a.Public
	}
	return a.URL
}

// Endpointer is an optional capability of an Infra whose provider, not
// cluster.yaml, allocates the API's addresses (OpenStack's reserved kubeapi
// port and its floating IP).
type Endpointer interface {
	// APIEndpoint returns, from what was observed, the Layer-2 VIP the
	// control planes share and the public address in front of it; ok is
	// false while the VIP does not exist yet, and public is invalid while
	// the public address does not (a provider that implements Endpointer
	// always fronts the VIP with one). It does no I/O.
	APIEndpoint(have Inventory) (vip, public netip.Addr, ok bool)
}

// Ingresser is an optional capability of an Infra that allocates the
// address of the cluster's ingress (OpenStack's ingress port): its VIP
// and the public address in front of it, from what was observed, without
// I/O; ok is false while it does not exist.
type Ingresser interface {
	IngressEndpoint(have Inventory) (vip, public netip.Addr, ok bool)
}

// Projecter is an optional capability of an Infra in a cloud of projects
// (OpenStack): the name of the project its credential acts in, known once
// it read the cloud, for plugins (the argocd plugin's chart values).
type Projecter interface {
	ProjectName() string
}

// projectOf returns the provider's project name, "" without one.
func projectOf(infra Infra) string {
	if p, ok := infra.(Projecter); ok {
		return p.ProjectName()
	}
	return ""
}

// ingressOf returns the provider's ingress addresses, "" for those it has
// not allocated (or when it allocates none).
func ingressOf(infra Infra, have Inventory) (vip, public string) {
	in, ok := infra.(Ingresser)
	if !ok || have == nil {
		return "", ""
	}
	v, p, ok := in.IngressEndpoint(have)
	if !ok {
		return "", ""
	}
	vip = v.String()
	if p.IsValid() {
		public = p.String()
	}
	return vip, public
}

// EndpointOf returns the cluster's API endpoint as the inventory have
// shows it: the provider's when it allocates it (Endpointer), else
// cluster.yaml's kubeapi_vip.
func EndpointOf(c *spec.Cluster, infra Infra, have Inventory) API {
	if ep, ok := infra.(Endpointer); ok {
		vip, public, ok := ep.APIEndpoint(have)
		if !ok || !vip.IsValid() {
			return API{Allocated: true}
		}
		a := API{URL: apiURL(vip), VIP: vip, Known: true, Allocated: true, PublicPending: !public.IsValid()}
		if public.IsValid() && public != vip {
			a.Public, a.PublicAddr = apiURL(public), public
		}
		return a
	}
	return ConfiguredAPI(c)
}

// ConfiguredAPI is the endpoint cluster.yaml names (Proxmox's kubeapi_vip).
func ConfiguredAPI(c *spec.Cluster) API {
	url, vip := Endpoint(c)
	return API{URL: url, VIP: vip, Known: true}
}

func apiURL(addr netip.Addr) string {
	return "https://" + netip.AddrPortFrom(addr, 6443).String()
}

// kubeClient is a Kubernetes client from a stored kubeconfig that talks to
// the cluster's internal endpoint: the kubeconfig for people may name a
// public address in front of it, which the engine does not hairpin
// through.
func kubeClient(kubeconfig []byte, api API) (*kube.Client, error) {
	if api.Known && api.Allocated {
		return kube.NewAt(kubeconfig, api.URL)
	}
	return kube.New(kubeconfig)
}

// forPeople returns a kubeconfig a control plane served (naming the
// internal endpoint) as it is stored: naming the public endpoint when
// there is one.
func forPeople(kubeconfig []byte, api API) ([]byte, error) {
	if !api.Known || !api.Allocated || api.Public == "" {
		return kubeconfig, nil
	}
	out, err := kube.WithServer(kubeconfig, api.Public)
	if err != nil {
		return nil, fmt.Errorf("naming %s in the kubeconfig: %w", api.Public, err)
	}
	return out, nil
}

// makeConfigs makes the machine configs once the network phase has
// allocated the API endpoint.
type makeConfigs struct{}

// planConfigs adds the step that makes the machine configs when the
// endpoint is not known yet. Machines that exist while the provider
// reports no endpoint run configs that name one it no longer has: a new
// address would not be theirs, so that is refused.
func planConfigs(p *plan.Plan, want *Desired, obs *Observation) {
	ms := obs.Inventory.Machines()
	switch {
	case want.API.Known && !want.API.PublicPending:
		return
	case !want.API.Known && len(ms) > 0:
		p.Refuse(plan.Resource{Kind: plan.KindVIP, Name: want.Cluster.Name + "-kubeapi"},
			fmt.Sprintf("%d machines of the cluster exist (e.g. %s) but the provider reports no address for the Kubernetes API: their configs name an endpoint that a newly allocated address would not be; restore the API's reserved port, or destroy the cluster", len(ms), ms[0].Hostname))
		return
	case len(ms) > 0:
		// The public address is gone from a running cluster.
		p.Warn(fmt.Sprintf("the public address of the Kubernetes API (%s's floating IP) is gone: the network phase makes a new one; the next converge puts it in the certificates and in %s", want.Cluster.Name+"-kubeapi", KubeconfigFile))
		return
	}
	// No machine yet: the configs wait for the endpoint, and for the
	// public address in front of it so that the certificates name it.
	p.Add(plan.Change{Phase: plan.PhaseDiscover, Domain: plan.DomainState, Action: plan.ActionCreate,
		Resource:   plan.Resource{Kind: plan.KindMachineConfigs, Name: want.Cluster.Name},
		Reason:     "the machine configs of the new machines, made from the API endpoint the network phase allocates (kept in memory, delivered as user data)",
		Attributes: []plan.Attribute{{Key: "endpoint", Value: UnknownEndpoint}},
		Expects:    "the provider reports the API's address",
		Op:         makeConfigs{}})
}

// makeConfigs reads the endpoint the provider allocated and makes the
// configs of the desired machines from it.
func (r *run) makeConfigs(ctx context.Context) error {
	e := r.e
	inv, err := e.Infra.Observe(ctx)
	if err != nil {
		return fmt.Errorf("reading the API endpoint the network phase allocated: %w", err)
	}
	api := EndpointOf(e.Cluster, e.Infra, inv)
	if !api.Known || api.PublicPending {
		return fmt.Errorf("%w: the provider reports no address for the Kubernetes API (or none in front of it) after the network phase", ErrPrecondition)
	}
	bundle := r.bundle
	if bundle == nil {
		if bundle, err = e.bundle(ctx); err != nil {
			return err
		}
		if bundle == nil {
			return fmt.Errorf("%w: there is no %s to make the configs from", ErrPrecondition, TalosSecretsFile)
		}
	}
	r.want.API = api
	if err := e.configs(r.want, bundle, nil); err != nil {
		return err
	}
	e.say(plan.PhaseDiscover, "made the machine configs for the API at %s", api.URL)
	return nil
}

// noMachines reports whether the observation found no machine (nil: none
// was made, as when the identity is minted).
func (o *Observation) noMachines() bool {
	return o == nil || o.Inventory == nil || len(o.Inventory.Machines()) == 0
}
