package bulkhead_test

import (
	"context"
	"errors"
	"testing"

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
				err := b.Acquire(ctx)
				switch {
				case held < limit && err == nil:
					held++
					acquired++
				case held == limit && errors.Is(err, context.Canceled):
					canceled++
				default:
					rt.Fatalf("Acquire with a done context = %v with %d of %d held", err, held, limit)
				}
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
