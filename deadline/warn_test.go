package deadline_test

import (
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
	"github.com/watertight-go/watertight/watertighthttp"
)

// badInputs is a Listener that counts the EventBadInput events it gets by
// header and code, and keeps the last one; other kinds, and events whose
// Code is not their Reason, are counted apart.
type badInputs struct {
	mu    sync.Mutex
	n     map[[2]string]int
	last  watertight.Event
	other int
}

func (b *badInputs) OnEvent(e watertight.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e.Kind != watertight.EventBadInput || e.Code != e.Reason {
		b.other++ // another kind, or a code that is not the reason's label
		return
	}
	if b.n == nil {
		b.n = map[[2]string]int{}
	}
	b.n[[2]string{e.Key, e.Code}]++
	b.last = e
}

// count returns the events of header and reason.
func (b *badInputs) count(header, reason string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n[[2]string{header, reason}]
}

func (b *badInputs) lastEvent() watertight.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// lines returns the log's lines.
func lines(lb *logBuffer) []string {
	s := strings.TrimSpace(lb.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// A hostile client cannot flood the log: 2,000 malformed values give one
// line per reason and header each WarnInterval, every one is counted and
// sent to the Listener as an EventBadInput, and the next line says how many
// were left out.
func TestWarningsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, lb := quiet()
		evs := &badInputs{}
		cfg.Name, cfg.Listener = "api", evs
		p := mustNew(t, cfg)
		start := time.Now()
		bad := header("X-Request-Timeout-Ms", "soon")
		for range 2000 {
			if _, ok := p.Incoming(bad); ok {
				t.Fatal("a malformed value was accepted")
			}
		}
		if n := p.Warned(deadline.Malformed); n != 2000 {
			t.Fatalf("Warned(Malformed) = %d, want 2000", n)
		}
		if n := evs.count("X-Request-Timeout-Ms", "malformed"); n != 2000 || evs.other != 0 {
			t.Fatalf("%d bad_input events (and %d of other kinds), want 2000 (and none)", n, evs.other)
		}
		if e := evs.lastEvent(); e.Source != "deadline" || e.Name != "api" || !e.Time.Equal(start) || e.Err != nil {
			t.Fatalf("event %+v: want Source deadline, Name api, Time now, no Err", e)
		}
		if ls := lines(lb); len(ls) != 1 || strings.Contains(ls[0], "suppressed") {
			t.Fatalf("logged %d lines, want 1 with no count:\n%s", len(ls), lb)
		}
		// Another reason, and another header, have limits of their own.
		p.Incoming(header("X-Request-Timeout-Ms", strings.Repeat("9", 30)))
		p.Incoming(header("Grpc-Timeout", "1.5S"))
		if ls := lines(lb); len(ls) != 3 || !strings.Contains(ls[1], "absurd") || !strings.Contains(ls[2], "header=Grpc-Timeout") {
			t.Fatalf("logged %d lines, want 3:\n%s", len(ls), lb)
		}
		if a, m := p.Warned(deadline.Absurd), p.Warned(deadline.Malformed); a != 1 || m != 2001 {
			t.Fatalf("Warned = %d absurd, %d malformed; want 1, 2001", a, m)
		}
		if a, g := evs.count("X-Request-Timeout-Ms", "absurd"), evs.count("Grpc-Timeout", "malformed"); a != 1 || g != 1 {
			t.Fatalf("events: %d absurd, %d malformed grpc-timeout; want 1, 1", a, g)
		}
		time.Sleep(deadline.DefaultWarnInterval - time.Nanosecond)
		p.Incoming(bad)
		if ls := lines(lb); len(ls) != 3 {
			t.Fatalf("logged %d lines within the interval, want 3:\n%s", len(ls), lb)
		}
		time.Sleep(time.Nanosecond)
		p.Incoming(bad)
		ls := lines(lb)
		if len(ls) != 4 || !strings.Contains(ls[3], "suppressed=2000") || !strings.Contains(ls[3], "value=soon") {
			t.Fatalf("after the interval: %d lines, want a 4th saying suppressed=2000:\n%s", len(ls), lb)
		}
		p.Incoming(bad)
		if n, ls := p.Warned(deadline.Malformed), lines(lb); n != 2004 || len(ls) != 4 {
			t.Fatalf("Warned = %d, %d lines; want 2004, 4", n, len(ls))
		}
		if n := evs.count("X-Request-Timeout-Ms", "malformed"); n != 2003 {
			t.Fatalf("%d malformed events about X-Request-Timeout-Ms, want 2003 (and 1 about Grpc-Timeout)", n)
		}
		if e := evs.lastEvent(); !e.Time.Equal(start.Add(deadline.DefaultWarnInterval)) {
			t.Fatalf("last event at %v, want %v after the first", e.Time.Sub(start), deadline.DefaultWarnInterval)
		}
	})
}

// The warn path allocates nothing for a value that is not logged (within
// the rate limit), with no Listener and with one that does not allocate:
// the event is built on the stack.
func TestWarnAllocs(t *testing.T) {
	var n atomic.Int64
	counting := watertight.ListenerFunc(func(e watertight.Event) {
		if e.Kind == watertight.EventBadInput {
			n.Add(1)
		}
	})
	for _, tc := range []struct {
		name string
		l    watertight.Listener
	}{{"no listener", nil}, {"listener", counting}} {
		cfg, lb := quiet()
		cfg.WarnInterval, cfg.Listener = time.Hour, tc.l // one line, at the first value
		p := mustNew(t, cfg)
		for _, h := range []http.Header{
			header("X-Request-Timeout-Ms", "soon"),
			header("Grpc-Timeout", "1.5S", "X-Envoy-Expected-Rq-Timeout-Ms", "-1"),
			header("X-Request-Timeout-Ms", strings.Repeat("9", 30)), // absurd
		} {
			if got := testing.AllocsPerRun(1000, func() { p.Incoming(h) }); got != 0 {
				t.Errorf("%s: Incoming(%v): %v allocations, want none", tc.name, h, got)
			}
		}
		if ls := lines(lb); len(ls) != 4 {
			t.Errorf("%s: %d lines logged, want 4 (one per reason and header)", tc.name, len(ls))
		}
	}
	// AllocsPerRun calls its function once more than it measures.
	if got, want := n.Load(), int64(4*1001); got != want {
		t.Errorf("%d events, want %d", got, want)
	}
}

func TestWarnIntervalConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, lb := quiet()
		cfg.WarnInterval = -1 // every warning
		p := mustNew(t, cfg)
		for range 5 {
			p.Incoming(header("X-Request-Timeout-Ms", "x"))
		}
		if ls := lines(lb); len(ls) != 5 {
			t.Fatalf("negative WarnInterval: %d lines, want 5", len(ls))
		}
		cfg, lb = quiet()
		cfg.WarnInterval = time.Second
		p = mustNew(t, cfg)
		for range 5 {
			p.Incoming(header("X-Request-Timeout-Ms", "x"))
			time.Sleep(500 * time.Millisecond)
		}
		if ls := lines(lb); len(ls) != 3 || !strings.Contains(ls[1], "suppressed=1") {
			t.Fatalf("1s WarnInterval over 2.5s: %d lines, want 3:\n%s", len(ls), lb)
		}
		if p.Warned(deadline.Malformed) != 5 || p.Warned(deadline.Absurd) != 0 || p.Warned(99) != 0 {
			t.Fatalf("Warned = %d, %d, %d", p.Warned(deadline.Malformed), p.Warned(deadline.Absurd), p.Warned(99))
		}
	})
	if deadline.Malformed.String() != "malformed" || deadline.Absurd.String() != "absurd" || deadline.Reason(9).String() != "unknown" {
		t.Error("Reason.String")
	}
}

// End to end: 2,000 requests with a malformed header to a server behind
// watertighthttp's Handler on 127.0.0.1 give one log line and a count of
// 2,000.
func TestHandlerMalformedFlood(t *testing.T) {
	cfg, lb := quiet()
	p := mustNew(t, cfg)
	h, err := watertighthttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), watertighthttp.HandlerConfig{Deadline: p})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h) // on 127.0.0.1
	defer srv.Close()
	client := srv.Client()
	for i := range 2000 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set(deadline.DefaultHeader, "-"+strings.Repeat("1", i%7))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("request %d: %s", i, resp.Status)
		}
	}
	if n := p.Warned(deadline.Malformed); n != 2000 {
		t.Fatalf("Warned(Malformed) = %d, want 2000", n)
	}
	// One line; a second only if the test ran longer than the interval.
	if ls := lines(lb); len(ls) < 1 || len(ls) > 2 {
		t.Fatalf("logged %d lines for 2000 malformed requests, want 1:\n%.2000s", len(ls), lb)
	}
}
