package watertightprom_test

import (
	"testing"

	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightprom "github.com/watertight-go/watertight/contrib/watertightprom"
	"github.com/watertight-go/watertight/watch"
)

// A Collector given a shared watch.Set reads what the program registered
// there, and its Add methods add to that set (which the other exporters and
// the dashboard read too).
func TestSharedSources(t *testing.T) {
	set := new(watch.Set)
	b, err := circuit.New(circuit.Config{Name: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	set.AddBreaker(b)
	bal, err := balance.New(balance.Config{Name: "backends", Hosts: []string{"a:1"}})
	if err != nil {
		t.Fatal(err)
	}
	set.AddBalancer(bal) // a kind the Collector has no metrics for: skipped
	c := newCollector(t, watertightprom.Config{Sources: set})
	want(t, scrape(t, c), map[string]float64{
		`watertight_circuit_state{key="",name="payments",state="closed"}`: 1,
	})

	bh, err := bulkhead.New(bulkhead.Config{Name: "search", MaxConcurrent: 3})
	if err != nil {
		t.Fatal(err)
	}
	remove := c.AddBulkhead(bh)
	if set.Len() != 3 {
		t.Fatalf("the shared set holds %d sources after AddBulkhead, want 3", set.Len())
	}
	remove()
	if set.Len() != 2 {
		t.Fatalf("the shared set holds %d sources after the remove, want 2", set.Len())
	}
}
