package watertightprom_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
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
