package watertightslog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/watertightslog"
)

// noTime drops the time attribute, so that records compare as text.
func noTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func textLogger(buf *bytes.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level, ReplaceAttr: noTime}))
}

func TestDefaultLevels(t *testing.T) {
	l := watertightslog.NewListener(slog.New(slog.DiscardHandler), watertightslog.Options{})
	for _, tc := range []struct {
		e    watertight.Event
		want slog.Level
	}{
		{watertight.Event{Kind: watertight.EventStateChange, From: "closed", To: "open"}, slog.LevelWarn},
		{watertight.Event{Kind: watertight.EventStateChange, From: "closed", To: "forced-open"}, slog.LevelWarn},
		{watertight.Event{Kind: watertight.EventStateChange, From: "open", To: "half-open"}, slog.LevelInfo},
		{watertight.Event{Kind: watertight.EventStateChange, From: "half-open", To: "closed"}, slog.LevelInfo},
		{watertight.Event{Kind: watertight.EventRejected}, slog.LevelDebug},
		{watertight.Event{Kind: watertight.EventShed}, slog.LevelDebug},
		{watertight.Event{Kind: watertight.EventBudgetExhausted}, slog.LevelDebug},
		{watertight.Event{Kind: watertight.EventRetryScheduled}, slog.LevelDebug},
		{watertight.Event{Kind: watertight.EventDropped}, slog.LevelDebug},
		{watertight.Event{Kind: 200}, slog.LevelDebug},
	} {
		if got := l.Level(tc.e); got != tc.want {
			t.Errorf("%v to %q: level %v, want %v", tc.e.Kind, tc.e.To, got, tc.want)
		}
	}
	// The names the listener takes for openings are the breaker's.
	if circuit.Open.String() != "open" || circuit.ForcedOpen.String() != "forced-open" {
		t.Fatalf("circuit's state names changed: %q, %q", circuit.Open, circuit.ForcedOpen)
	}
}

func TestConfiguredLevels(t *testing.T) {
	l := watertightslog.NewListener(slog.New(slog.DiscardHandler), watertightslog.Options{
		Levels: map[watertight.EventKind]slog.Level{
			watertight.EventShed:        slog.LevelWarn,
			watertight.EventStateChange: slog.LevelDebug,
		},
		OpenLevel: slog.LevelError,
	})
	for _, tc := range []struct {
		e    watertight.Event
		want slog.Level
	}{
		{watertight.Event{Kind: watertight.EventShed}, slog.LevelWarn},
		{watertight.Event{Kind: watertight.EventRejected}, slog.LevelDebug},
		{watertight.Event{Kind: watertight.EventStateChange, To: "closed"}, slog.LevelDebug},
		{watertight.Event{Kind: watertight.EventStateChange, To: "open"}, slog.LevelError},
	} {
		if got := l.Level(tc.e); got != tc.want {
			t.Errorf("%v to %q: level %v, want %v", tc.e.Kind, tc.e.To, got, tc.want)
		}
	}
}

func TestAttributes(t *testing.T) {
	var buf bytes.Buffer
	l := watertightslog.NewListener(textLogger(&buf, slog.LevelDebug), watertightslog.Options{})
	l.OnEvent(watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", Name: "upstreams", Key: "api.example.com",
		From: "closed", To: "open", Reason: "failure rate 60% >= 50% over 20 calls", Code: circuit.CodeFailureRate, Delay: 30 * time.Second, Time: time.Now()})
	l.OnEvent(watertight.Event{Kind: watertight.EventRetryScheduled, Source: "retry", Name: "inventory", Attempt: 2,
		Delay: 150 * time.Millisecond, Err: errors.New("connection reset"), Time: time.Now()})
	l.OnEvent(watertight.Event{Kind: watertight.EventRejected, Source: "circuit", Err: circuit.ErrOpen}) // no Time, no Name
	want := `level=WARN msg="watertight: state change" watertight.event=state_change watertight.source=circuit watertight.name=upstreams watertight.key=api.example.com watertight.from=closed watertight.to=open watertight.reason="failure rate 60% >= 50% over 20 calls" watertight.code=failure_rate watertight.delay=30s
level=DEBUG msg="watertight: retry scheduled" watertight.event=retry_scheduled watertight.source=retry watertight.name=inventory watertight.attempt=2 watertight.delay=150ms watertight.error="connection reset"
level=DEBUG msg="watertight: call rejected" watertight.event=rejected watertight.source=circuit watertight.error="circuit: open"
`
	if got := buf.String(); got != want {
		t.Fatalf("logged:\n%s\nwant:\n%s", got, want)
	}
}

// The record's time is the event's, not the time it was logged.
func TestRecordTimeIsTheEvents(t *testing.T) {
	var buf bytes.Buffer
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	l := watertightslog.NewListener(slog.New(slog.NewJSONHandler(&buf, nil)), watertightslog.Options{})
	l.OnEvent(watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", From: "open", To: "half-open", Time: at})
	var rec struct {
		Time       time.Time
		Level, Msg string
		Watertight map[string]any `json:"watertight"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if !rec.Time.Equal(at) || rec.Level != "INFO" || rec.Watertight["from"] != "open" || rec.Watertight["to"] != "half-open" || rec.Watertight["event"] != "state_change" {
		t.Fatalf("record %+v (%s)", rec, buf.String())
	}
}

// countingHandler counts the calls to Enabled and Handle.
type countingHandler struct {
	mu              sync.Mutex
	level           slog.Level
	enabled, handle int
}

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.enabled++
	return l >= h.level
}

func (h *countingHandler) Handle(context.Context, slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handle++
	return nil
}

func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func TestDisabledLevelsAreSkipped(t *testing.T) {
	h := &countingHandler{level: slog.LevelInfo}
	l := watertightslog.NewListener(slog.New(h), watertightslog.Options{})
	for range 10 {
		l.OnEvent(watertight.Event{Kind: watertight.EventRejected, Source: "circuit", Err: circuit.ErrOpen})
	}
	l.OnEvent(watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", To: "open"})
	if h.enabled != 11 || h.handle != 1 {
		t.Fatalf("Enabled %d times, Handle %d times; want 11 and 1", h.enabled, h.handle)
	}
	if a := testing.AllocsPerRun(100, func() {
		l.OnEvent(watertight.Event{Kind: watertight.EventRejected, Source: "circuit", Err: circuit.ErrOpen})
	}); a != 0 {
		t.Fatalf("a disabled event costs %v allocations", a)
	}
}

// End to end: a bulkhead and a breaker log through one listener, at the
// events' times.
func TestWithPackages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		l := watertightslog.NewListener(textLogger(&buf, slog.LevelInfo), watertightslog.Options{
			Levels: map[watertight.EventKind]slog.Level{watertight.EventBulkheadFull: slog.LevelInfo},
		})
		b, _ := circuit.New(circuit.Config{Name: "db", WindowSize: 1, MinCalls: 1, OpenDuration: time.Second, OpenJitter: -1, Listener: l})
		h, _ := bulkhead.New(bulkhead.Config{Name: "db", MaxConcurrent: 1, Listener: l})
		_ = h.Acquire(context.Background())
		_ = h.Acquire(context.Background())
		h.Release()
		p, _ := b.Allow()
		p.Done(watertight.Failure)
		_, _ = b.Allow() // a rejection: Debug, not logged
		time.Sleep(time.Second)
		synctest.Wait()
		b.Reset()
		want := `level=INFO msg="watertight: bulkhead full" watertight.event=bulkhead_full watertight.source=bulkhead watertight.name=db watertight.reason="no permit free" watertight.code=no_permit watertight.error="bulkhead: db: full"
level=WARN msg="watertight: state change" watertight.event=state_change watertight.source=circuit watertight.name=db watertight.from=closed watertight.to=open watertight.reason="failure rate 100% >= 50% over 1 calls" watertight.code=failure_rate watertight.delay=1s
level=INFO msg="watertight: state change" watertight.event=state_change watertight.source=circuit watertight.name=db watertight.from=open watertight.to=half-open watertight.reason="open for 1s" watertight.code=timer
level=INFO msg="watertight: state change" watertight.event=state_change watertight.source=circuit watertight.name=db watertight.from=half-open watertight.to=closed watertight.reason=reset watertight.code=manual
`
		if got := buf.String(); got != want {
			t.Fatalf("logged:\n%s\nwant:\n%s", got, want)
		}
	})
}

// Behind an AsyncListener, records are written by the async goroutine.
func TestBehindAsyncListener(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	a := watertight.NewAsyncListener(watertightslog.NewListener(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{ReplaceAttr: noTime})), watertightslog.Options{}), 0)
	watertight.Emit(a, watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", Name: "x", From: "closed", To: "open"})
	a.Close()
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "level=WARN") || a.Dropped() != 0 {
		t.Fatalf("logged %q, dropped %d", buf.String(), a.Dropped())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Every kind of event has a message of its own, not the generic
// "watertight: event" of an unknown kind.
func TestEveryKindHasAMessage(t *testing.T) {
	var buf bytes.Buffer
	l := watertightslog.NewListener(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), watertightslog.Options{})
	for k := watertight.EventKind(1); k.String() != "unknown"; k++ {
		buf.Reset()
		l.OnEvent(watertight.Event{Kind: k, Source: "test"})
		if out := buf.String(); !strings.Contains(out, "msg=\"watertight: ") || strings.Contains(out, "msg=\"watertight: event\"") {
			t.Errorf("%v: logged %q, want a message of its own", k, out)
		}
	}
}
