package bench

import (
	"context"
	"errors"
	"testing"

	"github.com/afex/hystrix-go/hystrix"
	"github.com/failsafe-go/failsafe-go"
	fscircuit "github.com/failsafe-go/failsafe-go/circuitbreaker"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/semaphore"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
)

// TestSanity runs each benchmark's setup once and checks that it behaves as
// the benchmark assumes: closed breakers admit, open ones reject with the
// error the loops compare against, bulkheads with room admit and full ones
// reject, and the pipelines run the function (under a deadline when they
// hold a timeout).
func TestSanity(t *testing.T) {
	ctx := context.Background()

	t.Run("breaker/watertight", func(t *testing.T) {
		cb := newWatertightBreaker(t)
		p, err := cb.Allow()
		if err != nil {
			t.Fatalf("closed: Allow = %v", err)
		}
		p.Done(watertight.Success)
		cb.ForceOpen()
		if _, err := cb.Allow(); err != circuit.ErrOpen || !watertight.IsRejection(err) {
			t.Fatalf("forced open: Allow = %v, want circuit.ErrOpen", err)
		}
	})
	t.Run("breaker/gobreaker", func(t *testing.T) {
		if v, err := newGobreaker().Execute(workNoCtx); v != 1 || err != nil {
			t.Fatalf("closed: Execute = %d, %v", v, err)
		}
		called := false
		_, err := openGobreaker(t).Execute(func() (int, error) { called = true; return 1, nil })
		if err != gobreaker.ErrOpenState || called {
			t.Fatalf("open: Execute = %v (called %v), want ErrOpenState", err, called)
		}
	})
	t.Run("breaker/failsafe-go", func(t *testing.T) {
		fcb := newFailsafeBreaker()
		exec := failsafe.With[int](fcb)
		if v, err := exec.Get(workNoCtx); v != 1 || err != nil {
			t.Fatalf("closed: Get = %d, %v", v, err)
		}
		fcb.Open()
		called := false
		_, err := exec.Get(func() (int, error) { called = true; return 1, nil })
		if err != fscircuit.ErrOpen || called {
			t.Fatalf("open: Get = %v (called %v), want circuitbreaker.ErrOpen", err, called)
		}
	})
	t.Run("breaker/hystrix-go", func(t *testing.T) {
		configureHystrix()
		called := false
		err := hystrix.Do(hystrixCommand, func() error { called = true; return nil }, nil)
		if err != nil || !called {
			t.Fatalf("Do = %v (called %v)", err, called)
		}
	})

	t.Run("bulkhead/watertight", func(t *testing.T) {
		bh := newWatertightBulkhead(t, 1)
		if !bh.TryAcquire() {
			t.Fatal("empty: TryAcquire = false")
		}
		if bh.TryAcquire() {
			t.Fatal("full: TryAcquire = true")
		}
		if err := bh.Acquire(ctx); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("full: Acquire = %v, want ErrFull", err)
		}
		bh.Release()
		if err := bh.Acquire(ctx); err != nil {
			t.Fatalf("after Release: Acquire = %v", err)
		}
		bh.Release()
	})
	t.Run("bulkhead/failsafe-go", func(t *testing.T) {
		bh := newFailsafeBulkhead(1)
		if !bh.TryAcquirePermit() {
			t.Fatal("empty: TryAcquirePermit = false")
		}
		if bh.TryAcquirePermit() {
			t.Fatal("full: TryAcquirePermit = true")
		}
		bh.ReleasePermit()
		if !bh.TryAcquirePermit() {
			t.Fatal("after ReleasePermit: TryAcquirePermit = false")
		}
	})
	t.Run("bulkhead/x-sync-semaphore", func(t *testing.T) {
		sem := semaphore.NewWeighted(1)
		if !sem.TryAcquire(1) || sem.TryAcquire(1) {
			t.Fatal("TryAcquire does not fill at 1")
		}
		sem.Release(1)
	})
	t.Run("bulkhead/channel", func(t *testing.T) {
		ch := make(chan struct{}, 1)
		ch <- struct{}{}
		select {
		case ch <- struct{}{}:
			t.Fatal("full channel took a send")
		default:
		}
	})

	t.Run("pipeline/watertight", func(t *testing.T) {
		cb := newWatertightBreaker(t)
		bh := newWatertightBulkhead(t, 1)
		p := watertight.MustNew(cb, bh)
		if v, err := watertight.Do(ctx, p, work); v != 1 || err != nil {
			t.Fatalf("Do = %d, %v", v, err)
		}
		if !bh.TryAcquire() {
			t.Fatal("Do did not release its permit")
		}
		if _, err := watertight.Do(ctx, p, work); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("full bulkhead: Do = %v, want ErrFull", err)
		}
		bh.Release()
		cb.ForceOpen()
		if _, err := watertight.Do(ctx, p, work); err != circuit.ErrOpen {
			t.Fatalf("open breaker: Do = %v, want ErrOpen", err)
		}
	})
	t.Run("pipeline/watertight-timeout", func(t *testing.T) {
		p := watertight.MustNew(newWatertightBreaker(t), newWatertightBulkhead(t, bulkheadCap), newWatertightTimeout(t))
		v, err := watertight.Do(ctx, p, func(c context.Context) (int, error) {
			if _, ok := c.Deadline(); !ok {
				t.Error("the function's context has no deadline")
			}
			return work(c)
		})
		if v != 1 || err != nil {
			t.Fatalf("Do = %d, %v", v, err)
		}
	})
	t.Run("pipeline/failsafe-go", func(t *testing.T) {
		exec := failsafe.With[int](newFailsafeBreaker(), newFailsafeBulkhead(1)).WithContext(ctx)
		if v, err := exec.GetWithExecution(workExec); v != 1 || err != nil {
			t.Fatalf("Get = %d, %v", v, err)
		}
	})
	t.Run("pipeline/failsafe-go-timeout", func(t *testing.T) {
		exec := failsafe.With[int](newFailsafeBreaker(), newFailsafeBulkhead(bulkheadCap), fstimeout.New[int](attemptTimeout)).WithContext(ctx)
		v, err := exec.GetWithExecution(func(e failsafe.Execution[int]) (int, error) {
			// failsafe-go's timeout cancels a child context from a timer
			// (time.AfterFunc) instead of setting a deadline on it.
			if e.Context().Done() == nil {
				t.Error("the function's context cannot be cancelled")
			}
			return workExec(e)
		})
		if v != 1 || err != nil {
			t.Fatalf("Get = %d, %v", v, err)
		}
	})
}
