package limit

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

// ErrTooManyKeys is returned by Registry.Get when it holds MaxKeys limiters
// and none is idle. It is a rejection.
var ErrTooManyKeys = watertight.NewRejection("limit: too many keys")

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// Config configures every key's Limiter; each is named by its key.
	Config
	// MaxKeys bounds the number of limiters held. Zero means
	// DefaultMaxKeys; a negative value means no bound.
	MaxKeys int
}

// Registry holds one Limiter per key (a host, an endpoint, a tenant),
// created on first use, each learning its own limit. It is bounded: when it
// holds MaxKeys limiters, a new key evicts the least recently used idle one
// (nothing held or waiting), whose learnt limit is then lost, or is refused
// with ErrTooManyKeys. A Registry is safe for concurrent use; Get on a key
// already held takes no lock.
type Registry struct {
	m    *keyed.Map[*Limiter]
	live atomic.Pointer[Config] // what limiters are made from; Reconfigure replaces it
	mu   sync.Mutex             // serialises Reconfigure
}

// NewRegistry returns a Registry for cfg, or the error New would return for
// cfg.Config.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if _, err := New(cfg.Config); err != nil {
		return nil, err
	}
	maxKeys := cfg.MaxKeys
	switch {
	case maxKeys == 0:
		maxKeys = DefaultMaxKeys
	case maxKeys < 0:
		maxKeys = -1
	}
	r := &Registry{}
	c := cfg.Config
	r.live.Store(&c)
	create := func(key string) (*Limiter, error) {
		kc := *r.live.Load()
		kc.Name = key
		return New(kc)
	}
	idle := func(l *Limiter) bool {
		s := l.bh.Snapshot()
		return s.Active == 0 && s.Waiting == 0
	}
	r.m = keyed.New(maxKeys, create, idle)
	return r, nil
}

// Reconfigure applies cfg to every limiter the registry holds
// (Limiter.Reconfigure: permits in flight and waiters kept) and to the
// ones it makes from now on. A nil cfg.Algorithm keeps each limiter's
// algorithm and what it has learnt, and the registry's algorithm for new
// keys; a non-nil one replaces both. cfg is validated as New does; an
// invalid one is an error and changes nothing.
func (r *Registry) Reconfigure(cfg Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := cfg
	if next.Algorithm == nil {
		next.Algorithm = r.live.Load().Algorithm
	}
	if _, err := New(next); err != nil {
		return err
	}
	r.live.Store(&next)
	var first error
	r.m.Range(func(_ string, l *Limiter) bool {
		if err := l.Reconfigure(cfg); err != nil && first == nil {
			first = err
		}
		return true
	})
	return first
}

// Get returns key's Limiter, creating it on first use.
func (r *Registry) Get(key string) (*Limiter, error) {
	return r.m.Get(key, ErrTooManyKeys)
}

// Generation returns the number of limiters evicted so far (see
// bulkhead.Registry.Generation).
func (r *Registry) Generation() uint64 { return r.m.Generation() }

// Len returns the number of limiters held.
func (r *Registry) Len() int { return r.m.Len() }

// Snapshots returns a Snapshot of each limiter held, sorted by key.
func (r *Registry) Snapshots() []Snapshot {
	out := make([]Snapshot, 0, r.m.Len())
	r.m.Range(func(_ string, l *Limiter) bool {
		out = append(out, l.Snapshot())
		return true
	})
	slices.SortFunc(out, func(a, b Snapshot) int { return strings.Compare(a.Name, b.Name) })
	return out
}
