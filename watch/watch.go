package watch

import (
	"cmp"
	"slices"
	"strconv"
	"sync"

	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
)

// Kind is the family of a Source. A name is unique within a kind: a breaker
// and a breaker registry share Circuit, a bulkhead, a bulkhead registry and
// a partitioned bulkhead share Bulkhead, a limiter and a limiter registry
// share Limiter.
type Kind uint8

// The kinds, in the order Set.Sources lists them.
const (
	Circuit Kind = iota + 1
	Bulkhead
	Pool
	Budget
	Throttler
	Concurrency
	Hedge
	Limiter
	Balancer
	numKinds
)

var kindNames = [...]string{
	Circuit:     "circuit",
	Bulkhead:    "bulkhead",
	Pool:        "pool",
	Budget:      "budget",
	Throttler:   "throttler",
	Concurrency: "concurrency",
	Hedge:       "hedge",
	Limiter:     "limiter",
	Balancer:    "balancer",
}

// String returns the kind's name: "circuit", "bulkhead", "pool", "budget",
// "throttler", "concurrency", "hedge", "limiter" or "balancer".
func (k Kind) String() string {
	if k > 0 && k < numKinds {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Source is one watched protection: Kind and Name, and exactly one of the
// pointers, which matches Kind. Readers call the Snapshot (or Snapshots)
// method of the pointer that is set.
type Source struct {
	Kind Kind
	// Name is the name the protection was added under: its own name
	// (Config.Name) for a breaker, bulkhead, partitioned bulkhead, pool,
	// hedge policy, limiter or balancer, the name given to Add for
	// budgets, throttlers and registries. A registry's snapshots carry
	// each key in their Name; a partitioned bulkhead's snapshot carries
	// each partition's name in its PartitionSnapshot's Name, which
	// readers show as the key.
	Name string

	Breaker     *circuit.Breaker
	Breakers    *circuit.Registry
	Bulkhead    *bulkhead.Bulkhead
	Bulkheads   *bulkhead.Registry
	Partitioned *bulkhead.Partitioned
	Pool        *bulkhead.Pool
	Budget      *budget.Budget
	Throttler   *budget.Throttler
	Concurrency *budget.Concurrency
	Hedge       *hedge.Policy
	Limiter     *limit.Limiter
	Limiters    *limit.Registry
	Balancer    *balance.Balancer
}

type id struct {
	kind Kind
	name string
}

// Set is a set of Sources, safe for concurrent use: protections may be added
// and removed while readers list them. The zero Set is empty and ready.
//
// Adding a protection under the kind and name of one already there replaces
// it; the function an Add method returns stops watching what it added, and
// does nothing once that was replaced. A nil protection is ignored (its Add
// returns a function that does nothing).
type Set struct {
	mu  sync.Mutex
	m   map[id]*Source
	gen uint64
}

func noop() {}

func (set *Set) add(s *Source) (remove func()) {
	k := id{s.Kind, s.Name}
	set.mu.Lock()
	if set.m == nil {
		set.m = map[id]*Source{}
	}
	set.m[k] = s
	set.gen++
	set.mu.Unlock()
	return func() {
		set.mu.Lock()
		if set.m[k] == s {
			delete(set.m, k)
			set.gen++
		}
		set.mu.Unlock()
	}
}

// AddBreaker watches b under its name (Config.Name).
func (set *Set) AddBreaker(b *circuit.Breaker) (remove func()) {
	if b == nil {
		return noop
	}
	return set.add(&Source{Kind: Circuit, Name: b.Name(), Breaker: b})
}

// AddBreakerRegistry watches every breaker r holds when read, under name,
// each with its key. Give it the registry's own Config.Name, which its
// events carry, so that a reader can match events with breakers.
func (set *Set) AddBreakerRegistry(name string, r *circuit.Registry) (remove func()) {
	if r == nil {
		return noop
	}
	return set.add(&Source{Kind: Circuit, Name: name, Breakers: r})
}

// AddBulkhead watches the semaphore bulkhead b under its name (Config.Name).
func (set *Set) AddBulkhead(b *bulkhead.Bulkhead) (remove func()) {
	if b == nil {
		return noop
	}
	return set.add(&Source{Kind: Bulkhead, Name: b.Snapshot().Name, Bulkhead: b})
}

// AddBulkheadRegistry watches every bulkhead r holds when read, under name,
// each with its key.
func (set *Set) AddBulkheadRegistry(name string, r *bulkhead.Registry) (remove func()) {
	if r == nil {
		return noop
	}
	return set.add(&Source{Kind: Bulkhead, Name: name, Bulkheads: r})
}

// AddPartitioned watches the partitioned bulkhead p under its name
// (PartitionedConfig.Name), in the Bulkhead kind: readers show it as a
// bulkhead registry whose keys are its partitions, each partition's name
// the key. Adding it under the name of a bulkhead or bulkhead registry
// already watched replaces that one, and the other way round.
func (set *Set) AddPartitioned(p *bulkhead.Partitioned) (remove func()) {
	if p == nil {
		return noop
	}
	return set.add(&Source{Kind: Bulkhead, Name: p.Snapshot().Name, Partitioned: p})
}

// AddPool watches the worker pool p under its name (PoolConfig.Name).
func (set *Set) AddPool(p *bulkhead.Pool) (remove func()) {
	if p == nil {
		return noop
	}
	return set.add(&Source{Kind: Pool, Name: p.Snapshot().Name, Pool: p})
}

// AddBudget watches the retry budget b under name (a Budget has none of its
// own). A nil b is a disabled budget, and is ignored.
func (set *Set) AddBudget(name string, b *budget.Budget) (remove func()) {
	if b == nil {
		return noop
	}
	return set.add(&Source{Kind: Budget, Name: name, Budget: b})
}

// AddThrottler watches the adaptive throttler t under name. A nil t is a
// disabled throttler, and is ignored.
func (set *Set) AddThrottler(name string, t *budget.Throttler) (remove func()) {
	if t == nil {
		return noop
	}
	return set.add(&Source{Kind: Throttler, Name: name, Throttler: t})
}

// AddConcurrency watches the concurrent-retry budget c under name. A nil c
// is ignored.
func (set *Set) AddConcurrency(name string, c *budget.Concurrency) (remove func()) {
	if c == nil {
		return noop
	}
	return set.add(&Source{Kind: Concurrency, Name: name, Concurrency: c})
}

// AddHedge watches the hedge policy p under its name (Config.Name).
func (set *Set) AddHedge(p *hedge.Policy) (remove func()) {
	if p == nil {
		return noop
	}
	return set.add(&Source{Kind: Hedge, Name: p.Snapshot().Name, Hedge: p})
}

// AddLimiter watches the adaptive limiter l under its name (Config.Name).
func (set *Set) AddLimiter(l *limit.Limiter) (remove func()) {
	if l == nil {
		return noop
	}
	return set.add(&Source{Kind: Limiter, Name: l.Name(), Limiter: l})
}

// AddLimiterRegistry watches every limiter r holds when read, under name,
// each with its key.
func (set *Set) AddLimiterRegistry(name string, r *limit.Registry) (remove func()) {
	if r == nil {
		return noop
	}
	return set.add(&Source{Kind: Limiter, Name: name, Limiters: r})
}

// AddBalancer watches the balancer b under its name (Config.Name).
func (set *Set) AddBalancer(b *balance.Balancer) (remove func()) {
	if b == nil {
		return noop
	}
	return set.add(&Source{Kind: Balancer, Name: b.Name(), Balancer: b})
}

// Sources returns the Sources watched now, by kind (in the order of the Kind
// constants), then by name. The slice is the caller's.
func (set *Set) Sources() []Source {
	set.mu.Lock()
	out := make([]Source, 0, len(set.m))
	for _, s := range set.m {
		out = append(out, *s)
	}
	set.mu.Unlock()
	slices.SortFunc(out, func(a, b Source) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Len returns the number of Sources watched now (a registry counts once).
func (set *Set) Len() int {
	set.mu.Lock()
	defer set.mu.Unlock()
	return len(set.m)
}

// Generation returns a number that changes whenever a Source is added,
// replaced or removed, so that a reader can tell the set changed without
// listing it.
func (set *Set) Generation() uint64 {
	set.mu.Lock()
	defer set.mu.Unlock()
	return set.gen
}
