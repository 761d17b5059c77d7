package lab_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/lab"
)

// kubeconfigAt is the admin kubeconfig the control plane at addr serves
// (MachineService.Kubeconfig), as a client-go config.
func kubeconfigAt(t *testing.T, tc *client.Client, addr netip.Addr) *rest.Config {
	t.Helper()

	data, err := tc.Kubeconfig(client.WithNode(t.Context(), addr.String()))
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}

	cfg.Timeout = 2 * time.Second

	return cfg
}

// serverVersion asks cfg's server for /version with client-go, verifying
// its certificate against the kubeconfig's CA.
func serverVersion(cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}

	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}

	return v.GitVersion, nil
}

// withVIP is cfg with the cluster endpoint at vip:6443 and its
// Layer2VIPConfig replaced by one for vip on eth0.
func withVIP(t *testing.T, cfg config.Provider, vip netip.Addr) []byte {
	t.Helper()

	patch, err := configpatcher.LoadPatch([]byte("cluster:\n  controlPlane:\n    endpoint: https://" + net.JoinHostPort(vip.String(), "6443") + "\n"))
	if err != nil {
		t.Fatal(err)
	}

	out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{patch})
	if err != nil {
		t.Fatal(err)
	}

	patched, err := out.Config()
	if err != nil {
		t.Fatal(err)
	}

	var docs []configconfig.Document

	for _, d := range patched.Documents() {
		if d.Kind() != network.Layer2VIPKind {
			docs = append(docs, d)
		}
	}

	doc := network.NewLayer2VIPConfigV1Alpha1(vip.String())
	doc.LinkName = "eth0"

	ctr, err := container.New(append(docs, doc)...)
	if err != nil {
		t.Fatal(err)
	}

	data, err := ctr.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}

	return data
}

// TestLiveVIPChange: a new Layer-2 VIP and cluster endpoint applied live to
// one control plane at a time. Each control plane campaigns for the VIP of
// its current config; the Kubernetes API answers at every VIP some control
// plane holds, with a certificate for that address; the kubeconfig Talos
// serves names the node's current endpoint; once every control plane
// moved, the new VIP answers client-go with TLS verified and the old one
// refuses connections.
func TestLiveVIPChange(t *testing.T) {
	t.Parallel()

	c := startLabCluster(t, 227, lab.Options{})
	tc := c.talos(t)
	ctx := t.Context()

	oldVIP, newVIP := c.vip, netip.MustParseAddr("127.227.0.6")
	oldURL := "https://" + net.JoinHostPort(oldVIP.String(), "6443")
	newURL := "https://" + net.JoinHostPort(newVIP.String(), "6443")
	cps := []string{c.cp(1), c.cp(2), c.cp(3)}

	before := kubeconfigAt(t, tc, c.addrs[c.cp(1)])
	if before.Host != oldURL {
		t.Fatalf("kubeconfig before the change names %s, want %s", before.Host, oldURL)
	}

	if _, err := serverVersion(before); err != nil {
		t.Fatalf("the API at the old VIP before the change: %v", err)
	}

	for i, host := range cps {
		nctx := client.WithNode(ctx, c.addrs[host].String())

		mc, err := safe.StateGetByID[*configres.MachineConfig](nctx, tc.COSI, configres.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		resp, err := tc.ApplyConfiguration(nctx, &machine.ApplyConfigurationRequest{
			Data: withVIP(t, mc.Provider(), newVIP), Mode: machine.ApplyConfigurationRequest_NO_REBOOT,
		})
		if err != nil {
			t.Fatalf("apply to %s: %v", host, err)
		}

		if got := resp.GetMessages()[0].GetModeDetails(); got != "Applied configuration without a reboot" {
			t.Fatalf("apply to %s: %q", host, got)
		}

		after := kubeconfigAt(t, tc, c.addrs[host])
		if after.Host != newURL {
			t.Fatalf("kubeconfig of %s after its apply names %s, want %s", host, after.Host, newURL)
		}

		eventually(t, host+" holding the new VIP", func() error {
			holder, ok := c.l.Talos.VIPHolder(newVIP)
			if !ok {
				return errors.New("no holder")
			}

			if i == 0 && holder != c.addrs[host] {
				return fmt.Errorf("held by %s", holder)
			}

			return nil
		})

		if i > 0 {
			continue
		}

		// One control plane moved: it holds the new VIP, the other two
		// campaign for the old one, and the API answers at both, each
		// with a certificate valid for its address.
		if holder, ok := c.l.Talos.VIPHolder(oldVIP); !ok || holder == c.addrs[host] {
			t.Errorf("old VIP held by %s (%v), want another control plane", holder, ok)
		}

		eventually(t, "the API at the old and the new VIP", func() error {
			if _, err := serverVersion(before); err != nil {
				return fmt.Errorf("old VIP: %w", err)
			}

			if _, err := serverVersion(after); err != nil {
				return fmt.Errorf("new VIP: %w", err)
			}

			return nil
		})

		for _, cv := range c.l.World().Clusters {
			if cv.Name == c.name && (cv.KubeAPI != oldURL || !slices.Equal(cv.KubeAPIs, []string{oldURL, newURL})) {
				t.Errorf("cluster view while the VIP moves: %s %v", cv.KubeAPI, cv.KubeAPIs)
			}
		}
	}

	// Every control plane moved: nobody holds the old VIP, whose address
	// refuses connections; the kubeconfig Talos serves reaches the API at
	// the new one.
	eventually(t, "the old VIP to close", func() error {
		if holder, ok := c.l.Talos.VIPHolder(oldVIP); ok {
			return fmt.Errorf("held by %s", holder)
		}

		conn, err := net.DialTimeout("tcp", net.JoinHostPort(oldVIP.String(), "6443"), time.Second)
		if err == nil {
			conn.Close()

			return errors.New("the old VIP accepts connections")
		}

		if !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("dialing the old VIP: %w, want connection refused", err)
		}

		return nil
	})

	for _, host := range cps {
		kc := kubeconfigAt(t, tc, c.addrs[host])
		if kc.Host != newURL {
			t.Errorf("kubeconfig of %s names %s, want %s", host, kc.Host, newURL)
		}

		if _, err := serverVersion(kc); err != nil {
			t.Errorf("the API at the new VIP with the kubeconfig of %s: %v", host, err)
		}
	}

	if _, err := serverVersion(before); err == nil {
		t.Error("the old kubeconfig still reaches the API")
	}

	srv := httptest.NewServer(c.l.ControlHandler())
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/lab/v1/clusters")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	var clusters []lab.ClusterView
	if err := json.NewDecoder(resp.Body).Decode(&clusters); err != nil {
		t.Fatal(err)
	}

	found := false

	for _, cv := range clusters {
		if cv.Name == c.name {
			found = true

			if cv.KubeAPI != newURL || !slices.Equal(cv.KubeAPIs, []string{newURL}) {
				t.Errorf("/lab/v1/clusters: kubernetes_api %s, addresses %v, want %s", cv.KubeAPI, cv.KubeAPIs, newURL)
			}
		}
	}

	if !found {
		t.Errorf("/lab/v1/clusters lacks %s: %+v", c.name, clusters)
	}

	for _, n := range c.l.World().Nodes {
		if slices.Contains(n.VIPs, oldVIP.String()) {
			t.Errorf("%s still holds the old VIP", n.Hostname)
		}
	}
}
