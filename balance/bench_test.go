package balance_test

import (
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
)

// BenchmarkPickDone is the hot path: a host picked by two choices and its
// call ended with a latency, over a pool of 8, every host active; the
// latency is given, not measured, so no clock is read.
func BenchmarkPickDone(b *testing.B) {
	for _, s := range []balance.Strategy{balance.LeastInFlight, balance.PeakEWMA} {
		b.Run(s.String(), func(b *testing.B) {
			b.Run("sequential", func(b *testing.B) {
				bl := newBalancer(b, balance.Config{Hosts: hosts(8), Strategy: s})
				b.ReportAllocs()
				for b.Loop() {
					bl.Pick(nil).Done(watertight.Success, time.Millisecond)
				}
			})
			b.Run("parallel", func(b *testing.B) {
				bl := newBalancer(b, balance.Config{Hosts: hosts(8), Strategy: s})
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						bl.Pick(nil).Done(watertight.Success, time.Millisecond)
					}
				})
			})
		})
	}
}
