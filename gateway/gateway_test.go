package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/watertight-go/watertight/gateway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// backend is a real server on 127.0.0.1.
type backend struct {
	srv  *httptest.Server
	hits atomic.Int64
	host string
}

func newBackend(t *testing.T, h http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		h(w, r)
	}))
	u, _ := url.Parse(b.srv.URL)
	b.host = u.Host
	t.Cleanup(b.srv.Close)
	return b
}

// deadAddress returns a 127.0.0.1 address nothing listens on.
func deadAddress(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// front builds a gateway from yaml and serves its public handler on a real
// server on 127.0.0.1.
func front(t *testing.T, yaml string) (*gateway.Gateway, *httptest.Server) {
	t.Helper()
	cfg, err := gateway.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler("public"))
	t.Cleanup(func() {
		srv.Close()
		g.Close()
	})
	return g, srv
}

func get(t *testing.T, c *http.Client, method, url string, h http.Header, body string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body == "" {
		req.Body = nil
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

const listener = "listeners:\n  public: {address: 127.0.0.1:1}\nadmin: {address: 127.0.0.1:2}\n"

func TestRoutesMatch(t *testing.T) {
	a := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "a "+r.URL.Path) })
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "b "+r.URL.Path) })
	_, srv := front(t, listener+fmt.Sprintf(`
upstreams:
  a: {hosts: [%s]}
  b: {hosts: [%s]}
routes:
  root: {upstream: a}
  api: {path_prefix: /api, upstream: b}
  api-write: {path_prefix: /api/items, methods: [POST], upstream: a}
  other-host: {host: other.example, path_prefix: /api, upstream: a}
`, a.host, b.host))
	c := client(t)
	for _, tc := range []struct {
		method, path, host, want string
	}{
		{"GET", "/x", "", "a /x"},
		{"GET", "/api", "", "b /api"},
		{"GET", "/api/items", "", "b /api/items"},
		{"GET", "/apix", "", "a /apix"}, // /api does not match /apix
		{"POST", "/api/items/1", "", "a /api/items/1"},
		{"GET", "/api/1", "other.example:8080", "a /api/1"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != tc.want {
			t.Errorf("%s %s (host %q): %q, want %q", tc.method, tc.path, tc.host, body, tc.want)
		}
	}
}

func TestNoRoute(t *testing.T) {
	a := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	_, srv := front(t, listener+fmt.Sprintf("upstreams:\n  a: {hosts: [%s]}\nroutes:\n  api: {path_prefix: /api/, upstream: a}\n", a.host))
	if code, _, _ := get(t, client(t), "GET", srv.URL+"/other", nil, ""); code != http.StatusNotFound {
		t.Fatalf("no route: %d", code)
	}
}

// An idempotent request that fails on one host is retried on the other;
// the failing host is ejected; a POST without a key is not retried; one
// with an Idempotency-Key is, with its body.
func TestRetriesOnAnotherHost(t *testing.T) {
	bad := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	var mu sync.Mutex
	var bodies []string
	good := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		io.WriteString(w, "ok")
	})
	g, srv := front(t, listener+fmt.Sprintf(`
upstreams:
  pool: {hosts: [%s, %s], consecutive_errors: 3, slow_factor: off}
routes:
  all: {upstream: pool}
`, bad.host, good.host))
	c := client(t)
	for i := range 50 {
		if code, body, _ := get(t, c, "GET", srv.URL+"/item", nil, ""); code != 200 || body != "ok" {
			t.Fatalf("GET %d: %d %q", i, code, body)
		}
	}
	if n := bad.hits.Load(); n != 3 {
		t.Fatalf("the failing host got %d requests, want 3 (then ejected)", n)
	}
	st := g.State()
	if h := st.Upstreams[0].Balance.Hosts[0]; !h.Ejected || h.Reason != "consecutive_errors" {
		t.Fatalf("state of the failing host: %+v", h)
	}
	// The budget paid for the retries: 3 retries of 50 requests.
	if b := st.Routes[0].Budget; b == nil || b.Withdrawals != 3 {
		t.Fatalf("retry budget %+v, want 3 withdrawals", b)
	}
	// A POST with a key is retried with its body (the bad host is ejected
	// now, so send them straight to a fresh gateway whose first picks
	// include it).
	g2, srv2 := front(t, listener+fmt.Sprintf(`
upstreams:
  pool: {hosts: [%s, %s], consecutive_errors: off, slow_factor: off}
routes:
  all: {upstream: pool}
`, bad.host, good.host))
	_ = g2
	bad.hits.Store(0)
	posts, failed := 0, 0
	for range 40 {
		code, _, _ := get(t, c, "POST", srv2.URL+"/pay", nil, "amount=1")
		posts++
		if code == http.StatusServiceUnavailable {
			failed++
		}
	}
	if failed == 0 || int64(failed) != bad.hits.Load() {
		t.Fatalf("POSTs without a key: %d answered 503, the failing host got %d: a POST was replayed", failed, bad.hits.Load())
	}
	mu.Lock()
	bodies = nil
	mu.Unlock()
	for range 20 {
		if code, _, _ := get(t, c, "POST", srv2.URL+"/pay", http.Header{"Idempotency-Key": {`"k-1"`}}, "amount=1"); code != 200 {
			t.Fatalf("keyed POST: %d", code)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bodies {
		if b != "amount=1" {
			t.Fatalf("a keyed POST reached the host with body %q", b)
		}
	}
}

// The seed's storefront: a route whose upstream stalls is cut at its
// timeout and its bulkhead, and the other route's requests all succeed.
func TestStalledRouteLeavesOthers(t *testing.T) {
	stall := make(chan struct{})
	defer close(stall)
	slow := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	})
	fast := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "catalog") })
	_, srv := front(t, listener+fmt.Sprintf(`
bulkheads:
  recs: {max_concurrent: 4, max_wait: 10ms}
upstreams:
  recs: {hosts: [%s]}
  catalog: {hosts: [%s]}
routes:
  recs: {path_prefix: /recommendations, upstream: recs, timeout: 100ms, bulkhead: recs}
  catalog: {path_prefix: /catalog, upstream: catalog}
`, slow.host, fast.host))
	c := client(t)
	var wg sync.WaitGroup
	codes := make(chan int, 64)
	for range 32 {
		wg.Go(func() {
			code, _, _ := get(t, c, "GET", srv.URL+"/recommendations", nil, "")
			codes <- code
		})
	}
	for i := range 100 {
		if code, body, _ := get(t, c, "GET", srv.URL+"/catalog", nil, ""); code != 200 || body != "catalog" {
			t.Fatalf("catalog %d during the stall: %d %q", i, code, body)
		}
	}
	wg.Wait()
	close(codes)
	seen := map[int]int{}
	for code := range codes {
		seen[code]++
	}
	if seen[http.StatusGatewayTimeout] == 0 || seen[http.StatusServiceUnavailable] == 0 || seen[200] != 0 {
		t.Fatalf("stalled route's answers %v: want some 504 (timeout) and some 503 (bulkhead full)", seen)
	}
	if n := slow.hits.Load(); n > 32 {
		t.Fatalf("the stalled upstream got %d requests", n)
	}
}

func TestFallbackWhenUpstreamIsDown(t *testing.T) {
	_, srv := front(t, listener+fmt.Sprintf(`
upstreams:
  recs: {hosts: [%s]}
routes:
  recs:
    upstream: recs
    fallback: {status: 200, body: '{"items": []}', content_type: application/json}
`, deadAddress(t)))
	code, body, h := get(t, client(t), "GET", srv.URL+"/recommendations", nil, "")
	if code != 200 || body != `{"items": []}` || h.Get("Content-Type") != "application/json" || h.Get("X-Watertight-Fallback") != "recs" {
		t.Fatalf("fallback: %d %q %v", code, body, h)
	}
}

func TestForwardedFor(t *testing.T) {
	seen := make(chan http.Header, 2)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Clone() })
	for _, tc := range []struct {
		trusted, want string
	}{
		{"", "127.0.0.1"}, // a client's own X-Forwarded-For is not believed
		{"trusted_proxies: [127.0.0.0/8]", "203.0.113.7, 127.0.0.1"}, // a trusted proxy's is appended to
	} {
		_, srv := front(t, fmt.Sprintf("listeners:\n  public: {address: 127.0.0.1:1, %s}\nadmin: {address: 127.0.0.1:2}\n", strings.Trim(tc.trusted, " "))+
			fmt.Sprintf("upstreams:\n  a: {hosts: [%s]}\nroutes:\n  all: {upstream: a}\n", b.host))
		get(t, client(t), "GET", srv.URL+"/", http.Header{"X-Forwarded-For": {"203.0.113.7"}, "Connection": {"X-Secret"}, "X-Secret": {"hop"}}, "")
		h := <-seen
		if got := h.Get("X-Forwarded-For"); got != tc.want {
			t.Errorf("%q: X-Forwarded-For %q, want %q", tc.trusted, got, tc.want)
		}
		if h.Get("X-Secret") != "" {
			t.Errorf("a hop-by-hop header named in Connection reached the upstream")
		}
	}
}

// Server-sent events pass through as they are written.
func TestStreamsServerSentEvents(t *testing.T) {
	next := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: two\n\n")
	})
	_, srv := front(t, listener+fmt.Sprintf("upstreams:\n  a: {hosts: [%s]}\nroutes:\n  events: {upstream: a, timeout: off}\n", b.host))
	resp, err := client(t).Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event: %q %v (it must arrive before the upstream ends)", line, err)
	}
	close(next)
	rest, _ := io.ReadAll(rd)
	if string(rest) != "\ndata: two\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

func TestBodyLimit(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	_, srv := front(t, listener+fmt.Sprintf("upstreams:\n  a: {hosts: [%s]}\nroutes:\n  all: {upstream: a, max_body_bytes: 1000}\n", b.host))
	c := client(t)
	if code, _, _ := get(t, c, "POST", srv.URL+"/", nil, strings.Repeat("x", 1001)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("1001 bytes over a limit of 1000: %d", code)
	}
	if code, _, _ := get(t, c, "POST", srv.URL+"/", nil, strings.Repeat("x", 1000)); code != 200 {
		t.Fatalf("1000 bytes: %d", code)
	}
	if n := b.hits.Load(); n != 1 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

// Run serves the listeners and the admin listener, and on its context's
// end drains the request in flight before it returns.
func TestRunServesAndDrains(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	})
	pub, adm := deadAddress(t), deadAddress(t)
	cfg, err := gateway.Parse("run.yaml", []byte(fmt.Sprintf(`
breakers:
  per-host: {}
listeners:
  public: {address: %s}
admin: {address: %s}
upstreams:
  a: {hosts: [%s], breaker: per-host}
routes:
  all: {upstream: a}
`, pub, adm, b.host)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.Options{DrainTimeout: 5 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	c := client(t)
	var resp *http.Response
	for range 100 { // until it listens
		if resp, err = c.Get("http://" + adm + "/readyz"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, body, _ := get(t, c, "GET", "http://"+pub+"/x", nil, ""); code != 200 || body != "ok" {
		t.Fatalf("through the gateway: %d %q", code, body)
	}
	_, state, _ := get(t, c, "GET", "http://"+adm+"/state", nil, "")
	var st gateway.State
	if err := json.Unmarshal([]byte(state), &st); err != nil || len(st.Upstreams) != 1 || len(st.Upstreams[0].Breakers) != 1 || st.Upstreams[0].Breakers[0].Host != b.host {
		t.Fatalf("state %s (%v)", state, err)
	}
	if _, metrics, _ := get(t, c, "GET", "http://"+adm+"/metrics", nil, ""); !strings.Contains(metrics, "watertight_") {
		t.Fatalf("metrics without watertight's: %.300s", metrics)
	}
	// /metrics on the public listener goes to the upstream (which answers
	// "ok" to anything): the admin pages are not there.
	if _, body, _ := get(t, c, "GET", "http://"+pub+"/metrics", nil, ""); body != "ok" {
		t.Fatalf("the public listener's /metrics: %.200q", body)
	}
	// A request in flight when the context ends completes.
	slow := make(chan string, 1)
	go func() {
		resp, err := c.Get("http://" + pub + "/slow")
		if err != nil {
			slow <- err.Error()
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- string(body)
	}()
	<-arrived
	cancel()
	// Run is draining once the admin listener stops answering ready.
	for {
		resp, err := c.Get("http://" + adm + "/readyz")
		if err != nil {
			break
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if got := <-slow; got != "ok" {
		t.Fatalf("the request in flight at shutdown: %q", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
