package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// FloatingIPPorts are the ports the lab forwards from a floating IP to its
// fixed address: the Kubernetes API, the Talos API, and HTTP and HTTPS
// for an ingress. Real Neutron DNATs every port; the lab forwards these
// only (FIDELITY.md, "Floating IPs (NAT)").
var FloatingIPPorts = []uint16{6443, 50000, 80, 443}

// natDialTimeout bounds a forwarder's connection to the fixed address.
const natDialTimeout = 5 * time.Second

// natTable is Neutron's NAT for floating IPs: one forwarder per associated
// floating IP.
type natTable struct {
	mu       sync.Mutex
	closed   bool
	forwards map[netip.Addr]*natForward // by floating address
}

// natForward forwards a floating IP's ports to a fixed address: a plain
// TCP splice, so TLS is end to end and the server's certificate must name
// the floating address, as behind a real floating IP.
type natForward struct {
	floating netip.Addr

	mu     sync.Mutex
	fixed  netip.Addr
	lns    []net.Listener
	conns  map[net.Conn]struct{}
	closed bool
}

// setFloatingIPs is the emulator's FloatingIPs hook: it makes the
// forwarders match the table of associated floating IPs (floating ->
// fixed). A floating IP that moved to another fixed address keeps its
// listeners and forwards new connections to the new address; one no longer
// associated stops, its open connections cut. A port that cannot be
// listened on is reported to Options.OnFatal as a *ListenError.
func (l *Lab) setFloatingIPs(table map[netip.Addr]netip.Addr) {
	t := &l.nat
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if t.forwards == nil {
		t.forwards = map[netip.Addr]*natForward{}
	}
	for floating, f := range t.forwards {
		if _, ok := table[floating]; !ok {
			f.close()
			delete(t.forwards, floating)
			l.event("nat-down", floating.String(), "disassociated from "+f.target().String())
		}
	}
	floatings := make([]netip.Addr, 0, len(table))
	for floating := range table {
		floatings = append(floatings, floating)
	}
	slices.SortFunc(floatings, netip.Addr.Compare)
	for _, floating := range floatings {
		fixed := table[floating]
		if f, ok := t.forwards[floating]; ok {
			if f.retarget(fixed) {
				l.event("nat-up", floating.String(), "now forwards to "+fixed.String())
			}
			continue
		}
		f := &natForward{floating: floating, fixed: fixed, conns: map[net.Conn]struct{}{}}
		t.forwards[floating] = f
		var ports []string
		for _, port := range FloatingIPPorts {
			ap := netip.AddrPortFrom(floating, port)
			ln, err := net.Listen("tcp", ap.String())
			if err != nil {
				l.event("nat-failed", floating.String(), fmt.Sprintf("port %d: %v", port, err))
				l.fatal(&ListenError{Addr: ap, What: fmt.Sprintf("the floating IP %s forwarded to %s", floating, fixed), Err: err})
				continue
			}
			f.mu.Lock()
			f.lns = append(f.lns, ln)
			f.mu.Unlock()
			ports = append(ports, fmt.Sprint(port))
			go f.serve(ln, port)
		}
		if len(ports) > 0 {
			l.event("nat-up", floating.String(), fmt.Sprintf("forwards ports %s to %s", strings.Join(ports, " "), fixed))
		}
	}
}

// closeAll stops every forwarder, for Lab.Close; later tables are ignored.
func (t *natTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, f := range t.forwards {
		f.close()
	}
	t.forwards = nil
}

// FloatingIPs returns the floating IPs the lab forwards now, each with the
// fixed address it forwards to.
func (l *Lab) FloatingIPs() map[netip.Addr]netip.Addr {
	t := &l.nat
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[netip.Addr]netip.Addr, len(t.forwards))
	for floating, f := range t.forwards {
		out[floating] = f.target()
	}
	return out
}

func (f *natForward) target() netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fixed
}

// retarget points the forwarder at fixed and reports whether it changed.
func (f *natForward) retarget(fixed netip.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	changed := f.fixed != fixed
	f.fixed = fixed
	return changed
}

// serve accepts connections on one forwarded port until the listener
// closes.
func (f *natForward) serve(ln net.Listener, port uint16) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go f.splice(c, port)
	}
}

// splice connects a client of the floating IP to the same port on the
// fixed address and copies both ways until both sides are done. A fixed
// address that refuses the connection resets the client's, as the
// destination's RST comes back through a real NAT.
func (f *natForward) splice(c net.Conn, port uint16) {
	ctx, cancel := context.WithTimeout(context.Background(), natDialTimeout)
	up, err := (&net.Dialer{}).DialContext(ctx, "tcp", netip.AddrPortFrom(f.target(), port).String())
	cancel()
	if err != nil {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
		return
	}
	if !f.track(c, up) {
		_ = c.Close()
		_ = up.Close()
		return
	}
	defer f.untrack(c, up)
	var wg sync.WaitGroup
	wg.Go(func() { pipe(up, c) })
	wg.Go(func() { pipe(c, up) })
	wg.Wait()
}

// pipe copies src to dst, then half-closes dst so that the other side
// sees the end of the stream while the reverse direction goes on.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// track records a spliced pair, unless the forwarder is closed.
func (f *natForward) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	for _, c := range conns {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *natForward) untrack(conns ...net.Conn) {
	f.mu.Lock()
	for _, c := range conns {
		delete(f.conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// close stops the listeners and cuts the open connections.
func (f *natForward) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for _, ln := range f.lns {
		_ = ln.Close()
	}
	for c := range f.conns {
		_ = c.Close()
	}
	f.lns, f.conns = nil, map[net.Conn]struct{}{}
}
