package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fscircuit "github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"

	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/watertighthttp"
)

// httpDeadline is the deadline of every request of BenchmarkHTTPTransport:
// with it the watertight Transport sends its deadline header.
const httpDeadline = time.Second

// httpBody is what the loopback server answers.
const httpBody = "ok\n"

// okHandler answers every request with 200 and httpBody.
func okHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, httpBody)
}

// newLoopback starts a loopback server that answers with h; it is closed at
// the end of tb.
func newLoopback(tb testing.TB, h http.HandlerFunc) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv
}

// newBaseTransport is the inner transport of every HTTP sub-benchmark, a new
// one each time so that none inherits another's connections; it keeps up to
// 64 idle connections to the server so that connection reuse is the same for
// all. Its idle connections are closed at the end of tb.
func newBaseTransport(tb testing.TB) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConns = 128
	tr.MaxIdleConnsPerHost = 64
	tb.Cleanup(tr.CloseIdleConnections)
	return tr
}

// newWatertightTransport wraps base in a watertight Transport: a breaker
// and a bulkhead per host with the default configs (the bulkhead sized to
// never be full here), the default retry policy (which does not retry a 200)
// and the default deadline propagator.
func newWatertightTransport(tb testing.TB, base http.RoundTripper) *watertighthttp.Transport {
	tb.Helper()
	breakers, err := circuit.NewRegistry(circuit.RegistryConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	bulkheads, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: bulkheadCap}})
	if err != nil {
		tb.Fatal(err)
	}
	t, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{
		Base:      base,
		Breakers:  breakers,
		Bulkheads: bulkheads,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// newFailsafeTransport wraps base in failsafe-go's round tripper with the
// same three policies: its HTTP retry policy (three attempts, retries 429,
// 5xx but 501 and transport errors), a breaker with watertight's default
// window and thresholds counting 429, 5xx and errors as failures, and a
// bulkhead of bulkheadCap.
func newFailsafeTransport(base http.RoundTripper) http.RoundTripper {
	rp := failsafehttp.NewRetryPolicyBuilder().Build()
	cb := fscircuit.NewBuilder[*http.Response]().
		HandleIf(func(r *http.Response, err error) bool {
			return err != nil || r.StatusCode == http.StatusTooManyRequests || r.StatusCode >= 500
		}).
		WithFailureThresholdRatio(windowSize*failureRate/100, windowSize).
		WithDelay(openDuration).
		Build()
	bh := fsbulkhead.New[*http.Response](bulkheadCap)
	return failsafehttp.NewRoundTripper(base, rp, cb, bh)
}

// httpTransports are the sub-benchmarks of BenchmarkHTTPTransport, in order.
var httpTransports = []struct {
	name string
	new  func(tb testing.TB) http.RoundTripper
}{
	{"plain", func(tb testing.TB) http.RoundTripper { return newBaseTransport(tb) }},
	{"watertight", func(tb testing.TB) http.RoundTripper { return newWatertightTransport(tb, newBaseTransport(tb)) }},
	{"failsafe-go", func(tb testing.TB) http.RoundTripper { return newFailsafeTransport(newBaseTransport(tb)) }},
}

// roundTrip sends one GET to url through rt under a fresh deadline of
// httpDeadline, drains and closes the body, and reports the status (0 on a
// transport error).
func roundTrip(rt http.RoundTripper, url string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), httpDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	return resp.StatusCode, err
}

// BenchmarkHTTPTransport is a GET to a loopback server through a plain
// http.Transport and through each library's RoundTripper wrapping one: the
// client-side cost of the policies next to a real (if short) round trip. The
// server (okHandler) runs in a process of its own (startServer), so B/op and
// allocs/op are the client's alone; BenchmarkHTTPTransportInProcess has the
// server in the benchmark's process, where they include the server's side.
// On a shared 2-core VM the ns/op of two runs of one sub-benchmark differ by
// 5–15%: BenchmarkHTTPTransportOverhead measures the latency overhead.
func BenchmarkHTTPTransport(b *testing.B) {
	for _, tc := range httpTransports {
		b.Run(tc.name, func(b *testing.B) {
			benchTransport(b, "http://"+startServer(b, "http"), tc.new(b))
		})
	}
}

// BenchmarkHTTPTransportInProcess is BenchmarkHTTPTransport with the server
// in the benchmark's own process: B/op and allocs/op count the server's
// allocations too, among them those of reading the headers a library sends
// (net/http's server allocates the name of every header it does not know,
// and every value longer than a byte).
func BenchmarkHTTPTransportInProcess(b *testing.B) {
	for _, tc := range httpTransports {
		b.Run(tc.name, func(b *testing.B) {
			benchTransport(b, newLoopback(b, okHandler).URL, tc.new(b))
		})
	}
}

// benchTransport measures GETs of url through rt from b.RunParallel
// goroutines.
func benchTransport(b *testing.B, url string, rt http.RoundTripper) {
	if code, err := roundTrip(rt, url); code != http.StatusOK || err != nil {
		b.Fatalf("warm-up: status %d, %v", code, err)
	}
	var t tally
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var sum, wrong int64
		for pb.Next() {
			code, err := roundTrip(rt, url)
			sum += int64(code)
			if code != http.StatusOK || err != nil {
				wrong++
			}
		}
		t.add(sum, wrong)
	})
	b.StopTimer()
	t.check(b)
}

// passThrough is a RoundTripper that only calls its base: in
// BenchmarkHTTPTransportOverhead, the measurement's own noise, since it
// costs nothing measurable.
type passThrough struct{ base http.RoundTripper }

func (p passThrough) RoundTrip(r *http.Request) (*http.Response, error) { return p.base.RoundTrip(r) }

// headersOnly is a RoundTripper that does only what any transport sending
// watertight's two headers must: copy the request with a header of its own
// and add X-Request-Timeout-Ms and X-Request-Attempt. In
// BenchmarkHTTPTransportOverhead it is what the headers cost on the wire,
// on the server and in the client's allocations, apart from any policy: the
// floor of any RoundTripper that does what issue 5 asks. Its values are
// fixed, of the same length as the watertight Transport's under
// httpDeadline ("900", a second less the default margin of 100ms, and "1"),
// and shared read-only by every request as the Transport's are, so it
// allocates what the Transport must (the request and its header map) and
// nothing more.
type headersOnly struct{ base http.RoundTripper }

// headersOnlyTimeout and headersOnlyAttempt are headersOnly's value slices.
var headersOnlyTimeout, headersOnlyAttempt = []string{"900"}, []string{"1"}

func (h headersOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.WithContext(r.Context())
	r2.Header = make(http.Header, len(r.Header)+2)
	for k, v := range r.Header {
		r2.Header[k] = v
	}
	r2.Header[watertighthttp.HeaderTimeout] = headersOnlyTimeout
	r2.Header[watertighthttp.HeaderAttempt] = headersOnlyAttempt
	return h.base.RoundTrip(r2)
}

// overheadTransports are BenchmarkHTTPTransportOverhead's sub-benchmarks:
// the libraries' transports against a plain one, two references
// (passThrough, headersOnly) against a plain one, and two measures of what
// the watertight Transport costs beyond sending its headers, where both
// sides send the same request on the wire (TestHTTPLayerSanity):
//
//   - watertight-over-headers: a watertight Transport against headersOnly,
//     the least any transport sending the same headers can cost: the
//     difference is the Transport's policies and lookups;
//   - watertight-layer: a watertight Transport over another against a
//     single one. The inner Transport replaces the outer's headers with
//     its own: the difference is the work of one Transport, its policies,
//     copies and allocations.
//
// Both are measured in the middle of real network calls, apart from what
// the headers cost the network and the server.
var overheadTransports = func() []overheadCase {
	var cs []overheadCase
	for _, tc := range httpTransports[1:] {
		cs = append(cs, overheadCase{tc.name, nil, tc.new})
	}
	return append(cs,
		overheadCase{"pass-through", nil, func(tb testing.TB) http.RoundTripper { return passThrough{newBaseTransport(tb)} }},
		overheadCase{"headers-only", nil, func(tb testing.TB) http.RoundTripper { return headersOnly{newBaseTransport(tb)} }},
		overheadCase{"watertight-over-headers",
			func(tb testing.TB) http.RoundTripper { return headersOnly{newBaseTransport(tb)} },
			func(tb testing.TB) http.RoundTripper { return newWatertightTransport(tb, newBaseTransport(tb)) }},
		overheadCase{"watertight-layer",
			func(tb testing.TB) http.RoundTripper { return newWatertightTransport(tb, newBaseTransport(tb)) },
			func(tb testing.TB) http.RoundTripper {
				return newWatertightTransport(tb, newWatertightTransport(tb, newBaseTransport(tb)))
			}},
	)
}()

// overheadCase is a sub-benchmark of BenchmarkHTTPTransportOverhead: rt
// measured against base (nil: a plain http.Transport).
type overheadCase struct {
	name     string
	base, rt func(tb testing.TB) http.RoundTripper
}

// BenchmarkHTTPTransportOverhead is the latency each library's RoundTripper
// adds to a GET to a loopback server (in a process of its own), measured
// against a plain http.Transport in alternating blocks (measureOverhead):
// overhead-% is the median. Both sides have transports of their own on one
// server. pass-through and headers-only are references: the measurement's
// noise, and the cost of sending watertight's two headers with no policy;
// watertight-layer is the Transport's own work without its headers (see
// overheadTransports).
func BenchmarkHTTPTransportOverhead(b *testing.B) {
	for _, tc := range overheadTransports {
		b.Run(tc.name, func(b *testing.B) {
			url := "http://" + startServer(b, "http")
			newBase := tc.base
			if newBase == nil {
				newBase = httpTransports[0].new
			}
			plain, rt := newBase(b), tc.rt(b)
			call := func(rt http.RoundTripper) func() error {
				return func() error {
					code, err := roundTrip(rt, url)
					if err == nil && code != http.StatusOK {
						err = fmt.Errorf("status %d", code)
					}
					return err
				}
			}
			for _, c := range []func() error{call(plain), call(rt)} {
				if err := c(); err != nil {
					b.Fatalf("warm-up: %v", err)
				}
			}
			measureOverhead(b, call(plain), call(rt))
		})
	}
}

// handlerTimeoutMs is the X-Request-Timeout-Ms of BenchmarkHTTPHandler's
// requests.
const handlerTimeoutMs = 1000

// newHandlerRequest is the request of BenchmarkHTTPHandler: a GET carrying
// the deadline header. Neither handler modifies it, so a goroutine reuses
// its own.
func newHandlerRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/bench", nil)
	r.Header.Set(watertighthttp.HeaderTimeout, strconv.Itoa(handlerTimeoutMs))
	return r
}

// httpHandlers are the sub-benchmarks of BenchmarkHTTPHandler, in order.
var httpHandlers = []struct {
	name string
	new  func(tb testing.TB, next http.Handler) http.Handler
}{
	{"plain", func(_ testing.TB, next http.Handler) http.Handler { return next }},
	{"watertight", func(tb testing.TB, next http.Handler) http.Handler {
		h, err := watertighthttp.NewHandler(next, watertighthttp.HandlerConfig{})
		if err != nil {
			tb.Fatal(err)
		}
		return h
	}},
}

// BenchmarkHTTPHandler is the server-side middleware without the network:
// ServeHTTP is called directly with a recorder.
func BenchmarkHTTPHandler(b *testing.B) {
	for _, tc := range httpHandlers {
		b.Run(tc.name, func(b *testing.B) {
			h := tc.new(b, http.HandlerFunc(okHandler))
			var t tally
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := newHandlerRequest()
				var sum, wrong int64
				for pb.Next() {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					sum += int64(rec.Code)
					if rec.Code != http.StatusOK {
						wrong++
					}
				}
				t.add(sum, wrong)
			})
			t.check(b)
		})
	}
}

// TestHTTPSanity checks what the HTTP benchmarks assume: each transport gets
// a 200 and the body from the loopback server, the watertight Transport sends
// its attempt and deadline headers, and each handler answers 200, the
// watertight one with the deadline header's deadline on the context.
func TestHTTPSanity(t *testing.T) {
	for _, tc := range httpTransports {
		t.Run("transport/"+tc.name, func(t *testing.T) {
			var attempt, timeout string
			srv := newLoopback(t, func(w http.ResponseWriter, r *http.Request) {
				attempt = r.Header.Get(watertighthttp.HeaderAttempt)
				timeout = r.Header.Get(watertighthttp.HeaderTimeout)
				okHandler(w, r)
			})
			rt := tc.new(t)
			for i := 0; i < 3; i++ { // the later ones reuse the connection
				ctx, cancel := context.WithTimeout(context.Background(), httpDeadline)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatalf("RoundTrip: %v", err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				cancel()
				if resp.StatusCode != http.StatusOK || string(body) != httpBody || err != nil {
					t.Fatalf("status %d, body %q, %v; want 200, %q", resp.StatusCode, body, err, httpBody)
				}
			}
			if tc.name != "watertight" {
				return
			}
			if attempt != "1" {
				t.Errorf("%s = %q, want 1", watertighthttp.HeaderAttempt, attempt)
			}
			ms, err := strconv.Atoi(timeout)
			if err != nil || ms <= 0 || ms > int(httpDeadline/time.Millisecond) {
				t.Errorf("%s = %q, want a positive number of ms below %d", watertighthttp.HeaderTimeout, timeout, httpDeadline/time.Millisecond)
			}
		})
	}
	for _, tc := range httpHandlers {
		t.Run("handler/"+tc.name, func(t *testing.T) {
			var deadline time.Time
			var hasDeadline bool
			h := tc.new(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				deadline, hasDeadline = r.Context().Deadline()
				okHandler(w, r)
			}))
			rec := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(rec, newHandlerRequest())
			end := time.Now()
			if rec.Code != http.StatusOK || rec.Body.String() != httpBody {
				t.Fatalf("status %d, body %q; want 200, %q", rec.Code, rec.Body.String(), httpBody)
			}
			if tc.name != "watertight" {
				return
			}
			// The Handler reads the clock between start and end.
			if !hasDeadline || !deadline.After(start) || deadline.After(end.Add(handlerTimeoutMs*time.Millisecond)) {
				t.Errorf("next saw deadline %v (set %v), %v after the start; want at most %dms after ServeHTTP", deadline, hasDeadline, deadline.Sub(start), handlerTimeoutMs)
			}
		})
	}
}

// TestHTTPLayerSanity checks what BenchmarkHTTPTransportOverhead's
// watertight-layer and watertight-over-headers assume: both sides send the
// same headers, with the same values (the deadline's of the same length and
// to within a couple of milliseconds, as time passes). For watertight-layer,
// a watertight Transport over another sends what a single one does; for
// watertight-over-headers, headersOnly sends what a watertight Transport
// does.
func TestHTTPLayerSanity(t *testing.T) {
	for _, name := range []string{"watertight-layer", "watertight-over-headers"} {
		t.Run(name, func(t *testing.T) {
			var tc overheadCase
			for _, c := range overheadTransports {
				if c.name == name {
					tc = c
				}
			}
			if tc.base == nil {
				t.Fatalf("no %s case", name)
			}
			var got []http.Header
			srv := newLoopback(t, func(w http.ResponseWriter, r *http.Request) {
				got = append(got, r.Header.Clone())
				okHandler(w, r)
			})
			for _, rt := range []http.RoundTripper{tc.base(t), tc.rt(t)} {
				if code, err := roundTrip(rt, srv.URL); code != http.StatusOK || err != nil {
					t.Fatalf("status %d, %v", code, err)
				}
			}
			base, wrapped := got[0], got[1]
			if len(base) != len(wrapped) {
				t.Fatalf("the base sent %v, the wrapped %v", base, wrapped)
			}
			for k, v := range base {
				w, ok := wrapped[k]
				switch {
				case !ok || len(w) != len(v):
					t.Errorf("%s: the base sent %q, the wrapped %q", k, v, w)
				case k == watertighthttp.HeaderTimeout:
					a, _ := strconv.Atoi(v[0])
					b, _ := strconv.Atoi(w[0])
					if a-b > 2 || b-a > 2 || len(v[0]) != len(w[0]) {
						t.Errorf("%s: the base sent %q, the wrapped %q", k, v, w)
					}
				case v[0] != w[0]:
					t.Errorf("%s: the base sent %q, the wrapped %q", k, v, w)
				}
			}
		})
	}
}
