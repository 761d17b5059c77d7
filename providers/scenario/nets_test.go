package scenario_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// worldNets are the second octets of this package's loopback /24s: a
// Proxmox world takes one (its bridge's network), an OpenStack world two
// (the cluster network, then the external network of its floating IPs,
// where the lab listens). They are clear of the networks other packages'
// tests use, as packages' tests run at the same time: providers/proxmox
// has 127.172 to 127.183, 127.221 to 127.230 (but 223, 227, 229),
// 127.246 to 127.248 and 127.1 to 127.20; providers/openstack 127.184 to
// 127.199; the lab's own tests up to 127.100; cmd/taloscluster's fault
// matrix 127.120 to 127.166; cmd/taloslab's 127.200 to 127.218 and
// 127.249, 127.250 and 127.255; the lab's defaults 127.251 to 127.254.
var worldNets = func() []int {
	var out []int
	for n := 101; n <= 119; n++ {
		out = append(out, n)
	}
	return append(out, 167, 168, 169, 233, 234, 235, 239)
}()

// pool hands worldNets out to worlds: fewer than the scenarios' worlds
// need together, so each world gives its networks back when it ends, and
// one that finds too few free waits for them.
var pool = newNetPool(worldNets)

// netPool is a set of free networks (second octets of 127.N.0.0/24).
type netPool struct {
	mu    sync.Mutex
	free  []int
	freed chan struct{} // closed, and replaced, whenever networks come back
}

func newNetPool(octets []int) *netPool {
	return &netPool{free: append([]int(nil), octets...), freed: make(chan struct{})}
}

// take returns n free networks at once (never some of them, so that two
// worlds waiting for their second network cannot hold each other up),
// waiting until there are n or ctx ends.
func (p *netPool) take(ctx context.Context, n int) ([]int, error) {
	for {
		p.mu.Lock()
		if len(p.free) >= n {
			out := append([]int(nil), p.free[:n]...)
			p.free = p.free[n:]
			p.mu.Unlock()
			return out, nil
		}
		freed := p.freed
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-freed:
		}
	}
}

// give returns networks to the pool, for the worlds that wait.
func (p *netPool) give(octets []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, octets...)
	close(p.freed)
	p.freed = make(chan struct{})
}

// TestNetPool: networks are handed out all at once or not at all, a
// taker that finds too few waits until they come back, and its context
// ends the wait.
func TestNetPool(t *testing.T) {
	t.Parallel()
	p := newNetPool([]int{1, 2, 3})
	one, err := p.take(t.Context(), 1)
	if err != nil || len(one) != 1 {
		t.Fatalf("take 1: %v %v", one, err)
	}
	two, err := p.take(t.Context(), 2)
	if err != nil || len(two) != 2 {
		t.Fatalf("take 2: %v %v", two, err)
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if got, err := p.take(short, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("take 2 of none free: %v %v, want the context's end", got, err)
	}
	got := make(chan []int)
	go func() {
		nets, _ := p.take(t.Context(), 2)
		got <- nets
	}()
	p.give(one)
	select {
	case nets := <-got:
		t.Fatalf("took %v while one network was free", nets)
	case <-time.After(50 * time.Millisecond):
	}
	p.give(two)
	if nets := <-got; len(nets) != 2 {
		t.Fatalf("the waiting taker got %v", nets)
	}
	if len(p.free) != 1 {
		t.Fatalf("%d networks free, want 1", len(p.free))
	}
}
