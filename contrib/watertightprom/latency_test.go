package watertightprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightprom "github.com/watertight-go/watertight/contrib/watertightprom"
)

func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCollector(t, watertightprom.Config{Buckets: []float64{0.01, 0.1, 1}})
		bh, err := bulkhead.New(bulkhead.Config{Name: "search", MaxConcurrent: 1})
		if err != nil {
			t.Fatal(err)
		}
		pipe := watertight.MustNew(bh, c.Latency("search"))
		ctx := context.Background()
		call := func(d time.Duration, err error) error {
			_, e := watertight.Do(ctx, pipe, func(context.Context) (int, error) {
				time.Sleep(d)
				return 1, err
			})
			return e
		}
		if err := call(50*time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
		if err := call(200*time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
		if err := call(5*time.Millisecond, errBoom); err != errBoom {
			t.Fatalf("Do = %v, want the call's error unchanged", err)
		}
		if err := call(0, watertight.Mark(errBoom, watertight.Ignored)); err == nil {
			t.Fatal("Do lost the error")
		}
		// A call the bulkhead refuses never reaches the Latency policy.
		bh.TryAcquire()
		if err := call(time.Second, nil); !watertight.IsRejection(err) {
			t.Fatalf("Do on a full bulkhead = %v", err)
		}
		bh.Release()

		got := scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_call_duration_seconds_count{name="search",outcome="success"}`:   2,
			`watertight_call_duration_seconds_sum{name="search",outcome="success"}`:     0.25,
			`watertight_call_duration_seconds_count{name="search",outcome="failure"}`:   1,
			`watertight_call_duration_seconds_sum{name="search",outcome="failure"}`:     0.005,
			`watertight_call_duration_seconds_count{name="search",outcome="ignored"}`:   1,
			`watertight_call_duration_seconds_count{name="search",outcome="saturated"}`: 0,
		})
	})
}

func TestLatencyClassifyAndUnknownOutcome(t *testing.T) {
	c := newCollector(t, watertightprom.Config{Classify: func(ctx context.Context, err error) watertight.Outcome {
		if err == nil {
			return watertight.Success
		}
		return watertight.Outcome(9)
	}})
	l := c.Latency("odd")
	ctx, tk, err := l.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Exit(ctx, tk, errBoom); got != errBoom {
		t.Fatalf("Exit = %v", got)
	}
	want(t, scrape(t, c), map[string]float64{
		`watertight_call_duration_seconds_count{name="odd",outcome="outcome(9)"}`: 1,
	})
}

func TestLatencyAllocatesNothing(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	pipe := watertight.MustNew(c.Latency("x"))
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	if n := testing.AllocsPerRun(100, func() { watertight.Do(ctx, pipe, fn) }); n != 0 {
		t.Errorf("a call through Latency allocates %v times", n)
	}
}

// A call that a protection rejected did not run: it has no duration to
// observe, and it is counted by that protection's rejection counter. Today's
// user saw 15 calls through an open breaker as 15 "ignored" durations.
func TestLatencySkipsRejections(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	b, err := circuit.New(circuit.Config{Name: "payments", Listener: c})
	if err != nil {
		t.Fatal(err)
	}
	c.AddBreaker(b)
	b.ForceOpen()
	// Outermost, the Latency policy sees every call, the rejected ones too.
	pipe := watertight.MustNew(c.Latency("payments"), b)
	ctx := context.Background()
	for range 15 {
		_, err := watertight.Do(ctx, pipe, func(context.Context) (int, error) { return 1, nil })
		if !errors.Is(err, circuit.ErrOpen) {
			t.Fatalf("Do through a forced-open breaker = %v, want circuit.ErrOpen", err)
		}
	}
	// A rejection from further away (wrapped, from a bulkhead) is one too.
	l := c.Latency("payments")
	for _, rej := range []error{fmt.Errorf("attempt 2: %w", circuit.ErrOpen), bulkhead.ErrFull} {
		ctx, tk, _ := l.Enter(ctx)
		if got := l.Exit(ctx, tk, rej); got != rej {
			t.Fatalf("Exit = %v, want the error unchanged", got)
		}
	}
	got := scrape(t, c)
	var n float64
	for k, v := range got {
		if strings.HasPrefix(k, "watertight_call_duration_seconds_count{") {
			n += v
		}
	}
	if n != 0 {
		t.Errorf("watertight_call_duration_seconds_count sums to %v over the outcomes, want 0 (rejections are no call durations)", n)
	}
	want(t, got, map[string]float64{
		`watertight_circuit_rejected_total{key="",name="payments"}`:                                15,
		`watertight_events_total{event="rejected",name="payments",reason="open",source="circuit"}`: 15,
		`watertight_call_duration_seconds_count{name="payments",outcome="ignored"}`:                0,
		`watertight_call_duration_seconds_count{name="payments",outcome="saturated"}`:              0,
	})
	// A call that ran and failed is still observed.
	ctx2, tk, _ := l.Enter(ctx)
	l.Exit(ctx2, tk, errBoom)
	want(t, scrape(t, c), map[string]float64{
		`watertight_call_duration_seconds_count{name="payments",outcome="failure"}`: 1,
	})
}
