package limit_test

import (
	"context"
	"testing"
	"time"

	"github.com/watertight-go/watertight/limit"
)

// BenchmarkAcquireDone is the hot path: a permit taken and given back with
// a latency, below the limit (windows are judged as they fill).
func BenchmarkAcquireDone(b *testing.B) {
	ctx := context.Background()
	cfg := limit.Config{InitialLimit: 1000, MinLimit: 1000, MaxLimit: 1000}
	b.Run("sequential", func(b *testing.B) {
		l, _ := limit.New(cfg)
		b.ReportAllocs()
		for b.Loop() {
			p, err := l.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			p.Done(time.Millisecond)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l, _ := limit.New(cfg)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := l.Acquire(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				p.Done(time.Millisecond)
			}
		})
	})
}

// BenchmarkPolicy is Enter and Exit: the limiter measures the call itself.
func BenchmarkPolicy(b *testing.B) {
	ctx := context.Background()
	l, _ := limit.New(limit.Config{InitialLimit: 1000, MinLimit: 1000, MaxLimit: 1000})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, t, err := l.Enter(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			_ = l.Exit(c, t, nil)
		}
	})
}

// BenchmarkLimited is a refusal at the limit.
func BenchmarkLimited(b *testing.B) {
	l, _ := limit.New(limit.Config{InitialLimit: 1, MinLimit: 1, MaxLimit: 1})
	p, _ := l.TryAcquire()
	defer p.Ignore()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := l.TryAcquire(); ok {
				b.Error("admitted at the limit")
				return
			}
		}
	})
}
