package bench

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
)

// hedgeDelay is long enough that no hedge fires during the benchmarks: the
// first attempt always answers first.
const hedgeDelay = time.Second

// workAttempt is work in the shape hedge.Do takes.
//
//go:noinline
func workAttempt(ctx context.Context, attempt int) (int, error) { return work(ctx) }

func newWatertightHedge(tb testing.TB, cfg hedge.Config) *hedge.Policy {
	tb.Helper()
	p, err := hedge.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// BenchmarkHedgeNoFire is a hedged call whose first attempt answers before
// the delay (the common case): what hedging costs when it is not needed.
// Both libraries get a fixed one-second delay and one hedge. As in the rest
// of this module, "watertight" and "failsafe-go" run under RunParallel;
// the "-serial" forms run in one goroutine; the "-p95" forms track the
// latencies for a percentile delay (failsafe-go's NewWithDelayQuantile).
func BenchmarkHedgeNoFire(b *testing.B) {
	ctx := retry.Idempotent(context.Background())
	wt := newWatertightHedge(b, hedge.Config{Delay: hedgeDelay})
	wtP95 := newWatertightHedge(b, hedge.Config{Percentile: 0.95, MinDelay: hedgeDelay})
	fs := failsafe.With[int](hedgepolicy.NewWithDelay[int](hedgeDelay)).WithContext(ctx)
	// failsafe-go's quantile policy: p95 over about the last 1000 executions,
	// hedging only after 100.
	fsP95 := failsafe.With[int](hedgepolicy.NewBuilderWithDelayQuantile[int](0.95, 1000, 100).Build()).WithContext(ctx)

	serial := func(b *testing.B, call func() (int, error)) {
		b.ReportAllocs()
		var sum int64
		for b.Loop() {
			v, err := call()
			if err != nil {
				b.Fatal(err)
			}
			sum += int64(v)
		}
		sink.Add(sum)
	}
	parallel := func(b *testing.B, call func() (int, error)) {
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				v, err := call()
				sum += int64(v)
				if err != nil {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	}
	wtCall := func() (int, error) { return hedge.Do(ctx, wt, workAttempt) }
	wtP95Call := func() (int, error) { return hedge.Do(ctx, wtP95, workAttempt) }
	fsCall := func() (int, error) { return fs.GetWithExecution(workExec) }
	fsP95Call := func() (int, error) { return fsP95.GetWithExecution(workExec) }

	b.Run("watertight", func(b *testing.B) { parallel(b, wtCall) })
	b.Run("failsafe-go", func(b *testing.B) { parallel(b, fsCall) })
	b.Run("watertight-p95", func(b *testing.B) { parallel(b, wtP95Call) })
	b.Run("failsafe-go-p95", func(b *testing.B) { parallel(b, fsP95Call) })
	b.Run("watertight-serial", func(b *testing.B) { serial(b, wtCall) })
	b.Run("failsafe-go-serial", func(b *testing.B) { serial(b, fsCall) })

	for _, p := range []*hedge.Policy{wt, wtP95} {
		if s := p.Snapshot(); s.Sent != 0 || s.Suppressed() != 0 {
			b.Fatalf("watertight: a hedge was due (%+v): the benchmark is not the no-fire case", s)
		}
	}
}
