package circuit

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/internal/keyed"
)

// ErrTooManyKeys is returned by Registry.Get when the registry holds
// MaxKeys breakers and none of them may be evicted: each is open, half-open
// or set by an operator, or has a failure in its window, and was used within
// RegistryConfig.Retain (see Registry.Get).
var ErrTooManyKeys = watertight.NewRejection("circuit: too many keys")

const (
	// DefaultMaxKeys is the bound used when RegistryConfig.MaxKeys is zero.
	DefaultMaxKeys = 1000
	// DefaultRetain is the time used when RegistryConfig.Retain is zero:
	// the default longest opening (10·DefaultOpenDuration).
	DefaultRetain = 5 * time.Minute
)

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
	// Retain is how long a breaker that holds state worth keeping (open,
	// half-open, or closed with a failure, a slow call or a counted
	// saturation in its window) is kept after its last Get, when the
	// registry is full and needs room. Zero means DefaultRetain (5m); a
	// negative value means for ever: such a breaker is evicted only once it
	// has closed with a clean window. Breakers forced open, disabled or
	// metrics-only are never evicted, whatever Retain says.
	Retain time.Duration
}

// Registry gives one breaker per key — a dependency, a host, an endpoint —
// all built from one Config. Looking up an existing key takes no lock. It is
// safe for concurrent use.
type Registry struct {
	cfg  Config                 // Name and Listener of the events: fixed by NewRegistry
	live atomic.Pointer[Config] // what breakers are made from; Reconfigure replaces it
	gen  atomic.Uint64          // Reconfigure calls so far
	mu   sync.Mutex             // serialises Reconfigure
	m    *keyed.Map[*Breaker]
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
	retain := cfg.Retain
	if retain == 0 {
		retain = DefaultRetain
	}
	r := &Registry{cfg: cfg.Config}
	r.live.Store(&r.cfg)
	r.m = keyed.NewIdle(max, func(key string) (*Breaker, error) {
		g := r.gen.Load() // before the configuration: see Reconfigure
		c := *r.live.Load()
		c.Name = key
		b, err := New(c)
		if err != nil {
			return nil, err
		}
		b.regGen.Store(g)
		b.evName, b.evKey = r.cfg.Name, key // before b is published
		return b, nil
	}, func(b *Breaker, idle time.Duration) bool { return b.evictable(idle, retain) })
	return r, nil
}

// evictable says whether a registry may drop b, unused for idle at least, to
// make room. Dropping a closed breaker whose window holds only successes
// loses no failure: its key starts afresh, closed, which is where it was. Anything else is evidence about the dependency — an opening,
// a trial under way, failures on their way to a trip — and goes only once
// nobody has asked for it for retain (< 0: never); an operator's setting
// never does. It takes b's lock briefly (Snapshot): eviction is the registry's
// slow path.
func (b *Breaker) evictable(idle, retain time.Duration) bool {
	s := b.Snapshot()
	switch s.State {
	case Closed:
		if s.Failures == 0 && s.SlowCalls == 0 && s.Saturated == 0 {
			return true
		}
	case Open, HalfOpen:
	default: // forced open, disabled, metrics-only
		return false
	}
	return retain >= 0 && idle >= retain
}

// Get returns the breaker for key, creating it closed on first use. Looking
// up a key already held takes no lock and allocates nothing.
//
// When the registry is full, a new key evicts the least recently used
// breaker that holds nothing worth keeping: a closed one whose window has no
// failure, slow call or counted saturation. Breakers that are open or
// half-open, or whose window holds a failure, are kept while they are in use
// (a Get of their key within RegistryConfig.Retain), so a stream of new keys
// never resets a key whose dependency is failing; those set by ForceOpen,
// Disable or SetMetricsOnly are never evicted. If no breaker may be evicted,
// Get returns ErrTooManyKeys and creates nothing. An evicted breaker keeps
// working for a caller still holding it, but records into a breaker nobody
// else sees; the key's next Get starts afresh. Recency is approximate (a
// second-chance sweep over the breakers, see internal/keyed). Size MaxKeys
// above the number of keys you expect, so that eviction is the exception
// that protects memory, not a routine.
//
// A refusal is sent to Config.Listener as an EventRejected with the key.
func (r *Registry) Get(key string) (*Breaker, error) {
	b, err := r.m.Get(key, ErrTooManyKeys)
	if err == nil && b.regGen.Load() != r.gen.Load() {
		r.refresh(key, b) // made from a configuration Reconfigure replaced
	}
	if err != nil && r.cfg.Listener != nil {
		watertight.Emit(r.cfg.Listener, watertight.Event{
			Kind: watertight.EventRejected, Source: source, Name: r.cfg.Name, Key: key, Err: err, Code: CodeTooManyKeys,
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

// Reconfigure makes cfg the configuration of every breaker the registry
// holds (Breaker.Reconfigure: each keeps its state) and of the ones it
// makes from now on. cfg is validated as New does; an invalid one is an
// error and changes nothing. The registry's Name and Listener (those of its
// events) stay what NewRegistry set.
//
// A breaker being made while Reconfigure runs may be made from the old
// configuration and published after the Range below has passed; it carries
// the generation it was made for, so Get, which every caller goes through,
// reconfigures it before handing it out.
func (r *Registry) Reconfigure(cfg Config) error {
	if _, err := New(cfg); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live.Store(&cfg)
	r.gen.Add(1)
	r.m.Range(func(key string, b *Breaker) bool {
		r.refreshLocked(key, b)
		return true
	})
	return nil
}

// refresh reconfigures b, key's breaker, for the current configuration.
func (r *Registry) refresh(key string, b *Breaker) {
	r.mu.Lock()
	r.refreshLocked(key, b)
	r.mu.Unlock()
}

func (r *Registry) refreshLocked(key string, b *Breaker) {
	g := r.gen.Load()
	if b.regGen.Load() == g {
		return
	}
	c := *r.live.Load()
	c.Name = key
	_ = b.Reconfigure(c) // validated by Reconfigure
	b.regGen.Store(g)
}
