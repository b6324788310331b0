package keyed_test

import (
	"strconv"
	"testing"

	"github.com/watertight-go/watertight/internal/keyed"
)

// BenchmarkGet looks up keys already held: the hot path of every registry
// and per-client table.
func BenchmarkGet(b *testing.B) {
	var c counter
	m := keyed.New(1000, c.create, idle)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
		if _, err := m.Get(keys[i], errFull); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("one", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := m.Get(keys[7], errFull); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("many", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := m.Get(keys[i%len(keys)], errFull); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	})
}
