package bulkhead_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/bulkhead"
	"pgregory.net/rapid"
)

// inGoroutine runs f in a goroutine of its own and waits for it, so that
// successive calls land on different stacks and so in different cells.
func inGoroutine(f func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	<-done
}

// TestResizeModel runs random sequences of tries, releases, queued waits,
// cancelled waits and resizes against a model: a counter of permits held, a
// limit and a FIFO queue. After every step it checks exactly which waiters
// were granted (so a grant is made only while fewer than the limit are held,
// and in queue order) and that the Snapshot agrees (no permit lost).
func TestResizeModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rapid.Check(bubbleTB{t}, func(rt *rapid.T) {
			limit := rapid.IntRange(1, 16).Draw(rt, "limit")
			b := mustNew(t, bulkhead.Config{MaxConcurrent: limit, MaxWait: -1})
			type waiter struct {
				errc   chan error
				cancel context.CancelFunc
			}
			var queue []waiter
			held := 0

			// granted checks that exactly the waiters the model grants got
			// their permit: the oldest, while fewer than limit are held.
			granted := func(rt *rapid.T) {
				synctest.Wait()
				for len(queue) > 0 && held < limit {
					w := queue[0]
					queue = queue[1:]
					select {
					case err := <-w.errc:
						if err != nil {
							rt.Fatalf("queued Acquire = %v, want a permit (%d of %d held)", err, held, limit)
						}
					default:
						rt.Fatalf("the oldest waiter has no permit with %d of %d held", held, limit)
					}
					w.cancel()
					held++
				}
				for i, w := range queue {
					select {
					case err := <-w.errc:
						rt.Fatalf("waiter %d of %d ended with %v while %d of %d are held", i, len(queue), err, held, limit)
					default:
					}
				}
			}

			rt.Repeat(map[string]func(*rapid.T){
				"try": func(rt *rapid.T) {
					var ok bool
					inGoroutine(func() { ok = b.TryAcquire() })
					if want := len(queue) == 0 && held < limit; ok != want {
						rt.Fatalf("TryAcquire = %v with %d of %d held and %d queued", ok, held, limit, len(queue))
					}
					if ok {
						held++
					}
				},
				"release": func(rt *rapid.T) {
					if held == 0 {
						rt.Skip("nothing held")
					}
					inGoroutine(b.Release)
					held--
					granted(rt)
				},
				"wait": func(rt *rapid.T) {
					ctx, cancel := context.WithCancel(context.Background())
					w := waiter{errc: make(chan error, 1), cancel: cancel}
					go func() { w.errc <- b.Acquire(ctx) }()
					queue = append(queue, w)
					granted(rt) // a free permit goes to it at once
				},
				"cancel": func(rt *rapid.T) {
					if len(queue) == 0 {
						rt.Skip("nobody waits")
					}
					i := rapid.IntRange(0, len(queue)-1).Draw(rt, "waiter")
					w := queue[i]
					queue = append(queue[:i:i], queue[i+1:]...)
					w.cancel()
					if err := <-w.errc; !errors.Is(err, context.Canceled) {
						rt.Fatalf("cancelled wait = %v", err)
					}
					granted(rt)
				},
				"resize": func(rt *rapid.T) {
					n := rapid.IntRange(1, 16).Draw(rt, "n")
					if err := b.SetMaxConcurrent(n); err != nil {
						rt.Fatal(err)
					}
					limit = n
					granted(rt)
				},
				"": func(rt *rapid.T) {
					s := b.Snapshot()
					if s.Active != held || s.Waiting != len(queue) || s.MaxConcurrent != limit ||
						s.Available != max(0, limit-held) {
						rt.Fatalf("Snapshot %+v; model: %d of %d held, %d queued", s, held, limit, len(queue))
					}
				},
			})
			for _, w := range queue {
				w.cancel()
				<-w.errc
			}
			for ; held > 0; held-- {
				b.Release()
			}
			if s := b.Snapshot(); s.Active != 0 || s.Waiting != 0 {
				rt.Fatalf("after releasing everything: %+v", s)
			}
		})
	})
}

// bubbleTB hides the *testing.T from rapid, which asks a *testing.T for its
// Deadline: a call a synctest bubble forbids.
type bubbleTB struct{ *testing.T }

// hold takes n permits, each from a goroutine of its own (so in several
// cells), and returns a function that gives back m of them.
func hold(t *testing.T, b *bulkhead.Bulkhead, n int) (release func(m int)) {
	t.Helper()
	for range n {
		var ok bool
		inGoroutine(func() { ok = b.TryAcquire() })
		if !ok {
			t.Fatalf("TryAcquire failed with %+v", b.Snapshot())
		}
	}
	return func(m int) {
		for range m {
			inGoroutine(b.Release)
		}
	}
}

// tryMany calls TryAcquire from n goroutines and returns how many got a
// permit.
func tryMany(b *bulkhead.Bulkhead, n int) int {
	var got atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if b.TryAcquire() {
				got.Add(1)
			}
		})
	}
	wg.Wait()
	return int(got.Load())
}

// TestLowerKeepsHolders: lowering the limit takes no permit back, and no
// permit is granted until fewer than the new limit are held, whichever
// cells the holders and the newcomers are in.
func TestLowerKeepsHolders(t *testing.T) {
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 16})
	release := hold(t, b, 16)
	if err := b.SetMaxConcurrent(4); err != nil {
		t.Fatal(err)
	}
	if s := b.Snapshot(); s.Active != 16 || s.Available != 0 || s.MaxConcurrent != 4 {
		t.Fatalf("after lowering to 4 with 16 held: %+v", s)
	}
	for held := 15; held >= 4; held-- {
		release(1)
		if got := tryMany(b, 8); got != 0 {
			t.Fatalf("%d of 8 TryAcquire got a permit with %d held under a limit of 4", got, held)
		}
	}
	release(1) // 3 held
	if got := tryMany(b, 8); got != 1 {
		t.Fatalf("%d of 8 TryAcquire got a permit with 3 held under a limit of 4, want 1", got)
	}
	release(4)
	if got := tryMany(b, 8); got != 4 {
		t.Fatalf("%d of 8 TryAcquire got a permit from an empty bulkhead of 4, want 4", got)
	}
	release(4)
	checkState(t, b, 0, 0)
}

// TestRaiseAdmitsWaiters: raising the limit hands the new permits to the
// queued waiters at once, oldest first.
func TestRaiseAdmitsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 2, MaxWait: time.Minute})
		release := hold(t, b, 2)
		order := make(chan int, 3)
		for i := range 3 {
			go func() {
				if err := b.Acquire(context.Background()); err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				order <- i
			}()
			synctest.Wait() // queued in order
		}
		checkState(t, b, 2, 3)
		if err := b.SetMaxConcurrent(4); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if a, c := <-order, <-order; a+c != 1 { // granted together: in any order
			t.Fatalf("granted %d and %d, want the two oldest, 0 and 1", a, c)
		}
		checkState(t, b, 4, 1)
		release(1)
		if got := <-order; got != 2 {
			t.Fatalf("granted %d, want 2", got)
		}
		release(4)
		checkState(t, b, 0, 0)
	})
}

// TestSetMaxWait: a new MaxWait applies to callers that start waiting after
// it.
func TestSetMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1})
		release := hold(t, b, 1)
		if err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Acquire without MaxWait = %v, want ErrFull at once", err)
		}
		b.SetMaxWait(time.Second)
		start := time.Now()
		if err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Acquire = %v, want ErrFull after MaxWait", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("waited %v, want the new MaxWait, 1s", d)
		}
		release(1)
	})
}

// TestReconfigure validates as New does and applies both fields.
func TestReconfigure(t *testing.T) {
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 3})
	for _, n := range []int{-1, bulkhead.MaxConcurrentLimit + 1} {
		if err := b.Reconfigure(bulkhead.Config{MaxConcurrent: n}); err == nil {
			t.Fatalf("Reconfigure(MaxConcurrent %d) = nil, want an error", n)
		}
		if err := b.SetMaxConcurrent(n); err == nil {
			t.Fatalf("SetMaxConcurrent(%d) = nil, want an error", n)
		}
	}
	if s := b.Snapshot(); s.MaxConcurrent != 3 {
		t.Fatalf("a refused Reconfigure changed MaxConcurrent to %d", s.MaxConcurrent)
	}
	if err := b.Reconfigure(bulkhead.Config{}); err != nil {
		t.Fatal(err)
	}
	if s := b.Snapshot(); s.MaxConcurrent != bulkhead.DefaultMaxConcurrent {
		t.Fatalf("Reconfigure(zero MaxConcurrent) set %d, want the default %d", s.MaxConcurrent, bulkhead.DefaultMaxConcurrent)
	}
	var zero bulkhead.Bulkhead
	if err := zero.SetMaxConcurrent(3); err == nil {
		t.Fatal("SetMaxConcurrent on a zero Bulkhead = nil, want an error")
	}
}

// TestResizeCountsKept: a resize counts no acquisition.
func TestResizeCountsKept(t *testing.T) {
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 8})
	release := hold(t, b, 8)
	for _, n := range []int{2, 5, 1, 8, 3} {
		if err := b.SetMaxConcurrent(n); err != nil {
			t.Fatal(err)
		}
	}
	release(8)
	if s := b.Snapshot(); s.Acquired != 8 || s.Active != 0 {
		t.Fatalf("Snapshot %+v, want 8 acquired and none active", s)
	}
}

// TestResizeStress resizes while goroutines take and give back permits, and
// checks that no permit is lost or made: at the end the bulkhead is empty
// and gives exactly its limit.
func TestResizeStress(t *testing.T) {
	b := mustNew(t, bulkhead.Config{MaxConcurrent: 8, MaxWait: time.Millisecond})
	var peak atomic.Int64
	var inUse atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if b.Acquire(context.Background()) == nil {
					recordPeak(&peak, inUse.Add(1))
					inUse.Add(-1)
					b.Release()
				}
			}
		})
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		if err := b.SetMaxConcurrent(1 + r.IntN(12)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if err := b.SetMaxConcurrent(5); err != nil {
		t.Fatal(err)
	}
	checkState(t, b, 0, 0)
	if got := tryMany(b, 10); got != 5 {
		t.Fatalf("%d permits from an empty bulkhead of 5", got)
	}
	if p := peak.Load(); p > 12 {
		t.Fatalf("%d in use at once, above every limit set", p)
	}
}

// Pool.SetWorkers: raising starts queued tasks at once, oldest first;
// lowering stops no task, and no queued task starts until fewer than the new
// count run; idle workers above the count exit.
func TestPoolSetWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1, QueueSize: 10})
		var running, peak atomic.Int64
		var order []int
		var mu sync.Mutex
		gates := make([]gate, 6)
		for i := range gates {
			gates[i] = make(gate)
			if err := p.Submit(context.Background(), func(ctx context.Context) {
				recordPeak(&peak, running.Add(1))
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				gates[i].wait(ctx)
				running.Add(-1)
			}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if running.Load() != 1 {
			t.Fatalf("%d running with 1 worker", running.Load())
		}
		if err := p.SetWorkers(3); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if running.Load() != 3 || !slices.Equal(order, []int{0, 1, 2}) {
			t.Fatalf("after raising to 3: %d running, started %v; want 3, [0 1 2]", running.Load(), order)
		}
		if err := p.SetWorkers(1); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{0, 1} { // two end: their workers exit
			close(gates[i])
			synctest.Wait()
			if len(order) != 3 {
				t.Fatalf("a queued task started with %d running under 1 worker", running.Load()+1)
			}
		}
		close(gates[2]) // none runs now: the one worker left takes task 3
		synctest.Wait()
		if running.Load() != 1 || !slices.Equal(order, []int{0, 1, 2, 3}) {
			t.Fatalf("%d running, started %v", running.Load(), order)
		}
		for _, i := range []int{3, 4, 5} {
			close(gates[i])
			synctest.Wait()
		}
		if s := p.Snapshot(); s.Workers != 1 || s.Busy != 0 || s.Queued != 0 || peak.Load() != 3 {
			t.Fatalf("Snapshot %+v, peak %d", s, peak.Load())
		}
		if err := p.SetWorkers(-1); err == nil {
			t.Fatal("SetWorkers(-1) = nil")
		}
		shutdown(t, p)
		if err := p.SetWorkers(2); !errors.Is(err, bulkhead.ErrClosed) {
			t.Fatalf("SetWorkers after Shutdown = %v, want ErrClosed", err)
		}
	})
}

// Lowering a pool of idle workers: the workers above the count exit, so
// with no queue a second task at once is refused.
func TestPoolSetWorkersIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 4, QueueSize: -1})
		synctest.Wait()
		if err := p.SetWorkers(1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		g := make(gate)
		if err := p.Submit(context.Background(), g.wait); err != nil {
			t.Fatal(err)
		}
		if err := p.Submit(context.Background(), g.wait); !errors.Is(err, bulkhead.ErrQueueFull) {
			t.Fatalf("second task with 1 worker and no queue: %v, want ErrQueueFull", err)
		}
		close(g)
		synctest.Wait()
		shutdown(t, p)
	})
}
