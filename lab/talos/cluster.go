package talos

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"

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
)

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
}

type member struct {
	id      uint64
	name    string
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

// addMember makes n a member of c.
func (w *World) addMember(c *cluster, n *node) {
	id := w.newMemberID()
	c.members = append(c.members, &member{id: id, name: n.hostname(), addr: n.addr})
	n.etcdData = true
	n.memberID = id
	n.etcdFailed = false

	w.log.Info("etcd member added", "cluster", c.name, "node", n.addr, "member", id)
}

// canRemove checks that the member can be removed the way etcd's strict
// reconfiguration check does: etcd needs a leader; a learner can always go;
// for a voting member, the other started voting members must still be a
// majority of the current voting members (so a two-member etcd cannot lose
// one), and removing a started member must leave a majority connected.
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

	total, started := w.voters(c)

	others := started
	if w.started(c, m) {
		others--
	}

	if others < total/2+1 {
		return errNotEnoughStarted
	}

	if w.started(c, m) && started-1 < 1+(total-1)/2 {
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
	c.members = slices.DeleteFunc(c.members, func(m *member) bool { return m.id == id })

	for _, n := range w.nodes {
		if n.cluster == c && n.etcdData && n.memberID == id {
			n.etcdFailed = true
		}
	}

	w.log.Info("etcd member removed", "cluster", c.name, "member", id)
}

// replaceNamesake removes the members named like n before n joins, as
// Talos does when a control plane with an empty etcd data directory joins
// (it assumes control-plane hostnames are unique): the member a deleted or
// wiped machine of the same hostname left behind goes. It reports false
// when etcd refuses a removal; the join is then retried later, like
// Talos's join retries.
func (w *World) replaceNamesake(c *cluster, n *node) bool {
	name := n.hostname()

	for _, m := range slices.Clone(c.members) {
		if m.name != name {
			continue
		}

		if err := w.canRemove(c, m.id); err != nil {
			w.log.Info("etcd join: removing the member of the same name failed", "cluster", c.name, "node", n.addr, "member", m.id, "err", err)

			return false
		}

		w.dropMember(c, m.id)
		w.elect(c)
	}

	return true
}

// settle brings c to rest after a change: elects an etcd leader, lets
// ready control planes without etcd data join, registers ready nodes'
// kubelets once the cluster is bootstrapped, and settles who holds the
// cluster's shared IPs.
func (w *World) settle(c *cluster) {
	if c == nil {
		return
	}

	defer w.electVIPs(c)

	w.elect(c)

	if !c.bootstrapped {
		return
	}

	for _, n := range w.nodesOf(c) {
		if !n.runningReady() || !n.controlPlane() || n.etcdData || n.etcdStopped {
			continue
		}

		if !w.quorum(c) || !w.replaceNamesake(c, n) {
			continue
		}

		total, started := w.voters(c)
		if !w.quorum(c) || (started+1)*2 <= total+1 {
			continue
		}

		w.addMember(c, n)
		w.elect(c)
	}

	for _, n := range w.nodesOf(c) {
		if !n.runningReady() {
			continue
		}

		kn := n.kubeNode()
		if n.announced != nil && sameNode(n.announced, kn) {
			continue
		}

		n.announced = kn
		n.registeredOnce = true
		clusterName, joined := c.name, *kn

		w.hooks.push(func(h Hooks) { h.NodeJoined(clusterName, joined) })
	}
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
// and its kubelet lifecycle is up, until etcd stops or the node shuts down.
func (w *World) campaignsForVIP(n *node) bool {
	return n.runningReady() && n.controlPlane() && w.etcdService(n).healthy
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

func (q *hookQueue) close() {
	q.once.Do(func() { close(q.done) })
}
