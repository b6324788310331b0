package circuit

import (
	"sort"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/internal/keyed"
)

// ErrTooManyKeys is returned by Registry.Get when the registry holds
// MaxKeys breakers and none of them is closed (only closed breakers are
// evicted to make room: an open one carries state that matters).
var ErrTooManyKeys = watertight.NewRejection("circuit: too many keys")

// DefaultMaxKeys is the bound used when RegistryConfig.MaxKeys is zero.
const DefaultMaxKeys = 1000

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// Config is used for every key's breaker; its Name is replaced by the
	// key (Breaker.Name, Snapshot.Name and OnStateChange see the key). The
	// events sent to Config.Listener carry the registry's Name (this
	// Config.Name, which may be empty) as Name and the breaker's key as Key.
	Config
	// MaxKeys bounds the number of breakers held. Zero means
	// DefaultMaxKeys (1000); negative means unbounded (only for a key set
	// you control: keys taken from requests can grow without end).
	MaxKeys int
}

// Registry gives one breaker per key — a dependency, a host, an endpoint —
// all built from one Config. Looking up an existing key takes no lock. It is
// safe for concurrent use.
type Registry struct {
	cfg Config
	m   *keyed.Map[*Breaker]
}

// NewRegistry returns an empty registry, or the error New would return for
// cfg.Config.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if _, err := New(cfg.Config); err != nil {
		return nil, err
	}
	max := cfg.MaxKeys
	if max == 0 {
		max = DefaultMaxKeys
	}
	r := &Registry{cfg: cfg.Config}
	r.m = keyed.New(max, func(key string) (*Breaker, error) {
		c := r.cfg
		c.Name = key
		b, err := New(c)
		if err != nil {
			return nil, err
		}
		b.evName, b.evKey = r.cfg.Name, key // before b is published
		return b, nil
	}, func(b *Breaker) bool { return b.State() == Closed })
	return r, nil
}

// Get returns the breaker for key, creating it closed on first use. When the
// registry is full it evicts a closed breaker to make room — any closed one,
// not the least recently used, and its window is lost: a caller still holding
// it records into a breaker nobody else sees, and the key's next Get starts
// afresh. If every breaker is in another state, Get returns ErrTooManyKeys.
// Size MaxKeys above the number of keys you expect, so that eviction is the
// exception that protects memory, not a routine.
//
// A refusal is sent to Config.Listener as an EventRejected with the key.
func (r *Registry) Get(key string) (*Breaker, error) {
	b, err := r.m.Get(key, ErrTooManyKeys)
	if err != nil && r.cfg.Listener != nil {
		watertight.Emit(r.cfg.Listener, watertight.Event{
			Kind: watertight.EventRejected, Source: source, Name: r.cfg.Name, Key: key, Err: err,
		})
	}
	return b, err
}

// Generation returns the number of breakers evicted so far. A breaker got from
// Get after a call of Generation is still its key's breaker for as long as
// Generation returns the same number. It lets a caller that keeps breakers
// per key (as the HTTP and gRPC adapters do) check that they are current
// with one atomic load, instead of a Get per call: read Generation, then Get,
// and keep the two together.
func (r *Registry) Generation() uint64 { return r.m.Generation() }

// Len returns the number of breakers held.
func (r *Registry) Len() int { return r.m.Len() }

// Snapshots returns a snapshot of every breaker, sorted by name (the key).
func (r *Registry) Snapshots() []Snapshot {
	var out []Snapshot
	r.m.Range(func(_ string, b *Breaker) bool {
		out = append(out, b.Snapshot())
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
