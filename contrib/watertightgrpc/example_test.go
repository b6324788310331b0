package watertightgrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/retry"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

// Example wires both sides: a server that sheds what it cannot serve, and a
// client with a breaker and a bulkhead per method that retries its
// idempotent method under a budget. The server fails the first call with
// UNAVAILABLE; the client retries it. Then the server is made full, and its
// RESOURCE_EXHAUSTED with the negative pushback is not retried.
func Example() {
	// Server side.
	sicpt, err := watertightgrpc.UnaryServerInterceptor(watertightgrpc.ServerConfig{
		MaxConcurrent: 1, // per method, so that the example can fill it
		MaxQueue:      -1,
	})
	if err != nil {
		panic(err)
	}
	var calls atomic.Int32
	hold, release := make(chan struct{}), make(chan struct{})
	ts := &testServer{call: func(ctx context.Context, _, in string) (string, error) {
		switch {
		case calls.Add(1) == 1:
			return "", status.Error(codes.Unavailable, "warming up")
		case in == "hold":
			close(hold)
			<-release
		}
		return "hello " + in, nil
	}}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(sicpt))
	srv.RegisterService(&serviceDesc, ts)
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	defer srv.Stop()

	// Client side.
	breakers, _ := circuit.NewRegistry(circuit.RegistryConfig{})
	bulkheads, _ := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 50}})
	retryBudget, _ := budget.New(budget.DefaultConfig())
	quick, _ := backoff.New(backoff.Config{Base: time.Millisecond, Cap: time.Millisecond})
	cicpt, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{
		Breakers:   breakers,
		Bulkheads:  bulkheads,
		Retry:      retry.Config{Budget: retryBudget, Backoff: quick},
		Idempotent: []string{"/watertight.test.Test/Call"},
	})
	if err != nil {
		panic(err)
	}
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithDisableRetry(), // watertight retries; gRPC's own would multiply them
		grpc.WithChainUnaryInterceptor(cicpt),
	)
	if err != nil {
		panic(err)
	}
	defer cc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := new(wrapperspb.StringValue)
	err = cc.Invoke(ctx, "/watertight.test.Test/Call", wrapperspb.String("gopher"), out)
	fmt.Println(out.GetValue(), err, "after", calls.Load(), "attempts")

	// Fill the method, then call it again.
	done := make(chan error)
	go func() {
		done <- cc.Invoke(ctx, "/watertight.test.Test/Call", wrapperspb.String("hold"), new(wrapperspb.StringValue))
	}()
	<-hold
	var trailer metadata.MD
	err = cc.Invoke(ctx, "/watertight.test.Test/Call", wrapperspb.String("again"), out, grpc.Trailer(&trailer))
	fmt.Println(status.Code(err), "overloaded:", watertight.IsOverloaded(err), "pushback:", trailer.Get("grpc-retry-pushback-ms"))
	close(release)
	<-done
	// Output:
	// hello gopher <nil> after 2 attempts
	// ResourceExhausted overloaded: true pushback: [-1]
}

// ExampleParsePushback shows how a client reads the server's pushback.
func ExampleParsePushback() {
	for _, v := range []string{"250", "-1", "soon"} {
		d, retry := watertightgrpc.ParsePushback(v)
		fmt.Println(v, d, retry)
	}
	// Output:
	// 250 250ms true
	// -1 0s false
	// soon 0s false
}

// ExampleParseServiceConfig reads the retry settings of a gRPC service
// config, for ClientConfig.Methods: the cart's Get is retried up to 4 times
// on UNAVAILABLE, every other method up to 2 times (the "*" entry); the
// entry without a retryPolicy is skipped.
func ExampleParseServiceConfig() {
	methods, err := watertightgrpc.ParseServiceConfig([]byte(`{
	  "loadBalancingConfig": [{"round_robin": {}}],
	  "methodConfig": [
	    {
	      "name": [{"service": "shop.Cart", "method": "Get"}, {"service": "shop.Catalog"}],
	      "timeout": "2s",
	      "retryPolicy": {
	        "maxAttempts": 4,
	        "initialBackoff": "0.1s",
	        "maxBackoff": "1s",
	        "backoffMultiplier": 2,
	        "retryableStatusCodes": ["UNAVAILABLE"]
	      }
	    },
	    {
	      "name": [{}],
	      "retryPolicy": {
	        "maxAttempts": 2,
	        "initialBackoff": "0.05s",
	        "maxBackoff": "0.05s",
	        "backoffMultiplier": 1,
	        "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]
	      }
	    },
	    {"name": [{"service": "shop.Orders"}], "waitForReady": true}
	  ]
	}`))
	if err != nil {
		panic(err)
	}
	retryBudget, _ := budget.New(budget.DefaultConfig())
	for i, m := range methods {
		methods[i].Retry.Budget = retryBudget // one budget for the dependency
		fmt.Println(m.Names, "attempts:", m.Retry.MaxAttempts,
			"unavailable:", m.Retry.Retryable(status.Error(codes.Unavailable, "down")),
			"resource exhausted:", m.Retry.Retryable(status.Error(codes.ResourceExhausted, "quota")))
	}
	_, err = watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{Methods: methods})
	fmt.Println("interceptor:", err)
	// Output:
	// [/shop.Cart/Get /shop.Catalog/*] attempts: 4 unavailable: true resource exhausted: false
	// [*] attempts: 2 unavailable: true resource exhausted: true
	// interceptor: <nil>
}
