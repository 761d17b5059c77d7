package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// bridgeNames are the lab's Proxmox bridges, in the order --subnet values
// and TALOSLAB_SUBNETS list their networks: examples/proxmox is on vmbr0,
// the GitOps cluster on vmbr1, examples/proxmox-legacy (the cluster the
// Python taloscluster left) on vmbr2.
var bridgeNames = []string{"vmbr0", "vmbr1", "vmbr2"}

// The addresses the lab serves in each bridge network: the API VIP of a
// cluster on that bridge (host .5, the Kubernetes API on 6443) and the
// nodes' leases (hosts .100 to .254, the Talos API on 50000), as
// lab.ClusterYAML and the lab's DHCP leases lay them out.
const (
	vipHost       = 5
	firstLease    = 100
	lastLease     = 254
	kubePort      = 6443
	loopbackBlock = "127.0.0.0/8"
)

// candidateBlocks returns the second octets N of the 127.N.0.0/24 blocks
// tried for automatic subnets, in order: 42 and 43 (the lab's defaults, so
// a lone lab keeps its familiar addresses), then 100 to 255, then the rest
// but 0 (127.0.0.0/24 holds 127.0.0.1, where the lab's HTTPS endpoints
// listen). The project's own tests use fixed blocks between 55 and 99, so
// those come last.
func candidateBlocks() []int {
	out := []int{42, 43}
	for n := 100; n <= 255; n++ {
		out = append(out, n)
	}
	for n := 1; n < 100; n++ {
		if n != 42 && n != 43 {
			out = append(out, n)
		}
	}
	return out
}

// openstackNetNames are the networks of the lab's OpenStack cloud that
// taloslab up reserves beside the bridges', in the order it reserves them:
// the external network (floating IPs, hosts .10 and up, forwarded on
// 6443, 50000, 80 and 443), the cluster network of examples/openstack and
// that of the forge's clusters/openstack (the OpenStack provider creates
// each one's subnet; nodes listen on its addresses).
var openstackNetNames = []string{"ext-net", "examples/openstack", "clusters/openstack"}

// openstackCandidates returns the second octets tried for the OpenStack
// networks, in order: 44 (the OpenStack emulator's own default external
// network), 45 and 46, then the other blocks below 50 that the project's
// tests leave alone, then the bridges' candidates.
func openstackCandidates() []int {
	out := []int{44, 45, 46}
	for n := 21; n <= 49; n++ {
		if n < 42 || n > 46 {
			out = append(out, n)
		}
	}
	for _, n := range candidateBlocks() {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func block(n int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(n), 0, 0}), 24)
}

// subnetList is the value of --subnet: networks for the bridges in order,
// given as repeated flags or comma-separated.
type subnetList []netip.Prefix

func (s *subnetList) String() string {
	parts := make([]string, len(*s))
	for i, p := range *s {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

func (s *subnetList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		p, err := parseSubnet(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		for _, q := range *s {
			if q == p {
				return fmt.Errorf("%s is given twice; every bridge needs its own network", p)
			}
		}
		*s = append(*s, p)
	}
	if len(*s) > len(bridgeNames) {
		return fmt.Errorf("%d networks given; the lab has %d bridges (%s)", len(*s), len(bridgeNames), strings.Join(bridgeNames, ", "))
	}
	return nil
}

// parseSubnet checks a --subnet value: a /24 network inside 127.0.0.0/8,
// other than 127.0.0.0/24.
func parseSubnet(v string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a network such as 127.50.0.0/24", v)
	}
	if !netip.MustParsePrefix(loopbackBlock).Contains(p.Addr()) || p.Bits() != 24 {
		return netip.Prefix{}, fmt.Errorf("%s: the lab's networks are /24 blocks inside %s, such as 127.50.0.0/24", p, loopbackBlock)
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("%s is not a network address; did you mean %s", p, p.Masked())
	}
	if p.Contains(netip.MustParseAddr("127.0.0.1")) {
		return netip.Prefix{}, fmt.Errorf("%s holds 127.0.0.1, where the lab's HTTPS endpoints listen; choose another /24", p)
	}
	return p, nil
}

// addrInUseError is an address of a lab network that cannot be listened
// on.
type addrInUseError struct {
	addr netip.AddrPort
	err  error
}

func (e *addrInUseError) Error() string {
	return fmt.Sprintf("cannot listen on %s: %v", e.addr, e.err)
}

func (e *addrInUseError) Unwrap() error { return e.err }

// probe checks that every address the lab will serve in p can be listened
// on now: the API VIP on the Kubernetes port and every lease address on
// the Talos API port. It returns the first that cannot.
func probe(p netip.Prefix) error {
	base := p.Masked().Addr().As4()
	at := func(host byte, port uint16) netip.AddrPort {
		a := base
		a[3] = host
		return netip.AddrPortFrom(netip.AddrFrom4(a), port)
	}
	addrs := []netip.AddrPort{at(vipHost, kubePort)}
	for h := firstLease; h <= lastLease; h++ {
		addrs = append(addrs, at(byte(h), talos.APIPort))
	}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a.String())
		if err != nil {
			return &addrInUseError{addr: a, err: err}
		}
		if err := ln.Close(); err != nil {
			return &addrInUseError{addr: a, err: err}
		}
	}
	return nil
}

// reservation is the networks a lab serves and the locks that keep other
// taloslab processes off them while it runs.
type reservation struct {
	nets      map[string]netip.Prefix // by bridge
	openstack map[string]netip.Prefix // by openstackNetNames
	locks     []*blockLock
}

// release lets other labs use the networks.
func (r *reservation) release() {
	for _, l := range r.locks {
		l.release()
	}
	r.locks = nil
}

// list returns the networks in bridge order.
func (r *reservation) list() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(bridgeNames))
	for _, b := range bridgeNames {
		out = append(out, r.nets[b])
	}
	return out
}

// reserve gives each bridge a network: the requested ones in order, then
// the first free candidate blocks. A network is free when no other
// taloslab holds its lock and every address the lab serves in it can be
// listened on. A requested network that is not free is an error naming
// why; so is running out of candidates.
func reserve(requested []netip.Prefix, candidates []int, log *slog.Logger) (*reservation, error) {
	r := &reservation{nets: map[string]netip.Prefix{}}
	taken := func(p netip.Prefix) bool {
		for _, q := range r.nets {
			if q == p {
				return true
			}
		}
		for _, q := range requested {
			if q == p {
				return true
			}
		}
		return false
	}
	for i, bridge := range bridgeNames {
		if i < len(requested) {
			p := requested[i]
			lock, err := claim(p)
			if err != nil {
				r.release()
				return nil, fmt.Errorf("network %s for bridge %s (--subnet): %w", p, bridge, err)
			}
			r.nets[bridge], r.locks = p, append(r.locks, lock)
			continue
		}
		p, err := r.firstFree(candidates, taken, log)
		if err != nil {
			r.release()
			return nil, fmt.Errorf("finding a free /24 in %s for bridge %s (%w); pass --subnet 127.N.0.0/24", loopbackBlock, bridge, err)
		}
		r.nets[bridge] = p
	}
	return r, nil
}

// reserveOpenStack adds a network for each of openstackNetNames: the
// first free candidate block that r does not hold already. Running out of
// candidates is an error.
func (r *reservation) reserveOpenStack(candidates []int, log *slog.Logger) error {
	if r.openstack == nil {
		r.openstack = map[string]netip.Prefix{}
	}
	held := func(p netip.Prefix) bool {
		for _, q := range r.nets {
			if q == p {
				return true
			}
		}
		for _, q := range r.openstack {
			if q == p {
				return true
			}
		}
		return false
	}
	for _, name := range openstackNetNames {
		p, err := r.firstFree(candidates, held, log)
		if err != nil {
			return fmt.Errorf("finding a free /24 in %s for the OpenStack network %s (%w)", loopbackBlock, name, err)
		}
		r.openstack[name] = p
	}
	return nil
}

// firstFree claims the first candidate block that skip does not rule out
// and whose lock and addresses are free, and keeps its lock in r.
func (r *reservation) firstFree(candidates []int, skip func(netip.Prefix) bool, log *slog.Logger) (netip.Prefix, error) {
	last := errors.New("no candidate left")
	for _, n := range candidates {
		p := block(n)
		if skip(p) {
			continue
		}
		lock, err := claim(p)
		if err != nil {
			log.Info("lab network skipped", "network", p, "reason", err)
			last = err
			continue
		}
		r.locks = append(r.locks, lock)
		return p, nil
	}
	return netip.Prefix{}, fmt.Errorf("tried %d blocks; the last: %w", len(candidates), last)
}

// claim takes a network's lock and checks its addresses are free. It
// returns the lock, held, or why the network cannot be used.
func claim(p netip.Prefix) (*blockLock, error) {
	lock, holder, err := lockBlock(p)
	if err != nil {
		return nil, err
	}
	if lock == nil {
		return nil, fmt.Errorf("another taloslab uses it (%s)", holder)
	}
	if err := probe(p); err != nil {
		lock.release()
		return nil, err
	}
	return lock, nil
}

// describeNets renders the networks as "vmbr0 127.42.0.0/24, vmbr1 ...".
func describeNets(r *reservation) string {
	parts := make([]string, 0, len(bridgeNames))
	for _, b := range bridgeNames {
		parts = append(parts, b+" "+r.nets[b].String())
	}
	for _, n := range openstackNetNames {
		if p, ok := r.openstack[n]; ok {
			parts = append(parts, "OpenStack "+n+" "+p.String())
		}
	}
	return strings.Join(parts, ", ")
}
