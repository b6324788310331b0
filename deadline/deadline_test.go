package deadline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/deadline"
)

// logBuffer is a slog text handler writing to a buffer, safe for concurrent
// use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func mustNew(t testing.TB, cfg deadline.Config) *deadline.Propagator {
	t.Helper()
	p, err := deadline.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return p
}

// quiet returns a config whose logger writes to a fresh buffer.
func quiet() (deadline.Config, *logBuffer) {
	var lb logBuffer
	return deadline.Config{Logger: lb.logger()}, &lb
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestErrTooShortIsRejection(t *testing.T) {
	if !watertight.IsRejection(deadline.ErrTooShort) {
		t.Error("ErrTooShort is not a rejection")
	}
	if got, want := deadline.ErrTooShort.Error(), "deadline: too little time left for the work"; got != want {
		t.Errorf("ErrTooShort = %q, want %q", got, want)
	}
	if watertight.IsRejection(deadline.ErrSyntax) {
		t.Error("ErrSyntax is a rejection")
	}
}

func TestConfigDefaults(t *testing.T) {
	p := mustNew(t, deadline.Config{})
	got := p.Config()
	want := deadline.DefaultConfig()
	if got != want {
		t.Errorf("New(Config{}).Config() = %+v, want DefaultConfig() %+v", got, want)
	}
	if want.Header != deadline.DefaultHeader || want.Margin != 100*time.Millisecond || want.Max != 5*time.Minute || want.MinRemaining != 0 {
		t.Errorf("DefaultConfig() = %+v", want)
	}
	// A negative margin means none; the header is canonicalised.
	got = mustNew(t, deadline.Config{Margin: -1, Header: "x-my-timeout"}).Config()
	if got.Margin != 0 || got.Header != "X-My-Timeout" {
		t.Errorf("Config() = %+v, want Margin 0 and Header X-My-Timeout", got)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   deadline.Config
		field string
	}{
		{deadline.Config{Max: -1}, "Config.Max must be >= 0"},
		{deadline.Config{MinRemaining: -time.Second}, "Config.MinRemaining must be >= 0"},
		{deadline.Config{Header: "X Timeout"}, "Config.Header must be a valid header name"},
		{deadline.Config{Header: "X-Timeout:"}, "Config.Header must be a valid header name"},
		{deadline.Config{Header: "X-Tïmeout"}, "Config.Header must be a valid header name"},
		{deadline.Config{Header: "grpc-timeout"}, "Config.Header must not be grpc-timeout"},
	} {
		p, err := deadline.New(tc.cfg)
		if err == nil {
			t.Errorf("New(%+v) = %v, nil; want an error", tc.cfg, p)
			continue
		}
		if !strings.HasPrefix(err.Error(), "deadline: "+tc.field) {
			t.Errorf("New(%+v) error %q, want it to start with %q", tc.cfg, err, "deadline: "+tc.field)
		}
	}
}

func TestIncoming(t *testing.T) {
	cfg, _ := quiet()
	cfg.Max = time.Minute
	p := mustNew(t, cfg)
	for _, tc := range []struct {
		name string
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{"none", header(), 0, false},
		{"other headers", header("X-Foo", "100"), 0, false},
		{"ours", header("X-Request-Timeout-Ms", "250"), 250 * time.Millisecond, true},
		{"ours lower case key via Add", header("x-request-timeout-ms", "250"), 250 * time.Millisecond, true},
		{"zero is valid", header("X-Request-Timeout-Ms", "0"), 0, true},
		{"grpc", header("Grpc-Timeout", "2S"), 2 * time.Second, true},
		{"envoy", header("X-Envoy-Expected-Rq-Timeout-Ms", "1500"), 1500 * time.Millisecond, true},
		{"envoy upstream", header("X-Envoy-Upstream-Rq-Timeout-Ms", "1500"), 1500 * time.Millisecond, true},
		{"ours shortest of all", header("Grpc-Timeout", "2S", "X-Envoy-Expected-Rq-Timeout-Ms", "3000", "X-Request-Timeout-Ms", "250"), 250 * time.Millisecond, true},
		{"grpc shorter than envoy", header("X-Envoy-Expected-Rq-Timeout-Ms", "3000", "Grpc-Timeout", "2S"), 2 * time.Second, true},
		{"malformed ours skipped", header("X-Request-Timeout-Ms", "-5", "Grpc-Timeout", "2S"), 2 * time.Second, true},
		{"all malformed", header("X-Request-Timeout-Ms", "1.5", "Grpc-Timeout", "2s", "X-Envoy-Expected-Rq-Timeout-Ms", "x"), 0, false},
		{"empty value", header("X-Request-Timeout-Ms", ""), 0, false},
		{"shortest of several values", header("X-Request-Timeout-Ms", "250", "X-Request-Timeout-Ms", "10"), 10 * time.Millisecond, true},
		{"clamped to Max", header("X-Request-Timeout-Ms", "3600000"), time.Minute, true},
		{"exactly Max", header("X-Request-Timeout-Ms", "60000"), time.Minute, true},
		{"grpc hours clamped", header("Grpc-Timeout", "99999999H"), time.Minute, true},
		{"absurd clamped", header("X-Request-Timeout-Ms", strings.Repeat("9", 40)), time.Minute, true},
		{"grpc too many digits", header("Grpc-Timeout", "123456789m"), 0, false},
	} {
		d, ok := p.Incoming(tc.h)
		if d != tc.want || ok != tc.ok {
			t.Errorf("%s: Incoming(%v) = %v, %v; want %v, %v", tc.name, tc.h, d, ok, tc.want, tc.ok)
		}
	}
}

func TestIncomingCustomHeader(t *testing.T) {
	cfg, _ := quiet()
	cfg.Header = "x-deadline-ms"
	p := mustNew(t, cfg)
	h := header("X-Request-Timeout-Ms", "250", "X-Deadline-Ms", "100")
	if d, ok := p.Incoming(h); d != 100*time.Millisecond || !ok {
		t.Errorf("Incoming = %v, %v; want 100ms from the configured header", d, ok)
	}
	// The default header is not read when another is configured.
	if d, ok := p.Incoming(header("X-Request-Timeout-Ms", "250")); ok {
		t.Errorf("Incoming = %v, %v; want nothing", d, ok)
	}
	// Envoy's header may be the configured one.
	cfg.Header = deadline.HeaderEnvoyTimeout
	p = mustNew(t, cfg)
	if d, ok := p.Incoming(header("Grpc-Timeout", "1S", "X-Envoy-Expected-Rq-Timeout-Ms", "100")); d != 100*time.Millisecond || !ok {
		t.Errorf("Incoming = %v, %v; want 100ms from Envoy's header", d, ok)
	}
}

func TestIncomingLogsIgnoredValues(t *testing.T) {
	cfg, lb := quiet()
	p := mustNew(t, cfg)
	d, ok := p.Incoming(header("X-Request-Timeout-Ms", "-5", "Grpc-Timeout", "1.5S", "X-Envoy-Expected-Rq-Timeout-Ms", "250"))
	if d != 250*time.Millisecond || !ok {
		t.Fatalf("Incoming = %v, %v; want 250ms from Envoy's header", d, ok)
	}
	lines := strings.Split(strings.TrimSpace(lb.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want 2:\n%s", len(lines), lb)
	}
	for i, want := range []struct{ header, value, reason string }{
		{"X-Request-Timeout-Ms", "-5", "want a non-negative integer of milliseconds"},
		{"Grpc-Timeout", "1.5S", "want 1 to 8 digits followed by a unit"},
	} {
		line := lines[i]
		for _, s := range []string{"level=WARN", "header=" + want.header, "value=" + want.value, want.reason, "malformed"} {
			if !strings.Contains(line, s) {
				t.Errorf("log line %q does not contain %q", line, s)
			}
		}
	}
}

func TestIncomingLogsAbsurdValues(t *testing.T) {
	cfg, lb := quiet()
	p := mustNew(t, cfg)
	long := strings.Repeat("9", 1000)
	if d, ok := p.Incoming(header("X-Request-Timeout-Ms", long)); d != deadline.DefaultMax || !ok {
		t.Fatalf("Incoming = %v, %v; want DefaultMax", d, ok)
	}
	out := lb.String()
	for _, s := range []string{"level=WARN", "absurd", "header=X-Request-Timeout-Ms", "clamped to Max 5m0s"} {
		if !strings.Contains(out, s) {
			t.Errorf("log %q does not contain %q", out, s)
		}
	}
	if len(out) > 400 {
		t.Errorf("log line of %d bytes: the value is not cut", len(out))
	}
	// A value merely above Max is clamped without a warning.
	lb2 := &logBuffer{}
	cfg.Logger = lb2.logger()
	p = mustNew(t, cfg)
	if d, ok := p.Incoming(header("X-Request-Timeout-Ms", "600000")); d != deadline.DefaultMax || !ok {
		t.Fatalf("Incoming = %v, %v; want DefaultMax", d, ok)
	}
	if lb2.String() != "" {
		t.Errorf("logged %q for a value above Max", lb2)
	}
}

func TestIncomingDefaultLogger(t *testing.T) {
	var lb logBuffer
	old := slog.Default()
	slog.SetDefault(lb.logger())
	defer slog.SetDefault(old)
	p := mustNew(t, deadline.Config{})
	if _, ok := p.Incoming(header("X-Request-Timeout-Ms", "soon")); ok {
		t.Error("a malformed value was accepted")
	}
	if !strings.Contains(lb.String(), `value=soon`) {
		t.Errorf("slog.Default() got %q", lb.String())
	}
}

func TestWithIncoming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		cfg.Max = 10 * time.Second
		p := mustNew(t, cfg)
		start := time.Now()

		ctx, cancel := p.WithIncoming(context.Background(), header("X-Request-Timeout-Ms", "250"))
		defer cancel()
		if dl, ok := ctx.Deadline(); !ok || !dl.Equal(start.Add(250*time.Millisecond)) {
			t.Errorf("Deadline() = %v, %v; want start+250ms", dl, ok)
		}
		<-ctx.Done()
		if d := time.Since(start); d != 250*time.Millisecond {
			t.Errorf("done after %v, want 250ms", d)
		}
		if ctx.Err() != context.DeadlineExceeded {
			t.Errorf("Err() = %v", ctx.Err())
		}
		cause := context.Cause(ctx)
		var ee *deadline.ExpiredError
		if !errors.As(cause, &ee) || ee.Header != "X-Request-Timeout-Ms" || ee.Timeout != 250*time.Millisecond {
			t.Errorf("Cause = %#v, want an *ExpiredError for X-Request-Timeout-Ms, 250ms", cause)
		}
		if !errors.Is(cause, deadline.ErrExpired) || !errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("Cause %v is not ErrExpired and DeadlineExceeded", cause)
		}
		if got, want := cause.Error(), "deadline: the caller's deadline passed (X-Request-Timeout-Ms: 250ms)"; got != want {
			t.Errorf("Cause = %q, want %q", got, want)
		}
	})
}

func TestWithIncomingClampedAndGRPC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		cfg.Max = 10 * time.Second
		p := mustNew(t, cfg)
		start := time.Now()
		ctx, cancel := p.WithIncoming(context.Background(), header("Grpc-Timeout", "1H"))
		defer cancel()
		if dl, _ := ctx.Deadline(); !dl.Equal(start.Add(10 * time.Second)) {
			t.Errorf("Deadline() = start+%v, want start+10s (Max)", dl.Sub(start))
		}
		<-ctx.Done()
		var ee *deadline.ExpiredError
		if !errors.As(context.Cause(ctx), &ee) || ee.Header != "Grpc-Timeout" || ee.Timeout != 10*time.Second {
			t.Errorf("Cause = %v", context.Cause(ctx))
		}
	})
}

func TestWithIncomingKeepsEarlierDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		p := mustNew(t, cfg)
		start := time.Now()
		mine := errors.New("my own timeout")
		parent, pcancel := context.WithTimeoutCause(context.Background(), 100*time.Millisecond, mine)
		defer pcancel()
		ctx, cancel := p.WithIncoming(parent, header("X-Request-Timeout-Ms", "250"))
		defer cancel()
		if dl, _ := ctx.Deadline(); !dl.Equal(start.Add(100 * time.Millisecond)) {
			t.Errorf("Deadline() = start+%v, want the parent's start+100ms", dl.Sub(start))
		}
		<-ctx.Done()
		if time.Since(start) != 100*time.Millisecond {
			t.Errorf("done after %v", time.Since(start))
		}
		if c := context.Cause(ctx); c != mine {
			t.Errorf("Cause = %v, want the parent's", c)
		}
		if errors.Is(context.Cause(ctx), deadline.ErrExpired) {
			t.Error("the parent's deadline was reported as the caller's")
		}
	})
}

func TestWithIncomingNoHeader(t *testing.T) {
	cfg, _ := quiet()
	p := mustNew(t, cfg)
	parent := context.Background()
	ctx, cancel := p.WithIncoming(parent, header("X-Request-Timeout-Ms", "nope"))
	if cancel == nil {
		t.Fatal("cancel is nil")
	}
	cancel()
	if ctx != parent {
		t.Errorf("WithIncoming without a usable header derived a context")
	}
	if _, ok := ctx.Deadline(); ok {
		t.Error("a deadline was set")
	}
}

func TestWithIncomingCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		p := mustNew(t, cfg)
		ctx, cancel := p.WithIncoming(context.Background(), header("X-Request-Timeout-Ms", "250"))
		cancel()
		if ctx.Err() != context.Canceled || errors.Is(context.Cause(ctx), deadline.ErrExpired) {
			t.Errorf("after cancel: Err %v, Cause %v", ctx.Err(), context.Cause(ctx))
		}
	})
}

// TestOutgoing checks the fixed margin (MarginFraction negative: the rule
// before the margin scaled); TestMarginScales checks the default rule.
func TestOutgoing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		cfg.Max = 2 * time.Second
		cfg.MarginFraction = -1
		p := mustNew(t, cfg)

		if d, ok := p.Outgoing(context.Background()); ok || d != 0 {
			t.Errorf("Outgoing(no deadline) = %v, %v", d, ok)
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if d, ok := p.Outgoing(ctx); d != 900*time.Millisecond || !ok {
			t.Errorf("Outgoing = %v, %v; want 900ms (1s minus the 100ms margin)", d, ok)
		}
		time.Sleep(400 * time.Millisecond)
		if d, ok := p.Outgoing(ctx); d != 500*time.Millisecond || !ok {
			t.Errorf("Outgoing after 400ms = %v, %v; want 500ms", d, ok)
		}
		time.Sleep(500 * time.Millisecond)
		if d, ok := p.Outgoing(ctx); d != 0 || !ok {
			t.Errorf("Outgoing at the margin = %v, %v; want 0", d, ok)
		}
		time.Sleep(200 * time.Millisecond)
		if d, ok := p.Outgoing(ctx); d != -200*time.Millisecond || !ok {
			t.Errorf("Outgoing after the deadline = %v, %v; want -200ms", d, ok)
		}

		long, cancel2 := context.WithTimeout(context.Background(), time.Hour)
		defer cancel2()
		if d, _ := p.Outgoing(long); d != 2*time.Second {
			t.Errorf("Outgoing(1h) = %v, want the 2s Max", d)
		}

		cfg.Margin = -1
		noMargin := mustNew(t, cfg)
		if d, _ := noMargin.Outgoing(long); d != 2*time.Second {
			t.Errorf("no margin: Outgoing(1h) = %v, want 2s", d)
		}
		short, cancel3 := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel3()
		if d, _ := noMargin.Outgoing(short); d != 300*time.Millisecond {
			t.Errorf("no margin: Outgoing = %v, want 300ms", d)
		}
	})
}

func TestInject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		cfg.Max = 2 * time.Second
		cfg.MarginFraction = -1 // a fixed 100ms margin: see TestMarginScales
		p := mustNew(t, cfg)

		h := http.Header{}
		if err := p.Inject(context.Background(), h); err != nil || len(h) != 0 {
			t.Errorf("Inject(no deadline) = %v, header %v; want nothing", err, h)
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		time.Sleep(123*time.Millisecond + 456*time.Microsecond)
		if err := p.Inject(ctx, h); err != nil {
			t.Fatal(err)
		}
		// 1s - 123.456ms - 100ms = 776.544ms, rounded down.
		if got := h.Get(deadline.DefaultHeader); got != "776" {
			t.Errorf("header = %q, want 776", got)
		}
		// Injecting again (a retry) replaces the value.
		time.Sleep(76 * time.Millisecond)
		if err := p.Inject(ctx, h); err != nil {
			t.Fatal(err)
		}
		if got := h.Values(deadline.DefaultHeader); len(got) != 1 || got[0] != "700" {
			t.Errorf("header = %q, want [700]", got)
		}

		long, cancel2 := context.WithTimeout(context.Background(), time.Hour)
		defer cancel2()
		h2 := http.Header{}
		if err := p.Inject(long, h2); err != nil || h2.Get(deadline.DefaultHeader) != "2000" {
			t.Errorf("Inject(1h) = %v, %q; want the 2000ms Max", err, h2.Get(deadline.DefaultHeader))
		}

		// Less than 1ms left after the margin: refused, nothing set.
		edge, cancel3 := context.WithTimeout(context.Background(), 101*time.Millisecond)
		defer cancel3()
		if err := p.Inject(edge, http.Header{}); err != nil {
			t.Errorf("Inject with 1ms after the margin: %v", err)
		}
		time.Sleep(time.Nanosecond) // 1ms - 1ns after the margin
		ctx = edge
		h3 := http.Header{}
		err := p.Inject(ctx, h3)
		if !errors.Is(err, deadline.ErrTooShort) || !watertight.IsRejection(err) {
			t.Errorf("Inject = %v, want ErrTooShort", err)
		}
		if len(h3) != 0 {
			t.Errorf("Inject set %v with nothing left", h3)
		}
		if got, want := err.Error(), "deadline: too little time left for the work: 101ms left, nothing after the 100ms margin"; got != want {
			t.Errorf("err = %q, want %q", got, want)
		}
	})
}

func TestInjectCustomHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, deadline.Config{Header: "x-deadline-ms", Margin: -1})
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		h := http.Header{}
		if err := p.Inject(ctx, h); err != nil {
			t.Fatal(err)
		}
		if len(h) != 1 || h["X-Deadline-Ms"][0] != "250" {
			t.Errorf("header = %v", h)
		}
	})
}

func TestCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		cfg.MinRemaining = 200 * time.Millisecond
		p := mustNew(t, cfg)

		if err := p.Check(context.Background()); err != nil {
			t.Errorf("Check(no deadline) = %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 240*time.Millisecond)
		defer cancel()
		if err := p.Check(ctx); err != nil {
			t.Errorf("Check with 240ms left = %v", err)
		}
		time.Sleep(40 * time.Millisecond) // exactly MinRemaining left: enough
		if err := p.Check(ctx); err != nil {
			t.Errorf("Check with exactly 200ms left = %v", err)
		}
		time.Sleep(time.Nanosecond) // 1ns short
		err := p.Check(ctx)
		if !errors.Is(err, deadline.ErrTooShort) || !watertight.IsRejection(err) {
			t.Errorf("Check 1ns short = %v, want ErrTooShort", err)
		}
		time.Sleep(160*time.Millisecond - time.Nanosecond)
		err = p.Check(ctx)
		if got, want := err.Error(), "deadline: too little time left for the work: 40ms left, the work needs at least 200ms"; got != want {
			t.Errorf("Check = %q, want %q", got, want)
		}
		time.Sleep(43 * time.Millisecond)
		err = p.Check(ctx)
		if got, want := err.Error(), "deadline: too little time left for the work: the deadline passed 3ms ago"; got != want {
			t.Errorf("Check = %q, want %q", got, want)
		}
	})
}

func TestCheckZeroMinRemaining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		p := mustNew(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		time.Sleep(time.Second - time.Nanosecond)
		if err := p.Check(ctx); err != nil {
			t.Errorf("Check with 1ns left = %v", err)
		}
		time.Sleep(time.Nanosecond) // exactly at the deadline
		if err := p.Check(ctx); !errors.Is(err, deadline.ErrTooShort) {
			t.Errorf("Check at the deadline = %v, want ErrTooShort", err)
		}
	})
}

// A server's fail-fast from headers alone: a caller that sends "0" is refused
// before any work starts.
func TestCheckIncomingZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		p := mustNew(t, cfg)
		ctx, cancel := p.WithIncoming(context.Background(), header("X-Request-Timeout-Ms", "0"))
		defer cancel()
		if err := p.Check(ctx); !errors.Is(err, deadline.ErrTooShort) {
			t.Errorf("Check = %v, want ErrTooShort", err)
		}
	})
}

func TestRemaining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if d, ok := deadline.Remaining(context.Background()); ok || d != 0 {
			t.Errorf("Remaining(no deadline) = %v, %v", d, ok)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		time.Sleep(300 * time.Millisecond)
		if d, ok := deadline.Remaining(ctx); d != 700*time.Millisecond || !ok {
			t.Errorf("Remaining = %v, %v; want 700ms", d, ok)
		}
		time.Sleep(time.Second)
		if d, ok := deadline.Remaining(ctx); d != -300*time.Millisecond || !ok {
			t.Errorf("Remaining = %v, %v; want -300ms", d, ok)
		}
	})
}

// Hop to hop: what one Propagator injects, the next reads back, less the
// margin at each hop: 100ms from 1s, then a tenth of what is left.
func TestHops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		p := mustNew(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for hop, want := range []time.Duration{900, 810, 729} {
			h := http.Header{}
			if err := p.Inject(ctx, h); err != nil {
				t.Fatal(err)
			}
			next, c := p.WithIncoming(context.Background(), h)
			defer c()
			if d, _ := deadline.Remaining(next); d != want*time.Millisecond {
				t.Errorf("hop %d: %v left, want %vms", hop+1, d, want)
			}
			ctx = next
		}
	})
}

func TestConcurrentUse(t *testing.T) {
	cfg, lb := quiet()
	p := mustNew(t, cfg)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				h := header("X-Request-Timeout-Ms", "250", "Grpc-Timeout", "bad")
				if i%2 == 0 {
					h = header("Grpc-Timeout", "bad", "X-Envoy-Expected-Rq-Timeout-Ms", "250")
				}
				ctx, cancel := p.WithIncoming(context.Background(), h)
				_ = p.Check(ctx)
				_ = p.Inject(ctx, http.Header{})
				cancel()
				_ = j
			}
		}()
	}
	wg.Wait()
	if lb.String() == "" {
		t.Error("nothing logged")
	}
}

func TestPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, deadline.Config{MinRemaining: 200 * time.Millisecond})
		pl := watertight.MustNew(p)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		called := false
		err := pl.Run(ctx, func(context.Context) error { called = true; return nil })
		if called || !errors.Is(err, deadline.ErrTooShort) {
			t.Errorf("Run with 100ms left: called %v, err %v; want ErrTooShort without a call", called, err)
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
		defer cancel2()
		boom := errors.New("boom")
		if err := pl.Run(ctx2, func(context.Context) error { return boom }); err != boom {
			t.Errorf("Run with 1s left = %v, want the function's error", err)
		}
	})
}

func TestWithIncomingCauseReused(t *testing.T) {
	// The cause is shared by the contexts of one header and timeout, and is
	// right for each timeout however they alternate; WithIncoming allocates
	// nothing beyond what context.WithDeadlineCause does.
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		p := mustNew(t, cfg)
		causes := map[string]error{}
		seen := map[string]bool{}
		var shared []error
		for range 2 {
			ctx, cancel := p.WithIncoming(context.Background(), header("X-Request-Timeout-Ms", "250"))
			<-ctx.Done()
			cancel()
			shared = append(shared, context.Cause(ctx))
		}
		if shared[0] != shared[1] {
			t.Errorf("two contexts of the same header and timeout have distinct causes %p and %p", shared[0], shared[1])
		}
		for i := range 200 {
			ms := fmt.Sprint(1 + i%70) // more timeouts than cache slots
			hd := header("X-Request-Timeout-Ms", ms)
			if i%3 == 0 {
				hd = header("Grpc-Timeout", ms+"m")
			}
			ctx, cancel := p.WithIncoming(context.Background(), hd)
			<-ctx.Done()
			cancel()
			cause := context.Cause(ctx)
			var ee *deadline.ExpiredError
			wantHeader := "X-Request-Timeout-Ms"
			if i%3 == 0 {
				wantHeader = "Grpc-Timeout"
			}
			if !errors.As(cause, &ee) || ee.Header != wantHeader || ee.Timeout.String() != ms+"ms" {
				t.Fatalf("request %d: cause %v, want %s: %sms", i, cause, wantHeader, ms)
			}
			if !errors.Is(cause, deadline.ErrExpired) || !errors.Is(cause, context.DeadlineExceeded) {
				t.Fatalf("cause %v is not ErrExpired and DeadlineExceeded", cause)
			}
			causes[cause.Error()] = cause
			seen[wantHeader+ms] = true
		}
		if len(causes) != len(seen) {
			t.Fatalf("%d distinct causes, want %d", len(causes), len(seen))
		}
	})
	cfg, _ := quiet()
	p := mustNew(t, cfg)
	h := header("X-Request-Timeout-Ms", "1000")
	got := testing.AllocsPerRun(100, func() {
		_, cancel := p.WithIncoming(context.Background(), h)
		cancel()
	})
	cause := errors.New("x")
	want := testing.AllocsPerRun(100, func() {
		_, cancel := context.WithDeadlineCause(context.Background(), time.Now().Add(time.Second), cause)
		cancel()
	})
	if got > want {
		t.Errorf("WithIncoming: %v allocations, context.WithDeadlineCause alone: %v", got, want)
	}
}
