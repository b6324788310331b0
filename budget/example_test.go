package budget_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
)

// A dependency that is down: every request fails and asks for a retry. The
// budget lets one retry through per ten requests, so the dependency sees 1.1
// times its normal load instead of twice (or three times, with three
// attempts).
func Example() {
	b, err := budget.New(budget.Config{
		Ratio:        0.1, // the default
		MinPerSecond: -1,  // no floor, to keep the arithmetic plain
	})
	if err != nil {
		panic(err)
	}
	requests, retries := 1000, 0
	for range requests {
		b.Deposit() // once per request, not per attempt
		// ... the call fails ...
		if !b.Withdraw() {
			continue // give up: return (or wrap) budget.ErrExhausted
		}
		retries++
		// ... the retry fails too ...
	}
	fmt.Printf("%d requests, %d retries: %.2f× the load\n", requests, retries, float64(requests+retries)/float64(requests))
	s := b.Snapshot()
	fmt.Println("granted:", s.Withdrawals, "refused:", s.Refused)
	// Output:
	// 1000 requests, 100 retries: 1.10× the load
	// granted: 100 refused: 900
}

// A healthy stretch saves up at most MaxTokens retries: a burst of failures
// after it gets those, and then one per ten requests.
func ExampleBudget_Withdraw() {
	b, _ := budget.New(budget.Config{MaxTokens: 5, MinPerSecond: -1})
	for range 1000 { // a healthy stretch: requests, no retries
		b.Deposit()
	}
	burst := 0
	for b.Withdraw() {
		burst++
	}
	fmt.Println("saved-up retries:", burst)
	fmt.Println("when exhausted:", budget.ErrExhausted, "- a rejection:", watertight.IsRejection(budget.ErrExhausted))
	// Output:
	// saved-up retries: 5
	// when exhausted: budget: exhausted - a rejection: true
}

// A nil *Budget means no budget: every retry is granted.
func ExampleBudget_nil() {
	var b *budget.Budget
	b.Deposit()
	fmt.Println(b.Withdraw(), b.Withdraw())
	// Output: true true
}

// Client-side adaptive throttling in a pipeline, in front of a backend that
// rejects everything for overload: after the first few requests the
// throttler rejects almost all of them locally, without sending them.
func ExampleThrottler() {
	rng := rand.New(rand.NewPCG(1, 2)) // seeded, for a reproducible output
	th, err := budget.NewThrottler(budget.ThrottleConfig{Rand: rng.Float64})
	if err != nil {
		panic(err)
	}
	p := watertight.MustNew(th) // in a real pipeline: retry, breaker, bulkhead, th, attempt timeout
	sent, throttled := 0, 0
	for range 1000 {
		err := p.Run(context.Background(), func(context.Context) error {
			sent++
			return watertight.ErrOverloaded // the backend is overloaded
		})
		if errors.Is(err, budget.ErrThrottled) {
			throttled++
		}
	}
	fmt.Printf("sent %d, throttled locally %d\n", sent, throttled)
	fmt.Printf("reject probability now: %.3f\n", th.Snapshot().RejectProbability)
	// Output:
	// sent 12, throttled locally 988
	// reject probability now: 0.999
}

// The two-step form, for middleware: Allow before the call, Accepted after
// it unless the backend rejected it for overload.
func ExampleThrottler_Allow() {
	th, _ := budget.NewThrottler(budget.ThrottleConfig{K: 2})
	for range 10 {
		if err := th.Allow(); err != nil {
			fmt.Println("rejected locally:", err)
			continue
		}
		// ... the backend answered, not with an overload rejection:
		th.Accepted()
	}
	s := th.Snapshot()
	fmt.Println(s.Requests, "requests,", s.Accepts, "accepts, probability", s.RejectProbability)
	// Output: 10 requests, 10 accepts, probability 0
}
