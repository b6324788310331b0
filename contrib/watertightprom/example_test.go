package watertightprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightprom "github.com/watertight-go/watertight/contrib/watertightprom"
)

func Example() {
	collector, err := watertightprom.NewCollector(watertightprom.Config{})
	if err != nil {
		panic(err)
	}
	breaker, _ := circuit.New(circuit.Config{Name: "payments", WindowSize: 10, MinCalls: 2})
	bh, _ := bulkhead.New(bulkhead.Config{Name: "payments", MaxConcurrent: 4})
	collector.AddBreaker(breaker)
	collector.AddBulkhead(bh)
	// In a program: prometheus.MustRegister(collector), or serve it with
	// watertightprom.Handler(collector) or watertightprom.Serve.

	pipe := watertight.MustNew(breaker, bh)
	for range 2 { // two failures in two calls: the breaker opens
		watertight.Do(context.Background(), pipe, func(context.Context) (int, error) {
			return 0, errors.New("connection refused")
		})
	}
	_, err = watertight.Do(context.Background(), pipe, func(context.Context) (int, error) { return 1, nil })
	fmt.Println(err)

	text, _ := testutil.CollectAndFormat(collector, expfmt.TypeTextPlain,
		"watertight_circuit_state", "watertight_circuit_rejected_total", "watertight_bulkhead_available")
	for _, line := range strings.Split(string(text), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			fmt.Println(line)
		}
	}
	// Output:
	// circuit: open
	// watertight_bulkhead_available{key="",kind="semaphore",name="payments"} 4
	// watertight_circuit_rejected_total{key="",name="payments"} 1
	// watertight_circuit_state{key="",name="payments",state="closed"} 0
	// watertight_circuit_state{key="",name="payments",state="disabled"} 0
	// watertight_circuit_state{key="",name="payments",state="forced-open"} 0
	// watertight_circuit_state{key="",name="payments",state="half-open"} 0
	// watertight_circuit_state{key="",name="payments",state="metrics-only"} 0
	// watertight_circuit_state{key="",name="payments",state="open"} 1
}

func ExampleCollector_Latency() {
	collector, _ := watertightprom.NewCollector(watertightprom.Config{Buckets: []float64{0.1, 1}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector)

	// Innermost, the policy times the dependency itself.
	pipe := watertight.MustNew(collector.Latency("search"))
	watertight.Do(context.Background(), pipe, func(context.Context) (int, error) {
		time.Sleep(time.Millisecond)
		return 1, nil
	})

	n, _ := testutil.GatherAndCount(reg, "watertight_call_duration_seconds")
	fmt.Println("series:", n)
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "watertight_call_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			fmt.Println(mf.GetName(), m.GetLabel()[1].GetValue(), m.GetHistogram().GetSampleCount())
		}
	}
	// Output:
	// series: 4
	// watertight_call_duration_seconds failure 0
	// watertight_call_duration_seconds ignored 0
	// watertight_call_duration_seconds saturated 0
	// watertight_call_duration_seconds success 1
}
