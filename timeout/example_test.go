package timeout_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/timeout"
)

// An attempt timeout around a slow function: the function sees the deadline
// on its context, and the caller can tell this timeout from its own deadline.
func Example() {
	attempt, err := timeout.New(timeout.Config{Name: "attempt", Timeout: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	p := watertight.MustNew(attempt)

	_, err = watertight.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		select {
		case <-ctx.Done(): // a dependency slower than 10ms
			return "", ctx.Err()
		case <-time.After(time.Minute):
			return "response", nil
		}
	})
	fmt.Println(err)
	fmt.Println("ours:", errors.Is(err, timeout.ErrTimeout))
	fmt.Println("a deadline:", errors.Is(err, context.DeadlineExceeded))

	var te *timeout.Error
	if errors.As(err, &te) {
		fmt.Println("which:", te.Name, te.Timeout)
	}
	// Output:
	// timeout: attempt: timed out after 10ms
	// ours: true
	// a deadline: true
	// which: attempt 10ms
}

// When the caller's own deadline comes first, the error is the caller's, not
// the policy's.
func Example_callerDeadline() {
	attempt, _ := timeout.New(timeout.Config{Name: "attempt", Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()

	err := watertight.MustNew(attempt).Run(ctx, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	fmt.Println(err)
	fmt.Println("ours:", errors.Is(err, timeout.ErrTimeout))
	// Output:
	// context deadline exceeded
	// ours: false
}
