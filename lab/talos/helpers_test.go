package talos_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/taloscluster/taloscluster/lab/talos"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// envPatch changes .machine.env, which Talos 1.13 cannot apply live
// (CanApplyImmediate does not copy it).
const envPatch = "machine:\n  env:\n    https_proxy: http://127.0.0.1:3128\n"

const (
	talosVersion = "v1.13.8"
	kubeVersion  = "v1.35.1"
)

// testCluster is a generated three-control-plane, one-worker cluster whose
// machines live on 127.77.<subnet>.0/24.
type testCluster struct {
	name     string
	spec     *spec.Cluster
	bundle   *secrets.Bundle
	vip      netip.Addr
	endpoint string
	machines []machineconfig.Machine
	addrs    map[string]netip.Addr
	configs  map[string][]byte
}

func newTestCluster(t *testing.T, subnet int) *testCluster {
	t.Helper()

	prefix := netip.MustParsePrefix(fmt.Sprintf("127.77.%d.0/24", subnet))
	vip := netip.AddrFrom4([4]byte{127, 77, byte(subnet), 100})
	name := fmt.Sprintf("lab%d", subnet)

	c := &spec.Cluster{
		Name:       name,
		Talos:      spec.Talos{Version: talosVersion},
		Kubernetes: spec.Kubernetes{Version: kubeVersion},
		ControlPlane: spec.Pool{
			Name: "controlplane", Role: spec.RoleControlPlane, Index: -1,
			Count: 3, Disk: 20, Cores: 2, Memory: 4,
		},
		Workers: []spec.Pool{{
			Name: "worker", Role: spec.RoleWorker, Index: 0,
			Count: 1, Disk: 20, Cores: 2, Memory: 4,
		}},
		Network: spec.Network{
			Cluster: spec.L2{CIDR: prefix, MTU: 1500, KubeAPIVIP: vip},
		},
		Provider: spec.ProviderProxmox,
		Proxmox: &spec.Proxmox{
			URL:     "https://127.0.0.1:8006",
			Storage: "local-lvm",
			Network: spec.ProxmoxNetwork{ClusterBridge: "vmbr1"},
		},
	}

	bundle, err := machineconfig.NewSecrets(talosVersion)
	if err != nil {
		t.Fatal(err)
	}

	tc := &testCluster{
		name:     name,
		spec:     c,
		bundle:   bundle,
		vip:      vip,
		endpoint: "https://" + vip.String() + ":6443",
		machines: machineconfig.Machines(c),
		addrs:    map[string]netip.Addr{},
		configs:  map[string][]byte{},
	}

	cp, worker := 0, 0

	for _, m := range tc.machines {
		host := byte(0)

		if m.Role() == spec.RoleControlPlane {
			cp++
			host = byte(10 + cp)
		} else {
			worker++
			host = byte(20 + worker)
		}

		tc.addrs[m.Hostname] = netip.AddrFrom4([4]byte{127, 77, byte(subnet), host})
		tc.configs[m.Hostname] = tc.generate(t, m, nil)
	}

	return tc
}

// generate returns the encoded machine config of m, patched with the given
// inline patches (strategic merge).
func (tc *testCluster) generate(t *testing.T, m machineconfig.Machine, patches []string) []byte {
	t.Helper()

	m.Pool.ConfigPatches = append(slices.Clone(m.Pool.ConfigPatches), patches...)

	cfg, err := machineconfig.Generate(machineconfig.Input{
		Cluster:  tc.spec,
		Secrets:  tc.bundle,
		Endpoint: tc.endpoint,
		VIP:      tc.vip,
	}, m)
	if err != nil {
		t.Fatal(err)
	}

	data, err := machineconfig.Encode(cfg)
	if err != nil {
		t.Fatal(err)
	}

	return data
}

func (tc *testCluster) machine(t *testing.T, hostname string) machineconfig.Machine {
	t.Helper()

	for _, m := range tc.machines {
		if m.Hostname == hostname {
			return m
		}
	}

	t.Fatalf("no machine %q", hostname)

	return machineconfig.Machine{}
}

func (tc *testCluster) cp(i int) string     { return fmt.Sprintf("%s-controlplane-%02d", tc.name, i) }
func (tc *testCluster) worker(i int) string { return fmt.Sprintf("%s-worker-%02d", tc.name, i) }

// talosconfig is an admin (or other roles') client config for the cluster.
func (tc *testCluster) talosconfig(t *testing.T, roles ...role.Role) *clientconfig.Config {
	t.Helper()

	if len(roles) == 0 {
		roles = []role.Role{role.Admin}
	}

	cert, err := tc.bundle.GenerateTalosAPIClientCertificate(role.MakeSet(roles...))
	if err != nil {
		t.Fatal(err)
	}

	return clientconfig.NewConfig(tc.name, nil, tc.bundle.Certs.OS.Crt, cert)
}

// fastReconnect keeps the gRPC client's reconnect backoff short, so a
// client notices quickly that a rebooted node is back.
var fastReconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.5, Jitter: 0.1, MaxDelay: 50 * time.Millisecond},
	MinConnectTimeout: time.Second,
})

// client is a machinery client for the endpoint with the cluster's admin
// talosconfig.
func (tc *testCluster) client(t *testing.T, endpoint netip.Addr, roles ...role.Role) *client.Client {
	t.Helper()

	return newClient(t,
		client.WithConfig(tc.talosconfig(t, roles...)),
		client.WithEndpoints(endpoint.String()),
	)
}

// insecureClient talks to a node in maintenance mode, like talosctl
// --insecure.
func insecureClient(t *testing.T, endpoint netip.Addr) *client.Client {
	t.Helper()

	return newClient(t,
		client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), //nolint:gosec // maintenance mode has no verifiable certificate
		client.WithEndpoints(endpoint.String()),
	)
}

func newClient(t *testing.T, opts ...client.OptionFunc) *client.Client {
	t.Helper()

	c, err := client.New(t.Context(), append(opts, client.WithGRPCDialOptions(fastReconnect))...)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() }) //nolint:errcheck

	return c
}

// bootAll boots every machine of the cluster with its config.
func (tc *testCluster) bootAll(t *testing.T, w *talos.World) {
	t.Helper()

	for _, m := range tc.machines {
		if err := w.Boot(t.Context(), tc.addrs[m.Hostname], tc.configs[m.Hostname]); err != nil {
			t.Fatal(err)
		}
	}
}

// newWorld returns a world closed at the end of the test.
func newWorld(t *testing.T, opts talos.Options) *talos.World {
	t.Helper()

	w := talos.NewWorld(opts)
	t.Cleanup(func() { w.Close() }) //nolint:errcheck

	return w
}

// eventually polls cond until it returns nil or the deadline passes.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()

	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()

	for {
		err := cond()
		if err == nil {
			return
		}

		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, err)
		case <-tick.C:
		}
	}
}

// waitUp waits until the node's API answers in the given mode, and returns
// its state.
func waitUp(t *testing.T, w *talos.World, addr netip.Addr, mode talos.Mode) talos.NodeState {
	t.Helper()

	var st talos.NodeState

	eventually(t, fmt.Sprintf("%s up in %s mode", addr, mode), func() error {
		var ok bool

		st, ok = w.Node(addr)
		if !ok || !st.Up || st.Mode != mode {
			return fmt.Errorf("node is %+v", st)
		}

		return nil
	})

	return st
}

// waitRebooted waits until the node's API came up again after boots.
func waitRebooted(t *testing.T, w *talos.World, addr netip.Addr, boots int) talos.NodeState {
	t.Helper()

	var st talos.NodeState

	eventually(t, fmt.Sprintf("%s to come back", addr), func() error {
		st, _ = w.Node(addr)
		if st.Boots <= boots || !st.Up {
			return fmt.Errorf("node is %+v", st)
		}

		return nil
	})

	return st
}

// hookRecorder records hook calls.
type hookRecorder struct {
	mu           sync.Mutex
	bootstrapped []talos.Cluster
	joined       []talos.Node
	left         []string
	serving      []bool
	cordoned     []string
	drained      []string
	// calls are the node hooks in order: "cordon HOST", "drain HOST",
	// "left HOST shutdown=BOOL", "joined HOST".
	calls []string
}

func (r *hookRecorder) APIServing(_ string, serving bool) {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.serving = append(r.serving, serving)
}

func (r *hookRecorder) Cordon(_ context.Context, _, hostname string) error {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.cordoned = append(r.cordoned, hostname)
	r.calls = append(r.calls, "cordon "+hostname)

	return nil
}

func (r *hookRecorder) Drain(_ context.Context, _, hostname string, _ time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.drained = append(r.drained, hostname)
	r.calls = append(r.calls, "drain "+hostname)

	return nil
}

func (r *hookRecorder) Bootstrapped(c talos.Cluster) {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.bootstrapped = append(r.bootstrapped, c)
}

func (r *hookRecorder) NodeJoined(_ string, n talos.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.joined = append(r.joined, n)
	r.calls = append(r.calls, "joined "+n.Hostname)
}

func (r *hookRecorder) NodeLeft(_ string, hostname string, shutdown bool) {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.left = append(r.left, hostname)
	r.calls = append(r.calls, fmt.Sprintf("left %s shutdown=%t", hostname, shutdown))
}

// callsOf returns the recorded node hook calls about hostname.
func (r *hookRecorder) callsOf(hostname string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()

	var out []string

	for _, c := range r.calls {
		if strings.Contains(c, " "+hostname) {
			out = append(out, c)
		}
	}

	return out
}

func (r *hookRecorder) servingHistory() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()

	return slices.Clone(r.serving)
}

func (r *hookRecorder) snapshot() (bootstrapped []talos.Cluster, joined []talos.Node, left []string) {
	r.mu.Lock()
	defer r.mu.Unlock()

	return slices.Clone(r.bootstrapped), slices.Clone(r.joined), slices.Clone(r.left)
}

// bootstrapCluster boots every machine, bootstraps the first control plane
// and waits until every node is up and all three control planes are etcd
// members.
func (tc *testCluster) bootstrapCluster(t *testing.T, w *talos.World) *client.Client {
	t.Helper()

	tc.bootAll(t, w)

	cp1 := tc.addrs[tc.cp(1)]
	waitUp(t, w, cp1, talos.ModeRunning)

	c := tc.client(t, cp1)
	if err := c.Bootstrap(t.Context(), &machine.BootstrapRequest{}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	for _, m := range tc.machines {
		waitUp(t, w, tc.addrs[m.Hostname], talos.ModeRunning)
	}

	eventually(t, "three etcd members", func() error {
		if got := startedMembers(w.EtcdMembers(tc.name)); got != 3 {
			return fmt.Errorf("%d started members", got)
		}

		return nil
	})

	return c
}

// startedMembers counts the voting members whose etcd runs.
func startedMembers(members []talos.Member) int {
	n := 0

	for _, m := range members {
		if m.Started && !m.Learner {
			n++
		}
	}

	return n
}
