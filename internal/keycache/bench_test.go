package keycache_test

import (
	"testing"

	"github.com/watertight-go/watertight/internal/keycache"
)

// BenchmarkGet is a hit in the table: what a request pays to find its key's
// pipelines.
func BenchmarkGet(b *testing.B) {
	c := keycache.New[*int](16)
	v := new(int)
	c.Put("backend.example:443", 7, v)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if got, g, ok := c.Get("backend.example:443"); !ok || got != v || g != 7 {
				b.Fatal("miss")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if got, g, ok := c.Get("backend.example:443"); !ok || got != v || g != 7 {
					panic("miss")
				}
			}
		})
	})
}
