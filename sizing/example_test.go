package sizing_test

import (
	"fmt"
	"time"

	"github.com/watertight-go/watertight/sizing"
)

func ExampleSuggest() {
	// A dependency called 200 times a second, p99 50ms, p99.9 120ms.
	a, err := sizing.Suggest(sizing.Config{}, sizing.Observation{
		Rate: 200, P99: 50 * time.Millisecond, P999: 120 * time.Millisecond, Samples: 12000,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("in flight %.1f → bulkhead %d, wait %v, timeout %v\n", a.InFlight, a.MaxConcurrent, a.MaxWait, a.Timeout)
	// Output: in flight 10.0 → bulkhead 25, wait 50ms, timeout 180ms
}
