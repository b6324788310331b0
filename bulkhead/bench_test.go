package bulkhead_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
)

func newBench(b *testing.B, cfg bulkhead.Config) *bulkhead.Bulkhead {
	b.Helper()
	bh, err := bulkhead.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return bh
}

// BenchmarkAcquireRelease takes and gives back a permit that is always free:
// the fast path.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("sequential", func(b *testing.B) {
		bh := newBench(b, bulkhead.Config{MaxConcurrent: 1 << 20})
		b.ReportAllocs()
		for b.Loop() {
			if err := bh.Acquire(ctx); err != nil {
				b.Fatal(err)
			}
			bh.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		bh := newBench(b, bulkhead.Config{MaxConcurrent: 1 << 20})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := bh.Acquire(ctx); err != nil {
					b.Error(err)
					return
				}
				bh.Release()
			}
		})
	})
	b.Run("try/parallel", func(b *testing.B) {
		bh := newBench(b, bulkhead.Config{MaxConcurrent: 1 << 20})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !bh.TryAcquire() {
					b.Error("TryAcquire failed")
					return
				}
				bh.Release()
			}
		})
	})
}

// BenchmarkFull is the rejection of a full bulkhead that does not wait.
func BenchmarkFull(b *testing.B) {
	ctx := context.Background()
	full := func(b *testing.B) *bulkhead.Bulkhead {
		bh := newBench(b, bulkhead.Config{MaxConcurrent: 1})
		if !bh.TryAcquire() {
			b.Fatal("TryAcquire failed on an empty bulkhead")
		}
		b.Cleanup(bh.Release)
		return bh
	}
	b.Run("sequential", func(b *testing.B) {
		bh := full(b)
		b.ReportAllocs()
		for b.Loop() {
			if bh.Acquire(ctx) == nil {
				b.Fatal("acquired a full bulkhead")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		bh := full(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if bh.Acquire(ctx) == nil {
					b.Error("acquired a full bulkhead")
					return
				}
			}
		})
	})
}

// BenchmarkPipeline is watertight.Do through a pipeline holding only the
// bulkhead.
func BenchmarkPipeline(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	b.Run("sequential", func(b *testing.B) {
		p := watertight.MustNew(newBench(b, bulkhead.Config{MaxConcurrent: 1 << 20}))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := watertight.Do(ctx, p, fn); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		p := watertight.MustNew(newBench(b, bulkhead.Config{MaxConcurrent: 1 << 20}))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := watertight.Do(ctx, p, fn); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkFullListener is a refusal by a full bulkhead that sends an event
// to a listener that only counts.
func BenchmarkFullListener(b *testing.B) {
	var n atomic.Int64
	bh, err := bulkhead.New(bulkhead.Config{MaxConcurrent: 1, Listener: watertight.ListenerFunc(func(watertight.Event) { n.Add(1) })})
	if err != nil {
		b.Fatal(err)
	}
	_ = bh.Acquire(context.Background())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if bh.TryAcquire() {
				b.Error("admitted")
				return
			}
		}
	})
	bh.Release()
}

// BenchmarkFullStriped is the rejection of a full bulkhead that does not
// wait, with its permits striped over eight cells (BenchmarkFull has one).
func BenchmarkFullStriped(b *testing.B) {
	ctx := context.Background()
	full := func(b *testing.B) *bulkhead.Bulkhead {
		bh := newBench(b, bulkhead.Config{MaxConcurrent: 8})
		for range 8 {
			if !bh.TryAcquire() {
				b.Fatal("TryAcquire failed on a bulkhead not full")
			}
		}
		b.Cleanup(func() {
			for range 8 {
				bh.Release()
			}
		})
		return bh
	}
	b.Run("sequential", func(b *testing.B) {
		bh := full(b)
		b.ReportAllocs()
		for b.Loop() {
			if bh.Acquire(ctx) == nil {
				b.Fatal("acquired a full bulkhead")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		bh := full(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if bh.TryAcquire() {
					b.Error("acquired a full bulkhead")
					return
				}
			}
		})
	})
}

// BenchmarkEnterExit is the Policy form on the fast path: Exit gives the
// permit back to the cell named by Enter's ticket.
func BenchmarkEnterExit(b *testing.B) {
	ctx := context.Background()
	bh := newBench(b, bulkhead.Config{MaxConcurrent: 1 << 20})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, tk, err := bh.Enter(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			_ = bh.Exit(c, tk, nil)
		}
	})
}

// BenchmarkAcquireN takes and gives back weighted permits that are always
// free: AcquireN(1) is the fast path of Acquire, AcquireN(4) gathers its
// permits under the bulkhead's mutex.
func BenchmarkAcquireN(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("n=%d/sequential", n), func(b *testing.B) {
			bh := newBench(b, bulkhead.Config{MaxConcurrent: 1 << 20})
			b.ReportAllocs()
			for b.Loop() {
				if err := bh.AcquireN(ctx, n); err != nil {
					b.Fatal(err)
				}
				bh.ReleaseN(n)
			}
		})
		b.Run(fmt.Sprintf("n=%d/parallel", n), func(b *testing.B) {
			bh := newBench(b, bulkhead.Config{MaxConcurrent: 1 << 20})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := bh.AcquireN(ctx, n); err != nil {
						b.Error(err)
						return
					}
					bh.ReleaseN(n)
				}
			})
		})
	}
}

// BenchmarkAcquireCancelCtx is Acquire and Release with a context that can
// be cancelled (and is not): the fast path's ctx.Err() is then an atomic
// load rather than the empty context's constant nil.
func BenchmarkAcquireCancelCtx(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bh := newBench(b, bulkhead.Config{MaxConcurrent: 1 << 20})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := bh.Acquire(ctx); err != nil {
				b.Error(err)
				return
			}
			bh.Release()
		}
	})
}

// BenchmarkAcquireReleaseListener is the fast path with a listener that only
// counts: every call sends an EventAcquired and an EventReleased.
func BenchmarkAcquireReleaseListener(b *testing.B) {
	var n atomic.Int64
	bh := newBench(b, bulkhead.Config{MaxConcurrent: 1 << 20, Listener: watertight.ListenerFunc(func(watertight.Event) { n.Add(1) })})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := bh.Acquire(ctx); err != nil {
				b.Error(err)
				return
			}
			bh.Release()
		}
	})
}
