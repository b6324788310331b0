package bench

import (
	"context"
	"sync/atomic"
	"testing"

	cenkalti "github.com/cenkalti/backoff/v5"
	"github.com/failsafe-go/failsafe-go"
	fsretry "github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/retry"
)

// newWatertightRetry is a retry policy with the defaults (3 attempts, full
// jitter), for idempotent calls, with a 10% budget when withBudget is set.
func newWatertightRetry(tb testing.TB, withBudget bool) *retry.Policy {
	tb.Helper()
	cfg := retry.Config{Idempotent: true}
	if withBudget {
		bud, err := budget.New(budget.Config{})
		if err != nil {
			tb.Fatal(err)
		}
		cfg.Budget = bud
	}
	p, err := retry.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// newFailsafeRetry is failsafe-go's retry policy with its defaults (3
// attempts).
func newFailsafeRetry() fsretry.RetryPolicy[int] { return fsretry.NewWithDefaults[int]() }

// BenchmarkRetrySuccess is a retry policy on the success path: the call
// succeeds at once, so this is what retrying costs when nothing fails.
func BenchmarkRetrySuccess(b *testing.B) {
	ctx := context.Background()
	b.Run("watertight", func(b *testing.B) {
		benchDo(b, ctx, watertight.MustNew(newWatertightRetry(b, false)))
	})
	b.Run("watertight-budget", func(b *testing.B) {
		benchDo(b, ctx, watertight.MustNew(newWatertightRetry(b, true)))
	})
	b.Run("failsafe-go", func(b *testing.B) {
		benchFailsafe(b, failsafe.With[int](newFailsafeRetry()).WithContext(ctx))
	})
	b.Run("cenkalti-backoff", func(b *testing.B) {
		var t tally
		op := func() (int, error) { return work(ctx) }
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				v, err := cenkalti.Retry(ctx, op, cenkalti.WithMaxTries(3))
				sum += int64(v)
				if err != nil {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
}

// BenchmarkBudget is one request's deposit and one retry's withdrawal from
// a shared retry budget with a healthy balance.
func BenchmarkBudget(b *testing.B) {
	b.Run("watertight", func(b *testing.B) {
		bud, err := budget.New(budget.Config{Ratio: 1})
		if err != nil {
			b.Fatal(err)
		}
		for range 100 {
			bud.Deposit()
		}
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				bud.Deposit()
				if bud.Withdraw() {
					sum++
				} else {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	// floor-two-atomics is what any budget with one shared balance costs
	// at least: a bare deposit (an atomic add) and a bare withdrawal (two
	// loads and a compare-and-swap) on one cache line, with no cap, floor
	// or accounting. From two cores the line goes back and forth on every
	// iteration, and that, not the budget's own work, is most of the cost.
	b.Run("floor-two-atomics", func(b *testing.B) {
		var line struct {
			_    [64]byte
			d, w atomic.Uint64
			_    [64]byte
		}
		line.d.Store(100 * 1000)
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				line.d.Add(1000)
				ok := false
				for {
					w, d := line.w.Load(), line.d.Load()
					if d-w < 1000 {
						break
					}
					if line.w.CompareAndSwap(w, w+1000) {
						ok = true
						break
					}
				}
				if ok {
					sum++
				} else {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
}
