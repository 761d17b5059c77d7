package talos

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/taloscluster/taloscluster/lab/internal/connabort"
)

// errDropped is what the server side of a call whose connection a fault
// reset returns; it never reaches the client, which sees its transport
// fail.
var errDropped = status.Error(codes.Unavailable, "connection reset by an injected fault")

// connListener is a node API's listener that keeps its open connections by
// the client's address, so that a fault can reset the connection a call
// came in on.
type connListener struct {
	net.Listener

	mu    sync.Mutex
	conns map[string]net.Conn // the accepted connections, by remote address
}

func newConnListener(l net.Listener) *connListener {
	return &connListener{Listener: l, conns: map[string]net.Conn{}}
}

// Accept accepts a connection and keeps it until it is closed.
func (l *connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err // unwrapped: gRPC checks the listener's errors as they are
	}

	l.mu.Lock()
	l.conns[c.RemoteAddr().String()] = c
	l.mu.Unlock()

	return &trackedConn{Conn: c, l: l}, nil
}

// forget drops a closed connection.
func (l *connListener) forget(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()

	key := c.RemoteAddr().String()
	if l.conns[key] == c {
		delete(l.conns, key)
	}
}

// reset aborts the connection from remote with a TCP reset; with no such
// connection it resets every connection of the listener, so the caller's
// is among them. It reports how many it reset.
func (l *connListener) reset(remote string) int {
	l.mu.Lock()

	var victims []net.Conn

	if c, ok := l.conns[remote]; ok {
		victims = append(victims, c)
		delete(l.conns, remote)
	} else {
		for key, c := range l.conns {
			victims = append(victims, c)
			delete(l.conns, key)
		}
	}

	l.mu.Unlock()

	for _, c := range victims {
		_ = connabort.Reset(c) // the connection is closed either way
	}

	return len(victims)
}

// trackedConn is an accepted connection that leaves its listener's table
// when it is closed.
type trackedConn struct {
	net.Conn

	l    *connListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.l.forget(c.Conn) })

	return c.Conn.Close()
}

// resetConn aborts the connection the call in ctx came in on.
func (inst *instance) resetConn(ctx context.Context) {
	remote := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}

	if inst.lis.reset(remote) == 0 {
		inst.w.log.Warn("injected reset found no connection", "node", inst.addr, "client", remote)
	}
}

// hang blocks a hung call until its client gives up or the API that
// received it stops.
func (inst *instance) hang(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-inst.stopped:
		return status.Error(codes.Unavailable, "the node is shutting down")
	}
}

// replyGate is carried in the context of a call whose reply is to be lost:
// the first message a streaming handler sends, or the end of a unary
// handler, resets the connection instead of answering.
type replyGate struct {
	once  sync.Once
	reset func()
}

type replyGateKey struct{}

// drop resets the connection, once.
func (g *replyGate) drop() {
	g.once.Do(g.reset)
}

// gateOf returns the reply gate of a call, nil when its reply goes out.
func gateOf(ctx context.Context) *replyGate {
	g, _ := ctx.Value(replyGateKey{}).(*replyGate)

	return g
}
