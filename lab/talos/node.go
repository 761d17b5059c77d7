package talos

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/protobuf/proto"
)

// Listening on a node's address is retried this often, this many times.
const (
	listenRetry    = 10 * time.Millisecond
	maxListenTries = 100
)

// controlPlaneLabel is the node-role label Talos puts on control planes.
const controlPlaneLabel = "node-role.kubernetes.io/control-plane"

// node is one simulated machine: what is on its disk and what runs in the
// current boot. Every field is guarded by World.mu.
type node struct {
	addr      netip.Addr
	bootImage string

	// Disk.
	installed bool
	persisted config.Provider // the config on the STATE partition
	image     string          // the installed installer image
	nextImage string          // installed by an upgrade, booted next time
	etcdData  bool            // the etcd data directory is not empty
	// images is the image store of the CRI containerd (on EPHEMERAL, so
	// it survives reboots), by namespace; see image.go.
	images map[containerdStore]map[string]storedImage
	// registeredOnce: the kubelet registered since the install, so the
	// Kubernetes Node object exists.
	registeredOnce bool
	memberID       uint64 // the member the etcd data belongs to

	// The current boot.
	mode           Mode
	gen            uint64 // bumped at every power transition; stale timers check it
	cfg            config.Provider
	cluster        *cluster
	inst           *instance
	ready          bool // services up: etcd may run, kubelet may register
	etcdStopped    bool // left etcd in this boot; it stays out until a reboot
	etcdFailed     bool // its member was removed under it; etcd fails until wiped
	etcdStarting   bool // joined as a learner whose etcd has not started yet
	joinRetry      bool // a refused etcd join is to be tried again
	kubeletStopped bool // a sequence stopped the kubelet in this boot
	// kubeletRestarts counts the kubelet restarts of this boot (a live
	// change of its spec); kubeletRestarting is set while one runs: the
	// service is not running and the kubelet posts nothing.
	kubeletRestarts   int
	kubeletRestarting bool
	bootID            string // /proc/sys/kernel/random/boot_id of this boot
	// vipsThisBoot are the shared IPs the node held in this boot: Talos's
	// accumulative node addresses, which its API server certificate names.
	vipsThisBoot []netip.Addr
	upgrading    bool // a LifecycleService install or upgrade runs
	// memImages is the store of the system containerd, whose root is on
	// a tmpfs: it is empty at every boot.
	memImages      map[containerdStore]map[string]storedImage
	announced      *Node
	applyRebooting bool // an apply took the node into a reboot
	applying       bool // an ApplyConfiguration call is in progress
	// Control-plane components of this boot: the config each was last
	// rendered from, its resource version, and what was last announced.
	compConfig    map[string]any
	compVersion   map[string]int
	compAnnounced []StaticPod
	listenTries   int
	boots         int
	tryGen        uint64
	events        []event
	eventsCh      chan struct{} // closed and replaced when an event is added

	// activeConfig and persistentConfig are machined's MachineConfig
	// resources of this boot (IDs v1alpha1 and persistent); nil when it
	// has none.
	activeConfig, persistentConfig *configResource

	faults faults
}

func newNode(addr netip.Addr) *node {
	return &node{addr: addr, mode: ModeOff, eventsCh: make(chan struct{})}
}

// install puts cfg on the node's disk with the installer image it names.
func (n *node) install(cfg config.Provider) {
	n.installed = true
	n.persisted = cfg
	n.image = cfg.Machine().Install().Image()

	if n.image == "" {
		n.image = n.bootImage
	}
}

// wipe erases the node's system disk.
func (n *node) wipe(state, ephemeral bool) {
	if state {
		n.installed = false
		n.persisted = nil
		n.image = ""
		n.nextImage = ""
		n.registeredOnce = false
	}

	if ephemeral {
		n.etcdData = false
		n.memberID = 0
		n.images = nil
	}
}

func (n *node) runningImage() string {
	if n.mode == ModeMaintenance || !n.installed || n.image == "" {
		return n.bootImage
	}

	return n.image
}

func (n *node) version() string {
	v, _ := parseImage(n.runningImage())

	return v
}

func (n *node) hostname() string {
	if n.cfg != nil {
		if name := configHostname(n.cfg); name != "" {
			return name
		}
	}

	b := n.addr.As4()

	return fmt.Sprintf("talos-%02x%x-%02x%x", b[1], b[2]&0xf, b[3], b[2]>>4)
}

func configHostname(cfg config.Provider) string {
	if h := cfg.NetworkHostnameConfig(); h != nil {
		return h.Hostname()
	}

	return ""
}

func (n *node) role() Role {
	return configRole(n.cfg)
}

func configRole(cfg config.Provider) Role {
	if cfg == nil || cfg.Machine() == nil {
		return ""
	}

	switch cfg.Machine().Type() {
	case machinetype.TypeControlPlane, machinetype.TypeInit:
		return RoleControlPlane
	case machinetype.TypeWorker:
		return RoleWorker
	default:
		return ""
	}
}

func (n *node) controlPlane() bool {
	return n.role() == RoleControlPlane
}

// runningReady reports whether the node's API answers in running mode and its
// services are ready.
func (n *node) runningReady() bool {
	return n.inst != nil && n.mode == ModeRunning && n.ready
}

// kubeNode is what the node's kubelet registers.
func (n *node) kubeNode() *Node {
	labels := map[string]string{}
	maps.Copy(labels, n.cfg.Machine().NodeLabels())

	if n.controlPlane() {
		labels[controlPlaneLabel] = ""
	}

	kubelet, _ := parseImage(n.cfg.Machine().Kubelet().Image())

	annotations := map[string]string{}
	maps.Copy(annotations, n.cfg.Machine().NodeAnnotations())

	if _, schematic := parseImage(n.runningImage()); schematic != "" {
		annotations[schematicAnnotation] = schematic
	}

	return &Node{
		Hostname:       n.hostname(),
		Addr:           n.addr,
		Role:           n.role(),
		KubeletVersion: kubelet,
		TalosVersion:   n.version(),
		Labels:         labels,
		Annotations:    annotations,
	}
}

// schematicAnnotation is the Node annotation Talos gives the schematic of
// an Image Factory image.
const schematicAnnotation = "extensions.talos.dev/schematic"

func sameNode(a, b *Node) bool {
	return a.Hostname == b.Hostname && a.Addr == b.Addr && a.Role == b.Role &&
		a.KubeletVersion == b.KubeletVersion && a.TalosVersion == b.TalosVersion &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations)
}

// Lifecycle. Every method below is called with w.mu held.

// powerOn starts a boot whose API comes up after delay.
func (w *World) powerOn(n *node, delay time.Duration) {
	n.gen++
	n.mode = ModeBooting

	if n.faults.neverBoot {
		w.log.Info("node never boots", "node", n.addr)

		return
	}

	g := n.gen

	time.AfterFunc(delay, func() {
		w.mu.Lock()

		if !w.closed && n.gen == g && w.nodes[n.addr] == n {
			w.bringUp(n)
		}

		w.mu.Unlock()
	})
}

// bringUp starts the API of a booting node.
func (w *World) bringUp(n *node) {
	if n.faults.neverBoot {
		return
	}

	if n.nextImage != "" {
		if n.faults.rollbackUpgrade > 0 {
			n.faults.rollbackUpgrade--
			w.log.Info("upgrade rolled back", "node", n.addr, "image", n.nextImage)
		} else {
			n.image = n.nextImage
		}

		n.nextImage = ""
	}

	var cfg config.Provider
	if n.installed {
		cfg = n.persisted
	}

	n.cfg = cfg
	n.activeConfig, n.persistentConfig = nil, nil
	n.cluster = nil
	n.ready = false
	n.etcdStopped = false
	n.etcdFailed = n.etcdData && n.etcdFailed
	n.etcdStarting = false
	n.joinRetry = false
	n.kubeletStopped = false
	n.kubeletRestarts, n.kubeletRestarting = 0, false
	n.upgrading = false
	n.memImages = nil

	if !n.etcdData {
		// A learner added in the last boot whose etcd never started left
		// no data: the node joins again.
		n.memberID = 0
	}
	n.applyRebooting = false
	n.applying = false
	n.compConfig, n.compVersion, n.compAnnounced = nil, nil, nil
	n.events = nil

	if cfg == nil {
		n.mode = ModeMaintenance
	} else {
		n.mode = ModeRunning
		n.cluster = w.clusterFor(cfg)
		// Loaded from STATE: machined sets the running config only.
		n.activeConfig = setConfig(nil, cfg)
	}

	inst, err := w.listen(n)
	if err != nil {
		// The previous boot's socket may still be closing: retry a while.
		n.mode = ModeBooting
		n.listenTries++

		if n.listenTries > maxListenTries {
			w.log.Error("node api did not start", "node", n.addr, "err", err)
			n.mode = ModeOff
			n.cfg = nil
			n.activeConfig = nil
			n.cluster = nil
			n.listenTries = 0

			var opErr *net.OpError
			if fn := w.opts.OnListenError; fn != nil && errors.As(err, &opErr) {
				go fn(n.addr, err)
			}

			return
		}

		g := n.gen

		time.AfterFunc(listenRetry, func() {
			w.mu.Lock()
			defer w.mu.Unlock()

			if !w.closed && n.gen == g && w.nodes[n.addr] == n && n.inst == nil {
				w.bringUp(n)
			}
		})

		return
	}

	n.listenTries = 0

	n.inst = inst
	n.boots++
	// The kernel draws a new random boot ID at every boot.
	n.bootID = uuid.NewString()
	n.vipsThisBoot = nil

	w.log.Info("node up", "node", n.addr, "mode", n.mode, "version", n.version())

	if n.mode == ModeMaintenance {
		w.emit(n, "", &machine.MachineStatusEvent{
			Stage:  machine.MachineStatusEvent_MAINTENANCE,
			Status: &machine.MachineStatusEvent_MachineStatus{Ready: true},
		})

		return
	}

	w.emit(n, "", &machine.SequenceEvent{Sequence: "boot", Action: machine.SequenceEvent_STOP})

	if w.opts.ServicesDelay <= 0 {
		w.becomeReady(n)

		return
	}

	g := n.gen

	time.AfterFunc(w.opts.ServicesDelay, func() {
		w.mu.Lock()

		if !w.closed && n.gen == g && n.inst != nil {
			w.becomeReady(n)
		}

		w.mu.Unlock()
	})
}

func (w *World) becomeReady(n *node) {
	n.ready = true

	w.emit(n, "", &machine.MachineStatusEvent{
		Stage:  machine.MachineStatusEvent_RUNNING,
		Status: &machine.MachineStatusEvent_MachineStatus{Ready: true},
	})

	w.settle(n.cluster)
}

// goDown stops the node's API and everything running on it. shutdown
// tells whether Talos took it down (its kubelet shut down gracefully) or
// the machine went down under it.
func (w *World) goDown(n *node, shutdown bool) {
	n.gen++

	if n.inst != nil {
		inst := n.inst
		n.inst = nil

		inst.closeListener()

		go inst.stop(stopGrace)
	}

	n.ready = false
	w.kubeletGone(n, shutdown)

	if n.cluster != nil {
		w.settle(n.cluster)
	}
}

// kubeletGone tells Hooks that n's kubelet stopped, if it was registered.
func (w *World) kubeletGone(n *node, shutdown bool) {
	if n.announced != nil && n.cluster != nil {
		clusterName, hostname := n.cluster.name, n.announced.Hostname
		w.hooks.push(func(h Hooks) { h.NodeLeft(clusterName, hostname, shutdown) })
	}

	n.announced = nil
	n.compAnnounced = nil
}

// powerOff takes the node down and off: through Talos's shutdown
// sequence, or by cutting the power.
func (w *World) powerOff(n *node, shutdown bool) {
	w.goDown(n, shutdown)
	n.mode = ModeOff
	w.log.Info("node powered off", "node", n.addr)
}

// reboot takes the node down through Talos's sequence and boots it again
// after the reboot delay plus extra.
func (w *World) reboot(n *node, extra time.Duration) {
	w.goDown(n, true)
	w.powerOn(n, w.opts.RebootDelay+extra)
}

// later runs fn after the shutdown delay unless the node changed power state
// meanwhile. It is used to act after a call's answer went out.
func (w *World) later(n *node, fn func()) {
	g := n.gen

	time.AfterFunc(w.opts.ShutdownDelay, func() {
		w.mu.Lock()

		if !w.closed && n.gen == g && w.nodes[n.addr] == n {
			fn()
		}

		w.mu.Unlock()
	})
}

// emit records a runtime event of the current boot.
func (w *World) emit(n *node, actorID string, payload proto.Message) {
	w.eventID++

	ev, err := newEvent(fmt.Sprintf("%020d", w.eventID), actorID, payload)
	if err != nil {
		w.log.Error("encoding event", "err", err)

		return
	}

	n.events = append(n.events, event{ev: ev, at: time.Now()})

	close(n.eventsCh)
	n.eventsCh = make(chan struct{})
}

// talos114 reports whether the node runs Talos 1.14 or later, whose
// machined applies every configuration change live.
func (n *node) talos114() bool {
	return versionAtLeast(n.version(), 1, 14)
}

// versionAtLeast reports whether the version tag v (such as "v1.14.0-rc.1")
// is major.minor or later; false when v is not a version tag.
func versionAtLeast(v string, major, minor int) bool {
	var ma, mi int

	if _, err := fmt.Sscanf(v, "v%d.%d", &ma, &mi); err != nil {
		return false
	}

	return ma > major || ma == major && mi >= minor
}

// Control-plane component IDs (pkg/machinery/resources/k8s).
const (
	componentAPIServer         = "kube-apiserver"
	componentControllerManager = "kube-controller-manager"
	componentScheduler         = "kube-scheduler"
)

// staticPods renders the control plane's static pods from its running
// config; a component whose config changed since the last rendering in
// this boot gets the next config version, as Talos's controllers update
// its config resource. Nil for a worker.
func (n *node) staticPods() []StaticPod {
	if !n.controlPlane() || n.cfg.RawV1Alpha1() == nil {
		return nil
	}

	cc := n.cfg.RawV1Alpha1().ClusterConfig
	if cc == nil {
		return nil
	}

	if n.compConfig == nil {
		n.compConfig, n.compVersion = map[string]any{}, map[string]int{}
	}

	comps := []struct {
		id    string
		image string
		cfg   any
	}{
		{componentAPIServer, n.cfg.Cluster().APIServer().Image(), cc.APIServerConfig},
		{componentControllerManager, n.cfg.Cluster().ControllerManager().Image(), cc.ControllerManagerConfig},
		{componentScheduler, n.cfg.Cluster().Scheduler().Image(), cc.SchedulerConfig},
	}

	out := make([]StaticPod, 0, len(comps))

	for _, c := range comps {
		if prev, ok := n.compConfig[c.id]; !ok || !reflect.DeepEqual(prev, c.cfg) {
			n.compConfig[c.id] = c.cfg
			n.compVersion[c.id]++
		}

		out = append(out, StaticPod{Component: c.id, Image: c.image, ConfigVersion: strconv.Itoa(n.compVersion[c.id])})
	}

	return out
}
