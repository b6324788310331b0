package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/fallback"
)

// A price lookup that falls back, best first, to the last price seen for
// the item (up to ten minutes old), then to the catalogue's list price, then
// to a clear error.
func Example() {
	cache, _ := fallback.NewLastKnownGood[int](fallback.CacheConfig{MaxStale: 10 * time.Minute})
	listPrice := func(ctx context.Context, sku string, err error) (int, error) {
		if sku == "unlisted" {
			return 0, errors.New("not in the catalogue")
		}
		return 1000, nil // no discounts, but a price
	}
	errUnavailable := errors.New("prices unavailable, try again shortly")
	prices, err := fallback.New(fallback.Config{Name: "prices"},
		fallback.Stale(cache),
		fallback.Reduced(listPrice),
		fallback.Error[int](errUnavailable),
	)
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	up := func(ctx context.Context) (int, error) { return 899, nil }
	down := func(ctx context.Context) (int, error) { return 0, errors.New("connection refused") }

	r, _ := prices.DoResult(ctx, "sku-1", up) // a success fills the cache
	fmt.Println(r.Value, "from", r.Kind)
	r, _ = prices.DoResult(ctx, "sku-1", down)
	fmt.Println(r.Value, "from", r.Kind, "because", r.Cause)
	r, _ = prices.DoResult(ctx, "sku-2", down)
	fmt.Println(r.Value, "from", r.Kind)
	_, err = prices.Do(ctx, "unlisted", down)
	fmt.Println(err, errors.Is(err, errUnavailable))
	// Output:
	// 899 from primary
	// 899 from stale because connection refused
	// 1000 from reduced
	// prices unavailable, try again shortly: connection refused true
}

// Steps narrowed to some errors: a default only while the breaker is open
// (a rejection), and deferring the work on any other failure.
func ExampleStep_When() {
	var queue []string
	chain, _ := fallback.New(fallback.Config{},
		fallback.Default("recommendations paused").When(fallback.OnRejection),
		fallback.Defer(func(ctx context.Context, key string, err error) error {
			queue = append(queue, key)
			return nil
		}, "we will e-mail you"),
	)
	open := func(context.Context) (string, error) { return "", watertight.NewRejection("circuit: open") }
	broken := func(context.Context) (string, error) { return "", errors.New("500") }

	v, _ := chain.Do(context.Background(), "user-1", open)
	fmt.Println(v)
	v, _ = chain.Do(context.Background(), "user-2", broken)
	fmt.Println(v, queue)
	// Output:
	// recommendations paused
	// we will e-mail you [user-2]
}

// An authorisation check that cannot be made denies.
func ExampleFailClosed() {
	authz := func(ctx context.Context) (bool, error) {
		return false, errors.New("authz: timed out")
	}
	allowed, err := fallback.FailClosed(context.Background(), authz)
	fmt.Println(allowed, errors.Is(err, fallback.ErrCheckFailed))
	// Output: false true
}
