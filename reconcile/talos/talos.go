// Package talos is the engine's side of the Talos API: it builds the admin
// talosconfig from the cluster identity and runs the operations converge
// needs (bootstrap, kubeconfig, versions, etcd membership) through the
// Talos machinery client, each under its own deadline.
package talos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// CallTimeout bounds one Talos API call.
const CallTimeout = 30 * time.Second

// Talosconfig returns the admin client config for a cluster: a client
// certificate signed by the cluster's OS CA and the given endpoints (node
// addresses, never the VIP).
func Talosconfig(cluster string, bundle *secrets.Bundle, endpoints []string) ([]byte, error) {
	in, err := generate.NewInput(cluster, "https://127.0.0.1:6443", "",
		generate.WithSecretsBundle(bundle),
		generate.WithEndpointList(endpoints),
		generate.WithRoles(role.MakeSet(role.Admin)),
	)
	if err != nil {
		return nil, fmt.Errorf("preparing the talosconfig of %s: %w", cluster, err)
	}
	cfg, err := in.Talosconfig()
	if err != nil {
		return nil, fmt.Errorf("generating the talosconfig of %s: %w", cluster, err)
	}
	data, err := cfg.Bytes()
	if err != nil {
		return nil, fmt.Errorf("encoding the talosconfig of %s: %w", cluster, err)
	}
	return data, nil
}

// Client runs Talos API operations against one cluster.
type Client struct {
	c *client.Client
}

// New connects with a talosconfig (its bytes).
func New(ctx context.Context, talosconfig []byte) (*Client, error) {
	cfg, err := clientconfig.FromBytes(talosconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the talosconfig: %w", err)
	}
	c, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("creating the Talos client: %w", err)
	}
	return &Client{c: c}, nil
}

// Dial connects as the cluster's admin to the given endpoints (node
// addresses), from the cluster identity alone; no talosconfig file is
// needed.
func Dial(ctx context.Context, cluster string, bundle *secrets.Bundle, endpoints []string) (*Client, error) {
	data, err := Talosconfig(cluster, bundle, endpoints)
	if err != nil {
		return nil, err
	}
	return New(ctx, data)
}

// MaintenanceVersion asks a node that does not accept the cluster's
// credentials whether it is in maintenance mode: a node that never got its
// machine config serves a self-signed certificate and answers Version
// without a client certificate. It returns the node's Talos version then.
func MaintenanceVersion(ctx context.Context, node string) (string, error) {
	c, err := client.New(ctx, client.WithEndpoints(node),
		client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})) //nolint:gosec // maintenance mode has no identity to verify; only its version is read
	if err != nil {
		return "", fmt.Errorf("connecting to %s in maintenance mode: %w", node, err)
	}
	defer c.Close()
	return (&Client{c: c}).Version(ctx, node)
}

// Close releases the connections.
func (c *Client) Close() error { return c.c.Close() }

func call(ctx context.Context, node string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	return client.WithNode(ctx, node), cancel
}

// Version returns the Talos version a node runs.
func (c *Client) Version(ctx context.Context, node string) (string, error) {
	ctx, cancel := call(ctx, node)
	defer cancel()
	resp, err := c.c.Version(ctx)
	if err != nil {
		return "", fmt.Errorf("reading the Talos version of %s: %w", node, err)
	}
	for _, m := range resp.GetMessages() {
		if v := m.GetVersion(); v != nil {
			return v.GetTag(), nil
		}
	}
	return "", fmt.Errorf("reading the Talos version of %s: empty answer", node)
}

// Bootstrap bootstraps etcd on node. A cluster that is already bootstrapped
// counts as success, so a retried or repeated converge is safe.
func (c *Client) Bootstrap(ctx context.Context, node string) error {
	ctx, cancel := call(ctx, node)
	defer cancel()
	err := c.c.Bootstrap(ctx, &machineapi.BootstrapRequest{})
	if err == nil || AlreadyBootstrapped(err) {
		return nil
	}
	return fmt.Errorf("bootstrapping etcd on %s: %w", node, classify(err))
}

// AlreadyBootstrapped reports whether a bootstrap error says etcd already
// has data, i.e. the cluster was bootstrapped before.
func AlreadyBootstrapped(err error) bool {
	return status.Code(err) == codes.AlreadyExists || strings.Contains(err.Error(), "etcd data directory is not empty")
}

// classify marks the answers that mean "not yet" as transient: besides
// the unreachable node (Unavailable, DeadlineExceeded), Talos answers
// FailedPrecondition while a node is still booting ("bootstrap is not
// available yet", "time is not in sync yet").
func classify(err error) error {
	if status.Code(err) == codes.FailedPrecondition {
		return retry.Transient(err)
	}
	return err
}

// Unreachable reports whether an error means the node did not answer at
// all (down, booting), as opposed to an answer that refuses.
func Unreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// Kubeconfig fetches an admin kubeconfig from a control plane.
func (c *Client) Kubeconfig(ctx context.Context, node string) ([]byte, error) {
	ctx, cancel := call(ctx, node)
	defer cancel()
	data, err := c.c.Kubeconfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetching the kubeconfig from %s: %w", node, classify(err))
	}
	return data, nil
}

// RunningConfig reads the machine config a node runs with: the COSI
// resource MachineConfigs.config.talos.dev, id v1alpha1 (the active
// config), which the Talos API serves to os:admin. (Talos 1.12 and later
// keep the STATE partition unmounted, so the file cannot be read.)
func (c *Client) RunningConfig(ctx context.Context, node string) ([]byte, error) {
	ctx, cancel := call(ctx, node)
	defer cancel()
	mc, err := safe.StateGetByID[*configres.MachineConfig](ctx, c.c.COSI, configres.ActiveID)
	if err != nil {
		return nil, fmt.Errorf("reading the machine config of %s: %w", node, err)
	}
	data, err := mc.Provider().Bytes()
	if err != nil {
		return nil, fmt.Errorf("encoding the machine config of %s: %w", node, err)
	}
	return data, nil
}

// Service is the state of one Talos service on a node.
type Service struct {
	ID      string
	State   string
	Healthy bool
	Message string
}

// Service returns the state of one service of a node, such as etcd. A
// service the node does not run gives ok false.
func (c *Client) Service(ctx context.Context, node, id string) (Service, bool, error) {
	ctx, cancel := call(ctx, node)
	defer cancel()
	resp, err := c.c.ServiceList(ctx)
	if err != nil {
		return Service{}, false, fmt.Errorf("listing the services of %s: %w", node, err)
	}
	for _, m := range resp.GetMessages() {
		for _, s := range m.GetServices() {
			if s.GetId() == id {
				return Service{ID: id, State: s.GetState(), Healthy: s.GetHealth().GetHealthy(), Message: s.GetHealth().GetLastMessage()}, true, nil
			}
		}
	}
	return Service{}, false, nil
}

// Member is one etcd member.
type Member struct {
	ID       uint64
	Hostname string
	Learner  bool
	// PeerURLs are the member's peer URLs (https://<address>:2380): a
	// learner that has not started has no name yet, only these.
	PeerURLs []string
}

// Is reports whether the member is the machine of that hostname and
// address: by its name, or, for a member without one yet, by the host of
// a peer URL.
func (m Member) Is(hostname, address string) bool {
	if m.Hostname != "" {
		return m.Hostname == hostname
	}
	if address == "" {
		return false
	}
	for _, u := range m.PeerURLs {
		if h, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(u, "https://"), "http://")); err == nil && h == address {
			return true
		}
	}
	return false
}

// EtcdMembers lists the etcd members as a control plane sees them.
func (c *Client) EtcdMembers(ctx context.Context, node string) ([]Member, error) {
	ctx, cancel := call(ctx, node)
	defer cancel()
	resp, err := c.c.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{QueryLocal: true})
	if err != nil {
		return nil, fmt.Errorf("listing etcd members on %s: %w", node, err)
	}
	var out []Member
	for _, m := range resp.GetMessages() {
		for _, mem := range m.GetMembers() {
			out = append(out, Member{ID: mem.GetId(), Hostname: mem.GetHostname(), Learner: mem.GetIsLearner(), PeerURLs: mem.GetPeerUrls()})
		}
	}
	return out, nil
}

// ConfigContext reads the current context's name and endpoints from a
// talosconfig; both are empty when it cannot be read.
func ConfigContext(talosconfig []byte) (string, []string) {
	cfg, err := clientconfig.FromBytes(talosconfig)
	if err != nil || cfg.Contexts[cfg.Context] == nil {
		return "", nil
	}
	return cfg.Context, cfg.Contexts[cfg.Context].Endpoints
}

// ServedByIdentity reports whether the certificate a node's Talos API
// serves is signed by the cluster identity's OS CA: a node built with
// another talossecrets.yaml serves one that is not. It only looks at the
// certificate; whether the node then accepts the handshake does not
// matter. An error means no certificate was seen (the node is down or
// not a Talos API).
func ServedByIdentity(ctx context.Context, node string, bundle *secrets.Bundle) (bool, error) {
	if bundle == nil || bundle.Certs == nil || bundle.Certs.OS == nil {
		return false, errors.New("the cluster identity has no OS CA")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle.Certs.OS.Crt) {
		return false, errors.New("the cluster identity's OS CA is not a PEM certificate")
	}
	var seen, ours bool
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // the chain is verified below, against the cluster's CA only, and nothing is sent
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs := make([]*x509.Certificate, 0, len(raw))
			for _, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					return err
				}
				certs = append(certs, c)
			}
			if len(certs) == 0 {
				return errors.New("no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			seen, ours = true, err == nil
			return nil
		},
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(node, strconv.Itoa(constants.ApidPort)))
	if conn != nil {
		conn.Close()
	}
	if !seen {
		if err == nil {
			err = errors.New("no certificate was served")
		}
		return false, fmt.Errorf("reading the Talos API certificate of %s: %w", node, err)
	}
	return ours, nil
}
