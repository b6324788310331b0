package retry_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/retry"
)

// A retry policy in the standard pipeline: outside the breaker, so that each
// attempt passes it and an open breaker ends the retries.
func Example() {
	wait, _ := backoff.New(backoff.Config{Jitter: backoff.None, Base: time.Millisecond, Cap: 10 * time.Millisecond})
	policy, _ := retry.New(retry.Config{
		Name:       "inventory",
		Idempotent: true, // every call through it is a read
		Backoff:    wait,
		OnEvent: func(ev retry.Event) {
			fmt.Printf("%s: %v after attempt %d (wait %v)\n", ev.Name, ev.Kind, ev.Attempt, ev.Delay)
		},
	})
	breaker, _ := circuit.New(circuit.Config{Name: "inventory"})
	p := watertight.MustNew(policy, breaker)

	calls := 0
	stock, err := watertight.Do(context.Background(), p, func(context.Context) (int, error) {
		calls++
		if calls < 3 {
			return 0, syscall.ECONNRESET // transient
		}
		return 42, nil
	})
	fmt.Println(stock, err)
	// Output:
	// inventory: scheduled after attempt 1 (wait 2ms)
	// inventory: scheduled after attempt 2 (wait 4ms)
	// 42 <nil>
}

// A call that is not marked idempotent is not retried, and the error says so.
func ExampleIdempotent() {
	quick, _ := backoff.New(backoff.Config{Base: time.Millisecond, Cap: time.Millisecond})
	policy, _ := retry.New(retry.Config{Backoff: quick})
	charge := func(context.Context) (string, error) { return "", syscall.ECONNRESET }

	_, err := retry.Do(context.Background(), policy, charge)
	fmt.Println(errors.Is(err, retry.ErrNotIdempotent))

	// With an idempotency key the server deduplicates, so retrying is safe.
	ctx := retry.WithIdempotencyKey(context.Background(), "order-1234")
	_, err = retry.Do(ctx, policy, charge)
	fmt.Println(errors.Is(err, retry.ErrExhausted))
	// Output:
	// true
	// true
}

func ExampleParseRetryAfter() {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "Mon, 30 Nov 2026 12:00:30 GMT", "soon"} {
		d, err := retry.ParseRetryAfter(v, now)
		fmt.Println(d, err != nil)
	}
	// Output:
	// 2m0s false
	// 30s false
	// 0s true
}
