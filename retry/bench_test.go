package retry_test

import (
	"context"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/retry"
)

// BenchmarkSuccess is a call that succeeds at once, with no policy (direct),
// through a retry policy, and through a retry policy with a budget, a
// concurrent-retry budget, or both: the difference is what retry costs on
// the success path.
func BenchmarkSuccess(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	plain := mustPolicy(b, retry.Config{})
	bud, _ := budget.New(budget.Config{})
	withBudget := mustPolicy(b, retry.Config{Budget: bud})
	conc, _ := budget.NewConcurrency(budget.ConcurrencyConfig{})
	withConc := mustPolicy(b, retry.Config{Concurrency: conc})
	withBoth := mustPolicy(b, retry.Config{Budget: bud, Concurrency: conc})
	for _, tc := range []struct {
		name string
		run  func() (int, error)
	}{
		{"direct", func() (int, error) { return fn(ctx) }},
		{"empty-pipeline", func() (int, error) { return watertight.Do(ctx, nil, fn) }},
		{"retry", func() (int, error) { return retry.Do(ctx, plain, fn) }},
		{"retry+budget", func() (int, error) { return retry.Do(ctx, withBudget, fn) }},
		{"retry+concurrency", func() (int, error) { return retry.Do(ctx, withConc, fn) }},
		{"retry+budget+concurrency", func() (int, error) { return retry.Do(ctx, withBoth, fn) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := tc.run(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
