package machineconfig

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime/extensions"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Node labels every machine carries unless a tag overrides them.
const (
	LabelRole = "ncsa/role"
	LabelPool = "ncsa/pool"
)

// Install disks by provider.
const (
	InstallDiskProxmox   = "/dev/sda"
	InstallDiskOpenStack = "/dev/vda"
)

// tailscaleCGNAT is the tailscale address range, kept out of KubeSpan
// endpoints.
const tailscaleCGNAT = "100.64.0.0/10"

// kubeSpanOverhead is the WireGuard encapsulation overhead KubeSpan's MTU
// leaves room for.
const kubeSpanOverhead = 80

// PatchFunc returns patches for one machine. Providers use it to add what
// only they know (static addresses, project labels, link settings).
type PatchFunc func(m Machine) ([]configpatcher.Patch, error)

// Input is everything Generate needs besides the machine itself.
type Input struct {
	// Cluster is the validated cluster.
	Cluster *spec.Cluster
	// Secrets is the cluster identity.
	Secrets *secrets.Bundle
	// TalosVersion selects the config contract and the installer tag: the
	// cluster's talos.version, or a node's running version. Empty means
	// Cluster.Talos.Version.
	TalosVersion string
	// KubernetesVersion is the version to bake into the config (the running
	// version for existing nodes). Empty means Cluster.Kubernetes.Version.
	KubernetesVersion string
	// Endpoint is the cluster API endpoint URL, e.g. https://10.0.0.10:6443.
	Endpoint string
	// VIP is the shared Layer-2 API address, when there is one: the
	// kubeapi_vip on Proxmox, the reserved port's fixed address on OpenStack
	// when known. Control planes then carry a Layer2VIPConfig on the NIC the
	// address belongs to, and it is added to the certificate SANs.
	VIP netip.Addr
	// PublicAddr is an address in front of the VIP that people reach the
	// API at (OpenStack's floating IP), when there is one: it is added to
	// the certificate SANs.
	PublicAddr netip.Addr
	// ImageFactory is the installer registry host. Empty means the host of
	// proxmox.image_factory when set, else DefaultImageFactory.
	ImageFactory string
	// ProviderPatches, when set, returns the provider's patches for a
	// machine. They are applied after the engine's own patches and before
	// the user's.
	ProviderPatches PatchFunc
}

// Generate builds the machine config of m. The generated base config (from
// the secrets bundle, endpoint, versions, install disk and installer image)
// is patched in this order: machine (node labels, time servers, link
// aliases, resolvers), hostname, cluster (control planes only: scheduling,
// etcd subnets, VIP), firewall, KubeSpan, tailscale, the ingress_pool's
// return-path pod, provider patches, then
// user patches (talos.config_patches, then the pool's config_patches), so a
// later patch overrides an earlier one. The result must pass the machinery's
// own validation for the cloud runtime mode; call Validate on it for the
// warnings. User patches are inline texts, never file names; JSON 6902
// patches load but the machinery cannot apply them to these multi-document
// configs, so Generate reports them as failing.
func Generate(in Input, m Machine) (coreconfig.Provider, error) {
	cfg, err := generateConfig(in, m)
	if err != nil {
		return nil, fmt.Errorf("generating config for %q: %w", m.Hostname, err)
	}

	return cfg, nil
}

// namedPatch is a patch with the name errors report for it.
type namedPatch struct {
	name  string
	patch configpatcher.Patch
}

func generateConfig(in Input, m Machine) (coreconfig.Provider, error) {
	c := in.Cluster
	if c == nil {
		return nil, errors.New("no cluster given")
	}

	if in.Secrets == nil {
		return nil, errors.New("no talos secrets given")
	}

	if m.Hostname == "" {
		return nil, errors.New("machine has no hostname")
	}

	base, err := baseConfig(in, m)
	if err != nil {
		return nil, err
	}

	patches, err := enginePatches(in, m)
	if err != nil {
		return nil, err
	}

	if in.ProviderPatches != nil {
		pp, err := in.ProviderPatches(m)
		if err != nil {
			return nil, fmt.Errorf("building provider patches: %w", err)
		}

		for i, p := range pp {
			patches = append(patches, namedPatch{name: fmt.Sprintf("provider patch %d", i), patch: p})
		}
	}

	user, err := userPatches(c, m.Pool)
	if err != nil {
		return nil, err
	}

	patches = append(patches, user...)

	out := configpatcher.WithConfig(base)

	for _, p := range patches {
		out, err = configpatcher.Apply(out, []configpatcher.Patch{p.patch})
		if err != nil {
			return nil, fmt.Errorf("applying %s: %w", p.name, err)
		}
	}

	cfg, err := out.Config()
	if err != nil {
		return nil, fmt.Errorf("loading patched config: %w", err)
	}

	if _, err := Validate(cfg); err != nil {
		return nil, err
	}

	return cfg, nil
}

// cloudMode is the Talos runtime mode of cloud platforms (OpenStack,
// nocloud), which the machinery's validation needs. Like Talos's own cloud
// mode it neither runs in a container nor requires install instructions.
type cloudMode struct{}

func (cloudMode) String() string        { return "cloud" }
func (cloudMode) RequiresInstall() bool { return false }
func (cloudMode) InContainer() bool     { return false }

// Validate checks cfg with the machinery's own validation in the cloud
// runtime mode and returns its warnings.
func Validate(cfg coreconfig.Provider) ([]string, error) {
	warnings, err := cfg.Validate(cloudMode{})
	if err != nil {
		return warnings, fmt.Errorf("validating config: %w", err)
	}

	return warnings, nil
}

// baseConfig runs the machinery's generator.
func baseConfig(in Input, m Machine) (coreconfig.Provider, error) {
	c := in.Cluster

	talosVersion := in.TalosVersion
	if talosVersion == "" {
		talosVersion = c.Talos.Version
	}

	contract, err := contractFor(talosVersion)
	if err != nil {
		return nil, err
	}

	kubeVersion := in.KubernetesVersion
	if kubeVersion == "" {
		kubeVersion = c.Kubernetes.Version
	}

	kubeVersion = strings.TrimPrefix(kubeVersion, "v")
	if kubeVersion == "" {
		return nil, errors.New("no kubernetes version given")
	}

	endpoint, err := url.Parse(in.Endpoint)
	if err != nil || endpoint.Scheme == "" || endpoint.Hostname() == "" {
		return nil, fmt.Errorf("parsing endpoint %q: want a URL such as https://10.0.0.10:6443", in.Endpoint)
	}

	disk, err := installDisk(c)
	if err != nil {
		return nil, err
	}

	factory := in.ImageFactory
	if factory == "" && c.Proxmox != nil {
		factory = c.Proxmox.ImageFactory
	}

	image, err := InstallerImage(factory, c.Extensions(m.Pool), talosVersion)
	if err != nil {
		return nil, err
	}

	sans := []string{endpoint.Hostname()}
	for _, a := range []netip.Addr{in.VIP, in.PublicAddr} {
		if a.IsValid() && !slices.Contains(sans, a.String()) {
			sans = append(sans, a.String())
		}
	}

	genIn, err := generate.NewInput(c.Name, in.Endpoint, kubeVersion,
		generate.WithVersionContract(contract),
		generate.WithSecretsBundle(in.Secrets),
		generate.WithInstallDisk(disk),
		generate.WithInstallImage(image),
		generate.WithAdditionalSubjectAltNames(sans),
	)
	if err != nil {
		return nil, fmt.Errorf("preparing config generation: %w", err)
	}

	machineType := machine.TypeWorker
	if m.Role() == spec.RoleControlPlane {
		machineType = machine.TypeControlPlane
	}

	cfg, err := genIn.Config(machineType)
	if err != nil {
		return nil, fmt.Errorf("generating %s config: %w", machineType, err)
	}

	return cfg, nil
}

func installDisk(c *spec.Cluster) (string, error) {
	switch c.Provider {
	case spec.ProviderProxmox:
		return InstallDiskProxmox, nil
	case spec.ProviderOpenStack:
		return InstallDiskOpenStack, nil
	default:
		return "", fmt.Errorf("choosing install disk: unknown provider %q", c.Provider)
	}
}

// enginePatches returns the engine's own patches in their fixed order.
func enginePatches(in Input, m Machine) ([]namedPatch, error) {
	c := in.Cluster

	var patches []namedPatch

	add := func(name string, docs ...config.Document) error {
		p, err := typedPatch(docs...)
		if err != nil {
			return fmt.Errorf("building %s patch: %w", name, err)
		}

		patches = append(patches, namedPatch{name: name + " patch", patch: p})

		return nil
	}

	docs, err := machineDocs(c, m)
	if err != nil {
		return nil, err
	}

	if err := add("machine", docs...); err != nil {
		return nil, err
	}

	if err := add("hostname", hostnameDoc(m.Hostname)); err != nil {
		return nil, err
	}

	if m.Role() == spec.RoleControlPlane {
		docs, err = clusterDocs(in, m)
		if err != nil {
			return nil, err
		}

		if err := add("cluster", docs...); err != nil {
			return nil, err
		}
	}

	fw, err := firewall(c, c.Network.Cluster.CIDR)
	if err != nil {
		return nil, err
	}

	if err := add("firewall", fw...); err != nil {
		return nil, err
	}

	if c.Talos.KubeSpan {
		if err := add("kubespan", kubeSpanDoc(c)); err != nil {
			return nil, err
		}
	}

	if doc := tailscaleDoc(c, m); doc != nil {
		if err := add("tailscale", doc); err != nil {
			return nil, err
		}
	}

	if externalOn(c, m) && c.Network.External.IngressPool != nil {
		kubeVersion := in.KubernetesVersion
		if kubeVersion == "" {
			kubeVersion = c.Kubernetes.Version
		}

		if err := add("return-path", returnPathDoc(c, m, kubeVersion)); err != nil {
			return nil, err
		}
	}

	return patches, nil
}

// typedPatch wraps typed documents as a strategic merge patch.
func typedPatch(docs ...config.Document) (configpatcher.Patch, error) {
	ctr, err := container.New(docs...)
	if err != nil {
		return nil, err
	}

	return configpatcher.NewStrategicMergePatch(ctr), nil
}

// NodeLabels returns the Kubernetes node labels of a machine in pool p:
// ncsa/role and ncsa/pool, then the cluster tags, then the pool tags, each
// later source overriding earlier ones. Spaces in values become "_".
func NodeLabels(c *spec.Cluster, p spec.Pool) map[string]string {
	labels := map[string]string{
		LabelRole: string(p.Role),
		LabelPool: p.Name,
	}

	for _, tags := range []map[string]string{c.Tags, p.Tags} {
		for k, v := range tags {
			labels[k] = strings.ReplaceAll(v, " ", "_")
		}
	}

	return labels
}

// machineDocs is the machine patch: node labels, time servers, link aliases
// for the NICs with a known MAC, the links (MTU above 1500; with an
// external NIC the external network's addressing and policy routing, see
// externalDocs), and resolvers on statically addressed networks.
func machineDocs(c *spec.Cluster, m Machine) ([]config.Document, error) {
	v1 := &v1alpha1.Config{
		MachineConfig: &v1alpha1.MachineConfig{
			MachineNodeLabels: NodeLabels(c, m.Pool),
		},
	}

	docs := []config.Document{v1}

	if len(c.Network.NTP) > 0 {
		ts := network.NewTimeSyncConfigV1Alpha1()
		ts.TimeNTP = &network.NTPConfig{Servers: slices.Clone(c.Network.NTP)}
		docs = append(docs, ts)
	}

	for _, nic := range []struct{ alias, mac string }{
		{LinkCluster, m.ClusterMAC},
		{LinkExternal, m.ExternalMAC},
	} {
		if nic.mac == "" {
			continue
		}

		doc, err := linkAliasDoc(nic.alias, nic.mac)
		if err != nil {
			return nil, err
		}

		docs = append(docs, doc)
	}

	if externalOn(c, m) {
		ext, err := externalDocs(c, m)
		if err != nil {
			return nil, err
		}

		docs = append(docs, ext...)
	} else if doc := mtuDoc(LinkCluster, m.ClusterMAC, &c.Network.Cluster); doc != nil {
		docs = append(docs, doc)
	}

	if staticNetwork(c) && len(c.Network.DNS) > 0 {
		r := network.NewResolverConfigV1Alpha1()
		for _, ns := range c.Network.DNS {
			r.ResolverNameservers = append(r.ResolverNameservers, network.NameserverConfig{Address: network.Addr{Addr: ns}})
		}

		docs = append(docs, r)
	}

	return docs, nil
}

// staticNetwork reports whether node addresses are static, so that DNS
// servers must be configured on the node: only a managed Proxmox SDN is.
// OpenStack subnets and Proxmox bridges and VNets hand DNS out over DHCP.
func staticNetwork(c *spec.Cluster) bool {
	return c.Provider == spec.ProviderProxmox && c.Proxmox != nil && c.Proxmox.Network.SDN != nil
}

// routeClampMTU is the MTU of the default route on an L2 whose link MTU is
// larger: traffic that leaves the L2 through its gateway stays at 1500.
const routeClampMTU = 1500

// mtuDoc sets the MTU of a link whose L2 states one above 1500 and, when
// the L2 has a gateway, clamps its default route to 1500 (the spec's "link
// MTU set, default route clamped to 1500"). It returns nil for the default
// MTU or a NIC without a known MAC.
func mtuDoc(alias, mac string, l2 *spec.L2) *network.LinkConfigV1Alpha1 {
	if l2 == nil || mac == "" || l2.MTU <= routeClampMTU {
		return nil
	}

	doc := network.NewLinkConfigV1Alpha1(alias)
	doc.LinkMTU = uint32(l2.MTU)

	if l2.Gateway.IsValid() {
		// No destination is the default route.
		doc.LinkRoutes = []network.RouteConfig{{
			RouteGateway: network.Addr{Addr: l2.Gateway},
			RouteMTU:     routeClampMTU,
		}}
	}

	return doc
}

func linkAliasDoc(name, mac string) (*network.LinkAliasConfigV1Alpha1, error) {
	sel, err := macSelector(mac)
	if err != nil {
		return nil, fmt.Errorf("selecting the %s link: %w", name, err)
	}

	doc := network.NewLinkAliasConfigV1Alpha1(name)
	doc.Selector.Match = sel

	return doc, nil
}

func hostnameDoc(hostname string) *network.HostnameConfigV1Alpha1 {
	doc := network.NewHostnameConfigV1Alpha1()
	doc.ConfigAuto = new(nethelpers.AutoHostnameKindOff)
	doc.ConfigHostname = hostname

	return doc
}

// clusterDocs is the control-plane patch: no workloads on control planes,
// etcd on the cluster L2, and the Layer-2 VIP when there is one.
func clusterDocs(in Input, m Machine) ([]config.Document, error) {
	c := in.Cluster

	v1 := &v1alpha1.Config{
		ClusterConfig: &v1alpha1.ClusterConfig{
			AllowSchedulingOnControlPlanes: new(false),
			EtcdConfig: &v1alpha1.EtcdConfig{
				EtcdAdvertisedSubnets: []string{c.Network.Cluster.CIDR.Masked().String()},
			},
		},
	}

	docs := []config.Document{v1}

	if in.VIP.IsValid() {
		link, mac := LinkCluster, m.ClusterMAC
		if c.Network.External != nil && c.Network.External.CIDR.Contains(in.VIP) {
			link, mac = LinkExternal, m.ExternalMAC
		}

		if mac == "" {
			return nil, fmt.Errorf("placing the API VIP %s: the machine has no %s NIC with a known MAC", in.VIP, link)
		}

		vip := network.NewLayer2VIPConfigV1Alpha1(in.VIP.String())
		vip.LinkName = link
		docs = append(docs, vip)
	}

	return docs, nil
}

// kubeSpanDoc enables KubeSpan with the MTU and endpoint filters of the
// spec: the L2 MTU (1500 when nodes span several L2s) less the WireGuard
// overhead, and every IPv4 endpoint except tailscale's range and the
// external networks.
func kubeSpanDoc(c *spec.Cluster) *network.KubeSpanConfigV1Alpha1 {
	mtu := c.Network.Cluster.MTU
	if mtu == 0 || len(nodeL2s(c)) > 1 {
		mtu = 1500
	}

	filters := []string{anyIPv4.String()}
	if c.Tailscale != nil {
		filters = append(filters, "!"+tailscaleCGNAT)
	}

	if ext := c.Network.External; ext != nil {
		if ext.CIDR.IsValid() {
			filters = append(filters, "!"+ext.CIDR.Masked().String())
		}

		if ext.AnchorCIDR.IsValid() {
			filters = append(filters, "!"+ext.AnchorCIDR.Masked().String())
		}
	}

	doc := network.NewKubeSpanV1Alpha1()
	doc.ConfigEnabled = new(true)
	doc.ConfigMTU = new(uint32(mtu - kubeSpanOverhead))
	doc.ConfigFilters = &network.KubeSpanFiltersConfig{ConfigEndpoints: filters}

	return doc
}

// tailscaleDoc configures the tailscale extension service, or returns nil
// when tailscale is off, has no auth key, or the machine's installer lacks
// the extension.
func tailscaleDoc(c *spec.Cluster, m Machine) *extensions.ServiceConfigV1Alpha1 {
	if c.Tailscale == nil || c.Tailscale.AuthKey == "" || !slices.Contains(c.Extensions(m.Pool), spec.ExtensionTailscale) {
		return nil
	}

	doc := extensions.NewServicesConfigV1Alpha1()
	doc.ServiceName = "tailscale"
	doc.ServiceEnvironment = []string{
		envAuthKey + "=" + c.Tailscale.AuthKey,
		"TS_HOSTNAME=" + m.Hostname,
	}

	if c.Tailscale.LoginServer != "" {
		doc.ServiceEnvironment = append(doc.ServiceEnvironment, "TS_EXTRA_ARGS=--login-server="+c.Tailscale.LoginServer)
	}

	return doc
}

// envAuthKey is the tailscale extension's auth key variable.
const envAuthKey = "TS_AUTHKEY"

// userPatches loads talos.config_patches and then the pool's
// config_patches. Each entry is an inline strategic merge patch or JSON
// 6902 patch; it is never read as a file name.
func userPatches(c *spec.Cluster, p spec.Pool) ([]namedPatch, error) {
	poolKey := "controlplane"
	if p.Role != spec.RoleControlPlane {
		poolKey = "workers." + p.Name
	}

	sources := []struct {
		key     string
		patches []string
	}{
		{"talos.config_patches", c.Talos.ConfigPatches},
		{poolKey + ".config_patches", p.ConfigPatches},
	}

	var out []namedPatch

	for _, src := range sources {
		for i, text := range src.patches {
			name := fmt.Sprintf("%s[%d]", src.key, i)

			patch, err := configpatcher.LoadPatch([]byte(text))
			if err != nil {
				return nil, fmt.Errorf("loading %s: %w", name, err)
			}

			out = append(out, namedPatch{name: name, patch: patch})
		}
	}

	return out, nil
}
