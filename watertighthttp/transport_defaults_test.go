package watertighthttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// The tests of the Transport's day-one defaults (issue 16): what a new user
// gets from a zero TransportConfig.

// guardCtx returns a context without a deadline that is cancelled after d,
// so that a test of code that would wait far longer ends quickly when it
// fails.
func guardCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(d, cancel)
	t.Cleanup(func() { stop.Stop(); cancel() })
	return ctx
}

// A server's Retry-After beyond Retry.MaxRetryAfter is not slept through: a
// request without a deadline returns at once, with an error that carries the
// requested wait and the response (its body still readable).
func TestTransportRetryAfterBeyondCapReturnsAtOnce(t *testing.T) {
	srv, rec := newServer(t, always(http.StatusServiceUnavailable, "Retry-After", "86400"))
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: srv.Client().Transport})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	req, _ := http.NewRequestWithContext(guardCtx(t, 5*time.Second), http.MethodGet, srv.URL, nil)
	start := time.Now()
	resp, err := c.Do(req)
	took := time.Since(start)
	if resp != nil {
		resp.Body.Close()
	}
	var ra *retry.RetryAfterError
	if !errors.As(err, &ra) || ra.Wait != 24*time.Hour || ra.Max != retry.DefaultMaxRetryAfter {
		t.Fatalf("err = %v after %v; want a *retry.RetryAfterError with Wait 24h and Max %v", err, took, retry.DefaultMaxRetryAfter)
	}
	if took > 2*time.Second {
		t.Fatalf("returned after %v, want at once", took)
	}
	var se *watertighthttp.StatusError
	if !errors.As(err, &se) || se.Response.StatusCode != http.StatusServiceUnavailable || se.Response.Header.Get("Retry-After") != "86400" {
		t.Fatalf("err = %v: want it to wrap the 503's *StatusError", err)
	}
	if b, err := io.ReadAll(se.Response.Body); err != nil || string(b) != "failed 0" {
		t.Fatalf("body %q, %v: want the answer's body", b, err)
	}
	if !watertight.IsOverloaded(err) || watertight.IsRejection(err) {
		t.Fatalf("err = %v: want overloaded (layers above must not retry sooner), not a rejection", err)
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

// connCounter counts the connections a server saw open and closed.
type connCounter struct {
	mu             sync.Mutex
	opened, closed int
	allClosed      chan struct{} // closed when closed reaches want
	want           int
}

func (c *connCounter) hook(_ net.Conn, s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s {
	case http.StateNew:
		c.opened++
	case http.StateClosed, http.StateHijacked:
		c.closed++
		if c.closed == c.want {
			close(c.allClosed)
		}
	}
}

// http.Client.CloseIdleConnections reaches the base transport through a
// Transport and a HedgingTransport: the server sees every connection closed.
func TestCloseIdleConnectionsReachesTheBase(t *testing.T) {
	const conns = 4
	for _, name := range []string{"Transport", "HedgingTransport"} {
		t.Run(name, func(t *testing.T) {
			cc := &connCounter{allClosed: make(chan struct{}), want: conns}
			arrived := make(chan struct{}, conns)
			release := make(chan struct{})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-release
				io.WriteString(w, "ok")
			}))
			srv.Config.ConnState = cc.hook
			srv.Start()
			t.Cleanup(srv.Close)
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			var rt http.RoundTripper
			var err error
			if name == "Transport" {
				rt, err = watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: base})
			} else {
				var p *hedge.Policy
				if p, err = hedge.New(hedge.Config{Delay: time.Hour}); err == nil {
					rt, err = watertighthttp.NewHedgingTransport(watertighthttp.HedgeConfig{Base: base, Policy: p})
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			c := &http.Client{Transport: rt}
			// conns requests in flight at once: conns connections.
			var wg sync.WaitGroup
			for range conns {
				wg.Go(func() {
					if _, body, err := get(t, c, srv.URL); err != nil || body != "ok" {
						t.Errorf("got %q, %v", body, err)
					}
				})
			}
			for range conns {
				<-arrived
			}
			close(release)
			wg.Wait()
			c.CloseIdleConnections()
			select {
			case <-cc.allClosed:
			case <-time.After(5 * time.Second): // a bound, so that a failed test ends
				cc.mu.Lock()
				defer cc.mu.Unlock()
				t.Fatalf("server saw %d of %d connections closed after CloseIdleConnections", cc.closed, cc.opened)
			}
		})
	}
}

// names returns the names (keys) of the registry's breakers.
func names(r *circuit.Registry) []string {
	var out []string
	for _, s := range r.Snapshots() {
		out = append(out, s.Name)
	}
	return out
}

// okTransport answers every request at once with a 200.
var okTransport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
})

func defaultRegistries(t testing.TB) (*circuit.Registry, *bulkhead.Registry) {
	t.Helper()
	breakers, err := circuit.NewRegistry(circuit.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	bulkheads, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return breakers, bulkheads
}

// The default Key gives a request its endpoint: the host and the leading
// path segments up to the first that looks like an ID.
func TestDefaultKeyIsTheEndpoint(t *testing.T) {
	breakers, bulkheads := defaultRegistries(t)
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: okTransport, Breakers: breakers, Bulkheads: bulkheads})
	if err != nil {
		t.Fatal(err)
	}
	const h = "api.example:8080"
	for _, tc := range []struct{ path, key string }{
		{"", h + "/"},
		{"/", h + "/"},
		{"/healthy", h + "/healthy"},
		{"/users/123", h + "/users"},
		{"/users/456/orders", h + "/users"},
		{"/users/8f14e45f-ceea-467f-a0e6-1c5d7e3b9b8a", h + "/users"},
		{"/users/", h + "/users"},
		{"/api/v1/search", h + "/api/v1"},
		{"/api/v2/users/7", h + "/api/v2"},
		{"/orders/2024-05-01", h + "/orders"},
		{"/mail/bob@example.com", h + "/mail"},
		{"/8f14e45f-ceea-467f-a0e6-1c5d7e3b9b8a", h + "/"},
		{"/static/app.js", h + "/static/app.js"},
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+h+tc.path, nil)
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if b, err := breakers.Get(tc.key); err != nil || b.Snapshot().Calls == 0 {
			t.Errorf("%q: no call counted under %q (breakers: %q)", tc.path, tc.key, names(breakers))
		}
	}
	if s, err := breakers.Get(h); err != nil || s.Snapshot().Calls != 13 {
		t.Errorf("the host's breaker %q: %v; want every call counted (breakers: %q)", h, err, names(breakers))
	}
	if n := bulkheads.Len(); n != 8 {
		t.Errorf("%d bulkheads, want one per endpoint (8), none for the host", n)
	}
}

// However many paths a host's requests take, the default Key gives it at
// most MaxEndpoints keys, plus one for the rest and one for its host.
func TestEndpointKeysAreBounded(t *testing.T) {
	word := rapid.StringMatching(`[a-z]{1,12}`)
	segment := rapid.OneOf(word, rapid.StringMatching(`[0-9]{1,9}`), rapid.StringMatching(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`),
		rapid.StringMatching(`v[0-9]`), rapid.String())
	rapid.Check(t, func(rt *rapid.T) {
		max := rapid.IntRange(0, 20).Draw(rt, "MaxEndpoints")
		want := max
		if want == 0 {
			want = watertighthttp.DefaultMaxEndpoints
		}
		breakers, bulkheads := defaultRegistries(t)
		tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: okTransport, Breakers: breakers, Bulkheads: bulkheads, MaxEndpoints: max})
		if err != nil {
			rt.Fatal(err)
		}
		hosts := []string{"a.example", "b.example:8443"}
		for i, n := 0, rapid.IntRange(1, 200).Draw(rt, "requests"); i < n; i++ {
			host := rapid.SampledFrom(hosts).Draw(rt, "host")
			segs := rapid.SliceOfN(segment, 0, 4).Draw(rt, "segments")
			u := &url.URL{Scheme: "http", Host: host, Path: "/" + strings.Join(segs, "/")}
			req := &http.Request{Method: http.MethodGet, URL: u, Header: http.Header{}}
			if _, err := tr.RoundTrip(req.WithContext(context.Background())); err != nil {
				rt.Fatalf("%s: %v", u, err)
			}
		}
		per := map[string]int{}
		for _, name := range names(breakers) {
			host, _, _ := strings.Cut(name, "/")
			per[host]++
		}
		for host, n := range per {
			if n > want+2 {
				rt.Fatalf("host %s has %d keys (%q), want at most %d endpoints + the rest + the host", host, n, names(breakers), want)
			}
		}
	})
}

// FuzzDefaultKey sends requests with any path through the default Key:
// never a panic, every key is its host's, and the keys stay bounded.
func FuzzDefaultKey(f *testing.F) {
	for _, p := range []string{"", "/", "//", "/users/123", "/api/v1/x", "/a/b/c/d", "/%2F/x", "/\x00", "/é/ü", "/" + strings.Repeat("a", 40)} {
		f.Add(p, p+"/9")
	}
	breakers, _ := defaultRegistries(f)
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: okTransport, Breakers: breakers})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p1, p2 string) {
		for _, p := range []string{p1, p2} {
			req := &http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: "http", Host: "h.example", Path: p}, Header: http.Header{}}
			if _, err := tr.RoundTrip(req.WithContext(context.Background())); err != nil {
				t.Fatalf("%q: %v", p, err)
			}
		}
		ns := names(breakers)
		for _, n := range ns {
			if n != "h.example" && !strings.HasPrefix(n, "h.example/") {
				t.Fatalf("key %q is not the host's", n)
			}
		}
		if len(ns) > watertighthttp.DefaultMaxEndpoints+2 {
			t.Fatalf("%d keys: %q", len(ns), ns)
		}
	})
}

// With the default Key and the registries' defaults, an endpoint that stalls
// (its breaker tripped by its timeouts, its bulkhead full of requests that
// hang) leaves the other endpoints of its host alone: /healthy keeps
// answering. (Before, both shared the host's breaker and bulkhead: /healthy
// got 12 successes out of 160.)
func TestStalledEndpointSparesItsNeighbours(t *testing.T) {
	arrived := make(chan struct{}, 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stall" {
			arrived <- struct{}{}
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	breakers, bulkheads := defaultRegistries(t)
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Breakers: breakers, Bulkheads: bulkheads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	stall := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/stall", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	// The stalling endpoint times out, enough to trip a breaker
	// (circuit.DefaultMinCalls at 100% failures).
	for range circuit.DefaultMinCalls + 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		if err := stall(ctx); err == nil {
			t.Fatal("a stalled request succeeded")
		}
		cancel()
	}
	// And as many requests as a bulkhead admits hang on it: each either
	// reaches the server or is turned away at once.
	hold, release := context.WithCancel(context.Background())
	returned := make(chan struct{}, bulkhead.DefaultMaxConcurrent)
	var wg sync.WaitGroup
	for range bulkhead.DefaultMaxConcurrent {
		wg.Go(func() { stall(hold); returned <- struct{}{} })
	}
	for range bulkhead.DefaultMaxConcurrent {
		select {
		case <-arrived:
		case <-returned:
		}
	}
	// Meanwhile, 160 requests to /healthy from 4 callers.
	var ok atomic.Int64
	var failures sync.Map
	var hw sync.WaitGroup
	for range 4 {
		hw.Go(func() {
			for range 40 {
				req, _ := http.NewRequestWithContext(ctxTimeout(t, 5*time.Second), http.MethodGet, srv.URL+"/healthy", nil)
				resp, body, err := do(t, c, req)
				if err == nil && resp.StatusCode == http.StatusOK && body == "ok" {
					ok.Add(1)
				} else {
					failures.Store(fmt.Sprint(err), true)
				}
			}
		})
	}
	hw.Wait()
	release()
	wg.Wait()
	if n := ok.Load(); n < 159 { // 99% of 160
		var errs []string
		failures.Range(func(k, _ any) bool { errs = append(errs, k.(string)); return true })
		t.Fatalf("/healthy: %d successes out of 160 next to a stalled endpoint, want >= 99%%; errors: %q", n, errs)
	}
	host := srv.Listener.Addr().String()
	if b, _ := breakers.Get(host + "/stall"); b.State() != circuit.Open {
		t.Errorf("the stalled endpoint's breaker is %v, want open", b.State())
	}
	if b, _ := breakers.Get(host); b.State() != circuit.Closed {
		t.Errorf("the host's breaker is %v, want closed: timeouts are the endpoint's", b.State())
	}
}

// A host that cannot be reached trips its own breaker for every endpoint at
// once, however its requests spread over endpoints: failures to connect are
// the host's.
func TestUnreachableHostTripsForAllEndpoints(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens: connections are refused
	breakers, bulkheads := defaultRegistries(t)
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Breakers: breakers, Bulkheads: bulkheads, Retry: retry.Config{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// One request per endpoint: no endpoint's breaker sees enough calls.
	for i := range circuit.DefaultMinCalls {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/endpoint%c", addr, 'a'+i), nil)
		if _, err := tr.RoundTrip(req); err == nil || watertight.IsRejection(err) {
			t.Fatalf("request %d: err = %v, want a refused connection", i, err)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/another", nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("err = %v, want the host's open breaker", err)
	}
	if b, _ := breakers.Get(addr); b.State() != circuit.Open {
		t.Fatalf("the host's breaker is %v, want open", b.State())
	}
}

// MaxEndpoints < 0 keys by host alone (every endpoint shares a breaker);
// a Key of the caller's own replaces the endpoint keys and the host breaker.
func TestEndpointKeysOff(t *testing.T) {
	for _, cfg := range []watertighthttp.TransportConfig{
		{MaxEndpoints: -1},
		{Key: func(r *http.Request) string { return r.URL.Host }},
	} {
		breakers, _ := defaultRegistries(t)
		cfg.Base, cfg.Breakers = okTransport, breakers
		tr, err := watertighthttp.NewTransport(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/a", "/b/1", "/c"} {
			req, _ := http.NewRequest(http.MethodGet, "http://h.example"+p, nil)
			if _, err := tr.RoundTrip(req); err != nil {
				t.Fatal(err)
			}
		}
		if ns := names(breakers); len(ns) != 1 || ns[0] != "h.example" {
			t.Fatalf("breakers %q, want the host's alone", ns)
		}
	}
}

// An attempt that runs out of AttemptTimeout fails with ErrAttemptTimeout
// (its context's cause), and an idempotent request is retried inside the
// caller's deadline; each attempt sends its own timeout in the deadline
// header.
func TestAttemptTimeoutRetriesAStalledAttempt(t *testing.T) {
	srv, rec := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			<-r.Context().Done() // the first attempt stalls
			return
		}
		io.WriteString(w, "ok")
	})
	c := newClient(t, srv, watertighthttp.TransportConfig{AttemptTimeout: 200 * time.Millisecond})
	req, _ := http.NewRequestWithContext(ctxTimeout(t, 10*time.Second), http.MethodGet, srv.URL, nil)
	start := time.Now()
	resp, body, err := do(t, c, req)
	if err != nil || resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("got %v %q %v, want the second attempt's 200", resp, body, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v: the stalled attempt was not cut at 200ms", took)
	}
	hits := rec.seen()
	if len(hits) != 2 {
		t.Fatalf("server saw %d attempts, want 2", len(hits))
	}
	for i, h := range hits {
		// The attempt's 200ms less the deadline margin, not the caller's 10s.
		if ms, err := strconv.Atoi(h.timeout); err != nil || ms > 200 || ms <= 0 {
			t.Errorf("attempt %d sent %s: %q, want at most 200 (the attempt's timeout)", i+1, watertighthttp.HeaderTimeout, h.timeout)
		}
	}
}

// A timed-out attempt is told from the caller's own deadline, counts as a
// failure on the breaker, and is not retried for a request that is not
// idempotent.
func TestAttemptTimeoutIsItsOwnFailure(t *testing.T) {
	srv, rec := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	breakers := newBreakers(t) // MinCalls 2, 50%
	c := newClient(t, srv, watertighthttp.TransportConfig{AttemptTimeout: 50 * time.Millisecond, Breakers: breakers})
	for range 2 {
		ctx := ctxTimeout(t, 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader("x"))
		_, _, err := do(t, c, req)
		if !errors.Is(err, watertighthttp.ErrAttemptTimeout) || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			t.Fatalf("err = %v (caller's ctx: %v), want ErrAttemptTimeout before the caller's deadline", err, ctx.Err())
		}
		if !errors.Is(err, retry.ErrNotIdempotent) {
			t.Fatalf("err = %v, want a POST not retried (retry.ErrNotIdempotent)", err)
		}
	}
	if n := len(rec.seen()); n != 2 {
		t.Fatalf("server saw %d attempts, want 2 (a POST is sent once)", n)
	}
	host := srv.Listener.Addr().String()
	if b, _ := breakers.Get(host + "/orders"); b.State() != circuit.Open {
		t.Fatalf("the endpoint's breaker is %v after two timed-out attempts, want open", b.State())
	}
	// A caller's deadline shorter than the attempt timeout governs: its
	// error is the caller's, not ErrAttemptTimeout.
	c = newClient(t, srv, watertighthttp.TransportConfig{AttemptTimeout: time.Hour})
	ctx := ctxTimeout(t, 300*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if _, _, err := do(t, c, req); errors.Is(err, watertighthttp.ErrAttemptTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the caller's own deadline", err)
	}
	if ms, err := strconv.Atoi(rec.seen()[2].timeout); err != nil || ms > 300 {
		t.Fatalf("the attempt sent %q, want the caller's time left, not the hour", rec.seen()[2].timeout)
	}
	if _, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{AttemptTimeout: -1}); err == nil || !strings.Contains(err.Error(), "AttemptTimeout") {
		t.Fatalf("NewTransport(AttemptTimeout: -1) = %v, want an error naming the field", err)
	}
}

// The response of an attempt with a timeout keeps its context until its body
// is read: the body arrives whole.
func TestAttemptTimeoutKeepsTheBodyReadable(t *testing.T) {
	srv, _ := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 1<<20)))
	})
	c := newClient(t, srv, watertighthttp.TransportConfig{AttemptTimeout: 10 * time.Second})
	for range 3 {
		if _, body, err := get(t, c, srv.URL); err != nil || len(body) != 1<<20 {
			t.Fatalf("read %d bytes, %v", len(body), err)
		}
	}
}
