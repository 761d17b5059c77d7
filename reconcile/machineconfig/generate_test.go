package machineconfig_test

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime/extensions"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

func TestGenerateGolden(t *testing.T) {
	t.Parallel()

	prox := proxmoxCluster()
	ostk := openStackCluster()

	for _, tc := range []struct {
		golden   string
		in       machineconfig.Input
		hostname string
	}{
		{"proxmox-controlplane-01.yaml", proxmoxInput(t, prox), "lab-controlplane-01"},
		{"proxmox-worker-01.yaml", proxmoxInput(t, prox), "lab-worker-01"},
		{"proxmox-gpu-01.yaml", proxmoxInput(t, prox), "lab-gpu-01"},
		{"openstack-controlplane-01.yaml", openStackInput(t, ostk), "prod-a-controlplane-01"},
		{"openstack-worker-02.yaml", openStackInput(t, ostk), "prod-a-worker-02"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			t.Parallel()

			cfg := generate(t, tc.in, machine(t, tc.in.Cluster, tc.hostname))

			data, err := machineconfig.Encode(machineconfig.Redacted(cfg))
			if err != nil {
				t.Fatal(err)
			}

			golden(t, tc.golden, data)
		})
	}
}

func TestGenerateEveryMachine(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		in   machineconfig.Input
		want []string
	}{
		{
			name: "proxmox",
			in:   proxmoxInput(t, proxmoxCluster()),
			want: []string{
				"lab-controlplane-01", "lab-controlplane-02", "lab-controlplane-03",
				"lab-worker-01", "lab-worker-02", "lab-gpu-01",
			},
		},
		{
			name: "openstack",
			in:   openStackInput(t, openStackCluster()),
			want: []string{
				"prod-a-controlplane-01", "prod-a-controlplane-02", "prod-a-controlplane-03",
				"prod-a-worker-01", "prod-a-worker-02",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			machines := machineconfig.Machines(tc.in.Cluster)

			var got []string
			for _, m := range machines {
				got = append(got, m.Hostname)

				cfg := generate(t, tc.in, m)
				if h := hostnameOf(t, cfg.Documents()); h != m.Hostname {
					t.Errorf("%s: hostname %q", m.Hostname, h)
				}
			}

			if !slices.Equal(got, tc.want) {
				t.Errorf("machines = %v, want %v", got, tc.want)
			}
		})
	}
}

func hostnameOf(t *testing.T, docs []config.Document) string {
	t.Helper()

	for _, d := range docs {
		if h, ok := d.(*network.HostnameConfigV1Alpha1); ok {
			return h.ConfigHostname
		}
	}

	return ""
}

func TestGenerateContents(t *testing.T) {
	t.Parallel()

	c := proxmoxCluster()
	in := proxmoxInput(t, c)

	cp := generate(t, in, machine(t, c, "lab-controlplane-02"))
	gpu := generate(t, in, machine(t, c, "lab-gpu-01"))

	t.Run("install", func(t *testing.T) {
		t.Parallel()

		id, err := machineconfig.SchematicID(c.Extensions(c.Workers[1]))
		if err != nil {
			t.Fatal(err)
		}

		inst := gpu.RawV1Alpha1().MachineConfig.MachineInstall
		if inst.InstallDisk != "/dev/sda" {
			t.Errorf("install disk %q", inst.InstallDisk)
		}

		if want := "factory.talos.dev/installer/" + id + ":v1.13.2"; inst.InstallImage != want {
			t.Errorf("install image %q, want %q", inst.InstallImage, want)
		}
	})

	t.Run("control plane", func(t *testing.T) {
		t.Parallel()

		cl := cp.RawV1Alpha1().ClusterConfig
		if cl.AllowSchedulingOnControlPlanes == nil || *cl.AllowSchedulingOnControlPlanes {
			t.Error("control planes must be unschedulable")
		}

		if got := cl.EtcdConfig.EtcdAdvertisedSubnets; !slices.Equal(got, []string{"10.20.0.0/24"}) {
			t.Errorf("etcd advertised subnets %v", got)
		}

		if got := cl.ControlPlane.Endpoint.String(); got != "https://192.0.2.10:6443" {
			t.Errorf("endpoint %q", got)
		}

		if !slices.Contains(cl.APIServerConfig.CertSANs, "192.0.2.10") {
			t.Errorf("cert SANs %v lack the VIP", cl.APIServerConfig.CertSANs)
		}

		vip := findDoc[*network.Layer2VIPConfigV1Alpha1](cp.Documents())
		if vip == nil || vip.MetaName != "192.0.2.10" || vip.LinkName != machineconfig.LinkExternal {
			t.Fatalf("Layer2VIPConfig = %+v, want 192.0.2.10 on %s", vip, machineconfig.LinkExternal)
		}

		var aliases []string
		for _, d := range cp.Documents() {
			if a, ok := d.(*network.LinkAliasConfigV1Alpha1); ok {
				aliases = append(aliases, a.MetaName+"="+a.Selector.Match.String())
			}
		}

		m := machine(t, c, "lab-controlplane-02")
		want := []string{
			`cluster=mac(link.permanent_addr) == "` + m.ClusterMAC + `"`,
			`external=mac(link.permanent_addr) == "` + m.ExternalMAC + `"`,
		}

		if !slices.Equal(aliases, want) {
			t.Errorf("link aliases %v, want %v", aliases, want)
		}
	})

	t.Run("worker has no VIP and no control-plane settings", func(t *testing.T) {
		t.Parallel()

		if findDoc[*network.Layer2VIPConfigV1Alpha1](gpu.Documents()) != nil {
			t.Error("worker carries a Layer2VIPConfig")
		}

		if cl := gpu.RawV1Alpha1().ClusterConfig; cl.EtcdConfig != nil || cl.AllowSchedulingOnControlPlanes != nil {
			t.Error("worker carries control-plane cluster settings")
		}
	})

	t.Run("tailscale", func(t *testing.T) {
		t.Parallel()

		ts := findDoc[*extensions.ServiceConfigV1Alpha1](gpu.Documents())
		if ts == nil {
			t.Fatal("no tailscale ExtensionServiceConfig")
		}

		want := []string{
			"TS_AUTHKEY=" + seededAuthKey,
			"TS_HOSTNAME=lab-gpu-01",
			"TS_EXTRA_ARGS=--login-server=https://headscale.example.org",
		}

		if ts.ServiceName != "tailscale" || !slices.Equal(ts.ServiceEnvironment, want) {
			t.Errorf("tailscale service %q %v", ts.ServiceName, ts.ServiceEnvironment)
		}
	})

	t.Run("time servers", func(t *testing.T) {
		t.Parallel()

		ts := findDoc[*network.TimeSyncConfigV1Alpha1](cp.Documents())
		if ts == nil || !slices.Equal(ts.TimeNTP.Servers, []string{"time.cloudflare.com"}) {
			t.Errorf("TimeSyncConfig = %+v", ts)
		}
	})

	t.Run("no resolvers on a DHCP bridge", func(t *testing.T) {
		t.Parallel()

		if findDoc[*network.ResolverConfigV1Alpha1](cp.Documents()) != nil {
			t.Error("ResolverConfig on a DHCP-backed bridge")
		}
	})
}

func findDoc[T any](docs []config.Document) T {
	var zero T

	for _, d := range docs {
		if v, ok := d.(T); ok {
			return v
		}
	}

	return zero
}

func TestGenerateVariants(t *testing.T) {
	t.Parallel()

	t.Run("tailscale without auth key or extension", func(t *testing.T) {
		t.Parallel()

		noKey := proxmoxCluster()
		noKey.Tailscale.AuthKey = ""

		cfg := generate(t, proxmoxInput(t, noKey), machine(t, noKey, "lab-worker-01"))
		if findDoc[*extensions.ServiceConfigV1Alpha1](cfg.Documents()) != nil {
			t.Error("tailscale service without an auth key")
		}
	})

	t.Run("SDN gets resolvers", func(t *testing.T) {
		t.Parallel()

		c := proxmoxCluster()
		c.Proxmox.Network.ClusterBridge = ""
		c.Proxmox.Network.SDN = &spec.SDN{Name: "lab", Zone: "evpn"}

		cfg := generate(t, proxmoxInput(t, c), machine(t, c, "lab-worker-01"))

		r := findDoc[*network.ResolverConfigV1Alpha1](cfg.Documents())
		if r == nil || len(r.ResolverNameservers) != 1 || r.ResolverNameservers[0].Address.Addr.String() != "192.0.2.53" {
			t.Errorf("ResolverConfig = %+v", r)
		}
	})

	t.Run("kubespan", func(t *testing.T) {
		t.Parallel()

		c := proxmoxCluster()
		c.Talos.KubeSpan = true
		c.Network.Cluster.MTU = 9000

		cfg := generate(t, proxmoxInput(t, c), machine(t, c, "lab-worker-01"))

		ks := findDoc[*network.KubeSpanConfigV1Alpha1](cfg.Documents())
		if ks == nil {
			t.Fatal("no KubeSpanConfig")
		}

		if *ks.ConfigMTU != 8920 {
			t.Errorf("kubespan MTU %d, want 8920", *ks.ConfigMTU)
		}

		want := []string{"0.0.0.0/0", "!100.64.0.0/10", "!192.0.2.0/24", "!169.254.64.0/20"}
		if !slices.Equal(ks.ConfigFilters.ConfigEndpoints, want) {
			t.Errorf("kubespan filters %v, want %v", ks.ConfigFilters.ConfigEndpoints, want)
		}
	})

	t.Run("VIP on the cluster network", func(t *testing.T) {
		t.Parallel()

		c := proxmoxCluster()
		c.Network.External = nil
		c.Proxmox.Network.ExternalBridge = ""
		c.Network.Cluster.KubeAPIVIP = netip.MustParseAddr("10.20.0.5")

		cfg := generate(t, proxmoxInput(t, c), machine(t, c, "lab-controlplane-01"))

		vip := findDoc[*network.Layer2VIPConfigV1Alpha1](cfg.Documents())
		if vip == nil || vip.MetaName != "10.20.0.5" || vip.LinkName != machineconfig.LinkCluster {
			t.Errorf("Layer2VIPConfig = %+v", vip)
		}
	})

	t.Run("openstack VIP on the port MAC's link", func(t *testing.T) {
		t.Parallel()

		c := openStackCluster()
		in := openStackInput(t, c)
		in.VIP = netip.MustParseAddr("10.30.0.5")

		m := machine(t, c, "prod-a-controlplane-01")
		cfg := generate(t, in, m)
		if vip := findDoc[*network.Layer2VIPConfigV1Alpha1](cfg.Documents()); vip == nil || vip.LinkName != machineconfig.LinkCluster {
			t.Errorf("Layer2VIPConfig = %+v", vip)
		}

		m.ClusterMAC = ""
		_, err := machineconfig.Generate(in, m)
		if err == nil || !strings.Contains(err.Error(), `generating config for "prod-a-controlplane-01"`) || !strings.Contains(err.Error(), "MAC") {
			t.Fatalf("err = %v, want a missing-MAC error", err)
		}
	})

	t.Run("versions from input", func(t *testing.T) {
		t.Parallel()

		c := openStackCluster()
		in := openStackInput(t, c)
		in.KubernetesVersion = "v1.33.5"
		in.TalosVersion = "v1.13.0"
		in.ImageFactory = "https://factory.example.org/"

		cfg := generate(t, in, machine(t, c, "prod-a-worker-01"))

		mc := cfg.RawV1Alpha1().MachineConfig
		if got := mc.MachineKubelet.KubeletImage; !strings.HasSuffix(got, ":v1.33.5") {
			t.Errorf("kubelet image %q", got)
		}

		if got := mc.MachineInstall.InstallImage; !strings.HasPrefix(got, "factory.example.org/installer/") || !strings.HasSuffix(got, ":v1.13.0") {
			t.Errorf("install image %q", got)
		}

		if mc.MachineInstall.InstallDisk != "/dev/vda" {
			t.Errorf("install disk %q", mc.MachineInstall.InstallDisk)
		}
	})

	t.Run("old talos refused", func(t *testing.T) {
		t.Parallel()

		c := openStackCluster()
		in := openStackInput(t, c)
		in.TalosVersion = "v1.12.4"

		if _, err := machineconfig.Generate(in, machine(t, c, "prod-a-worker-01")); err == nil {
			t.Fatal("generated a config for Talos v1.12")
		}
	})
}

func TestNodeLabels(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name        string
		clusterTags map[string]string
		pool        spec.Pool
		want        map[string]string
	}{
		{
			name: "defaults",
			pool: spec.Pool{Name: "worker", Role: spec.RoleWorker},
			want: map[string]string{"ncsa/role": "worker", "ncsa/pool": "worker"},
		},
		{
			name:        "cluster tags added, spaces replaced",
			clusterTags: map[string]string{"team": "data eng"},
			pool:        spec.Pool{Name: "controlplane", Role: spec.RoleControlPlane},
			want:        map[string]string{"ncsa/role": "controlplane", "ncsa/pool": "controlplane", "team": "data_eng"},
		},
		{
			name:        "pool tag wins over cluster tag",
			clusterTags: map[string]string{"tier": "general", "team": "a"},
			pool:        spec.Pool{Name: "gpu", Role: spec.RoleWorker, Tags: map[string]string{"tier": "gpu"}},
			want:        map[string]string{"ncsa/role": "worker", "ncsa/pool": "gpu", "tier": "gpu", "team": "a"},
		},
		{
			name:        "tags override the default labels",
			clusterTags: map[string]string{"ncsa/pool": "from-cluster"},
			pool:        spec.Pool{Name: "gpu", Role: spec.RoleWorker, Tags: map[string]string{"ncsa/role": "accelerator"}},
			want:        map[string]string{"ncsa/role": "accelerator", "ncsa/pool": "from-cluster"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			c := &spec.Cluster{Name: "x", Tags: tc.clusterTags}

			if got := machineconfig.NodeLabels(c, tc.pool); !maps.Equal(got, tc.want) {
				t.Errorf("NodeLabels = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("in the generated config", func(t *testing.T) {
		t.Parallel()

		c := proxmoxCluster()
		cfg := generate(t, proxmoxInput(t, c), machine(t, c, "lab-gpu-01"))

		labels := cfg.RawV1Alpha1().MachineConfig.MachineNodeLabels
		for k, v := range map[string]string{"ncsa/role": "worker", "ncsa/pool": "gpu", "accelerator": "nvidia", "site": "lab_one"} {
			if labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, labels[k], v)
			}
		}
	})
}

// labelPatch builds a typed strategic merge patch setting node labels.
func labelPatch(t *testing.T, labels map[string]string) configpatcher.Patch {
	t.Helper()

	ctr, err := container.New(&v1alpha1.Config{MachineConfig: &v1alpha1.MachineConfig{MachineNodeLabels: labels}})
	if err != nil {
		t.Fatal(err)
	}

	return configpatcher.NewStrategicMergePatch(ctr)
}

func TestPatchOrder(t *testing.T) {
	t.Parallel()

	c := proxmoxCluster()
	c.Talos.ConfigPatches = []string{
		"machine:\n  nodeLabels:\n    layer: cluster\n    both: cluster\n",
	}
	c.Workers[0].ConfigPatches = []string{
		"machine:\n  nodeLabels:\n    both: pool\n",
	}

	in := proxmoxInput(t, c)
	in.ProviderPatches = func(m machineconfig.Machine) ([]configpatcher.Patch, error) {
		return []configpatcher.Patch{labelPatch(t, map[string]string{
			"layer":     "provider",
			"provider":  m.Hostname,
			"ncsa/pool": "provider-pool",
		})}, nil
	}

	cfg := generate(t, in, machine(t, c, "lab-worker-02"))
	labels := cfg.RawV1Alpha1().MachineConfig.MachineNodeLabels

	for k, want := range map[string]string{
		"layer":     "cluster",       // user patch after provider patch
		"both":      "pool",          // pool patch after cluster patch
		"provider":  "lab-worker-02", // provider patch applied
		"ncsa/pool": "provider-pool", // provider patch after the engine's labels
	} {
		if labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, labels[k], want)
		}
	}

	t.Run("provider error", func(t *testing.T) {
		t.Parallel()

		in := proxmoxInput(t, proxmoxCluster())
		in.ProviderPatches = func(machineconfig.Machine) ([]configpatcher.Patch, error) {
			return nil, errors.New("no port yet")
		}

		_, err := machineconfig.Generate(in, machine(t, in.Cluster, "lab-worker-01"))
		if err == nil || !strings.Contains(err.Error(), "no port yet") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestUserPatchErrors(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name     string
		edit     func(c *spec.Cluster)
		hostname string
		want     string
	}{
		{
			name: "cluster patch not a patch",
			edit: func(c *spec.Cluster) {
				c.Talos.ConfigPatches = append(c.Talos.ConfigPatches, "machine: [unclosed")
			},
			hostname: "lab-worker-01",
			want:     "talos.config_patches[1]",
		},
		{
			name: "pool patch not a patch",
			edit: func(c *spec.Cluster) {
				c.Workers[1].ConfigPatches = []string{"{not: yaml: at: all"}
			},
			hostname: "lab-gpu-01",
			want:     "workers.gpu.config_patches[0]",
		},
		{
			// The configs are multi-document, which JSON 6902 cannot patch.
			name: "control-plane JSON patch fails to apply",
			edit: func(c *spec.Cluster) {
				c.ControlPlane.ConfigPatches = []string{`[{"op": "remove", "path": "/machine/nope"}]`}
			},
			hostname: "lab-controlplane-01",
			want:     "controlplane.config_patches[0]",
		},
		{
			name: "a file name is not read",
			edit: func(c *spec.Cluster) {
				c.Talos.ConfigPatches = []string{"/etc/hostname"}
			},
			hostname: "lab-worker-01",
			want:     "talos.config_patches[0]",
		},
		{
			name: "patch breaks validation",
			edit: func(c *spec.Cluster) {
				c.Talos.ConfigPatches = []string{"apiVersion: v1alpha1\nkind: Layer2VIPConfig\nname: not-an-ip\nlink: cluster\n"}
			},
			hostname: "lab-worker-01",
			want:     "validating config",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			c := proxmoxCluster()
			tc.edit(c)

			_, err := machineconfig.Generate(proxmoxInput(t, c), machine(t, c, tc.hostname))
			if err == nil {
				t.Fatal("no error")
			}

			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.hostname) {
				t.Errorf("err = %v, want it to name %q and the host", err, tc.want)
			}
		})
	}
}
