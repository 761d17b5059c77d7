package talos

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// APIPort is the port every simulated node serves the Talos API on.
const APIPort = 50000

// Default delays; they keep tests fast.
const (
	DefaultBootDelay    = 10 * time.Millisecond
	DefaultInstallDelay = 10 * time.Millisecond
	DefaultRebootDelay  = 10 * time.Millisecond
	DefaultEtcdRetry    = 200 * time.Millisecond

	DefaultEtcdStartDelay      = 10 * time.Millisecond
	DefaultLearnerPromoteDelay = 20 * time.Millisecond
	DefaultEtcdJoinRetry       = 20 * time.Millisecond
	DefaultCordonTimeout       = time.Second
	DefaultDrainTimeout        = 2 * time.Second
	DefaultEvictionRetry       = 50 * time.Millisecond
	DefaultApplyDelay          = 10 * time.Millisecond
	DefaultKubeletRestartDelay = 10 * time.Millisecond
)

// The real durations the defaults above scale down, for a lab that wants
// them (taloslab up's demo does not; scenario tests may).
const (
	// TalosEtcdJoinRetry is how often a joining control plane retries
	// adding its etcd member (services/etcd.go, buildInitialCluster: every
	// 3 s plus up to 1 s of jitter).
	TalosEtcdJoinRetry = 3 * time.Second
	// TalosLearnerPromoteRetry is how often Talos tries to promote its
	// learner (services/etcd.go, promoteMember: every 15 s for 10 min).
	TalosLearnerPromoteRetry = 15 * time.Second
	// TalosCordonTimeout is how long a reset waits for its Node to be
	// cordoned (v1alpha1_sequencer_tasks.go, waitForNodeCordoned).
	TalosCordonTimeout = time.Minute
	// TalosDrainTimeout bounds a drain (pkg/kubernetes, DrainTimeout).
	TalosDrainTimeout = 5 * time.Minute
	// TalosEvictionRetry is how long the drain waits before it asks again
	// for an eviction a disruption budget refused (pkg/kubernetes, evict).
	TalosEvictionRetry = 5 * time.Second
	// TalosEtcdLeaveTimeout bounds how long leaving etcd retries
	// (internal/pkg/etcd, LeaveCluster: every 10 s for 5 min).
	TalosEtcdLeaveTimeout = 5 * time.Minute
)

// DefaultBootImage is the boot media a node boots from when Boot is not
// given one: the version a node in maintenance mode reports.
const DefaultBootImage = "ghcr.io/siderolabs/installer:v1.13.9"

// ErrClosed is returned by World methods called after Close.
var ErrClosed = errors.New("talos world is closed")

// ErrUnknownNode is returned for an address no node was ever booted on.
var ErrUnknownNode = errors.New("no such node")

// Options configure a World. Zero durations take the defaults.
type Options struct {
	// BootDelay is the time from power-on until the node's API answers.
	BootDelay time.Duration
	// InstallDelay is added to the boot of an installation: the first boot
	// from user data, the reboot after a maintenance-mode apply, an upgrade.
	InstallDelay time.Duration
	// RebootDelay is the time a rebooting node is down.
	RebootDelay time.Duration
	// ShutdownDelay is the time between the answer to a call that takes the
	// node down (reboot, reset, upgrade, apply with a reboot) and its API
	// going away; the API keeps answering meanwhile, as Talos does while it
	// drains. Zero means at once.
	ShutdownDelay time.Duration
	// ServicesDelay is the time after the API answers until the node's
	// services are ready: before it Bootstrap answers FailedPrecondition,
	// the node has not joined etcd and its kubelet has not registered.
	ServicesDelay time.Duration
	// EtcdRetry bounds how long leaving etcd (EtcdLeaveCluster, a graceful
	// reset) retries while the cluster is too unhealthy to lose a member
	// (Talos: TalosEtcdLeaveTimeout).
	EtcdRetry time.Duration
	// EtcdStartDelay is the time from a joining control plane's
	// MemberAddAsLearner until its etcd has started and published its name;
	// meanwhile the member is a learner without a name.
	EtcdStartDelay time.Duration
	// LearnerPromoteDelay is the interval of Talos's attempts to promote
	// the learner its node added (TalosLearnerPromoteRetry): the first
	// attempt after it has caught up, one interval after its etcd started,
	// succeeds when etcd has a leader. Talos gives up after 40 attempts,
	// and stops when the node's etcd stops: a learner whose node rebooted
	// before its promotion stays a learner.
	LearnerPromoteDelay time.Duration
	// EtcdJoinRetry is how long a control plane whose etcd join was
	// refused (no leader, a learner already in the cluster, a voting
	// member not connected, the namesake member not removable) waits
	// before it tries again (Talos: TalosEtcdJoinRetry).
	EtcdJoinRetry time.Duration
	// CordonTimeout bounds how long a graceful reset waits for its Node to
	// be cordoned before it goes on without draining (Talos:
	// TalosCordonTimeout).
	CordonTimeout time.Duration
	// DrainTimeout bounds the drain of a graceful reset (Talos:
	// TalosDrainTimeout).
	DrainTimeout time.Duration
	// EvictionRetry is how long the drain waits before asking again for an
	// eviction refused with 429 (Talos: TalosEvictionRetry); it also
	// scales the drain's wait for an evicted pod to go (Talos polls every
	// 3 s for up to a minute: 0.6 and 12 times EvictionRetry).
	EvictionRetry time.Duration
	// ApplyDelay is how long an ApplyConfiguration call takes on the
	// node (machined holds its apply lock while it validates and writes
	// the config); another apply to the node meanwhile is refused with
	// FailedPrecondition, as machined refuses it.
	ApplyDelay time.Duration
	// KubeletRestartDelay is how long the kubelet is down when a live
	// config change restarts it (a change of .machine.kubelet, such as its
	// image): ServiceList shows it not running, and its Node is posted
	// again (with the new kubelet version) only once it runs again.
	KubeletRestartDelay time.Duration
	// BootImage is the installer image reference whose version a node in
	// maintenance mode reports. Empty means DefaultBootImage.
	BootImage string
	// Hooks, when set, is told about bootstraps and Kubernetes node
	// registrations. Calls are made in order from one goroutine, never
	// while the world is locked, so hooks may call back into the World.
	Hooks Hooks
	// OnListenError, when set, is called when a node's API cannot listen on
	// addr:50000 and the node gives up booting, after retrying for a second
	// in case the previous boot's socket is still closing: the node is then
	// off (NodeState.Mode ModeOff). err wraps the listener's error. It is
	// called on a goroutine of its own, never with the world locked.
	OnListenError func(addr netip.Addr, err error)
	// OnGuestPowerOff, when set, is called when a node powers its machine
	// off by itself: a reset without a reboot, a shutdown. The machine's
	// hypervisor then sees its guest stop (Proxmox lists the VM stopped).
	// It is called on a goroutine of its own, never with the world locked,
	// and not for a power-off the world was asked for (World.PowerOff).
	OnGuestPowerOff func(addr netip.Addr)
	// Logger receives the world's log; nil discards it.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.BootDelay <= 0 {
		o.BootDelay = DefaultBootDelay
	}

	if o.InstallDelay <= 0 {
		o.InstallDelay = DefaultInstallDelay
	}

	if o.RebootDelay <= 0 {
		o.RebootDelay = DefaultRebootDelay
	}

	if o.EtcdRetry <= 0 {
		o.EtcdRetry = DefaultEtcdRetry
	}

	if o.EtcdStartDelay <= 0 {
		o.EtcdStartDelay = DefaultEtcdStartDelay
	}

	if o.LearnerPromoteDelay <= 0 {
		o.LearnerPromoteDelay = DefaultLearnerPromoteDelay
	}

	if o.EtcdJoinRetry <= 0 {
		o.EtcdJoinRetry = DefaultEtcdJoinRetry
	}

	if o.CordonTimeout <= 0 {
		o.CordonTimeout = DefaultCordonTimeout
	}

	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}

	if o.EvictionRetry <= 0 {
		o.EvictionRetry = DefaultEvictionRetry
	}

	if o.ApplyDelay <= 0 {
		o.ApplyDelay = DefaultApplyDelay
	}

	if o.KubeletRestartDelay <= 0 {
		o.KubeletRestartDelay = DefaultKubeletRestartDelay
	}

	if o.BootImage == "" {
		o.BootImage = DefaultBootImage
	}

	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}

	return o
}

// Hooks is what the World tells the rest of the lab about Kubernetes, and
// how its nodes act on the Kubernetes API.
type Hooks interface {
	// Bootstrapped is called once per cluster, when its etcd is
	// bootstrapped and its Kubernetes API comes up.
	Bootstrapped(c Cluster)
	// APIServing is called when the cluster's Kubernetes API gets a
	// kube-apiserver behind it at some address (serving) or loses the
	// last: a control plane holding a Layer-2 VIP of the cluster's
	// configs, or for an endpoint without a VIP a control plane running
	// its kubelet while etcd has a majority. It follows Bootstrapped, with
	// serving true, once the endpoint has a holder. Where it answers is
	// told to EndpointHooks.
	APIServing(cluster string, serving bool)
	// NodeJoined is called when a node's kubelet registers: every time a
	// node of a bootstrapped cluster comes up while the cluster's API is
	// served, for the nodes already up when their cluster is bootstrapped
	// or when its API is served again, and again when a live config
	// change alters what it registers (labels, kubelet version). A node
	// that registers uncordons its Node if Talos cordoned it, which the
	// Node's talos.dev/cordoned annotation tells
	// (NodeApplyController.ApplyCordoned with the machine booting).
	NodeJoined(cluster string, n Node)
	// NodeLeft is called when a registered node's kubelet stops. shutdown
	// is true when Talos stopped it (reboot, shutdown, upgrade, reset, an
	// apply with a reboot): Talos first announces the shutdown to the
	// kubelet, whose graceful node shutdown posts the Node NotReady and
	// terminates its pods; false when the machine went down under it (power
	// cut, deleted VM). It is not a deletion: the Node object is the
	// engine's to delete.
	NodeLeft(cluster string, hostname string, shutdown bool)
	// Cordon cordons the Node of a node whose reset (or other sequence that
	// cordons) began, as Talos's NodeApplyController does: a Node that is
	// schedulable is marked unschedulable and annotated talos.dev/cordoned
	// ("true"); a Node already unschedulable is left as it is, without the
	// annotation. It returns once the Node is unschedulable, or the error
	// that kept it from being so when ctx ends. Cordon and Drain are
	// called from the sequence's own goroutine once every hook queued
	// before them has run, never with the world locked; other hooks may
	// run meanwhile.
	Cordon(ctx context.Context, cluster, hostname string) error
	// Drain evicts the pods of the node's Node through the Kubernetes
	// eviction API as Talos's drain does (pkg/kubernetes Drain): mirror
	// pods, pods without a controller and DaemonSet pods are skipped, the
	// others are evicted in parallel with a 60 s grace period, asking again
	// every retry while a disruption budget refuses (429), each then
	// waited for until it is gone. Errors are Talos's to log; ctx bounds
	// the drain.
	Drain(ctx context.Context, cluster, hostname string, retry time.Duration) error
}

// EndpointHooks, when Hooks also implements it, is told every address the
// cluster's Kubernetes API answers at, after Bootstrapped and whenever they
// change: each Layer-2 VIP a control plane holds (one whose config no
// longer names it too, until no node holds it), or an endpoint that is no
// VIP while it is served (see Hooks.APIServing); none while nothing serves
// it. It is told before the APIServing call a change brings.
type EndpointHooks interface {
	APIEndpoints(cluster string, eps []APIEndpoint)
}

// APIEndpoint is one address the cluster's Kubernetes API answers at.
type APIEndpoint struct {
	// Addr is the address and kube-apiserver's port.
	Addr netip.AddrPort
	// Node is the control plane whose kube-apiserver answers there.
	Node netip.Addr
	// SANs are the DNS names and IP addresses of that kube-apiserver's
	// serving certificate, as Talos generates it from the node's config
	// and addresses, sorted.
	SANs []string
}

// StaticPodHooks, when Hooks also implements it, is told the control-plane
// static pods each control plane's kubelet runs, as Talos renders them from
// the node's machine config, every time they change: at registration and
// after a config change altered a component's config.
type StaticPodHooks interface {
	StaticPods(cluster, hostname string, pods []StaticPod)
}

// StaticPod is one control-plane component a control plane runs as a
// static pod: kube-apiserver, kube-controller-manager or kube-scheduler.
type StaticPod struct {
	// Component is the component's ID, which is also its k8s-app label.
	Component string
	// Image is the container image from the machine config
	// (.cluster.apiServer.image and so on).
	Image string
	// ConfigVersion is the version of the component's config resource in
	// this boot (namespace controlplane; 1 when created at boot, one more at
	// every change), which Talos writes to the pod's annotation
	// talos.dev/config-version.
	ConfigVersion string
}

// Cluster describes a bootstrapped cluster to Hooks.
type Cluster struct {
	// Name is cluster.clusterName.
	Name string
	// ID is cluster.id.
	ID string
	// Endpoint is cluster.controlPlane.endpoint.
	Endpoint *url.URL
	// KubernetesCA is the cluster's Kubernetes CA (cluster.ca).
	KubernetesCA CertKey
	// KubernetesVersion is the tag of the bootstrap node's kubelet image,
	// such as "v1.35.1".
	KubernetesVersion string
	// VIP is the address of the bootstrap node's Layer2VIPConfig document;
	// invalid when there is none.
	VIP netip.Addr
}

// APIAddr is where the cluster's Kubernetes API answers: the endpoint's
// address when it is an IP address (its port, 6443 when none), else the
// VIP on port 6443; false when it is neither.
func (c Cluster) APIAddr() (netip.AddrPort, bool) {
	if c.Endpoint == nil {
		return netip.AddrPort{}, false
	}

	port := c.Endpoint.Port()
	if port == "" {
		port = "6443"
	}

	if a, err := netip.ParseAddrPort(net.JoinHostPort(c.Endpoint.Hostname(), port)); err == nil {
		return a, true
	}

	if c.VIP.IsValid() {
		return netip.AddrPortFrom(c.VIP, 6443), true
	}

	return netip.AddrPort{}, false
}

// CertKey is a PEM certificate and its PEM private key.
type CertKey struct {
	Cert []byte
	Key  []byte
}

// Node describes a registering Kubernetes node to Hooks.
type Node struct {
	Hostname string
	Addr     netip.Addr
	Role     Role
	// KubeletVersion is the tag of machine.kubelet.image.
	KubeletVersion string
	// TalosVersion is the version of the Talos the node runs.
	TalosVersion string
	// Labels are machine.nodeLabels, plus node-role.kubernetes.io/control-plane
	// on control planes as Talos adds it.
	Labels map[string]string
	// Annotations are the annotations Talos puts on the Node: the Image
	// Factory schematic of the running image as
	// extensions.talos.dev/schematic (NodeAnnotationSpecController turns
	// each extension of ExtensionStatus into a label, or an annotation when
	// its version is no valid label value, as the 64-digit schematic ID
	// is; the factory adds the "schematic" pseudo-extension).
	Annotations map[string]string
}

// Role is a node's machine type.
type Role string

// Roles.
const (
	RoleControlPlane Role = "controlplane"
	RoleWorker       Role = "worker"
)

// Mode is where a node is in its lifecycle.
type Mode string

// Modes.
const (
	// ModeOff: powered off (or never booted, or reset without a reboot).
	ModeOff Mode = "off"
	// ModeBooting: powered on, its API not up yet (booting, installing,
	// rebooting, upgrading).
	ModeBooting Mode = "booting"
	// ModeMaintenance: up without a machine config.
	ModeMaintenance Mode = "maintenance"
	// ModeRunning: up with a machine config.
	ModeRunning Mode = "running"
)

// NodeState is a snapshot of one node.
type NodeState struct {
	Addr     netip.Addr
	Hostname string
	// Cluster is the name of the node's cluster; empty in maintenance.
	Cluster string
	// Role is empty in maintenance mode.
	Role Role
	// Version is the Talos version the node runs (reports, when up).
	Version string
	// KubernetesVersion is the Kubernetes version of the machine config the
	// node last received: the tag of its .machine.kubelet.image; empty in
	// maintenance.
	KubernetesVersion string
	// Schematic is the Image Factory schematic of the running image; empty
	// for images that are not Image Factory installers.
	Schematic string
	// Image is the running installer image reference.
	Image string
	Mode  Mode
	// Up reports whether the API answers.
	Up bool
	// Boots counts how many times the API came up.
	Boots int
	// BootID is the boot ID of the current boot (see World.BootID); empty
	// while the API is down.
	BootID string
	// EtcdMemberID is the node's etcd member ID; 0 when it is not a member.
	EtcdMemberID uint64
	// Registered reports whether the node's kubelet is registered now.
	Registered bool
	// VIPs are the shared IPs (Layer2VIPConfig) the node holds now, as
	// Talos's VIP operator assigns them: one control plane of the cluster
	// holds each, elected in etcd among the control planes whose etcd runs
	// healthy, and keeps it until its etcd stops, it goes down or etcd loses
	// its majority; then the next campaigner takes it over at once.
	VIPs []netip.Addr
}

// ClusterState is a snapshot of one cluster's identity and etcd.
type ClusterState struct {
	Name string
	ID   string
	// Bootstrapped reports whether etcd was bootstrapped.
	Bootstrapped bool
	// Bootstraps counts successful Bootstrap calls; more than one means a
	// node with an empty etcd data directory was bootstrapped while the
	// cluster already had etcd, which real Talos accepts (forming a second
	// etcd cluster) and the lab only counts.
	Bootstraps int
	// Leader is the etcd leader's member ID, 0 without a functioning
	// majority.
	Leader  uint64
	Members []Member
}

// Member is an etcd member.
type Member struct {
	ID uint64
	// Hostname is the member's name: empty for a learner whose etcd has not
	// started yet, as etcd lists it.
	Hostname string
	Addr     netip.Addr
	Learner  bool
	// Started reports whether the member's etcd is running.
	Started bool
}

// EtcdSnapshot is a cluster's etcd membership right after one change of it
// or of a member's etcd running or not.
type EtcdSnapshot struct {
	Time time.Time
	// Event is what changed: "bootstrap" (the first member), "add-learner"
	// (MemberAddAsLearner of a joining control plane), "promote",
	// "remove", "start" (a member's etcd started) or "stop" (it stopped:
	// its node went down, left or failed).
	Event string
	// Member is the hostname of the node of the member the event is about,
	// and MemberID its ID.
	Member   string
	MemberID uint64
	// Voters are the voting members, StartedVoters those whose etcd runs,
	// and Learners the learners, each by the hostname of its node, in the
	// order they joined.
	Voters, StartedVoters, Learners []string
}

// Quorum reports whether the started voters are a majority of the voters,
// which etcd needs to have a leader and to commit anything.
func (s EtcdSnapshot) Quorum() bool {
	return len(s.Voters) > 0 && 2*len(s.StartedVoters) > len(s.Voters)
}

// Step is one step of a Talos sequence that the lab records: those of a
// reset ("reset-cordon", "reset-drain", "kubelet-stopped", "etcd-leave",
// "wipe", or "reset-failed" for an injected failure), and the cordon and
// drain of a shutdown or an upgrade ("shutdown-cordon", "upgrade-drain"
// and so on).
type Step struct {
	Time     time.Time
	Node     netip.Addr
	Hostname string
	Cluster  string
	Step     string
	// Err is the step's error, which Talos logged (cordon, drain) or
	// which ended the sequence (etcd-leave, an injected failure); empty
	// when it succeeded.
	Err string
}

// Op is one entry of the operation log: one call for one node.
type Op struct {
	Time time.Time
	// Node is the node the call was for.
	Node netip.Addr
	// Endpoint is the node that received the call (differs from Node when
	// the call was proxied).
	Endpoint netip.Addr
	// Call is the gRPC method, such as "/machine.MachineService/Bootstrap".
	Call string
	// Code is the call's status code; codes.OK on success.
	Code codes.Code
	// Err is the error message; empty on success.
	Err string
	// Fault is the injected fault that shaped the call: "fail", "hang",
	// "reset" or "lost-reply"; empty otherwise. For a lost reply, Code and
	// Err are the call's outcome, which the client never received.
	Fault string
}

// Name is how the lab's operation log names the call: the method name
// alone for MachineService, such as "Upgrade" or "Reboot", and the service
// (without its package) and method otherwise, such as
// "LifecycleService.Upgrade", "ImageService.Pull",
// "ClusterService.HealthCheck" or "State.Get" (COSI).
func (o Op) Name() string {
	svc, method, ok := strings.Cut(strings.TrimPrefix(o.Call, "/"), "/")
	if !ok {
		return o.Call
	}

	if i := strings.LastIndexByte(svc, '.'); i >= 0 {
		svc = svc[i+1:]
	}

	if svc == "MachineService" {
		return method
	}

	return svc + "." + method
}

// Short returns the method name of the call, such as "Bootstrap" (also
// for "/machine.LifecycleService/Upgrade": "Upgrade"; see Name).
func (o Op) Short() string {
	if i := strings.LastIndexByte(o.Call, '/'); i >= 0 {
		return o.Call[i+1:]
	}

	return o.Call
}

// Service returns the gRPC service of the call without its package, such
// as "MachineService" or "LifecycleService"; "" when the call names none.
func (o Op) Service() string {
	svc, _, ok := strings.Cut(strings.TrimPrefix(o.Call, "/"), "/")
	if !ok {
		return ""
	}

	if i := strings.LastIndexByte(svc, '.'); i >= 0 {
		svc = svc[i+1:]
	}

	return svc
}

// World is a datacenter of simulated Talos nodes. It is safe for concurrent
// use.
type World struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	closed   bool
	nodes    map[netip.Addr]*node
	clusters map[string]*cluster
	// caKeys maps a machine CA certificate (PEM) to its key, learnt from
	// control-plane configs, so that workers (whose configs carry only the
	// certificate) get server certificates like trustd issues them.
	caKeys  map[string][]byte
	ops     []Op
	steps   []Step
	eventID uint64

	hooks *hookQueue
}

// NewWorld returns an empty world.
func NewWorld(opts Options) *World {
	opts = opts.withDefaults()

	return &World{
		opts:     opts,
		log:      opts.Logger,
		nodes:    map[netip.Addr]*node{},
		clusters: map[string]*cluster{},
		caKeys:   map[string][]byte{},
		hooks:    newHookQueue(opts.Hooks),
	}
}

// BootOption changes how Boot powers a node on.
type BootOption func(*bootOptions)

type bootOptions struct {
	image string
}

// BootImage sets the installer image reference of the boot media (for
// example factory.talos.dev/nocloud-installer/<schematic>:v1.13.8): the
// version and schematic a node reports in maintenance mode.
func BootImage(ref string) BootOption {
	return func(o *bootOptions) { o.image = ref }
}

// Boot powers on the machine at addr with the given user data (the machine
// config on its CIDATA media). The node's API answers on addr:50000 after
// BootDelay, plus InstallDelay for a first boot from a config. Empty user
// data boots it into maintenance mode; gzip-compressed user data is
// unzipped first, as Talos does. A machine that was installed before and
// only powered off boots from its disk and ignores the user data, like
// real Talos. addr must be a loopback address; Boot fails on a node that is
// already on and on user data that is not a valid machine config.
func (w *World) Boot(ctx context.Context, addr netip.Addr, userData []byte, opts ...BootOption) error {
	if err := ctx.Err(); err != nil {
		return err
	}

	if !addr.Is4() || !addr.IsLoopback() {
		return fmt.Errorf("booting %s: only IPv4 loopback addresses (127.0.0.0/8) are allowed", addr)
	}

	var bo bootOptions
	for _, o := range opts {
		o(&bo)
	}

	w.mu.Lock()
	defer w.mu.Unlock()

	if w.closed {
		return ErrClosed
	}

	n := w.nodes[addr]
	if n != nil && n.mode != ModeOff {
		return fmt.Errorf("booting %s: the node is already on (%s)", addr, n.mode)
	}

	if n == nil {
		n = newNode(addr)
		w.nodes[addr] = n
	}

	if bo.image != "" {
		n.bootImage = bo.image
	} else if n.bootImage == "" {
		n.bootImage = w.opts.BootImage
	}

	delay := w.opts.BootDelay

	if !n.installed && len(userData) > 0 {
		data, err := unzipUserData(userData)
		if err != nil {
			return fmt.Errorf("booting %s: %w", addr, err)
		}

		cfg, err := configloader.NewFromBytes(data)
		if err != nil {
			return fmt.Errorf("booting %s: loading user data: %w", addr, err)
		}

		if cfg.CompleteForBoot() {
			if _, err := cfg.Validate(validationMode{}); err != nil {
				return fmt.Errorf("booting %s: validating user data: %w", addr, err)
			}

			n.install(cfg)

			delay += w.opts.InstallDelay
		}
	}

	w.log.Info("node powered on", "node", addr, "installed", n.installed)
	w.powerOn(n, delay)

	return nil
}

// unzipUserData gunzips user data that is a gzip archive, as Talos does
// with the config it acquires from its platform.
func unzipUserData(data []byte) ([]byte, error) {
	if http.DetectContentType(data) != "application/x-gzip" {
		return data, nil
	}

	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("unzipping the user data: %w", err)
	}

	defer zr.Close() //nolint:errcheck // reading is what can fail

	out, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("unzipping the user data: %w", err)
	}

	return out, nil
}

// PowerOff cuts the power of the node at addr: its API goes away at once,
// its disk is kept. Boot powers it on again.
func (w *World) PowerOff(addr netip.Addr) error {
	w.mu.Lock()
	defer w.mu.Unlock()

	n := w.nodes[addr]
	if n == nil {
		return fmt.Errorf("powering off %s: %w", addr, ErrUnknownNode)
	}

	w.powerOff(n, false)

	return nil
}

// Destroy powers the node at addr off and forgets it with its disk
// (installed system, machine config, etcd data) and its faults, as when its
// VM is deleted; the address can then boot a new machine. An etcd member
// the node had stays in its cluster's membership, as a deleted machine does
// not leave etcd: another member has to remove it, or a new control plane
// of the same hostname replaces it when it joins, as Talos does.
func (w *World) Destroy(addr netip.Addr) error {
	w.mu.Lock()
	defer w.mu.Unlock()

	n := w.nodes[addr]
	if n == nil {
		return fmt.Errorf("destroying %s: %w", addr, ErrUnknownNode)
	}

	w.powerOff(n, false)
	delete(w.nodes, addr)

	return nil
}

// Node returns the state of the node at addr.
func (w *World) Node(addr netip.Addr) (NodeState, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()

	n := w.nodes[addr]
	if n == nil {
		return NodeState{}, false
	}

	return w.nodeState(n), true
}

// BootID returns the boot ID of the current boot of the node at addr, as
// it reads in /proc/sys/kernel/random/boot_id (without the newline): a
// random UUID drawn every time the node boots (power-on, reboot, the
// reboot of an upgrade or of an apply). It is empty while the node's API
// is down and for an unknown node.
func (w *World) BootID(addr netip.Addr) string {
	w.mu.Lock()
	defer w.mu.Unlock()

	n := w.nodes[addr]
	if n == nil || n.inst == nil {
		return ""
	}

	return n.bootID
}

// Images returns the names of the images in the node's containerd store
// for the given instance (see ImageStore), sorted, as ImageService.List
// lists them; nil for an unknown node or an empty store.
func (w *World) Images(addr netip.Addr, store ImageStore) []string {
	w.mu.Lock()
	defer w.mu.Unlock()

	n := w.nodes[addr]
	if n == nil {
		return nil
	}

	return slices.Sorted(maps.Keys(n.imageStore(store.key(), false)))
}

// Nodes returns the state of every node, ordered by address.
func (w *World) Nodes() []NodeState {
	w.mu.Lock()
	defer w.mu.Unlock()

	out := make([]NodeState, 0, len(w.nodes))
	for _, n := range w.nodes {
		out = append(out, w.nodeState(n))
	}

	slices.SortFunc(out, func(a, b NodeState) int { return a.Addr.Compare(b.Addr) })

	return out
}

func (w *World) nodeState(n *node) NodeState {
	s := NodeState{
		Addr:       n.addr,
		Hostname:   n.hostname(),
		Image:      n.runningImage(),
		Mode:       n.mode,
		Up:         n.inst != nil,
		Boots:      n.boots,
		Registered: n.announced != nil,
	}

	if n.inst != nil {
		s.BootID = n.bootID
	}

	s.Version, s.Schematic = parseImage(s.Image)

	if n.cfg != nil {
		s.Role = n.role()
		s.Cluster = n.cfg.Cluster().Name()
		s.KubernetesVersion, _ = parseImage(n.cfg.Machine().Kubelet().Image())
	}

	if n.etcdData {
		s.EtcdMemberID = n.memberID
	}

	s.VIPs = w.heldVIPs(n)

	return s
}

// VIPHolder returns the address of the node holding the shared IP vip now;
// false when no node holds it.
func (w *World) VIPHolder(vip netip.Addr) (netip.Addr, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()

	for _, c := range w.clusters {
		w.electVIPs(c)

		if q := c.vips[vip]; len(q) > 0 {
			return q[0].addr, true
		}
	}

	return netip.Addr{}, false
}

// Clusters returns every cluster the world has seen a configured node of,
// ordered by name.
func (w *World) Clusters() []ClusterState {
	w.mu.Lock()
	defer w.mu.Unlock()

	out := make([]ClusterState, 0, len(w.clusters))
	for _, c := range w.clusters {
		out = append(out, w.clusterState(c))
	}

	slices.SortFunc(out, func(a, b ClusterState) int {
		if a.Name != b.Name {
			if a.Name < b.Name {
				return -1
			}

			return 1
		}

		if a.ID < b.ID {
			return -1
		}

		return 1
	})

	return out
}

// EtcdMembers returns the etcd members of the named cluster (name or ID),
// in the order they joined; nil for an unknown cluster.
func (w *World) EtcdMembers(cluster string) []Member {
	w.mu.Lock()
	defer w.mu.Unlock()

	c := w.findCluster(cluster)
	if c == nil {
		return nil
	}

	return w.clusterState(c).Members
}

// EtcdHistory returns every change of the named cluster's (name or ID)
// etcd membership and of its members' etcd running, in order, each with
// the membership right after it; nil for an unknown cluster. A test checks
// with EtcdSnapshot.Quorum that etcd kept a majority at every moment.
func (w *World) EtcdHistory(cluster string) []EtcdSnapshot {
	w.mu.Lock()
	defer w.mu.Unlock()

	c := w.findCluster(cluster)
	if c == nil {
		return nil
	}

	w.noteEtcd(c)

	return slices.Clone(c.history)
}

// Steps returns the recorded steps of Talos sequences, in order.
func (w *World) Steps() []Step {
	w.mu.Lock()
	defer w.mu.Unlock()

	return slices.Clone(w.steps)
}

// APIServerVersion is the tag of the kube-apiserver image of the control
// plane that serves the cluster's Kubernetes API endpoint now (the VIP's
// holder), which is what the endpoint's /version answers; empty when none
// serves it.
func (w *World) APIServerVersion(cluster string) string {
	w.mu.Lock()
	defer w.mu.Unlock()

	c := w.findCluster(cluster)
	if c == nil || !c.apiServing {
		return ""
	}

	for _, n := range w.nodesOf(c) {
		if n.runningReady() && n.controlPlane() && len(w.heldVIPs(n)) > 0 {
			v, _ := parseImage(n.cfg.Cluster().APIServer().Image())

			return v
		}
	}

	return ""
}

// APIEndpoints returns the addresses the named cluster's Kubernetes API
// answers at now, the one the configs of most of its control planes name
// first (see
// EndpointHooks); nil when it answers nowhere.
func (w *World) APIEndpoints(cluster string) []APIEndpoint {
	w.mu.Lock()
	defer w.mu.Unlock()

	c := w.findCluster(cluster)
	if c == nil {
		return nil
	}

	w.electVIPs(c)

	return slices.Clone(c.endpoints)
}

// APIServing reports whether the named cluster's Kubernetes API endpoint
// has a kube-apiserver behind it now (see Hooks.APIServing).
func (w *World) APIServing(cluster string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()

	c := w.findCluster(cluster)

	return c != nil && c.apiServing
}

func (w *World) findCluster(nameOrID string) *cluster {
	if c := w.clusters[nameOrID]; c != nil {
		return c
	}

	for _, c := range w.clusters {
		if c.name == nameOrID {
			return c
		}
	}

	return nil
}

func (w *World) clusterState(c *cluster) ClusterState {
	s := ClusterState{
		Name:         c.name,
		ID:           c.id,
		Bootstrapped: c.bootstrapped,
		Bootstraps:   c.bootstraps,
		Leader:       c.leader,
	}

	for _, m := range c.members {
		s.Members = append(s.Members, Member{
			ID:       m.id,
			Hostname: m.name,
			Addr:     m.addr,
			Learner:  m.learner,
			Started:  w.started(c, m),
		})
	}

	return s
}

// Log returns the operation log in order.
func (w *World) Log() []Op {
	w.mu.Lock()
	defer w.mu.Unlock()

	return slices.Clone(w.ops)
}

func (w *World) record(op Op) {
	w.ops = append(w.ops, op)
}

// Close stops every node and the hook dispatcher. It is safe to call more
// than once.
func (w *World) Close() error {
	w.mu.Lock()

	if w.closed {
		w.mu.Unlock()

		return nil
	}

	w.closed = true

	var insts []*instance

	for _, n := range w.nodes {
		n.gen++

		if n.inst != nil {
			insts = append(insts, n.inst)
			n.inst = nil
		}
	}

	w.mu.Unlock()

	for _, inst := range insts {
		inst.stop(0)
	}

	w.hooks.close()

	return nil
}

// Faults.

// NeverBoot makes the node at addr never come up when powered on (now, if it
// is booting, and on every later boot or reboot) until ClearFaults.
func (w *World) NeverBoot(addr netip.Addr) {
	w.mu.Lock()
	defer w.mu.Unlock()

	w.faultsOf(addr).neverBoot = true
}

// NeverReboot makes the node at addr accept every restart and never go
// down, as when the sequence machined starts after answering hangs: an
// apply that needs a reboot (AUTO falling back to a reboot, REBOOT) is
// answered "with a reboot", its config persisted and further applies
// refused, and the node keeps running its old config; a Reboot is
// answered with its actor ID; a legacy Upgrade installs the image for the
// next boot without rebooting. The node stays up (same boot ID) until
// something else reboots it. Until ClearFaults.
func (w *World) NeverReboot(addr netip.Addr) {
	w.mu.Lock()
	defer w.mu.Unlock()

	w.faultsOf(addr).neverReboot = true
}

// FailReset makes the next n reset sequences of the node at addr fail
// after their cleanup phase, where the first phase whose failure ends the
// sequence comes (the etcd leave of a control plane): the Node is cordoned
// and drained, the kubelet stopped and the Node NotReady, while the node's
// API keeps answering and its etcd member stays. The failure shows as a
// failed "reset" sequence event for the call's actor ID.
func (w *World) FailReset(addr netip.Addr, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()

	w.faultsOf(addr).failReset = n
}

// StuckEtcdMember makes the etcd member of the node at addr impossible to
// remove (EtcdLeaveCluster, EtcdRemoveMemberByID, the leave of a graceful
// reset): removal times out, as with a member that etcd cannot reach
// consensus about.
func (w *World) StuckEtcdMember(addr netip.Addr) {
	w.mu.Lock()
	defer w.mu.Unlock()

	w.faultsOf(addr).stuckMember = true
}

// FailCalls makes the next n calls of method to the node at addr fail with
// code. method is a full gRPC method name, its name in the operation log
// (Op.Name: "Reset", "LifecycleService.Upgrade") or its last element
// ("Upgrade", which names the upgrade of both services).
func (w *World) FailCalls(addr netip.Addr, method string, n int, code codes.Code) {
	w.setCallFault(addr, callFail, method, n, code)
}

// HangCalls makes the next n calls of method (see FailCalls) to the node
// at addr hang without effect: they block until the client's context ends
// or the API that received them stops.
func (w *World) HangCalls(addr netip.Addr, method string, n int) {
	w.setCallFault(addr, callHang, method, n, codes.OK)
}

// ResetCalls makes the next n calls of method (see FailCalls) to the node
// at addr fail in the transport: the TCP connection the call came in on is
// aborted with a reset before the call has any effect, as when apid
// crashes. The client sees Unavailable from its transport and reconnects
// for later calls.
func (w *World) ResetCalls(addr netip.Addr, method string, n int) {
	w.setCallFault(addr, callReset, method, n, codes.OK)
}

// LoseReplies makes the next n calls of method (see FailCalls) to the node
// at addr take full effect and then lose their answer: the connection is
// aborted with a TCP reset instead. A streaming call is cut when it would
// send its first message.
func (w *World) LoseReplies(addr netip.Addr, method string, n int) {
	w.setCallFault(addr, callLostReply, method, n, codes.OK)
}

// setCallFault sets how many calls of method a fault of the given kind
// takes, replacing the count left from before.
func (w *World) setCallFault(addr netip.Addr, kind callFaultKind, method string, n int, code codes.Code) {
	w.mu.Lock()
	defer w.mu.Unlock()

	f := w.faultsOf(addr)
	if f.calls == nil {
		f.calls = map[callFaultKey]*callFault{}
	}

	f.calls[callFaultKey{kind: kind, method: method}] = &callFault{n: n, code: code}
}

// Latency delays every call to the node at addr by d.
func (w *World) Latency(addr netip.Addr, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()

	w.faultsOf(addr).latency = d
}

// RollbackUpgrade makes the next n upgrades of the node at addr fail to boot
// the new image: the node comes back on its previous version, as Talos's A/B
// boot does.
func (w *World) RollbackUpgrade(addr netip.Addr, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()

	w.faultsOf(addr).rollbackUpgrade = n
}

// ClearFaults removes every fault of the node at addr.
func (w *World) ClearFaults(addr netip.Addr) {
	w.mu.Lock()
	defer w.mu.Unlock()

	if n := w.nodes[addr]; n != nil {
		n.faults = faults{}
	}
}

// faultsOf returns the faults of the node at addr, creating an off node
// record when none exists so that faults can be set before the first boot.
func (w *World) faultsOf(addr netip.Addr) *faults {
	n := w.nodes[addr]
	if n == nil {
		n = newNode(addr)
		w.nodes[addr] = n
	}

	return &n.faults
}

type faults struct {
	neverBoot       bool
	neverReboot     bool
	failReset       int
	stuckMember     bool
	calls           map[callFaultKey]*callFault
	latency         time.Duration
	rollbackUpgrade int
}

// callFaultKind is what a call fault does to a call.
type callFaultKind string

// Call fault kinds, in the order they are taken when several apply.
const (
	callNone      callFaultKind = ""
	callFail      callFaultKind = "fail"
	callHang      callFaultKind = "hang"
	callReset     callFaultKind = "reset"
	callLostReply callFaultKind = "lost-reply"
)

var callFaultKinds = []callFaultKind{callFail, callHang, callReset, callLostReply}

type callFaultKey struct {
	kind   callFaultKind
	method string
}

type callFault struct {
	n    int
	code codes.Code
}

// takeCallFault consumes a call fault for method, if any, and returns its
// kind (callNone without one) and, for a failure, its code.
func (f *faults) takeCallFault(method string) (callFaultKind, codes.Code) {
	for _, kind := range callFaultKinds {
		for _, key := range []string{method, Op{Call: method}.Name(), shortMethod(method)} {
			cf := f.calls[callFaultKey{kind: kind, method: key}]
			if cf == nil || cf.n <= 0 {
				continue
			}

			cf.n--

			return kind, cf.code
		}
	}

	return callNone, codes.OK
}

func shortMethod(method string) string {
	return Op{Call: method}.Short()
}

// ProxyImage is the kube-proxy image (.cluster.proxy.image) of the machine
// config of the control plane that serves the cluster's Kubernetes API
// endpoint now, from which Talos renders the kube-proxy DaemonSet of its
// bootstrap manifests; empty when none serves it or kube-proxy is disabled
// (.cluster.proxy.disabled), when Talos renders no kube-proxy.
func (w *World) ProxyImage(cluster string) string {
	w.mu.Lock()
	defer w.mu.Unlock()

	c := w.findCluster(cluster)
	if c == nil || !c.apiServing {
		return ""
	}

	for _, n := range w.nodesOf(c) {
		if n.runningReady() && n.controlPlane() && len(w.heldVIPs(n)) > 0 {
			if !n.cfg.Cluster().Proxy().Enabled() {
				return ""
			}

			return n.cfg.Cluster().Proxy().Image()
		}
	}

	return ""
}
