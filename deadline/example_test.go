package deadline_test

import (
	"context"
	"errors"
	"fmt"
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
