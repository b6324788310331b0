package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/watertight-go/watertight/gateway"
)

// grpcUpstream is a real gRPC server (grpc-go's health service) on
// 127.0.0.1 whose first failFirst calls fail with UNAVAILABLE; it records
// the time left each call arrived with.
type grpcUpstream struct {
	addr      string
	calls     atomic.Int64
	failFirst int64
	left      atomic.Int64 // of the last call, in ms; -1 with no deadline
}

func newGRPCUpstream(t *testing.T, failFirst int64) *grpcUpstream {
	t.Helper()
	u := &grpcUpstream{failFirst: failFirst}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		n := u.calls.Add(1)
		u.left.Store(-1)
		if dl, ok := ctx.Deadline(); ok {
			u.left.Store(time.Until(dl).Milliseconds())
		}
		if n <= u.failFirst {
			return nil, status.Error(codes.Unavailable, "not yet")
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	u.addr = ln.Addr().String()
	return u
}

// h2cFront serves the gateway's public handler over HTTP/1.1 and HTTP/2
// in clear on 127.0.0.1, as Run does, and returns its address.
func h2cFront(t *testing.T, yaml string) string {
	t.Helper()
	cfg, err := gateway.Parse("grpc.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g.Handler("public"), Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		g.Close()
	})
	return ln.Addr().String()
}

func healthClient(t *testing.T, addr string) healthpb.HealthClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// gRPC through the gateway: the call passes with its status; the client's
// deadline reaches the server as grpc-timeout, no longer than the route's
// timeout; UNAVAILABLE is retried for a method the file marks retryable,
// and only for it.
func TestGRPCThroughTheGateway(t *testing.T) {
	up := newGRPCUpstream(t, 1)
	addr := h2cFront(t, listener+fmt.Sprintf(`
upstreams:
  grpc: {hosts: [%s], protocol: h2c}
routes:
  health:
    upstream: grpc
    timeout: 2s
    grpc: {retryable: [/grpc.health.v1.Health/Check]}
`, up.addr))
	c := healthClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Check through the gateway: %v", err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING || up.calls.Load() != 2 {
		t.Fatalf("status %v after %d calls upstream; want SERVING after 2 (UNAVAILABLE retried)", resp.Status, up.calls.Load())
	}
	if left := up.left.Load(); left <= 0 || left > 2000 {
		t.Fatalf("the upstream saw %d ms left, want the route's 2s or less", left)
	}
	// An unknown service: NOT_FOUND, the caller's own error, passed on
	// and not retried.
	up.calls.Store(0)
	up.failFirst = 0
	_, err = c.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"})
	if status.Code(err) != codes.NotFound || up.calls.Load() != 1 {
		t.Fatalf("an unknown service: %v after %d calls, want NotFound after 1", err, up.calls.Load())
	}
}

// A method the file does not mark retryable is sent once.
func TestGRPCNotRetryable(t *testing.T) {
	up := newGRPCUpstream(t, 1)
	addr := h2cFront(t, listener+fmt.Sprintf(`
upstreams:
  grpc: {hosts: [%s], protocol: h2c}
routes:
  health: {upstream: grpc, grpc: {}}
`, up.addr))
	c := healthClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable || up.calls.Load() != 1 {
		t.Fatalf("a method not marked retryable: %v after %d calls, want Unavailable after 1", err, up.calls.Load())
	}
}
