package balance_test

import (
	"fmt"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
)

func Example() {
	b, err := balance.New(balance.Config{
		Name:  "catalog",
		Hosts: []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"},
		// Eject a host after 3 failures in a row (the default is 5).
		ConsecutiveErrors: 3,
		Listener: watertight.ListenerFunc(func(e watertight.Event) {
			fmt.Printf("%s %s -> %s (%s) for %v\n", e.Key, e.From, e.To, e.Reason, e.Delay)
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// A call: pick a host, call it, say how it went.
	call := func(ok func(addr string) bool) {
		start := time.Now()
		h := b.Pick(nil)
		o := watertight.Success
		if !ok(h.Addr()) {
			o = watertight.Failure
			// A retry would call b.Pick(h): another host.
		}
		h.Done(o, time.Since(start))
	}
	down := func(addr string) bool { return addr != "10.0.0.2:8080" }
	for b.Snapshot().Ejected == 0 {
		call(down)
	}
	s := b.Snapshot()
	fmt.Printf("%d of %d hosts ejected\n", s.Ejected, len(s.Hosts))
	for range 100 {
		if h := b.Pick(nil); h.Addr() == "10.0.0.2:8080" {
			fmt.Println("picked an ejected host")
		} else {
			h.Done(watertight.Success, time.Millisecond)
		}
	}
	// Output:
	// 10.0.0.2:8080 active -> ejected (consecutive_errors) for 30s
	// 1 of 3 hosts ejected
}

func ExampleConfig_validation() {
	_, err := balance.New(balance.Config{Name: "catalog", Hosts: []string{"a:80", "a:80"}})
	fmt.Println(err)
	// Output:
	// balance: invalid config "catalog": Hosts is ["a:80" "a:80"]: each host may appear once; a:80 is repeated
}
