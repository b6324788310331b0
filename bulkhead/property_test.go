package bulkhead_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"pgregory.net/rapid"
)

// TestModel runs random sequences of acquire, try, release, cancelled and
// granted waits against a counter model of the bulkhead.
func TestModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.IntRange(1, 5).Draw(rt, "limit")
		b := mustNew(t, bulkhead.Config{MaxConcurrent: limit, MaxWait: -1})
		var held int
		var acquired, rejected, canceled uint64

		// wait starts an Acquire that must queue, and returns its result
		// channel once it is queued.
		wait := func(ctx context.Context) chan error {
			errc := make(chan error, 1)
			go func() { errc <- b.Acquire(ctx) }()
			waitFor(rt, "the waiter to queue", func() bool { return b.Snapshot().Waiting == 1 })
			return errc
		}

		rt.Repeat(map[string]func(*rapid.T){
			"try": func(rt *rapid.T) {
				ok := b.TryAcquire()
				if want := held < limit; ok != want {
					rt.Fatalf("TryAcquire = %v with %d of %d held", ok, held, limit)
				}
				if ok {
					held++
					acquired++
				} else {
					rejected++
				}
			},
			"acquire": func(rt *rapid.T) {
				if held == limit {
					rt.Skip("would wait")
				}
				if err := b.Acquire(context.Background()); err != nil {
					rt.Fatalf("Acquire with a free permit = %v", err)
				}
				held++
				acquired++
			},
			"acquire with done context": func(rt *rapid.T) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				// It fails even with a permit free (x/sync's rule).
				if err := b.Acquire(ctx); !errors.Is(err, context.Canceled) {
					rt.Fatalf("Acquire with a done context = %v with %d of %d held", err, held, limit)
				}
				canceled++
			},
			"release": func(rt *rapid.T) {
				if held == 0 {
					rt.Skip("nothing held")
				}
				b.Release()
				held--
			},
			"cancelled wait": func(rt *rapid.T) {
				if held < limit {
					rt.Skip("would not wait")
				}
				ctx, cancel := context.WithCancel(context.Background())
				errc := wait(ctx)
				cancel()
				if err := <-errc; !errors.Is(err, context.Canceled) {
					rt.Fatalf("cancelled wait = %v", err)
				}
				canceled++
			},
			"granted wait": func(rt *rapid.T) {
				if held < limit {
					rt.Skip("would not wait")
				}
				errc := wait(context.Background())
				b.Release() // handed to the waiter: held stays the same
				if err := <-errc; err != nil {
					rt.Fatalf("granted wait = %v", err)
				}
				acquired++
			},
			"": func(rt *rapid.T) {
				s := b.Snapshot()
				if s.Active != held || s.Waiting != 0 || s.Available != limit-held ||
					s.Acquired != acquired || s.Rejected != rejected || s.Canceled != canceled {
					rt.Fatalf("Snapshot %+v; model held %d, acquired %d, rejected %d, canceled %d",
						s, held, acquired, rejected, canceled)
				}
			},
		})
		for ; held > 0; held-- {
			b.Release()
		}
	})
}

// TestWeightedModel runs random sequences of weighted tries, acquires and
// releases, queued waits, cancelled waits, acquires with a done context and
// resizes against a model: the permits held, the limit, a bounded waiting
// room served in QueueOrder, and the permits gathered for the waiter at its
// head. After every step it checks exactly which waiters were granted, turned
// away or still wait (so grants keep the limit and the order: a small
// newcomer never overtakes a large waiter at the head), and that the
// Snapshot agrees.
func TestWeightedModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rapid.Check(bubbleTB{t}, func(rt *rapid.T) {
			limit := rapid.IntRange(1, 8).Draw(rt, "limit")
			room := rapid.SampledFrom([]int{-1, 1, 2, 3}).Draw(rt, "MaxWaiters")
			order := rapid.SampledFrom([]bulkhead.QueueOrder{bulkhead.OldestFirst, bulkhead.NewestFirst}).Draw(rt, "QueueOrder")
			b := mustNew(t, bulkhead.Config{MaxConcurrent: limit, MaxWait: -1, MaxWaiters: room, QueueOrder: order})
			type waiter struct {
				n      int
				errc   chan error
				cancel context.CancelFunc
			}
			var (
				queue                        []waiter // the next to serve first
				held                         []int    // the weights held
				heldSum, reserve             int
				acquired, rejected, canceled uint64
			)
			free := func() int { return max(0, limit-heldSum-reserve) }
			// expect checks that w ended with an error matching want (nil:
			// granted).
			expect := func(rt *rapid.T, what string, w waiter, want error) {
				select {
				case err := <-w.errc:
					if (want == nil) != (err == nil) || want != nil && !errors.Is(err, want) {
						rt.Fatalf("%s: waiter for %d = %v, want %v", what, w.n, err, want)
					}
				default:
					rt.Fatalf("%s: waiter for %d still waits, want %v", what, w.n, want)
				}
				w.cancel()
			}
			// handoff serves the queue as the bulkhead must, and checks that
			// exactly those waiters were granted.
			handoff := func(rt *rapid.T) {
				synctest.Wait()
				for len(queue) > 0 {
					h := queue[0]
					reserve += min(h.n-reserve, free())
					if reserve < h.n {
						break
					}
					reserve -= h.n
					queue = queue[1:]
					expect(rt, "handoff", h, nil)
					held = append(held, h.n)
					heldSum += h.n
					acquired++
				}
				if len(queue) == 0 {
					reserve = 0
				}
				for i, w := range queue {
					select {
					case err := <-w.errc:
						rt.Fatalf("waiter %d of %d (for %d) ended with %v; %d held of %d", i, len(queue), w.n, err, heldSum, limit)
					default:
					}
				}
			}
			roomFull := func() bool { return room >= 0 && len(queue) >= room }

			rt.Repeat(map[string]func(*rapid.T){
				"try": func(rt *rapid.T) {
					n := rapid.IntRange(1, limit+1).Draw(rt, "n")
					var ok bool
					inGoroutine(func() { ok = b.TryAcquireN(n) })
					if want := n <= limit && len(queue) == 0 && heldSum+n <= limit; ok != want {
						rt.Fatalf("TryAcquireN(%d) = %v with %d of %d held, %d queued", n, ok, heldSum, limit, len(queue))
					}
					if ok {
						held = append(held, n)
						heldSum += n
						acquired++
					} else {
						rejected++
					}
				},
				"acquire": func(rt *rapid.T) {
					n := rapid.IntRange(1, limit+1).Draw(rt, "n")
					ctx, cancel := context.WithCancel(context.Background())
					w := waiter{n: n, errc: make(chan error, 1), cancel: cancel}
					go func() { w.errc <- b.AcquireN(ctx, n) }()
					synctest.Wait()
					switch {
					case n > limit:
						expect(rt, "too many", w, bulkhead.ErrTooMany)
						rejected++
						return
					case len(queue) == 0 && heldSum+n <= limit:
						expect(rt, "free", w, nil)
						held = append(held, n)
						heldSum += n
						acquired++
						return
					case roomFull() && order == bulkhead.OldestFirst:
						expect(rt, "room full", w, bulkhead.ErrFull)
						rejected++
						return
					case roomFull():
						oldest := queue[len(queue)-1]
						queue = queue[:len(queue)-1]
						expect(rt, "evicted", oldest, bulkhead.ErrFull)
						rejected++
					}
					if order == bulkhead.NewestFirst {
						queue = append([]waiter{w}, queue...)
					} else {
						queue = append(queue, w)
					}
					handoff(rt)
				},
				"done context": func(rt *rapid.T) {
					n := rapid.IntRange(1, limit).Draw(rt, "n")
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					if err := b.AcquireN(ctx, n); !errors.Is(err, context.Canceled) || watertight.Classify(ctx, err) != watertight.Ignored {
						rt.Fatalf("AcquireN with a done context = %v", err)
					}
					canceled++
				},
				"release": func(rt *rapid.T) {
					if len(held) == 0 {
						rt.Skip("nothing held")
					}
					i := rapid.IntRange(0, len(held)-1).Draw(rt, "holder")
					n := held[i]
					held = append(held[:i:i], held[i+1:]...)
					inGoroutine(func() { b.ReleaseN(n) })
					heldSum -= n
					handoff(rt)
				},
				"cancel": func(rt *rapid.T) {
					if len(queue) == 0 {
						rt.Skip("nobody waits")
					}
					i := rapid.IntRange(0, len(queue)-1).Draw(rt, "waiter")
					w := queue[i]
					queue = append(queue[:i:i], queue[i+1:]...)
					w.cancel()
					if err := <-w.errc; !errors.Is(err, context.Canceled) || errors.Is(err, bulkhead.ErrFull) {
						rt.Fatalf("cancelled wait = %v", err)
					}
					canceled++
					handoff(rt)
				},
				"resize": func(rt *rapid.T) {
					n := rapid.IntRange(1, 8).Draw(rt, "n")
					if err := b.SetMaxConcurrent(n); err != nil {
						rt.Fatal(err)
					}
					limit, reserve = n, 0
					synctest.Wait()
					var keep []waiter
					for _, w := range queue {
						if w.n > limit {
							expect(rt, "lowered", w, bulkhead.ErrTooMany)
							rejected++
						} else {
							keep = append(keep, w)
						}
					}
					queue = keep
					handoff(rt)
				},
				"": func(rt *rapid.T) {
					s := b.Snapshot()
					if s.Active != heldSum || s.Waiting != len(queue) || s.Reserved != reserve || s.MaxConcurrent != limit ||
						s.Available != max(0, limit-heldSum-reserve) ||
						s.Acquired != acquired || s.Rejected != rejected || s.Canceled != canceled {
						rt.Fatalf("Snapshot %+v; model: %d of %d held, %d reserved, %d queued, acquired %d, rejected %d, canceled %d",
							s, heldSum, limit, reserve, len(queue), acquired, rejected, canceled)
					}
				},
			})
			for _, w := range queue {
				w.cancel()
			}
			for _, w := range queue {
				if err := <-w.errc; err == nil { // granted as those before it left
					held = append(held, w.n)
				}
			}
			for _, n := range held {
				b.ReleaseN(n)
			}
			if s := b.Snapshot(); s.Active != 0 || s.Waiting != 0 || s.Reserved != 0 {
				rt.Fatalf("after releasing everything: %+v", s)
			}
		})
	})
}
