package bench

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/afex/hystrix-go/hystrix"
	"github.com/failsafe-go/failsafe-go"
	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fscircuit "github.com/failsafe-go/failsafe-go/circuitbreaker"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/semaphore"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/timeout"
)

// Comparable settings for every breaker: a window of about 100 calls (or the
// library's nearest equivalent), at least 20 calls before a rate counts, trip
// at a 50% failure rate, stay open 30s.
const (
	windowSize   = 100
	minCalls     = 20
	failureRate  = 50
	openDuration = 30 * time.Second

	// bulkheadCap is large enough that the bulkhead is never full at -cpu 2.
	bulkheadCap = 1000
	// attemptTimeout is the innermost timeout of BenchmarkPipelineTimeout.
	attemptTimeout = time.Second
)

// sink keeps every benchmark's results alive, so the compiler cannot drop
// the calls that produce them.
var sink atomic.Int64

// counter is the shared counter of BenchmarkBaseline/atomic-add.
var counter atomic.Int64

var errBoom = errors.New("boom")

// work is the protected function: trivial, and not inlined, so each
// benchmark pays for one real call as an application would.
//
//go:noinline
func work(ctx context.Context) (int, error) { return 1, nil }

// workNoCtx is work in the shape gobreaker and failsafe-go's Get take.
//
//go:noinline
func workNoCtx() (int, error) { return 1, nil }

// workErr is work in the shape hystrix-go takes.
//
//go:noinline
func workErr() error { return nil }

// workExec is work in the shape failsafe-go's GetWithExecution takes: it
// gets the execution's context as watertight's function gets its own.
func workExec(exec failsafe.Execution[int]) (int, error) { return work(exec.Context()) }

// fail is a failing call, used to trip gobreaker.
func fail() (int, error) { return 0, errBoom }

// tally collects what the RunParallel goroutines of one benchmark kept and
// how many of their iterations went wrong. Each goroutine counts in locals
// and reports once at the end, so the checks stay off shared cache lines and
// the loops call nothing but the code measured. (b.Fatal is not allowed in
// RunParallel's goroutines: check fails the benchmark after the run.)
type tally struct{ bad atomic.Int64 }

func (t *tally) add(sum, wrong int64) {
	sink.Add(sum)
	t.bad.Add(wrong)
}

func (t *tally) check(b *testing.B) {
	b.Helper()
	if n := t.bad.Load(); n > 0 {
		b.Fatalf("%d of %d iterations did not behave as expected", n, b.N)
	}
}

// waitGoroutines waits until at most n goroutines are left, for at most
// 10 seconds.
func waitGoroutines(b *testing.B, n int) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			b.Fatalf("%d goroutines still running, want at most %d", runtime.NumGoroutine(), n)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// --- setups, shared by the benchmarks and TestSanity ---

func newWatertightBreaker(tb testing.TB) *circuit.Breaker {
	cb, err := circuit.New(circuit.Config{
		Name:                 "bench",
		WindowSize:           windowSize,
		MinCalls:             minCalls,
		FailureRateThreshold: failureRate,
		OpenDuration:         openDuration,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return cb
}

func newGobreaker() *gobreaker.CircuitBreaker[int] {
	// gobreaker has no count window: a rolling 60s window of 10 buckets is
	// its nearest equivalent of a sliding window.
	return gobreaker.NewCircuitBreaker[int](gobreaker.Settings{
		Name:         "bench",
		Interval:     60 * time.Second,
		BucketPeriod: 6 * time.Second,
		Timeout:      openDuration,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.Requests >= minCalls && c.TotalFailures*100 >= c.Requests*failureRate
		},
	})
}

// openGobreaker returns a gobreaker tripped by failures; it stays open for
// an hour.
func openGobreaker(tb testing.TB) *gobreaker.CircuitBreaker[int] {
	cb := gobreaker.NewCircuitBreaker[int](gobreaker.Settings{
		Name:    "bench-open",
		Timeout: time.Hour,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.Requests >= minCalls && c.TotalFailures*100 >= c.Requests*failureRate
		},
	})
	for i := 0; i < minCalls; i++ {
		cb.Execute(fail)
	}
	if cb.State() != gobreaker.StateOpen {
		tb.Fatalf("gobreaker: state %v after %d failures, want open", cb.State(), minCalls)
	}
	return cb
}

func newFailsafeBreaker() fscircuit.CircuitBreaker[int] {
	return fscircuit.NewBuilder[int]().
		WithFailureThresholdRatio(windowSize*failureRate/100, windowSize).
		WithDelay(openDuration).
		Build()
}

func newFailsafeBulkhead(n uint) fsbulkhead.Bulkhead[int] { return fsbulkhead.New[int](n) }

func newWatertightBulkhead(tb testing.TB, n int) *bulkhead.Bulkhead {
	bh, err := bulkhead.New(bulkhead.Config{MaxConcurrent: n, MaxWait: 0})
	if err != nil {
		tb.Fatal(err)
	}
	return bh
}

func newWatertightTimeout(tb testing.TB) *timeout.Timeout {
	to, err := timeout.New(timeout.Config{Name: "attempt", Timeout: attemptTimeout})
	if err != nil {
		tb.Fatal(err)
	}
	return to
}

const hystrixCommand = "bench"

func configureHystrix() {
	hystrix.ConfigureCommand(hystrixCommand, hystrix.CommandConfig{
		Timeout: int(attemptTimeout / time.Millisecond),
		// hystrix-go's own bulkhead, which must never be full here. Do
		// returns as soon as the function has run, before the background
		// goroutine gives its ticket back and reports metrics, so a tight
		// loop keeps more than bulkheadCap tickets out at times (about 1% of
		// calls were rejected with 1000 tickets); 1<<16 is never reached.
		MaxConcurrentRequests:  1 << 16,
		RequestVolumeThreshold: minCalls,
		SleepWindow:            int(openDuration / time.Millisecond),
		ErrorPercentThreshold:  failureRate,
	})
}

// --- benchmarks ---
//
// Every loop has the same shape: v is what the call returned (kept in sum so
// the call cannot be dropped), wrong counts iterations that did not behave.

func BenchmarkBreakerClosed(b *testing.B) {
	ctx := context.Background()
	b.Run("watertight", func(b *testing.B) {
		cb := newWatertightBreaker(b)
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				p, err := cb.Allow()
				if err != nil {
					wrong++
					continue
				}
				v, err := work(ctx)
				p.Done(watertight.Success)
				sum += int64(v)
				if err != nil {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	// The same breaker with gobreaker's own rule beside the rate: six
	// failures in a row (its default ReadyToTrip, "more than 5").
	b.Run("watertight-consecutive", func(b *testing.B) {
		cb, err := circuit.New(circuit.Config{
			Name: "bench", WindowSize: windowSize, MinCalls: minCalls, FailureRateThreshold: failureRate,
			OpenDuration: openDuration, ConsecutiveFailures: 6,
		})
		if err != nil {
			b.Fatal(err)
		}
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				p, err := cb.Allow()
				if err != nil {
					wrong++
					continue
				}
				v, err := work(ctx)
				p.Done(watertight.Success)
				sum += int64(v)
				if err != nil {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("gobreaker", func(b *testing.B) {
		cb := newGobreaker()
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				v, err := cb.Execute(workNoCtx)
				sum += int64(v)
				if err != nil {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("failsafe-go", func(b *testing.B) {
		// The executor is built once and shared, as a policy shared by
		// many calls would be; each Get still builds its execution.
		exec := failsafe.With[int](newFailsafeBreaker())
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				v, err := exec.Get(workNoCtx)
				sum += int64(v)
				if err != nil {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("hystrix-go", func(b *testing.B) {
		configureHystrix()
		// hystrix-go starts its per-command goroutines on first use.
		if err := hystrix.Do(hystrixCommand, workErr, nil); err != nil {
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // let that call's goroutines end
		idle := runtime.NumGoroutine()
		b.ResetTimer()
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				err := hystrix.Do(hystrixCommand, workErr, nil)
				sum++
				if err != nil {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		// Do returns before the goroutines it started have given back
		// their ticket and reported their metrics: that work is part of
		// the cost, and left running it would slow the benchmarks after.
		waitGoroutines(b, idle)
		t.check(b)
	})
}

func BenchmarkBreakerOpen(b *testing.B) {
	b.Run("watertight", func(b *testing.B) {
		cb := newWatertightBreaker(b)
		cb.ForceOpen()
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				p, err := cb.Allow()
				if err != circuit.ErrOpen {
					p.Done(watertight.Success)
					wrong++
					continue
				}
				sum++
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("gobreaker", func(b *testing.B) {
		cb := openGobreaker(b)
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				v, err := cb.Execute(workNoCtx)
				sum += int64(v) + 1
				if err != gobreaker.ErrOpenState {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("failsafe-go", func(b *testing.B) {
		fcb := newFailsafeBreaker()
		fcb.Open()
		exec := failsafe.With[int](fcb)
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				v, err := exec.Get(workNoCtx)
				sum += int64(v) + 1
				if err != fscircuit.ErrOpen {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
}

func BenchmarkBulkhead(b *testing.B) {
	ctx := context.Background()
	b.Run("watertight", func(b *testing.B) {
		bh := newWatertightBulkhead(b, bulkheadCap)
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				if !bh.TryAcquire() {
					wrong++
					continue
				}
				bh.Release()
				sum++
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("watertight-acquire", func(b *testing.B) {
		bh := newWatertightBulkhead(b, bulkheadCap)
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				if bh.Acquire(ctx) != nil {
					wrong++
					continue
				}
				bh.Release()
				sum++
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("failsafe-go", func(b *testing.B) {
		bh := newFailsafeBulkhead(bulkheadCap)
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				if !bh.TryAcquirePermit() {
					wrong++
					continue
				}
				bh.ReleasePermit()
				sum++
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("x-sync-semaphore", func(b *testing.B) {
		sem := semaphore.NewWeighted(bulkheadCap)
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				if !sem.TryAcquire(1) {
					wrong++
					continue
				}
				sem.Release(1)
				sum++
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("channel", func(b *testing.B) {
		ch := make(chan struct{}, bulkheadCap)
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				select {
				case ch <- struct{}{}:
				default:
					wrong++
					continue
				}
				<-ch
				sum++
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
}

func BenchmarkBulkheadFull(b *testing.B) {
	b.Run("watertight", func(b *testing.B) {
		bh := newWatertightBulkhead(b, 1)
		if !bh.TryAcquire() {
			b.Fatal("could not take the only permit")
		}
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				if bh.TryAcquire() {
					bh.Release()
					wrong++
					continue
				}
				sum++
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("failsafe-go", func(b *testing.B) {
		bh := newFailsafeBulkhead(1)
		if !bh.TryAcquirePermit() {
			b.Fatal("could not take the only permit")
		}
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				if bh.TryAcquirePermit() {
					bh.ReleasePermit()
					wrong++
					continue
				}
				sum++
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("channel", func(b *testing.B) {
		ch := make(chan struct{}, 1)
		ch <- struct{}{}
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				select {
				case ch <- struct{}{}:
					<-ch
					wrong++
				default:
					sum++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
}

// BenchmarkPipeline is retry → breaker → bulkhead on the success path, in
// the standard order, with the same three policies on both sides;
// watertight-budget adds the retry budget failsafe-go has no equivalent of.
func BenchmarkPipeline(b *testing.B) {
	ctx := context.Background()
	b.Run("watertight", func(b *testing.B) {
		p := watertight.MustNew(newWatertightRetry(b, false), newWatertightBreaker(b), newWatertightBulkhead(b, bulkheadCap))
		benchDo(b, ctx, p)
	})
	b.Run("watertight-budget", func(b *testing.B) {
		p := watertight.MustNew(newWatertightRetry(b, true), newWatertightBreaker(b), newWatertightBulkhead(b, bulkheadCap))
		benchDo(b, ctx, p)
	})
	b.Run("failsafe-go", func(b *testing.B) {
		benchFailsafe(b, failsafe.With[int](newFailsafeRetry(), newFailsafeBreaker(), newFailsafeBulkhead(bulkheadCap)).WithContext(ctx))
	})
}

func BenchmarkPipelineTimeout(b *testing.B) {
	ctx := context.Background()
	b.Run("watertight", func(b *testing.B) {
		p := watertight.MustNew(newWatertightBreaker(b), newWatertightBulkhead(b, bulkheadCap), newWatertightTimeout(b))
		benchDo(b, ctx, p)
	})
	b.Run("failsafe-go", func(b *testing.B) {
		benchFailsafe(b, failsafe.With[int](newFailsafeBreaker(), newFailsafeBulkhead(bulkheadCap), fstimeout.New[int](attemptTimeout)).WithContext(ctx))
	})
	b.Run("context-with-timeout", func(b *testing.B) {
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				c, cancel := context.WithTimeout(ctx, attemptTimeout)
				v, err := work(c)
				cancel()
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

// benchDo measures watertight.Do through p on the success path.
func benchDo(b *testing.B, ctx context.Context, p *watertight.Pipeline) {
	var t tally
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var sum, wrong int64
		for pb.Next() {
			v, err := watertight.Do(ctx, p, work)
			sum += int64(v)
			if err != nil {
				wrong++
			}
		}
		t.add(sum, wrong)
	})
	t.check(b)
}

// benchFailsafe measures a failsafe-go executor on the success path; the
// function gets the execution's context, as watertight's gets its own.
func benchFailsafe(b *testing.B, exec failsafe.Executor[int]) {
	var t tally
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var sum, wrong int64
		for pb.Next() {
			v, err := exec.GetWithExecution(workExec)
			sum += int64(v)
			if err != nil {
				wrong++
			}
		}
		t.add(sum, wrong)
	})
	t.check(b)
}

func BenchmarkBaseline(b *testing.B) {
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				v, err := work(ctx)
				sum += int64(v)
				if err != nil {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("atomic-add", func(b *testing.B) {
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum int64
			for pb.Next() {
				sum += counter.Add(1)
			}
			t.add(sum, 0)
		})
		t.check(b)
	})
}
