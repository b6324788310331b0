package watertighthttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/watertighthttp"
)

// staticRT answers every request at once with the same 200 response, read
// from a shared body: what is left of a round trip when the network costs
// nothing, so that the Transport's own work is all that is measured.
type staticRT struct{}

func (staticRT) RoundTrip(r *http.Request) (*http.Response, error) {
	return &staticResp, nil
}

var staticResp = http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}

// BenchmarkTransport is the Transport's own cost per request, with a
// per-host breaker and bulkhead, retries on, and the deadline and attempt
// headers: a GET under a deadline through a Transport whose inner
// transport answers at once (staticRT), next to that inner transport alone.
// bench/'s BenchmarkHTTPTransport measures the same over loopback TCP.
func BenchmarkTransport(b *testing.B) {
	breakers, err := circuit.NewRegistry(circuit.RegistryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	bulkheads, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 1000}})
	if err != nil {
		b.Fatal(err)
	}
	wt, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: staticRT{}, Breakers: breakers, Bulkheads: bulkheads})
	if err != nil {
		b.Fatal(err)
	}
	// The same, over a pool of four hosts: each attempt picks its host
	// (TransportConfig.Balancer) and takes that host's breaker and
	// bulkhead.
	bal, err := balance.New(balance.Config{Hosts: []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"}})
	if err != nil {
		b.Fatal(err)
	}
	balanced, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: staticRT{}, Breakers: breakers, Bulkheads: bulkheads, Balancer: bal})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.example/item", nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"inner", staticRT{}}, {"watertight", wt}, {"balanced", balanced}} {
		call := func() {
			resp, err := tc.rt.RoundTrip(req)
			if err != nil || resp.StatusCode != http.StatusOK {
				panic(fmt.Sprintf("RoundTrip: %v %v", resp, err))
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				call()
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					call()
				}
			})
		})
	}
}

// ctxKey keys the values of BenchmarkTransportDeepContext's context.
type ctxKey int

// BenchmarkTransportDeepContext is BenchmarkTransport's watertight case
// under a context twelve values deep, as a server handler's often is
// (server, connection, middlewares): the Transport's context lookups (the
// deadline, the idempotency key, the criticality) each walk the chain
// when, as here, the value is not there.
func BenchmarkTransportDeepContext(b *testing.B) {
	wt, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: staticRT{}})
	if err != nil {
		b.Fatal(err)
	}
	for _, depth := range []int{0, 12} {
		b.Run(fmt.Sprintf("values-%d", depth), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			for i := range depth {
				ctx = context.WithValue(ctx, ctxKey(i), i)
			}
			ctx, cancel2 := context.WithCancel(ctx)
			defer cancel2()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.example/item", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := wt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
