package bulkhead_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
)

// A bulkhead of 2 lets two callers in at once and turns the third away at
// once: a full bulkhead is a final answer, which no retry retries.
func ExampleNew() {
	b, err := bulkhead.New(bulkhead.Config{Name: "payments", MaxConcurrent: 2})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for caller := 1; caller <= 3; caller++ {
		if err := b.Acquire(ctx); err != nil {
			fmt.Printf("caller %d: %v (rejection: %t)\n", caller, err, watertight.IsRejection(err))
			continue
		}
		fmt.Printf("caller %d: in\n", caller)
		// ... the call runs, and b.Release() is called when it ends.
	}
	b.Release() // the first two calls end
	b.Release()
	s := b.Snapshot()
	fmt.Printf("active %d, acquired %d, rejected %d\n", s.Active, s.Acquired, s.Rejected)
	// Output:
	// caller 1: in
	// caller 2: in
	// caller 3: bulkhead: payments: full (rejection: true)
	// active 0, acquired 2, rejected 1
}

// In a pipeline the bulkhead sits inside the breaker and outside the attempt
// timeout; the permit is held while the function runs and given back after,
// whatever happens.
func Example_pipeline() {
	b, err := bulkhead.New(bulkhead.Config{MaxConcurrent: 10})
	if err != nil {
		panic(err)
	}
	p := watertight.MustNew(b) // in full: watertight.MustNew(breaker, b, attemptTimeout)
	price, err := watertight.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		fmt.Println("in flight:", b.Snapshot().Active)
		return 42, nil
	})
	fmt.Println(price, err, "in flight after:", b.Snapshot().Active)
	// Output:
	// in flight: 1
	// 42 <nil> in flight after: 0
}

// Call runs a function on the pool's workers and waits for its result. The
// caller can stop waiting (its context), but the work keeps its worker until
// it returns, so the pool's limit holds.
func ExampleCall() {
	p, err := bulkhead.NewPool(bulkhead.PoolConfig{Name: "reports", Workers: 2, QueueSize: 10})
	if err != nil {
		panic(err)
	}
	defer p.Shutdown(context.Background())

	n, err := bulkhead.Call(context.Background(), p, func(ctx context.Context) (int, error) {
		return len(strings.Fields("render the quarterly report")), nil
	})
	fmt.Println(n, err)

	_, err = bulkhead.Call(context.Background(), p, func(ctx context.Context) (int, error) {
		panic("bad input")
	})
	var pe *bulkhead.PanicError
	fmt.Println(errors.As(err, &pe), err)
	// Output:
	// 4 <nil>
	// true bulkhead: task panicked: bad input
}

// A Registry isolates keys from each other: one tenant filling its bulkhead
// does not slow another.
func ExampleRegistry() {
	r, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{
		Config:  bulkhead.Config{MaxConcurrent: 1},
		MaxKeys: 100,
	})
	if err != nil {
		panic(err)
	}
	acme, _ := r.Get("acme")
	globex, _ := r.Get("globex")
	fmt.Println(acme.TryAcquire(), acme.TryAcquire(), globex.TryAcquire())
	for _, s := range r.Snapshots() {
		fmt.Printf("%s: %d/%d\n", s.Name, s.Active, s.MaxConcurrent)
	}
	// Output:
	// true false true
	// acme: 1/1
	// globex: 1/1
}

// Weighted permits bound a shared budget rather than a number of calls: here
// 10 units of decoding memory, a small image taking 1 and a large one 6. A
// request larger than the whole budget fails at once; a large one waiting at
// the head of the queue is not overtaken by small ones.
func ExampleBulkhead_AcquireN() {
	b, err := bulkhead.New(bulkhead.Config{Name: "decode", MaxConcurrent: 10, MaxWait: -1})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := b.AcquireN(ctx, 6); err != nil { // a large image
		panic(err)
	}
	fmt.Println("large in; small fits:", b.TryAcquireN(4), "and one more:", b.TryAcquire())
	err = b.AcquireN(ctx, 11)
	fmt.Println(err, errors.Is(err, bulkhead.ErrTooMany))
	b.ReleaseN(4) // the small ones end
	b.ReleaseN(6) // the large one ends
	s := b.Snapshot()
	fmt.Printf("active %d, acquired %d, rejected %d\n", s.Active, s.Acquired, s.Rejected)
	// Output:
	// large in; small fits: true and one more: false
	// bulkhead: decode: more permits asked for than MaxConcurrent true
	// active 0, acquired 2, rejected 2
}
