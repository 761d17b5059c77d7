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
	c.members = slices.DeleteFunc(c.members, func(m *member) bool { return m.id == id })

	for _, n := range w.nodes {
		if n.cluster == c && n.etcdData && n.memberID == id {
			n.etcdFailed = true
		}
	}

	w.log.Info("etcd member removed", "cluster", c.name, "member", id)
	w.settle(c)
}

// settle brings c to rest after a change: elects an etcd leader, lets
// ready control planes without etcd data join, and registers ready nodes'
// kubelets once the cluster is bootstrapped.
func (w *World) settle(c *cluster) {
	if c == nil {
		return
	}

	w.elect(c)

	if !c.bootstrapped {
		return
	}

	for _, n := range w.nodesOf(c) {
		if !n.runningReady() || !n.controlPlane() || n.etcdData || n.etcdStopped {
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
