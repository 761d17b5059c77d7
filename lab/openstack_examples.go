package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/taloscluster/taloscluster/reconcile/state"
)

// OpenStackCluster describes a cluster directory that converges against
// the lab's OpenStack cloud.
type OpenStackCluster struct {
	Name string
	// Workers is the size of the one worker pool.
	Workers int
	// CIDR is the cluster network: the provider creates its subnet there,
	// and the nodes' Talos APIs listen on its addresses. A loopback /24.
	CIDR netip.Prefix
}

// OpenStackClusterYAML returns the cluster.yaml of c: three control planes
// (gp.medium, 40 GB) and a worker pool (gp.large, 80 GB) in the lab cloud's
// zone "nova", floating IPs from its external network.
func (l *Lab) OpenStackClusterYAML(c OpenStackCluster) (string, error) {
	if !c.CIDR.IsValid() || !c.CIDR.Addr().Is4() || !c.CIDR.Addr().IsLoopback() || c.CIDR != c.CIDR.Masked() {
		return "", fmt.Errorf("cluster network %q is not a loopback IPv4 network", c.CIDR)
	}
	return fmt.Sprintf(`# A three-control-plane cluster on the lab's simulated OpenStack cloud.
# Keystone's certificate comes from the lab's CA (ca.pem, OS_CACERT).
include: [secrets.yaml]

name: %s

talos:
  version: v1.13.8

kubernetes:
  version: v1.36.1

controlplane:
  count: 3
  flavor: gp.medium
  disk: 40

workers:
  worker:
    count: %d
    flavor: gp.large
    disk: 80

openstack:
  url: %s
  availability_zone: nova
  external_net: %s          # floating IPs from %s (loopback)
  region: %s
  tls_verify: ca.pem        # the lab's CA signs Keystone's certificate
  image_factory: %s

network:
  cluster:
    cidr: %s         # the subnet the provider creates (loopback); no kubeapi_vip on OpenStack
  dns: []
  ntp: [pool.ntp.org]

security:
  kubernetes:
    loopback: 127.0.0.0/8
  talos:
    loopback: 127.0.0.0/8
`, c.Name, c.Workers, l.OpenStackURL, l.OpenStackExternalNet, l.OpenStackExternalCIDR, l.OpenStackRegion, l.FactoryURL, c.CIDR), nil
}

// OpenStackSecretsYAML is the secrets.yaml of an OpenStack cluster: the
// lab cloud's application credential.
func (l *Lab) OpenStackSecretsYAML() string {
	return fmt.Sprintf("openstack:\n  credential_id: %q\n  credential_secret: %q\n", l.OpenStackCredential.ID, l.OpenStackCredential.Secret)
}

// WriteOpenStackCluster writes a cluster directory for c into dir:
// cluster.yaml, secrets.yaml with the lab cloud's application credential
// (mode 0600) and the lab's CA.
func (l *Lab) WriteOpenStackCluster(dir string, c OpenStackCluster) error {
	body, err := l.OpenStackClusterYAML(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"cluster.yaml", []byte(body), 0o644},
		{"secrets.yaml", []byte(l.OpenStackSecretsYAML()), 0o600},
		{"ca.pem", l.CA.PEM(), 0o644},
	}
	for _, f := range files {
		if err := state.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}
