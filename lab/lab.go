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

	"github.com/taloscluster/taloscluster/lab/factory"
	"github.com/taloscluster/taloscluster/lab/internal/connabort"
	"github.com/taloscluster/taloscluster/lab/kube"
	"github.com/taloscluster/taloscluster/lab/labca"
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
	// OnFatal, when set, is told when the running lab cannot serve an
	// address it needs: a node's Talos API (the node stays off after a
	// second of retries) or a bootstrapped cluster's Kubernetes API at its
	// endpoint (the cluster has none). err is a *ListenError. The lab goes
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

func (o Options) statsInterval() time.Duration {
	switch {
	case o.StatsInterval < 0:
		return 0
	case o.StatsInterval == 0:
		return 10 * time.Second
	}
	return o.StatsInterval
}

// Lab is a running simulated datacenter: a Proxmox VE cluster whose VMs
// boot into simulated Talos nodes, an Image Factory, and one Kubernetes API
// per bootstrapped cluster. Everything listens on loopback addresses.
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

	servers []*http.Server

	mu     sync.Mutex
	kubes  map[string]*kube.Server // by cluster name
	leases map[string]netip.Addr   // by MAC
	vmAddr map[int]netip.Addr      // by VM id, while powered
	vmNode map[int]netip.Addr      // by VM id, from its first power-on until it is deleted
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
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ca, err := labca.New("taloslab CA")
	if err != nil {
		return nil, err
	}
	l := &Lab{opts: o, log: o.Logger, CA: ca, kubes: map[string]*kube.Server{}, leases: map[string]netip.Addr{}, vmAddr: map[int]netip.Addr{}, vmNode: map[int]netip.Addr{},
		TokenID: pve.DefaultTokenID, TokenSecret: pve.DefaultTokenSecret,
		RestrictedTokenID: pve.RestrictedTokenID, RestrictedTokenSecret: pve.RestrictedTokenSecret}
	l.Talos = talos.NewWorld(talos.Options{
		BootDelay: o.BootDelay, InstallDelay: o.InstallDelay, RebootDelay: o.RebootDelay,
		Hooks: (*talosHooks)(l), Logger: o.Logger,
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
		Tokens: []pve.Token{pve.RestrictedToken()}, ACLs: pve.RestrictedACLs(),
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
	host := c.Endpoint.Hostname()
	port := c.Endpoint.Port()
	if port == "" {
		port = "6443"
	}
	addr, err := netip.ParseAddrPort(net.JoinHostPort(host, port))
	if err != nil && c.VIP.IsValid() {
		addr = netip.AddrPortFrom(c.VIP, 6443)
	} else if err != nil {
		l.event("kube-failed", c.Name, "endpoint "+c.Endpoint.String()+" is not an address")
		return
	}
	k, err := kube.New(kube.Options{CACert: c.KubernetesCA.Cert, CAKey: c.KubernetesCA.Key, Addr: addr,
		Version: c.KubernetesVersion, ReadyDelay: l.opts.ReadyDelay, Logger: l.log})
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

func (h *talosHooks) NodeJoined(cluster string, n talos.Node) {
	l := (*Lab)(h)
	k, ok := l.Kube(cluster)
	if !ok {
		return
	}
	err := k.AddNode(kube.Node{Name: n.Hostname, Addresses: []netip.Addr{n.Addr}, Role: string(n.Role), Labels: n.Labels, KubeletVersion: n.KubeletVersion})
	if err != nil {
		// Registered before: the kubelet is back.
		_ = k.SetKubeletVersion(n.Hostname, n.KubeletVersion)
		_ = k.SetNodeReady(n.Hostname, true)
	}
	l.event("node-joined", n.Hostname, cluster)
}

func (h *talosHooks) NodeLeft(cluster, hostname string) {
	l := (*Lab)(h)
	if k, ok := l.Kube(cluster); ok {
		_ = k.SetNodeReady(hostname, false)
	}
	l.event("node-left", hostname, cluster)
}
