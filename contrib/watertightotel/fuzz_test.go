package watertightotel_test

import (
	"context"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	watertightotel "github.com/watertight-go/watertight/contrib/watertightotel"
)

// FuzzOnEvent feeds events and a breaker whose names and keys may hold any
// bytes (routes and hosts come from requests) and checks that every
// exported attribute is valid UTF-8 (OTLP rejects other strings) and the
// events add up.
func FuzzOnEvent(f *testing.F) {
	f.Add(uint8(watertight.EventShed), "http", "api", "GET /items")
	f.Add(uint8(watertight.EventStateChange), "circuit", "h\xff", "k\xfe")
	f.Add(uint8(0), "", "", "")
	f.Fuzz(func(t *testing.T, kind uint8, source, name, key string) {
		h := newHarness(t, watertightotel.Config{MaxEventSeries: 4})
		b, err := circuit.New(circuit.Config{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		h.m.AddBreaker(b)
		h.m.OnEvent(watertight.Event{Kind: watertight.EventKind(kind), Source: source, Name: name, Key: key, From: key, To: name})
		var rm metricdata.ResourceMetrics
		if err := h.reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		check := func(metric string, s attribute.Set) {
			for _, kv := range s.ToSlice() {
				if v := kv.Value.AsString(); !utf8.ValidString(v) {
					t.Errorf("%s: attribute %s=%q is not valid UTF-8", metric, kv.Key, v)
				}
			}
		}
		events := int64(0)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Gauge[int64]:
					for _, dp := range d.DataPoints {
						check(m.Name, dp.Attributes)
					}
				case metricdata.Gauge[float64]:
					for _, dp := range d.DataPoints {
						check(m.Name, dp.Attributes)
					}
				case metricdata.Sum[int64]:
					for _, dp := range d.DataPoints {
						check(m.Name, dp.Attributes)
						if m.Name == "watertight.events" {
							events += dp.Value
						}
					}
				}
			}
		}
		if events != 1 {
			t.Errorf("watertight.events adds up to %v, want 1", events)
		}
	})
}
