package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// healthGate is what the cluster must show to be healthy: the one
// predicate behind the health barrier that the plan shows and the one
// converge waits on.
type healthGate struct {
	// machines must each be a Ready Kubernetes node whose Talos API
	// answers.
	machines []string
	// controlPlanes must be exactly the etcd members, none a learner.
	controlPlanes []string
}

// healthFacts is what the gate reads of the cluster; each part is known or
// carries the error that kept it from being read.
type healthFacts struct {
	// talos holds, by hostname, why a machine's Talos API did not answer;
	// a machine that answered is absent.
	talos map[string]error
	// nodes are the Kubernetes nodes, unless nodesErr.
	nodes    []kube.Node
	nodesErr error
	// members are the etcd members, unless membersErr.
	members    []talos.Member
	membersErr error
	// membersAnswered is set when membersErr came from a control plane
	// whose Talos API answers: etcd itself could not be read.
	membersAnswered bool
}

// describe says in one sentence what the gate checks.
func (g healthGate) describe() string {
	return fmt.Sprintf("all %d machines are Ready nodes whose Talos API answers and the etcd members are the %d control planes, none a learner", len(g.machines), len(g.controlPlanes))
}

// unmet says why f does not pass the gate, "" when it does. unread is set
// when the reason is that an API answered with an error (not a condition
// that changes on its own, such as a node still booting).
func (g healthGate) unmet(f healthFacts) (why string, unread bool) {
	var reasons []string
	for _, h := range g.machines {
		if err, down := f.talos[h]; down {
			reasons = append(reasons, h+" does not answer the Talos API: "+err.Error())
			unread = unread || answeredWithError(err)
		}
	}
	if f.nodesErr != nil {
		reasons = append(reasons, "the Kubernetes nodes could not be listed: "+f.nodesErr.Error())
		unread = unread || answeredWithError(f.nodesErr)
	} else {
		ready := map[string]bool{}
		for _, n := range f.nodes {
			ready[n.Name] = n.Ready
		}
		var missing []string
		for _, h := range g.machines {
			if !ready[h] {
				missing = append(missing, h)
			}
		}
		if len(missing) > 0 {
			reasons = append(reasons, "not Ready yet: "+strings.Join(missing, ", "))
		}
	}
	if f.membersErr != nil {
		reasons = append(reasons, "the etcd members could not be listed: "+f.membersErr.Error())
		unread = unread || f.membersAnswered || answeredWithError(f.membersErr)
	} else {
		var names []string
		for _, m := range f.members {
			if m.Learner {
				reasons = append(reasons, "etcd member "+m.Hostname+" is still a learner")
			}
			names = append(names, m.Hostname)
		}
		slices.Sort(names)
		want := slices.Sorted(slices.Values(g.controlPlanes))
		if !slices.Equal(names, want) {
			reasons = append(reasons, fmt.Sprintf("etcd members are %s, want %s", strings.Join(names, ","), strings.Join(want, ",")))
		}
	}
	return strings.Join(reasons, "; "), unread
}

// answeredWithError reports whether err is an API's answer (a gRPC status
// or a Kubernetes API status) rather than the API not answering at all
// (unavailable, a timeout), which a booting node gives.
func answeredWithError(err error) bool {
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.OK, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			return false
		}
		return true
	}
	var st apierrors.APIStatus
	return errors.As(err, &st) && !apierrors.IsTimeout(err) && !apierrors.IsServerTimeout(err) && !apierrors.IsServiceUnavailable(err)
}

// hostnames lists the desired machines.
func hostnames(want *Desired) []string {
	out := make([]string, len(want.Machines))
	for i, m := range want.Machines {
		out[i] = m.Hostname
	}
	return out
}
