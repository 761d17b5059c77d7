package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/taloscluster/taloscluster/reconcile/state"
)

// Cluster describes a cluster directory that converges against the lab.
type Cluster struct {
	Name string
	// Workers is the size of the one worker pool.
	Workers int
	// Bridge is the Proxmox bridge of the cluster network; its lab network
	// gives the cidr, and host .5 is the API VIP.
	Bridge string
}

// ClusterYAML returns the cluster.yaml of c: three control planes and a
// worker pool on the lab's Proxmox, TLS verified against the lab's CA.
func (l *Lab) ClusterYAML(c Cluster) (string, error) {
	prefix, ok := l.opts.Bridges[c.Bridge]
	if !ok {
		return "", fmt.Errorf("bridge %q has no lab network", c.Bridge)
	}
	net := prefix.Masked()
	host := func(n int) netip.Addr {
		a := net.Addr()
		for range n {
			a = a.Next()
		}
		return a
	}
	return fmt.Sprintf(`# A three-control-plane cluster on the lab's simulated Proxmox cluster.
include: [secrets.yaml]

name: %s

talos:
  version: v1.13.8

kubernetes:
  version: v1.36.1

controlplane:
  count: 3
  cores: 2
  memory: 4
  disk: 20

workers:
  worker:
    count: %d
    cores: 4
    memory: 8
    disk: 50

proxmox:
  url: %s
  storage: local-lvm
  iso_storage: local
  nodes: [%s]
  tls_verify: ca.pem            # the lab's CA: TLS is verified
  image_factory: %s
  network:
    cluster:
      bridge: %s

network:
  cluster:
    cidr: %s         # the lab's %s network (loopback)
    gateway: %s
    kubeapi_vip: %s
  dns: []
  ntp: [pool.ntp.org]

security:
  kubernetes:
    loopback: 127.0.0.0/8
  talos:
    loopback: 127.0.0.0/8
`, c.Name, c.Workers, l.PVEURL, joinComma(l.opts.Nodes), l.FactoryURL, c.Bridge, net, c.Bridge, host(1), host(5)), nil
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

// WriteCluster writes a cluster directory for c into dir: cluster.yaml,
// secrets.yaml with the lab's Proxmox token (mode 0600) and the lab's CA.
func (l *Lab) WriteCluster(dir string, c Cluster) error {
	body, err := l.ClusterYAML(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	secrets := fmt.Sprintf("proxmox:\n  token_id: %q\n  token_secret: %q\n", l.TokenID, l.TokenSecret)
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"cluster.yaml", []byte(body), 0o644},
		{"secrets.yaml", []byte(secrets), 0o600},
		{"ca.pem", l.CA.PEM(), 0o644},
	}
	for _, f := range files {
		if err := state.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}
