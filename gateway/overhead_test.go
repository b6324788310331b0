package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/watertight-go/watertight/gateway"
)

// cannedTransport answers every request at once with a small 200, as a
// keep-alive backend would through http.Transport, without a network: the
// allocations of its answer (Response, Header, body) stand in for the
// Transport's.
type cannedTransport struct{}

const cannedBody = "hello, world\n"

func (cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"text/plain"}, "Content-Length": {"13"}, "Date": {"Sun, 06 Dec 2026 04:00:00 GMT"}},
		Body:          io.NopCloser(strings.NewReader(cannedBody)),
		ContentLength: int64(len(cannedBody)),
		Request:       r,
	}, nil
}

// discardWriter is a ResponseWriter that keeps nothing but the status, its
// header map cleared for the next request.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) Flush()                      {}

// serverRequest is a GET as net/http's server hands it to a handler, with
// a browser-like header.
func serverRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://gw.example/catalog/items/1", nil)
	r.Header.Set("User-Agent", "bench/1.0")
	r.Header.Set("Accept", "*/*")
	r.Header.Set("Accept-Encoding", "gzip")
	r.RemoteAddr = "127.0.0.1:40000"
	return r
}

// BenchmarkOverhead measures what a request costs the gateway's own code,
// every protection of a route on (as bench/gateway/gateway.yaml), against
// a plain httputil.ReverseProxy with a buffer pool (bench/cmd/plainproxy),
// both in front of cannedTransport: no network, no server, so the
// difference is the gateway's work per request alone. bench/gateway/run.sh
// measures the whole process on loopback.
func BenchmarkOverhead(b *testing.B) {
	build := func(extra string) http.Handler {
		cfg, err := gateway.Parse("bench.yaml", []byte(listener+`
breakers:
  per-host: {min_calls: 20}
bulkheads:
  route: {max_concurrent: 10000, max_wait: 100ms}
hedges:
  reads: {percentile: 0.95, min_delay: 1ms}
upstreams:
  backend: {hosts: ["127.0.0.1:9100"], breaker: per-host}
routes:
  all: {upstream: backend, timeout: 5s, per_try_timeout: 2s, fallback: {status: 503, body: down}, `+extra+`}
`))
		if err != nil {
			b.Fatal(err)
		}
		g, err := gateway.New(cfg, gateway.WithBase(gateway.Options{Logger: quiet}, cannedTransport{}))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(g.Close)
		return g.Handler("public")
	}
	u := &url.URL{Scheme: "http", Host: "127.0.0.1:9100"}
	pool := sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	plain := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:  cannedTransport{},
		BufferPool: bufPool{&pool},
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"reverseproxy", plain},
		{"gateway", build("bulkhead: route")},
		{"gateway+tenants", build("tenants: {key: header X-Tier, max_concurrent: 10000, max_wait: 100ms, shares: {premium: 3, free: 1}}")},
		{"gateway+hedging", build("bulkhead: route, hedge: reads")},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := serverRequest()
				w := &discardWriter{h: http.Header{}}
				for pb.Next() {
					clear(w.h)
					w.status = 0
					c.h.ServeHTTP(w, r)
					if w.status != 0 && w.status != http.StatusOK {
						panic(w.status)
					}
				}
			})
		})
	}
}

type bufPool struct{ p *sync.Pool }

func (b bufPool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b bufPool) Put(s []byte) { b.p.Put(&s) }
