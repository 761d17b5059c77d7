package talos

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
)

// etcd errors, worded as etcd words them.
var (
	errNoLeader       = errors.New("etcdserver: no leader")
	errUnhealthy      = errors.New("etcdserver: unhealthy cluster")
	errMemberNotFound = errors.New("etcdserver: member not found")
	errTimedOut       = errors.New("etcdserver: request timed out")
	// errNotEnoughStarted is etcd's answer to a removal that would leave
	// too few started members.
	errNotEnoughStarted = errors.New("etcdserver: re-configuration failed due to not enough started members")
	// errTooManyLearners is etcd's answer to a learner added while the
	// cluster has as many as it allows (one by default).
	errTooManyLearners = errors.New("etcdserver: too many learner members in cluster")
	// errNotSupportedForLearner is a learner's answer to the calls it
	// does not serve (all but Status and serializable reads).
	errNotSupportedForLearner = errors.New("etcdserver: rpc not supported for learner")
)

// maxLearners is etcd's default --max-learners.
const maxLearners = 1

// promoteAttempts is how many times Talos tries to promote a learner: every
// 15 s for 10 min.
const promoteAttempts = 40

// cluster is what the nodes sharing a cluster ID share: etcd and the
// bootstrap. Guarded by World.mu.
type cluster struct {
	id   string
	name string

	bootstrapped bool
	bootstraps   int
	members      []*member
	leader       uint64

	// vips are the etcd elections Talos's VIP operator campaigns in, one
	// per shared IP: the campaigning nodes in the order they joined. The
	// first holds the IP.
	vips map[netip.Addr][]*node

	// info is what the bootstrap node's config said of the cluster; the
	// configs running now say where its API answers (apiEndpoints).
	info Cluster
	// apiServing: the Kubernetes API endpoint has a kube-apiserver behind
	// it (see Hooks.APIServing).
	apiServing bool
	// endpoints are the addresses the Kubernetes API answers at now;
	// endpointsTold is whether EndpointHooks heard of them since the
	// bootstrap.
	endpoints     []APIEndpoint
	endpointsTold bool

	// history is every change of the membership and of the members' etcd
	// running; startedSeen is whether each member ran at the last entry.
	history     []EtcdSnapshot
	startedSeen map[uint64]bool
}

type member struct {
	id uint64
	// name is what etcd lists: the hostname, published when the member's
	// etcd starts; empty until then.
	name    string
	host    string // the hostname of the member's node
	addr    netip.Addr
	learner bool
}

func clusterKey(cfg config.Provider) string {
	if id := cfg.Cluster().ID(); id != "" {
		return id
	}

	return "name:" + cfg.Cluster().Name()
}

// clusterFor returns the cluster of cfg, registering it on first sight, and
// learns the machine CA key when cfg carries it.
func (w *World) clusterFor(cfg config.Provider) *cluster {
	key := clusterKey(cfg)

	c := w.clusters[key]
	if c == nil {
		c = &cluster{id: cfg.Cluster().ID(), name: cfg.Cluster().Name()}
		w.clusters[key] = c
	}

	if ca := cfg.Machine().Security().IssuingCA(); ca != nil && len(ca.Crt) > 0 && len(ca.Key) > 0 {
		w.caKeys[string(ca.Crt)] = ca.Key
	}

	return c
}

// nodesOf returns the nodes currently configured for c, ordered by address.
func (w *World) nodesOf(c *cluster) []*node {
	var out []*node

	for _, n := range w.nodes {
		if n.cluster == c && n.cfg != nil {
			out = append(out, n)
		}
	}

	slices.SortFunc(out, func(a, b *node) int { return a.addr.Compare(b.addr) })

	return out
}

func (w *World) memberNode(c *cluster, m *member) *node {
	n := w.nodes[m.addr]
	if n == nil || n.cluster != c || !n.etcdData || n.memberID != m.id {
		return nil
	}

	return n
}

// started reports whether m's etcd runs.
func (w *World) started(c *cluster, m *member) bool {
	n := w.memberNode(c, m)

	return n != nil && n.runningReady() && n.controlPlane() && !n.etcdStopped && !n.etcdFailed
}

func (w *World) voters(c *cluster) (total, started int) {
	for _, m := range c.members {
		if m.learner {
			continue
		}

		total++

		if w.started(c, m) {
			started++
		}
	}

	return total, started
}

// quorum reports whether c's etcd has a functioning majority.
func (w *World) quorum(c *cluster) bool {
	total, started := w.voters(c)

	return total > 0 && started*2 > total
}

func (w *World) findMember(c *cluster, id uint64) *member {
	for _, m := range c.members {
		if m.id == id {
			return m
		}
	}

	return nil
}

func (w *World) newMemberID() uint64 {
	for {
		id := rand.Uint64()
		if id == 0 {
			continue
		}

		used := false

		for _, c := range w.clusters {
			if w.findMember(c, id) != nil {
				used = true
			}
		}

		if !used {
			return id
		}
	}
}

// addMember makes n the first, voting member of c (the bootstrap).
func (w *World) addMember(c *cluster, n *node) {
	w.noteEtcd(c)

	id := w.newMemberID()
	m := &member{id: id, name: n.hostname(), host: n.hostname(), addr: n.addr}
	c.members = append(c.members, m)
	n.etcdData = true
	n.memberID = id
	n.etcdFailed = false

	w.log.Info("etcd member added", "cluster", c.name, "node", n.addr, "member", id)
	w.recordEtcd(c, "bootstrap", m)
}

// addLearner adds n's member as a learner, as Talos's join does
// (MemberAddAsLearner), after etcd's checks: a leader, no learner already
// (max-learners 1), and, with more than one voter, the live voters a
// quorum of the voters plus the new member (mayAddMember at etcd v3.6.12,
// Talos 1.13's etcd: a learner skips the started-members check, not the
// connectivity one). The member has no name until n's etcd starts,
// EtcdStartDelay later.
func (w *World) addLearner(c *cluster, n *node) error {
	if !w.quorum(c) {
		return errNoLeader
	}

	learners := 0

	for _, m := range c.members {
		if m.learner {
			learners++
		}
	}

	if learners+1 > maxLearners {
		return errTooManyLearners
	}

	// With more than one voter, the live voters must make a quorum of the
	// voters plus the new member, which counts as unavailable.
	if total, active := w.voters(c); total > 1 && active < (total+1)/2+1 {
		return errUnhealthy
	}

	w.noteEtcd(c)

	id := w.newMemberID()
	m := &member{id: id, host: n.hostname(), addr: n.addr, learner: true}
	c.members = append(c.members, m)
	n.memberID = id
	n.etcdStarting = true
	n.etcdFailed = false

	w.log.Info("etcd learner added", "cluster", c.name, "node", n.addr, "member", id)
	w.recordEtcd(c, "add-learner", m)

	g := n.gen

	time.AfterFunc(w.opts.EtcdStartDelay, func() {
		w.mu.Lock()
		defer w.mu.Unlock()

		if w.closed || n.gen != g || !n.etcdStarting || n.memberID != id {
			return
		}

		// etcd runs on the data of the member it was added as, and
		// publishes its name; a member removed meanwhile fails.
		n.etcdStarting = false
		n.etcdData = true

		if w.findMember(c, id) == nil {
			n.etcdFailed = true
			w.settle(c)

			return
		}

		m.name = n.hostname()

		w.settle(c)
		w.promoteLater(c, n, m, 1)
	})

	return nil
}

// promoteLater makes attempt number k of Talos's promotion of n's learner
// m, one LearnerPromoteDelay from now (the first one LearnerPromoteDelay
// after its etcd started, when it has caught up). Attempts stop when n's
// etcd stops (a reboot, a leave), when m is no learner any more, and after
// promoteAttempts.
func (w *World) promoteLater(c *cluster, n *node, m *member, k int) {
	g := n.gen

	time.AfterFunc(w.opts.LearnerPromoteDelay, func() {
		w.mu.Lock()
		defer w.mu.Unlock()

		if w.closed || n.gen != g || n.memberID != m.id || !m.learner || !w.started(c, m) || w.findMember(c, m.id) == nil {
			return
		}

		if err := w.canPromote(c, m); err != nil {
			w.log.Info("etcd promotion refused", "cluster", c.name, "node", n.addr, "member", m.id, "attempt", k, "err", err)

			if k < promoteAttempts {
				w.promoteLater(c, n, m, k+1)
			}

			return
		}

		w.noteEtcd(c)
		m.learner = false
		w.log.Info("etcd learner promoted", "cluster", c.name, "node", n.addr, "member", m.id)
		w.recordEtcd(c, "promote", m)
		w.settle(c)
	})
}

// canPromote checks a promotion the way etcd does (mayPromoteMember): a
// leader, and the started voters plus the learner a majority of the voters
// plus the learner (IsReadyToPromoteMember; "started" is etcd's: the
// member published its name).
func (w *World) canPromote(c *cluster, m *member) error {
	if !w.quorum(c) {
		return errNoLeader
	}

	members, started := 1, 1

	for _, v := range c.members {
		if v.learner {
			continue
		}

		members++

		if v.name != "" {
			started++
		}
	}

	if started < members/2+1 {
		return errNotEnoughStarted
	}

	return nil
}

// canRemove checks that the member can be removed the way etcd's strict
// reconfiguration check does (server.go mayRemoveMember): etcd needs a
// leader; a learner can always go; for a voting member, the members that
// remain must keep a majority of started members, "started" meaning that
// they published their name (membership.IsReadyToRemoveVotingMember);
// then a member that is down can go, while removing a live one must leave
// the live voting members a majority of the current ones ("unhealthy
// cluster" otherwise).
func (w *World) canRemove(c *cluster, id uint64) error {
	m := w.findMember(c, id)
	if m == nil {
		return errMemberNotFound
	}

	if n := w.nodes[m.addr]; n != nil && n.faults.stuckMember {
		return errTimedOut
	}

	if !w.quorum(c) {
		return errNoLeader
	}

	if m.learner {
		return nil
	}

	members, named := 0, 0

	for _, v := range c.members {
		if v.learner || v.id == id {
			continue
		}

		members++

		if v.name != "" {
			named++
		}
	}

	if named < members/2+1 {
		return errNotEnoughStarted
	}

	if !w.started(c, m) {
		return nil
	}

	total, active := w.voters(c)
	if active-1 < 1+(total-1)/2 {
		return errUnhealthy
	}

	return nil
}

// removeMember removes a member canRemove accepted. A node still running
// on that member's data sees its etcd fail.
func (w *World) removeMember(c *cluster, id uint64) {
	w.dropMember(c, id)
	w.settle(c)
}

// dropMember is removeMember without settling the cluster afterwards.
func (w *World) dropMember(c *cluster, id uint64) {
	w.noteEtcd(c)

	m := w.findMember(c, id)
	if m == nil {
		return
	}

	c.members = slices.DeleteFunc(c.members, func(m *member) bool { return m.id == id })

	for _, n := range w.nodes {
		if n.cluster == c && n.memberID == id && (n.etcdData || n.etcdStarting) {
			n.etcdFailed = true
		}
	}

	w.log.Info("etcd member removed", "cluster", c.name, "member", id)
	w.recordEtcd(c, "remove", m)
}

// replaceNamesake removes the members named like n before n joins, as
// Talos does when a control plane with an empty etcd data directory joins
// (it assumes control-plane hostnames are unique): the member a deleted or
// wiped machine of the same hostname left behind goes. A learner that
// never started has no name and stays. It returns etcd's refusal, if any;
// the join is then retried.
func (w *World) replaceNamesake(c *cluster, n *node) error {
	name := n.hostname()

	for _, m := range slices.Clone(c.members) {
		if m.name != name {
			continue
		}

		if err := w.canRemove(c, m.id); err != nil {
			w.log.Info("etcd join: removing the member of the same name failed", "cluster", c.name, "node", n.addr, "member", m.id, "err", err)

			return err
		}

		w.dropMember(c, m.id)
		w.elect(c)
	}

	return nil
}

// join is Talos's etcd join of a control plane with an empty data
// directory (services/etcd.go addMember): with a leader, remove the
// member of the same name, then add its own as a learner.
func (w *World) join(c *cluster, n *node) error {
	if !w.quorum(c) {
		return errNoLeader
	}

	if err := w.replaceNamesake(c, n); err != nil {
		return err
	}

	return w.addLearner(c, n)
}

// retryJoin settles c again after EtcdJoinRetry, for a join that was
// refused, as Talos retries it.
func (w *World) retryJoin(c *cluster, n *node) {
	if n.joinRetry {
		return
	}

	n.joinRetry = true
	g := n.gen

	time.AfterFunc(w.opts.EtcdJoinRetry, func() {
		w.mu.Lock()
		defer w.mu.Unlock()

		if n.gen != g {
			return
		}

		n.joinRetry = false

		if !w.closed && w.nodes[n.addr] == n && n.cluster == c {
			w.settle(c)
		}
	})
}

// settle brings c to rest after a change: elects an etcd leader, lets
// ready control planes without etcd data join (retrying later when etcd
// refuses), settles who holds the cluster's shared IPs and whether its
// Kubernetes API is served, registers the kubelets of ready nodes while it
// is, and records the etcd history.
func (w *World) settle(c *cluster) {
	if c == nil {
		return
	}

	w.noteEtcd(c)
	defer w.noteEtcd(c)

	w.elect(c)

	if c.bootstrapped {
		for _, n := range w.nodesOf(c) {
			if !n.runningReady() || !n.controlPlane() || n.etcdData || n.etcdStopped || n.etcdStarting {
				continue
			}

			if err := w.join(c, n); err != nil {
				w.log.Debug("etcd join refused", "cluster", c.name, "node", n.addr, "err", err)
				w.retryJoin(c, n)

				continue
			}

			w.elect(c)
		}
	}

	w.electVIPs(c)

	if !c.bootstrapped || !c.apiServing {
		return
	}

	for _, n := range w.nodesOf(c) {
		if !n.runningReady() || n.kubeletStopped || n.kubeletRestarting {
			continue
		}

		kn := n.kubeNode()
		if n.announced == nil || !sameNode(n.announced, kn) {
			n.announced = kn
			n.registeredOnce = true
			n.compAnnounced = nil
			clusterName, joined := c.name, *kn

			w.hooks.push(func(h Hooks) { h.NodeJoined(clusterName, joined) })
		}

		if pods := n.staticPods(); pods != nil && !slices.Equal(pods, n.compAnnounced) {
			n.compAnnounced = pods
			clusterName, hostname := c.name, kn.Hostname

			w.hooks.push(func(h Hooks) {
				if sh, ok := h.(StaticPodHooks); ok {
					sh.StaticPods(clusterName, hostname, pods)
				}
			})
		}
	}
}

// noteEtcd records in c's history each member whose etcd started or
// stopped since the last entry.
func (w *World) noteEtcd(c *cluster) {
	if c.startedSeen == nil {
		c.startedSeen = map[uint64]bool{}
	}

	for _, m := range c.members {
		now := w.started(c, m)
		if was, ok := c.startedSeen[m.id]; ok && was == now {
			continue
		} else if !ok && !now {
			c.startedSeen[m.id] = false

			continue
		}

		c.startedSeen[m.id] = now

		if now {
			w.recordEtcd(c, "start", m)
		} else {
			w.recordEtcd(c, "stop", m)
		}
	}
}

// recordEtcd appends an entry to c's history.
func (w *World) recordEtcd(c *cluster, event string, m *member) {
	if c.startedSeen == nil {
		c.startedSeen = map[uint64]bool{}
	}

	s := EtcdSnapshot{Time: time.Now(), Event: event, Member: m.host, MemberID: m.id}

	for _, v := range c.members {
		started := w.started(c, v)
		c.startedSeen[v.id] = started

		switch {
		case v.learner:
			s.Learners = append(s.Learners, v.host)
		default:
			s.Voters = append(s.Voters, v.host)

			if started {
				s.StartedVoters = append(s.StartedVoters, v.host)
			}
		}
	}

	if event == "remove" {
		delete(c.startedSeen, m.id)
	}

	c.history = append(c.history, s)
}

func (w *World) elect(c *cluster) {
	if c.leader != 0 {
		if m := w.findMember(c, c.leader); m != nil && w.started(c, m) && w.quorum(c) {
			return
		}
	}

	c.leader = 0

	if !w.quorum(c) {
		return
	}

	for _, m := range c.members {
		if !m.learner && w.started(c, m) {
			c.leader = m.id

			return
		}
	}
}

// campaignsForVIP reports whether n's VIP operator campaigns for its shared
// IPs, after Talos's operator (internal/app/machined/pkg/controllers/
// network/operator/vip.go): from when the node's etcd service runs healthy
// and its kubelet lifecycle is up, until etcd stops, the kubelet lifecycle
// is torn down (a sequence stops the kubelet) or the node shuts down.
func (w *World) campaignsForVIP(n *node) bool {
	return n.runningReady() && n.controlPlane() && !n.kubeletStopped && w.etcdService(n).healthy
}

// electVIPs updates c's VIP elections the way etcd's election does: a node
// that starts campaigning queues behind the others, a node that stops
// leaves the queue, and the first in the queue holds the IP. A holder
// keeps the IP as long as it campaigns.
func (w *World) electVIPs(c *cluster) {
	campaigns := map[netip.Addr][]*node{}

	for _, n := range w.nodesOf(c) {
		if !w.campaignsForVIP(n) {
			continue
		}

		for _, vip := range nodeVIPs(n) {
			campaigns[vip] = append(campaigns[vip], n)
		}
	}

	for vip, queue := range c.vips {
		before := queue[0]

		queue = slices.DeleteFunc(queue, func(n *node) bool { return !slices.Contains(campaigns[vip], n) })
		if len(queue) == 0 {
			delete(c.vips, vip)
			w.log.Info("shared ip released", "cluster", c.name, "vip", vip, "node", before.addr)

			continue
		}

		c.vips[vip] = queue

		if queue[0] != before {
			w.log.Info("shared ip moved", "cluster", c.name, "vip", vip, "from", before.addr, "to", queue[0].addr)
		}
	}

	for vip, nodes := range campaigns {
		for _, n := range nodes {
			if slices.Contains(c.vips[vip], n) {
				continue
			}

			if c.vips == nil {
				c.vips = map[netip.Addr][]*node{}
			}

			if len(c.vips[vip]) == 0 {
				w.log.Info("shared ip assigned", "cluster", c.name, "vip", vip, "node", n.addr)
			}

			c.vips[vip] = append(c.vips[vip], n)
		}
	}

	// The holder's link carries the VIP: it joins the addresses the node
	// had in this boot.
	for vip, q := range c.vips {
		if h := q[0]; !slices.Contains(h.vipsThisBoot, vip) {
			h.vipsThisBoot = append(h.vipsThisBoot, vip)
		}
	}

	w.updateAPI(c)
}

// updateAPI settles where c's Kubernetes API answers (apiEndpoints) and
// whether it answers at all; a change of either is told to Hooks, the
// addresses first.
func (w *World) updateAPI(c *cluster) {
	eps := w.apiEndpoints(c)

	if c.bootstrapped && (!c.endpointsTold || !slices.EqualFunc(eps, c.endpoints, sameEndpoint)) {
		c.endpointsTold = true
		c.endpoints = eps
		name, told := c.name, slices.Clone(eps)

		w.log.Info("kubernetes api endpoints", "cluster", name, "endpoints", told)
		w.hooks.push(func(h Hooks) {
			if eh, ok := h.(EndpointHooks); ok {
				eh.APIEndpoints(name, told)
			}
		})
	}

	serving := len(eps) > 0
	if serving == c.apiServing {
		return
	}

	c.apiServing = serving
	name := c.name

	w.log.Info("kubernetes api", "cluster", name, "serving", serving)
	w.hooks.push(func(h Hooks) { h.APIServing(name, serving) })
}

// apiEndpoints are the addresses c's Kubernetes API answers at now. Talos
// runs kube-apiserver bound to every address of its machine
// (--bind-address 0.0.0.0, --secure-port from
// .cluster.controlPlane.localAPIServerPort), so it answers at each shared
// IP its machine holds: every VIP some control plane of c holds, whatever
// config named it, is served by its holder. An endpoint of a node's config
// that is no VIP is served while a control plane of that address (or, for
// any other address, any control plane) runs its kubelet and etcd has a
// majority. The endpoint the configs of most control planes of c name
// comes first (it is what their Kubeconfig serves), then by address.
func (w *World) apiEndpoints(c *cluster) []APIEndpoint {
	if !c.bootstrapped {
		return nil
	}

	var eps []APIEndpoint

	for vip, q := range c.vips {
		if len(q) == 0 {
			continue
		}

		h := q[0]
		eps = append(eps, APIEndpoint{Addr: netip.AddrPortFrom(vip, apiServerPort(h)), Node: h.addr, SANs: w.apiServerSANs(h)})
	}

	named := map[netip.AddrPort]int{}

	var configured []netip.AddrPort

	for _, n := range w.nodesOf(c) {
		if !n.controlPlane() {
			continue
		}

		if addr, ok := endpointOf(n.cfg); ok {
			if named[addr] == 0 {
				configured = append(configured, addr)
			}

			named[addr]++
		}
	}

	if addr, ok := c.info.APIAddr(); ok && named[addr] == 0 {
		configured = append(configured, addr)
	}

	if w.quorum(c) {
		for _, addr := range configured {
			if w.isVIP(c, addr.Addr()) || slices.ContainsFunc(eps, func(e APIEndpoint) bool { return e.Addr == addr }) {
				continue
			}

			for _, n := range w.nodesOf(c) {
				if n.controlPlane() && n.runningReady() && !n.kubeletStopped && (!w.isNodeAddr(c, addr.Addr()) || n.addr == addr.Addr()) {
					eps = append(eps, APIEndpoint{Addr: addr, Node: n.addr, SANs: w.apiServerSANs(n)})

					break
				}
			}
		}
	}

	slices.SortFunc(eps, func(a, b APIEndpoint) int {
		if d := named[b.Addr] - named[a.Addr]; d != 0 {
			return d
		}

		return a.Addr.Compare(b.Addr)
	})

	return eps
}

func sameEndpoint(a, b APIEndpoint) bool {
	return a.Addr == b.Addr && a.Node == b.Node && slices.Equal(a.SANs, b.SANs)
}

// endpointOf is the address a config's cluster endpoint names, as
// Cluster.APIAddr reads it.
func endpointOf(cfg config.Provider) (netip.AddrPort, bool) {
	if cfg == nil || cfg.Cluster() == nil {
		return netip.AddrPort{}, false
	}

	info := Cluster{Endpoint: cfg.Cluster().Endpoint()}
	if vips := cfg.NetworkVirtualIPConfigs(); len(vips) > 0 {
		info.VIP = vips[0].VIP()
	}

	return info.APIAddr()
}

// apiServerPort is the port kube-apiserver listens on: its --secure-port,
// .cluster.controlPlane.localAPIServerPort (6443 by default).
func apiServerPort(n *node) uint16 {
	if p := n.cfg.Cluster().LocalAPIServerPort(); p > 0 && p < 1<<16 {
		return uint16(p)
	}

	return 6443
}

// apiServerSANs are the names and addresses of the serving certificate of
// n's kube-apiserver, as Talos's KubernetesCertSANsController lists them
// from the node's config and state (the certificate is issued again when
// they change, and kube-apiserver reloads it): the cluster endpoint's
// host, .cluster.apiServer.certSANs, the in-cluster names of the
// kubernetes service, localhost, the hostname, the service's first IPs,
// every address the node had in this boot (its own and each VIP it held)
// and 127.0.0.1; sorted.
func (w *World) apiServerSANs(n *node) []string {
	cc := n.cfg.Cluster()

	var out []string

	add := func(names ...string) {
		for _, name := range names {
			if name != "" && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}

	if ep := cc.Endpoint(); ep != nil {
		add(ep.Hostname())
	}

	add(cc.CertSANs()...)

	domain := "cluster.local"
	if cc.Network() != nil && cc.Network().DNSDomain() != "" {
		domain = cc.Network().DNSDomain()
	}

	add("kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc."+domain, "localhost")
	add(n.hostname())

	if cc.Network() != nil {
		if ips, err := cc.Network().APIServerIPs(); err == nil {
			for _, ip := range ips {
				add(ip.String())
			}
		}
	}

	add(n.addr.String())

	for _, vip := range n.vipsThisBoot {
		add(vip.String())
	}

	add("127.0.0.1")
	slices.Sort(out)

	return out
}

// isVIP reports whether addr is a shared IP of a node of c.
func (w *World) isVIP(c *cluster, addr netip.Addr) bool {
	if addr == c.info.VIP {
		return true
	}

	for _, n := range w.nodesOf(c) {
		if slices.Contains(nodeVIPs(n), addr) {
			return true
		}
	}

	return false
}

// isNodeAddr reports whether addr is the address of a node of c.
func (w *World) isNodeAddr(c *cluster, addr netip.Addr) bool {
	for _, n := range w.nodesOf(c) {
		if n.addr == addr {
			return true
		}
	}

	return false
}

// nodeVIPs are the shared IPs of n's config, in document order.
func nodeVIPs(n *node) []netip.Addr {
	if n.cfg == nil {
		return nil
	}

	var out []netip.Addr

	for _, v := range n.cfg.NetworkVirtualIPConfigs() {
		if a := v.VIP(); a.IsValid() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}

	// The legacy form, a vip on a machine.network.interfaces entry, which
	// Talos still honours (the Python taloscluster writes it).
	if n.cfg.Machine() != nil {
		for _, d := range n.cfg.Machine().Network().Devices() {
			if v := d.VIPConfig(); v != nil {
				if a, err := netip.ParseAddr(v.IP()); err == nil && !slices.Contains(out, a) {
					out = append(out, a)
				}
			}
		}
	}

	return out
}

// heldVIPs returns the shared IPs n holds now, in the order of its config.
func (w *World) heldVIPs(n *node) []netip.Addr {
	c := n.cluster
	if c == nil || n.cfg == nil {
		return nil
	}

	w.electVIPs(c)

	var out []netip.Addr

	for _, vip := range nodeVIPs(n) {
		if q := c.vips[vip]; len(q) > 0 && q[0] == n {
			out = append(out, vip)
		}
	}

	return out
}

// hookQueue calls Hooks in order from one goroutine.
type hookQueue struct {
	h     Hooks
	mu    sync.Mutex
	queue []func(Hooks)
	wake  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newHookQueue(h Hooks) *hookQueue {
	q := &hookQueue{h: h, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if h != nil {
		go q.run()
	}

	return q
}

func (q *hookQueue) push(fn func(Hooks)) {
	if q.h == nil {
		return
	}

	q.mu.Lock()
	q.queue = append(q.queue, fn)
	q.mu.Unlock()

	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *hookQueue) run() {
	for {
		select {
		case <-q.done:
			return
		case <-q.wake:
		}

		for {
			q.mu.Lock()
			if len(q.queue) == 0 {
				q.mu.Unlock()

				break
			}

			fn := q.queue[0]
			q.queue = q.queue[1:]
			q.mu.Unlock()

			fn(q.h)
		}
	}
}

// flush returns once every hook pushed before it has run (at once without
// hooks, or once the queue is closed).
func (q *hookQueue) flush() {
	if q.h == nil {
		return
	}

	done := make(chan struct{})
	q.push(func(Hooks) { close(done) })

	select {
	case <-done:
	case <-q.done:
	}
}

func (q *hookQueue) close() {
	q.once.Do(func() { close(q.done) })
}
