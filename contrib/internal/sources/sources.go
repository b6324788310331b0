// Package sources is the set of primitives a metrics adapter watches
// (contrib/watertightprom, contrib/watertightotel): breakers, bulkheads, pools, budgets,
// throttlers, hedge policies and adaptive limiters, each under a name, read at
// collection time.
package sources

import (
	"sync"

	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
)

// Family is the kind of a Source; a name is unique within a family.
type Family uint8

// The families.
const (
	Circuit Family = iota
	Bulkhead
	Pool
	Budget
	Throttler
	Hedge
	Limiter
)

// Source is one watched thing: exactly one of its pointers is set.
type Source struct {
	Name      string
	Breaker   *circuit.Breaker
	Breakers  *circuit.Registry
	Bulkhead  *bulkhead.Bulkhead
	Bulkheads *bulkhead.Registry
	Pool      *bulkhead.Pool
	Budget    *budget.Budget
	Throttler *budget.Throttler
	Hedge     *hedge.Policy
	Limiter   *limit.Limiter
	Limiters  *limit.Registry
}

type id struct {
	fam  Family
	name string
}

// Set is a set of Sources, safe for concurrent use. The zero Set is empty
// and ready.
type Set struct {
	mu sync.Mutex
	m  map[id]*Source
}

// Add watches s under its family and name, replacing the Source already
// there. The returned function stops watching s, and does nothing if s has
// been replaced since.
func (set *Set) Add(fam Family, s *Source) (remove func()) {
	k := id{fam, s.Name}
	set.mu.Lock()
	if set.m == nil {
		set.m = map[id]*Source{}
	}
	set.m[k] = s
	set.mu.Unlock()
	return func() {
		set.mu.Lock()
		if set.m[k] == s {
			delete(set.m, k)
		}
		set.mu.Unlock()
	}
}

// List returns the Sources watched now, in no order.
func (set *Set) List() []*Source {
	set.mu.Lock()
	defer set.mu.Unlock()
	out := make([]*Source, 0, len(set.m))
	for _, s := range set.m {
		out = append(out, s)
	}
	return out
}
