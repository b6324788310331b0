package watertight_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/timeout"
)

// A total timeout around an attempt timeout, in the standard order; the
// function returns a value through the pipeline. Breakers, bulkheads and
// retries take their place between the two timeouts.
func ExampleDo() {
	total, _ := timeout.New(timeout.Config{Name: "total", Timeout: 5 * time.Second})
	attempt, _ := timeout.New(timeout.Config{Name: "attempt", Timeout: time.Second})
	p := watertight.MustNew(total, attempt)

	price, err := watertight.Do(context.Background(), p, func(ctx context.Context) (float64, error) {
		deadline, _ := ctx.Deadline()
		// The attempt timeout, the nearer deadline, is what the call sees.
		fmt.Println("time left under a second:", time.Until(deadline) <= time.Second)
		return 9.99, nil
	})
	fmt.Println(price, err)

	// When the attempt runs out of time, the error says which timeout fired.
	_, err = watertight.Do(context.Background(), watertight.MustNew(total, mustTimeout("attempt", 10*time.Millisecond)),
		func(ctx context.Context) (float64, error) {
			<-ctx.Done() // a slow dependency
			return 0, ctx.Err()
		})
	fmt.Println(err)
	fmt.Println(errors.Is(err, timeout.ErrTimeout), watertight.Classify(context.Background(), err))
	// Output:
	// time left under a second: true
	// 9.99 <nil>
	// timeout: attempt: timed out after 10ms
	// true failure
}

func mustTimeout(name string, d time.Duration) *timeout.Timeout {
	t, err := timeout.New(timeout.Config{Name: name, Timeout: d})
	if err != nil {
		panic(err)
	}
	return t
}

// ErrClosed is a rejection of the user's own: a protection that refuses
// calls while the service shuts down.
var ErrClosed = watertight.NewRejection("shop: closed")

func ExampleIsRejection() {
	err := fmt.Errorf("get price: %w", ErrClosed)
	fmt.Println(watertight.IsRejection(err), errors.Is(err, ErrClosed))
	fmt.Println(watertight.Classify(context.Background(), err))

	err = fmt.Errorf("get price: %w", errors.New("connection refused"))
	fmt.Println(watertight.IsRejection(err))
	fmt.Println(watertight.Classify(context.Background(), err))
	// Output:
	// true true
	// ignored
	// false
	// failure
}

// Mark says how an error counts for the protections, for example a caller's
// mistake that says nothing about the dependency's health.
func ExampleMark() {
	errNotFound := errors.New("not found")
	err := watertight.Mark(errNotFound, watertight.Ignored)
	fmt.Println(err, errors.Is(err, errNotFound), watertight.Classify(context.Background(), err))
	// Output:
	// not found true ignored
}
