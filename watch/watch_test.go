package watch_test

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/watch"
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Every Add method files its protection under the right kind and name, with
// the matching pointer set and no other.
func TestAddEveryKind(t *testing.T) {
	br := must(circuit.New(circuit.Config{Name: "payments"}))
	brs := must(circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{Name: "hosts"}}))
	bh := must(bulkhead.New(bulkhead.Config{Name: "payments", MaxConcurrent: 4}))
	bhs := must(bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 4}}))
	part := must(bulkhead.NewPartitioned(bulkhead.PartitionedConfig{Name: "api", MaxConcurrent: 4, Partitions: []bulkhead.PartitionConfig{{Name: "free"}, {Name: "paid"}}}))
	pool := must(bulkhead.NewPool(bulkhead.PoolConfig{Name: "mail", Workers: 1}))
	defer pool.Shutdown(t.Context())
	bud := must(budget.New(budget.Config{}))
	thr := must(budget.NewThrottler(budget.ThrottleConfig{}))
	con := must(budget.NewConcurrency(budget.ConcurrencyConfig{}))
	hp := must(hedge.New(hedge.Config{Name: "search", Delay: 1}))
	lim := must(limit.New(limit.Config{Name: "api"}))
	lims := must(limit.NewRegistry(limit.RegistryConfig{}))
	bal := must(balance.New(balance.Config{Name: "backends", Hosts: []string{"a:1", "b:1"}}))

	var set watch.Set
	set.AddBreaker(br)
	set.AddBreakerRegistry("hosts", brs)
	set.AddBulkhead(bh)
	set.AddBulkheadRegistry("routes", bhs)
	set.AddPartitioned(part)
	set.AddPool(pool)
	set.AddBudget("retries", bud)
	set.AddThrottler("throttle", thr)
	set.AddConcurrency("retry-slots", con)
	set.AddHedge(hp)
	set.AddLimiter(lim)
	set.AddLimiterRegistry("tenants", lims)
	set.AddBalancer(bal)

	type want struct {
		kind watch.Kind
		name string
		ptr  func(watch.Source) any
	}
	wants := []want{
		{watch.Circuit, "hosts", func(s watch.Source) any { return s.Breakers }},
		{watch.Circuit, "payments", func(s watch.Source) any { return s.Breaker }},
		{watch.Bulkhead, "api", func(s watch.Source) any { return s.Partitioned }},
		{watch.Bulkhead, "payments", func(s watch.Source) any { return s.Bulkhead }},
		{watch.Bulkhead, "routes", func(s watch.Source) any { return s.Bulkheads }},
		{watch.Pool, "mail", func(s watch.Source) any { return s.Pool }},
		{watch.Budget, "retries", func(s watch.Source) any { return s.Budget }},
		{watch.Throttler, "throttle", func(s watch.Source) any { return s.Throttler }},
		{watch.Concurrency, "retry-slots", func(s watch.Source) any { return s.Concurrency }},
		{watch.Hedge, "search", func(s watch.Source) any { return s.Hedge }},
		{watch.Limiter, "api", func(s watch.Source) any { return s.Limiter }},
		{watch.Limiter, "tenants", func(s watch.Source) any { return s.Limiters }},
		{watch.Balancer, "backends", func(s watch.Source) any { return s.Balancer }},
	}
	got := set.Sources()
	if len(got) != len(wants) || set.Len() != len(wants) {
		t.Fatalf("%d sources (Len %d), want %d", len(got), set.Len(), len(wants))
	}
	for i, w := range wants {
		s := got[i]
		if s.Kind != w.kind || s.Name != w.name {
			t.Errorf("source %d is %v %q, want %v %q (sorted by kind, then name)", i, s.Kind, s.Name, w.kind, w.name)
		}
		if set := countSet(s); set != 1 {
			t.Errorf("%v %q has %d pointers set, want 1", s.Kind, s.Name, set)
		}
		if p := w.ptr(s); reflect.ValueOf(p).IsNil() {
			t.Errorf("%v %q: the matching pointer is nil", s.Kind, s.Name)
		}
	}
}

func countSet(s watch.Source) int {
	n := 0
	for _, p := range []bool{s.Breaker != nil, s.Breakers != nil, s.Bulkhead != nil, s.Bulkheads != nil, s.Partitioned != nil, s.Pool != nil,
		s.Budget != nil, s.Throttler != nil, s.Concurrency != nil, s.Hedge != nil, s.Limiter != nil, s.Limiters != nil, s.Balancer != nil} {
		if p {
			n++
		}
	}
	return n
}

func TestReplaceAndRemove(t *testing.T) {
	var set watch.Set
	a := must(circuit.New(circuit.Config{Name: "payments"}))
	b := must(circuit.New(circuit.Config{Name: "payments"}))
	bh := must(bulkhead.New(bulkhead.Config{Name: "payments", MaxConcurrent: 1}))
	g0 := set.Generation()
	removeA := set.AddBreaker(a)
	set.AddBulkhead(bh) // another kind, same name: both kept
	if n := set.Len(); n != 2 {
		t.Fatalf("%d sources, want 2", n)
	}
	removeB := set.AddBreaker(b) // replaces a
	g1 := set.Generation()
	if g1 == g0 {
		t.Fatal("Generation did not change after adds")
	}
	removeA() // a was replaced: nothing happens
	if set.Generation() != g1 {
		t.Error("a stale remove changed the Generation")
	}
	if s := set.Sources(); len(s) != 2 || s[0].Breaker != b {
		t.Fatalf("after a stale remove: %+v, want b and the bulkhead", s)
	}
	removeB()
	removeB() // twice: nothing more
	if s := set.Sources(); len(s) != 1 || s[0].Bulkhead != bh {
		t.Fatalf("after removing b: %+v, want the bulkhead alone", s)
	}
}

// A partitioned bulkhead is in the Bulkhead kind: under the name of a
// bulkhead it replaces it, and a bulkhead replaces it in turn.
func TestPartitionedSharesBulkheadKind(t *testing.T) {
	var set watch.Set
	bh := must(bulkhead.New(bulkhead.Config{Name: "api", MaxConcurrent: 2}))
	part := must(bulkhead.NewPartitioned(bulkhead.PartitionedConfig{Name: "api", MaxConcurrent: 2}))
	set.AddBulkhead(bh)
	removePart := set.AddPartitioned(part)
	if s := set.Sources(); len(s) != 1 || s[0].Kind != watch.Bulkhead || s[0].Name != "api" || s[0].Partitioned != part || s[0].Bulkhead != nil {
		t.Fatalf("after AddPartitioned: %+v, want the partitioned bulkhead alone, as bulkhead \"api\"", s)
	}
	set.AddBulkhead(bh)
	removePart() // replaced: nothing happens
	if s := set.Sources(); len(s) != 1 || s[0].Bulkhead != bh {
		t.Fatalf("after AddBulkhead and a stale remove: %+v, want the bulkhead alone", s)
	}
}

func TestNilIgnored(t *testing.T) {
	var set watch.Set
	removes := []func(){
		set.AddBreaker(nil), set.AddBreakerRegistry("x", nil), set.AddBulkhead(nil), set.AddBulkheadRegistry("x", nil),
		set.AddPartitioned(nil),
		set.AddPool(nil), set.AddBudget("x", nil), set.AddThrottler("x", nil), set.AddConcurrency("x", nil),
		set.AddHedge(nil), set.AddLimiter(nil), set.AddLimiterRegistry("x", nil), set.AddBalancer(nil),
	}
	if n := set.Len(); n != 0 {
		t.Fatalf("%d sources after adding nils, want 0", n)
	}
	for _, r := range removes {
		r() // must not panic
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[watch.Kind]string{watch.Circuit: "circuit", watch.Balancer: "balancer", watch.Concurrency: "concurrency", 0: "Kind(0)", 99: "Kind(99)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}

// Adding, removing and listing from many goroutines at once (run with -race).
func TestConcurrentUse(t *testing.T) {
	var set watch.Set
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				b := must(circuit.New(circuit.Config{Name: fmt.Sprintf("b%d-%d", g, i%5)}))
				remove := set.AddBreaker(b)
				_ = set.Sources()
				if i%2 == 0 {
					remove()
				}
			}
		})
	}
	wg.Wait()
	if n := set.Len(); n > 20 {
		t.Fatalf("%d sources, want at most 20 (4 goroutines × 5 names)", n)
	}
}
