package backoff_test

import (
	"testing"
	"time"

	"github.com/watertight-go/watertight/backoff"
)

var sink time.Duration

// BenchmarkDelay is one Delay with the default random source, over retry
// numbers 1 to 16 (decorrelated: over its own chain of delays).
func BenchmarkDelay(b *testing.B) {
	for _, j := range []backoff.Jitter{backoff.Full, backoff.None, backoff.Equal, backoff.Decorrelated} {
		bo := mustNew(b, backoff.Config{Jitter: j})
		b.Run(j.String(), func(b *testing.B) {
			b.ReportAllocs()
			var prev time.Duration
			n := 0
			for b.Loop() {
				n = n&15 + 1
				prev = bo.Delay(n, prev)
			}
			sink = prev
		})
		b.Run(j.String()+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var prev time.Duration
				n := 0
				for pb.Next() {
					n = n&15 + 1
					prev = bo.Delay(n, prev)
				}
				if prev < 0 {
					b.Error("negative delay")
				}
			})
		})
	}
}

// BenchmarkDelaySlowGrowth is full jitter with a multiplier of 1.1 past the
// precomputed table (n = 65 to 80), where the exponential is computed.
func BenchmarkDelaySlowGrowth(b *testing.B) {
	bo := mustNew(b, backoff.Config{Base: time.Microsecond, Cap: time.Hour, Multiplier: 1.1})
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = n&15 + 1
		sink = bo.Delay(64+n, 0)
	}
}
