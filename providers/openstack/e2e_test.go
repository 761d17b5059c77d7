package openstack_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/providers/openstack"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// worldNets are this package's loopback /24s, two per lab world (the
// cluster network, then the external network of the floating IPs):
// 127.172 to 127.175 and 127.184 to 127.199, taken out of
// providers/proxmox's.
var (
	worldNets = []int{184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 172, 173, 174, 175}
	netSeq    atomic.Int32
)

type world struct {
	lab  *lab.Lab
	dir  string
	name string
}

func newWorld(t *testing.T, name string, workers int) *world {
	t.Helper()
	return newWorldWith(t, name, workers, lab.Options{})
}

// newWorldWith is newWorld with more lab options.
func newWorldWith(t *testing.T, name string, workers int, o lab.Options) *world {
	t.Helper()
	i := int(netSeq.Add(2)) - 2
	if i+1 >= len(worldNets) {
		t.Fatalf("more than %d lab worlds in this package: give worldNets more networks", len(worldNets)/2)
	}
	clusterNet := netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/24", worldNets[i]))
	extNet := netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/24", worldNets[i+1]))
	o.TaskDuration, o.OpenStackExternalCIDR, o.OpenStackBuildDelay = -1, extNet, 20*time.Millisecond
	o.BootDelay, o.InstallDelay, o.RebootDelay, o.ReadyDelay = 20*time.Millisecond, 20*time.Millisecond, 20*time.Millisecond, 50*time.Millisecond
	l, err := lab.Start(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	dir := t.TempDir()
	if err := l.WriteOpenStackCluster(dir, lab.OpenStackCluster{Name: name, Workers: workers, CIDR: clusterNet}); err != nil {
		t.Fatal(err)
	}
	return &world{lab: l, dir: dir, name: name}
}

func (w *world) cluster(t *testing.T) (*spec.Cluster, []spec.Problem) {
	t.Helper()
	c, warns, err := spec.Load(w.dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, warns
}

func (w *world) engine(t *testing.T) *reconcile.Engine {
	t.Helper()
	c, warns := w.cluster(t)
	p, err := openstack.New(c, os.DirFS(w.dir), nil, openstack.WithPoll(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("converge progress:\n%s", out.String())
		}
	})
	return &reconcile.Engine{Cluster: c, Warnings: warns, State: state.Local{Dir: w.dir}, Key: w.name, Infra: p, Progress: &out,
		BootTimeout: 60 * time.Second, PollInterval: 50 * time.Millisecond}
}

// mutations counts the OpenStack calls that change something (a token
// is not a change).
func (w *world) mutations() []string {
	var out []string
	for _, op := range w.lab.OpenStack.Log() {
		if op.Method != http.MethodGet && op.Name != "identity.token.create" {
			out = append(out, op.Name)
		}
	}
	return out
}

func (w *world) setYAML(t *testing.T, old, new string) {
	t.Helper()
	path := filepath.Join(w.dir, "cluster.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("cluster.yaml has no %q", old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

func converge(t *testing.T, e *reconcile.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := e.Converge(ctx); err != nil {
		t.Fatalf("converge: %v", err)
	}
}

func TestFirstBuildSecondConvergeAndEndpoints(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os1", 2)
	offline, err := openstack.Offline(func() *spec.Cluster { c, _ := w.cluster(t); return c }())
	if err != nil {
		t.Fatal(err)
	}
	c, _ := w.cluster(t)
	p, err := reconcile.OfflinePlan(c, nil, offline)
	if err != nil {
		t.Fatal(err)
	}
	unknown := 0
	for _, ch := range p.Changes {
		for _, a := range ch.Attributes {
			if strings.Contains(a.Value, reconcile.UnknownEndpoint) {
				unknown++
			}
		}
	}
	if unknown == 0 {
		t.Errorf("the offline plan never says %s", reconcile.UnknownEndpoint)
	}

	e := w.engine(t)
	converge(t, e)
	servers := w.lab.OpenStack.Servers()
	if len(servers) != 5 {
		t.Fatalf("%d servers, want 5: %v", len(servers), servers)
	}

	// The endpoints: the engine's API is the kubeapi port's fixed address,
	// people's kubeconfig names its floating IP, and both answer.
	obs, err := e.Observe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !obs.API.Known || obs.API.Public == "" || !w.lab.OpenStackExternalCIDR.Contains(obs.API.PublicAddr) {
		t.Fatalf("API endpoint %+v: want the kubeapi VIP with a floating IP from %s", obs.API, w.lab.OpenStackExternalCIDR)
	}
	// The ingress port's address and floating IP, which the argocd
	// plugin gives MetalLB and the ingress controller.
	ivip, ipublic, ok := e.Infra.(reconcile.Ingresser).IngressEndpoint(obs.Inventory)
	if !ok || !ipublic.IsValid() || !w.lab.OpenStackExternalCIDR.Contains(ipublic) || ivip == obs.API.VIP {
		t.Errorf("ingress endpoint %s, %s, %v: want the ingress port's own address with a floating IP from %s", ivip, ipublic, ok, w.lab.OpenStackExternalCIDR)
	}
	// The credential's project, as Keystone's token names it (the lab's
	// default project).
	if name := e.Infra.(reconcile.Projecter).ProjectName(); name != "taloslab" {
		t.Errorf("project name %q, want taloslab", name)
	}
	data, err := os.ReadFile(filepath.Join(w.dir, reconcile.KubeconfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := kube.Server(data); got != obs.API.Public {
		t.Errorf("the kubeconfig names %s, want the floating IP's %s", got, obs.API.Public)
	}
	for _, server := range []string{obs.API.Public, obs.API.URL} {
		kc, err := kube.NewAt(data, server)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kc.Version(t.Context()); err != nil {
			t.Errorf("the API at %s does not answer: %v", server, err)
		}
	}
	if obs.Kube.Unknown != "" || len(obs.Kube.Nodes) != 5 {
		t.Errorf("the engine's view of Kubernetes: %q, %d nodes", obs.Kube.Unknown, len(obs.Kube.Nodes))
	}

	// Ports: every machine port carries its VIP as an allowed address pair.
	vips := map[string]string{}
	for _, port := range w.lab.OpenStack.Ports() {
		if port.Name == "os1-kubeapi" || port.Name == "os1-ingress" {
			vips[port.Name] = port.Addrs[0].String()
		}
	}
	for _, port := range w.lab.OpenStack.Ports() {
		want := ""
		switch {
		case strings.HasPrefix(port.Name, "os1-controlplane-"):
			want = vips["os1-kubeapi"]
		case strings.HasPrefix(port.Name, "os1-worker-"):
			want = vips["os1-ingress"]
		default:
			continue
		}
		if !slices.Contains(port.AllowedAddressPairs, want) || len(port.SecurityGroups) != 1 {
			t.Errorf("port %s: pairs %v, groups %v; want the pair %s and the cluster group", port.Name, port.AllowedAddressPairs, port.SecurityGroups, want)
		}
	}
	table := w.lab.OpenStack.FloatingIPTable()
	if len(table) != 2 {
		t.Errorf("floating IPs %v, want two (API and ingress)", table)
	}
	for _, vip := range vips {
		found := false
		for _, fixed := range table {
			found = found || fixed.String() == vip
		}
		if !found {
			t.Errorf("no floating IP in front of %s: %v", vip, table)
		}
	}

	// A second converge changes nothing.
	before := len(w.mutations())
	p2, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range p2.Changes {
		if ch.Domain == plan.DomainProvider {
			t.Errorf("the second plan has a provider step: %s %s (%s)", ch.Action, ch.Resource, ch.Reason)
		}
	}
	converge(t, w.engine(t))
	if got := w.mutations()[before:]; len(got) > 0 {
		t.Errorf("the second converge made OpenStack calls that change something: %v", got)
	}
}

func TestServersAreCreateOnly(t *testing.T) {
	t.Parallel()
	w := newWorldWith(t, "os2", 1, lab.Options{OpenStackZones: []string{"nova", "nova2"}})
	converge(t, w.engine(t))
	cases := []struct{ old, new, want string }{
		{"flavor: gp.large", "flavor: gp.xlarge", "flavor gp.large -> gp.xlarge"},
		{"disk: 80", "disk: 160", "disk 80 GB -> 160 GB"},
		{"availability_zone: nova\n", "availability_zone: nova2\n", "availability zone nova -> nova2"},
		{"availability_zone: nova\n", "availability_zone: elsewhere\n", "openstack.availability_zone: Nova has no available zone \"elsewhere\""},
	}
	for _, tc := range cases {
		w.setYAML(t, tc.old, tc.new)
		before := len(w.mutations())
		e := w.engine(t)
		err := e.Converge(t.Context())
		if !errors.Is(err, reconcile.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s -> %s: converge says %v, want a refusal naming %q", tc.old, tc.new, err, tc.want)
		}
		if !strings.HasPrefix(tc.want, "openstack.") && !strings.Contains(err.Error(), "os2-worker-01") {
			t.Errorf("the refusal does not name the server: %v", err)
		}
		if got := w.mutations()[before:]; len(got) > 0 {
			t.Errorf("a refused converge changed %v", got)
		}
		w.setYAML(t, tc.new, tc.old)
	}
}

// TestScaleDownAndStrayPortReclaim shrinks the worker pool: the surplus
// worker is drained, reset and deleted with its port, and a machine port
// left by a machine that never became a server is reclaimed by the network
// phase.
func TestScaleDownAndStrayPortReclaim(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os3", 2)
	converge(t, w.engine(t))

	w.setYAML(t, "count: 2", "count: 1")
	// A port of a machine that is not wanted and has no server: what a
	// create that failed after its port leaves.
	stray := w.addPort(t, "os3-net", "os3-worker-07", []string{"managed-by=taloscluster", "cluster=os3", "role=worker", "pool=worker"})
	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, ch := range p.Changes {
		if ch.Domain == plan.DomainProvider && ch.Action == plan.ActionDelete {
			steps = append(steps, string(ch.Phase)+" "+ch.Resource.String())
		}
	}
	want := []string{"network port os3-worker-07", "scale-down machine os3-worker-02"}
	if !slices.Equal(steps, want) {
		t.Fatalf("provider deletions %v, want %v", steps, want)
	}
	e := w.engine(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	e.Approve = func(*plan.Plan) error { return nil }
	if err := e.Converge(ctx); err != nil {
		t.Fatalf("converge: %v", err)
	}
	var names []string
	for _, s := range w.lab.OpenStack.Servers() {
		names = append(names, s.Name)
	}
	if slices.Contains(names, "os3-worker-02") || len(names) != 4 {
		t.Errorf("servers after the scale-down: %v", names)
	}
	for _, port := range w.lab.OpenStack.Ports() {
		if port.Name == "os3-worker-02" || port.ID == stray {
			t.Errorf("port %s (%s) is still there", port.Name, port.ID)
		}
	}
}

// addPort creates a tagged port with gophercloud, as another client would.
func (w *world) addPort(t *testing.T, network, name string, tags []string) string {
	t.Helper()
	nc, err := gcos.NewNetworkV2(w.client(t), gophercloud.EndpointOpts{Region: w.lab.OpenStackRegion})
	if err != nil {
		t.Fatal(err)
	}
	page, err := networks.List(nc, networks.ListOpts{Name: network}).AllPages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	nets, err := networks.ExtractNetworks(page)
	if err != nil || len(nets) != 1 {
		t.Fatalf("network %s: %v, %v", network, nets, err)
	}
	port, err := ports.Create(t.Context(), nc, ports.CreateOpts{NetworkID: nets[0].ID, Name: name}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attributestags.ReplaceAll(t.Context(), nc, "ports", port.ID, attributestags.ReplaceAllOpts{Tags: tags}).Extract(); err != nil {
		t.Fatal(err)
	}
	return port.ID
}

// compute returns a Nova client of the lab cloud, as another client would
// have one.
func (w *world) compute(t *testing.T) *gophercloud.ServiceClient {
	t.Helper()
	cc, err := gcos.NewComputeV2(w.client(t), gophercloud.EndpointOpts{Region: w.lab.OpenStackRegion})
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

func (w *world) serverID(name string) string {
	for _, s := range w.lab.OpenStack.Servers() {
		if s.Name == name {
			return s.ID
		}
	}
	return ""
}

func (w *world) portID(name string) string {
	for _, p := range w.lab.OpenStack.Ports() {
		if p.Name == name {
			return p.ID
		}
	}
	return ""
}

// nodes reads the cluster's Nodes through the VIP.
func (w *world) nodes(t *testing.T) map[string]kube.Node {
	t.Helper()
	e := w.engine(t)
	obs, err := e.Observe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]kube.Node{}
	for _, n := range obs.Kube.Nodes {
		out[n.Name] = n
	}
	return out
}

// TestRemediationReplacesTheServerOnItsPort stops a worker's server behind
// the engine's back: once its Node has been NotReady for longer than
// remediation.after, converge drains it, deletes the server and boots a new
// one on the same port, so the machine keeps its address; the reserved
// ports and floating IPs are untouched.
func TestRemediationReplacesTheServerOnItsPort(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os4", 2)
	converge(t, w.engine(t))
	fips := w.lab.OpenStack.FloatingIPTable()
	victim := "os4-worker-02"
	oldServer, oldPort := w.serverID(victim), w.portID(victim)
	if err := servers.Stop(t.Context(), w.compute(t), oldServer).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for w.nodes(t)[victim].Ready {
		if time.Now().After(deadline) {
			t.Fatalf("%s is still Ready after its server stopped", victim)
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.setYAML(t, "security:", "remediation: {after: 1m, max_unhealthy: 1}\n\nsecurity:")
	e := w.engine(t)
	e.Now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := e.Converge(ctx); err != nil {
		t.Fatalf("converge: %v", err)
	}
	newServer := w.serverID(victim)
	if newServer == "" || newServer == oldServer {
		t.Fatalf("server %s: %q, want a new one (the old was %s)", victim, newServer, oldServer)
	}
	if got := w.portID(victim); got != oldPort {
		t.Errorf("port of %s: %s, want the same port %s", victim, got, oldPort)
	}
	if !w.nodes(t)[victim].Ready {
		t.Errorf("%s is not Ready after its replacement", victim)
	}
	if got := w.lab.OpenStack.FloatingIPTable(); !maps.Equal(got, fips) {
		t.Errorf("floating IPs changed: %v -> %v", fips, got)
	}
}

// TestRestartSoftRebootsAndWaits runs the provider's restart step of a
// server: a soft reboot through Nova, waited out on reads of the server.
func TestRestartSoftRebootsAndWaits(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os5", 1)
	converge(t, w.engine(t))
	c, _ := w.cluster(t)
	p, err := openstack.New(c, os.DirFS(w.dir), nil, openstack.WithPoll(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := p.Observe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	steps := p.PlanRestart("os5-worker-01", inv)
	if len(steps) != 1 || steps[0].Action != plan.ActionRestart {
		t.Fatalf("restart steps %+v", steps)
	}
	mark := len(w.lab.OpenStack.Log())
	if err := p.Apply(t.Context(), nil, steps[0]); err != nil {
		t.Fatal(err)
	}
	var actions, reads int
	for _, op := range w.lab.OpenStack.Log()[mark:] {
		switch op.Name {
		case "compute.server.action":
			actions++
		case "compute.server.get":
			reads++
		}
	}
	if actions != 1 || reads == 0 {
		t.Errorf("%d actions and %d reads of the server, want one reboot waited on reads", actions, reads)
	}
	for _, s := range w.lab.OpenStack.Servers() {
		if s.Name == "os5-worker-01" && s.VMState != "active" {
			t.Errorf("after the reboot the server is %s", s.VMState)
		}
	}
}

// client logs in to the lab cloud with gophercloud, as another client
// would.
func (w *world) client(t *testing.T) *gophercloud.ProviderClient {
	t.Helper()
	pc, err := gcos.NewClient(w.lab.OpenStackURL)
	if err != nil {
		t.Fatal(err)
	}
	pc.HTTPClient = http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.lab.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	err = gcos.Authenticate(t.Context(), pc, gophercloud.AuthOptions{IdentityEndpoint: w.lab.OpenStackURL,
		ApplicationCredentialID: w.lab.OpenStackCredential.ID, ApplicationCredentialSecret: w.lab.OpenStackCredential.Secret})
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// TestDestroyLeavesNothingButTheSharedImage destroys a built cluster:
// servers, ports, floating IPs, router, subnet, network and security group
// go; the boot image, which other clusters share, stays.
func TestDestroyLeavesNothingButTheSharedImage(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os6", 1)
	converge(t, w.engine(t))
	e := w.engine(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := e.Destroy(ctx); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if s := w.lab.OpenStack.Servers(); len(s) != 0 {
		t.Errorf("servers left: %v", s)
	}
	for _, p := range w.lab.OpenStack.Ports() {
		if strings.HasPrefix(p.Name, "os6-") {
			t.Errorf("port left: %s", p.Name)
		}
	}
	if fips := w.lab.OpenStack.FloatingIPTable(); len(fips) != 0 {
		t.Errorf("floating IPs left: %v", fips)
	}
	inv, err := e.Infra.Observe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if vip, _, ok := e.Infra.(reconcile.Endpointer).APIEndpoint(inv); ok {
		t.Errorf("an API endpoint %s is left", vip)
	}
	c, _ := w.cluster(t)
	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range p.Changes {
		if ch.Resource.Kind == plan.KindImage {
			t.Errorf("the boot image was deleted with cluster %s: %s %s", c.Name, ch.Action, ch.Resource)
		}
	}
	for _, name := range []string{"os6-net", "os6-router", "os6"} {
		found := false
		for _, ch := range p.Changes {
			found = found || (ch.Action == plan.ActionCreate && ch.Resource.Name == name)
		}
		if !found {
			t.Errorf("after destroy the plan does not create %s again: it was left", name)
		}
	}
}

// TestGrowAddsAPortAndAServer grows the worker pool: the new machine gets
// its port (with the ingress VIP's pair) and its server, and nothing else
// of the cloud changes.
func TestGrowAddsAPortAndAServer(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os7", 1)
	converge(t, w.engine(t))
	w.setYAML(t, "count: 1", "count: 2")
	before := len(w.mutations())
	converge(t, w.engine(t))
	got := w.mutations()[before:]
	if want := []string{"network.port.create", "compute.server.create"}; !slices.Equal(got, want) {
		t.Errorf("growing made %v, want %v", got, want)
	}
	if w.serverID("os7-worker-02") == "" {
		t.Fatal("no server os7-worker-02")
	}
	if !w.nodes(t)["os7-worker-02"].Ready {
		t.Error("os7-worker-02 is not a Ready node")
	}
}

// TestReservedPortsSurviveControlPlaneChanges grows the control planes to
// five and shrinks them back to three: the kubeapi and ingress ports, their
// addresses and their floating IPs are the same throughout, and the API
// answers at the floating IP at the end.
func TestReservedPortsSurviveControlPlaneChanges(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os8", 0)
	converge(t, w.engine(t))
	fips, kubeapi := w.lab.OpenStack.FloatingIPTable(), w.portID("os8-kubeapi")
	w.setYAML(t, "  count: 3", "  count: 5")
	converge(t, w.engine(t))
	w.setYAML(t, "  count: 5", "  count: 3")
	e := w.engine(t)
	e.Approve = func(*plan.Plan) error { return nil }
	converge(t, e)
	if got := w.lab.OpenStack.FloatingIPTable(); !maps.Equal(got, fips) {
		t.Errorf("floating IPs changed: %v -> %v", fips, got)
	}
	if got := w.portID("os8-kubeapi"); got != kubeapi {
		t.Errorf("the kubeapi port changed: %s -> %s", kubeapi, got)
	}
	data, err := os.ReadFile(filepath.Join(w.dir, reconcile.KubeconfigFile))
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kube.New(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.Version(t.Context()); err != nil {
		t.Errorf("the API does not answer at the kubeconfig's %s: %v", kube.Server(data), err)
	}
	if n := len(w.lab.OpenStack.Servers()); n != 3 {
		t.Errorf("%d servers, want 3", n)
	}
}

// network returns a Neutron client of the lab cloud.
func (w *world) network(t *testing.T) *gophercloud.ServiceClient {
	t.Helper()
	nc, err := gcos.NewNetworkV2(w.client(t), gophercloud.EndpointOpts{Region: w.lab.OpenStackRegion})
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// TestDetachedFloatingIPGoesBack: the API's floating IP taken off its port
// behind the engine's back is put back by the next converge, which reaches
// the cluster through the VIP meanwhile and changes nothing else.
func TestDetachedFloatingIPGoesBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os9", 0)
	converge(t, w.engine(t))
	before := w.lab.OpenStack.FloatingIPTable()
	nc := w.network(t)
	page, err := floatingips.List(nc, floatingips.ListOpts{Description: "os9-kubeapi"}).AllPages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fips, err := floatingips.ExtractFloatingIPs(page)
	if err != nil || len(fips) != 1 {
		t.Fatalf("the API's floating IP: %v, %v", fips, err)
	}
	none := ""
	if _, err := floatingips.Update(t.Context(), nc, fips[0].ID, floatingips.UpdateOpts{PortID: &none}).Extract(); err != nil {
		t.Fatal(err)
	}
	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, ch := range p.Changes {
		if ch.Domain != plan.DomainGate {
			steps = append(steps, string(ch.Action)+" "+ch.Resource.String())
		}
	}
	if len(p.Refusals) > 0 || len(steps) != 1 || !strings.Contains(steps[0], "floating-ip os9-kubeapi") {
		t.Fatalf("plan with the floating IP detached: steps %v, refusals %v", steps, p.Refusals)
	}
	converge(t, w.engine(t))
	if got := w.lab.OpenStack.FloatingIPTable(); !maps.Equal(got, before) {
		t.Errorf("floating IPs %v, want them back as %v", got, before)
	}
}

// TestLostAPIPortIsRefused: with machines running, a kubeapi port that is
// gone is not made again (a new one would have another address than the
// one the machines' configs name): converge refuses and changes nothing.
func TestLostAPIPortIsRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os10", 0)
	converge(t, w.engine(t))
	nc := w.network(t)
	if err := ports.Delete(t.Context(), nc, w.portID("os10-kubeapi")).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	before := len(w.mutations())
	err := w.engine(t).Converge(t.Context())
	if !errors.Is(err, reconcile.ErrRefused) || !strings.Contains(err.Error(), "no address for the Kubernetes API") {
		t.Fatalf("converge: %v; want a refusal for the lost API port", err)
	}
	if got := w.mutations()[before:]; len(got) > 0 {
		t.Errorf("the refused converge changed %v", got)
	}
}
