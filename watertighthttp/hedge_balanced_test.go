package watertighthttp_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// A hedge over a Transport with a Balancer never goes to a host an attempt
// of its request already went to, even when the balancer would rather:
// with requests in flight from other callers, the first attempt's host
// can be the least busy one when the hedge is sent.
func TestHedgeGoesToAnotherHost(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]int{} // request id -> hosts its attempts reached
	p := newPool(t, 2, balance.Config{Name: "catalog", ConsecutiveErrors: -1}, func(i int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("X-Request")] = append(seen[r.Header.Get("X-Request")], i)
		mu.Unlock()
		select {
		case <-time.After(20 * time.Millisecond): // the hosts' pace, not synchronisation
		case <-r.Context().Done():
		}
	})
	policy, err := hedge.New(hedge.Config{Name: "h", Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ht, err := watertighthttp.NewHedgingTransport(watertighthttp.HedgeConfig{
		Base:   p.transport(t, watertighthttp.TransportConfig{Retry: retry.Config{MaxAttempts: 1}, MaxEndpoints: -1}),
		Policy: policy,
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 10 {
				send(t, ht, "GET", http.Header{"X-Request": {fmt.Sprint(g, "/", i)}})
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	hedged := 0
	for id, hosts := range seen {
		if len(hosts) > 1 {
			hedged++
		}
		for j := range hosts {
			for k := range j {
				if hosts[j] == hosts[k] {
					t.Fatalf("request %s: two attempts went to host %d (hosts %v)", id, hosts[j], hosts)
				}
			}
		}
	}
	if hedged < 30 {
		t.Fatalf("only %d of 60 requests were hedged: the test did not exercise hedges", hedged)
	}
}
