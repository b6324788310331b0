package circuit_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
)

// A breaker for one dependency opens once half of its last calls failed, then
// rejects at once without calling it.
func Example() {
	b, err := circuit.New(circuit.Config{
		Name:                 "recommendations",
		WindowSize:           10,
		MinCalls:             4,
		FailureRateThreshold: 50,
		OnStateChange: func(ev circuit.StateChange) {
			fmt.Printf("%s: %v -> %v (%s)\n", ev.Name, ev.From, ev.To, ev.Reason)
		},
	})
	if err != nil {
		panic(err)
	}
	down := errors.New("connection refused")
	calls := 0
	for range 6 {
		_, err := circuit.Call(context.Background(), b, func(context.Context) (string, error) {
			calls++
			return "", down
		})
		if errors.Is(err, circuit.ErrOpen) {
			fmt.Println("rejected without calling; a rejection:", watertight.IsRejection(err))
		}
	}
	fmt.Println("calls made:", calls)
	// Output:
	// recommendations: closed -> open (failure rate 100% >= 50% over 4 calls)
	// rejected without calling; a rejection: true
	// rejected without calling; a rejection: true
	// calls made: 4
}

// The two-step form, for middleware: Allow before, Done (or Record) after.
func ExampleBreaker_Allow() {
	b, _ := circuit.New(circuit.Config{Name: "search"})
	permit, err := b.Allow()
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	// ... make the call, then say how it went:
	permit.Done(watertight.Success)
	fmt.Println(b.Snapshot().Calls, "call recorded, state", b.State())
	// Output: 1 call recorded, state closed
}

// One breaker per host, from one configuration.
func ExampleRegistry() {
	r, _ := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{MinCalls: 5, WindowSize: 10}})
	a, _ := r.Get("api.example.com")
	again, _ := r.Get("api.example.com")
	other, _ := r.Get("cdn.example.com")
	fmt.Println(a == again, a == other, r.Len())
	// Output: true false 2
}

// Config.Listener receives the breaker's events in the shape every package
// shares (watertight.Event); a log or metrics adapter takes them all.
func ExampleConfig_listener() {
	b, _ := circuit.New(circuit.Config{
		Name: "ratings", WindowSize: 2, MinCalls: 2,
		OpenJitter: -1, // exact open durations, for the output below
		Listener: watertight.ListenerFunc(func(e watertight.Event) {
			switch e.Kind {
			case watertight.EventStateChange:
				fmt.Printf("%s %s: %s -> %s for %v (%s)\n", e.Source, e.Name, e.From, e.To, e.Delay, e.Reason)
			case watertight.EventRejected:
				fmt.Printf("%s %s: rejected: %v\n", e.Source, e.Name, e.Err)
			}
		}),
	})
	for range 3 {
		_, _ = circuit.Call(context.Background(), b, func(context.Context) (int, error) { return 0, errors.New("down") })
	}
	// Output:
	// circuit ratings: closed -> open for 30s (failure rate 100% >= 50% over 2 calls)
	// circuit ratings: rejected: circuit: open
}

// The textbook's breaker: five failures in a row trip it, with no rate and
// no minimum number of calls; the snapshot says which rule opened it and
// keeps the evidence. A single successful trial closes it again.
func ExampleConfig_consecutiveFailures() {
	b, err := circuit.New(circuit.Config{
		Name:                 "inventory",
		ConsecutiveFailures:  5,
		FailureRateThreshold: -1, // the rate rule off: only the streak trips it
		HalfOpenCalls:        1,
	})
	if err != nil {
		panic(err)
	}
	for _, ok := range []bool{false, false, true, false, false, false, false, false} {
		if p, err := b.Allow(); err == nil {
			if ok {
				p.Done(watertight.Success)
			} else {
				p.Done(watertight.Failure)
			}
		}
	}
	s := b.Snapshot()
	fmt.Println(s.State, "by", s.Rule)
	fmt.Println(s.Reason)
	fmt.Printf("evidence: %d calls, %d failures, %d in a row\n", s.Calls, s.Failures, s.ConsecutiveFailures)

	b.ForceHalfOpen() // an operator probes now rather than in 30s
	p, _ := b.Allow()
	p.Done(watertight.Success)
	fmt.Println(b.State())
	// Output:
	// open by consecutive failures
	// consecutive failures: 5 in a row (>= 5)
	// evidence: 8 calls, 7 failures, 5 in a row
	// closed
}
