package deadline_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/deadline"
)

// A service in the middle of a call chain: it reads the caller's timeout from
// the request's headers, works under that deadline, and sends the time left,
// less the margin, on to the next hop.
func Example() {
	p, err := deadline.New(deadline.DefaultConfig()) // 100ms margin, at most 5 minutes
	if err != nil {
		panic(err)
	}

	// The incoming request: the caller gives it 1.5s.
	in := http.Header{}
	in.Set("X-Request-Timeout-Ms", "1500")
	d, ok := p.Incoming(in)
	fmt.Println("caller's timeout:", d, ok)

	ctx, cancel := p.WithIncoming(context.Background(), in)
	defer cancel()
	left, _ := deadline.Remaining(ctx)
	fmt.Println("deadline in:", left.Round(100*time.Millisecond))

	// The request to the next hop carries what is left minus the margin.
	out := http.Header{}
	if err := p.Inject(ctx, out); err != nil {
		panic(err)
	}
	sent, _ := deadline.ParseMillis(out.Get(deadline.DefaultHeader))
	fmt.Println("sent on:", sent.Round(100*time.Millisecond))
	// Output:
	// caller's timeout: 1.5s true
	// deadline in: 1.5s
	// sent on: 1.4s
}

// Untrusted values: a timeout above the server's maximum is clamped; a
// malformed one is ignored (and logged), and the other values are read.
func Example_untrusted() {
	p, _ := deadline.New(deadline.Config{Max: 30 * time.Second})

	d, _ := p.Incoming(http.Header{"X-Request-Timeout-Ms": {"86400000"}}) // a day
	fmt.Println(d)

	d, _ = p.Incoming(http.Header{"Grpc-Timeout": {"250m"}})
	fmt.Println(d)

	_, err := deadline.ParseMillis("-5")
	fmt.Println(err)
	// Output:
	// 30s
	// 250ms
	// deadline: malformed timeout value "-5": want a non-negative integer of milliseconds (digits only)
}

// Fail fast: a handler whose work needs at least 200ms refuses a request that
// arrives with less, without starting the work.
func ExamplePropagator_Check() {
	p, _ := deadline.New(deadline.Config{MinRemaining: 200 * time.Millisecond})

	ctx, cancel := p.WithIncoming(context.Background(), http.Header{"X-Request-Timeout-Ms": {"50"}})
	defer cancel()
	err := p.Check(ctx)
	fmt.Println(errors.Is(err, deadline.ErrTooShort), watertight.IsRejection(err))
	// Output:
	// true true
}

// Warnings about values from the wire are counted, and logged at most once a
// WarnInterval per reason and header: export the counts as metrics, for
// example with prometheus.NewCounterFunc(opts, func() float64 { return
// float64(p.Warned(deadline.Malformed)) }).
func ExamplePropagator_Warned() {
	p, _ := deadline.New(deadline.Config{Logger: slog.New(slog.DiscardHandler)})
	for range 3 {
		p.Incoming(http.Header{"X-Request-Timeout-Ms": {"soon"}}) // 1 line logged, 2 only counted
	}
	d, _ := p.Incoming(http.Header{"X-Request-Timeout-Ms": {"-1, 5000", "50"}})
	fmt.Println(d, p.Warned(deadline.Malformed), deadline.Malformed)
	// Output:
	// 50ms 4 malformed
}

// The margin is a share of the time left, from 1ms up to Config.Margin.
func ExamplePropagator_MarginFor() {
	p, _ := deadline.New(deadline.DefaultConfig())
	for _, left := range []time.Duration{5 * time.Second, 150 * time.Millisecond, 10 * time.Millisecond, 1500 * time.Microsecond} {
		fmt.Println(left, "left:", p.MarginFor(left), "margin")
	}
	// Output:
	// 5s left: 100ms margin
	// 150ms left: 15ms margin
	// 10ms left: 1ms margin
	// 1.5ms left: 1ms margin
}
