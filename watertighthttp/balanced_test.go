package watertighthttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// pool is a set of real servers on 127.0.0.1 behind one Balancer.
type pool struct {
	srvs  []*httptest.Server
	hits  []atomic.Int64
	hosts []string
	bal   *balance.Balancer
	base  *http.Transport
}

// newPool starts n servers; server i answers with handler(i, w, r).
func newPool(t *testing.T, n int, cfg balance.Config, handler func(i int, w http.ResponseWriter, r *http.Request)) *pool {
	t.Helper()
	p := &pool{hits: make([]atomic.Int64, n), base: &http.Transport{}}
	for i := range n {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.hits[i].Add(1)
			handler(i, w, r)
		}))
		p.srvs = append(p.srvs, srv)
		u, _ := url.Parse(srv.URL)
		p.hosts = append(p.hosts, u.Host)
	}
	t.Cleanup(func() {
		p.base.CloseIdleConnections()
		for _, s := range p.srvs {
			s.Close()
		}
	})
	cfg.Hosts = p.hosts
	if cfg.SlowFactor == 0 {
		cfg.SlowFactor = -1 // loopback latencies are noise: not under test here
	}
	var err error
	if p.bal, err = balance.New(cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pool) transport(t *testing.T, cfg watertighthttp.TransportConfig) *watertighthttp.Transport {
	t.Helper()
	cfg.Base, cfg.Balancer = p.base, p.bal
	tr, err := watertighthttp.NewTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func (p *pool) snapshot(i int) balance.HostSnapshot { return p.bal.Snapshot().Hosts[i] }

// send makes a request to the pool's logical name and returns the status
// and body.
func send(t *testing.T, tr http.RoundTripper, method string, h http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://catalog.upstream/items/1", strings.NewReader("body"))
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// An idempotent request that fails on one host is retried on another; a
// POST without a key is not retried; the failing host is ejected after
// five failures in a row and gets no more requests.
func TestBalancedRetriesOnAnotherHostAndEjects(t *testing.T) {
	p := newPool(t, 3, balance.Config{}, func(i int, w http.ResponseWriter, r *http.Request) {
		if i == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	tr := p.transport(t, watertighthttp.TransportConfig{Retry: retry.Config{MaxAttempts: 2, MaxDelay: time.Microsecond}})
	// With ejection off, the failing host keeps its share of first
	// attempts; every retry must go to another host, or the GET fails.
	noEject := newPool(t, 3, balance.Config{ConsecutiveErrors: -1}, func(i int, w http.ResponseWriter, r *http.Request) {
		if i == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	tr2 := noEject.transport(t, watertighthttp.TransportConfig{Retry: retry.Config{MaxAttempts: 2, MaxDelay: time.Microsecond}})
	for i := range 200 {
		if code, body := send(t, tr2, http.MethodGet, nil); code != http.StatusOK || body != "ok" {
			t.Fatalf("GET %d: %d %q (the retry went to the failing host again?)", i, code, body)
		}
	}
	if n := noEject.hits[1].Load(); n < 20 {
		t.Fatalf("the failing host got %d of 200 first attempts", n)
	}
	for i := range 200 {
		if code, body := send(t, tr, http.MethodGet, nil); code != http.StatusOK || body != "ok" {
			t.Fatalf("GET %d: %d %q", i, code, body)
		}
	}
	if n := p.hits[1].Load(); n != 5 {
		t.Fatalf("the failing host got %d requests, want 5 (then ejected)", n)
	}
	if s := p.snapshot(1); !s.Ejected || s.Reason != balance.ReasonConsecutiveErrors {
		t.Fatalf("failing host: %+v", s)
	}
	for i, s := range p.bal.Snapshot().Hosts {
		if s.InFlight != 0 {
			t.Fatalf("host %d: %d in flight after every answer was read", i, s.InFlight)
		}
	}
}

func TestBalancedDoesNotReplayPOST(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	p := newPool(t, 2, balance.Config{ConsecutiveErrors: -1}, func(i int, w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if i == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	tr := p.transport(t, watertighthttp.TransportConfig{Retry: retry.Config{MaxDelay: time.Microsecond}})
	fails := 0
	for range 40 {
		code, _ := send(t, tr, http.MethodPost, nil)
		if code == http.StatusServiceUnavailable {
			fails++
		}
	}
	if got := p.hits[0].Load() + p.hits[1].Load(); got != 40 {
		t.Fatalf("40 POSTs without a key reached the hosts %d times", got)
	}
	if fails == 0 || int64(fails) != p.hits[0].Load() {
		t.Fatalf("%d POSTs answered 503, the failing host got %d", fails, p.hits[0].Load())
	}
	// With an Idempotency-Key the POST is retried, on the other host, with
	// its body.
	bodies = nil
	for range 20 {
		if code, _ := send(t, tr, http.MethodPost, http.Header{"Idempotency-Key": {`"k1"`}}); code != http.StatusOK {
			t.Fatalf("keyed POST: %d", code)
		}
	}
	for _, b := range bodies {
		if b != "body" {
			t.Fatalf("a retried POST's body was %q", b)
		}
	}
}

// A host that refuses connections (its server is gone) is retried past and
// ejected; the caller's request is never modified.
func TestBalancedDeadHost(t *testing.T) {
	p := newPool(t, 3, balance.Config{}, func(i int, w http.ResponseWriter, r *http.Request) {
		if r.Host != "catalog.upstream" {
			t.Errorf("the host saw Host %q; want the request's", r.Host)
		}
	})
	p.srvs[2].Close()
	tr := p.transport(t, watertighthttp.TransportConfig{Retry: retry.Config{MaxDelay: time.Microsecond}})
	req, _ := http.NewRequest(http.MethodGet, "http://catalog.upstream/items/1", nil)
	req.Host = "catalog.upstream"
	for i := range 100 {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		resp.Body.Close()
	}
	if req.URL.Host != "catalog.upstream" {
		t.Fatalf("the caller's URL was changed to %q", req.URL.Host)
	}
	if s := p.snapshot(2); !s.Ejected {
		t.Fatalf("the dead host: %+v", s)
	}
}

// A host whose breaker is open is passed over without a request; when
// every host's is open, the rejection is returned.
func TestBalancedPassesOverOpenBreakers(t *testing.T) {
	p := newPool(t, 3, balance.Config{}, func(i int, w http.ResponseWriter, r *http.Request) {})
	breakers, err := circuit.NewRegistry(circuit.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tr := p.transport(t, watertighthttp.TransportConfig{Breakers: breakers, MaxEndpoints: -1})
	b0, _ := breakers.Get(p.hosts[0])
	b0.ForceOpen()
	for range 60 {
		if code, _ := send(t, tr, http.MethodGet, nil); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	if n := p.hits[0].Load(); n != 0 {
		t.Fatalf("the host with an open breaker got %d requests", n)
	}
	// Two of three open: every request still finds the third.
	b1, _ := breakers.Get(p.hosts[1])
	b1.ForceOpen()
	for i := range 200 {
		if code, _ := send(t, tr, http.MethodGet, nil); code != http.StatusOK {
			t.Fatalf("request %d with one breaker of three closed: status %d", i, code)
		}
	}
	for _, h := range p.hosts[1:] {
		b, _ := breakers.Get(h)
		b.ForceOpen()
	}
	req, _ := http.NewRequest(http.MethodGet, "http://catalog.upstream/", nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("every breaker open: %v", err)
	}
	if s := p.bal.Snapshot(); s.Ejected != 0 {
		t.Fatalf("rejections ejected hosts: %+v", s)
	}
}

// A streaming answer counts in flight on its host until its body is
// closed, so the next request goes to the other host.
func TestBalancedCountsStreamsInFlight(t *testing.T) {
	release := make(chan struct{})
	p := newPool(t, 2, balance.Config{}, func(i int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if r.URL.Path == "/stream" {
			<-release
		}
	})
	var once sync.Once
	end := func() { once.Do(func() { close(release) }) }
	t.Cleanup(end) // before the servers close, should the test fail first
	tr := p.transport(t, watertighthttp.TransportConfig{})
	req, _ := http.NewRequest(http.MethodGet, "http://catalog.upstream/stream", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	streaming := -1
	for i, s := range p.bal.Snapshot().Hosts {
		if s.InFlight == 1 {
			streaming = i
		}
	}
	if streaming < 0 {
		t.Fatalf("no host counts the stream: %+v", p.bal.Snapshot())
	}
	for range 10 {
		send(t, tr, http.MethodGet, nil)
	}
	if n := p.hits[streaming].Load(); n != 1 {
		t.Fatalf("the host holding the stream got %d more requests; two choices of two hosts must send them to the other", n-1)
	}
	end()
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if s := p.snapshot(streaming); s.InFlight != 0 {
		t.Fatalf("after the stream ended: %+v", s)
	}
}

// The caller's own deadline ending does not count against the host; an
// attempt timeout does.
func TestBalancedCallerDeadlineIsNotTheHosts(t *testing.T) {
	p := newPool(t, 2, balance.Config{ConsecutiveErrors: 2}, func(i int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	})
	tr := p.transport(t, watertighthttp.TransportConfig{Retry: retry.Config{MaxAttempts: 1}})
	for range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://catalog.upstream/", nil)
		if _, err := tr.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v", err)
		}
		cancel()
	}
	if s := p.bal.Snapshot(); s.Ejected != 0 {
		t.Fatalf("the caller's deadlines ejected a host: %+v", s)
	}
	tr = p.transport(t, watertighthttp.TransportConfig{Retry: retry.Config{MaxAttempts: 1}, AttemptTimeout: 5 * time.Millisecond})
	for range 4 {
		req, _ := http.NewRequest(http.MethodGet, "http://catalog.upstream/", nil)
		if _, err := tr.RoundTrip(req); !errors.Is(err, watertighthttp.ErrAttemptTimeout) {
			t.Fatalf("err %v", err)
		}
	}
	if s := p.bal.Snapshot(); s.Ejected != 1 {
		t.Fatalf("attempt timeouts: %d ejected, want 1 (the cap of 2 hosts)", s.Ejected)
	}
}

// Callers with deadlines too short for a healthy host open neither its
// breaker nor eject it; an attempt timeout opens the breaker.
func TestBalancedShortCallerDeadlinesDoNotOpenBreakers(t *testing.T) {
	p := newPool(t, 1, balance.Config{}, func(i int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-r.Context().Done():
		}
	})
	breakers, err := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{ConsecutiveFailures: 3}})
	if err != nil {
		t.Fatal(err)
	}
	tr := p.transport(t, watertighthttp.TransportConfig{Breakers: breakers, MaxEndpoints: -1, Retry: retry.Config{MaxAttempts: 1}})
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://catalog.upstream/", nil)
		if _, err := tr.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v", err)
		}
		cancel()
	}
	b, _ := breakers.Get(p.hosts[0])
	if st := b.State(); st != circuit.Closed {
		t.Fatalf("the caller's own deadlines moved the host's breaker to %v", st)
	}
	if code, _ := send(t, tr, http.MethodGet, nil); code != http.StatusOK {
		t.Fatalf("a normal request after them: %d", code)
	}
	// A deadline whose cause is marked Failure is the host's to meet.
	own := watertight.Mark(errors.New("route timeout"), watertight.Failure)
	for range 2 {
		ctx, cancel := context.WithTimeoutCause(context.Background(), 5*time.Millisecond, own)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://catalog.upstream/", nil)
		tr.RoundTrip(req)
		cancel()
	}
	if s := b.Snapshot(); s.ConsecutiveFailures != 2 || s.State != circuit.Closed {
		t.Fatalf("two deadlines of the host's own: %+v", s)
	}
	b.Reset()
	tr = p.transport(t, watertighthttp.TransportConfig{Breakers: breakers, MaxEndpoints: -1, Retry: retry.Config{MaxAttempts: 1}, AttemptTimeout: 5 * time.Millisecond})
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, "http://catalog.upstream/", nil)
		tr.RoundTrip(req)
	}
	if st := b.State(); st != circuit.Open {
		t.Fatalf("three attempt timeouts: breaker %v, want open", st)
	}
}
