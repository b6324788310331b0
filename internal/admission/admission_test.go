package admission

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
)

// Criticalities as the adapters pass them (watertighthttp.Criticality).
const (
	sheddable     = -2
	sheddablePlus = -1
	critical      = 0
	criticalPlus  = 1
)

// checkEmpty fails unless q has nothing in flight or queued.
func checkEmpty(t *testing.T, q *Queue) {
	t.Helper()
	q.mu.Lock()
	n := len(q.queue)
	q.mu.Unlock()
	if q.active.Load() != 0 || n != 0 || q.waiting.Load() != 0 {
		t.Fatalf("active %d, queued %d, waiting %d; want all 0", q.active.Load(), n, q.waiting.Load())
	}
}

// TestFastPathStress runs 10,000 goroutines through one Queue. With a
// queue long enough for all, every one must get in: a lost wakeup (a
// release that misses a waiter that just queued) would hang. With a short
// queue and cancellations, some are turned away. In both, no more than max
// are ever in at once, and nothing is left behind.
func TestFastPathStress(t *testing.T) {
	const maxc, goroutines = 3, 10000
	for _, tc := range []struct {
		name    string
		maxq    int
		cancel  bool
		maxWait time.Duration
	}{
		{"long queue", goroutines, false, 0},
		{"short queue", 4, true, 0},
		{"no queue", 0, false, 0},
		{"max wait", 8, true, time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New("r", maxc, tc.maxq)
			var inside, peak, admitted, returned atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					defer returned.Add(1)
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					if tc.cancel && g%5 == 0 {
						go cancel()
					}
					err := q.AcquireWait(ctx, g%4-2, tc.maxWait)
					if err != nil {
						if !watertight.IsSaturation(err) && !errors.Is(err, ErrGaveUp) {
							t.Errorf("acquire: %v is neither a saturation nor a give-up", err)
						}
						return
					}
					admitted.Add(1)
					n := inside.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					if g%16 == 0 {
						time.Sleep(time.Microsecond) // to vary the interleavings, not to synchronise
					}
					inside.Add(-1)
					q.Release()
				})
			}
			wg.Wait()
			if returned.Load() != goroutines {
				t.Fatalf("%d of %d acquires returned", returned.Load(), goroutines)
			}
			if p := peak.Load(); p > maxc {
				t.Fatalf("peak in flight %d > %d", p, maxc)
			}
			if !tc.cancel && tc.maxq >= goroutines && admitted.Load() != goroutines {
				t.Fatalf("admitted %d of %d with room to queue all", admitted.Load(), goroutines)
			}
			checkEmpty(t, q)
		})
	}
}

func TestFastPathSkipsMutex(t *testing.T) {
	// Below the limit with nobody queued, Acquire, TryAcquire and Release
	// do not take the mutex: they succeed while another goroutine holds it.
	q := New("r", 2, 2)
	q.mu.Lock()
	done := make(chan error, 1)
	go func() {
		err := q.Acquire(context.Background(), critical)
		if err == nil {
			if !q.TryAcquire() {
				err = errors.New("TryAcquire failed with a place free")
			} else {
				q.Release()
			}
			q.Release()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fast path blocked on the mutex")
	}
	q.mu.Unlock()
	checkEmpty(t, q)
}

// startWaiter starts Acquire in a goroutine and waits until it blocks.
func startWaiter(q *Queue, ctx context.Context, crit int, id string, order chan<- string, errs chan<- error) {
	go func() {
		err := q.Acquire(ctx, crit)
		if err != nil {
			errs <- err
			return
		}
		order <- id
	}()
	synctest.Wait()
}

// serve releases n places one at a time and returns the waiters let in, in
// order.
func serve(q *Queue, n int, order <-chan string) string {
	var got []string
	for range n {
		q.Release()
		synctest.Wait()
		got = append(got, <-order)
	}
	return strings.Join(got, ",")
}

func TestAdaptiveLIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New("r", 1, 4)
		ctx := context.Background()
		if err := q.Acquire(ctx, critical); err != nil {
			t.Fatal(err)
		}
		order := make(chan string, 10)
		errs := make(chan error, 10)
		for _, id := range []string{"1", "2", "3", "4"} {
			startWaiter(q, ctx, critical, id, order, errs)
		}
		// Queue of 4 (more than half of 4): LIFO → 4; then 3 left (more
		// than half): LIFO → 3; then 2 left (half): FIFO → 1, then 2.
		if s := serve(q, 4, order); s != "4,3,1,2" {
			t.Fatalf("served %s, want 4,3,1,2", s)
		}
		q.Release()
		if len(errs) != 0 {
			t.Fatalf("%d errors", len(errs))
		}
		checkEmpty(t, q)
	})
}

func TestFIFOWhenShortQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New("r", 1, 10)
		ctx := context.Background()
		_ = q.Acquire(ctx, critical)
		order := make(chan string, 10)
		errs := make(chan error, 10)
		for _, id := range []string{"1", "2", "3"} {
			startWaiter(q, ctx, critical, id, order, errs)
		}
		if s := serve(q, 3, order); s != "1,2,3" {
			t.Fatalf("served %s, want 1,2,3", s)
		}
		q.Release()
		checkEmpty(t, q)
	})
}

func TestDropsDeadWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New("r", 1, 2)
		bg := context.Background()
		_ = q.Acquire(bg, critical)
		order := make(chan string, 10)
		errs := make(chan error, 10)
		short, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		startWaiter(q, short, critical, "short", order, errs)
		startWaiter(q, bg, critical, "long", order, errs)
		time.Sleep(time.Second) // virtual time: the short deadline passes
		synctest.Wait()
		err := <-errs
		var gu *GaveUpError
		if !errors.Is(err, ErrGaveUp) || !errors.Is(err, context.DeadlineExceeded) || !watertight.IsRejection(err) || !errors.As(err, &gu) {
			t.Fatalf("dead waiter error %v: want ErrGaveUp and DeadlineExceeded", err)
		}
		// The caller gave up: not a saturation (Classify: Ignored).
		if watertight.IsSaturation(err) || watertight.Classify(short, err) != watertight.Ignored {
			t.Fatalf("dead waiter error %v: a saturation, or not ignored", err)
		}
		if q.waiting.Load() != 1 {
			t.Fatalf("queue length %d after the dead waiter left, want 1", q.waiting.Load())
		}
		if s := serve(q, 1, order); s != "long" {
			t.Fatalf("served %q, want long", s)
		}
		q.Release()
		checkEmpty(t, q)
	})
}

func TestGaveUpCause(t *testing.T) {
	cause := errors.New("client went away")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	err := New("r", 1, 1).Acquire(ctx, critical)
	if !errors.Is(err, ErrGaveUp) || !errors.Is(err, cause) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v: want ErrGaveUp, the cause and context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "client went away") {
		t.Fatalf("message %q does not say the cause", err)
	}
}

func TestDispatchSkipsDeadWaiter(t *testing.T) {
	// A waiter whose context is done but that has not yet left the queue
	// (its goroutine has not run) is skipped by the dispatcher, and a full
	// queue makes room by dropping it.
	synctest.Test(t, func(t *testing.T) {
		q := New("r", 1, 1)
		bg := context.Background()
		_ = q.Acquire(bg, critical)
		dead, cancel := context.WithCancel(bg)
		cancel()
		q.mu.Lock()
		w := &waiter{ctx: dead, crit: critical, ready: make(chan struct{})}
		q.queue = append(q.queue, w)
		q.waiting.Store(int64(len(q.queue)))
		q.mu.Unlock()
		order := make(chan string, 1)
		errs := make(chan error, 1)
		startWaiter(q, bg, sheddable, "alive", order, errs) // full queue: the dead one makes room
		<-w.ready
		if !errors.Is(w.err, ErrGaveUp) {
			t.Fatalf("dead waiter err %v", w.err)
		}
		if s := serve(q, 1, order); s != "alive" {
			t.Fatalf("served %q", s)
		}
		q.Release()
		checkEmpty(t, q)
	})
}

func TestCriticality(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New("r", 1, 2)
		bg := context.Background()
		_ = q.Acquire(bg, critical)
		order := make(chan string, 10)
		errs := make(chan error, 10)
		startWaiter(q, bg, sheddablePlus, "sp", order, errs)
		startWaiter(q, bg, sheddable, "s1", order, errs)
		// Full. A critical request displaces the lowest (s1), not sp.
		startWaiter(q, bg, critical, "c", order, errs)
		if err := <-errs; err != ErrDisplaced || !watertight.IsSaturation(err) {
			t.Fatalf("displaced error %v", err)
		}
		// A sheddable newcomer finds nothing lower: rejected at once.
		if err := q.Acquire(bg, sheddable); err != ErrFull {
			t.Fatalf("sheddable newcomer: %v, want ErrFull", err)
		}
		// critical-plus displaces sp, the lowest left.
		startWaiter(q, bg, criticalPlus, "cp", order, errs)
		if err := <-errs; err != ErrDisplaced {
			t.Fatalf("sp: %v", err)
		}
		// Served highest first: cp then c.
		if s := serve(q, 2, order); s != "cp,c" {
			t.Fatalf("served %s, want cp,c", s)
		}
		q.Release()
		checkEmpty(t, q)
	})
}

func TestDisplacesOldestOfLowest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New("r", 1, 3)
		bg := context.Background()
		_ = q.Acquire(bg, critical)
		errs := make(map[string]chan error)
		order := make(chan string, 10)
		for _, id := range []string{"c1", "c2", "c3"} {
			errs[id] = make(chan error, 1)
			startWaiter(q, bg, critical, id, order, errs[id])
		}
		// Full of equals: a critical newcomer displaces nobody.
		if err := q.Acquire(bg, critical); err != ErrFull {
			t.Fatalf("critical newcomer: %v, want ErrFull", err)
		}
		// critical-plus displaces the oldest critical, c1.
		cp := make(chan error, 1)
		startWaiter(q, bg, criticalPlus, "cp", order, cp)
		if len(errs["c1"]) != 1 || <-errs["c1"] != ErrDisplaced || len(errs["c2"]) != 0 || len(errs["c3"]) != 0 {
			t.Fatal("the oldest of the lowest (c1) was not the one displaced")
		}
		if s := serve(q, 3, order); s != "cp,c3,c2" { // 2 of 3 critical: LIFO
			t.Fatalf("served %s, want cp,c3,c2", s)
		}
		q.Release()
		checkEmpty(t, q)
	})
}

func TestTryAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New("r", 1, 2)
		bg := context.Background()
		if !q.TryAcquire() {
			t.Fatal("TryAcquire failed on an empty queue")
		}
		if q.TryAcquire() {
			t.Fatal("TryAcquire took a place beyond the limit")
		}
		order := make(chan string, 1)
		errs := make(chan error, 1)
		startWaiter(q, bg, critical, "w", order, errs)
		q.active.Add(-1) // a place frees without dispatch: TryAcquire must not jump the queue
		if q.TryAcquire() {
			t.Fatal("TryAcquire took a place while a request was queued")
		}
		q.active.Add(1)
		if s := serve(q, 1, order); s != "w" {
			t.Fatalf("served %q", s)
		}
		q.Release()
		checkEmpty(t, q)
	})
}

func TestMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New("r", 1, 2)
		bg := context.Background()
		_ = q.Acquire(bg, critical)
		start := time.Now()
		if err := q.AcquireWait(bg, critical, 50*time.Millisecond); err != ErrMaxWait {
			t.Fatalf("err %v, want ErrMaxWait", err)
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("waited %v, want 50ms", d)
		}
		if q.waiting.Load() != 0 {
			t.Fatal("the expired waiter is still queued")
		}
		// Let in before the bound: no error, and the timer is stopped.
		res := make(chan error, 1)
		go func() { res <- q.AcquireWait(bg, critical, time.Hour) }()
		synctest.Wait()
		q.Release()
		if err := <-res; err != nil {
			t.Fatal(err)
		}
		// The context ends first: ErrGaveUp, not ErrMaxWait.
		ctx, cancel := context.WithTimeout(bg, 10*time.Millisecond)
		defer cancel()
		if err := q.AcquireWait(ctx, critical, time.Second); !errors.Is(err, ErrGaveUp) {
			t.Fatalf("err %v, want ErrGaveUp", err)
		}
		q.Release()
		checkEmpty(t, q)
	})
}

func TestNoQueue(t *testing.T) {
	q := New("r", 1, 0)
	bg := context.Background()
	if err := q.Acquire(bg, critical); err != nil {
		t.Fatal(err)
	}
	if err := q.Acquire(bg, criticalPlus); err != ErrFull {
		t.Fatalf("err %v, want ErrFull at once", err)
	}
	q.Release()
	checkEmpty(t, q)
}

func TestQueuedHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New("route", 1, 1)
		var got []string
		q.SetQueuedHook(func(name string) { got = append(got, name) })
		bg := context.Background()
		_ = q.Acquire(bg, critical)
		order := make(chan string, 1)
		startWaiter(q, bg, critical, "w", order, make(chan error, 1))
		if len(got) != 1 || got[0] != "route" {
			t.Fatalf("hook calls %q, want one with the name", got)
		}
		q.SetQueuedHook(nil)
		serve(q, 1, order)
		q.Release()
		if len(got) != 1 {
			t.Fatal("the hook is still called after its removal")
		}
	})
}

func TestRefs(t *testing.T) {
	var r Refs
	if !r.Ref() || r.Evict() {
		t.Fatal("a held value was evicted")
	}
	r.Put()
	if !r.Evict() {
		t.Fatal("an idle value was not evicted")
	}
	if r.Ref() || r.Load() >= 0 || r.Evict() {
		t.Fatal("an evicted value was taken or evicted again")
	}
}

func TestStress(t *testing.T) {
	const maxc, maxq, workers, rounds = 3, 4, 32, 200
	q := New("r", maxc, maxq)
	var inside, peak atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range rounds {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(4) == 0 {
					cancel() // some give up at once or soon
				} else if rng.IntN(4) == 0 {
					go cancel()
				}
				crit := rng.IntN(4) - 2
				var err error
				switch {
				case crit < critical:
					if !q.TryAcquire() {
						err = ErrFull
					}
				case rng.IntN(2) == 0:
					err = q.AcquireWait(ctx, crit, time.Duration(rng.IntN(20))*time.Microsecond)
				default:
					err = q.Acquire(ctx, crit)
				}
				if err == nil {
					n := inside.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					inside.Add(-1)
					q.Release()
				} else if !watertight.IsSaturation(err) && !errors.Is(err, ErrGaveUp) {
					t.Errorf("acquire: %v is neither a saturation nor a give-up", err)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > maxc {
		t.Fatalf("peak in flight %d > %d", p, maxc)
	}
	checkEmpty(t, q)
}

// SetLimit raises the limit with waiters let in at once, and lowers it
// without taking a place back.
func TestSetLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New("r", 1, 4)
		if err := q.Acquire(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- q.Acquire(context.Background(), 0) }()
		synctest.Wait()
		if in, waiting := q.Load(); in != 1 || waiting != 1 {
			t.Fatalf("load %d, %d", in, waiting)
		}
		q.SetLimit(2)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		q.SetLimit(1)
		if q.TryAcquire() {
			t.Fatal("a place at the lowered limit with 2 in flight")
		}
		q.Release()
		if q.TryAcquire() {
			t.Fatal("a place with 1 in flight at limit 1")
		}
		q.Release()
		if !q.TryAcquire() || q.MaxConcurrent() != 1 {
			t.Fatal("no place with none in flight")
		}
		q.Release()
		q.SetLimit(0)
		if q.MaxConcurrent() != 1 {
			t.Fatalf("SetLimit(0): %d, want 1", q.MaxConcurrent())
		}
	})
}
