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

// A concurrent-retry budget with Envoy's defaults: the retries in flight at
// once are at most 20% of the requests in progress, and at least three may
// always be. When every request fails at once, a quiet moment gets the
// floor's three retries and a busy one a fifth of its requests, whatever
// came before.
func ExampleConcurrency() {
	c, err := budget.NewConcurrency(budget.ConcurrencyConfig{}) // 20%, at least 3
	if err != nil {
		panic(err)
	}
	for _, active := range []int{10, 100} {
		for range active {
			c.Enter() // once per request, when it starts
		}
		retrying := 0
		for range active { // every request fails and asks for a retry
			if c.TryAcquire() {
				retrying++ // ... the retry runs; then c.Release()
			}
		}
		fmt.Printf("%d requests in progress: %d retries in flight\n", active, retrying)
		for range retrying {
			c.Release() // when each retry attempt ends
		}
		for range active {
			c.Leave() // when each request ends
		}
	}
	s := c.Snapshot()
	fmt.Println("granted:", s.Granted, "refused:", s.Refused, "in flight now:", s.InFlight)
	// Output:
	// 10 requests in progress: 3 retries in flight
	// 100 requests in progress: 20 retries in flight
	// granted: 23 refused: 87 in flight now: 0
}
