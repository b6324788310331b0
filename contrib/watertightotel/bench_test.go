package watertightotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	watertightotel "github.com/watertight-go/watertight/contrib/watertightotel"
)

var errBench = errors.New("boom")

func benchMetrics(b *testing.B) (*watertightotel.Metrics, *sdkmetric.ManualReader) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := watertightotel.New(watertightotel.Config{MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		m.Close()
		mp.Shutdown(context.Background())
	})
	return m, reader
}

// BenchmarkOnEvent is the cost Metrics adds to each event it counts.
func BenchmarkOnEvent(b *testing.B) {
	m, _ := benchMetrics(b)
	e := watertight.Event{Kind: watertight.EventRejected, Source: "circuit", Name: "payments", Key: "eu.example.com"}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.OnEvent(e)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.OnEvent(e)
			}
		})
	})
}

// BenchmarkLatency is a call through a Latency policy on the SDK: one that
// succeeds, one that fails and one that a protection rejected.
func BenchmarkLatency(b *testing.B) {
	m, _ := benchMetrics(b)
	pipe := watertight.MustNew(m.Latency("x"))
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		fn   func(context.Context) (int, error)
	}{
		{"", func(context.Context) (int, error) { return 1, nil }},
		{"failure-", func(context.Context) (int, error) { return 0, errBench }},
		{"rejected-", func(context.Context) (int, error) { return 0, circuit.ErrOpen }},
	} {
		b.Run(bc.name+"serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				watertight.Do(ctx, pipe, bc.fn)
			}
		})
		b.Run(bc.name+"parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					watertight.Do(ctx, pipe, bc.fn)
				}
			})
		})
	}
}

// BenchmarkCollect is one collection of a registry of 100 breakers.
func BenchmarkCollect(b *testing.B) {
	m, reader := benchMetrics(b)
	r, _ := circuit.NewRegistry(circuit.RegistryConfig{})
	for i := range 100 {
		r.Get(fmt.Sprint("host-", i))
	}
	m.AddBreakerRegistry("hosts", r)
	var rm metricdata.ResourceMetrics
	b.ReportAllocs()
	for b.Loop() {
		if err := reader.Collect(context.Background(), &rm); err != nil {
			b.Fatal(err)
		}
	}
}
