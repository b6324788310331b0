package watertightgrpc_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

// nopInvoker stands for the network: the benchmarks below measure the
// interceptors alone. bench/grpc_test.go measures them around a real call.
func nopInvoker(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	return nil
}

// BenchmarkUnaryClient is the client interceptor's cost per successful call
// with a breaker and a bulkhead per method, the default retry policy and a
// deadline (so the margin is applied: one context.WithDeadlineCause).
func BenchmarkUnaryClient(b *testing.B) {
	br, err := circuit.NewRegistry(circuit.RegistryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	bh, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 1000}})
	if err != nil {
		b.Fatal(err)
	}
	icpt, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{
		Breakers: br, Bulkheads: bh, Idempotent: []string{methodCall},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := icpt(ctx, methodCall, nil, nil, nil, nopInvoker); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("no-deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := icpt(context.Background(), methodCall, nil, nil, nil, nopInvoker); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := icpt(ctx, methodCall, nil, nil, nil, nopInvoker); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkUnaryServer is the server interceptor's cost per admitted
// request, with a deadline.
func BenchmarkUnaryServer(b *testing.B) {
	icpt, err := watertightgrpc.UnaryServerInterceptor(watertightgrpc.ServerConfig{MaxConcurrent: 1000})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = grpc.NewContextWithServerTransportStream(ctx, &fakeTransport{method: methodCall})
	info := &grpc.UnaryServerInfo{FullMethod: methodCall}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := icpt(ctx, "req", info, okHandler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := icpt(ctx, "req", info, okHandler); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})

	// Per-client limits: the identity comes from the context, as an
	// authenticating interceptor further out would put it there; one
	// client in the serial form, one per goroutine in the parallel one.
	picpt, err := watertightgrpc.UnaryServerInterceptor(watertightgrpc.ServerConfig{
		MaxConcurrent: 1000,
		Client: func(ctx context.Context, _ string) string {
			id, _ := ctx.Value(benchClientKey{}).(string)
			return id
		},
		MaxPerClient: 1000,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("per-client", func(b *testing.B) {
		b.Run("serial", func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.WithValue(ctx, benchClientKey{}, "client-0")
			for b.Loop() {
				if _, err := picpt(ctx, "req", info, okHandler); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.WithValue(ctx, benchClientKey{}, "client-"+strconv.FormatInt(n.Add(1), 10))
				for pb.Next() {
					if _, err := picpt(ctx, "req", info, okHandler); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	})
}

// benchClientKey is the context key of the benchmark's client identity.
type benchClientKey struct{}

func BenchmarkParsePushback(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := watertightgrpc.ParsePushback("250"); !ok {
			b.Fatal("not parsed")
		}
	}
}
