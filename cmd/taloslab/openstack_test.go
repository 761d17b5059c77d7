package main

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcopenstack "github.com/gophercloud/gophercloud/v2/openstack"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestLabEnvOpenStack: lab.env exports the standard OpenStack client
// variables, with which gophercloud authenticates over the lab's CA; the
// OpenStack networks are reserved apart from the bridges'; the example
// directory and the forge's clusters/openstack use them and the lab's
// application credential; the control API takes openstack-* faults.
func TestLabEnvOpenStack(t *testing.T) {
	t.Parallel()
	l := startUp(t, "--subnet", "127.217.0.0/24,127.218.0.0/24,127.207.0.0/24")
	env := l.env
	for k, want := range map[string]string{
		"OS_AUTH_TYPE":                    "v3applicationcredential",
		"OS_INTERFACE":                    "public",
		"OS_IDENTITY_API_VERSION":         "3",
		"OS_REGION_NAME":                  "RegionOne",
		"OS_CACERT":                       env["TALOSLAB_CA"],
		"TALOSLAB_OPENSTACK_EXTERNAL_NET": "ext-net",
	} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}
	if !strings.HasPrefix(env["OS_AUTH_URL"], "https://127.0.0.1:") || !strings.HasSuffix(env["OS_AUTH_URL"], "/identity/v3") ||
		env["OS_APPLICATION_CREDENTIAL_ID"] == "" || env["OS_APPLICATION_CREDENTIAL_SECRET"] == "" {
		t.Fatalf("lab.env's OpenStack credentials: %v", env)
	}

	// gophercloud, as the provider and the openstack CLI read these.
	ca, err := os.ReadFile(env["OS_CACERT"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	provider, err := gcopenstack.NewClient(env["OS_AUTH_URL"])
	if err != nil {
		t.Fatal(err)
	}
	provider.HTTPClient = http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	if err := gcopenstack.Authenticate(t.Context(), provider, gophercloud.AuthOptions{IdentityEndpoint: env["OS_AUTH_URL"],
		ApplicationCredentialID: env["OS_APPLICATION_CREDENTIAL_ID"], ApplicationCredentialSecret: env["OS_APPLICATION_CREDENTIAL_SECRET"]}); err != nil {
		t.Fatalf("authenticating with lab.env's credential: %v", err)
	}
	if _, err := gcopenstack.NewComputeV2(provider, gophercloud.EndpointOpts{Region: env["OS_REGION_NAME"], Availability: gophercloud.AvailabilityPublic}); err != nil {
		t.Errorf("the compute endpoint: %v", err)
	}

	// Three OpenStack networks, apart from each other and the bridges'.
	nets := l.nets(t)
	var osNets []netip.Prefix
	for _, k := range []string{"TALOSLAB_OPENSTACK_EXTERNAL_CIDR", "TALOSLAB_OPENSTACK_EXAMPLE_NET", "TALOSLAB_OPENSTACK_GITOPS_NET"} {
		p, err := netip.ParsePrefix(env[k])
		if err != nil || p.Bits() != 24 || !p.Addr().IsLoopback() {
			t.Fatalf("%s=%q", k, env[k])
		}
		if slices.Contains(nets, p) || slices.Contains(osNets, p) {
			t.Errorf("%s=%s is taken twice (bridges %v, OpenStack %v)", k, p, nets, osNets)
		}
		osNets = append(osNets, p)
	}

	// examples/openstack loads, with the lab's cloud and credential.
	dir := filepath.Join(l.dir, "examples", "openstack")
	c, _, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatalf("loading examples/openstack: %v", err)
	}
	if o := c.OpenStack; o == nil || o.URL != env["OS_AUTH_URL"] || o.ExternalNet != "ext-net" || o.AvailabilityZone != "nova" ||
		o.Region != "RegionOne" || o.CredentialID != env["OS_APPLICATION_CREDENTIAL_ID"] || o.CredentialSecret != env["OS_APPLICATION_CREDENTIAL_SECRET"] {
		t.Errorf("examples/openstack's openstack section: %+v", c.OpenStack)
	}
	if c.Network.Cluster.CIDR != osNets[1] || c.ControlPlane.Count != 3 || c.ControlPlane.Flavor != "gp.medium" || c.ControlPlane.Disk != 40 {
		t.Errorf("examples/openstack: cidr %s, control plane %+v", c.Network.Cluster.CIDR, c.ControlPlane)
	}
	if st, err := os.Stat(filepath.Join(dir, "secrets.yaml")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("examples/openstack/secrets.yaml: %v, %v", st, err)
	}

	// The forge's clusters/openstack, and the agent's secret for it.
	cloud, err := exec.CommandContext(t.Context(), "git", "--git-dir", filepath.Join(l.dir, "forge", "org", "clusters.git"),
		"show", "main:clusters/openstack/cluster.yaml").Output()
	if err != nil {
		t.Fatalf("reading clusters/openstack from the forge: %v", err)
	}
	for _, want := range []string{"url: " + env["OS_AUTH_URL"], "cidr: " + osNets[2].String(), "name: gitops-cloud"} {
		if !strings.Contains(string(cloud), want) {
			t.Errorf("clusters/openstack/cluster.yaml lacks %q:\n%s", want, cloud)
		}
	}
	secret, err := os.ReadFile(filepath.Join(l.dir, "agent", "secrets", "clusters", "openstack", "secrets.yaml"))
	if err != nil || !strings.Contains(string(secret), env["OS_APPLICATION_CREDENTIAL_ID"]) || !strings.Contains(string(secret), env["OS_APPLICATION_CREDENTIAL_SECRET"]) {
		t.Errorf("the agent's secret of clusters/openstack: %q, %v", secret, err)
	}

	// The control API passes openstack-* faults to the lab.
	if status, body := l.control(t, http.MethodPost, "/lab/v1/faults", `{"kind":"openstack-fail","op":"compute","n":1,"status":503}`); status != http.StatusOK {
		t.Errorf("openstack-fail: %d %s", status, body)
	}
	if status, body := l.control(t, http.MethodGet, "/lab/v1/", ""); status != http.StatusOK || !strings.Contains(string(body), "openstack-hang") {
		t.Errorf("the control API's index: %d %s", status, body)
	}
}
