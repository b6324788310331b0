package bulkhead

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/internal/keyed"
)

// DefaultMaxKeys is the key bound used when RegistryConfig.MaxKeys is zero.
const DefaultMaxKeys = 1000

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// Config configures every key's bulkhead, except its Name: each key's
	// bulkhead is named by its key (in its errors and Snapshot). The events
	// sent to Config.Listener carry the registry's Name (this Config.Name,
	// which may be empty) as Name and the bulkhead's key as Key.
	Config
	// MaxKeys bounds the number of bulkheads held. Zero means
	// DefaultMaxKeys; a negative value means no bound.
	MaxKeys int
}

// Registry holds one Bulkhead per key (a tenant, a host, an endpoint),
// created on first use, so that each key is isolated from the others. It is
// bounded: when it holds MaxKeys bulkheads, a new key evicts the least
// recently used idle one (nobody holds or waits for a permit), or is refused
// with ErrTooManyKeys. A bulkhead with permits held or waiters is never
// evicted.
//
// A Registry is safe for concurrent use; Get on a key already held takes no
// lock. Build it with NewRegistry: the zero value is not usable.
type Registry struct {
	m        *keyed.Map[*Bulkhead]
	name     string
	listener watertight.Listener
	live     atomic.Pointer[Config] // what bulkheads are made from; Reconfigure replaces it
	gen      atomic.Uint64          // Reconfigure calls so far
	mu       sync.Mutex             // serialises Reconfigure
}

// NewRegistry returns a Registry for cfg. It fails, naming the field and the
// rule, when cfg.Config is invalid, as New does.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if err := cfg.Config.validate("RegistryConfig.Config"); err != nil {
		return nil, err
	}
	maxKeys := cfg.MaxKeys
	switch {
	case maxKeys == 0:
		maxKeys = DefaultMaxKeys
	case maxKeys < 0:
		maxKeys = -1
	}
	bc := cfg.Config
	r := &Registry{name: bc.Name, listener: bc.Listener}
	r.live.Store(&bc)
	create := func(key string) (*Bulkhead, error) {
		g := r.gen.Load() // before the configuration: see Reconfigure
		c := *r.live.Load()
		c.Name = key
		b := newBulkhead(c)
		b.evName, b.evKey = bc.Name, key
		b.regGen.Store(g)
		return b, nil
	}
	r.m = keyed.New(maxKeys, create, (*Bulkhead).idle)
	return r, nil
}

// Reconfigure makes cfg's MaxConcurrent, MaxWait and MaxWaiters those of every
// bulkhead the registry holds (Bulkhead.Reconfigure: permits in flight
// count against the new limit) and of the ones it makes from now on. cfg is
// validated as New does; an invalid one is an error and changes nothing.
// The registry's Name, QueueOrder and Listener stay what NewRegistry set. (A bulkhead
// made from the old configuration while it runs is reconfigured by Get:
// see circuit.Registry.Reconfigure.)
func (r *Registry) Reconfigure(cfg Config) error {
	if err := cfg.validate("Config"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *r.live.Load()
	c.MaxConcurrent, c.MaxWait, c.MaxWaiters = cfg.MaxConcurrent, cfg.MaxWait, cfg.MaxWaiters
	r.live.Store(&c)
	r.gen.Add(1)
	r.m.Range(func(_ string, b *Bulkhead) bool {
		r.refreshLocked(b)
		return true
	})
	return nil
}

func (r *Registry) refreshLocked(b *Bulkhead) {
	g := r.gen.Load()
	if b.regGen.Load() == g {
		return
	}
	_ = b.Reconfigure(*r.live.Load()) // validated by Reconfigure
	b.regGen.Store(g)
}

// Get returns key's bulkhead, creating it on first use; looking up a key
// already held takes no lock and allocates nothing. When the registry holds
// MaxKeys bulkheads it evicts the least recently used idle one first
// (recency is approximate: a second-chance sweep over the bulkheads, so a
// key used about once per MaxKeys new keys keeps its bulkhead); when none is
// idle, it returns ErrTooManyKeys.
//
// An evicted bulkhead keeps working for callers that got it before, but a
// later Get of its key creates a new one: a caller that keeps a bulkhead
// across an eviction can briefly let that key run up to twice its limit.
// Call Get for each call rather than keeping the result.
//
// A refusal is sent to Config.Listener as an EventRejected with the key.
func (r *Registry) Get(key string) (*Bulkhead, error) {
	b, err := r.m.Get(key, ErrTooManyKeys)
	if err == nil && b.regGen.Load() != r.gen.Load() {
		r.mu.Lock() // made from a configuration Reconfigure replaced
		r.refreshLocked(b)
		r.mu.Unlock()
	}
	if err != nil {
		if r.listener != nil {
			watertight.Emit(r.listener, watertight.Event{
				Kind: watertight.EventRejected, Source: source, Name: r.name, Key: key, Err: err, Code: CodeTooManyKeys,
			})
		}
		return nil, err
	}
	return b, nil
}

// Generation returns the number of bulkheads evicted so far. A bulkhead got from
// Get after a call of Generation is still its key's bulkhead for as long as
// Generation returns the same number. It lets a caller that keeps bulkheads
// per key (as the HTTP and gRPC adapters do) check that they are current
// with one atomic load, instead of a Get per call: read Generation, then Get,
// and keep the two together.
func (r *Registry) Generation() uint64 { return r.m.Generation() }

// Len returns the number of bulkheads held.
func (r *Registry) Len() int { return r.m.Len() }

// Snapshots returns a Snapshot of each bulkhead held, with Name set to its
// key, sorted by key.
func (r *Registry) Snapshots() []Snapshot {
	out := make([]Snapshot, 0, r.m.Len())
	r.m.Range(func(key string, b *Bulkhead) bool {
		s := b.Snapshot()
		s.Name = key
		out = append(out, s)
		return true
	})
	slices.SortFunc(out, func(a, b Snapshot) int { return strings.Compare(a.Name, b.Name) })
	return out
}
