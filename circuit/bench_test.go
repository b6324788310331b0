package circuit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
)

func benchBreaker(b *testing.B, cfg circuit.Config) *circuit.Breaker {
	br, err := circuit.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return br
}

// BenchmarkClosed is Allow + Done on a closed breaker. The count-1pct cases
// fail one call in 100: their window always holds failures, so every call
// moves the ring on, where in steady health (count) a success into a full
// window of successes writes nothing.
func BenchmarkClosed(b *testing.B) {
	for _, tc := range []struct {
		name      string
		cfg       circuit.Config
		failEvery int // 0: every call succeeds
	}{
		{"count", circuit.Config{}, 0},
		{"count-1pct", circuit.Config{}, 100},
		{"count-slow", circuit.Config{SlowCallDuration: time.Second}, 0},
		{"time", circuit.Config{WindowType: circuit.TimeBased}, 0},
		// The consecutive-failure rule (gobreaker's default): on the
		// success path it costs one more load, of a line the window
		// reads anyway.
		{"consecutive", circuit.Config{ConsecutiveFailures: 5}, 0},
		{"consecutive-1pct", circuit.Config{ConsecutiveFailures: 5}, 100},
		{"consecutive-only", circuit.Config{ConsecutiveFailures: 5, FailureRateThreshold: -1}, 0},
	} {
		outcome := func(i int) watertight.Outcome {
			if tc.failEvery > 0 && i%tc.failEvery == 0 {
				return watertight.Failure
			}
			return watertight.Success
		}
		b.Run(tc.name, func(b *testing.B) {
			br := benchBreaker(b, tc.cfg)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p, err := br.Allow()
				if err != nil {
					b.Fatal(err)
				}
				i++
				p.Done(outcome(i))
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			br := benchBreaker(b, tc.cfg)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					p, err := br.Allow()
					if err != nil {
						b.Error(err)
						return
					}
					i++
					p.Done(outcome(i))
				}
			})
		})
	}
}

// BenchmarkOpen is a rejection by an open breaker.
func BenchmarkOpen(b *testing.B) {
	br := benchBreaker(b, circuit.Config{})
	br.ForceOpen()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := br.Allow(); err == nil {
				b.Fatal("admitted")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := br.Allow(); err == nil {
					b.Error("admitted")
					return
				}
			}
		})
	})
}

// BenchmarkPolicy is the breaker as a pipeline stage through watertight.Do.
func BenchmarkPolicy(b *testing.B) {
	br := benchBreaker(b, circuit.Config{})
	p := watertight.MustNew(br)
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
}

// BenchmarkOpenListener is a rejection by an open breaker that sends an
// event to a listener that only counts: the event's cost is a clock read
// and the call, with no allocation.
func BenchmarkOpenListener(b *testing.B) {
	var n atomic.Int64
	br := benchBreaker(b, circuit.Config{Listener: watertight.ListenerFunc(func(watertight.Event) { n.Add(1) })})
	br.ForceOpen()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := br.Allow(); err == nil {
				b.Error("admitted")
				return
			}
		}
	})
}
