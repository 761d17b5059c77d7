package openstack

import (
	"net/netip"
	"time"
)

// Nova's vm_state, task_state and power_state values used here
// (nova/compute/vm_states.py, task_states.py, power_state.py).
const (
	vmBuilding = "building"
	vmActive   = "active"
	vmStopped  = "stopped"
	vmError    = "error"

	taskSpawning      = "spawning"
	taskDeleting      = "deleting"
	taskRebooting     = "rebooting"
	taskRebootingHard = "rebooting_hard"
	taskPoweringOff   = "powering-off"
	taskPoweringOn    = "powering-on"

	powerNoState  = 0
	powerRunning  = 1
	powerShutdown = 4
)

// novaState is Nova's part of the Server. Guarded by Server.mu.
type novaState struct {
	servers map[string]*server
	// order is the creation order of the servers (IDs).
	order []string
	// failBuild holds, per server name, the fault messages of the next
	// builds that must fail (FailBuild).
	failBuild map[string][]string
	// volumes are the boot volumes Nova created from images, by ID.
	volumes map[string]*bootVolume
	// ports is Nova's view of Neutron; nil means the Server itself.
	ports portBinder
	// hooks is the ordered queue of MachineHooks calls, drained by one
	// goroutine at a time (hooksRunning).
	hooks        []func(MachineHooks)
	hooksRunning bool
}

func newNovaState() *novaState {
	return &novaState{
		servers:   map[string]*server{},
		failBuild: map[string][]string{},
		volumes:   map[string]*bootVolume{},
	}
}

// portBinder is what Nova asks Neutron when it boots and deletes servers.
// The Server implements it (neutron.go, neutron_seam.go); tests may put
// a stand-in in novaState.ports.
type portBinder interface {
	bindPort(portID, serverID, zone string) (addrs []netip.Addr, mac string, err error)
	unbindPorts(serverID string)
	networkNameOfPort(portID string) string
	allocatePort(networkID, serverID, zone string) (portID string, addrs []netip.Addr, mac string, err error)
	releasePort(portID string)
}

// server is a Nova instance.
type server struct {
	id, name, description string
	hasDescription        bool
	hostname              string
	created, updated      time.Time
	launched              time.Time
	flavor                Flavor
	// imageRef is the image the server was created from ("" when it boots
	// from a volume); bootImage is the image of its root disk either way.
	imageRef, bootImage string
	zone                string
	requestedZone       string
	vmState, taskState  string
	powerState          int
	metadata            map[string]string
	tags                []string
	userData            []byte
	keyName             string
	configDrive         bool
	accessIPv4          string
	accessIPv6          string
	securityGroups      []string
	schedulerHints      map[string]any
	ports               []serverPort
	volumes             []attachedVolume
	fault               *serverFault
	// failMessage, when set, makes the build end in ERROR with it.
	failMessage string
	// gen changes with each state transition; a timer of an older
	// transition does nothing.
	gen int
	// up is true between ServerUp and ServerDown.
	up bool
}

// serverPort is a port bound to a server.
type serverPort struct {
	id, network string
	addrs       []netip.Addr
	mac         string
	// allocated is true when Nova created the port (networks: [{uuid}])
	// and must release it when the server goes.
	allocated bool
}

// attachedVolume is an entry of os-extended-volumes:volumes_attached.
type attachedVolume struct {
	id                  string
	deleteOnTermination bool
}

// bootVolume is a volume Nova created from an image for a server.
type bootVolume struct {
	id, image, server string
	sizeGB            int
}

// serverFault is the fault of a server in ERROR.
type serverFault struct {
	code    int
	message string
	created time.Time
}

// status is the server's API status (nova.api.openstack.common
// _STATE_MAP, for the states this emulator uses).
func (sv *server) status() string {
	switch sv.vmState {
	case vmBuilding:
		return "BUILD"
	case vmStopped:
		return "SHUTOFF"
	case vmError:
		return "ERROR"
	case vmActive:
		switch sv.taskState {
		case taskRebooting:
			return "REBOOT"
		case taskRebootingHard:
			return "HARD_REBOOT"
		}
		return "ACTIVE"
	}
	return "UNKNOWN"
}

// info is the ServerInfo given to MachineHooks.ServerUp.
func (sv *server) info() ServerInfo {
	in := ServerInfo{
		ID: sv.id, Name: sv.name, UserData: append([]byte(nil), sv.userData...),
		Image: sv.bootImage, Flavor: sv.flavor.Name, AvailabilityZone: sv.zone,
		Tags: append([]string(nil), sv.tags...),
	}
	for _, p := range sv.ports {
		in.Addrs = append(in.Addrs, p.addrs...)
	}
	return in
}

// portSeam is the portBinder in use. The caller holds s.mu.
func (s *Server) portSeam() portBinder {
	if s.nova.ports != nil {
		return s.nova.ports
	}
	return s
}

// notify queues a MachineHooks call; the calls run in order on one
// goroutine without s.mu held. The caller holds s.mu.
func (s *Server) notify(call func(MachineHooks)) {
	if s.opts.Machines == nil {
		return
	}
	s.nova.hooks = append(s.nova.hooks, call)
	if s.nova.hooksRunning {
		return
	}
	s.nova.hooksRunning = true
	go s.runHooks()
}

func (s *Server) runHooks() {
	for {
		s.mu.Lock()
		if len(s.nova.hooks) == 0 {
			s.nova.hooksRunning = false
			s.mu.Unlock()
			return
		}
		call := s.nova.hooks[0]
		s.nova.hooks = s.nova.hooks[1:]
		s.mu.Unlock()
		call(s.opts.Machines)
	}
}

// serverUp marks a server running and tells the hooks. The caller holds
// s.mu.
func (s *Server) serverUp(sv *server) {
	sv.up = true
	info := sv.info()
	// The guest reads its user data from the config drive, or from the
	// metadata service when its ports may reach 169.254.169.254.
	reachable := false
	for _, p := range sv.ports {
		reachable = reachable || s.metadataReachable(p.id)
	}
	if !sv.configDrive && !reachable {
		info.UserData = nil
		info.UserDataUnreachable = true
	}
	s.notify(func(m MachineHooks) { m.ServerUp(info) })
}

// serverDown marks a running server stopped and tells the hooks. The
// caller holds s.mu.
func (s *Server) serverDown(sv *server) {
	if !sv.up {
		return
	}
	sv.up = false
	id := sv.id
	s.notify(func(m MachineHooks) { m.ServerDown(id) })
}

// buildDelay is how long BUILD and the other transitions last.
func (s *Server) buildDelay() time.Duration {
	if s.opts.BuildDelay > 0 {
		return s.opts.BuildDelay
	}
	return 50 * time.Millisecond
}

// after runs fn with s.mu held after the transition delay, unless the
// server changed state (or went away) in the meantime. The caller holds
// s.mu.
func (s *Server) after(sv *server, fn func(sv *server)) {
	sv.gen++
	gen := sv.gen
	time.AfterFunc(s.buildDelay(), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if cur := s.nova.servers[sv.id]; cur == sv && sv.gen == gen {
			sv.gen++
			sv.updated = s.now().UTC()
			fn(sv)
		}
	})
}

// FailBuild makes the next server created with this name end its build in
// ERROR with a fault {code: 500, message} instead of turning ACTIVE (its
// ports are unbound, as Nova deallocates a failed build's network, and no
// ServerUp is called).
func (s *Server) FailBuild(name, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nova.failBuild[name] = append(s.nova.failBuild[name], message)
}

// ImageData returns the bytes uploaded (or imported) to a Glance image, so
// that the lab can know what a server boots (ServerInfo.Image).
func (s *Server) ImageData(id string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	img := s.glance.images[id]
	if img == nil || img.data == nil {
		return nil, false
	}
	return append([]byte(nil), img.data...), true
}

// ServerState is a server as Servers reports it.
type ServerState struct {
	ID, Name string
	// VMState is Nova's vm_state (building, active, error, ...).
	VMState string
}

// Servers returns every server that exists, in creation order.
func (s *Server) Servers() []ServerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nova == nil {
		return nil
	}
	var out []ServerState
	for _, id := range s.nova.order {
		if sv, ok := s.nova.servers[id]; ok {
			out = append(out, ServerState{ID: sv.id, Name: sv.name, VMState: sv.vmState})
		}
	}
	return out
}
