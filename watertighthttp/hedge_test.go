package watertighthttp_test

import (
	"bytes"
	"context"
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

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// hedgeWait bounds the waits of the HTTP hedging tests, which run on real
// sockets: they are sequenced by channels, and a wait that reaches the bound
// is a failure, not a timing.
const hedgeWait = 10 * time.Second

// hedgeReplica is a test server; its handler gets the request and the
// channel that is closed when the test ends, so that no handler outlives it.
type hedgeReplica struct {
	srv  *httptest.Server
	host string
	mu   sync.Mutex
	hits []http.Header
	body []string
}

func newHedgeReplica(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, stop <-chan struct{})) *hedgeReplica {
	t.Helper()
	stop := make(chan struct{})
	rep := &hedgeReplica{}
	rep.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rep.mu.Lock()
		rep.hits = append(rep.hits, r.Header.Clone())
		rep.body = append(rep.body, string(b))
		rep.mu.Unlock()
		handle(w, r, stop)
	}))
	rep.host = strings.TrimPrefix(rep.srv.URL, "http://")
	t.Cleanup(func() {
		close(stop)
		rep.srv.Close()
	})
	return rep
}

func (r *hedgeReplica) seen() ([]http.Header, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.hits...), append([]string(nil), r.body...)
}

// staller is a handler that never answers: it closes started when a
// request arrives, and returns when the client gives up on the request
// (closing gaveUp) or the test ends. It serves one request.
type staller struct {
	started, gaveUp chan struct{}
}

func newStaller() *staller {
	return &staller{started: make(chan struct{}), gaveUp: make(chan struct{})}
}

func (s *staller) handle(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
	close(s.started)
	select {
	case <-r.Context().Done():
		close(s.gaveUp)
	case <-stop:
	}
}

// countedConn is a client connection that reports its Close.
type countedConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// newHedgeClient returns a client with a HedgingTransport over a transport
// of its own (wrapped by wrap, if not nil). When the test ends, before the
// servers close, it closes the transport's idle connections and checks that
// every connection it opened is closed: a response body left open keeps its
// connection busy, and fails the test.
func newHedgeClient(t *testing.T, pcfg hedge.Config, cfg watertighthttp.HedgeConfig, wrap ...func(http.RoundTripper) http.RoundTripper) *hedgeClient {
	t.Helper()
	p, err := hedge.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	hc := &hedgeClient{policy: p}
	var open sync.WaitGroup
	var d net.Dialer
	base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		open.Add(1)
		return &countedConn{Conn: c, done: open.Done}, nil
	}}
	t.Cleanup(func() {
		base.CloseIdleConnections()
		closed := make(chan struct{})
		go func() { open.Wait(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(hedgeWait):
			t.Error("a connection is still in use: a response body was not closed")
			base.CloseIdleConnections()
		}
	})
	cfg.Base, cfg.Policy = base, p
	for _, w := range wrap {
		cfg.Base = w(cfg.Base)
	}
	ht, err := watertighthttp.NewHedgingTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc.Client = &http.Client{Transport: ht}
	return hc
}

// hedgeClient is a client over a HedgingTransport, with its policy.
type hedgeClient struct {
	*http.Client
	policy *hedge.Policy
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return string(b)
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hedgeWait):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A slow replica and a fast one: the request goes to the slow one, the
// hedge to the fast one, which wins; the slow one's request is cancelled
// (its server sees the client give up), and the winner's body, large
// enough not to be buffered, is read after RoundTrip returned.
func TestHedgingTransportSlowReplica(t *testing.T) {
	st := newStaller()
	slow := newHedgeReplica(t, st.handle)
	big := strings.Repeat("fast replica. ", 1<<15)
	fast := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
		waitFor(t, st.started, "the first attempt to reach its replica")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		io.WriteString(w, big)
	})
	c := newHedgeClient(t, hedge.Config{Delay: 5 * time.Millisecond},
		watertighthttp.HedgeConfig{Replicas: []string{slow.host, fast.host}})
	req, _ := http.NewRequest(http.MethodGet, slow.srv.URL+"/item?id=7", nil)
	req.Header.Set("X-Caller", "test")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != big {
		t.Fatalf("body of %d bytes, want the fast replica's %d", len(got), len(big))
	}
	waitFor(t, st.gaveUp, "the slow replica to see the client give up")
	hits, _ := fast.seen()
	if len(hits) != 1 || hits[0].Get(watertighthttp.HeaderAttempt) != "2" || hits[0].Get("X-Caller") != "test" {
		t.Fatalf("the fast replica saw %v, want one request, attempt 2, with the caller's header", hits)
	}
	if slowHits, _ := slow.seen(); len(slowHits) != 1 || slowHits[0].Get(watertighthttp.HeaderAttempt) != "1" {
		t.Fatalf("the slow replica saw %v, want attempt 1", slowHits)
	}
	if len(req.Header) != 1 {
		t.Fatalf("the caller's request header was modified: %v", req.Header)
	}
	if s := c.policy.Snapshot(); s.Sent != 1 || s.Won != 1 {
		t.Fatalf("snapshot %+v, want 1 sent, 1 won", s)
	}
}

// An answer before the delay: no hedge.
func TestHedgingTransportFastAnswer(t *testing.T) {
	a := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) { io.WriteString(w, "a") })
	b := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) { io.WriteString(w, "b") })
	c := newHedgeClient(t, hedge.Config{Delay: time.Hour},
		watertighthttp.HedgeConfig{Replicas: []string{a.host, b.host}})
	for range 3 {
		resp, err := c.Get(a.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "a" {
			t.Fatalf("body %q, want a", got)
		}
	}
	if hits, _ := b.seen(); len(hits) != 0 {
		t.Fatalf("replica b saw %d requests, want none", len(hits))
	}
	if s := c.policy.Snapshot(); s.Calls != 3 || s.Sent != 0 {
		t.Fatalf("snapshot %+v", s)
	}
}

// roundTripperFunc adapts a function to an http.RoundTripper.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A failed answer (503) does not end the request while the hedge runs: the
// hedge's 200 is the answer.
func TestHedgingTransportFailureThenSuccess(t *testing.T) {
	bStarted, aAnswered := make(chan struct{}), make(chan struct{})
	a := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
		waitFor(t, bStarted, "the hedge")
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	})
	b := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
		close(bStarted)
		waitFor(t, aAnswered, "the first answer to reach the client")
		io.WriteString(w, "b")
	})
	// The hedge answers once the client has the first answer.
	var once sync.Once
	seeFirst := func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(r)
			if r.URL.Host == a.host {
				once.Do(func() { close(aAnswered) })
			}
			return resp, err
		})
	}
	c := newHedgeClient(t, hedge.Config{Delay: time.Millisecond},
		watertighthttp.HedgeConfig{Replicas: []string{a.host, b.host}}, seeFirst)
	resp, err := c.Get(a.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || readAll(t, resp) != "b" {
		t.Fatalf("status %d, want 200 from the hedge", resp.StatusCode)
	}
}

// trackedBody is a response body that records how it was read and closed.
type trackedBody struct {
	r      *strings.Reader
	eof    atomic.Bool
	closed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }

// The answers the transport does not return are drained (so that their
// connection can be reused) and closed before RoundTrip returns: a failure
// that a success replaced, and a success that came second. The first
// attempt runs in the caller's goroutine, so its answer is dealt with
// before RoundTrip returns whatever the order of the two.
func TestHedgingTransportDiscardsLosers(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusOK} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			bStarted, bWon := make(chan struct{}), make(chan struct{})
			aBody := &trackedBody{r: strings.NewReader("first answer")}
			base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				if r.URL.Host == "a" {
					waitFor(t, bStarted, "the hedge")
					if status == http.StatusOK {
						// A success that ignores its cancellation and comes
						// after the hedge has won.
						waitFor(t, bWon, "the hedge to win")
					}
					return &http.Response{StatusCode: status, Body: aBody, Request: r}, nil
				}
				close(bStarted)
				return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("b")), Request: r}, nil
			})
			won := watertight.ListenerFunc(func(e watertight.Event) {
				if e.Kind == watertight.EventHedgeWon {
					close(bWon)
				}
			})
			p, err := hedge.New(hedge.Config{Delay: time.Millisecond, Listener: won})
			if err != nil {
				t.Fatal(err)
			}
			ht, err := watertighthttp.NewHedgingTransport(watertighthttp.HedgeConfig{Base: base, Policy: p, Replicas: []string{"a", "b"}})
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodGet, "http://a/", nil)
			resp, err := ht.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); got != "b" {
				t.Fatalf("body %q, want the hedge's", got)
			}
			if !aBody.eof.Load() || !aBody.closed.Load() {
				t.Fatalf("the discarded answer: read to its end %v, closed %v; want both", aBody.eof.Load(), aBody.closed.Load())
			}
		})
	}
}

// When every attempt fails, the last answer is the response.
func TestHedgingTransportAllFail(t *testing.T) {
	bStarted := make(chan struct{})
	a := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
		waitFor(t, bStarted, "the hedge")
		http.Error(w, "503 from a", http.StatusServiceUnavailable)
	})
	b := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
		close(bStarted)
		http.Error(w, "502 from b", http.StatusBadGateway)
	})
	c := newHedgeClient(t, hedge.Config{Delay: time.Millisecond},
		watertighthttp.HedgeConfig{Replicas: []string{a.host, b.host}})
	resp, err := c.Get(a.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if want := strconv.Itoa(resp.StatusCode) + " from "; !strings.HasPrefix(body, want) || resp.StatusCode != 502 && resp.StatusCode != 503 {
		t.Fatalf("status %d with body %q, want one of the two failures, whole", resp.StatusCode, body)
	}
}

// A POST is not hedged, unless it carries an Idempotency-Key: then the
// hedge sends the same body and key.
func TestHedgingTransportIdempotency(t *testing.T) {
	st := newStaller()
	bHit := make(chan struct{}, 4)
	a := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
		if r.Header.Get(watertighthttp.HeaderIdempotencyKey) == "" {
			// Slow enough to be hedged (the delay is 1ms) if hedging were
			// wrongly on: a hedge would reach b before this returns.
			select {
			case <-bHit:
				t.Error("a POST without a key was hedged")
			case <-time.After(200 * time.Millisecond):
			}
			io.WriteString(w, "a")
			return
		}
		st.handle(w, r, stop)
	})
	b := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
		bHit <- struct{}{}
		waitFor(t, st.started, "the first attempt to reach its replica")
		io.WriteString(w, "b")
	})
	c := newHedgeClient(t, hedge.Config{Delay: time.Millisecond},
		watertighthttp.HedgeConfig{Replicas: []string{a.host, b.host}})

	resp, err := c.Post(a.srv.URL, "text/plain", strings.NewReader("order #1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "a" {
		t.Fatalf("POST: body %q, want a", got)
	}
	if s := c.policy.Snapshot(); s.Calls != 0 {
		t.Fatalf("a POST went through the policy: %+v", s)
	}

	req, _ := http.NewRequest(http.MethodPost, a.srv.URL, bytes.NewReader([]byte("order #2")))
	req.Header.Set(watertighthttp.HeaderIdempotencyKey, "key-2")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "b" {
		t.Fatalf("POST with a key: body %q, want b (the hedge)", got)
	}
	waitFor(t, st.gaveUp, "the first attempt to be cancelled")
	hits, bodies := b.seen()
	if len(hits) != 1 || bodies[0] != "order #2" || hits[0].Get(watertighthttp.HeaderIdempotencyKey) != "key-2" {
		t.Fatalf("the hedge was %v with body %q, want the key and the body", hits, bodies)
	}
}

// Target chooses each attempt's URL; a context marked with
// retry.WithIdempotencyKey makes a POST hedgeable and sends the key.
func TestHedgingTransportTarget(t *testing.T) {
	st := newStaller()
	a := newHedgeReplica(t, st.handle)
	b := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
		waitFor(t, st.started, "the first attempt to reach its replica")
		io.WriteString(w, "b"+r.URL.Path+" "+r.Header.Get(watertighthttp.HeaderIdempotencyKey))
	})
	target := func(req *http.Request, n int) *url.URL {
		u := *req.URL
		u.Host = map[int]string{1: a.host, 2: b.host}[n]
		return &u
	}
	c := newHedgeClient(t, hedge.Config{Delay: time.Millisecond}, watertighthttp.HedgeConfig{Target: target})
	ctx := retry.WithIdempotencyKey(context.Background(), "k9")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://service.invalid/path", strings.NewReader("x"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "b/path k9" {
		t.Fatalf("body %q, want b/path k9", got)
	}
	waitFor(t, st.gaveUp, "the first attempt to be cancelled")
}

// With no replicas, the hedge goes to the same URL.
func TestHedgingTransportSameURL(t *testing.T) {
	st := newStaller()
	var calls atomic.Int32
	a := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
		if calls.Add(1) == 1 {
			st.handle(w, r, stop)
			return
		}
		waitFor(t, st.started, "the first attempt to reach its replica")
		io.WriteString(w, "second")
	})
	c := newHedgeClient(t, hedge.Config{Delay: time.Millisecond}, watertighthttp.HedgeConfig{})
	resp, err := c.Get(a.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "second" {
		t.Fatalf("body %q, want second", got)
	}
	waitFor(t, st.gaveUp, "the first attempt to be cancelled")
}

func TestHedgingTransportConfig(t *testing.T) {
	p, err := hedge.New(hedge.Config{Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  watertighthttp.HedgeConfig
		want string
	}{
		{watertighthttp.HedgeConfig{}, "watertighthttp: HedgeConfig.Policy must not be nil"},
		{watertighthttp.HedgeConfig{Policy: p, Replicas: []string{""}}, "watertighthttp: HedgeConfig.Replicas must not hold an empty host"},
		{watertighthttp.HedgeConfig{Policy: p, Replicas: []string{"a"}, Target: func(*http.Request, int) *url.URL { return nil }},
			"watertighthttp: HedgeConfig.Replicas must be empty when Target is set"},
	} {
		if _, err := watertighthttp.NewHedgingTransport(tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("NewHedgingTransport(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := watertighthttp.NewHedgingTransport(watertighthttp.HedgeConfig{Policy: p}); err != nil {
		t.Fatal(err)
	}
}

// A request whose body cannot be sent again goes straight through.
func TestHedgingTransportBodyNotReplayable(t *testing.T) {
	a := newHedgeReplica(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) { io.WriteString(w, "a") })
	c := newHedgeClient(t, hedge.Config{Delay: time.Millisecond}, watertighthttp.HedgeConfig{})
	req, _ := http.NewRequest(http.MethodGet, a.srv.URL, io.NopCloser(strings.NewReader("x")))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if s := c.policy.Snapshot(); s.Calls != 0 {
		t.Fatalf("a body without GetBody went through the policy: %+v", s)
	}
}
