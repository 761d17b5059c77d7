package lab_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/talos"
	"github.com/taloscluster/taloscluster/providers/proxmox"
)

// controlPlaneConfig is the machine config of the only control plane of a
// new cluster whose API endpoint is a Layer-2 VIP on eth0, with the
// cluster's admin talosconfig.
func controlPlaneConfig(t *testing.T, cluster string, vip netip.Addr) ([]byte, *clientconfig.Config) {
	t.Helper()

	contract, err := config.ParseContractFromVersion("v1.13.0")
	if err != nil {
		t.Fatal(err)
	}

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		t.Fatal(err)
	}

	in, err := generate.NewInput(cluster, "https://"+net.JoinHostPort(vip.String(), "6443"), "1.35.1",
		generate.WithSecretsBundle(bundle), generate.WithVersionContract(contract))
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := in.Config(machinetype.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	doc := network.NewLayer2VIPConfigV1Alpha1(vip.String())
	doc.LinkName = "eth0"

	withVIP, err := container.New(append(cfg.Documents(), doc)...)
	if err != nil {
		t.Fatal(err)
	}

	data, err := withVIP.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}

	tc, err := in.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}

	return data, tc
}

// startVM creates VM id with the config ISO iso (uploaded under name) and
// starts it.
func (p pveAPI) startVM(t *testing.T, id int, mac string, name string, iso []byte) {
	t.Helper()

	p.upload(t, name, iso)

	vmid := strconv.Itoa(id)
	p.task(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{
		"vmid": {vmid}, "name": {"vm" + vmid}, "memory": {"2048"}, "scsi0": {"local-lvm:4"},
		"net0": {"virtio=" + mac + ",bridge=vmbr0"}, "agent": {"1"},
		"ide2": {"local:iso/" + name + ",media=cdrom"},
	})
	p.task(t, http.MethodPost, "/nodes/pve1/qemu/"+vmid+"/status/start", nil)
}

// agentAddrs is what the VM's guest agent reports on its first NIC, as
// "address/prefix".
func (p pveAPI) agentAddrs(t *testing.T, id int) []string {
	t.Helper()

	data, _ := p.do(t, http.MethodGet, "/nodes/pve1/qemu/"+strconv.Itoa(id)+"/agent/network-get-interfaces", "", nil).(map[string]any)
	result, _ := data["result"].([]any)

	var out []string

	for _, r := range result {
		nic, _ := r.(map[string]any)
		if nic["name"] != "eth0" {
			continue
		}

		ips, _ := nic["ip-addresses"].([]any)
		for _, ip := range ips {
			a, _ := ip.(map[string]any)
			if a["ip-address-type"] == "ipv4" {
				out = append(out, fmt.Sprintf("%v/%v", a["ip-address"], a["prefix"]))
			}
		}
	}

	return out
}

func newPVEAPI(l *lab.Lab) pveAPI {
	return pveAPI{lab: l, client: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: l.CA.Pool(), MinVersion: tls.VersionTLS12}}}}
}

// bootstrap bootstraps etcd on the node at addr with the talosconfig.
func bootstrap(t *testing.T, tc *clientconfig.Config, addr netip.Addr) {
	t.Helper()

	c, err := client.New(t.Context(), client.WithConfig(tc), client.WithEndpoints(addr.String()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck

	eventually(t, "the bootstrap of "+addr.String(), func() error {
		return c.Bootstrap(t.Context(), &machine.BootstrapRequest{})
	})
}

// TestGuestAgentReportsTheVIP: the guest agent of the control plane
// holding its cluster's Layer-2 VIP reports the VIP after its address, with
// a /32, once etcd runs; before, only its address.
func TestGuestAgentReportsTheVIP(t *testing.T) {
	t.Parallel()

	l, err := lab.Start(t.Context(), lab.Options{Bridges: map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix("127.53.0.0/24")}, TaskDuration: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	api := newPVEAPI(l)
	vip := netip.MustParseAddr("127.53.0.5")
	cfg, tc := controlPlaneConfig(t, "vip", vip)

	iso, err := proxmox.CIDataISO("cp1", cfg)
	if err != nil {
		t.Fatal(err)
	}

	api.startVM(t, 100, "02:00:00:53:00:01", "cidata-cp1.iso", iso)

	var addr netip.Addr

	eventually(t, "the control plane", func() error {
		nodes := l.Talos.Nodes()
		if len(nodes) != 1 || !nodes[0].Up || nodes[0].Mode != talos.ModeRunning {
			return fmt.Errorf("nodes %+v", nodes)
		}

		addr = nodes[0].Addr

		return nil
	})

	lease := addr.String() + "/24"

	if got := api.agentAddrs(t, 100); !slices.Equal(got, []string{lease}) {
		t.Errorf("agent before the bootstrap: %v, want %s only", got, lease)
	}

	bootstrap(t, tc, addr)

	eventually(t, "the VIP on the agent", func() error {
		if got := api.agentAddrs(t, 100); !slices.Equal(got, []string{lease, "127.53.0.5/32"}) {
			return fmt.Errorf("agent reports %v", got)
		}

		return nil
	})

	if world := l.World(); len(world.Nodes) != 1 || !slices.Equal(world.Nodes[0].VIPs, []string{"127.53.0.5"}) {
		t.Errorf("world nodes %+v", world.Nodes)
	}
}

// TestOnFatal: a node API and a Kubernetes API that cannot listen are
// reported to Options.OnFatal as *lab.ListenError.
func TestOnFatal(t *testing.T) {
	t.Parallel()

	fatal := make(chan error, 4)

	l, err := lab.Start(t.Context(), lab.Options{
		Bridges:      map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix("127.54.0.0/24")},
		TaskDuration: -1,
		OnFatal:      func(err error) { fatal <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	api := newPVEAPI(l)
	vip := netip.MustParseAddr("127.54.0.5")
	cfg, tc := controlPlaneConfig(t, "fatal", vip)

	iso, err := proxmox.CIDataISO("cp1", cfg)
	if err != nil {
		t.Fatal(err)
	}

	wantFatal := func(addr string) {
		t.Helper()

		select {
		case err := <-fatal:
			var lerr *lab.ListenError
			if !errors.As(err, &lerr) || lerr.Addr.String() != addr || lerr.Err == nil {
				t.Fatalf("OnFatal(%v), want a ListenError for %s", err, addr)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no OnFatal for %s; events %+v", addr, l.Events())
		}
	}

	// The first lease is .100: a program holds its Talos API port.
	squatter, err := net.Listen("tcp", "127.54.0.100:50000")
	if err != nil {
		t.Fatal(err)
	}

	api.startVM(t, 100, "02:00:00:54:00:01", "cidata-cp1.iso", iso)
	wantFatal("127.54.0.100:50000")
	squatter.Close()

	if st, ok := l.Talos.Node(netip.MustParseAddr("127.54.0.100")); !ok || st.Up || st.Mode != talos.ModeOff {
		t.Errorf("node after the failure: %+v", st)
	}

	// Power-cycled, the node comes up; its cluster's Kubernetes API
	// address is taken.
	kubeSquatter, err := net.Listen("tcp", "127.54.0.5:6443")
	if err != nil {
		t.Fatal(err)
	}
	defer kubeSquatter.Close()

	api.task(t, http.MethodPost, "/nodes/pve1/qemu/100/status/stop", nil)
	api.task(t, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)

	addr := netip.MustParseAddr("127.54.0.100")

	eventually(t, "the control plane", func() error {
		if st, _ := l.Talos.Node(addr); !st.Up || st.Mode != talos.ModeRunning {
			return fmt.Errorf("node %+v", st)
		}

		return nil
	})

	bootstrap(t, tc, addr)
	wantFatal("127.54.0.5:6443")

	select {
	case err := <-fatal:
		t.Errorf("another OnFatal: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
}
