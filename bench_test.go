package watertight_test

import (
	"context"
	"testing"

	"github.com/watertight-go/watertight"
)

var sink int

//go:noinline
func work(n int) (int, error) { return n + 1, nil }

func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	two := watertight.MustNew(nop{}, nop{})
	empty := watertight.MustNew()
	for _, bc := range []struct {
		name string
		call func(n int) int
	}{
		{"direct", func(n int) int {
			v, _ := func(ctx context.Context) (int, error) { return work(n) }(ctx)
			return v
		}},
		{"empty-pipeline", func(n int) int {
			v, _ := watertight.Do(ctx, empty, func(ctx context.Context) (int, error) { return work(n) })
			return v
		}},
		{"two-policies", func(n int) int {
			v, _ := watertight.Do(ctx, two, func(ctx context.Context) (int, error) { return work(n) })
			return v
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n = bc.call(n)
			}
			sink = n
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := 0
				for pb.Next() {
					n = bc.call(n)
				}
				_ = n
			})
		})
	}
}
