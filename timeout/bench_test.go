package timeout_test

import (
	"context"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/timeout"
)

//go:noinline
func call(ctx context.Context, n int) (int, error) {
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return n + 1, nil
}

// BenchmarkTimeout compares a call through the timeout policy with the same
// call under a bare context.WithTimeout.
func BenchmarkTimeout(b *testing.B) {
	to, err := timeout.New(timeout.Config{Name: "attempt", Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	p := watertight.MustNew(to)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		run  func(n int) int
	}{
		{"policy", func(n int) int {
			v, err := watertight.Do(ctx, p, func(ctx context.Context) (int, error) { return call(ctx, n) })
			if err != nil {
				panic(err)
			}
			return v
		}},
		{"context-with-timeout", func(n int) int {
			c, cancel := context.WithTimeout(ctx, time.Second)
			v, err := call(c, n)
			cancel()
			if err != nil {
				panic(err)
			}
			return v
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n = bc.run(n)
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := 0
				for pb.Next() {
					n = bc.run(n)
				}
			})
		})
	}
}
