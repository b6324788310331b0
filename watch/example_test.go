package watch_test

import (
	"fmt"

	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/watch"
)

// A program registers its protections once; every exporter and the dashboard
// read the same Set.
func Example() {
	breaker, _ := circuit.New(circuit.Config{Name: "payments"})
	permits, _ := bulkhead.New(bulkhead.Config{Name: "payments", MaxConcurrent: 20})

	var set watch.Set
	set.AddBreaker(breaker)
	set.AddBulkhead(permits)
	// watertightprom.Config{Sources: &set}, watertightotel.Config{Sources: &set}
	// and dashboard.Config{Sources: &set} all read it.

	for _, s := range set.Sources() {
		switch {
		case s.Breaker != nil:
			fmt.Println(s.Kind, s.Name, s.Breaker.Snapshot().State)
		case s.Bulkhead != nil:
			fmt.Println(s.Kind, s.Name, s.Bulkhead.Snapshot().MaxConcurrent, "permits")
		}
	}
	// Output:
	// circuit payments closed
	// bulkhead payments 20 permits
}
