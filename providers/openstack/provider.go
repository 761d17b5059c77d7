package openstack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"

	"github.com/taloscluster/taloscluster/internal/factoryhttp"
	"github.com/taloscluster/taloscluster/internal/noredirect"
	"github.com/taloscluster/taloscluster/internal/tlstrust"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Bounds on OpenStack calls.
const (
	// CallTimeout bounds one API call.
	CallTimeout = 30 * time.Second
	// UploadTimeout bounds the download of the boot image from the Image
	// Factory and its upload to Glance.
	UploadTimeout = 30 * time.Minute
	// BuildTimeout bounds the wait for a server to leave BUILD, an image
	// to turn active, or a server to go away.
	BuildTimeout = 15 * time.Minute
)

// computeMicroversion is the Compute API microversion every call asks for:
// 2.52 is the first that takes tags when a server is created, and it
// embeds the flavor (name, size) in a server (2.47).
const computeMicroversion = "2.52"

// Provider runs a cluster's OpenStack resources through gophercloud.
type Provider struct {
	c   *spec.Cluster
	log *slog.Logger
	hc  *http.Client
	// poll is how often a wait reads the resource again.
	poll time.Duration

	// factoryHC fetches the boot image from the Image Factory.
	factoryHC *http.Client

	mu      sync.Mutex
	compute *gophercloud.ServiceClient
	network *gophercloud.ServiceClient
	image   *gophercloud.ServiceClient
	// project is the ID of the application credential's project: every
	// Neutron and Glance list is limited to it, so that a credential
	// with an admin role never takes another project's resources for
	// the cluster's.
	project string
	// projectName is the credential's project's name, for plugins.
	projectName string
}

var (
	_ reconcile.Infra         = (*Provider)(nil)
	_ reconcile.Endpointer    = (*Provider)(nil)
	_ reconcile.Remover       = (*Provider)(nil)
	_ reconcile.Restarter     = (*Provider)(nil)
	_ reconcile.Replacer      = (*Provider)(nil)
	_ reconcile.MachineReader = (*Provider)(nil)
	_ reconcile.Warner        = (*Provider)(nil)
)

// Option configures a Provider.
type Option func(*options)

type options struct {
	noHostFiles bool
	poll        time.Duration
}

// NoHostFiles says the cluster's files come from a repository's tree, as
// in the agent: the CA bundle of openstack.tls_verify is read only from the
// cluster's directory in that tree, never from the host.
func NoHostFiles() Option { return func(o *options) { o.noHostFiles = true } }

// WithPoll sets how often waits read a resource again; 2 s by default.
func WithPoll(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.poll = d
		}
	}
}

// New returns a provider for the cluster. It makes no call: Keystone is
// asked for a token at the first one.
func New(c *spec.Cluster, files fs.FS, log *slog.Logger, opts ...Option) (*Provider, error) {
	if c.OpenStack == nil {
		return nil, fmt.Errorf("cluster %s has no openstack section", c.Name)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := options{poll: 2 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	tlsCfg, err := tlstrust.Config(c.OpenStack.TLSVerify, "openstack.tls_verify", files, !o.noHostFiles)
	if err != nil {
		return nil, err
	}
	base := &http.Transport{
		TLSClientConfig:       tlsCfg,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: CallTimeout,
		IdleConnTimeout:       90 * time.Second,
	}
	// The application credential's secret and the token go with the
	// requests: a redirect is never followed.
	hc := &http.Client{Transport: noredirect.Transport(base), CheckRedirect: noredirect.CheckRedirect}
	return &Provider{c: c, log: log, hc: hc, poll: o.poll, factoryHC: factoryhttp.Client(tlsCfg, UploadTimeout)}, nil
}

// Offline returns a provider that plans a cluster of which nothing exists,
// without credentials or calls.
func Offline(c *spec.Cluster) (*Provider, error) {
	if c.OpenStack == nil {
		return nil, fmt.Errorf("cluster %s has no openstack section", c.Name)
	}
	return &Provider{c: c, log: slog.New(slog.DiscardHandler), poll: 2 * time.Second}, nil
}

// ErrOffline is returned by a call of a provider made with Offline.
var ErrOffline = errors.New("the openstack provider was made for offline planning")

// clients authenticates once with the application credential and returns
// the compute, network and image clients of the configured region.
func (p *Provider) clients(ctx context.Context) (compute, network, image *gophercloud.ServiceClient, err error) {
	if p.hc == nil {
		return nil, nil, nil, ErrOffline
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.compute != nil {
		return p.compute, p.network, p.image, nil
	}
	o := p.c.OpenStack
	pc, err := gcos.NewClient(o.URL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("openstack.url %s: %w", o.URL, err)
	}
	pc.HTTPClient = *p.hc
	actx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	err = gcos.Authenticate(actx, pc, gophercloud.AuthOptions{
		// A run can outlast a token (an hour by default): on a 401
		// gophercloud asks Keystone for a new one and sends the request
		// again.
		AllowReauth:                 true,
		IdentityEndpoint:            o.URL,
		ApplicationCredentialID:     o.CredentialID,
		ApplicationCredentialSecret: o.CredentialSecret,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("authenticating to Keystone at %s with the application credential: %w", o.URL, p.clean(err))
	}
	token, isV3 := pc.GetAuthResult().(tokens.CreateResult)
	if !isV3 {
		return nil, nil, nil, fmt.Errorf("reading Keystone's token: not an Identity v3 token (%T)", pc.GetAuthResult())
	}
	project, err := token.ExtractProject()
	if err != nil || project == nil || project.ID == "" {
		return nil, nil, nil, fmt.Errorf("reading the project of the application credential from Keystone's token: %v", err)
	}
	eo := gophercloud.EndpointOpts{Region: o.Region}
	if p.compute, err = gcos.NewComputeV2(pc, eo); err != nil {
		return nil, nil, nil, fmt.Errorf("finding Nova in the catalog of region %s: %w", o.Region, err)
	}
	p.compute.Microversion = computeMicroversion
	if p.network, err = gcos.NewNetworkV2(pc, eo); err != nil {
		p.compute = nil
		return nil, nil, nil, fmt.Errorf("finding Neutron in the catalog of region %s: %w", o.Region, err)
	}
	if p.image, err = gcos.NewImageV2(pc, eo); err != nil {
		p.compute = nil
		return nil, nil, nil, fmt.Errorf("finding Glance in the catalog of region %s: %w", o.Region, err)
	}
	p.project, p.projectName = project.ID, project.Name
	return p.compute, p.network, p.image, nil
}

// clean keeps the credential's secret out of an error: gophercloud's
// errors may carry the request.
func (p *Provider) clean(err error) error {
	if err == nil {
		return nil
	}
	if s := p.c.OpenStack.CredentialSecret; s != "" {
		return redacted{err: err, secret: s}
	}
	return err
}

type redacted struct {
	err    error
	secret string
}

func (r redacted) Error() string { return strings.ReplaceAll(r.err.Error(), r.secret, "[redacted]") }
func (r redacted) Unwrap() error { return r.err }

// call runs f under its own deadline.
func call[T any](ctx context.Context, f func(ctx context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	return f(cctx)
}

// within runs f under its own deadline.
func within(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	return f(ctx)
}

// Empty returns the inventory of a cluster of which nothing exists.
func (p *Provider) Empty() reconcile.Inventory { return &inventory{offline: true} }

// Plan lists the provider's steps for one phase, from what it observed.
func (p *Provider) Plan(phase plan.Phase, want *reconcile.Desired, have reconcile.Inventory) ([]plan.Change, error) {
	inv, ok := have.(*inventory)
	if !ok {
		return nil, fmt.Errorf("planning with an inventory of another provider (%T)", have)
	}
	switch phase {
	case plan.PhaseValidate:
		return p.planValidate(want, inv), nil
	case plan.PhaseImage:
		return p.planImage(inv)
	case plan.PhaseNetwork:
		return p.planNetwork(want, inv)
	case plan.PhaseCompute:
		return p.planCompute(want, inv)
	case plan.PhaseDestroy:
		return p.planDestroy(inv), nil
	}
	return nil, nil
}

// Apply carries out one planned step.
func (p *Provider) Apply(ctx context.Context, want *reconcile.Desired, ch plan.Change) error {
	op, ok := ch.Op.(step)
	if !ok {
		return fmt.Errorf("step %s %s is not an openstack step (%T)", ch.Action, ch.Resource, ch.Op)
	}
	if _, _, _, err := p.clients(ctx); err != nil {
		return err
	}
	return p.clean(op.apply(ctx, p, want))
}

// step is one planned operation of the provider.
type step interface {
	apply(ctx context.Context, p *Provider, want *reconcile.Desired) error
}

func (p *Provider) change(phase plan.Phase, action plan.Action, kind plan.ResourceKind, name, reason string, op step, attrs ...plan.Attribute) plan.Change {
	return plan.Change{Phase: phase, Domain: plan.DomainProvider, Action: action,
		Resource: plan.Resource{Kind: kind, Name: name}, Reason: reason, Attributes: attrs, Op: op}
}
