package budget_test

import (
	"context"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
)

func benchBudget(b *testing.B, cfg budget.Config) *budget.Budget {
	bud, err := budget.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return bud
}

// BenchmarkBudget measures the budget's hot paths, serial and from
// b.RunParallel goroutines.
func BenchmarkBudget(b *testing.B) {
	// deposit: one Deposit per request.
	b.Run("deposit", func(b *testing.B) {
		bud := benchBudget(b, budget.Config{})
		b.ReportAllocs()
		for b.Loop() {
			bud.Deposit()
		}
	})
	b.Run("deposit/parallel", func(b *testing.B) {
		bud := benchBudget(b, budget.Config{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bud.Deposit()
			}
		})
	})

	// withdraw: a granted retry from a healthy balance, saved up beforehand
	// (not timed), so that the floor is never consulted.
	healthy := func(b *testing.B) *budget.Budget {
		bud := benchBudget(b, budget.Config{Ratio: 1, MaxTokens: budget.MaxMaxTokens})
		for range b.N {
			bud.Deposit()
		}
		b.ResetTimer()
		return bud
	}
	b.Run("withdraw", func(b *testing.B) {
		bud := healthy(b)
		b.ReportAllocs()
		for range b.N {
			if !bud.Withdraw() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("withdraw/parallel", func(b *testing.B) {
		bud := healthy(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !bud.Withdraw() {
					b.Error("refused")
					return
				}
			}
		})
	})

	// deposit+withdraw: a request and a granted retry. Ratio 1, so that the
	// balance holds a token after every deposit; the floor is off, so that
	// the odd refusal (two goroutines racing for one token) reads no clock;
	// and the cap is far, so that the refusals' leftover tokens never take
	// the balance above it: this is the path of a retry storm, where the
	// balance is below the cap.
	storm := budget.Config{Ratio: 1, MaxTokens: budget.MaxMaxTokens, MinPerSecond: -1}
	b.Run("deposit+withdraw", func(b *testing.B) {
		bud := benchBudget(b, storm)
		b.ReportAllocs()
		for b.Loop() {
			bud.Deposit()
			if !bud.Withdraw() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("deposit+withdraw/parallel", func(b *testing.B) {
		bud := benchBudget(b, storm)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bud.Deposit()
				bud.Withdraw()
			}
		})
	})

	// over-cap: the same with a cap of one token, so that every Withdraw
	// finds the balance above the cap and discards the excess (under the
	// budget's mutex): the path of a retry after a healthy stretch.
	b.Run("deposit+withdraw/over-cap/parallel", func(b *testing.B) {
		bud := benchBudget(b, budget.Config{Ratio: 1, MaxTokens: 1, MinPerSecond: -1})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bud.Deposit()
				bud.Deposit()
				bud.Withdraw()
			}
		})
	})

	// over-cap/striped: the same with a cap of ten tokens, so that the
	// balance is striped over eight cells and the pool.
	b.Run("deposit+withdraw/over-cap/striped/parallel", func(b *testing.B) {
		bud := benchBudget(b, budget.Config{Ratio: 1, MaxTokens: 10, MinPerSecond: -1})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bud.Deposit()
				bud.Deposit()
				bud.Withdraw()
			}
		})
	})

	// healthy: requests with a retry now and then (one in 50) while the
	// balance is at its cap: the retry makes room, and a later deposit,
	// perhaps from another goroutine, fills it.
	b.Run("healthy/parallel", func(b *testing.B) {
		bud := benchBudget(b, budget.Config{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				bud.Deposit()
				if i%50 == 0 {
					bud.Withdraw()
				}
			}
		})
	})

	// exhausted: a refused retry, ratio balance empty, floor consulted
	// (one clock read) and empty.
	b.Run("exhausted/parallel", func(b *testing.B) {
		bud := benchBudget(b, budget.Config{MinPerSecond: 0.001})
		bud.Withdraw() // the floor's one token
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if bud.Withdraw() {
					b.Error("granted")
					return
				}
			}
		})
	})
}

// BenchmarkThrottler measures a healthy throttler (probability zero): Allow
// and Accepted for a request the backend accepted.
func BenchmarkThrottler(b *testing.B) {
	newT := func(b *testing.B) *budget.Throttler {
		t, err := budget.NewThrottler(budget.ThrottleConfig{})
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	b.Run("allow+accepted", func(b *testing.B) {
		t := newT(b)
		b.ReportAllocs()
		for b.Loop() {
			if err := t.Allow(); err != nil {
				b.Fatal(err)
			}
			t.Accepted()
		}
	})
	b.Run("allow+accepted/parallel", func(b *testing.B) {
		t := newT(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := t.Allow(); err != nil {
					b.Error(err)
					return
				}
				t.Accepted()
			}
		})
	})
	b.Run("policy/parallel", func(b *testing.B) {
		t := newT(b)
		p := watertight.MustNew(t)
		ctx := context.Background()
		fn := func(context.Context) (int, error) { return 1, nil }
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

// BenchmarkRetryThrottle measures gRPC's retry throttling: a success on a
// full throttle (every call of a healthy dependency), and a failure followed
// by the successes that repay it (ratio 1), serial and parallel.
func BenchmarkRetryThrottle(b *testing.B) {
	newRT := func(b *testing.B, ratio float64) *budget.RetryThrottle {
		rt, err := budget.NewRetryThrottle(budget.RetryThrottleConfig{MaxTokens: 100, TokenRatio: ratio})
		if err != nil {
			b.Fatal(err)
		}
		return rt
	}
	b.Run("success", func(b *testing.B) {
		rt := newRT(b, 0.1)
		b.ReportAllocs()
		for b.Loop() {
			rt.Success()
		}
	})
	b.Run("success/parallel", func(b *testing.B) {
		rt := newRT(b, 0.1)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rt.Success()
			}
		})
	})
	b.Run("failed+success", func(b *testing.B) {
		rt := newRT(b, 1)
		b.ReportAllocs()
		for b.Loop() {
			rt.Failed()
			rt.Success()
		}
	})
	b.Run("failed+success/parallel", func(b *testing.B) {
		rt := newRT(b, 1)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rt.Failed()
				rt.Success()
			}
		})
	})
}

// BenchmarkConcurrency measures the concurrent-retry budget: Enter and
// Leave of a request (every call), a granted retry (TryAcquire and Release)
// inside one, and a refused retry, serial and from b.RunParallel goroutines.
func BenchmarkConcurrency(b *testing.B) {
	newC := func(b *testing.B, cfg budget.ConcurrencyConfig) *budget.Concurrency {
		c, err := budget.NewConcurrency(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	// request: Enter and Leave, no retry (the healthy path).
	b.Run("request", func(b *testing.B) {
		c := newC(b, budget.ConcurrencyConfig{})
		b.ReportAllocs()
		for b.Loop() {
			c.Enter()
			c.Leave()
		}
	})
	b.Run("request/parallel", func(b *testing.B) {
		c := newC(b, budget.ConcurrencyConfig{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Enter()
				c.Leave()
			}
		})
	})
	// request+retry: every request retries once, and may (Percent 100:
	// every active request may hold a slot).
	b.Run("request+retry", func(b *testing.B) {
		c := newC(b, budget.ConcurrencyConfig{Percent: 100})
		b.ReportAllocs()
		for b.Loop() {
			c.Enter()
			if !c.TryAcquire() {
				b.Fatal("refused")
			}
			c.Release()
			c.Leave()
		}
	})
	b.Run("request+retry/parallel", func(b *testing.B) {
		c := newC(b, budget.ConcurrencyConfig{Percent: 100})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Enter()
				if !c.TryAcquire() {
					b.Error("refused")
					return
				}
				c.Release()
				c.Leave()
			}
		})
	})
	// healthy: requests with a retry now and then (one in 50).
	b.Run("healthy/parallel", func(b *testing.B) {
		c := newC(b, budget.ConcurrencyConfig{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				c.Enter()
				if i%50 == 0 && c.TryAcquire() {
					c.Release()
				}
				c.Leave()
			}
		})
	})
	// exhausted: a refused retry, the slots all held.
	b.Run("exhausted/parallel", func(b *testing.B) {
		c := newC(b, budget.ConcurrencyConfig{Percent: -1, MinConcurrency: 1})
		c.TryAcquire()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if c.TryAcquire() {
					b.Error("granted")
					return
				}
			}
		})
	})
}
