package lab_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcopenstack "github.com/gophercloud/gophercloud/v2/openstack"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/openstack"
	"github.com/taloscluster/taloscluster/lab/talos"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// The OpenStack tests' networks: 127.73.0.0/24 is their labs' Proxmox
// bridge, 127.74.N.0/24 their external networks (floating IPs) and
// 127.75.N.0/24 their servers' fixed addresses, N one per test.
const (
	osBridge = "127.73.0.0/24"
)

// startOpenStackLab starts a lab whose cloud's external network is
// 127.74.n.0/24.
func startOpenStackLab(t *testing.T, n int, onFatal func(error)) *lab.Lab {
	t.Helper()
	l, err := lab.Start(t.Context(), lab.Options{
		Bridges:               map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix(osBridge)},
		OpenStackExternalCIDR: netip.MustParsePrefix(fmt.Sprintf("127.74.%d.0/24", n)),
		TaskDuration:          -1,
		OnFatal:               onFatal,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// fixedAddr is host h of the servers' network of test n.
func fixedAddr(n, h int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 75, byte(n), byte(h)})
}

// authenticate logs in to the lab's cloud with gophercloud as the provider
// does: application credential, TLS verified against the lab's CA.
func authenticate(t *testing.T, l *lab.Lab, timeout time.Duration) (*gophercloud.ProviderClient, error) {
	t.Helper()
	provider, err := gcopenstack.NewClient(l.OpenStackURL)
	if err != nil {
		t.Fatal(err)
	}
	provider.HTTPClient = http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: l.CA.Pool(), MinVersion: tls.VersionTLS12},
	}}
	return provider, gcopenstack.Authenticate(t.Context(), provider, gophercloud.AuthOptions{
		IdentityEndpoint:            l.OpenStackURL,
		ApplicationCredentialID:     l.OpenStackCredential.ID,
		ApplicationCredentialSecret: l.OpenStackCredential.Secret,
	})
}

func hasEvent(l *lab.Lab, what, subject, detail string) bool {
	return slices.ContainsFunc(l.Events(), func(e lab.Event) bool {
		return e.What == what && e.Subject == subject && strings.Contains(e.Detail, detail)
	})
}

// TestOpenStackServersBecomeNodes: the lab's cloud answers gophercloud over
// the lab's CA, and a server that Nova boots is a Talos node at its fixed
// address, configured from its user data, powered off and destroyed with
// the server.
func TestOpenStackServersBecomeNodes(t *testing.T) {
	t.Parallel()
	l := startOpenStackLab(t, 0, nil)
	if !strings.HasPrefix(l.OpenStackURL, "https://127.0.0.1:") || !strings.HasSuffix(l.OpenStackURL, "/identity/v3") {
		t.Errorf("OpenStackURL = %q", l.OpenStackURL)
	}
	if l.OpenStackCredential.ID != openstack.DefaultCredential.ID || l.OpenStackRegion != openstack.DefaultRegion ||
		l.OpenStackExternalNet != "ext-net" || l.OpenStackExternalCIDR != netip.MustParsePrefix("127.74.0.0/24") {
		t.Errorf("cloud: credential %+v, region %q, external network %s %s", l.OpenStackCredential, l.OpenStackRegion, l.OpenStackExternalNet, l.OpenStackExternalCIDR)
	}
	provider, err := authenticate(t, l, 10*time.Second)
	if err != nil {
		t.Fatalf("authenticating: %v", err)
	}
	compute, err := gcopenstack.NewComputeV2(provider, gophercloud.EndpointOpts{Region: l.OpenStackRegion})
	if err != nil {
		t.Fatalf("the compute endpoint: %v", err)
	}
	if want := strings.TrimSuffix(l.OpenStackURL, "/identity/v3") + "/compute/v2.1/"; compute.Endpoint != want {
		t.Errorf("compute endpoint %q, want %q", compute.Endpoint, want)
	}

	hooks := lab.OpenStackHooks(l)
	worker, maint := fixedAddr(0, 10), fixedAddr(0, 11)
	hooks.ServerUp(openstack.ServerInfo{ID: "srv-1", Name: "os-worker-01", Addrs: []netip.Addr{worker, fixedAddr(0, 200)},
		UserData: workerConfig(t, "os", "https://127.75.0.5:6443"), Flavor: "gp.large", AvailabilityZone: "nova"})
	hooks.ServerUp(openstack.ServerInfo{ID: "srv-2", Name: "os-spare", Addrs: []netip.Addr{maint}})
	hooks.ServerUp(openstack.ServerInfo{ID: "srv-3", Name: "os-portless"})
	waitNode := func(addr netip.Addr, mode talos.Mode, up bool) {
		t.Helper()
		eventually(t, fmt.Sprintf("node %s %s", addr, mode), func() error {
			st, ok := l.Talos.Node(addr)
			if !ok || st.Mode != mode || st.Up != up {
				return fmt.Errorf("node %+v, known %v", st, ok)
			}
			return nil
		})
	}
	waitNode(worker, talos.ModeRunning, true)
	waitNode(maint, talos.ModeMaintenance, true)
	if st, _ := l.Talos.Node(worker); st.Cluster != "os" {
		t.Errorf("the worker's node is in cluster %q, want os", st.Cluster)
	}
	if _, ok := l.Talos.Node(fixedAddr(0, 200)); ok {
		t.Error("a node came up at the server's second address")
	}
	if !hasEvent(l, "power-on", "os-worker-01", "server srv-1 at 127.75.0.10, config from its user data") ||
		!hasEvent(l, "power-on", "os-spare", "maintenance mode") || !hasEvent(l, "boot-failed", "os-portless", "no fixed address") {
		t.Errorf("events: %+v", l.Events())
	}

	hooks.ServerDown("srv-1")
	waitNode(worker, talos.ModeOff, false)
	// A reboot: down, then up again from the same disk.
	hooks.ServerUp(openstack.ServerInfo{ID: "srv-1", Name: "os-worker-01", Addrs: []netip.Addr{worker},
		UserData: workerConfig(t, "os", "https://127.75.0.5:6443")})
	waitNode(worker, talos.ModeRunning, true)
	hooks.ServerDown("srv-1")
	hooks.ServerDeleted("srv-1")
	hooks.ServerDeleted("srv-2")
	for _, a := range []netip.Addr{worker, maint} {
		if st, ok := l.Talos.Node(a); ok {
			t.Errorf("the node at %s outlived its server: %+v", a, st)
		}
	}
	if !hasEvent(l, "power-off", "os-worker-01", "srv-1") || !hasEvent(l, "destroyed", "os-worker-01", "127.75.0.10") ||
		!hasEvent(l, "destroyed", "os-spare", "127.75.0.11") {
		t.Errorf("events: %+v", l.Events())
	}
	// Unknown servers are ignored.
	hooks.ServerDown("nope")
	hooks.ServerDeleted("nope")
}

// echoServer answers each line on addr with prefix and the line, until the
// test ends.
func echoServer(t *testing.T, addr netip.AddrPort, prefix string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := fmt.Fprintf(c, "%s%s\n", prefix, sc.Text()); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// roundTrip sends a line to addr and returns the answer's line.
func roundTrip(addr netip.AddrPort, line string) (string, error) {
	c, err := net.DialTimeout("tcp", addr.String(), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

// TestOpenStackFloatingIPNAT: an associated floating IP forwards its four
// ports to the fixed address, follows a new association, stops when
// disassociated, and a port it cannot listen on is a fatal listen error.
func TestOpenStackFloatingIPNAT(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		fatals []error
	)
	l := startOpenStackLab(t, 1, func(err error) {
		mu.Lock()
		fatals = append(fatals, err)
		mu.Unlock()
	})
	floating, squatted := netip.MustParseAddr("127.74.1.10"), netip.MustParseAddr("127.74.1.11")
	a, b := fixedAddr(1, 10), fixedAddr(1, 11)
	for _, port := range lab.FloatingIPPorts {
		echoServer(t, netip.AddrPortFrom(a, port), fmt.Sprintf("a:%d ", port))
	}
	echoServer(t, netip.AddrPortFrom(b, 6443), "b ")

	lab.SetFloatingIPs(l, map[netip.Addr]netip.Addr{floating: a})
	for _, port := range lab.FloatingIPPorts {
		got, err := roundTrip(netip.AddrPortFrom(floating, port), "hello")
		if want := fmt.Sprintf("a:%d hello", port); err != nil || got != want {
			t.Errorf("port %d through the floating IP: %q, %v; want %q", port, got, err, want)
		}
	}
	// A port the lab does not forward is closed.
	if c, err := net.DialTimeout("tcp", netip.AddrPortFrom(floating, 22).String(), time.Second); err == nil {
		c.Close()
		t.Error("port 22 of the floating IP answers")
	}
	// A connection open while the floating IP moves stays with its
	// server; new ones go to the new fixed address.
	open, err := net.DialTimeout("tcp", netip.AddrPortFrom(floating, 6443).String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	openReader := bufio.NewReader(open)
	fmt.Fprintln(open, "first")
	if got, err := openReader.ReadString('\n'); err != nil || got != "a:6443 first\n" {
		t.Fatalf("an open connection: %q, %v", got, err)
	}
	lab.SetFloatingIPs(l, map[netip.Addr]netip.Addr{floating: b})
	if got, err := roundTrip(netip.AddrPortFrom(floating, 6443), "moved"); err != nil || got != "b moved" {
		t.Errorf("after the move: %q, %v", got, err)
	}
	fmt.Fprintln(open, "second")
	if got, err := openReader.ReadString('\n'); err != nil || got != "a:6443 second\n" {
		t.Errorf("the connection open across the move: %q, %v", got, err)
	}
	// b has nothing on 50000: the client's connection is reset, as a
	// refused connection's RST comes back through a NAT.
	if got, err := roundTrip(netip.AddrPortFrom(floating, 50000), "nobody"); err == nil {
		t.Errorf("port 50000 with nothing behind it answered %q", got)
	}
	if got := l.FloatingIPs(); len(got) != 1 || got[floating] != b {
		t.Errorf("FloatingIPs() = %v", got)
	}

	// Disassociated: the ports close and open connections are cut.
	lab.SetFloatingIPs(l, map[netip.Addr]netip.Addr{})
	if c, err := net.DialTimeout("tcp", netip.AddrPortFrom(floating, 6443).String(), time.Second); err == nil {
		c.Close()
		t.Error("the disassociated floating IP still answers")
	}
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := openReader.ReadString('\n'); err == nil {
		t.Errorf("the open connection survived the disassociation: %v", err)
	}

	// A floating IP whose port another program holds.
	squatter, err := net.Listen("tcp", netip.AddrPortFrom(squatted, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	lab.SetFloatingIPs(l, map[netip.Addr]netip.Addr{squatted: a})
	mu.Lock()
	var lerr *lab.ListenError
	if len(fatals) != 1 || !errors.As(fatals[0], &lerr) || lerr.Addr != netip.AddrPortFrom(squatted, 80) || !strings.Contains(lerr.What, "floating IP 127.74.1.11") {
		t.Errorf("fatal errors %v, want one naming 127.74.1.11:80", fatals)
	}
	mu.Unlock()
	if got, err := roundTrip(netip.AddrPortFrom(squatted, 6443), "partial"); err != nil || got != "a:6443 partial" {
		t.Errorf("the other ports of a floating IP with one busy: %q, %v", got, err)
	}
	if !hasEvent(l, "nat-failed", "127.74.1.11", "port 80") || !hasEvent(l, "nat-down", "127.74.1.10", "127.75.1.11") {
		t.Errorf("events: %+v", l.Events())
	}
	// After Close, nothing is forwarded.
	l.Close()
	if c, err := net.DialTimeout("tcp", netip.AddrPortFrom(squatted, 6443).String(), time.Second); err == nil {
		c.Close()
		t.Error("a floating IP answers after the lab closed")
	}
}

// TestOpenStackFaults injects the openstack-* faults through the control
// API and sees them with gophercloud and in the log.
func TestOpenStackFaults(t *testing.T) {
	t.Parallel()
	l := startOpenStackLab(t, 2, nil)
	srv := httptest.NewServer(l.ControlHandler())
	defer srv.Close()
	inject := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/lab/v1/faults", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var answer map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, answer["error"]
	}
	for body, want := range map[string]string{
		`{"kind":"openstack-fail"}`:                                     "needs op",
		`{"kind":"openstack-hang","op":" "}`:                            "needs op",
		`{"kind":"openstack-fail","op":"compute","status":200}`:         "not an HTTP error status",
		`{"kind":"openstack-latency","op":"compute","millis":-1}`:       "must not be negative",
		`{"kind":"openstack-explode","op":"compute.server.create"}`:     "unknown fault kind",
		`{"kind":"openstack-reset","op":"identity.token.create","n":1}`: "unknown fault kind",
	} {
		if code, msg := inject(body); code != http.StatusBadRequest || !strings.Contains(msg, want) {
			t.Errorf("POST %s: %d %q, want 400 naming %q", body, code, msg, want)
		}
	}

	// fail: the exact operation, once.
	if code, msg := inject(`{"kind":"openstack-fail","op":"identity.token.create","n":1,"status":503}`); code != http.StatusOK {
		t.Fatalf("openstack-fail: %d %s", code, msg)
	}
	var unexpected gophercloud.ErrUnexpectedResponseCode
	if _, err := authenticate(t, l, 10*time.Second); !errors.As(err, &unexpected) || unexpected.Actual != http.StatusServiceUnavailable {
		t.Errorf("authenticating with the failure injected: %v, want a 503", err)
	}
	if _, err := authenticate(t, l, 10*time.Second); err != nil {
		t.Errorf("authenticating after the failure: %v", err)
	}
	// latency: every operation of the service.
	if code, msg := inject(`{"kind":"openstack-latency","op":"identity","millis":300}`); code != http.StatusOK {
		t.Fatalf("openstack-latency: %d %s", code, msg)
	}
	start := time.Now()
	if _, err := authenticate(t, l, 10*time.Second); err != nil || time.Since(start) < 300*time.Millisecond {
		t.Errorf("authenticating with latency: %v after %v", err, time.Since(start))
	}
	inject(`{"kind":"openstack-latency","op":"identity","millis":0}`)
	// hang: the service written with .*, until the client gives up.
	if code, msg := inject(`{"kind":"openstack-hang","op":"identity.*","n":1}`); code != http.StatusOK {
		t.Fatalf("openstack-hang: %d %s", code, msg)
	}
	start = time.Now()
	if _, err := authenticate(t, l, 500*time.Millisecond); err == nil {
		t.Error("authenticating against a hung Keystone succeeded")
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("the hung call ended after %v, before the client gave up", d)
	}
	if _, err := authenticate(t, l, 10*time.Second); err != nil {
		t.Errorf("authenticating after the hang: %v", err)
	}

	var index struct {
		FaultKinds []string `json:"fault_kinds"`
	}
	resp, err := http.Get(srv.URL + "/lab/v1/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&index); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"openstack-fail", "openstack-latency", "openstack-hang"} {
		if !slices.Contains(index.FaultKinds, k) {
			t.Errorf("fault kinds lack %s: %v", k, index.FaultKinds)
		}
	}
	var results []string
	for _, e := range l.Log() {
		if e.Source == "openstack" && e.Op == "identity.token.create" {
			results = append(results, e.Result)
		}
	}
	if want := []string{"503", "201", "201", "no answer (hang)", "201"}; !slices.Equal(results, want) {
		t.Errorf("the log's token creations %q, want %q", results, want)
	}
}

// TestOpenStackExampleCluster writes the OpenStack example cluster
// directory and loads it as taloscluster does.
func TestOpenStackExampleCluster(t *testing.T) {
	t.Parallel()
	l := startOpenStackLab(t, 3, nil)
	dir := filepath.Join(t.TempDir(), "openstack")
	cidr := netip.MustParsePrefix("127.75.3.0/24")
	if err := l.WriteOpenStackCluster(dir, lab.OpenStackCluster{Name: "cloud", Workers: 2, CIDR: cidr}); err != nil {
		t.Fatal(err)
	}
	c, warns, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatalf("loading the example: %v", err)
	}
	if len(warns) > 0 {
		t.Errorf("warnings: %v", warns)
	}
	o := c.OpenStack
	if o == nil || o.URL != l.OpenStackURL || o.AvailabilityZone != "nova" || o.ExternalNet != "ext-net" || o.Region != l.OpenStackRegion ||
		o.CredentialID != l.OpenStackCredential.ID || o.CredentialSecret != l.OpenStackCredential.Secret {
		t.Errorf("openstack section %+v", o)
	}
	if c.Network.Cluster.CIDR != cidr {
		t.Errorf("cluster network %v, want %v", c.Network.Cluster.CIDR, cidr)
	}
	if err := l.WriteOpenStackCluster(dir, lab.OpenStackCluster{Name: "cloud", CIDR: netip.MustParsePrefix("10.0.0.0/24")}); err == nil {
		t.Error("a cluster network outside loopback was written")
	}
}
