package bench

import (
	"context"
	"testing"
	"time"

	fsadaptive "github.com/failsafe-go/failsafe-go/adaptivelimiter"

	"github.com/watertight-go/watertight/limit"
)

// limiterCap is the adaptive limiters' limit, pinned (min = max = initial)
// so that neither is ever full at -cpu 2 and the limit does not move.
const limiterCap = 1000

func newWatertightLimiter(tb testing.TB) *limit.Limiter {
	l, err := limit.New(limit.Config{Name: "bench", InitialLimit: limiterCap, MinLimit: limiterCap, MaxLimit: limiterCap})
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func newFailsafeLimiter() fsadaptive.AdaptiveLimiter[any] {
	return fsadaptive.NewBuilder[any]().WithLimits(limiterCap, limiterCap, limiterCap).Build()
}

// BenchmarkLimiter is an adaptive concurrency limiter's acquire and record
// on the success path, one goroutine (sequential) and two (parallel).
// failsafe-go's Permit.Record measures the call itself (a clock read when
// the permit is made, another in Record); watertight's Permit.Done takes
// the latency, so its loop reads the clock the same two times. Both use
// their default algorithm and windows (watertight: NewDefault, 10 calls
// and 1s; failsafe-go: 50 calls and 1s, a p90 from a t-digest).
func BenchmarkLimiter(b *testing.B) {
	ctx := context.Background()
	b.Run("watertight", func(b *testing.B) {
		b.Run("sequential", func(b *testing.B) {
			l := newWatertightLimiter(b)
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				p, err := l.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				p.Done(time.Since(start))
			}
		})
		b.Run("parallel", func(b *testing.B) {
			l := newWatertightLimiter(b)
			var t tally
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var sum, wrong int64
				for pb.Next() {
					start := time.Now()
					p, err := l.Acquire(ctx)
					if err != nil {
						wrong++
						continue
					}
					p.Done(time.Since(start))
					sum++
				}
				t.add(sum, wrong)
			})
			t.check(b)
		})
	})
	b.Run("failsafe-go", func(b *testing.B) {
		b.Run("sequential", func(b *testing.B) {
			l := newFailsafeLimiter()
			b.ReportAllocs()
			for b.Loop() {
				p, err := l.AcquirePermit(ctx)
				if err != nil {
					b.Fatal(err)
				}
				p.Record()
			}
		})
		b.Run("parallel", func(b *testing.B) {
			l := newFailsafeLimiter()
			var t tally
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var sum, wrong int64
				for pb.Next() {
					p, err := l.AcquirePermit(ctx)
					if err != nil {
						wrong++
						continue
					}
					p.Record()
					sum++
				}
				t.add(sum, wrong)
			})
			t.check(b)
		})
	})
}

// TestLimiterSetups checks what BenchmarkLimiter relies on: both limiters
// admit limiterCap calls at once, and recording keeps their limit there.
func TestLimiterSetups(t *testing.T) {
	ctx := context.Background()
	wt, fs := newWatertightLimiter(t), newFailsafeLimiter()
	var wp []limit.Permit
	var fp []fsadaptive.Permit
	for range limiterCap {
		p, err := wt.Acquire(ctx)
		if err != nil {
			t.Fatalf("watertight after %d: %v", len(wp), err)
		}
		wp = append(wp, p)
		q, err := fs.AcquirePermit(ctx)
		if err != nil {
			t.Fatalf("failsafe-go after %d: %v", len(fp), err)
		}
		fp = append(fp, q)
	}
	for i := range wp {
		wp[i].Done(time.Millisecond)
		fp[i].Record()
	}
	if wt.Limit() != limiterCap || fs.Limit() != limiterCap {
		t.Fatalf("limits after recording: watertight %d, failsafe-go %d; want %d", wt.Limit(), fs.Limit(), limiterCap)
	}
}
