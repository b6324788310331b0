package watertightotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightotel "github.com/watertight-go/watertight/contrib/watertightotel"
)

func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, watertightotel.Config{Buckets: []float64{0.01, 0.1, 1}})
		pipe := watertight.MustNew(h.m.Latency("search"))
		ctx := context.Background()
		call := func(d time.Duration, err error) error {
			_, e := watertight.Do(ctx, pipe, func(context.Context) (int, error) {
				time.Sleep(d)
				return 1, err
			})
			return e
		}
		call(50*time.Millisecond, nil)
		call(200*time.Millisecond, nil)
		if err := call(5*time.Millisecond, errBoom); err != errBoom {
			t.Fatalf("Do = %v, want the call's error unchanged", err)
		}
		got, kinds := h.collect(t)
		want(t, got, map[string]float64{
			`watertight.call.duration_count{outcome="success",watertight.name="search"}`: 2,
			`watertight.call.duration_sum{outcome="success",watertight.name="search"}`:   0.25,
			`watertight.call.duration_count{outcome="failure",watertight.name="search"}`: 1,
			`watertight.call.duration_sum{outcome="failure",watertight.name="search"}`:   0.005,
		})
		if k := kinds["watertight.call.duration"]; k.kind != "histogram" || k.unit != "s" {
			t.Errorf("watertight.call.duration is %+v", k)
		}
	})
}

func TestLatencyUnknownOutcome(t *testing.T) {
	h := newHarness(t, watertightotel.Config{Classify: func(context.Context, error) watertight.Outcome { return 7 }})
	l := h.m.Latency("odd")
	ctx, tk, _ := l.Enter(context.Background())
	l.Exit(ctx, tk, errBoom)
	got, _ := h.collect(t)
	want(t, got, map[string]float64{`watertight.call.duration_count{outcome="outcome(7)",watertight.name="odd"}`: 1})
}

func TestLatencyAllocations(t *testing.T) {
	h := newHarness(t, watertightotel.Config{})
	pipe := watertight.MustNew(h.m.Latency("x"))
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	watertight.Do(ctx, pipe, fn)
	if n := testing.AllocsPerRun(100, func() { watertight.Do(ctx, pipe, fn) }); n != 0 {
		t.Errorf("a call through Latency allocates %v times (SDK MeterProvider, prepared attribute set)", n)
	}
}

// A call that a protection rejected did not run: it has no duration to
// record, and it is counted by that protection's rejection counter.
func TestLatencySkipsRejections(t *testing.T) {
	h := newHarness(t, watertightotel.Config{})
	b, err := circuit.New(circuit.Config{Name: "payments", Listener: h.m})
	if err != nil {
		t.Fatal(err)
	}
	h.m.AddBreaker(b)
	b.ForceOpen()
	// Outermost, the Latency policy sees every call, the rejected ones too.
	pipe := watertight.MustNew(h.m.Latency("payments"), b)
	ctx := context.Background()
	for range 15 {
		_, err := watertight.Do(ctx, pipe, func(context.Context) (int, error) { return 1, nil })
		if !errors.Is(err, circuit.ErrOpen) {
			t.Fatalf("Do through a forced-open breaker = %v, want circuit.ErrOpen", err)
		}
	}
	l := h.m.Latency("payments")
	for _, rej := range []error{fmt.Errorf("attempt 2: %w", circuit.ErrOpen), bulkhead.ErrFull} {
		ctx, tk, _ := l.Enter(ctx)
		if got := l.Exit(ctx, tk, rej); got != rej {
			t.Fatalf("Exit = %v, want the error unchanged", got)
		}
	}
	got, _ := h.collect(t)
	absent(t, got, "watertight.call.duration")
	want(t, got, map[string]float64{
		`watertight.circuit.rejections{watertight.key="",watertight.name="payments"}`:                   15,
		`watertight.events{event="rejected",reason="open",source="circuit",watertight.name="payments"}`: 15,
	})
	// A call that ran and failed is still recorded.
	ctx2, tk, _ := l.Enter(ctx)
	l.Exit(ctx2, tk, errBoom)
	got, _ = h.collect(t)
	want(t, got, map[string]float64{
		`watertight.call.duration_count{outcome="failure",watertight.name="payments"}`: 1,
	})
}
