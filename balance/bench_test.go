package balance_test

import (
	"fmt"
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

// tenants are the keys of the shard benchmarks: 1,024 tenant names of 10
// to 11 bytes, taken in turn.
var tenants = func() (k [1024]string) {
	for i := range k {
		k[i] = fmt.Sprintf("tenant-%d", 100+i*37)
	}
	return k
}()

// BenchmarkShard is a sharded call's hot path over pools of 8, 32 and 128
// hosts, shards of 3: "shard" is Balancer.Shard alone (a hash of the key
// and one mix per host), "pick" is Shard, its Pick and the host's Done, as
// the Transport does for a request, cycling over 1,024 tenants; "whole" is
// Balancer.Pick and Done over the same pool, without shards, for
// comparison (with 128 hosts, a Done that ends a host's block of 20 sorts
// the other hosts' medians).
func BenchmarkShard(b *testing.B) {
	for _, n := range []int{8, 32, 128} {
		bl := newBalancer(b, balance.Config{Hosts: hosts(n)})
		cfg := balance.ShardConfig{Size: 3}
		b.Run(fmt.Sprintf("hosts=%d/whole", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				bl.Pick(nil).Done(watertight.Success, latencies[i%len(latencies)])
				i++
			}
		})
		b.Run(fmt.Sprintf("hosts=%d/shard", n), func(b *testing.B) {
			b.ReportAllocs()
			i, sum := 0, 0
			for b.Loop() {
				s := bl.Shard(tenants[i%len(tenants)], cfg)
				sum += s.Len()
				i++
			}
			if sum != 3*i {
				b.Fatalf("shards of %d hosts in all, want %d", sum, 3*i)
			}
		})
		b.Run(fmt.Sprintf("hosts=%d/pick", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s := bl.Shard(tenants[i%len(tenants)], cfg)
				s.Pick(nil).Done(watertight.Success, latencies[i%len(latencies)])
				i++
			}
		})
		b.Run(fmt.Sprintf("hosts=%d/pick-parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					s := bl.Shard(tenants[i%len(tenants)], cfg)
					s.Pick(nil).Done(watertight.Success, latencies[i%len(latencies)])
					i++
				}
			})
		})
	}
}
