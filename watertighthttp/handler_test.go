package watertighthttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/deadline"
)

// ---- helpers ---------------------------------------------------------------

// hNewServer serves h wrapped by NewHandler(cfg) on 127.0.0.1 and returns the
// server and the wrapped handler.
func hNewServer(t *testing.T, h http.Handler, cfg HandlerConfig) (*httptest.Server, *handler) {
	t.Helper()
	wh, err := NewHandler(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(wh)
	t.Cleanup(srv.Close)
	return srv, wh.(*handler)
}

type hResp struct {
	status int
	header http.Header
	body   string
	err    error
}

func hGet(ctx context.Context, client *http.Client, url string, hdr map[string]string) hResp {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return hResp{err: err}
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return hResp{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return hResp{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

func hNewClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func hPropagator(t *testing.T, cfg deadline.Config) *deadline.Propagator {
	t.Helper()
	p, err := deadline.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hQuietLogger discards deadline's warnings about the malformed headers the
// tests send.
func hQuietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func hCheckShed(t *testing.T, r hResp, retryAfter bool, bodyHas string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("request failed: %v", r.err)
	}
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503 (body %q)", r.status, r.body)
	}
	if got := r.header.Get(HeaderOverloaded); got != "true" {
		t.Errorf("%s = %q, want \"true\"", HeaderOverloaded, got)
	}
	if got := r.header.Get("Retry-After"); (got != "") != retryAfter || (retryAfter && got != "1") {
		t.Errorf("Retry-After = %q, want present=%v", got, retryAfter)
	}
	if !strings.HasPrefix(r.body, "watertight: shed: ") || !strings.HasSuffix(r.body, "\n") || strings.Count(r.body, "\n") != 1 {
		t.Errorf("body is not one line starting with \"watertight: shed: \": %q", r.body)
	}
	if !strings.Contains(r.body, bodyHas) {
		t.Errorf("body %q does not contain %q", r.body, bodyHas)
	}
}

// hBlocker is a handler that reports each request it starts (by its "id"
// query value) and runs until released.
type hBlocker struct {
	started chan string
	release chan struct{}
	ran     atomic.Int64
}

func hNewBlocker() *hBlocker {
	return &hBlocker{started: make(chan string, 100), release: make(chan struct{})}
}

func (b *hBlocker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.ran.Add(1)
	b.started <- r.URL.Query().Get("id")
	select {
	case <-b.release:
	case <-r.Context().Done():
	}
	fmt.Fprintln(w, "ok", r.URL.Query().Get("id"))
}

// ---- deadline ----------------------------------------------------------------

func TestHandlerSetsIncomingDeadline(t *testing.T) {
	p := hPropagator(t, deadline.Config{Max: 10 * time.Second, Logger: hQuietLogger()})
	type seen struct {
		left time.Duration
		ok   bool
	}
	got := make(chan seen, 1)
	srv, _ := hNewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dl, ok := r.Context().Deadline()
		got <- seen{time.Until(dl), ok}
	}), HandlerConfig{Deadline: p})
	client := hNewClient(t)

	for _, tc := range []struct {
		name     string
		value    string
		ok       bool
		min, max time.Duration
	}{
		{"plain", "2000", true, time.Second, 2 * time.Second},
		{"absurd clamped to Max", "99999999999999999999999", true, 9 * time.Second, 10 * time.Second},
		{"huge clamped to Max", "86400000", true, 9 * time.Second, 10 * time.Second},
		{"malformed ignored", "soon", false, 0, 0},
		{"negative ignored", "-5", false, 0, 0},
	} {
		r := hGet(context.Background(), client, srv.URL, map[string]string{HeaderTimeout: tc.value})
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("%s: %v %d %q", tc.name, r.err, r.status, r.body)
		}
		s := <-got
		if s.ok != tc.ok {
			t.Errorf("%s: handler saw a deadline = %v, want %v", tc.name, s.ok, tc.ok)
			continue
		}
		if tc.ok && (s.left <= tc.min || s.left > tc.max) {
			t.Errorf("%s: handler saw %v left, want in (%v, %v]", tc.name, s.left, tc.min, tc.max)
		}
	}
}

func TestHandlerShedsShortAndPassedDeadlines(t *testing.T) {
	p := hPropagator(t, deadline.Config{MinRemaining: time.Second, Logger: hQuietLogger()})
	var ran atomic.Int64
	var mu sync.Mutex
	var reasons []error
	srv, _ := hNewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Add(1) }),
		HandlerConfig{Deadline: p, OnShed: func(r *http.Request, reason error) {
			mu.Lock()
			reasons = append(reasons, reason)
			mu.Unlock()
		}})
	client := hNewClient(t)

	hCheckShed(t, hGet(context.Background(), client, srv.URL, map[string]string{HeaderTimeout: "50"}), false, "too short to start")
	hCheckShed(t, hGet(context.Background(), client, srv.URL, map[string]string{HeaderTimeout: "0"}), false, "deadline passed")
	if n := ran.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for shed requests", n)
	}
	// Enough time, and no deadline at all: served.
	for _, v := range []string{"5000", ""} {
		if r := hGet(context.Background(), client, srv.URL, map[string]string{HeaderTimeout: v}); r.status != http.StatusOK {
			t.Fatalf("timeout %q: status %d %q", v, r.status, r.body)
		}
	}
	if n := ran.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reasons) != 2 {
		t.Fatalf("OnShed called %d times, want 2", len(reasons))
	}
	for _, err := range reasons {
		if !errors.Is(err, deadline.ErrTooShort) || !watertight.IsRejection(err) {
			t.Errorf("OnShed reason %v: want deadline.ErrTooShort, a rejection", err)
		}
	}
}

// ---- criticality on the context ------------------------------------------------

type hLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *hLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *hLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHandlerPutsCriticalityOnContext(t *testing.T) {
	type seen struct {
		c  Criticality
		ok bool
	}
	got := make(chan seen, 1)
	var logs hLogBuffer
	evs := &hEvents{}
	srv, _ := hNewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := CriticalityFrom(r.Context())
		got <- seen{c, ok}
	}), HandlerConfig{Name: "front", Logger: slog.New(slog.NewTextHandler(&logs, nil)), Listener: evs})
	client := hNewClient(t)
	for _, tc := range []struct {
		value string
		want  seen
	}{
		{"sheddable", seen{Sheddable, true}},
		{"critical-plus", seen{CriticalPlus, true}},
		{"", seen{Critical, false}},
		{"bogus", seen{Critical, true}},
		{"bogus-again", seen{Critical, true}},
	} {
		r := hGet(context.Background(), client, srv.URL, map[string]string{HeaderCriticality: tc.value})
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("%q: %v %d", tc.value, r.err, r.status)
		}
		if s := <-got; s != tc.want {
			t.Errorf("criticality %q: handler saw %v, want %v", tc.value, s, tc.want)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("unknown criticality logged %d times, want once:\n%s", n, logs.String())
	}
	// Logged once, counted every time.
	got2 := evs.take()
	if len(got2) != 2 {
		t.Fatalf("events %+v, want 2 (one per unknown value)", got2)
	}
	for _, e := range got2 {
		if e.Kind != watertight.EventBadInput || e.Source != "http" || e.Name != "front" || e.Key != HeaderCriticality ||
			e.Reason != ReasonUnknownCriticality || e.Time.IsZero() {
			t.Errorf("event %+v: want bad_input from http, name front, key %s, reason %s", e, HeaderCriticality, ReasonUnknownCriticality)
		}
	}
}

// A flood of bad client input reaches the metrics, not the log: 2,000
// requests with a malformed X-Request-Timeout-Ms and an unknown
// X-Criticality through NewHandler (and its own Propagator, which gets the
// Handler's Name, Logger and Listener) give 2,000 EventBadInput events of
// each, but one WARN line of each: the criticality's once, the deadline's
// once per WarnInterval, the next saying how many were left out.
func TestHandlerBadInputFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs hLogBuffer
		var malformed, unknown atomic.Int64
		l := watertight.ListenerFunc(func(e watertight.Event) {
			switch {
			case e.Kind != watertight.EventBadInput || e.Name != "front" || e.Time.IsZero():
			case e.Source == "deadline" && e.Key == deadline.DefaultHeader && e.Reason == deadline.Malformed.String():
				malformed.Add(1)
				return
			case e.Source == "http" && e.Key == HeaderCriticality && e.Reason == ReasonUnknownCriticality:
				unknown.Add(1)
				return
			}
			t.Errorf("unexpected event %+v", e)
		})
		h, err := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		}), HandlerConfig{Name: "front", Logger: slog.New(slog.NewTextHandler(&logs, nil)), Listener: l})
		if err != nil {
			t.Fatal(err)
		}
		lines := func(msg string) []string {
			var out []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "level=WARN") && strings.Contains(line, msg) {
					out = append(out, line)
				}
			}
			return out
		}
		const n = 2000
		send := func(i int) {
			v := []string{"soon", "-1", "1.5", "1e3", " 2 5"}[i%5]
			if w := hServe(h, http.MethodGet, "/", map[string]string{HeaderTimeout: v, HeaderCriticality: "urgent"}); w.Code != http.StatusNoContent {
				t.Fatalf("request %d: status %d, want 204 (bad input is ignored)", i, w.Code)
			}
		}
		for i := range n {
			send(i)
		}
		if m, u := malformed.Load(), unknown.Load(); m != n || u != n {
			t.Fatalf("%d malformed and %d unknown_criticality events, want %d of each", m, u, n)
		}
		dl, crit := lines("malformed timeout header"), lines("unknown criticality")
		if len(dl) != 1 || len(crit) != 1 {
			t.Fatalf("%d deadline and %d criticality WARN lines for %d bad requests, want 1 and 1:\n%.3000s", len(dl), len(crit), n, logs.String())
		}
		time.Sleep(deadline.DefaultWarnInterval)
		send(n)
		dl, crit = lines("malformed timeout header"), lines("unknown criticality")
		if len(dl) != 2 || !strings.Contains(dl[1], fmt.Sprintf("suppressed=%d", n-1)) || len(crit) != 1 {
			t.Fatalf("after the interval: %d deadline lines (want 2, the second with suppressed=%d) and %d criticality lines (want 1):\n%.3000s",
				len(dl), n-1, len(crit), logs.String())
		}
		if m, u := malformed.Load(), unknown.Load(); m != n+1 || u != n+1 {
			t.Fatalf("%d malformed and %d unknown_criticality events, want %d of each", m, u, n+1)
		}
	})
}

// ---- admission end to end ---------------------------------------------------------

func TestHandlerAdmissionQueuesThenRejects(t *testing.T) {
	b := hNewBlocker()
	var shed atomic.Int64
	srv, h := hNewServer(t, b, HandlerConfig{MaxConcurrent: 2, MaxQueue: 1,
		OnShed: func(r *http.Request, reason error) {
			if !errors.Is(reason, ErrRouteFull) || !watertight.IsSaturation(reason) {
				t.Errorf("OnShed reason %v: want ErrRouteFull, a saturation", reason)
			}
			shed.Add(1)
		}})
	queued := make(chan string, 10)
	h.routes.setQueuedHook(func(route string) { queued <- route })
	client := hNewClient(t)

	results := make(chan hResp, 3)
	for _, id := range []string{"1", "2"} {
		go func() { results <- hGet(context.Background(), client, srv.URL+"/items?id="+id, nil) }()
	}
	running := map[string]bool{<-b.started: true, <-b.started: true}
	if !running["1"] || !running["2"] {
		t.Fatalf("running %v, want 1 and 2", running)
	}
	go func() { results <- hGet(context.Background(), client, srv.URL+"/items?id=3", nil) }()
	if route := <-queued; route != "GET /items" {
		t.Fatalf("queued on route %q, want \"GET /items\"", route)
	}

	// The fourth finds 2 in flight and 1 queued.
	hCheckShed(t, hGet(context.Background(), client, srv.URL+"/items?id=4", nil), true,
		"route GET /items is at its limit of 2 requests in flight and 1 queued")
	if shed.Load() != 1 {
		t.Fatalf("OnShed called %d times, want 1", shed.Load())
	}
	// Another route is not affected.
	go func() { results <- hGet(context.Background(), client, srv.URL+"/other?id=5", nil) }()
	if id := <-b.started; id != "5" {
		t.Fatalf("started %q, want 5 (other route)", id)
	}

	// Releasing one lets the queued one in.
	b.release <- struct{}{}
	if id := <-b.started; id != "3" {
		t.Fatalf("started %q, want the queued request 3", id)
	}
	close(b.release)
	for range 4 {
		if r := <-results; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request: %v %d %q", r.err, r.status, r.body)
		}
	}
	if n := b.ran.Load(); n != 4 {
		t.Fatalf("handler ran %d times, want 4", n)
	}
}

func TestHandlerNoQueueRejectsAtOnce(t *testing.T) {
	b := hNewBlocker()
	srv, _ := hNewServer(t, b, HandlerConfig{MaxConcurrent: 1, MaxQueue: -1})
	client := hNewClient(t)
	done := make(chan hResp, 1)
	go func() { done <- hGet(context.Background(), client, srv.URL+"/x?id=1", nil) }()
	<-b.started
	hCheckShed(t, hGet(context.Background(), client, srv.URL+"/x?id=2", nil), true, "limit of 1 request in flight and 0 queued")
	close(b.release)
	if r := <-done; r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
}

func TestHandlerNegativeMaxConcurrentDisablesAdmission(t *testing.T) {
	b := hNewBlocker()
	srv, h := hNewServer(t, b, HandlerConfig{MaxConcurrent: -1})
	if h.routes != nil {
		t.Fatal("admission enabled with MaxConcurrent -1")
	}
	client := hNewClient(t)
	done := make(chan hResp, 5)
	for i := range 5 {
		go func() { done <- hGet(context.Background(), client, fmt.Sprintf("%s/x?id=%d", srv.URL, i), nil) }()
	}
	for range 5 {
		<-b.started
	}
	close(b.release)
	for range 5 {
		if r := <-done; r.status != http.StatusOK {
			t.Fatalf("status %d", r.status)
		}
	}
}

func TestHandlerQueuedClientGivesUp(t *testing.T) {
	b := hNewBlocker()
	reasons := make(chan error, 1)
	srv, h := hNewServer(t, b, HandlerConfig{MaxConcurrent: 1, MaxQueue: 1,
		OnShed: func(r *http.Request, reason error) { reasons <- reason }})
	queued := make(chan string, 10)
	h.routes.setQueuedHook(func(string) { queued <- "" })
	client := hNewClient(t)

	first := make(chan hResp, 1)
	go func() { first <- hGet(context.Background(), client, srv.URL+"/x?id=1", nil) }()
	<-b.started

	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan hResp, 1)
	go func() { second <- hGet(ctx, client, srv.URL+"/x?id=2", nil) }()
	<-queued
	cancel()
	if r := <-second; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("client error %v, want context.Canceled", r.err)
	}
	// The server noticed the client left and dropped the queued request.
	reason := <-reasons
	if !errors.Is(reason, ErrQueueGaveUp) || !errors.Is(reason, context.Canceled) {
		t.Fatalf("OnShed reason %v: want ErrQueueGaveUp and context.Canceled", reason)
	}
	// The client gave up: a rejection, not a saturation.
	if !watertight.IsRejection(reason) || watertight.IsSaturation(reason) || watertight.Classify(nil, reason) != watertight.Ignored {
		t.Fatalf("OnShed reason %v: want a rejection that is not a saturation", reason)
	}
	close(b.release)
	if r := <-first; r.status != http.StatusOK {
		t.Fatalf("first: %d", r.status)
	}
	// The queue is empty: the next request runs at once.
	if r := hGet(context.Background(), client, srv.URL+"/x?id=3", nil); r.status != http.StatusOK {
		t.Fatalf("third: %d %q", r.status, r.body)
	}
	if n := b.ran.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (the abandoned request must not run)", n)
	}
}

// serveInBubble runs the wrapped handler directly (no socket), so that it
// can run inside a synctest bubble.
func serveInBubble(h http.Handler, path string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestHandlerQueuedRequestDeadlinePasses(t *testing.T) {
	// A queued request whose propagated deadline passes is answered 503
	// without running; one let in with less than MinRemaining left is shed
	// too. Virtual time: the handler is called directly in a bubble.
	synctest.Test(t, func(t *testing.T) {
		p := hPropagator(t, deadline.Config{MinRemaining: 100 * time.Millisecond})
		b := hNewBlocker()
		reasons := make(chan error, 2)
		wh, err := NewHandler(b, HandlerConfig{Deadline: p, MaxConcurrent: 1, MaxQueue: 2,
			OnShed: func(r *http.Request, reason error) { reasons <- reason }})
		if err != nil {
			t.Fatal(err)
		}
		first := make(chan int, 1)
		go func() { first <- serveInBubble(wh, "/x?id=1", nil).Code }()
		<-b.started
		dies := make(chan *httptest.ResponseRecorder, 1)
		go func() { dies <- serveInBubble(wh, "/x?id=2", map[string]string{HeaderTimeout: "1000"}) }()
		shortens := make(chan *httptest.ResponseRecorder, 1)
		go func() { shortens <- serveInBubble(wh, "/x?id=3", map[string]string{HeaderTimeout: "1950"}) }()
		synctest.Wait() // both queued

		time.Sleep(time.Second) // request 2's deadline passes in the queue
		rec := <-dies
		body := rec.Body.String()
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get(HeaderOverloaded) != "true" ||
			rec.Header().Get("Retry-After") != "" || !strings.Contains(body, "while it waited in the queue of route GET /x") ||
			!strings.Contains(body, "deadline passed") {
			t.Fatalf("dead in queue: %d %v %q", rec.Code, rec.Header(), body)
		}
		if r := <-reasons; !errors.Is(r, ErrQueueGaveUp) || !errors.Is(r, deadline.ErrExpired) {
			t.Fatalf("reason %v: want ErrQueueGaveUp and deadline.ErrExpired", r)
		}

		time.Sleep(900 * time.Millisecond) // request 3 has 50ms left
		b.release <- struct{}{}            // let it in: too short now
		rec = <-shortens
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "became too short") {
			t.Fatalf("too short after the wait: %d %q", rec.Code, rec.Body.String())
		}
		if r := <-reasons; !errors.Is(r, deadline.ErrTooShort) {
			t.Fatalf("reason %v: want deadline.ErrTooShort", r)
		}
		if code := <-first; code != http.StatusOK {
			t.Fatalf("first: %d", code)
		}
		if n := b.ran.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		// The place given back: a new request runs at once.
		close(b.release)
		if rec := serveInBubble(wh, "/x?id=4", nil); rec.Code != http.StatusOK {
			t.Fatalf("after: %d", rec.Code)
		}
	})
}

func TestHandlerCriticalityDisplacesSheddable(t *testing.T) {
	b := hNewBlocker()
	srv, h := hNewServer(t, b, HandlerConfig{MaxConcurrent: 1, MaxQueue: 1})
	queued := make(chan string, 10)
	h.routes.setQueuedHook(func(string) { queued <- "" })
	client := hNewClient(t)

	first := make(chan hResp, 1)
	go func() { first <- hGet(context.Background(), client, srv.URL+"/x?id=1", nil) }()
	<-b.started
	sheddable := make(chan hResp, 1)
	go func() {
		sheddable <- hGet(context.Background(), client, srv.URL+"/x?id=shed", map[string]string{HeaderCriticality: "sheddable"})
	}()
	<-queued
	critical := make(chan hResp, 1)
	go func() {
		critical <- hGet(context.Background(), client, srv.URL+"/x?id=crit", map[string]string{HeaderCriticality: "critical"})
	}()
	hCheckShed(t, <-sheddable, true, "displaced")
	<-queued
	// A sheddable newcomer cannot displace the critical one.
	hCheckShed(t, hGet(context.Background(), client, srv.URL+"/x?id=shed2", map[string]string{HeaderCriticality: "sheddable"}), true, "at its limit")
	b.release <- struct{}{}
	if id := <-b.started; id != "crit" {
		t.Fatalf("started %q, want crit", id)
	}
	close(b.release)
	<-first
	if r := <-critical; r.status != http.StatusOK {
		t.Fatalf("critical: %d", r.status)
	}
}

func TestHandlerClientGoneCancelsHandlerContext(t *testing.T) {
	causes := make(chan error, 1)
	started := make(chan struct{})
	srv, _ := hNewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		causes <- r.Context().Err()
	}), HandlerConfig{})
	client := hNewClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan hResp, 1)
	go func() {
		done <- hGet(ctx, client, srv.URL, map[string]string{HeaderTimeout: "60000", HeaderCriticality: "sheddable"})
	}()
	<-started
	cancel()
	if err := <-causes; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler context ended with %v, want context.Canceled", err)
	}
	<-done
}

func TestHandlerRouteFromPattern(t *testing.T) {
	b := hNewBlocker()
	var routes sync.Map
	wh, err := NewHandler(b, HandlerConfig{MaxConcurrent: 1, MaxQueue: -1})
	if err != nil {
		t.Fatal(err)
	}
	wh.(*handler).route = func(r *http.Request) string {
		routes.Store(defaultRoute(r), true)
		return defaultRoute(r)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", wh)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := hNewClient(t)
	done := make(chan hResp, 1)
	go func() { done <- hGet(context.Background(), client, srv.URL+"/items/1?id=1", nil) }()
	<-b.started
	// Same pattern, another path: same route, so rejected.
	hCheckShed(t, hGet(context.Background(), client, srv.URL+"/items/2?id=2", nil), true, "route GET /items/{id} is at its limit")
	close(b.release)
	<-done
	if _, ok := routes.Load("GET /items/{id}"); !ok {
		t.Fatal("route was not the ServeMux pattern")
	}
}

func TestHandlerConfigErrors(t *testing.T) {
	if _, err := NewHandler(nil, HandlerConfig{}); err == nil || !strings.Contains(err.Error(), "next") {
		t.Fatalf("NewHandler(nil) error = %v, want one naming next", err)
	}
	wh, err := NewHandler(http.NotFoundHandler(), HandlerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rt := wh.(*handler).routes
	if rt.maxConcurrent != DefaultRouteMaxConcurrent || rt.maxQueue != DefaultRouteMaxConcurrent || rt.maxRoutes != DefaultMaxRoutes {
		t.Fatalf("defaults: %d %d %d", rt.maxConcurrent, rt.maxQueue, rt.maxRoutes)
	}
}

// ---- route table ------------------------------------------------------------------

func TestRouteTableBound(t *testing.T) {
	rt := newRouteTable(1, 0, 2)
	a := rt.get(rk("a"))
	b := rt.get(rk("b"))
	c := rt.get(rk("c")) // table full, nothing idle: shared limit
	if c != rt.other || c.name != OtherRoutes {
		t.Fatalf("third route got %q, want %q", c.name, OtherRoutes)
	}
	if rt.get(rk("a")) != a {
		t.Fatal("a second get of a route gave another controller")
	}
	rt.put(a)
	rt.put(a)
	rt.put(c)
	d := rt.get(rk("d")) // a is idle: evicted
	if d == rt.other || d.name != "d" {
		t.Fatalf("got %q, want a controller of its own", d.name)
	}
	if _, ok := rt.m.Load(rk("a")); ok {
		t.Fatal("idle route a not evicted")
	}
	if v, _ := rt.m.Load(rk("b")); v != b {
		t.Fatal("busy route b evicted")
	}
	rt.put(b)
	rt.put(d)

	unbounded := newRouteTable(1, 0, -1)
	for i := range 3000 {
		if unbounded.get(rk(fmt.Sprint(i))) == unbounded.other {
			t.Fatal("unbounded table used the shared limit")
		}
	}
}

// rk is the key of a route named name by HandlerConfig.Route.
func rk(name string) routeKey { return routeKey{a: name, whole: true} }

func TestRouteKeyMatchesName(t *testing.T) {
	h := &handler{handlerCore: &handlerCore{}}
	reqs := []*http.Request{
		httptest.NewRequest(http.MethodGet, "/x", nil),
		httptest.NewRequest(http.MethodPost, "/x", nil),
		httptest.NewRequest(http.MethodGet, "/y%20z", nil),
	}
	for _, pat := range []string{"GET /x", "/x", "GET example.com/x", "POST /x"} {
		r := httptest.NewRequest(http.MethodGet, "/whatever", nil)
		r.Pattern = pat
		reqs = append(reqs, r)
	}
	// Keys are equal exactly when the names (defaultRoute) are.
	for _, r := range reqs {
		k := h.routeKey(r)
		if k.name() != defaultRoute(r) {
			t.Errorf("key %+v names %q, want %q", k, k.name(), defaultRoute(r))
		}
		for _, q := range reqs {
			if (k == h.routeKey(q)) != (defaultRoute(r) == defaultRoute(q)) {
				t.Errorf("%q and %q: keys equal %v", defaultRoute(r), defaultRoute(q), k == h.routeKey(q))
			}
		}
	}
	custom := &handler{handlerCore: &handlerCore{route: func(*http.Request) string { return "GET /x" }}}
	if k := custom.routeKey(reqs[0]); k.name() != "GET /x" {
		t.Errorf("custom route key names %q", k.name())
	}
}

func TestRouteTableEvictionRace(t *testing.T) {
	// Many requests get and put a few routes through a table of 2: routes
	// are evicted and recreated all the time, and a route must never have
	// two controllers held at once.
	rt := newRouteTable(1000, 0, 2)
	var mu sync.Mutex
	held := map[string]*admission{}
	count := map[string]int{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 3000 {
				name := fmt.Sprint("r", (g+i)%5)
				a := rt.get(rk(name))
				if a != rt.other {
					mu.Lock()
					if b := held[name]; b != nil && b != a {
						t.Errorf("route %s has two controllers held at once", name)
					}
					held[name] = a
					count[name]++
					mu.Unlock()
					if a.refs.Load() <= 0 {
						t.Errorf("held controller %s has refs %d", name, a.refs.Load())
					}
					mu.Lock()
					if count[name]--; count[name] == 0 {
						delete(held, name)
					}
					mu.Unlock()
				}
				rt.put(a)
			}
		})
	}
	wg.Wait()
	if n := rt.other.refs.Load(); n != 0 {
		t.Fatalf("other refs %d after the storm", n)
	}
	rt.m.Range(func(k, v any) bool {
		if n := v.(*admission).refs.Load(); n != 0 {
			t.Errorf("route %v refs %d after the storm", k, n)
		}
		return true
	})
}

// ---- example ----------------------------------------------------------------------

func ExampleNewHandler() {
	p, _ := deadline.New(deadline.Config{MinRemaining: 50 * time.Millisecond})
	h, err := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, hasDeadline := r.Context().Deadline()
		fmt.Fprintln(w, "served; deadline on the context:", hasDeadline)
	}), HandlerConfig{Deadline: p, MaxConcurrent: 10, MaxQueue: 10})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	send := func(timeoutMs string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/items", nil)
		req.Header.Set(HeaderTimeout, timeoutMs)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		line := string(body)
		if before, _, found := strings.Cut(line, " to start"); found {
			line = before + " ...\n" // drop the numbers, which vary
		}
		fmt.Printf("%d %s=%q %s", resp.StatusCode, HeaderOverloaded, resp.Header.Get(HeaderOverloaded), line)
	}
	send("2000") // two seconds left: served
	send("10")   // 10ms left, less than the 50ms needed: shed
	http.DefaultClient.CloseIdleConnections()
	// Output:
	// 200 X-Overloaded="" served; deadline on the context: true
	// 503 X-Overloaded="true" watertight: shed: the request's deadline is too short ...
}

// ---- events -------------------------------------------------------------------

// hEvents is a Listener that keeps the events it receives.
type hEvents struct {
	mu  sync.Mutex
	evs []watertight.Event
}

func (l *hEvents) OnEvent(e watertight.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *hEvents) take() []watertight.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := l.evs
	l.evs = nil
	return evs
}

// hServe runs one request through h and returns the recorded response.
func hServe(h http.Handler, method, target string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestHandlerShedEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		evs := &hEvents{}
		var shed atomic.Int64
		b := hNewBlocker()
		h, err := NewHandler(b, HandlerConfig{Name: "front", MaxConcurrent: 1, MaxQueue: -1, Listener: evs,
			Deadline: hPropagator(t, deadline.Config{MinRemaining: time.Second, Logger: hQuietLogger()}),
			OnShed:   func(*http.Request, error) { shed.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			hServe(h, http.MethodGet, "/items?id=1", nil)
		}()
		<-b.started
		start := time.Now()
		if w := hServe(h, http.MethodGet, "/items?id=2", nil); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("full route: status %d", w.Code)
		}
		if w := hServe(h, http.MethodGet, "/other", map[string]string{HeaderTimeout: "50"}); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("short deadline: status %d", w.Code)
		}
		close(b.release)
		<-done
		got := evs.take()
		if len(got) != 2 || shed.Load() != 2 {
			t.Fatalf("events %+v and %d OnShed calls, want 2 of each", got, shed.Load())
		}
		for i, want := range []struct {
			key, reason string
			err         error
		}{
			{"GET /items", "route GET /items is at its limit of 1 request in flight and 0 queued", ErrRouteFull},
			{"GET /other", "the request's deadline is too short to start it", deadline.ErrTooShort},
		} {
			e := got[i]
			if e.Kind != watertight.EventShed || e.Source != "http" || e.Name != "front" || e.Key != want.key ||
				!strings.HasPrefix(e.Reason, want.reason) || !errors.Is(e.Err, want.err) || !e.Time.Equal(start) {
				t.Errorf("event %d: %+v; want key %q, reason %q..., error %v", i, e, want.key, want.reason, want.err)
			}
		}
	})
}

// The route a HandlerConfig.Route names is the event's Key, and a request
// shed before its route was looked up gets it too.
func TestHandlerShedEventRouteFunc(t *testing.T) {
	evs := &hEvents{}
	h, err := NewHandler(http.NotFoundHandler(), HandlerConfig{Listener: evs,
		Route:    func(r *http.Request) string { return "tenant-" + r.Header.Get("Tenant") },
		Deadline: hPropagator(t, deadline.Config{MinRemaining: time.Second, Logger: hQuietLogger()})})
	if err != nil {
		t.Fatal(err)
	}
	hServe(h, http.MethodGet, "/", map[string]string{HeaderTimeout: "1", "Tenant": "acme"})
	if got := evs.take(); len(got) != 1 || got[0].Key != "tenant-acme" {
		t.Fatalf("events %+v, want one keyed tenant-acme", got)
	}
}

// A listener may call back into the Handler: shedding is reported with no
// admission lock held, so a request served from the listener (shed in turn)
// does not deadlock.
func TestHandlerListenerMayCallBackIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h http.Handler
		var depth, n atomic.Int64
		l := watertight.ListenerFunc(func(e watertight.Event) {
			d := depth.Add(1)
			defer depth.Add(-1)
			n.Add(1)
			if d == 1 {
				if w := hServe(h, http.MethodGet, "/items?id=nested", nil); w.Code != http.StatusServiceUnavailable {
					t.Errorf("nested request: status %d", w.Code)
				}
			}
		})
		b := hNewBlocker()
		var err error
		h, err = NewHandler(b, HandlerConfig{MaxConcurrent: 1, MaxQueue: 1, Listener: l})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { hServe(h, http.MethodGet, "/items?id=1", nil); done <- struct{}{} }()
		<-b.started
		go func() { hServe(h, http.MethodGet, "/items?id=2", nil); done <- struct{}{} }() // queued
		synctest.Wait()
		hServe(h, http.MethodGet, "/items?id=3", nil) // shed: full; the listener's request is shed too
		close(b.release)
		<-done
		<-done
		if n.Load() != 2 {
			t.Fatalf("%d events, want 2", n.Load())
		}
	})
}
