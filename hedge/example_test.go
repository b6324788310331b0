package hedge_test

import (
	"context"
	"fmt"
	"time"

	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
)

// A read from replicated storage: attempt 1 goes to the first replica; if
// it has not answered within the delay, attempt 2 goes to the second, and
// the first answer wins. Here the first replica stalls, so the hedge wins
// and the stalled attempt is cancelled with hedge.ErrLost.
func Example() {
	hedges, _ := budget.New(budget.Config{Ratio: 0.05}) // at most ~5% extra requests
	p, err := hedge.New(hedge.Config{
		Name:   "storage",
		Delay:  5 * time.Millisecond, // or Percentile: 0.95 with a MinDelay
		Budget: hedges,
	})
	if err != nil {
		panic(err)
	}
	replicas := []string{"replica-a", "replica-b"}
	lost := make(chan error, 1)
	read := func(ctx context.Context, attempt int) (string, error) {
		replica := replicas[(attempt-1)%len(replicas)]
		if replica == "replica-a" { // stalls until cancelled
			<-ctx.Done()
			lost <- context.Cause(ctx)
			return "", ctx.Err()
		}
		return "value from " + replica, nil
	}
	// Reads are safe to send twice: say so.
	ctx := retry.Idempotent(context.Background())
	v, err := hedge.Do(ctx, p, read)
	fmt.Println(v, err)
	fmt.Println("the stalled attempt:", <-lost)
	s := p.Snapshot()
	fmt.Printf("calls %d, hedges sent %d, won %d, extra requests %.0f%%\n", s.Calls, s.Sent, s.Won, s.ExtraPercent())
	// Output:
	// value from replica-b <nil>
	// the stalled attempt: hedge: lost the race, another attempt answered first: context canceled
	// calls 1, hedges sent 1, won 1, extra requests 100%
}

// DefaultConfig hedges at the p95 of recent latencies, never sooner than
// 10 ms, which is also the delay until 100 latencies are known.
func ExampleDefaultConfig() {
	p, err := hedge.New(hedge.DefaultConfig())
	if err != nil {
		panic(err)
	}
	fmt.Println("delay before any latency is known:", p.Delay())
	// Output:
	// delay before any latency is known: 10ms
}
