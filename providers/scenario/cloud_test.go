package scenario_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"github.com/taloscluster/taloscluster/lab"
	labopenstack "github.com/taloscluster/taloscluster/lab/openstack"
	"github.com/taloscluster/taloscluster/lab/pve"
	"github.com/taloscluster/taloscluster/providers/openstack"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// cloud is one provider as the scenarios see it: how its lab world is
// built, and the provider-specific probes and out-of-band actions the
// scenarios need. A scenario runs once per cloud of clouds.
type cloud struct {
	// name names the provider's subtests.
	name string
	// nets is how many loopback /24s a world of the provider needs.
	nets int
	// start starts a lab on the networks nets and writes the directory of
	// a cluster of three control planes and the given workers into dir.
	start func(t *testing.T, nets []netip.Prefix, dir, name string, workers int) *lab.Lab
	// infra is the provider of the cluster c, whose directory is dir.
	infra func(t *testing.T, c *spec.Cluster, dir string) reconcile.Infra
	// machine returns what the lab log's entries about the machine of that
	// hostname name it by (its VM's path, its server's), and whether the
	// machine exists.
	machine func(t *testing.T, w *world, hostname string) (string, bool)
	// running says whether the machine of that hostname runs.
	running func(t *testing.T, w *world, hostname string) bool
	// stop powers a machine off through the provider's API, as a crash
	// would look, and waits until it is off.
	stop func(t *testing.T, w *world, hostname string)
	// remove deletes a stopped machine through the provider's API, behind
	// the engine's back, and waits until it is gone.
	remove func(t *testing.T, w *world, hostname string)
	// mutations lists the provider's calls so far that change something.
	mutations func(w *world) []string
	// deletion is the lab log's source and op of the call that deletes a
	// machine, and then are the provider's steps that follow it in the same
	// deletion (their targets are matched loosely).
	deletion [2]string
	then     [][3]string
	// creation is the lab log's source and op of the call that creates a
	// machine.
	creation [2]string
	// endpoint returns a key of cluster.yaml and a value that move the
	// cluster's Kubernetes API endpoint, when cluster.yaml has one.
	endpoint func(w *world) (key, value string, ok bool)
}

// clouds are the providers every scenario runs against.
var clouds = []*cloud{proxmoxCloud, openstackCloud}

// labDelays are the lab's timings of every world: quick boots, installs
// and reboots.
func labDelays(o lab.Options) lab.Options {
	o.TaskDuration = -1
	o.BootDelay, o.InstallDelay, o.RebootDelay = 20*time.Millisecond, 20*time.Millisecond, 20*time.Millisecond
	o.ReadyDelay = 50 * time.Millisecond
	return o
}

var proxmoxCloud = &cloud{
	name: "proxmox",
	nets: 1,
	start: func(t *testing.T, nets []netip.Prefix, dir, name string, workers int) *lab.Lab {
		t.Helper()
		l := startLab(t, labDelays(lab.Options{Bridges: map[string]netip.Prefix{"vmbr0": nets[0]}}))
		if err := l.WriteCluster(dir, lab.Cluster{Name: name, Workers: workers, Bridge: "vmbr0"}); err != nil {
			t.Fatal(err)
		}
		return l
	},
	infra: func(t *testing.T, c *spec.Cluster, dir string) reconcile.Infra {
		t.Helper()
		p, err := proxmox.New(c, os.DirFS(dir), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
	machine: func(_ *testing.T, w *world, hostname string) (string, bool) {
		v, ok := pveVM(w, hostname)
		if !ok {
			return "", false
		}
		return "/qemu/" + strconv.Itoa(v.ID), true
	},
	running: func(t *testing.T, w *world, hostname string) bool {
		t.Helper()
		v, ok := pveVM(w, hostname)
		if !ok {
			t.Fatalf("no VM %s", hostname)
		}
		return v.Running
	},
	stop: func(t *testing.T, w *world, hostname string) {
		t.Helper()
		v, ok := pveVM(w, hostname)
		if !ok {
			t.Fatalf("no VM %s", hostname)
		}
		pveCall(t, w, http.MethodPost, fmt.Sprintf("/nodes/%s/qemu/%d/status/stop", v.Node, v.ID))
		waitFor(t, hostname+" stopped", func() bool { return !w.running(t, hostname) })
	},
	remove: func(t *testing.T, w *world, hostname string) {
		t.Helper()
		v, ok := pveVM(w, hostname)
		if !ok {
			t.Fatalf("no VM %s", hostname)
		}
		pveCall(t, w, http.MethodDelete, fmt.Sprintf("/nodes/%s/qemu/%d", v.Node, v.ID))
		waitFor(t, hostname+" deleted", func() bool { return !w.exists(t, hostname) })
	},
	mutations: func(w *world) []string {
		var out []string
		for _, op := range w.lab.PVE.Log() {
			if op.Method != http.MethodGet {
				out = append(out, op.Method+" "+op.Path)
			}
		}
		return out
	},
	deletion: [2]string{"proxmox", "qemu.delete"},
	creation: [2]string{"proxmox", "qemu.create"},
	endpoint: func(w *world) (string, string, bool) {
		return "network.cluster.kubeapi_vip", w.nets[0].Addr().Next().Next().Next().Next().Next().Next().String(), true // .6
	},
}

var openstackCloud = &cloud{
	name: "openstack",
	nets: 2, // the cluster network, then the external network of the floating IPs
	start: func(t *testing.T, nets []netip.Prefix, dir, name string, workers int) *lab.Lab {
		t.Helper()
		l := startLab(t, labDelays(lab.Options{OpenStackExternalCIDR: nets[1], OpenStackBuildDelay: 20 * time.Millisecond}))
		if err := l.WriteOpenStackCluster(dir, lab.OpenStackCluster{Name: name, Workers: workers, CIDR: nets[0]}); err != nil {
			t.Fatal(err)
		}
		return l
	},
	infra: func(t *testing.T, c *spec.Cluster, dir string) reconcile.Infra {
		t.Helper()
		p, err := openstack.New(c, os.DirFS(dir), nil, openstack.WithPoll(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
	machine: func(_ *testing.T, w *world, hostname string) (string, bool) {
		for _, s := range w.lab.OpenStack.Servers() {
			if s.Name == hostname {
				return "/servers/" + s.ID, true
			}
		}
		return "", false
	},
	running: func(t *testing.T, w *world, hostname string) bool {
		t.Helper()
		return novaServer(t, w, hostname).VMState == "active"
	},
	stop: func(t *testing.T, w *world, hostname string) {
		t.Helper()
		id := novaServer(t, w, hostname).ID
		if err := servers.Stop(t.Context(), w.nova(t), id).ExtractErr(); err != nil {
			t.Fatalf("os-stop of %s (%s): %v", hostname, id, err)
		}
		waitFor(t, hostname+" stopped", func() bool { return novaServer(t, w, hostname).VMState == "stopped" })
	},
	remove: func(t *testing.T, w *world, hostname string) {
		t.Helper()
		id := novaServer(t, w, hostname).ID
		if err := servers.Delete(t.Context(), w.nova(t), id).ExtractErr(); err != nil {
			t.Fatalf("deleting %s (%s): %v", hostname, id, err)
		}
		waitFor(t, hostname+" deleted", func() bool { return !w.exists(t, hostname) })
	},
	mutations: func(w *world) []string {
		var out []string
		for _, op := range w.lab.OpenStack.Log() {
			if op.Method != http.MethodGet && op.Name != "identity.token.create" {
				out = append(out, op.Name+" "+op.Method+" "+op.Path)
			}
		}
		return out
	},
	deletion: [2]string{"openstack", "compute.server.delete"},
	then:     [][3]string{{"openstack", "network.port.delete", ""}},
	creation: [2]string{"openstack", "compute.server.create"},
	endpoint: func(*world) (string, string, bool) { return "", "", false },
}

// startLab starts a lab, closed when the test ends.
func startLab(t *testing.T, o lab.Options) *lab.Lab {
	t.Helper()
	l, err := lab.Start(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// world is one lab with one cluster directory, of one cloud.
type world struct {
	cloud *cloud
	lab   *lab.Lab
	dir   string
	name  string
	nets  []netip.Prefix
	// addrs remembers Talos addresses by hostname (nodeAddr).
	addrs map[string]string

	novaOnce sync.Once
	novaSC   *gophercloud.ServiceClient
	novaErr  error
}

// newWorld takes the cloud's networks from the pool (waiting for them
// while other worlds hold them), starts a lab on them and writes a
// cluster directory pointing at it. The networks go back to the pool once
// the lab is closed.
func newWorld(t *testing.T, c *cloud, name string, workers int) *world {
	t.Helper()
	octets, err := pool.take(t.Context(), c.nets)
	if err != nil {
		t.Fatalf("waiting for %d loopback networks: %v", c.nets, err)
	}
	t.Cleanup(func() { pool.give(octets) }) // after the lab's Close, registered later
	w := &world{cloud: c, dir: t.TempDir(), name: name}
	for _, o := range octets {
		w.nets = append(w.nets, netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/24", o)))
	}
	w.lab = c.start(t, w.nets, w.dir, name, workers)
	return w
}

// engine returns an engine of the world's cluster with its provider, as
// the CLI makes it (without its journal).
func (w *world) engine(t *testing.T) *reconcile.Engine {
	t.Helper()
	c, warns, err := spec.Load(w.dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("converge progress:\n%s", out.String())
		}
	})
	return &reconcile.Engine{Cluster: c, Warnings: warns, State: state.Local{Dir: w.dir}, Key: w.name, Infra: w.cloud.infra(t, c, w.dir), Progress: &out,
		BootTimeout: 60 * time.Second, PollInterval: 50 * time.Millisecond}
}

// journaled returns the world's engine with the CLI's journal.
func (w *world) journaled(t *testing.T) *reconcile.Engine {
	t.Helper()
	e := w.engine(t)
	e.Journal = state.Local{Dir: w.dir}
	return e
}

// machine returns what the lab log names the machine of that hostname by,
// and whether it exists.
func (w *world) machine(t *testing.T, hostname string) (string, bool) {
	t.Helper()
	return w.cloud.machine(t, w, hostname)
}

// exists says whether the machine of that hostname exists.
func (w *world) exists(t *testing.T, hostname string) bool {
	t.Helper()
	_, ok := w.machine(t, hostname)
	return ok
}

// running says whether the machine of that hostname runs; it fails the
// test when there is none.
func (w *world) running(t *testing.T, hostname string) bool {
	t.Helper()
	return w.cloud.running(t, w, hostname)
}

// stop powers a machine off behind the engine's back, as a crash would
// look, and waits until it is off.
func (w *world) stop(t *testing.T, hostname string) {
	t.Helper()
	w.cloud.stop(t, w, hostname)
}

// remove deletes a stopped machine behind the engine's back.
func (w *world) remove(t *testing.T, hostname string) {
	t.Helper()
	w.cloud.remove(t, w, hostname)
}

// mutations counts the provider's calls so far that change something.
func (w *world) mutations() int { return len(w.cloud.mutations(w)) }

// deletion is the step of the lab log that deletes the machine the log
// names by target (any machine when target is empty): the provider's call
// alone, as a replacement makes it.
func (w *world) deletion(target string) [3]string {
	return [3]string{w.cloud.deletion[0], w.cloud.deletion[1], target}
}

// deleted returns the steps of the lab log that remove the machine the log
// names by target (any machine when target is empty) for good: its
// deletion, then the provider's steps that follow it.
func (w *world) deleted(target string) [][3]string {
	return append([][3]string{w.deletion(target)}, w.cloud.then...)
}

// creation is the step of the lab log that creates a machine.
func (w *world) creation() [3]string {
	return [3]string{w.cloud.creation[0], w.cloud.creation[1], ""}
}

// deletes says whether log deletes a machine (of target, or any).
func (w *world) deletes(log []lab.LogEntry, target string) bool {
	return find(log, 0, w.cloud.deletion[0], w.cloud.deletion[1], target) >= 0
}

// pveVM returns the lab's Proxmox VM of that name.
func pveVM(w *world, name string) (pve.VMState, bool) {
	for _, v := range w.lab.PVE.VMs() {
		if v.Name == name {
			return v, true
		}
	}
	return pve.VMState{}, false
}

// pveCall calls the lab's Proxmox API directly, as another tool or an
// operator would, and fails the test unless it answers 2xx.
func pveCall(t *testing.T, w *world, method, path string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.lab.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(t.Context(), method, w.lab.PVEURL+"/api2/json"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+w.lab.TokenID+"="+w.lab.TokenSecret)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, body)
	}
}

// novaServer returns the lab's Nova server of that name.
func novaServer(t *testing.T, w *world, name string) labopenstack.ServerState {
	t.Helper()
	for _, s := range w.lab.OpenStack.Servers() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no server %s", name)
	return labopenstack.ServerState{}
}

// nova returns a gophercloud client of the world's Nova, authenticated
// with the lab cloud's application credential, as another client would
// be.
func (w *world) nova(t *testing.T) *gophercloud.ServiceClient {
	t.Helper()
	w.novaOnce.Do(func() {
		pc, err := gcos.NewClient(w.lab.OpenStackURL)
		if err != nil {
			w.novaErr = err
			return
		}
		pc.HTTPClient = http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.lab.CA.Pool(), MinVersion: tls.VersionTLS12}}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = gcos.Authenticate(ctx, pc, gophercloud.AuthOptions{IdentityEndpoint: w.lab.OpenStackURL,
			ApplicationCredentialID: w.lab.OpenStackCredential.ID, ApplicationCredentialSecret: w.lab.OpenStackCredential.Secret})
		if err != nil {
			w.novaErr = err
			return
		}
		w.novaSC, w.novaErr = gcos.NewComputeV2(pc, gophercloud.EndpointOpts{Region: w.lab.OpenStackRegion})
	})
	if w.novaErr != nil {
		t.Fatalf("a Nova client of the lab: %v", w.novaErr)
	}
	return w.novaSC
}

// forEach runs scenario against every cloud, as the parallel subtests
// "proxmox" and "openstack".
func forEach(t *testing.T, scenario func(t *testing.T, c *cloud)) {
	t.Helper()
	for _, c := range clouds {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			scenario(t, c)
		})
	}
}
