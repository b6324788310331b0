package backoff_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/watertight-go/watertight/backoff"
)

// Without jitter the delays double from 2·Base — the first retry is n = 1 —
// until they reach Cap.
func Example() {
	b, err := backoff.New(backoff.Config{
		Jitter: backoff.None,
		Base:   100 * time.Millisecond,
		Cap:    time.Second,
	})
	if err != nil {
		panic(err)
	}
	for n := 1; n <= 5; n++ {
		fmt.Printf("retry %d: wait %v\n", n, b.Delay(n, 0))
	}
	// Output:
	// retry 1: wait 200ms
	// retry 2: wait 400ms
	// retry 3: wait 800ms
	// retry 4: wait 1s
	// retry 5: wait 1s
}

// Full jitter, the default, draws each delay from [0, min(Cap, Base·2^n)].
// A seeded source makes the draws reproducible, for simulations and tests;
// leave Rand nil in production.
func Example_fullJitter() {
	b, err := backoff.New(backoff.Config{
		Base: 100 * time.Millisecond,
		Cap:  time.Second,
		Rand: rand.New(rand.NewPCG(1, 2)).Float64,
	})
	if err != nil {
		panic(err)
	}
	for n := 1; n <= 5; n++ {
		fmt.Printf("retry %d: wait %v\n", n, b.Delay(n, 0).Round(time.Millisecond))
	}
	// Output:
	// retry 1: wait 135ms
	// retry 2: wait 185ms
	// retry 3: wait 407ms
	// retry 4: wait 430ms
	// retry 5: wait 798ms
}

// Decorrelated jitter grows from the previous delay rather than the retry
// number: the caller passes back the delay it last received.
func Example_decorrelated() {
	b, err := backoff.New(backoff.Config{
		Jitter: backoff.Decorrelated,
		Base:   100 * time.Millisecond,
		Cap:    time.Second,
		Rand:   rand.New(rand.NewPCG(1, 2)).Float64,
	})
	if err != nil {
		panic(err)
	}
	var prev time.Duration // 0 before the first retry
	for n := 1; n <= 5; n++ {
		prev = b.Delay(n, prev)
		fmt.Printf("retry %d: wait %v\n", n, prev.Round(time.Millisecond))
	}
	// Output:
	// retry 1: wait 235ms
	// retry 2: wait 380ms
	// retry 3: wait 628ms
	// retry 4: wait 867ms
	// retry 5: wait 1s
}

// A nil *Backoff means no backoff: every delay is zero.
func ExampleBackoff_Delay_nil() {
	var b *backoff.Backoff
	fmt.Println(b.Delay(3, 0))
	// Output: 0s
}
