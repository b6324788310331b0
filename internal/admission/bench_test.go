package admission

import (
	"context"
	"testing"
)

// BenchmarkAcquireRelease is the fast path: a place free, nobody queued.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		q := New("r", 1000, 1000)
		b.ReportAllocs()
		for b.Loop() {
			if err := q.Acquire(ctx, critical); err != nil {
				b.Fatal(err)
			}
			q.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		q := New("r", 1000, 1000)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := q.Acquire(ctx, critical); err != nil {
					b.Error(err)
					return
				}
				q.Release()
			}
		})
	})
	b.Run("try/serial", func(b *testing.B) {
		q := New("r", 1000, 1000)
		b.ReportAllocs()
		for b.Loop() {
			if !q.TryAcquire() {
				b.Fatal("TryAcquire failed")
			}
			q.Release()
		}
	})
}

// BenchmarkContended is Acquire and Release with more goroutines than
// places: the queue is used.
func BenchmarkContended(b *testing.B) {
	ctx := context.Background()
	q := New("r", 1, 1<<20)
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := q.Acquire(ctx, critical); err != nil {
				b.Error(err)
				return
			}
			q.Release()
		}
	})
}
