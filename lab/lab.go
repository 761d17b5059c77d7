package lab

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/taloscluster/taloscluster/lab/factory"
	"github.com/taloscluster/taloscluster/lab/internal/connabort"
	"github.com/taloscluster/taloscluster/lab/kube"
	"github.com/taloscluster/taloscluster/lab/labca"
	"github.com/taloscluster/taloscluster/lab/openstack"
	"github.com/taloscluster/taloscluster/lab/pve"
	"github.com/taloscluster/taloscluster/lab/talos"
)

// Options configure a Lab. Zero values take small defaults, so tests are
// fast; the demo sets larger ones to look real.
type Options struct {
	// Nodes are the Proxmox nodes; default pve1, pve2, pve3.
	Nodes []string
	// Bridges maps each Proxmox bridge to the network its DHCP server
	// hands addresses from (hosts .100 and up). Default: vmbr0 on
	// 127.42.0.0/24 and vmbr1 on 127.43.0.0/24.
	Bridges map[string]netip.Prefix
	// Listen is the address the lab's HTTPS endpoints listen on; default
	// 127.0.0.1 with ephemeral ports.
	Listen netip.Addr
	// TaskDuration is how long a Proxmox task runs.
	TaskDuration time.Duration
	// StatsInterval is how late /cluster/resources reports a VM's name and
	// power state (pvestatd's broadcast). Zero means 10 s, as on Proxmox
	// VE; a negative value reports them live, a leniency for tests of the
	// lab itself.
	StatsInterval time.Duration
	// BootDelay, InstallDelay and RebootDelay shape the Talos nodes.
	BootDelay, InstallDelay, RebootDelay time.Duration
	// ReadyDelay is how long a registered Kubernetes node stays NotReady.
	ReadyDelay time.Duration
	// NodeMonitorGracePeriod is how long after a node's kubelet stopped
	// (power off, VM deleted, reset, reboot) kube-controller-manager's node
	// lifecycle controller turns its Node's Ready condition Unknown
	// (NodeStatusUnknown). The real default is
	// kube.DefaultNodeMonitorGracePeriod (50 s), which taloslab up uses;
	// zero means DefaultNodeMonitorGracePeriod, short for tests, and a
	// negative value marks the Node at once. A kubelet Talos stops (reset,
	// reboot, shutdown, upgrade) first posts its Node NotReady itself.
	NodeMonitorGracePeriod time.Duration
	// LearnerPromoteDelay, DrainTimeout and EvictionRetry scale Talos's
	// promotion of etcd learners and the drain of a graceful reset (see
	// talos.Options); zero takes the talos package's short defaults.
	LearnerPromoteDelay, DrainTimeout, EvictionRetry time.Duration
	// OpenStackExternalCIDR is the subnet of the OpenStack cloud's external
	// network (OpenStackExternalNet), where floating IPs come from (hosts
	// .10 and up); default DefaultOpenStackExternalCIDR.
	OpenStackExternalCIDR netip.Prefix
	// OpenStackRegion is the region of the cloud's catalog; default
	// openstack.DefaultRegion (RegionOne).
	OpenStackRegion string
	// OpenStackBuildDelay is how long a new server stays in BUILD before
	// it turns ACTIVE and boots; zero means TaskDuration when that is
	// positive (a server build is the cloud's counterpart of a Proxmox
	// create task), else the emulator's default.
	OpenStackBuildDelay time.Duration
	// OpenStackZones are Nova's availability zones; empty means "nova"
	// alone.
	OpenStackZones []string
	// OnFatal, when set, is told when the running lab cannot serve an
	// address it needs: a node's Talos API (the node stays off after a
	// second of retries), a bootstrapped cluster's Kubernetes API at its
	// endpoint (the cluster has none) or a floating IP's forwarded port
	// (see openstack_nat.go). err is a *ListenError. The lab goes
	// on without that endpoint; stopping is the caller's choice. OnFatal is
	// called from the lab's own goroutines, possibly concurrently, and
	// must not block.
	OnFatal func(err error)
	Logger  *slog.Logger
}

// ListenError is an address the running lab needed and could not listen
// on, for Options.OnFatal.
type ListenError struct {
	// Addr is the address with its port, such as 127.42.0.100:50000.
	Addr netip.AddrPort
	// What is what the address serves, such as "the Talos API of node
	// 127.42.0.100" or "the Kubernetes API of cluster demo".
	What string
	// Err is the listener's error.
	Err error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("listening on %s for %s: %v", e.Addr, e.What, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// fatal reports err to Options.OnFatal.
func (l *Lab) fatal(err error) {
	if l.opts.OnFatal != nil {
		l.opts.OnFatal(err)
	}
}

// DefaultNodeMonitorGracePeriod is Options.NodeMonitorGracePeriod when it
// is zero: short, so that tests are fast, yet not at once.
const DefaultNodeMonitorGracePeriod = 500 * time.Millisecond

func (o Options) nodeMonitorGracePeriod() time.Duration {
	switch {
	case o.NodeMonitorGracePeriod < 0:
		return 0
	case o.NodeMonitorGracePeriod == 0:
		return DefaultNodeMonitorGracePeriod
	}
	return o.NodeMonitorGracePeriod
}

func (o Options) statsInterval() time.Duration {
	switch {
	case o.StatsInterval < 0:
		return 0
	case o.StatsInterval == 0:
		return 10 * time.Second
	}
	return o.StatsInterval
}

// Lab is a running simulated datacenter: a Proxmox VE cluster and an
// OpenStack cloud whose VMs and servers boot into simulated Talos nodes, an
// Image Factory, and one Kubernetes API per bootstrapped cluster.
// Everything listens on loopback addresses.
type Lab struct {
	opts Options
	log  *slog.Logger

	CA      *labca.CA
	PVE     *pve.Server
	Factory *factory.Server
	Talos   *talos.World

	// PVEURL and FactoryURL are the HTTPS origins of the emulators.
	PVEURL, FactoryURL string
	// TokenID and TokenSecret authenticate to the Proxmox API with every
	// privilege.
	TokenID, TokenSecret string
	// RestrictedTokenID and RestrictedTokenSecret authenticate with the
	// restricted token (pve.RestrictedToken): it reads everything a plan
	// reads and powers VMs, but holds no allocation or configuration
	// privilege (no VM.Allocate, VM.Config.Disk/CPU/Memory/Network/
	// HWType/Options, Datastore.Allocate/AllocateSpace/AllocateTemplate,
	// Pool.Allocate, SDN.Use) on any path; see pve.RestrictedACLs.
	RestrictedTokenID, RestrictedTokenSecret string
	// AuditorTokenID and AuditorTokenSecret authenticate with the
	// read-only token (pve.AuditorToken): it reads everything a plan
	// reads and holds no privilege that changes anything, VM.PowerMgmt
	// included; see pve.AuditorACLs.
	AuditorTokenID, AuditorTokenSecret string

	// OpenStack is the OpenStack cloud (Keystone, Nova, Neutron, Glance).
	OpenStack *openstack.Server
	// OpenStackURL is its Keystone v3 endpoint,
	// https://<Listen>:<port>/identity/v3 (a client's OS_AUTH_URL).
	OpenStackURL string
	// OpenStackCredential is the application credential it accepts.
	OpenStackCredential openstack.Credential
	// OpenStackRegion is the region of its catalog's endpoints.
	OpenStackRegion string
	// OpenStackExternalNet and OpenStackExternalCIDR are its external
	// network and that network's subnet: floating IPs come from there.
	OpenStackExternalNet  string
	OpenStackExternalCIDR netip.Prefix

	servers []*http.Server
	nat     natTable

	mu     sync.Mutex
	kubes  map[string]*kube.Server // by cluster name
	leases map[string]netip.Addr   // by MAC
	vmAddr map[int]netip.Addr      // by VM id, while powered
	vmNode map[int]netip.Addr      // by VM id, from its first power-on until it is deleted
	osAddr map[string]netip.Addr   // by OpenStack server id, while running
	osNode map[string]netip.Addr   // by OpenStack server id, from its first boot until it is deleted
	osName map[string]string       // by OpenStack server id, until it is deleted
	events []Event
}

// Event is one entry of the lab's own log: VMs powering on and off, nodes
// booting, clusters coming up.
type Event struct {
	Time    time.Time `json:"time"`
	What    string    `json:"what"`
	Subject string    `json:"subject"`
	Detail  string    `json:"detail,omitempty"`
}

// Start brings the lab up; Close takes it down.
func Start(ctx context.Context, o Options) (*Lab, error) {
	if len(o.Nodes) == 0 {
		o.Nodes = []string{"pve1", "pve2", "pve3"}
	}
	if o.Bridges == nil {
		o.Bridges = map[string]netip.Prefix{
			"vmbr0": netip.MustParsePrefix("127.42.0.0/24"),
			"vmbr1": netip.MustParsePrefix("127.43.0.0/24"),
		}
	}
	if !o.Listen.IsValid() {
		o.Listen = netip.MustParseAddr("127.0.0.1")
	}
	if !o.OpenStackExternalCIDR.IsValid() {
		o.OpenStackExternalCIDR = DefaultOpenStackExternalCIDR
	}
	if o.OpenStackRegion == "" {
		o.OpenStackRegion = openstack.DefaultRegion
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ca, err := labca.New("taloslab CA")
	if err != nil {
		return nil, err
	}
	l := &Lab{opts: o, log: o.Logger, CA: ca, kubes: map[string]*kube.Server{}, leases: map[string]netip.Addr{}, vmAddr: map[int]netip.Addr{}, vmNode: map[int]netip.Addr{},
		osAddr: map[string]netip.Addr{}, osNode: map[string]netip.Addr{}, osName: map[string]string{},
		TokenID: pve.DefaultTokenID, TokenSecret: pve.DefaultTokenSecret,
		RestrictedTokenID: pve.RestrictedTokenID, RestrictedTokenSecret: pve.RestrictedTokenSecret,
		AuditorTokenID: pve.AuditorTokenID, AuditorTokenSecret: pve.AuditorTokenSecret}
	l.Talos = talos.NewWorld(talos.Options{
		BootDelay: o.BootDelay, InstallDelay: o.InstallDelay, RebootDelay: o.RebootDelay,
		LearnerPromoteDelay: o.LearnerPromoteDelay, DrainTimeout: o.DrainTimeout, EvictionRetry: o.EvictionRetry,
		Hooks: (*talosHooks)(l), Logger: o.Logger,
		OnGuestPowerOff: func(addr netip.Addr) {
			l.mu.Lock()
			vmid, found := 0, false
			for id, a := range l.vmAddr {
				if a == addr {
					vmid, found = id, true
				}
			}
			l.mu.Unlock()
			if found && l.PVE != nil {
				l.PVE.GuestStopped(vmid)
				l.event("guest-power-off", fmt.Sprint(vmid), addr.String())
				return
			}
			l.openStackGuestPowerOff(addr)
		},
		OnListenError: func(addr netip.Addr, err error) {
			l.event("api-failed", addr.String(), err.Error())
			l.fatal(&ListenError{Addr: netip.AddrPortFrom(addr, talos.APIPort), What: "the Talos API of node " + addr.String(), Err: err})
		},
	})
	bridges := make([]string, 0, len(o.Bridges))
	for b := range o.Bridges {
		bridges = append(bridges, b)
	}
	slices.Sort(bridges)
	l.PVE = pve.New(pve.Options{
		Nodes: o.Nodes, TokenID: l.TokenID, TokenSecret: l.TokenSecret, TaskDuration: o.TaskDuration, StatsInterval: o.statsInterval(),
		Tokens: []pve.Token{pve.RestrictedToken(), pve.AuditorToken()}, ACLs: append(pve.RestrictedACLs(), pve.AuditorACLs()...),
		Machines: (*machineHooks)(l), Bridges: bridges, DatacenterFirewall: true, Logger: o.Logger,
		// download-url fetches from the lab's Image Factory, whose
		// certificate the lab's CA signs.
		HTTPClient: &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}},
	})
	l.Factory = factory.New()
	if l.PVEURL, err = l.serve(ctx, l.PVE.Handler()); err != nil {
		l.Close()
		return nil, err
	}
	if l.FactoryURL, err = l.serve(ctx, l.Factory.Handler()); err != nil {
		l.Close()
		return nil, err
	}
	if err := l.startOpenStack(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// serve starts an HTTPS server with a lab certificate on an ephemeral port.
func (l *Lab) serve(_ context.Context, h http.Handler) (string, error) {
	tlsCfg, err := l.CA.ServerTLS(l.opts.Listen.String(), "localhost")
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(l.opts.Listen, 0).String())
	if err != nil {
		return "", fmt.Errorf("listening on %s: %w", l.opts.Listen, err)
	}
	// ConnContext lets reset and lost-reply faults reset HTTP/2 connections.
	srv := &http.Server{Handler: h, TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second, ConnContext: connabort.ConnContext}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			l.log.Error("lab server stopped", "error", err)
		}
	}()
	l.mu.Lock()
	l.servers = append(l.servers, srv)
	l.mu.Unlock()
	return "https://" + ln.Addr().String(), nil
}

// Close stops every emulator.
func (l *Lab) Close() {
	l.mu.Lock()
	servers := l.servers
	kubes := l.kubes
	l.servers, l.kubes = nil, map[string]*kube.Server{}
	l.mu.Unlock()
	if l.PVE != nil {
		l.PVE.Close()
	}
	if l.OpenStack != nil {
		if err := l.OpenStack.Close(); err != nil {
			l.log.Error("closing the OpenStack emulator", "error", err)
		}
	}
	l.nat.closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
	for _, k := range kubes {
		_ = k.Close()
	}
	if l.Talos != nil {
		_ = l.Talos.Close()
	}
}

// Kube returns the Kubernetes API emulator of a cluster, once bootstrapped.
func (l *Lab) Kube(cluster string) (*kube.Server, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, ok := l.kubes[cluster]
	return k, ok
}

// Events returns the lab's own log.
func (l *Lab) Events() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

func (l *Lab) event(what, subject, detail string) {
	l.mu.Lock()
	l.events = append(l.events, Event{Time: time.Now(), What: what, Subject: subject, Detail: detail})
	l.mu.Unlock()
	l.log.Info("lab event", "what", what, "subject", subject, "detail", detail)
}

// machineHooks turns Proxmox VMs into Talos nodes.
type machineHooks Lab

func (h *machineHooks) lab() *Lab { return (*Lab)(h) }

// lease hands out the VM's address on its first NIC's bridge network, the
// same one for the same MAC, like a DHCP server with a reservation.
func (l *Lab) lease(vm pve.VM) (netip.Addr, error) {
	if len(vm.MACs) == 0 {
		return netip.Addr{}, fmt.Errorf("VM %d has no NIC", vm.ID)
	}
	mac := strings.ToLower(vm.MACs[0])
	bridge := ""
	for _, part := range strings.Split(vm.Config["net0"], ",") {
		if k, v, ok := strings.Cut(part, "="); ok && k == "bridge" {
			bridge = v
		}
	}
	prefix, ok := l.opts.Bridges[bridge]
	if !ok {
		return netip.Addr{}, fmt.Errorf("VM %d is on bridge %q, which has no lab network", vm.ID, bridge)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.leases[mac]; ok {
		return a, nil
	}
	used := map[netip.Addr]bool{}
	for _, a := range l.leases {
		used[a] = true
	}
	a := prefix.Masked().Addr()
	for i := 0; i < 100; i++ {
		a = a.Next()
	}
	for ; prefix.Contains(a); a = a.Next() {
		if !used[a] {
			l.leases[mac] = a
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("bridge %s has no free address left in %s", bridge, prefix)
}

// PowerOn boots the VM's Talos node from its config ISO.
func (h *machineHooks) PowerOn(vm pve.VM) {
	l := h.lab()
	addr, err := l.lease(vm)
	if err != nil {
		l.event("boot-failed", vm.Name, err.Error())
		return
	}
	l.mu.Lock()
	l.vmNode[vm.ID] = addr
	l.mu.Unlock()
	// Talos's nocloud platform reads its config from the CD labelled
	// cidata or CIDATA; without user-data on it, the node boots into
	// maintenance mode. A config disk it cannot read stalls the boot.
	var (
		userData   []byte
		configDisk bool
		bootImage  string
	)
	for _, slot := range sortedSlots(vm.CDROMs) {
		volid := vm.CDROMs[slot]
		data, err := vm.ReadVolume(volid)
		if err != nil {
			continue
		}
		cd, err := talos.ReadNoCloudISO(data)
		switch {
		case err == nil:
			if !configDisk {
				userData, configDisk = cd.UserData, true
			}
		case !errors.Is(err, talos.ErrNotConfigDisk):
			l.event("boot-failed", vm.Name, fmt.Sprintf("reading the config disk %s: %v", volid, err))
			return
		case strings.Contains(volid, "talos-"):
			bootImage = volid
		}
	}
	l.mu.Lock()
	l.vmAddr[vm.ID] = addr
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Talos.Boot(ctx, addr, userData); err != nil {
		l.event("boot-failed", vm.Name, err.Error())
		return
	}
	detail := "maintenance mode"
	if len(userData) > 0 {
		detail = "config from its config ISO"
	} else if bootImage == "" {
		detail = "no boot media"
	}
	l.event("power-on", vm.Name, fmt.Sprintf("vm %d at %s, %s", vm.ID, addr, detail))
}

func sortedSlots(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// machineHooks reports deletions apart from power-offs.
var _ pve.Deletions = (*machineHooks)(nil)

// PowerOff stops the VM's node; its disk stays.
func (h *machineHooks) PowerOff(vmid int) {
	l := h.lab()
	l.mu.Lock()
	addr, ok := l.vmAddr[vmid]
	delete(l.vmAddr, vmid)
	l.mu.Unlock()
	if !ok {
		return
	}
	_ = l.Talos.PowerOff(addr)
	l.event("power-off", fmt.Sprint(vmid), addr.String())
}

// Deleted (pve.Deletions) forgets a deleted VM's machine: its Talos node
// goes with its disk (installed system, machine config, etcd data) and its
// address lease, so that a new VM, even with the same name, ID and MAC,
// boots as a new machine from its own config ISO. The etcd member the node had stays in its
// cluster, as when a real machine is deleted: only another member removes
// it (or a control plane of the same hostname joining, as Talos does).
func (h *machineHooks) Deleted(vmid int) {
	l := h.lab()
	l.mu.Lock()
	addr, ok := l.vmNode[vmid]
	delete(l.vmNode, vmid)
	delete(l.vmAddr, vmid)
	if ok {
		for mac, a := range l.leases {
			if a == addr {
				delete(l.leases, mac)
			}
		}
	}
	l.mu.Unlock()
	if !ok {
		return
	}
	if err := l.Talos.Destroy(addr); err != nil && !errors.Is(err, talos.ErrUnknownNode) {
		l.event("destroy-failed", fmt.Sprint(vmid), err.Error())
		return
	}
	l.event("destroyed", fmt.Sprint(vmid), addr.String())
}

// Addresses is the guest agent's answer once the node is up: the lease
// with its bridge network's prefix, then each Layer-2 VIP the node holds
// now (Talos elects one holder per VIP) with a full-length prefix, as
// Talos's VIP operator assigns it.
func (h *machineHooks) Addresses(vmid int) []netip.Prefix {
	l := h.lab()
	l.mu.Lock()
	addr, ok := l.vmAddr[vmid]
	l.mu.Unlock()
	if !ok {
		return nil
	}
	st, ok := l.Talos.Node(addr)
	if !ok || !st.Up {
		return nil
	}
	bits := 24
	for _, p := range l.opts.Bridges {
		if p.Contains(addr) {
			bits = p.Bits()
		}
	}
	out := []netip.Prefix{netip.PrefixFrom(addr, bits)}
	for _, vip := range st.VIPs {
		out = append(out, netip.PrefixFrom(vip, vip.BitLen()))
	}
	return out
}

// talosHooks starts each cluster's Kubernetes API and registers its nodes.
type talosHooks Lab

func (h *talosHooks) Bootstrapped(c talos.Cluster) {
	l := (*Lab)(h)
	addr, ok := c.APIAddr()
	if !ok {
		l.event("kube-failed", c.Name, "endpoint "+c.Endpoint.String()+" is not an address")
		return
	}
	k, err := kube.New(kube.Options{CACert: c.KubernetesCA.Cert, CAKey: c.KubernetesCA.Key, Addr: addr,
		Version: c.KubernetesVersion, ReadyDelay: l.opts.ReadyDelay, NodeMonitorGracePeriod: l.opts.nodeMonitorGracePeriod(), Logger: l.log,
		// The Deployments plugins install (MetalLB's controller, a
		// chart's workloads) turn available as their pods would run.
		DeploymentsAvailable: true,
		// An emptied namespace is gone a moment after its delete, as the
		// namespace controller finishes it.
		NamespaceFinalizeDelay: time.Second})
	if err != nil {
		l.event("kube-failed", c.Name, err.Error())
		return
	}
	// A cluster of the same name had an API before: it goes first, as it
	// may hold the address.
	l.mu.Lock()
	old, ok := l.kubes[c.Name]
	delete(l.kubes, c.Name)
	l.mu.Unlock()
	if ok {
		_ = old.Close()
	}
	if err := k.Start(context.Background()); err != nil {
		l.event("kube-failed", c.Name, err.Error())
		l.fatal(&ListenError{Addr: addr, What: "the Kubernetes API of cluster " + c.Name, Err: err})
		return
	}
	l.mu.Lock()
	l.kubes[c.Name] = k
	l.mu.Unlock()
	l.event("bootstrapped", c.Name, "Kubernetes "+c.KubernetesVersion+" API at "+addr.String())
}

// APIServing tells when a kube-apiserver comes to be and stops being behind
// the cluster's Kubernetes API; where it listens is APIEndpoints'.
func (h *talosHooks) APIServing(cluster string, serving bool) {
	l := (*Lab)(h)
	k, ok := l.Kube(cluster)
	if !ok {
		return
	}
	if serving {
		l.syncAPIVersion(cluster, k)
		l.event("kube-api-up", cluster, k.Addr().String())
	} else {
		l.event("kube-api-down", cluster, k.Addr().String()+": no control plane holds the endpoint")
	}
}

// APIEndpoints (talos.EndpointHooks) makes the cluster's Kubernetes API
// answer at exactly the addresses where a kube-apiserver is behind it, each
// with the serving certificate that kube-apiserver presents.
func (h *talosHooks) APIEndpoints(cluster string, eps []talos.APIEndpoint) {
	l := (*Lab)(h)
	k, ok := l.Kube(cluster)
	if !ok {
		return
	}
	kes := make([]kube.Endpoint, 0, len(eps))
	addrs := make([]string, 0, len(eps))
	for _, ep := range eps {
		kes = append(kes, kube.Endpoint{Addr: ep.Addr, Hosts: ep.SANs})
		addrs = append(addrs, ep.Addr.String())
	}
	if err := k.SetEndpoints(kes); err != nil {
		failed := k.Addr()
		for _, ep := range eps {
			if !slices.Contains(k.Addrs(), ep.Addr) {
				failed = ep.Addr
				break
			}
		}
		l.event("kube-failed", cluster, err.Error())
		l.fatal(&ListenError{Addr: failed, What: "the Kubernetes API of cluster " + cluster, Err: err})
		return
	}
	if len(addrs) == 0 {
		addrs = append(addrs, "none")
	}
	l.event("kube-endpoints", cluster, strings.Join(addrs, " "))
}

func (h *talosHooks) NodeJoined(cluster string, n talos.Node) {
	l := (*Lab)(h)
	k, ok := l.Kube(cluster)
	if !ok {
		return
	}
	err := k.AddNode(kube.Node{Name: n.Hostname, Addresses: []netip.Addr{n.Addr}, Role: string(n.Role), Labels: n.Labels, KubeletVersion: n.KubeletVersion, Annotations: n.Annotations})
	if err != nil {
		// Registered before: the kubelet is back.
		_ = k.SetKubeletVersion(n.Hostname, n.KubeletVersion)
		_ = k.SetNodeReady(n.Hostname, true)
	}
	l.event("node-joined", n.Hostname, cluster)
	l.uncordonBooted(k, n.Hostname)
}

// StaticPods posts the mirror pods of a control plane's static pods, and
// keeps the endpoint's /version at the API server version of the control
// plane that serves it.
func (h *talosHooks) StaticPods(cluster, hostname string, pods []talos.StaticPod) {
	l := (*Lab)(h)
	k, ok := l.Kube(cluster)
	if !ok {
		return
	}
	sp := make([]kube.StaticPod, 0, len(pods))
	for _, p := range pods {
		sp = append(sp, kube.StaticPod{Component: p.Component, Image: p.Image, ConfigVersion: p.ConfigVersion})
	}
	if err := k.SetStaticPods(hostname, sp); err != nil {
		l.event("kube-failed", cluster, err.Error())
	}
	l.syncAPIVersion(cluster, k)
	l.applyBootstrapManifests(cluster, k)
}

// applyBootstrapManifests creates the kube-proxy DaemonSet of Talos's
// bootstrap manifests, rendered from the config of the control plane that
// serves the API, unless it exists: Talos's ManifestApplyController only
// creates what is missing, so a later change of .cluster.proxy.image
// reaches the DaemonSet only when something updates it through the
// Kubernetes API (talosctl upgrade-k8s's manifest sync).
func (l *Lab) applyBootstrapManifests(cluster string, k *kube.Server) {
	image := l.Talos.ProxyImage(cluster)
	if image == "" {
		return
	}
	created, err := k.EnsureDaemonSet(kubeProxyDaemonSet(image))
	switch {
	case err != nil:
		l.event("kube-failed", cluster, err.Error())
	case created:
		l.event("kube-proxy-created", cluster, image)
	}
}

// kubeProxyDaemonSet is the kube-proxy DaemonSet as Talos renders it
// (internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/kube-proxy.go).
func kubeProxyDaemonSet(image string) *appsv1.DaemonSet {
	labels := map[string]string{"k8s-app": "kube-proxy", "tier": "node"}
	tmplLabels := map[string]string{"k8s-app": "kube-proxy", "tier": "node"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: metav1.NamespaceSystem, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy", "tier": "node"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: tmplLabels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "kube-proxy", Image: image,
						Command: []string{"/usr/local/bin/kube-proxy", "--proxy-mode=iptables"},
						Env: []corev1.EnvVar{
							{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
							{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
						},
						SecurityContext: &corev1.SecurityContext{Privileged: new(true)},
					}},
					HostNetwork:        true,
					PriorityClassName:  "system-cluster-critical",
					ServiceAccountName: "kube-proxy",
					Tolerations: []corev1.Toleration{
						{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
					},
				},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: new(intstr.FromInt32(1))},
			},
		},
	}
}

// syncAPIVersion sets the version the cluster's API answers at /version to
// that of the kube-apiserver image of the control plane holding the
// endpoint.
func (l *Lab) syncAPIVersion(cluster string, k *kube.Server) {
	if v := l.Talos.APIServerVersion(cluster); v != "" && v != k.Version() {
		if err := k.SetVersion(v); err == nil {
			l.event("kube-version", cluster, v)
		}
	}
}

// uncordonBooted is Talos's NodeApplyController on a booted machine: a
// Node that Talos cordoned (it carries talos.dev/cordoned) is made
// schedulable again and loses the annotation; a Node cordoned by anyone
// else stays cordoned.
func (l *Lab) uncordonBooted(k *kube.Server, name string) {
	talosCordoned := false
	for _, n := range k.Nodes() {
		if n.Name == name && n.Spec.Unschedulable {
			_, talosCordoned = n.Annotations[AnnotationCordoned]
		}
	}
	if !talosCordoned {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := nodeClient(k, name)
	if err == nil {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if _, ok := node.Annotations[AnnotationCordoned]; !ok || !node.Spec.Unschedulable {
				return nil
			}
			node.Spec.Unschedulable = false
			delete(node.Annotations, AnnotationCordoned)
			_, err = c.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			return err
		})
	}
	if err != nil {
		l.event("uncordon-failed", name, err.Error())
		return
	}
	l.event("uncordoned", name, "cordoned by Talos")
}

func (h *talosHooks) NodeLeft(cluster, hostname string, shutdown bool) {
	l := (*Lab)(h)
	if k, ok := l.Kube(cluster); ok {
		_ = k.StopKubelet(hostname, shutdown)
	}
	detail := cluster + ", power lost"
	if shutdown {
		detail = cluster + ", kubelet shut down by Talos"
	}
	l.event("node-left", hostname, detail)
}

// AnnotationCordoned marks a Node that Talos cordoned, and will uncordon
// when the machine boots (pkg/machinery/constants AnnotationCordonedKey).
const AnnotationCordoned = "talos.dev/cordoned"

// nodeClient is a client of the cluster's API as the node's kubelet.
func nodeClient(k *kube.Server, node string) (kubernetes.Interface, error) {
	cfg, err := k.ClientConfig("system:node:"+node, "system:nodes")
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// Cordon is Talos's NodeApplyController with the machine resetting (or
// shutting down, or upgrading): a schedulable Node is marked unschedulable
// and annotated talos.dev/cordoned; one already unschedulable is left
// alone. It retries until the Node is unschedulable or ctx ends, as the
// controller retries and the reset waits for it.
func (h *talosHooks) Cordon(ctx context.Context, cluster, hostname string) error {
	l := (*Lab)(h)
	var last error
	for {
		last = l.cordonOnce(ctx, cluster, hostname)
		if last == nil {
			return nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return last
		case <-t.C:
		}
	}
}

func (l *Lab) cordonOnce(ctx context.Context, cluster, hostname string) error {
	k, ok := l.Kube(cluster)
	if !ok {
		return fmt.Errorf("cluster %s has no Kubernetes API", cluster)
	}
	c, err := nodeClient(k, hostname)
	if err != nil {
		return err
	}
	node, err := c.CoreV1().Nodes().Get(ctx, hostname, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if node.Spec.Unschedulable {
		return nil
	}
	node.Spec.Unschedulable = true
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[AnnotationCordoned] = "true"
	_, err = c.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	return err
}

// Drain is Talos's drain (pkg/kubernetes Drain) as the node's kubelet: the
// pods bound to the Node are listed, mirror pods, pods without a
// controller and DaemonSet pods skipped, the others evicted in parallel
// with a 60 s grace period, asked again every retry while the eviction is
// refused with 429, and waited for until they are gone (polled every 0.6
// retry, for up to 12 retries). Errors other than the list's are only
// logged, as Talos logs them: each pod not evicted is a lab event
// "drain-warning" of the node.
func (h *talosHooks) Drain(ctx context.Context, cluster, hostname string, retry time.Duration) error {
	l := (*Lab)(h)
	k, ok := l.Kube(cluster)
	if !ok {
		return fmt.Errorf("cluster %s has no Kubernetes API", cluster)
	}
	c, err := nodeClient(k, hostname)
	if err != nil {
		return err
	}
	pods, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.SelectorFromSet(fields.Set{"spec.nodeName": hostname}).String(),
	})
	if err != nil {
		return fmt.Errorf("cannot get pods for node %s: %w", hostname, err)
	}
	var wg sync.WaitGroup
	for _, pod := range pods.Items {
		if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		ref := metav1.GetControllerOf(&pod)
		if ref == nil || ref.Kind == "DaemonSet" {
			continue
		}
		wg.Go(func() {
			if err := evictAndWait(ctx, c, pod, retry); err != nil {
				// Talos logs "WARNING: failed to evict pod" and goes on.
				l.event("drain-warning", hostname, fmt.Sprintf("failed to evict pod %s/%s: %v", pod.Namespace, pod.Name, err))
			}
		})
	}
	wg.Wait()
	return nil
}

// evictAndWait is Talos's evict and waitForPodDeleted for one pod.
func evictAndWait(ctx context.Context, c kubernetes.Interface, pod corev1.Pod, retry time.Duration) error {
	grace := int64(60)
	for {
		err := c.CoreV1().Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace},
		})
		switch {
		case apierrors.IsTooManyRequests(err):
			if err := sleepCtx(ctx, retry); err != nil {
				return err
			}
			continue
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("failed to evict pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		break
	}
	deadline := time.Now().Add(12 * retry)
	for {
		p, err := c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), err == nil && p.UID != pod.UID:
			return nil
		case err != nil && ctx.Err() != nil:
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("failed waiting on pod %s/%s to be deleted: pod is still running on the node", pod.Namespace, pod.Name)
		}
		if err := sleepCtx(ctx, retry*3/5); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
