package watertighthttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// hit is what the server saw of one request.
type hit struct {
	at       time.Time
	attempt  string
	timeout  string
	key      string
	crit     string
	body     string
	method   string
	urlPath  string
	overload string
}

// recorder is an http.Handler that records every request and answers the
// n-th one (0-based) with answer(n, w, r).
type recorder struct {
	mu     sync.Mutex
	hits   []hit
	answer func(n int, w http.ResponseWriter, r *http.Request)
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rec.mu.Lock()
	n := len(rec.hits)
	rec.hits = append(rec.hits, hit{
		at:      time.Now(),
		attempt: r.Header.Get(watertighthttp.HeaderAttempt),
		timeout: r.Header.Get(watertighthttp.HeaderTimeout),
		key:     r.Header.Get(watertighthttp.HeaderIdempotencyKey),
		crit:    r.Header.Get(watertighthttp.HeaderCriticality),
		body:    string(b),
		method:  r.Method,
		urlPath: r.URL.Path,
	})
	rec.mu.Unlock()
	rec.answer(n, w, r)
}

func (rec *recorder) seen() []hit {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]hit(nil), rec.hits...)
}

// failThenOK answers the first n requests with status (and the extra
// headers), then 200 "ok".
func failThenOK(n, status int, headers ...string) func(int, http.ResponseWriter, *http.Request) {
	return func(i int, w http.ResponseWriter, r *http.Request) {
		if i < n {
			for j := 0; j+1 < len(headers); j += 2 {
				w.Header().Set(headers[j], headers[j+1])
			}
			w.WriteHeader(status)
			io.WriteString(w, "failed "+strconv.Itoa(i))
			return
		}
		io.WriteString(w, "ok")
	}
}

func always(status int, headers ...string) func(int, http.ResponseWriter, *http.Request) {
	return failThenOK(1<<30, status, headers...)
}

// hangUp closes the connection without an answer.
func hangUp(_ int, w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

func newServer(t *testing.T, answer func(int, http.ResponseWriter, *http.Request)) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{answer: answer}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return srv, rec
}

func fastBackoff(t *testing.T) *backoff.Backoff {
	t.Helper()
	b, err := backoff.New(backoff.Config{Base: time.Millisecond, Cap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newClient returns a client whose Transport sends through srv's own
// transport (closed with the server) with cfg; cfg.Retry.Backoff defaults
// to 1ms.
func newClient(t *testing.T, srv *httptest.Server, cfg watertighthttp.TransportConfig) *http.Client {
	t.Helper()
	if cfg.Base == nil {
		cfg.Base = srv.Client().Transport
	}
	if cfg.Retry.Backoff == nil {
		cfg.Retry.Backoff = fastBackoff(t)
	}
	tr, err := watertighthttp.NewTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}
}

func do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string, error) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, c, req)
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestGetRetriedOn503WithAttemptAndDeadlineHeaders(t *testing.T) {
	srv, rec := newServer(t, failThenOK(2, http.StatusServiceUnavailable))
	b, err := backoff.New(backoff.Config{Jitter: backoff.None, Base: 3 * time.Millisecond, Cap: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv, watertighthttp.TransportConfig{Retry: retry.Config{Backoff: b}})
	req, _ := http.NewRequestWithContext(ctxTimeout(t, 10*time.Second), http.MethodGet, srv.URL, nil)
	resp, body, err := do(t, c, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("got %d %q, want 200 ok", resp.StatusCode, body)
	}
	hits := rec.seen()
	if len(hits) != 3 {
		t.Fatalf("server saw %d requests, want 3", len(hits))
	}
	prev := int64(1 << 62)
	for i, h := range hits {
		if h.attempt != strconv.Itoa(i+1) {
			t.Errorf("request %d: attempt header %q, want %d", i, h.attempt, i+1)
		}
		ms, err := strconv.ParseInt(h.timeout, 10, 64)
		if err != nil {
			t.Fatalf("request %d: timeout header %q: %v", i, h.timeout, err)
		}
		if ms <= 0 || ms > 10000-int64(deadline.DefaultMargin/time.Millisecond) {
			t.Errorf("request %d: timeout %dms, want in (0, 9900]", i, ms)
		}
		if ms >= prev {
			t.Errorf("request %d: timeout %dms, not below the previous %dms", i, ms, prev)
		}
		prev = ms
	}
}

func TestNoDeadlineNoTimeoutHeader(t *testing.T) {
	srv, rec := newServer(t, always(http.StatusOK))
	c := newClient(t, srv, watertighthttp.TransportConfig{})
	if _, _, err := get(t, c, srv.URL); err != nil {
		t.Fatal(err)
	}
	if h := rec.seen()[0]; h.timeout != "" || h.attempt != "1" {
		t.Fatalf("timeout header %q, attempt %q; want none and 1", h.timeout, h.attempt)
	}
}

func TestDeadlineTooShortNotSent(t *testing.T) {
	srv, rec := newServer(t, always(http.StatusOK))
	c := newClient(t, srv, watertighthttp.TransportConfig{})
	body := &closeCounter{Reader: strings.NewReader("x")}
	// 1ms left is less than the default margin's 1ms floor leaves to send.
	req, _ := http.NewRequestWithContext(ctxTimeout(t, time.Millisecond), http.MethodPut, srv.URL, body)
	_, _, err := do(t, c, req)
	if !errors.Is(err, deadline.ErrTooShort) || !watertight.IsRejection(err) {
		t.Fatalf("err = %v, want deadline.ErrTooShort, a rejection", err)
	}
	if n := len(rec.seen()); n != 0 {
		t.Fatalf("server saw %d requests, want 0", n)
	}
	if body.closed.Load() != 1 {
		t.Fatalf("request body closed %d times, want 1", body.closed.Load())
	}
}

type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

func TestPostNotRetried(t *testing.T) {
	srv, rec := newServer(t, always(http.StatusServiceUnavailable))
	c := newClient(t, srv, watertighthttp.TransportConfig{})
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("payload"))
	resp, body, err := do(t, c, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || body != "failed 0" {
		t.Fatalf("got %d %q, want the server's 503", resp.StatusCode, body)
	}
	if watertighthttp.IsOverloadedResponse(resp) {
		t.Fatal("a request not retried must not be marked overloaded")
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

func TestPostNotRetriedOnTransportError(t *testing.T) {
	srv, rec := newServer(t, hangUp)
	c := newClient(t, srv, watertighthttp.TransportConfig{})
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("payload"))
	_, _, err := do(t, c, req)
	if !errors.Is(err, retry.ErrNotIdempotent) {
		t.Fatalf("err = %v, want retry.ErrNotIdempotent", err)
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

func TestPostWithIdempotencyKeyRetriedWithSameKeyAndBody(t *testing.T) {
	srv, rec := newServer(t, failThenOK(2, http.StatusBadGateway))
	c := newClient(t, srv, watertighthttp.TransportConfig{})
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("payload"))
	req.Header.Set(watertighthttp.HeaderIdempotencyKey, "k-1")
	resp, body, err := do(t, c, req)
	if err != nil || resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("got %v %q %v, want 200 ok", resp, body, err)
	}
	hits := rec.seen()
	if len(hits) != 3 {
		t.Fatalf("server saw %d requests, want 3", len(hits))
	}
	for i, h := range hits {
		if h.key != "k-1" || h.body != "payload" || h.method != http.MethodPost {
			t.Errorf("request %d: %s key %q body %q, want POST k-1 payload", i, h.method, h.key, h.body)
		}
	}
}

func TestContextIdempotencyKeySentAndRetried(t *testing.T) {
	srv, rec := newServer(t, failThenOK(1, http.StatusServiceUnavailable))
	c := newClient(t, srv, watertighthttp.TransportConfig{})
	ctx := retry.WithIdempotencyKey(context.Background(), "ctx-key")
	ctx = watertighthttp.WithCriticality(ctx, watertighthttp.Sheddable)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, srv.URL, strings.NewReader("p"))
	if _, _, err := do(t, c, req); err != nil {
		t.Fatal(err)
	}
	hits := rec.seen()
	if len(hits) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(hits))
	}
	for i, h := range hits {
		if h.key != `"ctx-key"` || h.body != "p" || h.crit != "sheddable" {
			t.Errorf("request %d: key %q body %q criticality %q", i, h.key, h.body, h.crit)
		}
	}
}

func TestBodyNotReplayable(t *testing.T) {
	t.Run("transport error", func(t *testing.T) {
		srv, rec := newServer(t, hangUp)
		c := newClient(t, srv, watertighthttp.TransportConfig{})
		// A body of a type http.NewRequest does not know: no GetBody.
		req, _ := http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(strings.NewReader("x")))
		if req.GetBody != nil {
			t.Fatal("GetBody set")
		}
		_, _, err := do(t, c, req)
		var skipped *retry.SkippedError
		if !errors.As(err, &skipped) || !errors.Is(err, watertighthttp.ErrBodyNotReplayable) {
			t.Fatalf("err = %v, want a SkippedError for ErrBodyNotReplayable", err)
		}
		if !strings.Contains(err.Error(), "cannot be replayed (set GetBody)") {
			t.Fatalf("err = %v, want it to say why", err)
		}
		if n := len(rec.seen()); n != 1 {
			t.Fatalf("server saw %d requests, want 1", n)
		}
	})
	t.Run("response", func(t *testing.T) {
		srv, rec := newServer(t, always(http.StatusServiceUnavailable))
		var events []retry.Event
		c := newClient(t, srv, watertighthttp.TransportConfig{Retry: retry.Config{
			OnEvent: func(ev retry.Event) { events = append(events, ev) },
		}})
		req, _ := http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(strings.NewReader("x")))
		resp, _, err := do(t, c, req)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("got %v %v, want the 503 response", resp, err)
		}
		if n := len(rec.seen()); n != 1 {
			t.Fatalf("server saw %d requests, want 1", n)
		}
		if len(events) != 1 || events[0].Kind != retry.Skipped || events[0].Reason != watertighthttp.ErrBodyNotReplayable {
			t.Fatalf("events %+v, want one Skipped for ErrBodyNotReplayable", events)
		}
	})
}

func newBreakers(t *testing.T) *circuit.Registry {
	t.Helper()
	r, err := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{
		WindowSize: 4, MinCalls: 2, FailureRateThreshold: 50, OpenDuration: time.Hour,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNotFoundReturnedNotRetriedNotCounted(t *testing.T) {
	srv, rec := newServer(t, always(http.StatusNotFound))
	breakers := newBreakers(t)
	c := newClient(t, srv, watertighthttp.TransportConfig{Breakers: breakers})
	for range 3 {
		resp, body, err := get(t, c, srv.URL)
		if err != nil || resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(body, "failed") {
			t.Fatalf("got %v %q %v, want the 404 response", resp, body, err)
		}
	}
	if n := len(rec.seen()); n != 3 {
		t.Fatalf("server saw %d requests, want 3 (no retry)", n)
	}
	snaps := breakers.Snapshots()
	host := srv.Listener.Addr().String()
	if len(snaps) != 2 || snaps[0].Name != host || snaps[1].Name != host+"/" {
		t.Fatalf("snapshots %+v, want the host's breaker and its endpoint's", snaps)
	}
	for _, s := range snaps {
		if s.State != circuit.Closed || s.Failures != 0 || s.Calls != 0 {
			t.Fatalf("breaker %+v, want closed with no call counted", s)
		}
	}
}

func TestServerErrorsOpenTheBreaker(t *testing.T) {
	srv, rec := newServer(t, always(http.StatusInternalServerError))
	breakers := newBreakers(t)
	c := newClient(t, srv, watertighthttp.TransportConfig{Breakers: breakers})
	for range 2 {
		resp, _, err := get(t, c, srv.URL)
		if err != nil || resp.StatusCode != 500 {
			t.Fatalf("got %v %v, want the 500 response", resp, err)
		}
	}
	if n := len(rec.seen()); n != 2 {
		t.Fatalf("server saw %d requests, want 2 (500 is not retried)", n)
	}
	_, _, err := get(t, c, srv.URL)
	if !watertight.IsRejection(err) || !errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("err = %v, want circuit.ErrOpen, a rejection", err)
	}
	if n := len(rec.seen()); n != 2 {
		t.Fatalf("server saw %d requests, want 2: the open breaker must not let the call through", n)
	}
	b, _ := breakers.Get(srv.Listener.Addr().String() + "/")
	if s := b.Snapshot(); s.State != circuit.Open || s.Rejected != 1 {
		t.Fatalf("breaker %+v, want the endpoint's open with one rejection", s)
	}
}

func TestKeyFunction(t *testing.T) {
	srv, _ := newServer(t, always(http.StatusOK))
	breakers := newBreakers(t)
	c := newClient(t, srv, watertighthttp.TransportConfig{
		Breakers: breakers,
		Key:      func(r *http.Request) string { return r.URL.Path },
	})
	for _, p := range []string{"/a", "/b", "/a"} {
		if _, _, err := get(t, c, srv.URL+p); err != nil {
			t.Fatal(err)
		}
	}
	snaps := breakers.Snapshots()
	if len(snaps) != 2 || snaps[0].Name != "/a" || snaps[1].Name != "/b" || snaps[0].Calls != 2 {
		t.Fatalf("snapshots %+v, want /a (2 calls) and /b", snaps)
	}
}

func TestOverloadedSignal(t *testing.T) {
	for _, h := range []string{watertighthttp.HeaderOverloaded, watertighthttp.HeaderEnvoyOverloaded} {
		t.Run(h, func(t *testing.T) {
			srv, rec := newServer(t, always(http.StatusServiceUnavailable, h, "true"))
			c := newClient(t, srv, watertighthttp.TransportConfig{})
			resp, _, err := get(t, c, srv.URL)
			if err != nil || resp.StatusCode != 503 {
				t.Fatalf("got %v %v, want the 503 response", resp, err)
			}
			if !watertighthttp.IsOverloadedResponse(resp) {
				t.Fatal("IsOverloadedResponse = false, want true")
			}
			if n := len(rec.seen()); n != 1 {
				t.Fatalf("server saw %d requests, want 1 (no retry)", n)
			}
		})
	}
	t.Run("exhausted response", func(t *testing.T) {
		srv, rec := newServer(t, always(http.StatusServiceUnavailable))
		c := newClient(t, srv, watertighthttp.TransportConfig{Retry: retry.Config{MaxAttempts: 2}})
		resp, _, err := get(t, c, srv.URL)
		if err != nil || resp.StatusCode != 503 || resp.Header.Get(watertighthttp.HeaderOverloaded) != "true" {
			t.Fatalf("got %v %v, want the 503 response marked overloaded", resp, err)
		}
		if n := len(rec.seen()); n != 2 {
			t.Fatalf("server saw %d requests, want 2", n)
		}
	})
	t.Run("exhausted error", func(t *testing.T) {
		srv, rec := newServer(t, hangUp)
		c := newClient(t, srv, watertighthttp.TransportConfig{})
		_, _, err := get(t, c, srv.URL)
		if !watertight.IsOverloaded(err) || !errors.Is(err, retry.ErrExhausted) {
			t.Fatalf("err = %v, want retry.ErrExhausted, overloaded", err)
		}
		if n := len(rec.seen()); n != retry.DefaultMaxAttempts {
			t.Fatalf("server saw %d requests, want %d", n, retry.DefaultMaxAttempts)
		}
	})
}

func TestRetryAfter(t *testing.T) {
	t.Run("capped by MaxDelay", func(t *testing.T) {
		srv, rec := newServer(t, failThenOK(1, http.StatusServiceUnavailable, "Retry-After", "1"))
		c := newClient(t, srv, watertighthttp.TransportConfig{Retry: retry.Config{MaxDelay: 20 * time.Millisecond}})
		start := time.Now()
		if _, body, err := get(t, c, srv.URL); err != nil || body != "ok" {
			t.Fatalf("got %q %v", body, err)
		}
		if took := time.Since(start); took >= time.Second {
			t.Fatalf("took %v: Retry-After 1s was not capped by MaxDelay 20ms", took)
		}
		hits := rec.seen()
		if len(hits) != 2 {
			t.Fatalf("server saw %d requests, want 2", len(hits))
		}
		// The wait is 20ms, not the 1ms backoff; the server's clock sees
		// at least most of it.
		if gap := hits[1].at.Sub(hits[0].at); gap < 15*time.Millisecond {
			t.Fatalf("retry came %v after the first attempt, want about 20ms", gap)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		srv, rec := newServer(t, failThenOK(1, http.StatusTooManyRequests, "Retry-After", "soon"))
		c := newClient(t, srv, watertighthttp.TransportConfig{Retry: retry.Config{MaxDelay: 20 * time.Millisecond}})
		if _, body, err := get(t, c, srv.URL); err != nil || body != "ok" {
			t.Fatalf("got %q %v", body, err)
		}
		if n := len(rec.seen()); n != 2 {
			t.Fatalf("server saw %d requests, want 2", n)
		}
	})
}

func TestHangingServerEndsWithTheCallersDeadline(t *testing.T) {
	srv, rec := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	c := newClient(t, srv, watertighthttp.TransportConfig{})
	req, _ := http.NewRequestWithContext(ctxTimeout(t, 300*time.Millisecond), http.MethodGet, srv.URL, nil)
	_, _, err := do(t, c, req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1: no retry once the caller's deadline passed", n)
	}
}

func TestConnectionClosedMidBody(t *testing.T) {
	midBody := func(w http.ResponseWriter) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "short")
	}
	t.Run("final answer", func(t *testing.T) {
		srv, rec := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { midBody(w) })
		c := newClient(t, srv, watertighthttp.TransportConfig{})
		resp, _, err := get(t, c, srv.URL)
		if !errors.Is(err, io.ErrUnexpectedEOF) || resp == nil || resp.StatusCode != 200 {
			t.Fatalf("got %v %v, want a 200 whose body read fails with io.ErrUnexpectedEOF", resp, err)
		}
		if n := len(rec.seen()); n != 1 {
			t.Fatalf("server saw %d requests, want 1", n)
		}
	})
	t.Run("discarded answer", func(t *testing.T) {
		srv, rec := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 0 {
				w.Header().Set("Content-Length", "100")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, "short")
				return
			}
			io.WriteString(w, "ok")
		})
		c := newClient(t, srv, watertighthttp.TransportConfig{})
		if _, body, err := get(t, c, srv.URL); err != nil || body != "ok" {
			t.Fatalf("got %q %v", body, err)
		}
		if n := len(rec.seen()); n != 2 {
			t.Fatalf("server saw %d requests, want 2", n)
		}
	})
}

// countingTransport wraps every response body to count the open ones.
type countingTransport struct {
	base http.RoundTripper
	open atomic.Int64
}

type countedBody struct {
	io.ReadCloser
	t    *countingTransport
	once sync.Once
}

func (b *countedBody) Close() error {
	b.once.Do(func() { b.t.open.Add(-1) })
	return b.ReadCloser.Close()
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		c.open.Add(1)
		resp.Body = &countedBody{ReadCloser: resp.Body, t: c}
	}
	return resp, err
}

func TestDiscardedBodiesAreClosedAndConnectionsReused(t *testing.T) {
	rec := &recorder{answer: func(n int, w http.ResponseWriter, _ *http.Request) {
		if n%3 < 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, strings.Repeat("x", 1000))
			return
		}
		io.WriteString(w, "ok")
	}}
	srv := httptest.NewUnstartedServer(rec)
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	counting := &countingTransport{base: srv.Client().Transport}
	c := newClient(t, srv, watertighthttp.TransportConfig{Base: counting})
	for range 5 {
		if _, body, err := get(t, c, srv.URL); err != nil || body != "ok" {
			t.Fatalf("got %q %v", body, err)
		}
	}
	if n := len(rec.seen()); n != 15 {
		t.Fatalf("server saw %d requests, want 15", n)
	}
	if n := counting.open.Load(); n != 0 {
		t.Fatalf("%d response bodies left open", n)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections opened, want 1: discarded answers must be drained so the connection is reused", n)
	}
}

func TestRejectedBeforeSendingClosesTheBody(t *testing.T) {
	srv, _ := newServer(t, always(http.StatusInternalServerError))
	breakers := newBreakers(t)
	c := newClient(t, srv, watertighthttp.TransportConfig{Breakers: breakers})
	for range 2 {
		get(t, c, srv.URL)
	}
	body := &closeCounter{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest(http.MethodPut, srv.URL, body)
	if _, _, err := do(t, c, req); !errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("err = %v, want circuit.ErrOpen", err)
	}
	if body.closed.Load() != 1 {
		t.Fatalf("request body closed %d times, want 1", body.closed.Load())
	}
}

func TestMaxAttemptsOneDisablesRetries(t *testing.T) {
	srv, rec := newServer(t, always(http.StatusServiceUnavailable))
	c := newClient(t, srv, watertighthttp.TransportConfig{Retry: retry.Config{MaxAttempts: 1}})
	resp, _, err := get(t, c, srv.URL)
	if err != nil || resp.StatusCode != 503 || watertighthttp.IsOverloadedResponse(resp) {
		t.Fatalf("got %v %v, want the 503 response as it is", resp, err)
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

func TestNewTransportRejectsBadRetryConfig(t *testing.T) {
	_, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Retry: retry.Config{MaxAttempts: -1}})
	if err == nil || !strings.Contains(err.Error(), "MaxAttempts") {
		t.Fatalf("err = %v, want one naming MaxAttempts", err)
	}
}

func ExampleNewTransport() {
	// A dependency that fails twice, then answers.
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "served on attempt %s", r.Header.Get(watertighthttp.HeaderAttempt))
	}))
	defer srv.Close()

	breakers, _ := circuit.NewRegistry(circuit.RegistryConfig{})
	fast, _ := backoff.New(backoff.Config{Base: time.Millisecond, Cap: time.Millisecond})
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{
		Base:     srv.Client().Transport,
		Breakers: breakers,
		Retry:    retry.Config{MaxAttempts: 3, Backoff: fast},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: tr}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output: 200 served on attempt 3
}

func TestBulkheadBoundsAttemptsInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	srv, rec := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			close(entered)
			<-release
		}
		io.WriteString(w, "ok")
	})
	bulkheads, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 1}})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv, watertighthttp.TransportConfig{Bulkheads: bulkheads})
	first := make(chan error, 1)
	go func() {
		_, _, err := get(t, c, srv.URL)
		first <- err
	}()
	<-entered
	_, _, err = get(t, c, srv.URL)
	if !errors.Is(err, bulkhead.ErrFull) || !watertight.IsRejection(err) {
		t.Fatalf("err = %v, want bulkhead.ErrFull, a rejection", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
	if _, body, err := get(t, c, srv.URL); err != nil || body != "ok" {
		t.Fatalf("after release: %q %v", body, err)
	}
}

func TestRetryBudget(t *testing.T) {
	newBudget := func(t *testing.T) *budget.Budget {
		b, err := budget.New(budget.Config{Ratio: 0.1, MinPerSecond: -1})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("response", func(t *testing.T) {
		srv, rec := newServer(t, always(http.StatusServiceUnavailable))
		c := newClient(t, srv, watertighthttp.TransportConfig{Retry: retry.Config{Budget: newBudget(t)}})
		resp, _, err := get(t, c, srv.URL)
		if err != nil || resp.StatusCode != 503 || !watertighthttp.IsOverloadedResponse(resp) {
			t.Fatalf("got %v %v, want the 503 response marked overloaded", resp, err)
		}
		if n := len(rec.seen()); n != 1 {
			t.Fatalf("server saw %d requests, want 1: the budget refused the retry", n)
		}
	})
	t.Run("error", func(t *testing.T) {
		srv, rec := newServer(t, hangUp)
		c := newClient(t, srv, watertighthttp.TransportConfig{Retry: retry.Config{Budget: newBudget(t)}})
		_, _, err := get(t, c, srv.URL)
		if !errors.Is(err, budget.ErrExhausted) || !watertight.IsOverloaded(err) {
			t.Fatalf("err = %v, want budget.ErrExhausted, overloaded", err)
		}
		if n := len(rec.seen()); n != 1 {
			t.Fatalf("server saw %d requests, want 1", n)
		}
	})
}

// cannedTransport is an inner transport without a network: it records the
// header of every request it gets (a copy) and answers the n-th one
// (0-based) with status(n), or with the same canned 200 when status is nil.
type cannedTransport struct {
	status func(n int) int
	ok     *http.Response
	mu     sync.Mutex
	seen   []http.Header
	reqs   []*http.Request
}

func (c *cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.status == nil {
		return c.ok, nil
	}
	c.mu.Lock()
	n := len(c.seen)
	c.seen = append(c.seen, r.Header.Clone())
	c.reqs = append(c.reqs, r)
	c.mu.Unlock()
	return &http.Response{StatusCode: c.status(n), Header: http.Header{}, Body: io.NopCloser(strings.NewReader("x")), Request: r}, nil
}

// maxExtraAllocs is the most allocations a request that succeeds on its first
// attempt may cost the Transport, beyond the inner transport's: the copy of
// the request (with up to six of the caller's header values in the same
// block) and its header map, which takes two. The deadline header's
// value costs none when a recent request sent the same number of
// milliseconds (two otherwise).
const maxExtraAllocs = 3

// TestTransportAllocs keeps the client-side cost of a request from growing:
// a GET with a deadline through a Transport with a breaker and a bulkhead
// per host (as in bench/http_test.go's BenchmarkHTTPTransport), against the
// same inner transport called directly.
func TestTransportAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	inner := &cannedTransport{ok: &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}}
	breakers, err := circuit.NewRegistry(circuit.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	bulkheads, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 100}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cfg      watertighthttp.TransportConfig
		deadline bool
		headers  int  // values in the caller's header, one per name
		crit     bool // a criticality on the context
	}{
		{"registries", watertighthttp.TransportConfig{Base: inner, Breakers: breakers, Bulkheads: bulkheads}, true, 0, false},
		{"shared", watertighthttp.TransportConfig{Base: inner}, true, 0, false},
		{"no deadline", watertighthttp.TransportConfig{Base: inner, Breakers: breakers, Bulkheads: bulkheads}, false, 0, false},
		// The caller's header values share the request copy's allocation
		// (up to six), its map has room for what is added (one group up to
		// eight names), and the criticality's value is a shared slice.
		{"headers", watertighthttp.TransportConfig{Base: inner, Breakers: breakers, Bulkheads: bulkheads}, true, 4, true},
		{"six headers", watertighthttp.TransportConfig{Base: inner, Breakers: breakers, Bulkheads: bulkheads}, true, 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := watertighthttp.NewTransport(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.deadline {
				ctx = ctxTimeout(t, time.Hour)
			}
			if tc.crit {
				ctx = watertighthttp.WithCriticality(ctx, watertighthttp.SheddablePlus)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/x", nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.headers {
				req.Header.Set("X-Caller-"+strconv.Itoa(i), "v")
			}
			check := func(resp *http.Response, err error) {
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("RoundTrip: %v %v", resp, err)
				}
			}
			plain := testing.AllocsPerRun(200, func() { check(inner.RoundTrip(req)) })
			// The deadline header's value is allocated again when the
			// milliseconds left change: on a slow machine, every few runs.
			// The best of a few measurements is the steady state.
			wt := testing.AllocsPerRun(200, func() { check(tr.RoundTrip(req)) })
			for i := 0; i < 4 && wt-plain > maxExtraAllocs; i++ {
				wt = min(wt, testing.AllocsPerRun(200, func() { check(tr.RoundTrip(req)) }))
			}
			if extra := wt - plain; extra > maxExtraAllocs {
				t.Fatalf("the Transport costs %v allocations per request (%v against %v), want at most %v", extra, wt, plain, maxExtraAllocs)
			}
		})
	}
}

// TestCallersRequestNotModified sends one request twice, retried, and
// checks that the caller's header and its value slices are left as they
// were, that every attempt carries the watertight headers and the caller's,
// and that an attempt's header shares nothing with another's.
func TestCallersRequestNotModified(t *testing.T) {
	inner := &cannedTransport{status: func(n int) int {
		if n%3 < 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}}
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: inner, Retry: retry.Config{Backoff: fastBackoff(t)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := watertighthttp.WithCriticality(ctxTimeout(t, 10*time.Second), watertighthttp.SheddablePlus)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	multi := make([]string, 2, 4) // room to append in place
	multi[0], multi[1] = "a", "b"
	req.Header["X-Multi"] = multi
	req.Header.Set(watertighthttp.HeaderAttempt, "stale")
	req.Header.Set(watertighthttp.HeaderTimeout, "999999")
	want := req.Header.Clone()
	url := req.URL.String()

	var resps []*http.Response
	for range 2 {
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("RoundTrip: %v %v", resp, err)
		}
		resp.Body.Close()
		resps = append(resps, resp)
	}
	if fmt.Sprint(req.Header) != fmt.Sprint(want) || &req.Header["X-Multi"][0] != &multi[0] || req.URL.String() != url {
		t.Fatalf("caller's request changed: header %v, URL %s; want %v, %s", req.Header, req.URL, want, url)
	}
	if len(inner.seen) != 6 {
		t.Fatalf("inner transport saw %d requests, want 6", len(inner.seen))
	}
	for i, h := range inner.seen {
		if got, want := h.Get(watertighthttp.HeaderAttempt), strconv.Itoa(i%3+1); got != want || len(h[watertighthttp.HeaderAttempt]) != 1 {
			t.Errorf("request %d: %s %q, want %s", i, watertighthttp.HeaderAttempt, h[watertighthttp.HeaderAttempt], want)
		}
		if ms, err := strconv.Atoi(h.Get(watertighthttp.HeaderTimeout)); err != nil || ms <= 0 || ms > 9900 || len(h[watertighthttp.HeaderTimeout]) != 1 {
			t.Errorf("request %d: %s %q, want one value in (0, 9900]", i, watertighthttp.HeaderTimeout, h[watertighthttp.HeaderTimeout])
		}
		if c := h.Get(watertighthttp.HeaderCriticality); c != "sheddable-plus" {
			t.Errorf("request %d: %s %q, want sheddable-plus", i, watertighthttp.HeaderCriticality, c)
		}
		if fmt.Sprint(h["X-Multi"]) != "[a b]" {
			t.Errorf("request %d: X-Multi %q, want [a b]", i, h["X-Multi"])
		}
	}
	// The requests the inner transport got (the last one of each is the
	// returned response's) share no value slice with the caller: an inner
	// transport writing into one leaves the caller's request as it was. (The
	// values of the watertight headers are shared read-only slices of
	// capacity 1: an append copies.)
	for i, r := range inner.reqs {
		if r == req {
			t.Fatalf("request %d is the caller's", i)
		}
		r.Header["X-Multi"][0] = "changed"
		r.Header[watertighthttp.HeaderTimeout] = append(r.Header[watertighthttp.HeaderTimeout], "appended")
	}
	if fmt.Sprint(req.Header) != fmt.Sprint(want) {
		t.Fatalf("caller's header changed through an attempt's: %v, want %v", req.Header, want)
	}
	for i, resp := range resps {
		if got := resp.Request.Header.Get(watertighthttp.HeaderAttempt); got != "3" {
			t.Errorf("response %d: request's %s %q, want 3", i, watertighthttp.HeaderAttempt, got)
		}
	}
	// The appends above did not reach the shared values.
	if resp, err := tr.RoundTrip(req); err != nil || resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusOK {
		t.Fatalf("RoundTrip: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	for i, h := range inner.seen[6:] {
		if len(h[watertighthttp.HeaderTimeout]) != 1 || len(h[watertighthttp.HeaderAttempt]) != 1 {
			t.Errorf("request %d after the appends: %s %q, %s %q; want one value each", 6+i,
				watertighthttp.HeaderTimeout, h[watertighthttp.HeaderTimeout], watertighthttp.HeaderAttempt, h[watertighthttp.HeaderAttempt])
		}
	}
}

// TestManyAttemptsHeader goes past the precomputed attempt values.
func TestManyAttemptsHeader(t *testing.T) {
	const attempts = 20
	inner := &cannedTransport{status: func(n int) int {
		if n < attempts-1 {
			return http.StatusBadGateway
		}
		return http.StatusOK
	}}
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: inner, Retry: retry.Config{MaxAttempts: attempts, Backoff: fastBackoff(t)}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://example.com/x", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("RoundTrip: %v %v", resp, err)
	}
	resp.Body.Close()
	if len(inner.seen) != attempts {
		t.Fatalf("inner transport saw %d requests, want %d", len(inner.seen), attempts)
	}
	for i, h := range inner.seen {
		if got := h[watertighthttp.HeaderAttempt]; len(got) != 1 || got[0] != strconv.Itoa(i+1) {
			t.Errorf("attempt %d: %s %q", i+1, watertighthttp.HeaderAttempt, got)
		}
		if _, ok := h[watertighthttp.HeaderTimeout]; ok {
			t.Errorf("attempt %d: a timeout header without a deadline", i+1)
		}
	}
}

// TestExhaustedWithRetryAfterReturnsTheResponse: the final answer's error is
// wrapped (retry.After), and the caller still gets the response.
func TestExhaustedWithRetryAfterReturnsTheResponse(t *testing.T) {
	srv, rec := newServer(t, always(http.StatusServiceUnavailable, "Retry-After", "0"))
	c := newClient(t, srv, watertighthttp.TransportConfig{Retry: retry.Config{MaxAttempts: 2}})
	resp, body, err := get(t, c, srv.URL)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || body != "failed 1" || !watertighthttp.IsOverloadedResponse(resp) {
		t.Fatalf("got %v %q %v, want the second 503 response marked overloaded", resp, body, err)
	}
	if n := len(rec.seen()); n != 2 {
		t.Fatalf("server saw %d requests, want 2", n)
	}
}

// roundTripFunc is a fake inner transport: no sockets, so tests can run in
// a synctest bubble.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// unavailable answers every request with 503.
func unavailable(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
		Header: http.Header{}, Body: io.NopCloser(strings.NewReader("down")), Request: r}, nil
}

// eventLog is a Listener that keeps the events it receives, one line each.
type eventLog struct {
	mu  sync.Mutex
	evs []string
}

func (l *eventLog) OnEvent(e watertight.Event) {
	s := fmt.Sprintf("%v %s/%s/%s #%d +%v %q", e.Kind, e.Source, e.Name, e.Key, e.Attempt, e.Delay, e.Reason)
	if e.Err != nil {
		s += " err=" + e.Err.Error()
	}
	l.mu.Lock()
	l.evs = append(l.evs, s)
	l.mu.Unlock()
}

func (l *eventLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.Join(l.evs, "\n")
	l.evs = nil
	return s
}

func TestTransportEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		evs, retryEvs := &eventLog{}, &eventLog{}
		wait, _ := backoff.New(backoff.Config{Jitter: backoff.None, Base: time.Millisecond, Cap: time.Millisecond})
		tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{
			Base: roundTripFunc(unavailable), Name: "edge", Listener: evs,
			Retry: retry.Config{Name: "upstream", Backoff: wait, Listener: retryEvs},
		})
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: tr}
		for _, host := range []string{"a.example", "b.example"} {
			resp, err := c.Get("http://" + host + "/x")
			if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("GET %s: %v %v", host, resp, err)
			}
			resp.Body.Close()
		}
		// A PUT whose body cannot be replayed is sent once.
		req, _ := http.NewRequest(http.MethodPut, "http://a.example/x", io.NopCloser(strings.NewReader("x")))
		resp, err := c.Do(req)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("PUT: %v %v", resp, err)
		}
		resp.Body.Close()
		const e503 = "err=watertighthttp: HTTP 503 Service Unavailable"
		want := strings.Join([]string{
			`retry_scheduled retry/upstream/a.example/x #1 +1ms "" ` + e503,
			`retry_scheduled retry/upstream/a.example/x #2 +1ms "" ` + e503,
			`retry_exhausted retry/upstream/a.example/x #3 +0s "" ` + e503,
			`retry_scheduled retry/upstream/b.example/x #1 +1ms "" ` + e503,
			`retry_scheduled retry/upstream/b.example/x #2 +1ms "" ` + e503,
			`retry_exhausted retry/upstream/b.example/x #3 +0s "" ` + e503,
			`retry_skipped http/edge/a.example/x #1 +0s "request body cannot be replayed" ` + e503,
		}, "\n")
		if got := evs.take(); got != want {
			t.Fatalf("Listener's events:\n%s\nwant:\n%s", got, want)
		}
		if got := retryEvs.take(); got != want {
			t.Fatalf("Retry.Listener's events:\n%s\nwant:\n%s", got, want)
		}
	})
}

// Through a Transport the registries' listeners get the key: the breaker's
// events come from its registry, not from the Transport.
func TestTransportRegistryEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		evs := &eventLog{}
		breakers, err := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{
			Name: "hosts", WindowSize: 2, MinCalls: 2, OpenJitter: -1, Listener: evs}})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{
			Base: roundTripFunc(unavailable), Breakers: breakers, Retry: retry.Config{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: tr}
		for range 3 {
			if resp, err := c.Get("http://a.example/"); err == nil {
				resp.Body.Close()
			}
		}
		// The endpoint's breaker: a 503 is not the host's failure.
		want := strings.Join([]string{
			`state_change circuit/hosts/a.example/ #0 +30s "failure rate 100% >= 50% over 2 calls"`,
			`rejected circuit/hosts/a.example/ #0 +0s "" err=circuit: open`,
		}, "\n")
		if got := evs.take(); got != want {
			t.Fatalf("events:\n%s\nwant:\n%s", got, want)
		}
		b, _ := breakers.Get("a.example/")
		b.Reset()
	})
}

// A listener may call back into the Transport (here: another request) and
// its registries while it handles an event.
func TestTransportListenerMayCallBackIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		breakers, _ := circuit.NewRegistry(circuit.RegistryConfig{})
		var tr *watertighthttp.Transport
		var depth, n atomic.Int64
		l := watertight.ListenerFunc(func(e watertight.Event) {
			d := depth.Add(1)
			defer depth.Add(-1)
			n.Add(1)
			_ = breakers.Snapshots()
			if d == 1 {
				req, _ := http.NewRequest(http.MethodGet, "http://b.example/", nil)
				if resp, err := tr.RoundTrip(req); err == nil {
					resp.Body.Close()
				}
			}
		})
		wait, _ := backoff.New(backoff.Config{Jitter: backoff.None, Base: time.Millisecond, Cap: time.Millisecond})
		var err error
		tr, err = watertighthttp.NewTransport(watertighthttp.TransportConfig{
			Base: roundTripFunc(unavailable), Breakers: breakers, Listener: l, Retry: retry.Config{MaxAttempts: 2, Backoff: wait}})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://a.example/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// Outer: scheduled, exhausted; each nested request: scheduled, exhausted.
		if n.Load() != 6 {
			t.Fatalf("%d events, want 6", n.Load())
		}
	})
}

// okRT answers every request at once with an empty 200.
type okRT struct{}

func (okRT) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}, nil
}

// The Transport keeps each key's pipelines, but follows its registries: a
// key whose breaker and bulkhead were evicted and created again is sent
// through the new ones, on the first request after and on every one after
// that.
func TestTransportFollowsRegistryEvictions(t *testing.T) {
	breakers, err := circuit.NewRegistry(circuit.RegistryConfig{MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	bulkheads, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{MaxKeys: 1, Config: bulkhead.Config{MaxConcurrent: 4}})
	if err != nil {
		t.Fatal(err)
	}
	// Keys by host alone: MaxKeys 1 holds one host's breaker.
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: okRT{}, Breakers: breakers, Bulkheads: bulkheads, MaxEndpoints: -1})
	if err != nil {
		t.Fatal(err)
	}
	// since counts the requests to each host since its breaker and
	// bulkhead were created.
	since := map[string]int{}
	for i, host := range []string{"a", "a", "b", "a", "a", "a", "b", "b", "a"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("request %d to %s: %v", i, host, err)
		}
		resp.Body.Close()
		for h := range since {
			if h != host {
				delete(since, h) // evicted: MaxKeys is 1
			}
		}
		since[host]++
		h, _ := bulkheads.Get(host)
		if got := h.Snapshot().Acquired; got != uint64(since[host]) {
			t.Errorf("request %d to %s: its bulkhead counts %d permits, want %d", i, host, got, since[host])
		}
		b, _ := breakers.Get(host)
		if got := b.Snapshot().Calls; got != int64(since[host]) {
			t.Errorf("request %d to %s: its breaker counts %d calls, want %d", i, host, got, since[host])
		}
	}
}

// Requests to more hosts than the registries hold, from several goroutines:
// keys are evicted and created again all the time while the Transport keeps
// and checks its pipelines. Every request is either sent or refused with
// the registries' ErrTooManyKeys (when every bulkhead is busy), and the
// race detector sees the cache's and the registries' accesses.
func TestTransportRegistryChurn(t *testing.T) {
	breakers, err := circuit.NewRegistry(circuit.RegistryConfig{MaxKeys: 3})
	if err != nil {
		t.Fatal(err)
	}
	bulkheads, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{MaxKeys: 3, Config: bulkhead.Config{MaxConcurrent: 8}})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: okRT{}, Breakers: breakers, Bulkheads: bulkheads})
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				host := "h" + strconv.Itoa((g*3+i)%10)
				req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					if !errors.Is(err, bulkhead.ErrTooManyKeys) && !errors.Is(err, circuit.ErrTooManyKeys) {
						t.Errorf("request to %s: %v", host, err)
						return
					}
					continue
				}
				resp.Body.Close()
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	if sent.Load() == 0 {
		t.Fatal("no request was sent")
	}
	if n := breakers.Len(); n > 3 {
		t.Errorf("%d breakers held, more than MaxKeys 3", n)
	}
}
