package watertightprom_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	watertightprom "github.com/watertight-go/watertight/contrib/watertightprom"
	"github.com/watertight-go/watertight/watertighthttp"
)

var errBench = errors.New("boom")

var benchEvent = watertight.Event{Kind: watertight.EventRejected, Source: "circuit", Name: "payments", Key: "eu.example.com"}

// BenchmarkOnEvent is the cost the Collector adds to each event it counts
// (a rejection by an open breaker, say).
func BenchmarkOnEvent(b *testing.B) {
	c, _ := watertightprom.NewCollector(watertightprom.Config{})
	b.Run("rejected", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.OnEvent(benchEvent)
		}
	})
	b.Run("shed-with-reason", func(b *testing.B) {
		e := watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "GET /items", Err: fmt.Errorf("route: %w", watertighthttp.ErrRouteFull), Code: watertighthttp.CodeRouteFull}
		b.ReportAllocs()
		for b.Loop() {
			c.OnEvent(e)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.OnEvent(benchEvent)
			}
		})
	})
}

// BenchmarkCounterVec is what a listener that calls
// CounterVec.WithLabelValues on every event would cost, for comparison.
func BenchmarkCounterVec(b *testing.B) {
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"source", "event", "name", "key"})
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cv.WithLabelValues(benchEvent.Source, benchEvent.Kind.String(), benchEvent.Name, benchEvent.Key).Inc()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				cv.WithLabelValues(benchEvent.Source, benchEvent.Kind.String(), benchEvent.Name, benchEvent.Key).Inc()
			}
		})
	})
}

// BenchmarkLatency compares a call through an empty pipeline with one
// through a Latency policy.
func BenchmarkLatency(b *testing.B) {
	c, _ := watertightprom.NewCollector(watertightprom.Config{})
	ctx := context.Background()
	ok := func(context.Context) (int, error) { return 1, nil }
	failed := func(context.Context) (int, error) { return 0, errBench }
	rejected := func(context.Context) (int, error) { return 0, circuit.ErrOpen }
	for _, bc := range []struct {
		name string
		pipe *watertight.Pipeline
		fn   func(context.Context) (int, error)
	}{
		{"none", watertight.MustNew(), ok},
		{"latency", watertight.MustNew(c.Latency("x")), ok},
		{"latency-failure", watertight.MustNew(c.Latency("x")), failed},
		{"latency-rejected", watertight.MustNew(c.Latency("x")), rejected},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				watertight.Do(ctx, bc.pipe, bc.fn)
			}
		})
		b.Run(bc.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					watertight.Do(ctx, bc.pipe, bc.fn)
				}
			})
		})
	}
}

// BenchmarkScrape is the cost of one scrape of a registry of 100 breakers.
func BenchmarkScrape(b *testing.B) {
	c, _ := watertightprom.NewCollector(watertightprom.Config{})
	r, _ := circuit.NewRegistry(circuit.RegistryConfig{})
	for i := range 100 {
		r.Get(fmt.Sprint("host-", i))
	}
	c.AddBreakerRegistry("hosts", r)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
