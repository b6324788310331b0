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

// Each tenant's calls go to its own two hosts of eight. One tenant's calls
// eject its hosts: its next call fails, unless it may spill to the rest of
// the pool, and the other tenants lose at most one host each.
func ExampleBalancer_Shard() {
	pool, err := balance.New(balance.Config{
		Name: "catalog",
		Hosts: []string{
			"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080", "10.0.0.4:8080",
			"10.0.0.5:8080", "10.0.0.6:8080", "10.0.0.7:8080", "10.0.0.8:8080",
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	shards := balance.ShardConfig{Size: 2}
	tenants := []string{"acme", "globex", "initech", "umbrella"}
	for _, tenant := range tenants {
		s := pool.Shard(tenant, shards)
		fmt.Println(tenant, addrsOf(s.Hosts()))
	}
	// acme's calls fail on every host they reach: five in a row eject a
	// host, and a retry (Pick(h)) goes to the shard's other one.
	acme := pool.Shard("acme", shards)
	var last *balance.Host
	for range 10 {
		h := acme.Pick(last)
		if h == nil {
			break
		}
		h.Done(watertight.Failure, time.Millisecond)
		last = h
	}
	if h := acme.Pick(nil); h == nil {
		fmt.Println("acme:", balance.ErrShardDown)
	}
	spilling := pool.Shard("acme", balance.ShardConfig{Size: 2, Spill: true})
	if h := spilling.Pick(nil); h != nil {
		fmt.Println("acme, spilling: a host outside its shard:", !acme.Contains(h))
		h.Done(watertight.Success, time.Millisecond)
	}
	for _, tenant := range tenants[1:] {
		s := pool.Shard(tenant, shards)
		var left []*balance.Host
		for _, h := range s.Hosts() {
			if !h.Ejected() {
				left = append(left, h)
			}
		}
		fmt.Println(tenant, "keeps", addrsOf(left))
	}
	// Output:
	// acme [10.0.0.2:8080 10.0.0.5:8080]
	// globex [10.0.0.6:8080 10.0.0.7:8080]
	// initech [10.0.0.4:8080 10.0.0.8:8080]
	// umbrella [10.0.0.5:8080 10.0.0.7:8080]
	// acme: balance: every host of the shard is ejected
	// acme, spilling: a host outside its shard: true
	// globex keeps [10.0.0.6:8080 10.0.0.7:8080]
	// initech keeps [10.0.0.4:8080 10.0.0.8:8080]
	// umbrella keeps [10.0.0.7:8080]
}

// addrsOf returns the addresses of hs.
func addrsOf(hs []*balance.Host) []string {
	a := make([]string, len(hs))
	for i, h := range hs {
		a[i] = h.Addr()
	}
	return a
}
