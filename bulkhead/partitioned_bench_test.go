package bulkhead_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/watertight-go/watertight/bulkhead"
)

// benchPartitioned has four partitions of equal weight sharing 1<<20
// permits: every acquire below finds a permit free.
func benchPartitioned(b *testing.B, reserve float64) *bulkhead.Partitioned {
	b.Helper()
	return mustPartitioned(b, bulkhead.PartitionedConfig{
		MaxConcurrent: 1 << 20,
		Partitions:    []bulkhead.PartitionConfig{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}},
		Default:       "d",
		Reserve:       reserve,
	})
}

// BenchmarkPartitionedAcquireRelease is the fast path: a permit free, nobody
// queued. "own": within the partition's guarantee; "spread": goroutines
// over the four partitions; "borrow": a partition over its guarantee, the
// reserve checked (the cheap bound, then every partition's count);
// "by name": Index on every call.
func BenchmarkPartitionedAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("own/sequential", func(b *testing.B) {
		p := benchPartitioned(b, 0)
		b.ReportAllocs()
		for b.Loop() {
			if err := p.Acquire(ctx, 0); err != nil {
				b.Fatal(err)
			}
			p.Release(0)
		}
	})
	b.Run("own/parallel", func(b *testing.B) {
		p := benchPartitioned(b, 0)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := p.Acquire(ctx, 0); err != nil {
					b.Error(err)
					return
				}
				p.Release(0)
			}
		})
	})
	b.Run("spread/parallel", func(b *testing.B) {
		p := benchPartitioned(b, 0)
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)) % 4
			for pb.Next() {
				if err := p.Acquire(ctx, i); err != nil {
					b.Error(err)
					return
				}
				p.Release(i)
			}
		})
	})
	borrow := func(b *testing.B, held int) (*bulkhead.Partitioned, func()) {
		// 8 permits, 2 guaranteed to each of 4, the default reserve of a
		// half: partition 0 holds held >= 2, so every acquire borrows. With
		// 2 held, 5 stay free after it, at least half of all 8: the bound
		// says yes. With 4, 3 stay free: the unused guarantees (6) are
		// summed, and half of them, 3, is kept.
		p := mustPartitioned(b, bulkhead.PartitionedConfig{
			MaxConcurrent: 8,
			Partitions:    []bulkhead.PartitionConfig{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}},
			Default:       "d",
		})
		for range held {
			if !p.TryAcquire(0) {
				b.Fatal("TryAcquire failed")
			}
		}
		return p, func() {
			for range held {
				p.Release(0)
			}
		}
	}
	for _, bc := range []struct {
		name string
		held int
	}{{"borrow/bound", 2}, {"borrow/scan", 4}} {
		b.Run(bc.name+"/sequential", func(b *testing.B) {
			p, done := borrow(b, bc.held)
			defer done()
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Acquire(ctx, 0); err != nil {
					b.Fatal(err)
				}
				p.Release(0)
			}
		})
	}
	b.Run("by name/parallel", func(b *testing.B) {
		p := benchPartitioned(b, 0)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i, err := p.AcquireName(ctx, "premium-tenant-42") // unknown: the default partition
				if err != nil {
					b.Error(err)
					return
				}
				p.Release(i)
			}
		})
	})
}

// BenchmarkPartitionedFull is a refusal of a partition over its share with
// no lending and no wait (the mutex path: it looks at the queues).
func BenchmarkPartitionedFull(b *testing.B) {
	p := mustPartitioned(b, bulkhead.PartitionedConfig{
		MaxConcurrent: 2,
		Partitions:    []bulkhead.PartitionConfig{{Name: "a"}, {Name: "b"}},
		Default:       "b",
		Reserve:       1,
	})
	if !p.TryAcquire(0) {
		b.Fatal("TryAcquire failed")
	}
	defer p.Release(0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if p.TryAcquire(0) {
				b.Error("acquired over the share")
				return
			}
		}
	})
}
