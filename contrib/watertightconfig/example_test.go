package watertightconfig_test

import (
	"fmt"
	"os"

	"github.com/watertight-go/watertight/contrib/watertightconfig"
)

func Example() {
	f, err := watertightconfig.Parse("payments.yaml", []byte(`
defaults:
  breakers:
    failure_rate_threshold: 50%
    open_duration: 10s
breakers:
  payment:
    min_calls: 10
bulkheads:
  payment:
    max_concurrent: 20
    max_wait: 50ms
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	reg, err := watertightconfig.NewRegistry(f, watertightconfig.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	breaker, _ := reg.Breaker("payment")
	bulk, _ := reg.Bulkhead("payment")
	c := f.Breakers["payment"].Config
	fmt.Println(breaker.Name(), breaker.State(), c.MinCalls, c.FailureRateThreshold, c.OpenDuration, c.WindowSize)
	fmt.Println(bulk.Snapshot().MaxConcurrent)
	// Output:
	// payment closed 10 50 10s 100
	// 20
}

func ExampleParse_errors() {
	_, err := watertightconfig.Parse("payments.yaml", []byte(`
bulkheads:
  payment:
    max_concurrent: -3
    max_wiat: 1s
breakers:
  payment:
    failure_rate_threshold: 50
`))
	fmt.Println(err)
	// Output:
	// payments.yaml:4: bulkheads.payment.max_concurrent: must be > 0, got -3
	// payments.yaml:5: bulkheads.payment.max_wiat: unknown field (did you mean max_wait?)
	// payments.yaml:8: breakers.payment.failure_rate_threshold: must be a fraction of 1 (0.5) or a percentage ("50%"), got 50: write "50%" for a percentage
}

func ExampleRegistry_Reload() {
	v1, _ := watertightconfig.Parse("v1.yaml", []byte("breakers: {payment: {}, catalog: {}}"))
	reg, _ := watertightconfig.NewRegistry(v1, watertightconfig.Options{})
	payment, _ := reg.Breaker("payment")
	payment.ForceOpen()

	v2, _ := watertightconfig.Parse("v2.yaml", []byte("breakers: {payment: {}, catalog: {min_calls: 5}}"))
	changes, err := reg.Reload(v2)
	fmt.Println(changes, err)
	same, _ := reg.Breaker("payment")
	fmt.Println(same == payment, same.State())
	// Output:
	// changed breakers.catalog; 1 unchanged <nil>
	// true forced-open
}

func ExampleFile_Write() {
	f, _ := watertightconfig.Parse("t.yaml", []byte(`
defaults:
  timeouts: {timeout: 2s}
timeouts:
  search: {}
  checkout: {timeout: 5s}
`))
	f.Write(os.Stdout)
	// Output:
	// # t.yaml: 2 instances: every field as it resolves.
	// timeouts:
	//   checkout:         # line 6
	//     timeout: 5s     # line 6
	//     abandon: false  # default
	//   search:           # line 5
	//     timeout: 2s     # defaults, line 3
	//     abandon: false  # default
}
