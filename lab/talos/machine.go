package talos

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// machineServer implements the MachineService calls the engine makes. The
// node a call is for comes from the call context (see callOf).
type machineServer struct {
	machine.UnimplementedMachineServiceServer
}

// lock locks the world for a handler and checks that the node is still up.
func (c *call) lock() error {
	c.w.mu.Lock()

	if err := c.check(); err != nil {
		c.w.mu.Unlock()

		return err
	}

	return nil
}

func (c *call) unlock() { c.w.mu.Unlock() }

// controlPlaneOnly answers like Talos does for control-plane APIs on other
// nodes.
func controlPlaneOnly(n *node, api string) error {
	if n.cfg == nil {
		return status.Errorf(codes.Unimplemented, "machine type is not set, cannot use %s API", api)
	}

	if !n.controlPlane() {
		return status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
	}

	return nil
}

func newActorID() string {
	return rand.Text()
}

// Version answers the Talos version of the running image.
func (machineServer) Version(ctx context.Context, _ *emptypb.Empty) (*machine.VersionResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.unlock()

	n := c.node

	v := &machine.Version{
		Version: &machine.VersionInfo{
			Tag:       n.version(),
			Sha:       "lab",
			GoVersion: runtime.Version(),
			Os:        "linux",
			Arch:      "amd64",
		},
		Platform: &machine.PlatformInfo{Name: "nocloud", Mode: "cloud"},
	}

	if n.cfg != nil {
		v.Features = &machine.FeaturesInfo{Rbac: true}
	}

	return &machine.VersionResponse{Messages: []*machine.Version{v}}, nil
}

// Hostname answers the node's hostname.
func (machineServer) Hostname(ctx context.Context, _ *emptypb.Empty) (*machine.HostnameResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.unlock()

	return &machine.HostnameResponse{Messages: []*machine.Hostname{{Hostname: c.node.hostname()}}}, nil
}

// ServiceList answers the node's services with their state and health.
func (machineServer) ServiceList(ctx context.Context, _ *emptypb.Empty) (*machine.ServiceListResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.unlock()

	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{{Services: c.w.services(c.node)}}}, nil
}

// serviceState is the state and health of one service.
type serviceState struct {
	state   string
	healthy bool
	known   bool // health is known
	message string
}

func (w *World) services(n *node) []*machine.ServiceInfo {
	running := serviceState{state: "Running", healthy: true, known: true}
	states := map[string]serviceState{
		"machined": running,
		"udevd":    running,
	}

	if n.mode == ModeRunning {
		states["apid"] = running
		states["containerd"] = running
		states["cri"] = running
		states["syslogd"] = running

		switch {
		case n.kubeletStopped, n.kubeletRestarting:
			states["kubelet"] = serviceState{state: "Finished", message: "Service finished successfully"}
		case n.ready:
			states["kubelet"] = running
		default:
			states["kubelet"] = serviceState{state: "Preparing", message: "Running pre state"}
		}

		if n.controlPlane() {
			states["trustd"] = running
			states["etcd"] = w.etcdService(n)
		}
	}

	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range states {
			if !yield(id) {
				return
			}
		}
	})

	now := timestamppb.Now()
	out := make([]*machine.ServiceInfo, 0, len(ids))

	for _, id := range ids {
		s := states[id]
		out = append(out, &machine.ServiceInfo{
			Id:    id,
			State: s.state,
			Events: &machine.ServiceEvents{Events: []*machine.ServiceEvent{{
				Msg: s.message, State: s.state, Ts: now,
			}}},
			Health: &machine.ServiceHealth{
				Unknown:     !s.known,
				Healthy:     s.healthy,
				LastMessage: s.message,
				LastChange:  now,
			},
		})
	}

	return out
}

// etcdService is the state of a control plane's etcd service.
func (w *World) etcdService(n *node) serviceState {
	switch {
	case !n.ready:
		return serviceState{state: "Preparing", message: "Running pre state"}
	case n.etcdFailed:
		return serviceState{state: "Failed", known: true, message: "the member has been permanently removed from the cluster"}
	case n.etcdStopped:
		return serviceState{state: "Finished", message: "Service finished successfully"}
	case n.etcdStarting:
		return serviceState{state: "Preparing", message: "Running pre state"}
	case !n.etcdData:
		return serviceState{state: "Preparing", message: "Waiting for etcd to be bootstrapped or to join the cluster"}
	}

	m := w.findMember(n.cluster, n.memberID)
	if m == nil {
		return serviceState{state: "Running", known: true, message: "member not found in the cluster"}
	}

	if m.learner {
		// The health check reads a key through the local member, which a
		// learner refuses.
		return serviceState{state: "Running", known: true, message: errNotSupportedForLearner.Error()}
	}

	if !w.quorum(n.cluster) {
		return serviceState{state: "Running", known: true, message: errNoLeader.Error()}
	}

	return serviceState{state: "Running", healthy: true, known: true}
}

// Bootstrap bootstraps etcd on a control plane.
func (machineServer) Bootstrap(ctx context.Context, _ *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.unlock()

	w, n := c.w, c.node

	if n.mode == ModeRunning && !n.ready {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap is not available yet")
	}

	if err := controlPlaneOnly(n, "bootstrap"); err != nil {
		return nil, err
	}

	if n.cfg.Cluster().Etcd().CA() == nil {
		return nil, status.Error(codes.InvalidArgument, "etcd is not configured, bootstrap is not possible")
	}

	if n.etcdData || n.etcdStopped {
		return nil, status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}

	cl := n.cluster
	cl.bootstraps++

	if cl.bootstrapped {
		// A second etcd cluster of one member; the lab only counts it.
		w.log.Warn("second bootstrap of a cluster", "cluster", cl.name, "node", n.addr)
		n.etcdData = true
		n.memberID = w.newMemberID()

		return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
	}

	info := clusterInfo(n)

	cl.bootstrapped = true
	cl.info = info
	cl.endpointsTold = false
	w.addMember(cl, n)
	w.elect(cl)

	w.hooks.push(func(h Hooks) { h.Bootstrapped(info) })
	w.log.Info("cluster bootstrapped", "cluster", cl.name, "node", n.addr)

	w.settle(cl)

	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
}

// clusterInfo describes the cluster of a control plane for Hooks.
func clusterInfo(n *node) Cluster {
	cc := n.cfg.Cluster()

	info := Cluster{
		Name:     cc.Name(),
		ID:       cc.ID(),
		Endpoint: cc.Endpoint(),
	}

	if ca := cc.IssuingCA(); ca != nil {
		info.KubernetesCA = CertKey{Cert: slices.Clone(ca.Crt), Key: slices.Clone(ca.Key)}
	}

	info.KubernetesVersion, _ = parseImage(n.cfg.Machine().Kubelet().Image())

	if vips := n.cfg.NetworkVirtualIPConfigs(); len(vips) > 0 {
		info.VIP = vips[0].VIP()
	}

	return info
}

// Kubeconfig streams the admin kubeconfig as a tar.gz holding one file,
// "kubeconfig". Like machined, any configured control plane generates it
// from its machine config, before the bootstrap too; other nodes answer
// Unimplemented.
func (machineServer) Kubeconfig(_ *emptypb.Empty, srv machine.MachineService_KubeconfigServer) error {
	c := callOf(srv.Context())
	if err := c.lock(); err != nil {
		return err
	}

	n := c.node

	if err := controlPlaneOnly(n, "kubeconfig"); err != nil {
		c.unlock()

		return err
	}

	cfg := n.cfg
	c.unlock()

	data, err := kubeconfigArchive(cfg)
	if err != nil {
		return status.Errorf(codes.Internal, "generating the kubeconfig: %v", err)
	}

	return srv.Send(&common.Data{Bytes: data})
}

// Reboot answers at once and reboots the node; a forced reboot skips the
// cleanup that shuts the kubelet down gracefully.
func (machineServer) Reboot(ctx context.Context, req *machine.RebootRequest) (*machine.RebootResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.unlock()

	w, n := c.w, c.node

	if n.mode != ModeRunning {
		return nil, status.Error(codes.FailedPrecondition, "method is not supported in maintenance mode")
	}

	actor := newActorID()
	w.emit(n, actor, &machine.SequenceEvent{Sequence: "reboot", Action: machine.SequenceEvent_START})

	if n.faults.neverReboot {
		// machined answers before its sequence runs; this one hangs.
		w.log.Info("reboot never happens", "node", n.addr)

		return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: actor}}}, nil
	}

	w.later(n, func() {
		w.emit(n, actor, &machine.MachineStatusEvent{Stage: machine.MachineStatusEvent_REBOOTING})

		if req.GetMode() == machine.RebootRequest_FORCE {
			w.goDown(n, false)
			w.powerOn(n, w.opts.RebootDelay)

			return
		}

		w.reboot(n, 0)
	})

	return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: actor}}}, nil
}

// Shutdown answers at once and powers the node off, after cordoning and
// draining its Node unless forced (v1alpha1_sequencer.go, Shutdown).
func (machineServer) Shutdown(ctx context.Context, req *machine.ShutdownRequest) (*machine.ShutdownResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.unlock()

	w, n := c.w, c.node
	actor := newActorID()

	w.emit(n, actor, &machine.SequenceEvent{Sequence: "shutdown", Action: machine.SequenceEvent_START})
	w.drainThen(n, "shutdown", actor, !req.GetForce(), func() { w.powerOff(n, true); w.guestPoweredOff(n) })

	return &machine.ShutdownResponse{Messages: []*machine.Shutdown{{ActorId: actor}}}, nil
}

// systemPartitions are the volume labels a reset can wipe.
var systemPartitions = []string{"STATE", "EPHEMERAL", "META"}

// Reset accepts the reset and runs it in the background, like Talos: the
// answer carries the actor ID of the "reset" sequence whose events report
// how it ended.
func (machineServer) Reset(ctx context.Context, req *machine.ResetRequest) (*machine.ResetResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.unlock()

	w, n := c.w, c.node

	if n.mode != ModeRunning {
		return nil, status.Error(codes.FailedPrecondition, "method is not supported in maintenance mode")
	}

	if len(req.GetUserDisksToWipe()) > 0 && req.GetMode() == machine.ResetRequest_SYSTEM_DISK {
		return nil, errors.New("reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter")
	}

	if len(req.GetSystemPartitionsToWipe()) > 0 && req.GetMode() == machine.ResetRequest_USER_DISKS {
		return nil, errors.New("reset failed: invalid input, wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter")
	}

	for _, p := range req.GetSystemPartitionsToWipe() {
		if !slices.Contains(systemPartitions, p.GetLabel()) {
			return nil, fmt.Errorf("failed to get volume status with label %q: resource not found", p.GetLabel())
		}
	}

	actor := newActorID()
	w.emit(n, actor, &machine.SequenceEvent{Sequence: "reset", Action: machine.SequenceEvent_START})
	w.emit(n, actor, &machine.MachineStatusEvent{Stage: machine.MachineStatusEvent_RESETTING})

	go w.runReset(n, n.gen, req, actor)

	return &machine.ResetResponse{Messages: []*machine.Reset{{ActorId: actor}}}, nil
}

// runReset is Talos's reset sequence (v1alpha1_sequencer.go, Reset): a
// graceful reset of a node that has registered cordons its Node and drains
// it (errors only logged); every reset then stops the kubelet, whose
// graceful node shutdown fails the node's pods, and the VIP operator
// resigns; a graceful reset of a control plane whose etcd runs leaves etcd
// (its failure ends the sequence); then the disks are wiped and the node
// powers off or reboots.
func (w *World) runReset(n *node, gen uint64, req *machine.ResetRequest, actor string) {
	if d := w.opts.ShutdownDelay; d > 0 {
		time.Sleep(d)
	}

	w.mu.Lock()

	if w.closed || n.gen != gen {
		w.mu.Unlock()

		return
	}

	graceful := req.GetGraceful()
	cl := n.cluster
	host := n.hostname()
	// Talos skips the drain of a node whose kubelet never got its client
	// certificate, that is, never joined.
	drain := graceful && n.registeredOnce && cl != nil && w.opts.Hooks != nil

	w.mu.Unlock()

	if drain {
		// Logged only: the reset goes on.
		_ = w.cordonAndDrain(n, gen, "reset", cl.name, host)
	}

	w.mu.Lock()

	if w.closed || n.gen != gen {
		w.mu.Unlock()

		return
	}

	fail := func(err error) {
		w.log.Info("reset failed", "node", n.addr, "err", err)
		w.emit(n, actor, &machine.SequenceEvent{
			Sequence: "reset",
			Action:   machine.SequenceEvent_STOP,
			Error:    &common.Error{Code: common.Code_FATAL, Message: err.Error()},
		})
		w.emit(n, actor, &machine.MachineStatusEvent{
			Stage:  machine.MachineStatusEvent_RUNNING,
			Status: &machine.MachineStatusEvent_MachineStatus{Ready: true},
		})
	}

	// cleanup: RemoveAllPods (graceful) or StopAllPods stop the kubelet
	// after its graceful node shutdown, which has run when they return.
	w.stopKubelet(n)
	w.step(n, "kubelet-stopped", nil)
	w.mu.Unlock()
	w.hooks.flush()
	w.mu.Lock()

	if w.closed || n.gen != gen {
		w.mu.Unlock()

		return
	}

	if n.faults.failReset > 0 {
		n.faults.failReset--
		err := errors.New("reset failed: injected fault")
		w.step(n, "reset-failed", err)
		fail(err)
		w.mu.Unlock()

		return
	}

	// LeaveEtcd is skipped without etcd data or when the etcd service is
	// neither running, stopping nor failed.
	leave := graceful && n.controlPlane() && n.etcdData && !n.etcdStopped
	w.mu.Unlock()

	if leave {
		err := w.leaveEtcd(context.Background(), n, gen)

		w.mu.Lock()

		if n.gen != gen {
			w.mu.Unlock()

			return
		}

		w.step(n, "etcd-leave", err)

		if err != nil {
			fail(fmt.Errorf("failed to leave cluster: %w", err))
			w.mu.Unlock()

			return
		}

		w.mu.Unlock()
	}

	w.mu.Lock()
	defer w.mu.Unlock()

	if w.closed || n.gen != gen {
		return
	}

	wipeState, wipeEphemeral := true, true

	switch {
	case req.GetMode() == machine.ResetRequest_USER_DISKS:
		wipeState, wipeEphemeral = false, false
	case len(req.GetSystemPartitionsToWipe()) > 0:
		wipeState, wipeEphemeral = false, false

		for _, p := range req.GetSystemPartitionsToWipe() {
			if !p.GetWipe() {
				continue
			}

			switch p.GetLabel() {
			case "STATE":
				wipeState = true
			case "EPHEMERAL":
				wipeEphemeral = true
			}
		}
	}

	w.emit(n, actor, &machine.SequenceEvent{Sequence: "reset", Action: machine.SequenceEvent_STOP})
	w.log.Info("node reset", "node", n.addr, "reboot", req.GetReboot(), "wipe_state", wipeState, "wipe_ephemeral", wipeEphemeral)
	w.step(n, "wipe", nil)

	w.goDown(n, true)
	n.wipe(wipeState, wipeEphemeral)

	if wipeState {
		n.cfg, n.cluster = nil, nil
	}

	if req.GetReboot() {
		w.powerOn(n, w.opts.RebootDelay)
	} else {
		n.mode = ModeOff
		w.guestPoweredOff(n)
	}
}

// guestPoweredOff tells OnGuestPowerOff that n's machine is off. Called
// with w.mu held; the callback runs on its own goroutine.
func (w *World) guestPoweredOff(n *node) {
	if f := w.opts.OnGuestPowerOff; f != nil {
		addr := n.addr
		go f(addr)
	}
}

// cordonAndDrain is Talos's CordonAndDrainNode for sequence seq of n:
// wait (up to CordonTimeout) for the Node to be cordoned, then drain it (up
// to DrainTimeout). It returns the error that ended it, which the reset
// only logs and the other sequences fail on.
func (w *World) cordonAndDrain(n *node, gen uint64, seq, cluster, host string) error {
	w.hooks.flush()

	ctx, cancel := context.WithTimeout(context.Background(), w.opts.CordonTimeout)
	err := w.opts.Hooks.Cordon(ctx, cluster, host)

	cancel()

	w.mu.Lock()
	stale := n.gen != gen
	if !stale {
		w.step(n, seq+"-cordon", err)
	}
	w.mu.Unlock()

	if stale {
		return errors.New("the node went down")
	}

	if err != nil {
		w.log.Info("the node was not cordoned", "node", n.addr, "sequence", seq, "err", err)

		return fmt.Errorf("waiting for the node to be cordoned: %w", err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), w.opts.DrainTimeout)
	err = w.opts.Hooks.Drain(ctx, cluster, host, w.opts.EvictionRetry)

	cancel()

	w.mu.Lock()
	if n.gen == gen {
		w.step(n, seq+"-drain", err)
	}
	w.mu.Unlock()

	return err
}

// drainThen runs, after the shutdown delay, the drain phase of a shutdown
// or an upgrade (when drain is set and the node has registered), then fn
// with the world locked, unless the node changed power state meanwhile. A
// failed drain phase ends the sequence with an error event: the node stays
// up.
func (w *World) drainThen(n *node, seq, actor string, drain bool, fn func()) {
	g := n.gen

	go func() {
		if d := w.opts.ShutdownDelay; d > 0 {
			time.Sleep(d)
		}

		w.mu.Lock()

		if w.closed || n.gen != g || w.nodes[n.addr] != n {
			w.mu.Unlock()

			return
		}

		drain = drain && n.registeredOnce && n.cluster != nil && w.opts.Hooks != nil
		host := n.hostname()

		var cluster string
		if n.cluster != nil {
			cluster = n.cluster.name
		}

		w.mu.Unlock()

		if drain {
			if err := w.cordonAndDrain(n, g, seq, cluster, host); err != nil {
				w.mu.Lock()
				if n.gen == g {
					w.emit(n, actor, &machine.SequenceEvent{
						Sequence: seq,
						Action:   machine.SequenceEvent_STOP,
						Error:    &common.Error{Code: common.Code_FATAL, Message: err.Error()},
					})
				}
				w.mu.Unlock()

				return
			}
		}

		w.mu.Lock()
		defer w.mu.Unlock()

		if !w.closed && n.gen == g && w.nodes[n.addr] == n {
			fn()
		}
	}()
}

// stopKubelet stops n's kubelet in the current boot, as a sequence's
// cleanup phase does, and tears down the kubelet lifecycle (the VIP
// operator resigns).
func (w *World) stopKubelet(n *node) {
	if n.kubeletStopped {
		return
	}

	n.kubeletStopped = true
	w.kubeletGone(n, true)
	w.settle(n.cluster)
}

// step records a step of a sequence of n.
func (w *World) step(n *node, name string, err error) {
	st := Step{Time: time.Now(), Node: n.addr, Hostname: n.hostname(), Step: name}
	if n.cluster != nil {
		st.Cluster = n.cluster.name
	}

	if err != nil {
		st.Err = err.Error()
	}

	w.steps = append(w.steps, st)
}

// leaveEtcd removes n's own member, as Talos's LeaveCluster does: it
// retries while etcd answers "unhealthy cluster" (or "server stopped") for
// up to EtcdRetry, takes "member not found" as done, then stops etcd and
// deletes its data.
func (w *World) leaveEtcd(ctx context.Context, n *node, gen uint64) error {
	deadline := time.Now().Add(w.opts.EtcdRetry)

	for {
		w.mu.Lock()

		if n.gen != gen || n.inst == nil {
			w.mu.Unlock()

			return errors.New("etcdserver: server stopped")
		}

		cl := n.cluster

		if !n.etcdData || n.etcdStopped {
			w.mu.Unlock()

			return errors.New("etcd is not running on this node")
		}

		err := w.canRemove(cl, n.memberID)
		if err == nil || errors.Is(err, errMemberNotFound) {
			id := n.memberID

			if err == nil {
				w.dropMember(cl, id)
			}

			n.etcdData, n.memberID, n.etcdStopped, n.etcdFailed = false, 0, true, false
			w.settle(cl)
			w.mu.Unlock()

			return nil
		}

		w.mu.Unlock()

		if !errors.Is(err, errUnhealthy) || time.Now().After(deadline) {
			return err
		}

		t := time.NewTimer(10 * time.Millisecond)

		select {
		case <-ctx.Done():
			t.Stop()

			return ctx.Err()
		case <-t.C:
		}
	}
}

// EtcdLeaveCluster makes the node's etcd member leave the cluster.
func (machineServer) EtcdLeaveCluster(ctx context.Context, _ *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}

	n, w := c.node, c.w

	if err := controlPlaneOnly(n, "etcd leave"); err != nil {
		c.unlock()

		return nil, err
	}

	c.unlock()

	if err := w.leaveEtcd(ctx, n, c.gen); err != nil {
		return nil, fmt.Errorf("failed to leave cluster: %w", err)
	}

	return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{}}}, nil
}

// EtcdRemoveMemberByID removes any member, through the cluster's etcd.
func (machineServer) EtcdRemoveMemberByID(ctx context.Context, req *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.unlock()

	w, n := c.w, c.node

	if err := controlPlaneOnly(n, "etcd remove member"); err != nil {
		return nil, err
	}

	if err := w.canRemove(n.cluster, req.GetMemberId()); err != nil {
		if errors.Is(err, errMemberNotFound) {
			return nil, status.Error(codes.NotFound, err.Error())
		}

		return nil, fmt.Errorf("failed to remove member: %w", err)
	}

	w.removeMember(n.cluster, req.GetMemberId())

	return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{}}}, nil
}

// etcdReachable checks that the node can talk to etcd: its own member for
// local queries, any started member otherwise, and that etcd has a leader.
// Called with w.mu held.
func (w *World) etcdReachable(n *node, local bool) error {
	cl := n.cluster

	reachable := false

	for _, m := range cl.members {
		if !w.started(cl, m) {
			continue
		}

		if !local || m.addr == n.addr {
			reachable = true
		}
	}

	if !reachable {
		return status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:2379: connect: connection refused\"")
	}

	if !w.quorum(cl) {
		return errNoLeader
	}

	return nil
}

// etcdCall locks a call that reads etcd on a control plane and checks that
// its etcd answers (its own member when local, else a majority). On
// success the caller unlocks.
func etcdCall(ctx context.Context, what string, local bool) (*call, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}
	if err := controlPlaneOnly(c.node, what); err != nil {
		c.unlock()
		return nil, err
	}
	if err := c.w.etcdReachable(c.node, local); err != nil {
		c.unlock()
		return nil, err
	}
	return c, nil
}

// EtcdMemberList lists the cluster's etcd members.
func (machineServer) EtcdMemberList(ctx context.Context, req *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	c, err := etcdCall(ctx, "member list", req.GetQueryLocal())
	if err != nil {
		return nil, err
	}
	defer c.unlock()

	n := c.node

	if err := localLearner(c.w, n, req.GetQueryLocal()); err != nil {
		return nil, err
	}

	msg := &machine.EtcdMembers{}

	for _, m := range n.cluster.members {
		msg.LegacyMembers = append(msg.LegacyMembers, m.name)
		msg.Members = append(msg.Members, &machine.EtcdMember{
			Id:         m.id,
			Hostname:   m.name,
			PeerUrls:   []string{fmt.Sprintf("https://%s:2380", m.addr)},
			ClientUrls: []string{fmt.Sprintf("https://%s:2379", m.addr)},
			IsLearner:  m.learner,
		})
	}

	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{msg}}, nil
}

// localLearner refuses a call made through the node's own member when that
// member is a learner, as etcd refuses every call but Status and
// serializable reads on a learner.
func localLearner(w *World, n *node, local bool) error {
	if m := w.findMember(n.cluster, n.memberID); local && m != nil && m.learner {
		return errNotSupportedForLearner
	}

	return nil
}

// EtcdForfeitLeadership moves etcd leadership away from the node when it
// has it, answering the new leader's name.
func (machineServer) EtcdForfeitLeadership(ctx context.Context, _ *machine.EtcdForfeitLeadershipRequest) (*machine.EtcdForfeitLeadershipResponse, error) {
	c, err := etcdCall(ctx, "etcd forfeit leadership", true)
	if err != nil {
		return nil, err
	}
	defer c.unlock()

	w, n := c.w, c.node

	// Talos lists the members through the local member first.
	if err := localLearner(w, n, true); err != nil {
		return nil, err
	}

	cl := n.cluster
	msg := &machine.EtcdForfeitLeadership{}

	if cl.leader == n.memberID {
		for _, m := range cl.members {
			if m.id != n.memberID && !m.learner && w.started(cl, m) {
				cl.leader = m.id
				msg.Member = m.name

				break
			}
		}
	}

	return &machine.EtcdForfeitLeadershipResponse{Messages: []*machine.EtcdForfeitLeadership{msg}}, nil
}

// EtcdStatus answers the status of the node's own member.
func (machineServer) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	c, err := etcdCall(ctx, "etcd status", true)
	if err != nil {
		return nil, err
	}
	defer c.unlock()

	w, n := c.w, c.node

	m := w.findMember(n.cluster, n.memberID)

	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{
		MemberStatus: &machine.EtcdMemberStatus{
			StorageVersion:  "3.6.0",
			ProtocolVersion: "3.6.0",
			MemberId:        n.memberID,
			Leader:          n.cluster.leader,
			DbSize:          4 << 20,
			DbSizeInUse:     2 << 20,
			IsLearner:       m != nil && m.learner,
		},
	}}}, nil
}

// Upgrade installs the image and reboots the node into it, after the etcd
// checks Talos makes on control planes.
func (machineServer) Upgrade(ctx context.Context, req *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.unlock()

	w, n := c.w, c.node

	if !n.installed || n.mode != ModeRunning {
		return nil, status.Error(codes.FailedPrecondition, "Talos is not installed")
	}

	if err := validateInstaller(req.GetImage()); err != nil {
		return nil, fmt.Errorf("error validating installer image %q: %w", req.GetImage(), err)
	}

	if n.controlPlane() && !req.GetForce() && !req.GetPreserve() && n.cluster.bootstrapped {
		if err := w.validateEtcdForUpgrade(n.cluster); err != nil {
			return nil, fmt.Errorf("error validating etcd for upgrade: %w", err)
		}
	}

	image := req.GetImage()

	actor := newActorID()
	w.emit(n, actor, &machine.SequenceEvent{Sequence: "upgrade", Action: machine.SequenceEvent_START})
	w.emit(n, actor, &machine.MachineStatusEvent{Stage: machine.MachineStatusEvent_UPGRADING})
	w.drainThen(n, "upgrade", actor, true, func() {
		n.nextImage = image

		if n.faults.neverReboot {
			// Installed, but the sequence hangs before its reboot.
			w.log.Info("upgrade reboot never happens", "node", n.addr)

			return
		}

		w.reboot(n, w.opts.InstallDelay)
	})

	return &machine.UpgradeResponse{Messages: []*machine.Upgrade{{Ack: "Upgrade request received", ActorId: actor}}}, nil
}

func (w *World) validateEtcdForUpgrade(cl *cluster) error {
	if !w.quorum(cl) {
		return errNoLeader
	}

	if len(cl.members) == 2 {
		return fmt.Errorf("etcd member count(%d) is insufficient to maintain quorum if upgrade commences", len(cl.members))
	}

	for _, m := range cl.members {
		switch {
		case m.name == "":
			return fmt.Errorf("etcd member %016x is not started, all members must be running to perform an upgrade", m.id)
		case !w.started(cl, m):
			return fmt.Errorf("etcd member %016x is not healthy; all members must be healthy to perform an upgrade: context deadline exceeded", m.id)
		case m.learner:
			// The health check reads through the member, which a learner
			// refuses.
			return fmt.Errorf("etcd member %016x is not healthy; all members must be healthy to perform an upgrade: %w", m.id, errNotSupportedForLearner)
		}
	}

	return nil
}
