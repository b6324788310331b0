package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/chaos"
)

//go:noinline
func work(context.Context) (int, error) { return 1, nil }

// BenchmarkDisabled is the cost of chaos left wired in but off: the common
// case in production.
func BenchmarkDisabled(b *testing.B) {
	inj, _ := chaos.New(chaos.Config{Rules: map[string]chaos.Rule{"k": {ErrorRate: 1}}})
	benchInjector(b, inj)
}

// BenchmarkEnabled is an enabled injector whose rule injects nothing on
// this call (rate 0.01 of a latency of 1ns) and a key without a rule.
func BenchmarkEnabled(b *testing.B) {
	inj, _ := chaos.New(chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{
		"k": {LatencyRate: 0.01, Latency: time.Nanosecond},
	}})
	benchInjector(b, inj)
	b.Run("no-rule", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := chaos.Do(ctx, inj, "other", work); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func benchInjector(b *testing.B, inj *chaos.Injector) {
	ctx := context.Background()
	p := watertight.MustNew(inj.Policy("k"))
	b.Run("do", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := chaos.Do(ctx, inj, "k", work); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("policy", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := watertight.Do(ctx, p, work); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
