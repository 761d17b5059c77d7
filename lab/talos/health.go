package talos

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
)

// healthPoll is how often a health condition is re-evaluated.
const healthPoll = 20 * time.Millisecond

// defaultHealthTimeout is used when a health check request has no wait
// timeout.
const defaultHealthTimeout = 20 * time.Minute

// clusterServer implements the server-side cluster health check.
type clusterServer struct {
	clusterapi.UnimplementedClusterServiceServer
}

// healthNodes is the node set a health check looks at.
type healthNodes struct {
	controlPlanes []netip.Addr
	workers       []netip.Addr
}

func (h healthNodes) all() []netip.Addr {
	return slices.Concat(h.controlPlanes, h.workers)
}

// healthCondition is one check, named like Talos names it.
type healthCondition struct {
	desc   string
	assert func(w *World, cl *cluster, h healthNodes) error
}

// healthConditions are Talos's default cluster checks, in order, evaluated
// against the simulated world. Memory, disk and diagnostics checks always
// pass.
var healthConditions = []healthCondition{
	{"etcd to be healthy", assertEtcdHealthy},
	{"etcd members to be consistent across nodes", assertEtcdConsistent},
	{"etcd members to be control plane nodes", assertEtcdMembersAreControlPlanes},
	{"apid to be ready", assertAPIDReady},
	{"all nodes memory sizes", assertNothing},
	{"all nodes disk sizes", assertNothing},
	{"no diagnostics", assertNothing},
	{"kubelet to be healthy", assertKubeletHealthy},
	{"all nodes to finish boot sequence", assertBooted},
	{"all k8s nodes to report", assertNodesReported},
	{"all control plane static pods to be running", assertControlPlaneRunning},
	{"all control plane components to be ready", assertControlPlaneRunning},
	{"all k8s nodes to report ready", assertNodesReady},
	{"kube-proxy to report ready", assertBootstrapped},
	{"coredns to report ready", assertBootstrapped},
	{"all k8s nodes to report schedulable", assertBootstrapped},
}

// HealthCheck runs the cluster health checks on a control plane, streaming
// "waiting for <check>: <state>" progress like Talos, until every check
// passes or the wait timeout ends the call with DeadlineExceeded. The nodes
// are those of the request's cluster info, or else every configured node of
// the cluster.
func (clusterServer) HealthCheck(req *clusterapi.HealthCheckRequest, srv clusterapi.ClusterService_HealthCheckServer) error {
	c := callOf(srv.Context())
	if err := c.lock(); err != nil {
		return err
	}

	w, n := c.w, c.node

	if err := controlPlaneOnly(n, "cluster health check"); err != nil {
		c.unlock()

		return err
	}

	cl := n.cluster

	h, err := w.healthNodes(cl, req.GetClusterInfo())

	c.unlock()

	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}

	timeout := req.GetWaitTimeout().AsDuration()
	if timeout <= 0 {
		timeout = defaultHealthTimeout
	}

	ctx, cancel := context.WithTimeout(srv.Context(), timeout)
	defer cancel()

	ips := make([]string, 0, len(h.all()))
	for _, a := range h.all() {
		ips = append(ips, a.String())
	}

	if err := srv.Send(&clusterapi.HealthCheckProgress{Message: fmt.Sprintf("discovered nodes: %q", ips)}); err != nil {
		return err
	}

	for _, cond := range healthConditions {
		if err := w.waitCondition(ctx, srv, cl, h, cond); err != nil {
			return err
		}
	}

	return nil
}

func (w *World) healthNodes(cl *cluster, info *clusterapi.ClusterInfo) (healthNodes, error) {
	var h healthNodes

	if len(info.GetControlPlaneNodes()) > 0 || len(info.GetWorkerNodes()) > 0 {
		for _, list := range []struct {
			in  []string
			out *[]netip.Addr
		}{
			{info.GetControlPlaneNodes(), &h.controlPlanes},
			{info.GetWorkerNodes(), &h.workers},
		} {
			for _, s := range list.in {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return h, fmt.Errorf("parsing node address %q: %w", s, err)
				}

				*list.out = append(*list.out, a)
			}
		}

		return h, nil
	}

	for _, n := range w.nodesOf(cl) {
		if n.controlPlane() {
			h.controlPlanes = append(h.controlPlanes, n.addr)
		} else {
			h.workers = append(h.workers, n.addr)
		}
	}

	return h, nil
}

func (w *World) waitCondition(ctx context.Context, srv clusterapi.ClusterService_HealthCheckServer, cl *cluster, h healthNodes, cond healthCondition) error {
	last := ""
	report := func(state string) error {
		line := fmt.Sprintf("waiting for %s: %s", cond.desc, state)
		if line == last {
			return nil
		}

		last = line

		return srv.Send(&clusterapi.HealthCheckProgress{Message: line})
	}

	if err := report("..."); err != nil {
		return err
	}

	for {
		w.mu.Lock()
		err := cond.assert(w, cl, h)
		w.mu.Unlock()

		if err == nil {
			return report("OK")
		}

		if rerr := report(err.Error()); rerr != nil {
			return rerr
		}

		t := time.NewTimer(healthPoll)

		select {
		case <-ctx.Done():
			t.Stop()

			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return status.Errorf(codes.DeadlineExceeded, "waiting for %s: %v", cond.desc, err)
			}

			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}
}

func assertNothing(*World, *cluster, healthNodes) error { return nil }

func assertEtcdHealthy(w *World, cl *cluster, h healthNodes) error {
	for _, a := range h.controlPlanes {
		n := w.nodes[a]
		if n == nil || n.inst == nil {
			return fmt.Errorf("%s: connection refused", a)
		}

		if n.cluster != cl || !n.controlPlane() {
			return fmt.Errorf("%s: not a control plane of the cluster", a)
		}

		s := w.etcdService(n)
		if s.state != "Running" || !s.healthy {
			msg := fmt.Sprintf("%s: service \"etcd\" not in expected state %q: current state [%s]", a, "Running", s.state)
			if s.message != "" {
				msg += " " + s.message
			}

			return errors.New(msg)
		}
	}

	return nil
}

func assertEtcdConsistent(w *World, cl *cluster, h healthNodes) error {
	if len(h.controlPlanes) > 0 && !w.quorum(cl) {
		return errNoLeader
	}

	return nil
}

func assertEtcdMembersAreControlPlanes(_ *World, cl *cluster, h healthNodes) error {
	var members []string
	for _, m := range cl.members {
		members = append(members, m.addr.String())
	}

	var cps []string
	for _, a := range h.controlPlanes {
		cps = append(cps, a.String())
	}

	slices.Sort(members)
	slices.Sort(cps)

	if !slices.Equal(members, cps) {
		return fmt.Errorf("etcd member ips %q are not equal to control plane node ips %q", members, cps)
	}

	return nil
}

func assertAPIDReady(w *World, _ *cluster, h healthNodes) error {
	for _, a := range h.all() {
		if n := w.nodes[a]; n == nil || n.inst == nil {
			return fmt.Errorf("%s: apid is not ready: connection refused", a)
		}
	}

	return nil
}

func assertKubeletHealthy(w *World, _ *cluster, h healthNodes) error {
	for _, a := range h.controlPlanes {
		if n := w.nodes[a]; n == nil || !n.runningReady() {
			return fmt.Errorf("%s: service \"kubelet\" not in expected state %q", a, "Running")
		}
	}

	return nil
}

func assertBooted(w *World, _ *cluster, h healthNodes) error {
	for _, a := range h.all() {
		if n := w.nodes[a]; n == nil || !n.runningReady() {
			return fmt.Errorf("%s: boot sequence is not finished", a)
		}
	}

	return nil
}

func assertBootstrapped(_ *World, cl *cluster, _ healthNodes) error {
	if !cl.bootstrapped {
		return errors.New("the Kubernetes API is not available: the cluster is not bootstrapped")
	}

	return nil
}

func assertNodesReported(w *World, cl *cluster, h healthNodes) error {
	if err := assertBootstrapped(w, cl, h); err != nil {
		return err
	}

	for _, a := range h.all() {
		if n := w.nodes[a]; n == nil || n.cluster != cl || !n.registeredOnce {
			return fmt.Errorf("node %s has not registered with Kubernetes", a)
		}
	}

	return nil
}

func assertControlPlaneRunning(w *World, cl *cluster, h healthNodes) error {
	if err := assertBootstrapped(w, cl, h); err != nil {
		return err
	}

	for _, a := range h.controlPlanes {
		if n := w.nodes[a]; n == nil || !n.runningReady() {
			return fmt.Errorf("control plane %s: static pods are not running", a)
		}
	}

	return nil
}

func assertNodesReady(w *World, cl *cluster, h healthNodes) error {
	for _, a := range h.all() {
		if n := w.nodes[a]; n == nil || n.cluster != cl || n.announced == nil {
			return fmt.Errorf("node %s is not ready", a)
		}
	}

	return nil
}
