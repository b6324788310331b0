package latency_test

import (
	"fmt"
	"time"

	"github.com/watertight-go/watertight/internal/latency"
)

func Example() {
	tr, err := latency.New(latency.Config{Window: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	for i := range 100 { // 1ms, 2ms, ... 100ms
		tr.Record(time.Duration(i+1) * time.Millisecond)
	}
	fmt.Println("samples:", tr.Count())
	// Within 1/32 of the exact 50ms and 95ms: the middle of their buckets.
	fmt.Println("p50:", tr.Quantile(0.5).Round(100*time.Microsecond))
	fmt.Println("p95:", tr.Quantile(0.95).Round(100*time.Microsecond))
	// Output:
	// samples: 100
	// p50: 49.3ms
	// p95: 94.4ms
}
