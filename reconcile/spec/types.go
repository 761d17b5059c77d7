// Package spec reads a cluster directory (cluster.yaml, its includes and
// secrets.yaml) the way the Python taloscluster tool reads it, validates it
// and turns it into a typed Cluster. It also reads the few keys the
// Python tool lacks: proxmox.image_factory, rollout and remediation.
//
// Loading goes raw YAML -> merged tree -> Validate -> Cluster in one step, and
// every problem is reported at once, each naming the file, the line and the
// dotted key path. Warnings never block a load.
//
// Input is bounded: each file must be a regular file (a symbolic link is
// followed only inside the directory) of at most 4 MiB holding one YAML
// document, so a FIFO or a device is never opened. A key written twice in
// one mapping keeps its last value, as PyYAML does, with a warning naming
// both lines.
package spec

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Role is the role a machine plays in the cluster.
type Role string

// Machine roles.
const (
	RoleControlPlane Role = "controlplane"
	RoleWorker       Role = "worker"
)

// ProviderKind names the VM provider a cluster runs on.
type ProviderKind string

// VM providers.
const (
	ProviderOpenStack ProviderKind = "openstack"
	ProviderProxmox   ProviderKind = "proxmox"
)

// Cluster is a validated cluster directory.
type Cluster struct {
	// Dir is the cluster directory the files were read from.
	Dir string
	// Files lists every file that was merged, cluster.yaml first, as paths
	// relative to Dir.
	Files []string

	Name       string
	Tags       map[string]string
	Talos      Talos
	Kubernetes Kubernetes
	// ControlPlane is the control-plane pool; its Name is "controlplane".
	ControlPlane Pool
	// Workers are the worker pools in file order.
	Workers  []Pool
	Network  Network
	Security []SecurityRule
	// Tailscale is nil when no tailscale section is opted in.
	Tailscale *Tailscale
	Provider  ProviderKind
	OpenStack *OpenStack
	Proxmox   *Proxmox
	// Metal holds the bare-metal groups in file order; empty when absent.
	Metal []MetalGroup
	// Plugins holds the configured plugin sections (argocd, rancher, charts).
	Plugins Plugins
	// Rollout paces day-2 rollouts; its zero value means the defaults (see
	// Cluster.MaxUnavailable).
	Rollout Rollout
	// Remediation is nil when no remediation section is opted in, which
	// turns remediation off.
	Remediation *Remediation

	// sources records where values were written (see Source).
	sources map[string]Source
}

// Talos is the talos section.
type Talos struct {
	// Version is normalised with a leading "v".
	Version       string
	Extensions    []string
	ConfigPatches []string
	KubeSpan      bool
}

// Kubernetes is the kubernetes section.
type Kubernetes struct {
	// Version is normalised with a leading "v".
	Version string
}

// Pool is the control-plane pool or one worker pool.
type Pool struct {
	Name string
	Role Role
	// Index is the pool's position among the worker pools in file order
	// (0 for the first worker pool); it is -1 for the control plane.
	Index         int
	Count         int
	Flavor        string
	Disk          int // GB
	Cores         int
	Memory        int // GB
	Node          string
	Extensions    []string
	ConfigPatches []string
	Tags          map[string]string
}

// Hostname returns the hostname of the pool's n-th machine (n starts at 1).
// The number is at least two digits wide.
func (p Pool) Hostname(cluster string, n int) string {
	return fmt.Sprintf("%s-%s-%02d", cluster, p.Name, n)
}

// Pools returns the control-plane pool followed by the worker pools.
func (c *Cluster) Pools() []Pool {
	return append([]Pool{c.ControlPlane}, c.Workers...)
}

// Network is the network section.
type Network struct {
	DNS      []netip.Addr
	NTP      []string
	Cluster  L2
	External *L2
}

// L2 is one layer-2 network block (network.cluster, network.external or a
// metal network). Zero values mean "not set".
type L2 struct {
	CIDR       netip.Prefix
	Gateway    netip.Addr
	VLAN       int
	MTU        int // 1500 when not set
	KubeAPIVIP netip.Addr
	AnchorCIDR netip.Prefix
	// IngressPool is nil when not set.
	IngressPool *AddrRange
}

// AddrRange is an inclusive IPv4 range.
type AddrRange struct {
	Start, End netip.Addr
}

// Contains reports whether a lies inside the range.
func (r AddrRange) Contains(a netip.Addr) bool {
	return r.Start.Compare(a) <= 0 && a.Compare(r.End) <= 0
}

func (r AddrRange) String() string { return r.Start.String() + "-" + r.End.String() }

// KubeAPIVIP returns the configured API VIP (Proxmox) and whether it sits on
// the external network.
func (n Network) KubeAPIVIP() (vip netip.Addr, external bool) {
	if n.External != nil && n.External.KubeAPIVIP.IsValid() {
		return n.External.KubeAPIVIP, true
	}
	return n.Cluster.KubeAPIVIP, false
}

// SecurityRule is one entry of the security section.
type SecurityRule struct {
	Name string
	Port int
	// Hosts are the allowed sources in file order.
	Hosts []SecurityHost
}

// SecurityHost is one labelled source network of a security rule.
type SecurityHost struct {
	Label string
	CIDR  netip.Prefix
}

// Tailscale is the tailscale section.
type Tailscale struct {
	LoginServer string
	// AuthKey is a secret; it is empty when not set.
	AuthKey string
	// badAuthKey records an auth_key that is empty or not a string; it is
	// refused when a command needs it (Credentials), not at load.
	badAuthKey bool
}

// OpenStack is the openstack section.
type OpenStack struct {
	URL              string
	AvailabilityZone string
	ExternalNet      string
	Region           string
	Metadata         bool
	// TLSVerify is how the Keystone certificate (and those of the
	// services in its catalog) are checked: a bool or a CA bundle path. It
	// and ImageFactory are optional keys this implementation adds beside
	// the Python tool's schema, as for proxmox.
	TLSVerify TLSVerify
	// ImageFactory is the Talos Image Factory base URL the boot image is
	// downloaded from.
	ImageFactory string
	// CredentialID and CredentialSecret are secrets, checked only when a
	// command needs them (see Cluster.Credentials).
	CredentialID     string
	CredentialSecret string
	// notText names the credentials that are set but are not strings.
	notText map[string]bool
}

// Proxmox is the proxmox section.
type Proxmox struct {
	URL               string
	Storage           string
	ISOStorage        string
	CIDataStorage     string
	PlacementStrategy string
	Nodes             []string
	TLSVerify         TLSVerify
	Network           ProxmoxNetwork
	// TokenID and TokenSecret are secrets, checked only when a command
	// needs them.
	TokenID     string
	TokenSecret string
	// notText names the credentials that are set but are not strings.
	notText map[string]bool
	// ImageFactory is the Talos Image Factory base URL. It is an optional
	// key this implementation adds beside the Python tool's schema.
	ImageFactory string
}

// APIURL returns the Proxmox API base URL, ending in /api2/json.
func (p *Proxmox) APIURL() string {
	return apiURL(p.URL)
}

// TLSVerify is a Proxmox or BMC tls_verify value: a bool or a CA bundle path.
type TLSVerify struct {
	Verify bool
	// CAFile is the CA bundle path, relative to the cluster directory as
	// written; empty when tls_verify is a bool.
	CAFile string
}

// ProxmoxNetwork is proxmox.network.
type ProxmoxNetwork struct {
	ClusterBridge string
	ClusterVNet   string
	// SDN is nil unless the cluster network is a managed EVPN SDN.
	SDN *SDN
	// ExternalBridge is empty when there is no external NIC.
	ExternalBridge string
}

// SDN is proxmox.network.cluster.sdn with its defaults applied.
type SDN struct {
	Name            string
	Zone            string
	Controller      string
	ASN             int64
	VRFTag          int64
	Tag             int64
	MTU             int
	Nodes           []string
	ExitNodes       []string
	PrimaryExitNode string
}

// MetalGroup is one group of bare-metal machines.
type MetalGroup struct {
	Name    string
	Servers []MetalServer
}

// MetalServer is one bare-metal machine with its group's settings merged in.
type MetalServer struct {
	Name        string
	Group       string
	Role        Role
	Disk        string
	Redfish     bool
	AutoJoin    bool
	BootTimeout int
	Extensions  []string
	// Network is the machine's L2, the cluster L2 when not set.
	Network    L2
	Interfaces []MetalInterface
	BMC        BMC
}

// MetalInterface is one interface of a metal machine.
type MetalInterface struct {
	Name     string
	Roles    []string
	IP       netip.Prefix
	DNS      []netip.Addr
	LinkName string
	VLAN     int
}

// BMC is a metal machine's baseboard management controller.
type BMC struct {
	IP        netip.Addr
	Username  string
	Password  string
	Scheme    string
	TLSVerify TLSVerify
}

// DefaultMaxUnavailable is how many workers a rollout takes down at a time
// when rollout.max_unavailable is not set.
const DefaultMaxUnavailable = 1

// Rollout is the rollout section: how a day-2 rollout (a Talos upgrade, a
// restart, a config apply that needs a restart) proceeds. It is an
// addition beside the Python tool's schema.
type Rollout struct {
	// MaxUnavailable is how many worker machines a rollout takes down at a
	// time. Load sets it to DefaultMaxUnavailable when the key is absent;
	// read it through Cluster.MaxUnavailable, which also covers a Cluster
	// built without Load. Control planes always go one at a time.
	MaxUnavailable int
}

// MaxUnavailable returns how many worker machines a rollout may take down
// at a time: rollout.max_unavailable, and never less than 1.
func (c *Cluster) MaxUnavailable() int {
	return max(c.Rollout.MaxUnavailable, DefaultMaxUnavailable)
}

// Remediation defaults, used when the remediation section is present but
// leaves a key out.
const (
	DefaultRemediationAfter = 10 * time.Minute
	// MinRemediationAfter is the shortest remediation.after accepted:
	// Kubernetes alone takes 40 to 50 seconds (its node-monitor grace
	// period) to mark a silent node NotReady.
	MinRemediationAfter = time.Minute
)

// DefaultMaxUnhealthy is remediation.max_unhealthy when the key is absent:
// 40% of a pool.
var DefaultMaxUnhealthy = MaxUnhealthy{Percent: 40}

// Remediation is the remediation section: the opt-in replacement of worker
// machines that stay unhealthy. Control planes are never remediated. It is
// an addition beside the Python tool's schema.
type Remediation struct {
	// After is how long a worker must stay unhealthy before it is
	// replaced; DefaultRemediationAfter when not set, never below
	// MinRemediationAfter.
	After time.Duration
	// MaxUnhealthy bounds how many machines of one pool are remediated at
	// once (see Limit); DefaultMaxUnhealthy when not set.
	MaxUnhealthy MaxUnhealthy
	// Pools names the worker pools remediation covers, in file order; nil
	// means every worker pool.
	Pools []string
}

// MaxUnhealthy is remediation.max_unhealthy, kept in the form it was
// written: a percentage of a pool or a count of machines. Exactly one of
// its fields is set.
type MaxUnhealthy struct {
	// Percent is 1 to 100 for a percentage such as "40%", else 0.
	Percent int
	// Count is a number of machines (1 or more), else 0.
	Count int
}

// String returns the value as written in cluster.yaml: "40%" or "2".
func (m MaxUnhealthy) String() string {
	if m.Percent > 0 {
		return strconv.Itoa(m.Percent) + "%"
	}
	return strconv.Itoa(m.Count)
}

// Limit returns how many machines of a pool of poolSize machines may be
// remediated at once. A percentage is rounded down, so a pool too small
// for it gets 0: it is never remediated (validation warns about it). A
// count is capped at the pool's size. A nil Remediation gives 0.
func (r *Remediation) Limit(poolSize int) int {
	if r == nil || poolSize <= 0 {
		return 0
	}
	if r.MaxUnhealthy.Percent > 0 {
		return poolSize * r.MaxUnhealthy.Percent / 100
	}
	return min(r.MaxUnhealthy.Count, poolSize)
}

// Covers reports whether remediation applies to the pool named pool: a
// worker pool listed in Pools, or any worker pool when Pools is empty. The
// control plane is never covered, and a nil Remediation covers nothing.
func (r *Remediation) Covers(pool string) bool {
	if r == nil || pool == string(RoleControlPlane) {
		return false
	}
	return len(r.Pools) == 0 || slices.Contains(r.Pools, pool)
}

// Plugins holds the plugin sections. A nil field means the section is absent.
type Plugins struct {
	ArgoCD  map[string]any
	Rancher map[string]any
	Charts  map[string]any
	// ChartsOrder names the charts entries in cluster.yaml order, which
	// Charts, a map, does not keep; the charts plugin installs the entries
	// it does not know in this order.
	ChartsOrder []string
}

// apiURL appends /api2/json to a Proxmox origin unless it is there already.
func apiURL(origin string) string {
	u := strings.TrimRight(origin, "/")
	if strings.HasSuffix(u, "/api2/json") {
		return u
	}
	return u + "/api2/json"
}
