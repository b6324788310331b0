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

// BenchmarkClosed is Allow + Done(Success) on a closed breaker.
func BenchmarkClosed(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  circuit.Config
	}{
		{"count", circuit.Config{}},
		{"count-slow", circuit.Config{SlowCallDuration: time.Second}},
		{"time", circuit.Config{WindowType: circuit.TimeBased}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			br := benchBreaker(b, tc.cfg)
			b.ReportAllocs()
			for b.Loop() {
				p, err := br.Allow()
				if err != nil {
					b.Fatal(err)
				}
				p.Done(watertight.Success)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			br := benchBreaker(b, tc.cfg)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, err := br.Allow()
					if err != nil {
						b.Error(err)
						return
					}
					p.Done(watertight.Success)
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
	p := watertight.New(br)
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
