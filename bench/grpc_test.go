package bench

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fscircuit "github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

// grpcDeadline is the deadline of every call of BenchmarkGRPCUnary: with it
// the watertight interceptor applies its deadline margin (a derived context
// per call), as it would in production.
const grpcDeadline = time.Second

// grpcMethod is the one method of the benchmark service: it echoes its
// argument. The service is described by hand (grpcService), over
// wrapperspb.StringValue, so that no generated code is needed.
const grpcMethod = "/watertight.bench.Bench/Echo"

var grpcService = grpc.ServiceDesc{
	ServiceName: "watertight.bench.Bench",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				v := req.(*wrapperspb.StringValue).GetValue()
				if dl, ok := ctx.Deadline(); ok && v == "sanity" {
					// For TestGRPCSanity: the time the server was given.
					grpc.SetHeader(ctx, metadata.Pairs("seen-left", time.Until(dl).String()))
				}
				return wrapperspb.String(v), nil
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: grpcMethod}, h)
		},
	}},
}

// newGRPCServer serves grpcService on 127.0.0.1 over TCP and returns its
// address; it is stopped at the end of tb.
func newGRPCServer(tb testing.TB) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(&grpcService, struct{}{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	tb.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return lis.Addr().String()
}

// grpcClients are the sub-benchmarks of BenchmarkGRPCUnary, in order: each
// returns the dial options of its client (the interceptors).
var grpcClients = []struct {
	name string
	opts func(tb testing.TB) []grpc.DialOption
}{
	{"plain", func(testing.TB) []grpc.DialOption { return nil }},
	{"noop-interceptor", func(testing.TB) []grpc.DialOption {
		// What any interceptor costs: one that only calls the invoker.
		noop := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		return []grpc.DialOption{grpc.WithChainUnaryInterceptor(noop)}
	}},
	{"trailer-only", func(testing.TB) []grpc.DialOption {
		// What any interceptor that honours the server's pushback must do
		// at least: ask for the trailer, where grpc-retry-pushback-ms
		// comes.
		trailer := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			var md metadata.MD
			return invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&md))...)
		}
		return []grpc.DialOption{grpc.WithChainUnaryInterceptor(trailer)}
	}},
	{"watertight", func(tb testing.TB) []grpc.DialOption {
		// A breaker and a bulkhead per method with the default configs
		// (the bulkhead sized to never be full here), the default retry
		// policy for the method, marked idempotent, and the default
		// deadline margin.
		breakers, err := circuit.NewRegistry(circuit.RegistryConfig{})
		if err != nil {
			tb.Fatal(err)
		}
		bulkheads, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: bulkheadCap}})
		if err != nil {
			tb.Fatal(err)
		}
		icpt, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{
			Breakers:   breakers,
			Bulkheads:  bulkheads,
			Idempotent: []string{grpcMethod},
		})
		if err != nil {
			tb.Fatal(err)
		}
		return []grpc.DialOption{grpc.WithChainUnaryInterceptor(icpt)}
	}},
	{"failsafe-go", func(testing.TB) []grpc.DialOption {
		// The same three policies: failsafegrpc's retry policy (three
		// attempts on UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED),
		// a breaker with watertight's default window and thresholds, and a
		// bulkhead of bulkheadCap.
		rp := failsafegrpc.NewRetryPolicyBuilder[any]().Build()
		cb := fscircuit.NewBuilder[any]().
			WithFailureThresholdRatio(windowSize*failureRate/100, windowSize).
			WithDelay(openDuration).
			Build()
		bh := fsbulkhead.New[any](bulkheadCap)
		return []grpc.DialOption{grpc.WithChainUnaryInterceptor(failsafegrpc.NewUnaryClientInterceptor(rp, cb, bh))}
	}},
}

// dialGRPC connects to addr with opts (plus insecure credentials and gRPC's
// own retries off); the connection is closed at the end of tb.
func dialGRPC(tb testing.TB, addr string, opts []grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// echo makes one unary call under a fresh deadline of grpcDeadline.
func echo(cc *grpc.ClientConn, in *wrapperspb.StringValue, out *wrapperspb.StringValue, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), grpcDeadline)
	defer cancel()
	return cc.Invoke(ctx, grpcMethod, in, out, opts...)
}

// BenchmarkGRPCUnary is a unary call to a loopback gRPC server over TCP
// (127.0.0.1), plain and through each library's client interceptor: the
// client-side cost of the policies next to a real (if short) call. The
// server runs in a process of its own (startServer), so B/op and allocs/op
// are the client's alone; BenchmarkGRPCUnaryInProcess has the server in the
// benchmark's process. Two runs of one sub-benchmark differ by more than
// the few percent an interceptor costs: BenchmarkGRPCUnaryOverhead measures
// the latency overhead.
func BenchmarkGRPCUnary(b *testing.B) {
	for _, tc := range grpcClients {
		b.Run(tc.name, func(b *testing.B) {
			benchGRPC(b, dialGRPC(b, startServer(b, "grpc"), tc.opts(b)))
		})
	}
}

// BenchmarkGRPCUnaryInProcess is BenchmarkGRPCUnary with the server in the
// benchmark's own process: ns/op, B/op and allocs/op include its side too.
func BenchmarkGRPCUnaryInProcess(b *testing.B) {
	for _, tc := range grpcClients {
		b.Run(tc.name, func(b *testing.B) {
			benchGRPC(b, dialGRPC(b, newGRPCServer(b), tc.opts(b)))
		})
	}
}

// benchGRPC measures echo calls on cc from b.RunParallel goroutines.
func benchGRPC(b *testing.B, cc *grpc.ClientConn) {
	in := wrapperspb.String("ok")
	if err := echo(cc, in, new(wrapperspb.StringValue)); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	var t tally
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		out := new(wrapperspb.StringValue)
		var sum, wrong int64
		for pb.Next() {
			err := echo(cc, in, out)
			sum += int64(len(out.GetValue()))
			if err != nil || out.GetValue() != "ok" {
				wrong++
			}
		}
		t.add(sum, wrong)
	})
	b.StopTimer()
	t.check(b)
}

// BenchmarkGRPCUnaryOverhead is the latency each client interceptor adds to
// a unary call to a loopback server (in a process of its own), measured
// against a plain client in alternating blocks (measureOverhead):
// overhead-% is the median. Each side has a connection of its own to one
// server. watertight-layer measures a second watertight interceptor against
// one (see the case).
func BenchmarkGRPCUnaryOverhead(b *testing.B) {
	type overheadCase struct {
		name       string
		base, opts func(tb testing.TB) []grpc.DialOption
	}
	var cases []overheadCase
	for _, tc := range grpcClients[1:] {
		cases = append(cases, overheadCase{tc.name, grpcClients[0].opts, tc.opts})
	}
	// watertight-layer: two watertight interceptors in a chain against
	// one. Both send the same metadata on the wire (the inner one a
	// grpc-timeout one margin shorter, of the same length): the
	// difference is one interceptor's own work, in the middle of real
	// calls, apart from what asking for the trailer costs gRPC.
	wt := grpcClients[len(grpcClients)-2]
	if wt.name != "watertight" {
		b.Fatalf("grpcClients: %q where watertight was expected", wt.name)
	}
	cases = append(cases, overheadCase{"watertight-layer", wt.opts, func(tb testing.TB) []grpc.DialOption {
		return append(wt.opts(tb), wt.opts(tb)...)
	}})
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			addr := startServer(b, "grpc")
			plain, cc := dialGRPC(b, addr, tc.base(b)), dialGRPC(b, addr, tc.opts(b))
			in := wrapperspb.String("ok")
			call := func(cc *grpc.ClientConn) func() error {
				return func() error {
					out := new(wrapperspb.StringValue)
					if err := echo(cc, in, out); err != nil {
						return err
					}
					if out.GetValue() != "ok" {
						return fmt.Errorf("echo = %q, want ok", out.GetValue())
					}
					return nil
				}
			}
			for _, c := range []func() error{call(plain), call(cc)} {
				if err := c(); err != nil {
					b.Fatalf("warm-up: %v", err)
				}
			}
			measureOverhead(b, call(plain), call(cc))
		})
	}
}

// TestGRPCSanity checks what BenchmarkGRPCUnary assumes: every client gets
// the echo, and the watertight one sends its deadline less the 100ms margin
// (the others the full deadline), as grpc-timeout, which the server turns
// into its context's deadline.
func TestGRPCSanity(t *testing.T) {
	for _, tc := range grpcClients {
		t.Run(tc.name, func(t *testing.T) {
			cc := dialGRPC(t, newGRPCServer(t), tc.opts(t))
			out := new(wrapperspb.StringValue)
			var hdr metadata.MD
			if err := echo(cc, wrapperspb.String("sanity"), out, grpc.Header(&hdr)); err != nil || out.GetValue() != "sanity" {
				t.Fatalf("echo = %q, %v; want sanity", out.GetValue(), err)
			}
			vs := hdr.Get("seen-left")
			if len(vs) != 1 {
				t.Fatalf("the server saw no deadline: %v", hdr)
			}
			d, err := time.ParseDuration(vs[0])
			if err != nil {
				t.Fatal(err)
			}
			limit := grpcDeadline
			if tc.name == "watertight" {
				limit -= 100 * time.Millisecond
			}
			if d > limit || d < limit-200*time.Millisecond {
				t.Fatalf("the server saw %v left; want a little under %v", d, limit)
			}
		})
	}
}
