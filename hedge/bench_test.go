package hedge_test

import (
	"context"
	"testing"
	"time"

	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
)

//go:noinline
func work(ctx context.Context, attempt int) (int, error) { return attempt, nil }

func benchPolicy(b *testing.B, cfg hedge.Config) *hedge.Policy {
	b.Helper()
	p, err := hedge.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkNoFire is a hedged call whose first attempt answers before the
// delay: what hedging costs in the common case.
func BenchmarkNoFire(b *testing.B) {
	ctx := retry.Idempotent(context.Background())
	bud, err := budget.New(budget.Config{Ratio: 0.05})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		cfg  hedge.Config
	}{
		{"fixed", hedge.Config{Delay: time.Second}},
		{"fixed-budget", hedge.Config{Delay: time.Second, Budget: bud}},
		{"p95", hedge.Config{Percentile: 0.95, MinDelay: time.Second}},
	} {
		p := benchPolicy(b, bc.cfg)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if v, err := hedge.Do(ctx, p, work); v != 1 || err != nil {
					b.Fatal(v, err)
				}
			}
		})
		b.Run(bc.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if v, err := hedge.Do(ctx, p, work); v != 1 || err != nil {
						panic(err)
					}
				}
			})
		})
	}
}

// BenchmarkNotIdempotent is a call the policy does not hedge.
func BenchmarkNotIdempotent(b *testing.B) {
	p := benchPolicy(b, hedge.Config{Delay: time.Second})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		hedge.Do(ctx, p, work)
	}
}
