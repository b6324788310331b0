package bulkhead_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/timeout"
)

func mustNew(t testing.TB, cfg bulkhead.Config) *bulkhead.Bulkhead {
	t.Helper()
	b, err := bulkhead.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return b
}

// checkState fails unless the bulkhead's Active and Waiting are as given.
func checkState(t testing.TB, b *bulkhead.Bulkhead, active, waiting int) {
	t.Helper()
	s := b.Snapshot()
	if s.Active != active || s.Waiting != waiting {
		t.Fatalf("Active, Waiting = %d, %d; want %d, %d (snapshot %+v)", s.Active, s.Waiting, active, waiting, s)
	}
	if want := max(0, s.MaxConcurrent-s.Active-s.Reserved); s.Available != want {
		t.Fatalf("Available = %d, want %d", s.Available, want)
	}
}

// waitFor spins (yielding, not sleeping) until cond holds. It is for tests
// that run real goroutines outside a synctest bubble.
func waitFor(t interface {
	Helper()
	Fatalf(string, ...any)
}, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 50_000_000 {
			t.Fatalf("gave up waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// recordPeak raises peak to n if n is higher.
func recordPeak(peak *atomic.Int64, n int64) {
	for {
		p := peak.Load()
		if n <= p || peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func TestDefaults(t *testing.T) {
	if got := bulkhead.DefaultConfig(); got.MaxConcurrent != bulkhead.DefaultMaxConcurrent || got.MaxWait != 0 {
		t.Fatalf("DefaultConfig() = %+v", got)
	}
	b := mustNew(t, bulkhead.Config{Name: "x"})
	s := b.Snapshot()
	want := bulkhead.Snapshot{Name: "x", MaxConcurrent: 25, Available: 25}
	if s != want {
		t.Fatalf("Snapshot() = %+v, want %+v", s, want)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  bulkhead.Config
		want []string
	}{
		{bulkhead.Config{MaxConcurrent: -3}, []string{"Config.MaxConcurrent", ">= 0", "got -3"}},
		{bulkhead.Config{MaxConcurrent: bulkhead.MaxConcurrentLimit + 1}, []string{"Config.MaxConcurrent", "<="}},
	} {
		b, err := bulkhead.New(tc.cfg)
		if err == nil || b != nil {
			t.Fatalf("New(%+v) = %v, %v; want an error", tc.cfg, b, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("New(%+v) error %q does not contain %q", tc.cfg, err, w)
			}
		}
	}
	if _, err := bulkhead.New(bulkhead.Config{MaxConcurrent: bulkhead.MaxConcurrentLimit}); err != nil {
		t.Fatalf("New at the limit: %v", err)
	}
}

func TestErrorsAreRejections(t *testing.T) {
	for _, err := range []error{bulkhead.ErrFull, bulkhead.ErrQueueFull, bulkhead.ErrQueueTimeout} {
		if !watertight.IsRejection(err) || !watertight.IsSaturation(err) {
			t.Errorf("%v: IsRejection %v, IsSaturation %v; want both", err, watertight.IsRejection(err), watertight.IsSaturation(err))
		}
	}
	for _, err := range []error{bulkhead.ErrClosed, bulkhead.ErrTooManyKeys} {
		if !watertight.IsRejection(err) || watertight.IsSaturation(err) {
			t.Errorf("%v: IsRejection %v, IsSaturation %v; want rejection only", err, watertight.IsRejection(err), watertight.IsSaturation(err))
		}
	}
}

func TestAcquireReleaseTry(t *testing.T) {
	ctx := context.Background()
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 2})
	if err := b.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if !b.TryAcquire() {
		t.Fatal("TryAcquire on a bulkhead with a free permit failed")
	}
	checkState(t, b, 2, 0)
	if b.TryAcquire() {
		t.Fatal("TryAcquire on a full bulkhead succeeded")
	}
	err := b.Acquire(ctx)
	if !errors.Is(err, bulkhead.ErrFull) || err != bulkhead.ErrFull {
		t.Fatalf("Acquire on a full bulkhead = %v, want ErrFull itself (no name)", err)
	}
	b.Release()
	checkState(t, b, 1, 0)
	if err := b.Acquire(ctx); err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	b.Release()
	b.Release()
	checkState(t, b, 0, 0)
	s := b.Snapshot()
	if s.Acquired != 3 || s.Rejected != 2 || s.Canceled != 0 {
		t.Fatalf("Acquired, Rejected, Canceled = %d, %d, %d; want 3, 2, 0", s.Acquired, s.Rejected, s.Canceled)
	}
}

func TestNamedError(t *testing.T) {
	b := mustNew(t, bulkhead.Config{Name: "payments", MaxConcurrent: 1})
	b.TryAcquire()
	err := b.Acquire(context.Background())
	if !errors.Is(err, bulkhead.ErrFull) || !watertight.IsSaturation(err) {
		t.Fatalf("err = %v; want one that is ErrFull and a saturation", err)
	}
	if got, want := err.Error(), "bulkhead: payments: full"; got != want {
		t.Fatalf("err.Error() = %q, want %q", got, want)
	}
	if got := watertight.Classify(context.Background(), err); got != watertight.Saturated {
		t.Fatalf("Classify = %v, want saturated", got)
	}
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 1})
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Release without Acquire") {
				t.Fatalf("recover() = %v, want a panic about Release without Acquire", r)
			}
		}()
		b.Release()
	}()
	checkState(t, b, 0, 0)
	if !b.TryAcquire() {
		t.Fatal("the bulkhead is unusable after the panic")
	}
	b.Release()
}

func TestZeroBulkheadRejects(t *testing.T) {
	var b bulkhead.Bulkhead
	if err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("zero Bulkhead Acquire = %v, want ErrFull", err)
	}
}

func TestMaxWaitExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: 100 * time.Millisecond})
		b.TryAcquire()
		start := time.Now()
		var err error
		var took time.Duration
		done := make(chan struct{})
		go func() {
			err = b.Acquire(context.Background())
			took = time.Since(start)
			close(done)
		}()
		synctest.Wait()
		checkState(t, b, 1, 1)
		time.Sleep(99 * time.Millisecond)
		synctest.Wait()
		checkState(t, b, 1, 1) // still waiting just before MaxWait
		<-done
		if !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Acquire = %v, want ErrFull", err)
		}
		if took != 100*time.Millisecond {
			t.Fatalf("Acquire gave up after %v, want 100ms", took)
		}
		checkState(t, b, 1, 0)
		if s := b.Snapshot(); s.Rejected != 1 || s.Acquired != 1 {
			t.Fatalf("Rejected, Acquired = %d, %d; want 1, 1", s.Rejected, s.Acquired)
		}
		b.Release()
	})
}

func TestMaxWaitGrantedInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: 100 * time.Millisecond})
		b.TryAcquire()
		start := time.Now()
		errc := make(chan error, 1)
		go func() { errc <- b.Acquire(context.Background()) }()
		time.Sleep(60 * time.Millisecond)
		b.Release() // handed straight to the waiter
		checkState(t, b, 1, 0)
		if err := <-errc; err != nil {
			t.Fatalf("Acquire = %v, want nil", err)
		}
		if took := time.Since(start); took != 60*time.Millisecond {
			t.Fatalf("granted after %v, want 60ms", took)
		}
		b.Release()
		checkState(t, b, 0, 0)
	})
}

func TestWaitUntilContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1})
		b.TryAcquire()
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		err := b.Acquire(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v, want DeadlineExceeded", err)
		}
		// The caller gave up: neither a failure of the dependency nor a
		// saturation of the bulkhead.
		if errors.Is(err, bulkhead.ErrFull) || watertight.IsSaturation(err) || watertight.IsRejection(err) {
			t.Fatalf("Acquire = %v: a wait cut short by the caller must not be a saturation", err)
		}
		if o := watertight.Classify(ctx, err); o != watertight.Ignored {
			t.Fatalf("Classify(%v) = %v, want ignored", err, o)
		}
		if took := time.Since(start); took != time.Hour {
			t.Fatalf("waited %v, want 1h", took)
		}
		checkState(t, b, 1, 0)
		if s := b.Snapshot(); s.Canceled != 1 || s.Rejected != 0 {
			t.Fatalf("Canceled, Rejected = %d, %d; want 1, 0", s.Canceled, s.Rejected)
		}
		b.Release()
	})
}

func TestCancelWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: time.Minute})
		b.TryAcquire()
		cause := errors.New("user went away")
		ctx, cancel := context.WithCancelCause(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- b.Acquire(ctx) }()
		synctest.Wait()
		checkState(t, b, 1, 1)
		cancel(cause)
		err := <-errc
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
			t.Fatalf("Acquire = %v, want context.Canceled carrying the cause", err)
		}
		checkState(t, b, 1, 0)
		b.Release()
		checkState(t, b, 0, 0)
	})
}

func TestDoneContextDoesNotQueue(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1})
	// A done context fails even with a permit free (x/sync's rule).
	if err := b.Acquire(ctx); !errors.Is(err, context.Canceled) || watertight.Classify(ctx, err) != watertight.Ignored {
		t.Fatalf("Acquire with a free permit and a done context = %v, want Canceled, ignored", err)
	}
	checkState(t, b, 0, 0)
	if err := b.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	// When it would have to wait, too.
	if err := b.Acquire(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("Acquire on a full bulkhead with a done context = %v, want Canceled", err)
	}
	// TryAcquire takes no context: it is not concerned.
	checkState(t, b, 1, 0)
	if s := b.Snapshot(); s.Canceled != 2 || s.Rejected != 0 || s.Acquired != 1 {
		t.Fatalf("snapshot %+v, want 2 canceled, 1 acquired", s)
	}
	b.Release()
}

// TestFIFO queues waiters one at a time and checks that they are served in
// arrival order: a permit given back goes to the oldest waiter, and a
// newcomer joins the back of the queue rather than taking it.
func TestFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 20
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1})
		b.TryAcquire()
		var order []int // appended by the permit holder only
		for i := range n {
			go func() {
				if err := b.Acquire(context.Background()); err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				order = append(order, i)
				time.Sleep(time.Millisecond) // hold the permit a while
				b.Release()
			}()
			synctest.Wait() // waiter i is queued before waiter i+1 arrives
		}
		checkState(t, b, 1, n)
		b.Release() // handed straight to waiter 0: no moment with a free permit
		checkState(t, b, 1, n-1)
		if b.TryAcquire() {
			t.Fatal("a newcomer overtook the queue")
		}
		time.Sleep(time.Duration(n) * time.Millisecond)
		synctest.Wait()
		checkState(t, b, 0, 0)
		if len(order) != n {
			t.Fatalf("%d waiters served, want %d", len(order), n)
		}
		for i, got := range order {
			if got != i {
				t.Fatalf("served in order %v, want 0..%d", order, n-1)
			}
		}
	})
}

// TestCancelRacesHandOff makes the wait end (context or MaxWait) at the
// moment the permit is handed over, many times: the failed Acquire must
// leave the bulkhead unchanged, passing the permit to the next waiter.
func TestCancelRacesHandOff(t *testing.T) {
	t.Run("context", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1})
			var canceled1 int
			for i := range 200 {
				b.TryAcquire()
				ctx1, cancel1 := context.WithCancel(context.Background())
				err1, err2 := make(chan error, 1), make(chan error, 1)
				acquire := func(ctx context.Context, errc chan error) {
					err := b.Acquire(ctx)
					errc <- err
					if err == nil {
						b.Release()
					}
				}
				go acquire(ctx1, err1)
				synctest.Wait()
				go acquire(context.Background(), err2)
				synctest.Wait()
				checkState(t, b, 1, 2)
				// Most often both happen before waiter 1 runs again, so it
				// sees its permit and its context's end at once.
				if i%2 == 0 {
					b.Release()
					cancel1()
				} else {
					cancel1()
					b.Release()
				}
				switch err := <-err1; {
				case errors.Is(err, context.Canceled):
					canceled1++
				case err != nil:
					t.Fatalf("iteration %d: waiter 1 = %v", i, err)
				}
				if err := <-err2; err != nil {
					t.Fatalf("iteration %d: waiter 2 = %v, want a permit", i, err)
				}
				synctest.Wait()
				checkState(t, b, 0, 0)
			}
			s := b.Snapshot()
			if s.Acquired+s.Canceled != 600 || s.Canceled != uint64(canceled1) || s.Rejected != 0 {
				t.Fatalf("Acquired, Canceled, Rejected = %d, %d, %d; want 600 in all, %d canceled", s.Acquired, s.Canceled, s.Rejected, canceled1)
			}
			t.Logf("waiter 1 gave up %d times of 200", canceled1)
		})
	})
	t.Run("MaxWait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const wait = 100 * time.Millisecond
			b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: wait})
			var full1 int
			for i := range 200 {
				b.TryAcquire()
				err1, err2 := make(chan error, 1), make(chan error, 1)
				acquire := func(errc chan error) {
					err := b.Acquire(context.Background())
					errc <- err
					if err == nil {
						b.Release()
					}
				}
				go acquire(err1)
				time.Sleep(time.Millisecond)
				go acquire(err2)
				synctest.Wait()
				checkState(t, b, 1, 2)
				// Release exactly when waiter 1's MaxWait runs out.
				time.Sleep(wait - time.Millisecond)
				b.Release()
				switch err := <-err1; {
				case errors.Is(err, bulkhead.ErrFull):
					full1++
				case err != nil:
					t.Fatalf("iteration %d: waiter 1 = %v", i, err)
				}
				if err := <-err2; err != nil {
					t.Fatalf("iteration %d: waiter 2 = %v, want nil", i, err)
				}
				synctest.Wait()
				checkState(t, b, 0, 0)
			}
			s := b.Snapshot()
			if s.Acquired+s.Rejected != 600 || s.Rejected != uint64(full1) || s.Canceled != 0 {
				t.Fatalf("Acquired, Rejected, Canceled = %d, %d, %d; want 600 in all, %d rejected", s.Acquired, s.Rejected, s.Canceled, full1)
			}
		})
	})
	t.Run("real goroutines", func(t *testing.T) {
		// The same race with real scheduling: release and cancel from two
		// goroutines at once.
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1})
		const rounds = 2000
		var got, canceled int
		for range rounds {
			b.TryAcquire()
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- b.Acquire(ctx) }()
			waitFor(t, "the waiter to queue", func() bool { return b.Snapshot().Waiting == 1 })
			var wg sync.WaitGroup
			wg.Go(b.Release)
			wg.Go(cancel)
			wg.Wait()
			switch err := <-errc; {
			case err == nil:
				got++
				checkState(t, b, 1, 0)
				b.Release()
			case errors.Is(err, context.Canceled):
				canceled++
			default:
				t.Fatal(err)
			}
			checkState(t, b, 0, 0)
		}
		s := b.Snapshot()
		if s.Acquired != uint64(rounds+got) || s.Canceled != uint64(canceled) {
			t.Fatalf("Acquired, Canceled = %d, %d; want %d, %d", s.Acquired, s.Canceled, rounds+got, canceled)
		}
		t.Logf("waiter got the permit %d times, gave up %d times", got, canceled)
	})
}

// TestStress hammers a bulkhead of 40 with 10,000 goroutines that all start
// at once, in each waiting mode.
func TestStress(t *testing.T) {
	const (
		limit    = 40
		attempts = 10_000
	)
	for _, tc := range []struct {
		name    string
		maxWait time.Duration
		try     bool // TryAcquire instead of Acquire
		cancel  bool // contexts cancelled at random
	}{
		{name: "no wait", maxWait: 0},
		{name: "TryAcquire", try: true},
		{name: "wait", maxWait: -1},
		{name: "MaxWait", maxWait: 50 * time.Microsecond},
		{name: "wait with cancels", maxWait: -1, cancel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := mustNew(t, bulkhead.Config{MaxConcurrent: limit, MaxWait: tc.maxWait, MaxWaiters: -1})
			var inflight, peak, failed atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range attempts {
				wg.Go(func() {
					ctx := context.Background()
					if tc.cancel && i%3 == 0 {
						c, cancel := context.WithCancel(ctx)
						ctx = c
						if rand.IntN(2) == 0 {
							cancel()
						} else {
							go func() { runtime.Gosched(); cancel() }()
						}
						defer cancel()
					}
					<-start
					if tc.try {
						if !b.TryAcquire() {
							failed.Add(1)
							return
						}
					} else if err := b.Acquire(ctx); err != nil {
						if !errors.Is(err, bulkhead.ErrFull) && !errors.Is(err, context.Canceled) {
							t.Errorf("Acquire: %v", err)
						}
						failed.Add(1)
						return
					}
					recordPeak(&peak, inflight.Add(1))
					runtime.Gosched()
					inflight.Add(-1)
					b.Release()
				})
			}
			close(start)
			wg.Wait()
			s := b.Snapshot()
			if p := peak.Load(); p > limit || p == 0 {
				t.Fatalf("peak in flight = %d, want 1..%d", p, limit)
			}
			if s.Active != 0 || s.Waiting != 0 || s.Available != limit {
				t.Fatalf("after the storm: %+v; want every permit back", s)
			}
			if got := s.Acquired + s.Rejected + s.Canceled; got != attempts {
				t.Fatalf("Acquired %d + Rejected %d + Canceled %d = %d, want %d", s.Acquired, s.Rejected, s.Canceled, got, attempts)
			}
			if s.Rejected+s.Canceled != uint64(failed.Load()) {
				t.Fatalf("Rejected %d + Canceled %d != %d failures seen", s.Rejected, s.Canceled, failed.Load())
			}
			if !tc.cancel && s.Canceled != 0 {
				t.Fatalf("Canceled = %d without cancellations", s.Canceled)
			}
			if tc.maxWait < 0 && !tc.cancel && s.Acquired != attempts {
				t.Fatalf("Acquired = %d, want all %d when waiting without limit", s.Acquired, attempts)
			}
			t.Logf("peak %d, acquired %d, rejected %d, canceled %d", peak.Load(), s.Acquired, s.Rejected, s.Canceled)
		})
	}
}

func TestPipelinePolicy(t *testing.T) {
	ctx := context.Background()
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 1})
	p := watertight.MustNew(b)

	v, err := watertight.Do(ctx, p, func(context.Context) (int, error) {
		checkState(t, b, 1, 0) // the permit is held during the call
		return 42, nil
	})
	if v != 42 || err != nil {
		t.Fatalf("Do = %v, %v; want 42, nil", v, err)
	}
	checkState(t, b, 0, 0)

	// The function's error passes through unchanged, and the permit is back.
	boom := errors.New("boom")
	if err := p.Run(ctx, func(context.Context) error { return boom }); err != boom {
		t.Fatalf("Run = %v, want boom", err)
	}
	checkState(t, b, 0, 0)

	// Full: refused without calling the function.
	b.TryAcquire()
	called := false
	_, err = watertight.Do(ctx, p, func(context.Context) (int, error) { called = true; return 0, nil })
	if called {
		t.Fatal("the function ran through a full bulkhead")
	}
	if !errors.Is(err, bulkhead.ErrFull) || !watertight.IsRejection(err) || !watertight.IsSaturation(err) {
		t.Fatalf("Do through a full bulkhead = %v; want ErrFull, a rejection and a saturation", err)
	}
	b.Release()

	// A panic releases the permit, and goes on.
	func() {
		defer func() {
			if r := recover(); r != "oops" {
				t.Fatalf("recover() = %v, want oops", r)
			}
		}()
		_ = p.Run(ctx, func(context.Context) error { panic("oops") })
	}()
	checkState(t, b, 0, 0)
	if !b.HoldsResource() {
		t.Fatal("HoldsResource() = false")
	}
}

// TestWaitCutByTimeoutPolicy: a wait ended by a timeout policy outside the
// bulkhead returns that timeout's error (the context's cause), which is also
// a context.DeadlineExceeded.
func TestWaitCutByTimeoutPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1})
		total, err := timeout.New(timeout.Config{Name: "total", Timeout: 30 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		b.TryAcquire()
		err = watertight.MustNew(total, b).Run(context.Background(), func(context.Context) error {
			t.Error("ran through a full bulkhead")
			return nil
		})
		var te *timeout.Error
		if !errors.As(err, &te) || te.Name != "total" || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run = %v, want the total timeout's error", err)
		}
		checkState(t, b, 1, 0)
		b.Release()
	})
}

// TestDetachedKeepsPermit checks the bulkhead as a watertight.Resource: work
// abandoned by a timeout keeps its permit until it really ends.
func TestDetachedKeepsPermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1})
		to, err := timeout.New(timeout.Config{Timeout: 10 * time.Millisecond, Abandon: true})
		if err != nil {
			t.Fatal(err)
		}
		p := watertight.MustNew(b, to)
		release := make(chan struct{})
		_, err = watertight.DoDetached(context.Background(), p, func(context.Context) (int, error) {
			<-release // ignores its context
			return 1, nil
		})
		if !errors.Is(err, timeout.ErrTimeout) {
			t.Fatalf("DoDetached = %v, want a timeout", err)
		}
		checkState(t, b, 1, 0) // abandoned work still holds its permit
		if err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Acquire while abandoned work runs = %v, want ErrFull", err)
		}
		close(release)
		synctest.Wait()
		checkState(t, b, 0, 0)
	})
}

func TestAcquireAllocs(t *testing.T) {
	ctx := context.Background()
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 1})
	p := watertight.MustNew(b)
	fn := func(context.Context) (int, error) { return 1, nil }
	if n := testing.AllocsPerRun(1000, func() {
		_ = b.Acquire(ctx)
		b.Release()
	}); n != 0 {
		t.Errorf("Acquire+Release allocates %v times", n)
	}
	b.TryAcquire()
	if n := testing.AllocsPerRun(1000, func() { _ = b.Acquire(ctx) }); n != 0 {
		t.Errorf("rejection allocates %v times", n)
	}
	b.Release()
	if n := testing.AllocsPerRun(1000, func() { _, _ = watertight.Do(ctx, p, fn) }); n != 0 {
		t.Errorf("watertight.Do through the bulkhead allocates %v times", n)
	}
}

func TestGiveUpInFullBulkheadDoesNotTripBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br, err := circuit.New(circuit.Config{WindowSize: 1, MinCalls: 1})
		if err != nil {
			t.Fatal(err)
		}
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1})
		b.TryAcquire()
		p := watertight.MustNew(br, b)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = p.Run(ctx, func(context.Context) error { t.Fatal("ran without a permit"); return nil })
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Run = %v", err)
		}
		if s := br.Snapshot(); s.State != circuit.Closed || s.Calls != 0 {
			t.Fatalf("the breaker counted a give-up in a full bulkhead: %+v", s)
		}
		b.Release()
	})
}

// A breaker that counts saturation counts a MaxWait that runs out, but
// neither counts a caller that gave up while waiting nor one whose context
// had ended before it came.
func TestGiveUpIsNotSaturation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br, err := circuit.New(circuit.Config{WindowSize: 1, MinCalls: 1, CountSaturation: true})
		if err != nil {
			t.Fatal(err)
		}
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: time.Second})
		b.TryAcquire()
		p := watertight.MustNew(br, b)
		run := func(ctx context.Context) error {
			return p.Run(ctx, func(context.Context) error { t.Fatal("ran without a permit"); return nil })
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := run(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run = %v", err)
		}
		if err := run(ctx); !errors.Is(err, context.DeadlineExceeded) { // done before it came
			t.Fatalf("Run = %v", err)
		}
		if s := br.Snapshot(); s.State != circuit.Closed || s.Calls != 0 {
			t.Fatalf("the breaker counted a give-up: %+v", s)
		}
		if err := run(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Run after MaxWait = %v, want ErrFull", err)
		}
		if s := br.Snapshot(); s.State != circuit.Open {
			t.Fatalf("breaker %+v; want it open, on the saturation", s)
		}
		b.Release()
	})
}

// recorder is a Listener that keeps the events it receives.
type recorder struct {
	mu  sync.Mutex
	evs []watertight.Event
}

func (r *recorder) OnEvent(e watertight.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

// take returns the events received since the last take, one line each:
// kind, source/name/key, reason, error.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.evs {
		s := fmt.Sprintf("%v %s/%s/%s %q", e.Kind, e.Source, e.Name, e.Key, e.Reason)
		if e.Permits != 0 {
			s += fmt.Sprintf(" permits=%d", e.Permits)
		}
		if e.Delay != 0 {
			s += fmt.Sprintf(" delay=%v", e.Delay)
		}
		if e.Err != nil {
			s += " err=" + e.Err.Error()
		}
		if e.Time.IsZero() {
			s += " (no time)"
		}
		out = append(out, s)
	}
	r.evs = nil
	return out
}

func checkEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestBulkheadEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		b := mustNew(t, bulkhead.Config{Name: "db", MaxConcurrent: 1, Listener: rec})
		if err := b.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Acquire on a full bulkhead: %v", err)
		}
		if b.TryAcquire() {
			t.Fatal("TryAcquire on a full bulkhead")
		}
		b.Release()
		checkEvents(t, rec.take(),
			`acquired bulkhead/db/ "" permits=1`,
			`bulkhead_full bulkhead/db/ "no permit free" err=bulkhead: db: full`,
			`bulkhead_full bulkhead/db/ "no permit free" err=bulkhead: db: full`,
			`released bulkhead/db/ "" permits=1`)

		w := mustNew(t, bulkhead.Config{Name: "api", MaxConcurrent: 1, MaxWait: time.Second, Listener: rec})
		_ = w.Acquire(context.Background())
		_ = rec.take()
		start := time.Now()
		if err := w.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Acquire after MaxWait: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := w.Acquire(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire cut short: %v", err)
		}
		if err := w.Acquire(ctx); err == nil { // ctx already done
			t.Fatal("Acquire with a done context")
		}
		w.Release()
		rec.mu.Lock()
		if at := rec.evs[0].Time; !at.Equal(start.Add(time.Second)) {
			t.Errorf("first event at %v, want after MaxWait (%v)", at, start.Add(time.Second))
		}
		rec.mu.Unlock()
		// A caller that gives up sends no event: it says nothing about the
		// bulkhead.
		checkEvents(t, rec.take(),
			`bulkhead_full bulkhead/api/ "no permit free within MaxWait" err=bulkhead: api: full`,
			`released bulkhead/api/ "" permits=1`)

		// A waiter granted its permit reports how long it waited.
		_ = w.Acquire(context.Background())
		go func() {
			time.Sleep(300 * time.Millisecond)
			w.Release()
		}()
		if err := w.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.Release()
		checkEvents(t, rec.take(),
			`acquired bulkhead/api/ "" permits=1`,
			`released bulkhead/api/ "" permits=1`,
			`acquired bulkhead/api/ "" permits=1 delay=300ms`,
			`released bulkhead/api/ "" permits=1`)
	})
}

// A listener may call back into the bulkhead: events are never sent under
// its lock, including when a waiter gives up.
func TestBulkheadListenerMayCallBackIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b *bulkhead.Bulkhead
		var depth, n atomic.Int64
		l := watertight.ListenerFunc(func(e watertight.Event) {
			d := depth.Add(1)
			defer depth.Add(-1)
			n.Add(1)
			_ = b.Snapshot()
			if d == 1 && b.TryAcquire() { // rejected again, within the event
				b.Release()
			}
		})
		b = mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: time.Second, Listener: l})
		_ = b.Acquire(context.Background())
		_ = b.Acquire(context.Background()) // times out, after giveUp took the lock
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			synctest.Wait()
			cancel()
		}()
		_ = b.Acquire(ctx)
		b.Release()
		// The first Acquire's acquired, and a full for the TryAcquire made
		// in it; a full for the Acquire that times out, and one for its
		// TryAcquire; none for the cancelled one; the Release's released,
		// in which a TryAcquire succeeds: an acquired and a released.
		if n.Load() != 7 {
			t.Fatalf("%d events, want 7", n.Load())
		}
		checkState(t, b, 0, 0)
	})
}

// Without a listener the rejection path allocates nothing; with one that
// does not allocate, neither does it.
func TestBulkheadListenerAllocs(t *testing.T) {
	var n atomic.Int64
	b := mustNew(t, bulkhead.Config{Name: "x", MaxConcurrent: 1, Listener: watertight.ListenerFunc(func(watertight.Event) { n.Add(1) })})
	_ = b.Acquire(context.Background())
	if a := testing.AllocsPerRun(100, func() { _ = b.Acquire(context.Background()); _ = b.TryAcquire() }); a != 0 {
		t.Errorf("rejections with a listener: %v allocs", a)
	}
	b.Release()
	if a := testing.AllocsPerRun(100, func() { _ = b.Acquire(context.Background()); b.Release() }); a != 0 {
		t.Errorf("acquire and release with a listener: %v allocs", a)
	}
	if n.Load() < 200 {
		t.Fatalf("%d events", n.Load())
	}
}

// TestMixedConcurrent runs goroutines that mix every way of taking a permit
// (Enter and Exit, Acquire and Release, TryAcquire, waits that time out,
// waits cut short by a cancelled context or a deadline) against bulkheads
// whose permits are striped over several cells, evenly or not. It checks
// that no more than MaxConcurrent permits are ever held, that every call is
// counted once, and that everything drains.
func TestMixedConcurrent(t *testing.T) {
	for _, limit := range []int{2, 8, 13, 20} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const (
					workers = 24
					ops     = 200
				)
				b := mustNew(t, bulkhead.Config{MaxConcurrent: limit, MaxWait: 3 * time.Millisecond})
				var inflight, peak, ok, failed atomic.Int64
				hold := func(rng *rand.Rand) {
					recordPeak(&peak, inflight.Add(1))
					if rng.IntN(4) == 0 {
						time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond) // work, on the virtual clock
					} else {
						runtime.Gosched()
					}
					inflight.Add(-1)
					ok.Add(1)
				}
				fail := func(err error) {
					canceled := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
					if canceled == errors.Is(err, bulkhead.ErrFull) {
						t.Errorf("error %v matches neither or both of ErrFull and the context's error", err)
					}
					failed.Add(1)
				}
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(w), uint64(limit)))
						for range ops {
							switch rng.IntN(5) {
							case 0: // the Policy form
								ctx, tk, err := b.Enter(context.Background())
								if err != nil {
									fail(err)
									continue
								}
								hold(rng)
								_ = b.Exit(ctx, tk, nil)
							case 1:
								if err := b.Acquire(context.Background()); err != nil {
									fail(err)
									continue
								}
								hold(rng)
								b.Release()
							case 2:
								if !b.TryAcquire() {
									failed.Add(1)
									continue
								}
								hold(rng)
								b.Release()
							case 3: // cancelled at once, or while it may be waiting
								ctx, cancel := context.WithCancel(context.Background())
								if rng.IntN(2) == 0 {
									cancel()
								} else {
									go func() { runtime.Gosched(); cancel() }()
								}
								err := b.Acquire(ctx)
								if err != nil {
									fail(err)
									cancel()
									continue
								}
								hold(rng)
								b.Release()
								cancel()
							case 4: // a deadline shorter than MaxWait, held by Enter
								ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(2000))*time.Microsecond)
								ctx, tk, err := b.Enter(ctx)
								if err != nil {
									fail(err)
									cancel()
									continue
								}
								hold(rng)
								_ = b.Exit(ctx, tk, nil)
								cancel()
							}
						}
					})
				}
				wg.Wait()
				synctest.Wait()
				s := b.Snapshot()
				if p := peak.Load(); p > int64(limit) || p == 0 {
					t.Fatalf("peak in flight = %d, want 1..%d", p, limit)
				}
				if s.Active != 0 || s.Waiting != 0 || s.Available != limit {
					t.Fatalf("after the run: %+v; want every permit back", s)
				}
				if got, want := s.Acquired+s.Rejected+s.Canceled, uint64(workers*ops); got != want {
					t.Fatalf("Acquired %d + Rejected %d + Canceled %d = %d, want %d", s.Acquired, s.Rejected, s.Canceled, got, want)
				}
				if s.Acquired != uint64(ok.Load()) || s.Rejected+s.Canceled != uint64(failed.Load()) {
					t.Fatalf("snapshot %+v; seen %d acquired, %d failed", s, ok.Load(), failed.Load())
				}
				if s.Canceled == 0 || s.Rejected == 0 {
					t.Fatalf("snapshot %+v: the run should have had both cancellations and rejections", s)
				}
				t.Logf("peak %d, acquired %d, rejected %d, canceled %d", peak.Load(), s.Acquired, s.Rejected, s.Canceled)
			})
		})
	}
}

// stateOnly declines the per-call events.
type stateOnly struct{ kinds []watertight.EventKind }

func (s *stateOnly) OnEvent(e watertight.Event) { s.kinds = append(s.kinds, e.Kind) }
func (s *stateOnly) Wants(k watertight.EventKind) bool {
	return k != watertight.EventAcquired && k != watertight.EventReleased
}

// A listener that declines the per-call events (watertight.Wants) gets
// none, and still gets the refusals.
func TestListenerDecliningPerCallEvents(t *testing.T) {
	l := &stateOnly{}
	b, err := bulkhead.New(bulkhead.Config{Name: "b", MaxConcurrent: 1, Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	if !b.TryAcquire() {
		t.Fatal("no permit")
	}
	if b.TryAcquire() {
		t.Fatal("a second permit")
	}
	b.Release()
	if len(l.kinds) != 1 || l.kinds[0] != watertight.EventBulkheadFull {
		t.Fatalf("events %v, want only the refusal", l.kinds)
	}
	if a := testing.AllocsPerRun(100, func() { b.TryAcquire(); b.Release() }); a != 0 {
		t.Fatalf("acquire and release: %v allocations", a)
	}
}
