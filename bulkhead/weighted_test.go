package bulkhead_test

import (
	"context"
	"errors"
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
)

// acquireN starts AcquireN(ctx, n) in a goroutine and returns its result
// channel once the call has settled (queued or done).
func acquireN(ctx context.Context, b *bulkhead.Bulkhead, n int) chan error {
	errc := make(chan error, 1)
	go func() { errc <- b.AcquireN(ctx, n) }()
	synctest.Wait()
	return errc
}

// pending fails if errc has a result.
func pending(t *testing.T, what string, errc chan error) {
	t.Helper()
	select {
	case err := <-errc:
		t.Fatalf("%s ended with %v, want it still waiting", what, err)
	default:
	}
}

// result returns errc's result, failing if there is none yet.
func result(t *testing.T, what string, errc chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	default:
		t.Fatalf("%s still waits", what)
		return nil
	}
}

func TestAcquireNReleaseN(t *testing.T) {
	ctx := context.Background()
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 8})
	if err := b.AcquireN(ctx, 5); err != nil {
		t.Fatal(err)
	}
	checkState(t, b, 5, 0)
	if b.TryAcquireN(4) {
		t.Fatal("TryAcquireN(4) with 3 free")
	}
	if !b.TryAcquireN(3) {
		t.Fatal("TryAcquireN(3) with 3 free")
	}
	if b.TryAcquire() || b.Acquire(ctx) == nil {
		t.Fatal("acquired a full bulkhead")
	}
	b.ReleaseN(3)
	b.ReleaseN(5)
	checkState(t, b, 0, 0)
	// Permits taken singly may be given back together, and the other way.
	for range 4 {
		inGoroutine(func() { _ = b.Acquire(ctx) })
	}
	b.ReleaseN(4)
	_ = b.AcquireN(ctx, 2)
	inGoroutine(b.Release)
	inGoroutine(b.Release)
	checkState(t, b, 0, 0)
	if s := b.Snapshot(); s.Acquired != 7 || s.Rejected != 3 {
		t.Fatalf("snapshot %+v; want 7 acquired (AcquireN counts once), 3 rejected", s)
	}
}

func TestAcquireNErrors(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	b := mustNew(t, bulkhead.Config{Name: "db", MaxConcurrent: 4, MaxWait: -1, Listener: rec})
	for _, n := range []int{0, -1} {
		if err := b.AcquireN(ctx, n); !errors.Is(err, bulkhead.ErrInvalidN) {
			t.Fatalf("AcquireN(%d) = %v, want ErrInvalidN", n, err)
		}
		if b.TryAcquireN(n) {
			t.Fatalf("TryAcquireN(%d) = true", n)
		}
	}
	// More than the limit fails at once, even with MaxWait -1, and never
	// blocks the others.
	err := b.AcquireN(ctx, 5)
	if !errors.Is(err, bulkhead.ErrTooMany) || !watertight.IsRejection(err) || watertight.IsSaturation(err) {
		t.Fatalf("AcquireN(5) of 4 = %v, want ErrTooMany, a rejection but not a saturation", err)
	}
	if b.TryAcquireN(5) {
		t.Fatal("TryAcquireN(5) of 4")
	}
	if !b.TryAcquireN(4) {
		t.Fatal("TryAcquireN(4) of 4 after the refusals")
	}
	b.ReleaseN(4)
	checkState(t, b, 0, 0)
	if s := b.Snapshot(); s.Rejected != 2 || s.Acquired != 1 {
		t.Fatalf("snapshot %+v; want 2 rejected (ErrInvalidN counts nothing), 1 acquired", s)
	}
	checkEvents(t, rec.take(),
		`rejected bulkhead/db/ "more permits asked for than MaxConcurrent" err=bulkhead: db: more permits asked for than MaxConcurrent`,
		`rejected bulkhead/db/ "more permits asked for than MaxConcurrent" err=bulkhead: db: more permits asked for than MaxConcurrent`,
		`acquired bulkhead/db/ "" permits=4`,
		`released bulkhead/db/ "" permits=4`)
	for _, n := range []int{0, -2} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ReleaseN(%d) did not panic", n)
				}
			}()
			b.ReleaseN(n)
		}()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("ReleaseN(2) with none held did not panic")
			}
		}()
		b.ReleaseN(2)
	}()
}

// A large waiter at the head is not starved by small newcomers: permits
// given back are gathered for it, and a newcomer for one permit queues
// behind it (strict FIFO). One large release then wakes every waiter it can
// satisfy.
func TestLargeWaiterNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 4, MaxWait: -1})
		ctx := context.Background()
		for range 4 {
			inGoroutine(func() { _ = b.Acquire(ctx) })
		}
		big := acquireN(ctx, b, 3)
		pending(t, "AcquireN(3)", big)
		inGoroutine(b.Release) // one free: gathered for the head
		checkState(t, b, 3, 1)
		if s := b.Snapshot(); s.Reserved != 1 || s.Available != 0 {
			t.Fatalf("snapshot %+v; want 1 reserved for the head, none available", s)
		}
		if b.TryAcquire() {
			t.Fatal("a newcomer took a permit gathered for the waiter at the head")
		}
		small := acquireN(ctx, b, 1)
		pending(t, "Acquire behind the large waiter", small)
		inGoroutine(b.Release)
		pending(t, "AcquireN(3) with 2 gathered", big)
		pending(t, "Acquire behind the large waiter", small)
		inGoroutine(b.Release)
		synctest.Wait()
		if err := result(t, "AcquireN(3)", big); err != nil {
			t.Fatal(err)
		}
		pending(t, "Acquire behind the large waiter", small)
		checkState(t, b, 4, 1)

		// Three waiters for 1, 1 and 2; one ReleaseN(3) wakes the first two
		// and gathers one permit for the third.
		w2 := acquireN(ctx, b, 1)
		w3 := acquireN(ctx, b, 2)
		b.ReleaseN(3)
		synctest.Wait()
		if err := result(t, "first", small); err != nil {
			t.Fatal(err)
		}
		if err := result(t, "second", w2); err != nil {
			t.Fatal(err)
		}
		pending(t, "third", w3)
		if s := b.Snapshot(); s.Active != 3 || s.Reserved != 1 || s.Waiting != 1 {
			t.Fatalf("snapshot %+v", s)
		}
		b.ReleaseN(3)
		synctest.Wait()
		if err := result(t, "third", w3); err != nil {
			t.Fatal(err)
		}
		b.ReleaseN(2)
		checkState(t, b, 0, 0)
	})
}

// A waiter for n permits that gives up passes the permits gathered for it
// on to the next waiter, or back to the bulkhead.
func TestLargeWaiterGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 3, MaxWait: time.Second})
		ctx := context.Background()
		_ = b.AcquireN(ctx, 3)
		cctx, cancel := context.WithCancel(ctx)
		big := acquireN(cctx, b, 3)
		small := acquireN(ctx, b, 1)
		b.Release() // gathered for big
		pending(t, "AcquireN(3)", big)
		pending(t, "Acquire", small)
		cancel()
		synctest.Wait()
		if err := result(t, "AcquireN(3)", big); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled AcquireN = %v", err)
		}
		if err := result(t, "Acquire", small); err != nil {
			t.Fatalf("Acquire behind the waiter that gave up = %v, want the permit gathered", err)
		}
		checkState(t, b, 3, 0)
		// A large waiter whose MaxWait runs out gives back what it gathered.
		big = acquireN(ctx, b, 2)
		b.Release()
		if s := b.Snapshot(); s.Reserved != 1 {
			t.Fatalf("snapshot %+v, want 1 reserved", s)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if err := result(t, "AcquireN(2)", big); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("AcquireN after MaxWait = %v, want ErrFull", err)
		}
		checkState(t, b, 2, 0)
		if !b.TryAcquire() {
			t.Fatal("the permit gathered for the waiter that left was not given back")
		}
		b.ReleaseN(3)
		checkState(t, b, 0, 0)
	})
}

// Lowering the limit below a queued waiter's n turns it away with
// ErrTooMany, and the waiters behind it move up.
func TestLowerBelowWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 6, MaxWait: -1})
		ctx := context.Background()
		_ = b.AcquireN(ctx, 4)
		big := acquireN(ctx, b, 5)
		small := acquireN(ctx, b, 2)
		pending(t, "AcquireN(5)", big)
		if err := b.SetMaxConcurrent(4); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := result(t, "AcquireN(5)", big); !errors.Is(err, bulkhead.ErrTooMany) {
			t.Fatalf("AcquireN(5) after lowering to 4 = %v, want ErrTooMany", err)
		}
		pending(t, "AcquireN(2)", small) // 4 held of 4
		b.ReleaseN(2)
		synctest.Wait()
		if err := result(t, "AcquireN(2)", small); err != nil {
			t.Fatal(err)
		}
		b.ReleaseN(4)
		checkState(t, b, 0, 0)
	})
}

// A full waiting room turns a newcomer away at once with ErrFull; a slot
// freed is used again.
func TestWaitingRoomOldestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		b := mustNew(t, bulkhead.Config{Name: "db", MaxConcurrent: 1, MaxWait: -1, MaxWaiters: 2, Listener: rec})
		ctx := context.Background()
		_ = b.Acquire(ctx)
		w1 := acquireN(ctx, b, 1)
		w2 := acquireN(ctx, b, 1)
		start := time.Now()
		if err := b.Acquire(ctx); !errors.Is(err, bulkhead.ErrFull) || !watertight.IsSaturation(err) {
			t.Fatalf("Acquire into a full waiting room = %v, want ErrFull", err)
		}
		if time.Since(start) != 0 {
			t.Fatal("Acquire into a full waiting room waited")
		}
		checkState(t, b, 1, 2)
		b.Release() // w1 in: a slot is free
		synctest.Wait()
		if err := result(t, "first waiter", w1); err != nil {
			t.Fatal(err)
		}
		w3 := acquireN(ctx, b, 1)
		checkState(t, b, 1, 2)
		b.Release()
		b.Release()
		b.Release()
		synctest.Wait()
		if err := result(t, "second waiter", w2); err != nil {
			t.Fatal(err)
		}
		if err := result(t, "third waiter", w3); err != nil {
			t.Fatal(err)
		}
		checkState(t, b, 0, 0)
		if s := b.Snapshot(); s.Rejected != 1 || s.Acquired != 4 {
			t.Fatalf("snapshot %+v", s)
		}
		var full []string
		for _, e := range rec.take() {
			if strings.HasPrefix(e, "bulkhead_full") {
				full = append(full, e)
			}
		}
		checkEvents(t, full, `bulkhead_full bulkhead/db/ "no permit free and the waiting room full" err=bulkhead: db: full`)
	})
}

// Newest first: the newest waiter is served first, and a newcomer that finds
// the room full evicts the oldest, which fails with ErrFull.
func TestWaitingRoomNewestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1, MaxWaiters: 2, QueueOrder: bulkhead.NewestFirst})
		ctx := context.Background()
		_ = b.Acquire(ctx)
		w1 := acquireN(ctx, b, 1)
		w2 := acquireN(ctx, b, 1)
		w3 := acquireN(ctx, b, 1) // evicts w1
		if err := result(t, "oldest waiter", w1); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("oldest waiter = %v, want ErrFull", err)
		}
		checkState(t, b, 1, 2)
		b.Release()
		synctest.Wait()
		if err := result(t, "newest waiter", w3); err != nil {
			t.Fatal(err)
		}
		pending(t, "second waiter", w2)
		w4 := acquireN(ctx, b, 1) // the room has a free slot: nobody is evicted
		pending(t, "second waiter", w2)
		b.Release()
		synctest.Wait()
		if err := result(t, "fourth waiter", w4); err != nil {
			t.Fatal(err)
		}
		b.Release()
		synctest.Wait()
		if err := result(t, "second waiter", w2); err != nil {
			t.Fatal(err)
		}
		b.Release()
		checkState(t, b, 0, 0)
		if s := b.Snapshot(); s.Rejected != 1 || s.Acquired != 4 {
			t.Fatalf("snapshot %+v", s)
		}
	})
}

func TestWaitingRoomDefaultAndReconfigure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1})
		ctx, cancel := context.WithCancel(context.Background())
		_ = b.Acquire(ctx)
		for range bulkhead.DefaultMaxWaiters {
			go func() { _ = b.Acquire(ctx) }()
		}
		synctest.Wait()
		checkState(t, b, 1, bulkhead.DefaultMaxWaiters)
		if err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Acquire into the full default room = %v", err)
		}
		if err := b.Reconfigure(bulkhead.Config{MaxConcurrent: 1, MaxWait: -1, MaxWaiters: -1}); err != nil {
			t.Fatal(err)
		}
		extra := acquireN(ctx, b, 1)
		pending(t, "a waiter in an unbounded room", extra)
		checkState(t, b, 1, bulkhead.DefaultMaxWaiters+1)
		b.SetMaxWaiters(1) // lowered: those waiting keep their places
		checkState(t, b, 1, bulkhead.DefaultMaxWaiters+1)
		if err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Acquire into a lowered room = %v", err)
		}
		cancel()
		synctest.Wait()
		checkState(t, b, 1, 0)
		b.Release()
	})
	if _, err := bulkhead.New(bulkhead.Config{QueueOrder: 2}); err == nil || !strings.Contains(err.Error(), "QueueOrder") {
		t.Fatalf("New with QueueOrder 2 = %v, want an error naming QueueOrder", err)
	}
	if bulkhead.NewestFirst.String() != "newest_first" || bulkhead.OldestFirst.String() != "oldest_first" {
		t.Fatal("QueueOrder.String")
	}
}

func TestAcquireNAllocs(t *testing.T) {
	ctx := context.Background()
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 8})
	if n := testing.AllocsPerRun(1000, func() {
		_ = b.AcquireN(ctx, 1)
		b.ReleaseN(1)
	}); n != 0 {
		t.Errorf("AcquireN(1)+ReleaseN(1) allocates %v times", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		_ = b.AcquireN(ctx, 4)
		b.ReleaseN(4)
	}); n != 0 {
		t.Errorf("AcquireN(4)+ReleaseN(4) allocates %v times", n)
	}
	named := mustNew(t, bulkhead.Config{Name: "x", MaxConcurrent: 2})
	if n := testing.AllocsPerRun(1000, func() { _ = named.AcquireN(ctx, 3) }); n != 0 {
		t.Errorf("ErrTooMany allocates %v times", n)
	}
}

// TestWeightedStress runs goroutines that take 1 to 3 permits at once
// (AcquireN, TryAcquireN, Acquire, with waits that time out or are
// cancelled) while another resizes the bulkhead between 4 and 8 permits.
// The permits held never exceed the largest limit, and exactly MaxConcurrent
// once no resize runs; every call is counted once and everything drains.
func TestWeightedStress(t *testing.T) {
	for _, order := range []bulkhead.QueueOrder{bulkhead.OldestFirst, bulkhead.NewestFirst} {
		t.Run(order.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const workers, ops = 16, 150
				b := mustNew(t, bulkhead.Config{MaxConcurrent: 8, MaxWait: 2 * time.Millisecond, MaxWaiters: 6, QueueOrder: order})
				var inflight, peak, ok, failed atomic.Int64
				var wg sync.WaitGroup
				stop := make(chan struct{})
				resized := make(chan struct{})
				go func() {
					defer close(resized)
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						case <-time.After(300 * time.Microsecond):
						}
						if err := b.SetMaxConcurrent(4 + 4*(i%2)); err != nil {
							t.Error(err)
						}
					}
				}()
				for w := range workers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(w), uint64(order)))
						for range ops {
							n := 1 + rng.IntN(3)
							var err error
							switch rng.IntN(4) {
							case 0:
								if !b.TryAcquireN(n) {
									err = bulkhead.ErrFull
								}
							case 1:
								ctx, cancel := context.WithCancel(context.Background())
								go func() { runtime.Gosched(); cancel() }()
								err = b.AcquireN(ctx, n)
								cancel()
							case 2:
								n = 1
								err = b.Acquire(context.Background())
							default:
								err = b.AcquireN(context.Background(), n)
							}
							if err != nil {
								if !errors.Is(err, bulkhead.ErrFull) && !errors.Is(err, context.Canceled) && !errors.Is(err, bulkhead.ErrTooMany) {
									t.Errorf("AcquireN(%d): %v", n, err)
								}
								failed.Add(1)
								continue
							}
							recordPeak(&peak, inflight.Add(int64(n)))
							time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
							inflight.Add(-int64(n))
							ok.Add(1)
							b.ReleaseN(n)
						}
					})
				}
				wg.Wait()
				close(stop)
				<-resized
				synctest.Wait()
				s := b.Snapshot()
				if p := peak.Load(); p > 8 || p == 0 {
					t.Fatalf("peak permits held = %d, want 1..8", p)
				}
				if s.Active != 0 || s.Waiting != 0 || s.Reserved != 0 {
					t.Fatalf("after the run: %+v; want every permit back", s)
				}
				if got := s.Acquired + s.Rejected + s.Canceled; got != workers*ops || s.Acquired != uint64(ok.Load()) {
					t.Fatalf("snapshot %+v; seen %d acquired, %d failed", s, ok.Load(), failed.Load())
				}
				if err := b.SetMaxConcurrent(3); err != nil {
					t.Fatal(err)
				}
				if !b.TryAcquireN(3) || b.TryAcquire() {
					t.Fatalf("after the run, a limit of 3: %+v", b.Snapshot())
				}
				b.ReleaseN(3)
				t.Logf("peak %d, acquired %d, rejected %d, canceled %d", peak.Load(), s.Acquired, s.Rejected, s.Canceled)
			})
		})
	}
}
