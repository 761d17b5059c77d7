package talos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// stopGrace is how long a stopping API lets running calls finish before it
// cuts the connections.
const stopGrace = 100 * time.Millisecond

// instance is the API of one boot of a node: a gRPC server on addr:50000.
type instance struct {
	w           *World
	node        *node
	addr        netip.Addr
	maintenance bool

	hostname  string
	sans      []string
	caCert    []byte
	caKey     []byte
	clientCAs [][]byte

	certMu    sync.Mutex
	serverTLS *tls.Config

	srv      *grpc.Server
	lis      *connListener
	stopped  chan struct{}
	stopOnce sync.Once
}

// listen starts the API of n's current boot. Called with w.mu held.
func (w *World) listen(n *node) (*instance, error) {
	inst := &instance{
		w:           w,
		node:        n,
		addr:        n.addr,
		maintenance: n.cfg == nil,
		hostname:    n.hostname(),
		sans:        []string{n.addr.String(), n.hostname()},
		stopped:     make(chan struct{}),
	}

	if n.cfg != nil {
		sec := n.cfg.Machine().Security()
		if ca := sec.IssuingCA(); ca != nil {
			inst.caCert, inst.caKey = ca.Crt, ca.Key
			inst.clientCAs = append(inst.clientCAs, ca.Crt)
		}

		for _, ca := range sec.AcceptedCAs() {
			inst.clientCAs = append(inst.clientCAs, ca.Crt)
		}

		inst.sans = append(inst.sans, sec.CertSANs()...)

		if len(inst.caCert) == 0 {
			return nil, fmt.Errorf("machine config of %s has no machine CA", n.addr)
		}
	}

	lis, err := net.Listen("tcp", netip.AddrPortFrom(n.addr, APIPort).String())
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", n.addr, err)
	}

	inst.lis = newConnListener(lis)

	creds := credentials.NewTLS(&tls.Config{
		GetConfigForClient: inst.tlsConfig,
		MinVersion:         tls.VersionTLS12,
	})

	inst.srv = grpc.NewServer(
		grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(inst.unary),
		grpc.ChainStreamInterceptor(inst.stream),
	)

	machine.RegisterMachineServiceServer(inst.srv, machineServer{})
	machine.RegisterLifecycleServiceServer(inst.srv, lifecycleServer{})
	machine.RegisterImageServiceServer(inst.srv, imageServer{})
	clusterapi.RegisterClusterServiceServer(inst.srv, clusterServer{})
	cosiapi.RegisterStateServer(inst.srv, stateServer{})

	go func() {
		err := inst.srv.Serve(inst.lis)

		select {
		case <-inst.stopped:
		default:
			if err != nil {
				w.log.Error("serving the node api", "node", n.addr, "err", err)
			}
		}
	}()

	return inst, nil
}

// closeListener makes the node refuse new connections at once and marks
// the instance stopped. Called with w.mu held.
func (inst *instance) closeListener() {
	inst.stopOnce.Do(func() {
		close(inst.stopped)
		inst.lis.Close() //nolint:errcheck // the listener is done either way
	})
}

// stop ends the API: new connections are refused, running calls get grace
// to finish, then every connection is cut.
func (inst *instance) stop(grace time.Duration) {
	inst.closeListener()

	cut := time.AfterFunc(grace, inst.srv.Stop)
	inst.srv.GracefulStop()
	cut.Stop()
}

// alive reports whether the instance is still its node's API. Called with
// w.mu held.
func (inst *instance) alive() bool {
	return inst.node.inst == inst
}

// Authorisation: the roles each method needs, after Talos's machined rules.
// Methods not listed need os:admin.
var (
	anyReader  = role.MakeSet(role.Admin, role.Operator, role.Reader)
	etcdReader = role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup)
	operator   = role.MakeSet(role.Admin, role.Operator)
	adminOnly  = role.MakeSet(role.Admin)

	methodRoles = map[string]role.Set{
		// Reader is allowed for maintenance mode only; the handler checks.
		"/machine.MachineService/ApplyConfiguration": role.MakeSet(role.Admin, role.Reader),
		"/machine.MachineService/Version":            anyReader,
		"/machine.MachineService/Hostname":           anyReader,
		"/machine.MachineService/ServiceList":        anyReader,
		"/machine.MachineService/Events":             anyReader,
		"/machine.MachineService/Read":               adminOnly,
		"/machine.MachineService/EtcdMemberList":     etcdReader,
		"/machine.MachineService/EtcdStatus":         etcdReader,
		"/machine.MachineService/Reboot":             operator,
		"/machine.MachineService/Shutdown":           operator,
		"/machine.ImageService/List":                 anyReader,
		"/machine.ImageService/Pull":                 operator,
		"/cluster.ClusterService/HealthCheck":        anyReader,
		// COSI checks each resource type's sensitivity itself (accessPolicy).
		"/cosi.resource.State/Get":     anyReader,
		"/cosi.resource.State/List":    anyReader,
		"/cosi.resource.State/Watch":   anyReader,
		"/cosi.resource.State/Create":  adminOnly,
		"/cosi.resource.State/Update":  adminOnly,
		"/cosi.resource.State/Destroy": adminOnly,
	}

	// oneToMany are the method prefixes apid proxies to several nodes
	// ("nodes" metadata); other methods, COSI's among them, take one node.
	oneToMany = []string{
		"/machine.MachineService/",
		"/cluster.ClusterService/",
		"/inspect.InspectService/",
		"/storage.StorageService/",
		"/time.TimeService/",
	}
)

// errNotAuthorized is what Talos answers a call the client's roles do not
// allow.
var errNotAuthorized = status.Error(codes.PermissionDenied, "not authorized")

// roles returns the caller's roles: from the client certificate's
// organisations, or os:reader in maintenance mode where clients are not
// authenticated.
func (inst *instance) roles(ctx context.Context) role.Set {
	if inst.maintenance {
		return role.MakeSet(role.Reader)
	}

	p, ok := peer.FromContext(ctx)
	if !ok {
		return role.Zero
	}

	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return role.Zero
	}

	set, _ := role.Parse(info.State.PeerCertificates[0].Subject.Organization)

	return set
}

// call is what a handler needs to answer for the targeted node.
type call struct {
	w      *World
	via    *instance
	node   *node
	gen    uint64
	label  string
	roles  role.Set
	method string
}

type callKey struct{}

func callOf(ctx context.Context) *call {
	return ctx.Value(callKey{}).(*call) //nolint:forcetypeassert // set by the interceptors for every call
}

// check reports Unavailable when the targeted node went down since the call
// was routed. Called with w.mu held.
func (c *call) check() error {
	if c.node.inst == nil || c.node.gen != c.gen || (c.via != nil && !c.via.alive()) {
		return status.Error(codes.Unavailable, "the node is shutting down")
	}

	return nil
}

// admit authorises the call and returns the targets named in its metadata
// (the receiving node itself when none) and whether they came as "nodes",
// which asks for per-node answers.
func (inst *instance) admit(ctx context.Context, method string) (targets []string, multi bool, roles role.Set, err error) {
	roles = inst.roles(ctx)

	allowed, ok := methodRoles[method]
	if !ok {
		allowed = adminOnly
	}

	md, _ := metadata.FromIncomingContext(ctx)
	nodes, okNodes := md["nodes"]
	node, okNode := md["node"]

	// apid's director (internal/app/apid/pkg/director) routes before
	// machined authorises.
	switch {
	case okNode && len(node) != 1:
		err = status.Error(codes.InvalidArgument, "node metadata must be single-valued")
	case okNodes && !slices.ContainsFunc(oneToMany, func(p string) bool { return strings.HasPrefix(method, p) }):
		err = status.Errorf(codes.InvalidArgument, "one-2-many proxying is not supported for method %s", method)
	case okNodes:
		targets, multi = nodes, true
	case okNode:
		targets = node
	default:
		targets = []string{inst.addr.String()}
	}

	if err == nil && !allowed.IncludesAny(roles) {
		err = errNotAuthorized
	}

	if err != nil {
		st := status.Convert(err)

		inst.w.mu.Lock()
		inst.w.record(Op{Time: time.Now(), Node: inst.addr, Endpoint: inst.addr, Call: method, Code: st.Code(), Err: st.Message()})
		inst.w.mu.Unlock()

		return nil, false, roles, err
	}

	return targets, multi, roles, nil
}

func (inst *instance) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	targets, multi, roles, err := inst.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}

	serveOne := func(target string) (any, error) {
		return inst.serve(ctx, info.FullMethod, target, roles, func(ctx context.Context) (any, error) {
			return handler(ctx, req)
		})
	}

	if !multi {
		resp, err := serveOne(targets[0])
		if err != nil {
			return nil, err
		}

		stamp(resp, &common.Metadata{Hostname: targets[0]})

		return resp, nil
	}

	var out proto.Message

	for _, target := range targets {
		resp, err := serveOne(target)
		if errors.Is(err, errDropped) {
			return nil, err // the connection is gone: no other node is asked
		}

		var msg proto.Message

		if err == nil {
			msg, _ = resp.(proto.Message)
			stamp(msg, &common.Metadata{Hostname: target})
		} else {
			msg = failedResponse(info.FullMethod, target, err)
		}

		if msg == nil {
			continue
		}

		if out == nil {
			out = msg
		} else {
			appendMessages(out, msg)
		}
	}

	if out == nil {
		return nil, status.Error(codes.Internal, "no response")
	}

	return out, nil
}

type routedStream struct {
	grpc.ServerStream

	ctx context.Context //nolint:containedctx // the stream's own context, with the call attached
}

func (s *routedStream) Context() context.Context { return s.ctx }

// SendMsg sends a message, or resets the connection instead when the
// call's reply is to be lost.
func (s *routedStream) SendMsg(m any) error {
	if g := gateOf(s.ctx); g != nil {
		g.drop()

		return errDropped
	}

	return s.ServerStream.SendMsg(m)
}

// SendHeader sends the header, or resets the connection instead when the
// call's reply is to be lost.
func (s *routedStream) SendHeader(md metadata.MD) error {
	if g := gateOf(s.ctx); g != nil {
		g.drop()

		return errDropped
	}

	return s.ServerStream.SendHeader(md)
}

func (inst *instance) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	targets, multi, roles, err := inst.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}

	if multi && len(targets) > 1 {
		return status.Error(codes.Unimplemented, "the lab does not merge streams from several nodes")
	}

	_, err = inst.serve(ss.Context(), info.FullMethod, targets[0], roles, func(ctx context.Context) (any, error) {
		return nil, handler(srv, &routedStream{ServerStream: ss, ctx: ctx})
	})

	return err
}

// serve routes one call to the target like apid does, applies the target's
// faults, runs it and logs it.
func (inst *instance) serve(ctx context.Context, method, target string, roles role.Set, fn func(context.Context) (any, error)) (any, error) {
	w := inst.w

	w.mu.Lock()

	if !inst.alive() {
		w.mu.Unlock()

		return nil, status.Error(codes.Unavailable, "the node is shutting down")
	}

	n, err := inst.route(target)
	if err != nil {
		w.record(Op{Time: time.Now(), Node: addrOf(target), Endpoint: inst.addr, Call: method, Code: status.Code(err), Err: status.Convert(err).Message()})
		w.mu.Unlock()

		return nil, err
	}

	latency := n.faults.latency
	fault, failCode := n.faults.takeCallFault(method)
	c := &call{w: w, via: inst, node: n, gen: n.gen, label: target, roles: roles, method: method}

	w.mu.Unlock()

	if latency > 0 {
		t := time.NewTimer(latency)

		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()

			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}

	ctx = context.WithValue(ctx, callKey{}, c)

	var (
		resp any
		gate *replyGate
	)

	switch fault {
	case callFail:
		err = status.Errorf(failCode, "injected fault: %s on %s", shortMethod(method), n.addr)
	case callHang:
		err = inst.hang(ctx)
	case callReset:
		err = errDropped
	case callLostReply:
		gate = &replyGate{reset: func() { inst.resetConn(ctx) }}
		resp, err = fn(context.WithValue(ctx, replyGateKey{}, gate))
	default:
		resp, err = fn(ctx)
	}

	op := Op{Time: time.Now(), Node: n.addr, Endpoint: inst.addr, Call: method, Code: status.Code(err), Fault: string(fault)}
	if err != nil {
		op.Err = status.Convert(err).Message()
	}

	w.mu.Lock()
	w.record(op)
	w.mu.Unlock()

	// The call is logged before its client can notice the reset.
	switch fault {
	case callReset:
		inst.resetConn(ctx)
	case callLostReply:
		gate.drop()

		return nil, errDropped
	}

	return resp, err
}

func addrOf(target string) netip.Addr {
	host := target
	if h, _, err := net.SplitHostPort(target); err == nil {
		host = h
	}

	a, _ := netip.ParseAddr(host)

	return a
}

// route finds the node a call is for. A configured node proxies to the
// other nodes of its cluster, reaching them with its own client certificate
// from the machine CA; other targets fail the way the proxied dial would.
// Called with w.mu held.
func (inst *instance) route(target string) (*node, error) {
	w := inst.w
	self := inst.node

	host := target
	if h, _, err := net.SplitHostPort(target); err == nil {
		host = h
	}

	var n *node

	if a, err := netip.ParseAddr(host); err == nil {
		n = w.nodes[a]
	} else {
		for _, cand := range w.nodes {
			if cand.inst != nil && cand.hostname() == host && (cand == self || (cand.cluster != nil && cand.cluster == self.cluster)) {
				n = cand
			}
		}

		if n == nil {
			return nil, status.Errorf(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp: lookup %s: no such host\"", host)
		}
	}

	if n == self {
		return n, nil
	}

	dial := net.JoinHostPort(host, strconv.Itoa(APIPort))

	if inst.maintenance {
		return nil, status.Errorf(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: proxying to %s is not available in maintenance mode\"", dial)
	}

	if n == nil || n.inst == nil {
		return nil, status.Errorf(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp %s: connect: connection refused\"", dial)
	}

	if n.mode != ModeRunning || n.cluster != self.cluster {
		return nil, status.Errorf(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority\"")
	}

	return n, nil
}

// stamp sets the metadata of every message of a response, like apid does
// for the nodes it proxied to.
func stamp(resp any, md *common.Metadata) {
	msg, ok := resp.(proto.Message)
	if !ok || msg == nil {
		return
	}

	r := msg.ProtoReflect()

	fd := r.Descriptor().Fields().ByName("messages")
	if fd == nil || !fd.IsList() || fd.Message() == nil {
		return
	}

	list := r.Get(fd).List()
	for i := range list.Len() {
		el := list.Get(i).Message()

		mfd := el.Descriptor().Fields().ByName("metadata")
		if mfd == nil {
			continue
		}

		el.Set(mfd, protoreflect.ValueOfMessage(proto.Clone(md).ProtoReflect()))
	}
}

// appendMessages appends the messages of src to those of dst.
func appendMessages(dst, src proto.Message) {
	d, s := dst.ProtoReflect(), src.ProtoReflect()

	fd := d.Descriptor().Fields().ByName("messages")
	if fd == nil || !fd.IsList() {
		return
	}

	dl, sl := d.Mutable(fd).List(), s.Get(fd).List()
	for i := range sl.Len() {
		dl.Append(sl.Get(i))
	}
}

// failedResponse is a response of the method carrying one message whose
// metadata reports err for target, as apid answers for a node that failed.
func failedResponse(method, target string, err error) proto.Message {
	name := strings.TrimPrefix(method, "/")

	svcName, methodName, ok := strings.Cut(name, "/")
	if !ok {
		return nil
	}

	desc, derr := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svcName))
	if derr != nil {
		return nil
	}

	svc, ok := desc.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}

	md := svc.Methods().ByName(protoreflect.Name(methodName))
	if md == nil {
		return nil
	}

	mt, derr := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if derr != nil {
		return nil
	}

	resp := mt.New()

	fd := resp.Descriptor().Fields().ByName("messages")
	if fd == nil || !fd.IsList() {
		return nil
	}

	list := resp.Mutable(fd).List()
	el := list.NewElement()

	mfd := el.Message().Descriptor().Fields().ByName("metadata")
	if mfd == nil {
		return nil
	}

	st := status.Convert(err)
	meta := &common.Metadata{Hostname: target, Error: st.Message(), Status: st.Proto()}
	el.Message().Set(mfd, protoreflect.ValueOfMessage(meta.ProtoReflect()))
	list.Append(el)

	return resp.Interface()
}
