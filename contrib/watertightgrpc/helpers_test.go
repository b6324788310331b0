package watertightgrpc_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/deadline"
)

// The test service: a hand-written service descriptor over
// wrapperspb.StringValue, so that no generated code is needed.
const (
	svcName      = "watertight.test.Test"
	methodCall   = "/" + svcName + "/Call"
	methodOther  = "/" + svcName + "/Other"
	methodWatch  = "/" + svcName + "/Watch"  // server streaming
	methodUpload = "/" + svcName + "/Upload" // client streaming
)

var (
	watchDesc  = &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}
	uploadDesc = &grpc.StreamDesc{StreamName: "Upload", ClientStreams: true}
)

// testServer answers with the functions the test sets. It records every
// call's incoming metadata.
type testServer struct {
	call   func(ctx context.Context, method, in string) (string, error)
	stream func(method string, ss grpc.ServerStream) error

	mu    sync.Mutex
	calls []metadata.MD // one per call or stream that reached the handler
}

func (s *testServer) record(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, md)
	return len(s.calls)
}

// count returns the number of calls that reached the handler.
func (s *testServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// md returns the metadata of call i (0-based).
func (s *testServer) md(i int) metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[i]
}

func unaryHandler(method string) func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		ts := srv.(*testServer)
		h := func(ctx context.Context, req any) (any, error) {
			ts.record(ctx)
			if ts.call == nil {
				return wrapperspb.String("ok"), nil
			}
			out, err := ts.call(ctx, method, req.(*wrapperspb.StringValue).GetValue())
			if err != nil {
				return nil, err
			}
			return wrapperspb.String(out), nil
		}
		if icpt == nil {
			return h(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

func streamHandler(method string) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		ts := srv.(*testServer)
		ts.record(ss.Context())
		if ts.stream == nil {
			return nil
		}
		return ts.stream(method, ss)
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: svcName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Call", Handler: unaryHandler(methodCall)},
		{MethodName: "Other", Handler: unaryHandler(methodOther)},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Watch", Handler: streamHandler(methodWatch), ServerStreams: true},
		{StreamName: "Upload", Handler: streamHandler(methodUpload), ClientStreams: true},
	},
}

// transports are the two ways the tests reach a server.
var transports = []string{"bufconn", "tcp"}

// env is a server and a client connected to it.
type env struct {
	ts  *testServer
	srv *grpc.Server
	cc  *grpc.ClientConn
}

// newEnv serves ts over transport ("bufconn", or "tcp" on 127.0.0.1) with
// the server options, and dials it with the dial options (plus insecure
// credentials and gRPC's own retries disabled). Both are closed at the end
// of the test.
func newEnv(t testing.TB, transport string, ts *testServer, sopts []grpc.ServerOption, dopts ...grpc.DialOption) *env {
	t.Helper()
	srv := grpc.NewServer(sopts...)
	srv.RegisterService(&serviceDesc, ts)
	var lis net.Listener
	var target string
	dopts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
	}, dopts...)
	switch transport {
	case "bufconn":
		bl := bufconn.Listen(1 << 20)
		lis, target = bl, "passthrough:///bufnet"
		dopts = append(dopts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return bl.DialContext(ctx)
		}))
	case "tcp":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis, target = l, "passthrough:///"+l.Addr().String()
	default:
		t.Fatalf("unknown transport %q", transport)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	cc, err := grpc.NewClient(target, dopts...)
	if err != nil {
		srv.Stop()
		<-served
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		srv.Stop()
		<-served
	})
	return &env{ts: ts, srv: srv, cc: cc}
}

// call makes a unary call to method with in and returns the answer.
func (e *env) call(ctx context.Context, method, in string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := e.cc.Invoke(ctx, method, wrapperspb.String(in), out, opts...)
	return out.GetValue(), err
}

// fail returns a status error with code, and sets the pushback trailer when
// pushback is not empty.
func fail(ctx context.Context, code codes.Code, pushback string) error {
	if pushback != "" {
		grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", pushback))
	}
	return status.Error(code, "scripted "+code.String())
}

// failFirst returns a call function that fails the first n calls with code
// and answers "ok" after.
func failFirst(n int, code codes.Code) func(context.Context, string, string) (string, error) {
	var mu sync.Mutex
	seen := 0
	return func(ctx context.Context, _, _ string) (string, error) {
		mu.Lock()
		seen++
		k := seen
		mu.Unlock()
		if k <= n {
			return "", fail(ctx, code, "")
		}
		return "ok", nil
	}
}

// events collects watertight events.
type events struct {
	mu  sync.Mutex
	evs []watertight.Event
}

func (l *events) OnEvent(e watertight.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, e)
}

// of returns the events of kind k.
func (l *events) of(k watertight.EventKind) []watertight.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []watertight.Event
	for _, e := range l.evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// noMargin is a deadline propagator without margin.
func noMargin(t testing.TB) *deadline.Propagator {
	return propagator(t, deadline.Config{Margin: -1})
}

func propagator(t testing.TB, cfg deadline.Config) *deadline.Propagator {
	t.Helper()
	p, err := deadline.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// bounded bounds the waits of tests that talk to a real server, so that a
// bug fails the test instead of hanging it.
func bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func itoa(n int) string { return strconv.Itoa(n) }
