package limit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/watertight-go/watertight/limit"
)

// A limiter admits up to its limit and moves it from what the calls
// measured: here an algorithm of our own doubles the limit after every
// window of four calls without drops.
func Example() {
	l, err := limit.New(limit.Config{
		Name:          "search",
		InitialLimit:  2,
		WindowSamples: 4,
		MinWindow:     -1, // judge every 4 calls, whatever the time
		Algorithm:     func() limit.Algorithm { return doubling{} },
	})
	if err != nil {
		panic(err)
	}
	for range 4 {
		p, err := l.Acquire(context.Background())
		if err != nil {
			panic(err)
		}
		p.Done(3 * time.Millisecond) // the call took 3ms
	}
	fmt.Println("limit:", l.Limit())
	s := l.Snapshot()
	fmt.Println("last window:", s.Last.Samples, "calls, mean", s.Last.MeanLatency)
	// Output:
	// limit: 4
	// last window: 4 calls, mean 3ms
}

type doubling struct{}

func (doubling) Name() string { return "doubling" }

func (doubling) Update(w limit.Window) float64 {
	if w.Drops > 0 {
		return float64(w.Limit) / 2
	}
	return float64(w.Limit) * 2
}
