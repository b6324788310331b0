package balance_test

import (
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
)

// latencies are the calls' latencies in the benchmark: 0.5 to 2 ms, so that
// the hosts' measurements differ and move, as they do under real traffic
// (with one latency for every call, nothing would ever be written but the
// counts).
var latencies = func() (l [64]time.Duration) {
	for i := range l {
		l[i] = 500*time.Microsecond + time.Duration(i*i%61)*25*time.Microsecond
	}
	return l
}()

// BenchmarkPickDone is the hot path: a host picked by two choices and its
// call ended with a latency, over a pool of 8, every host active; the
// latency is given, not measured, so no clock is read.
func BenchmarkPickDone(b *testing.B) {
	for _, s := range []balance.Strategy{balance.LeastInFlight, balance.PeakEWMA} {
		b.Run(s.String(), func(b *testing.B) {
			b.Run("sequential", func(b *testing.B) {
				bl := newBalancer(b, balance.Config{Hosts: hosts(8), Strategy: s})
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					bl.Pick(nil).Done(watertight.Success, latencies[i%len(latencies)])
					i++
				}
			})
			b.Run("parallel", func(b *testing.B) {
				bl := newBalancer(b, balance.Config{Hosts: hosts(8), Strategy: s})
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						bl.Pick(nil).Done(watertight.Success, latencies[i%len(latencies)])
						i++
					}
				})
			})
		})
	}
}
