package watertightotel_test

import (
	"context"
	"errors"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightotel "github.com/watertight-go/watertight/contrib/watertightotel"
)

func Example() {
	// In a program the MeterProvider has a periodic reader and an exporter
	// (OTLP, Prometheus); a ManualReader shows what it would export.
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	metrics, err := watertightotel.New(watertightotel.Config{MeterProvider: provider})
	if err != nil {
		panic(err)
	}
	defer metrics.Close()
	breaker, _ := circuit.New(circuit.Config{Name: "payments", WindowSize: 10, MinCalls: 2})
	bh, _ := bulkhead.New(bulkhead.Config{Name: "payments", MaxConcurrent: 4})
	metrics.AddBreaker(breaker)
	metrics.AddBulkhead(bh)

	pipe := watertight.MustNew(breaker, bh)
	for range 2 { // two failures in two calls: the breaker opens
		watertight.Do(context.Background(), pipe, func(context.Context) (int, error) {
			return 0, errors.New("connection refused")
		})
	}

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "watertight.circuit.state":
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					if state, _ := dp.Attributes.Value("state"); dp.Value == 1 {
						fmt.Printf("%s [%s] state=%s\n", m.Name, m.Unit, state.String())
					}
				}
			case "watertight.circuit.opens", "watertight.bulkhead.available":
				dp := m.Data.(metricdata.Sum[int64]).DataPoints[0]
				name, _ := dp.Attributes.Value(watertightotel.AttrName)
				fmt.Printf("%s [%s] %s=%d\n", m.Name, m.Unit, name.String(), dp.Value)
			}
		}
	}
	// Unordered output:
	// watertight.circuit.state [{state}] state=open
	// watertight.circuit.opens [{open}] payments=1
	// watertight.bulkhead.available [{permit}] payments=4
}
