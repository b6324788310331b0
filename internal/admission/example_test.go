package admission_test

import (
	"context"
	"fmt"

	"github.com/watertight-go/watertight/internal/admission"
)

func Example() {
	q := admission.New("GET /items", 1, 1) // one in flight, one waiting
	ctx := context.Background()
	const critical, criticalPlus = 0, 1

	fmt.Println(q.Acquire(ctx, critical)) // a place is free: in at once
	fmt.Println(q.TryAcquire())           // no place free: TryAcquire never waits

	queued := make(chan string, 2)
	q.SetQueuedHook(func(name string) { queued <- name })
	waited := make(chan error)
	go func() { waited <- q.Acquire(ctx, critical) }() // waits in the queue
	fmt.Println("queued:", <-queued)
	// The queue is full: a request of higher criticality displaces the
	// waiter of lower criticality...
	go func() { waited <- q.Acquire(ctx, criticalPlus) }()
	fmt.Println(<-waited)
	fmt.Println("queued:", <-queued)
	q.Release() // ...and is let in when a place frees.
	fmt.Println(<-waited)
	q.Release()
	// Output:
	// <nil>
	// false
	// queued: GET /items
	// admission: displaced from the queue by a request of higher criticality
	// queued: GET /items
	// <nil>
}
