// Package keyed is a bounded map from keys to lazily created values, shared by
// the per-key registries (breakers, bulkheads) and the adapters' per-client
// and per-route tables.
package keyed

import (
	"sync"
	"sync/atomic"
	"time"
)

// Map gives one value per key, created on first use and kept until evicted.
// Lookups of existing keys take no lock and allocate nothing. When the map
// holds max values, a new key evicts the least recently used value that the
// evictable function accepts; if none is accepted, the new key is refused. It
// is safe for concurrent use.
//
// Recency is a CLOCK (second-chance) sweep, an approximation of LRU that
// costs the lookup path one atomic load: every value has a "used" flag, which
// Get sets (a load first, and a store only when it was clear, so that a hot
// key's lookups write nothing between two passes of the hand), and a hand that walks the values in a ring
// when room is needed. The hand clears a set flag and moves on (the value was
// used since the hand last passed: a second chance); a value whose flag is
// clear has not been used for a whole turn of the hand, and is offered to
// evictable, stalest first in the hand's order. A new value starts with its
// flag clear, just behind the hand, so it has a whole turn to be used again:
// a stream of one-off keys evicts one-off keys, not the keys in steady use.
// A sweep examines each value at most twice (one turn clears every flag), so
// a refusal means that no value is evictable, as with an exhaustive scan;
// LimitSweep bounds that work, for maps whose refusal has a safe fallback.
//
// The sweep also dates each value: when the hand finds a flag set, it stamps
// the value with the time, and a value found with its flag clear has not been
// used since that stamp. NewIdle's evictable gets that lower bound of the
// time since the value's last use, to keep values that hold recent state.
type Map[V any] struct {
	m     sync.Map // string -> *entry[V]
	mu    sync.Mutex
	slots []*entry[V] // the ring the hand walks; under mu
	hand  int         // the next slot the sweep examines; under mu
	epoch time.Time   // the sweep's clock origin
	n     atomic.Int64
	gen   atomic.Uint64 // values removed so far; see Generation
	max   int           // < 0: unbounded
	sweep int           // most slots a sweep examines; 0: no limit (twice the ring)

	create    func(key string) (V, error)
	evictable func(v V, idle time.Duration) bool
}

// entry is one value and its recency.
type entry[V any] struct {
	v    V
	used atomic.Bool // set by Get, cleared by the sweep
	key  string
	slot int   // index in Map.slots; under Map.mu
	seen int64 // nanoseconds since Map.epoch when used was last cleared (or the entry made); under Map.mu
}

// New returns a Map bounded to max values (max < 0: unbounded). create makes
// the value for a new key; evictable, if not nil, says whether a value may be
// dropped to make room (nil: none may). evictable is called under the map's
// lock, for the least recently used values first; when it returns true the
// value is dropped at once, so it may mark the value as dropped.
func New[V any](max int, create func(key string) (V, error), evictable func(V) bool) *Map[V] {
	var ev func(V, time.Duration) bool
	if evictable != nil {
		ev = func(v V, _ time.Duration) bool { return evictable(v) }
	}
	return NewIdle(max, create, ev)
}

// NewIdle is New with an evictable function that also gets how long the
// value has gone unused at least (a lower bound: the sweep dates uses to the
// turn of its hand that saw them).
func NewIdle[V any](max int, create func(key string) (V, error), evictable func(v V, idle time.Duration) bool) *Map[V] {
	return &Map[V]{max: max, create: create, evictable: evictable, epoch: time.Now()}
}

// LimitSweep bounds the slots one eviction examines to n (> 0), and returns
// m; call it before m is used. Without it, a map full of values that may not
// be evicted examines each twice on every new key, under its lock; with it,
// a new key may be refused although a value beyond the n examined was
// evictable (the next sweep goes on from there). It suits a map whose
// refusal has a safe fallback, where a flood of new keys must not hold the
// lock for long.
func (m *Map[V]) LimitSweep(n int) *Map[V] {
	if n > 0 {
		m.sweep = n
	}
	return m
}

// Get returns the value for key, creating it if needed. full is returned when
// the map is full and nothing can be evicted; create's error is returned as it
// is.
func (m *Map[V]) Get(key string, full error) (V, error) {
	if e, ok := m.m.Load(key); ok {
		return e.(*entry[V]).use(), nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.m.Load(key); ok {
		return e.(*entry[V]).use(), nil
	}
	slot := len(m.slots)
	if m.max >= 0 && int(m.n.Load()) >= m.max {
		var ok bool
		if slot, ok = m.evictOne(); !ok {
			var zero V
			return zero, full
		}
	}
	v, err := m.create(key)
	if err != nil {
		if slot < len(m.slots) {
			m.removeSlot(slot) // the evicted value's slot stays empty
		}
		var zero V
		return zero, err
	}
	e := &entry[V]{v: v, key: key, slot: slot, seen: m.now()}
	if slot == len(m.slots) {
		m.slots = append(m.slots, e)
	} else {
		m.slots[slot] = e
	}
	m.m.Store(key, e)
	m.n.Add(1)
	return v, nil
}

// use marks e used and returns its value: a load, and a store only when the
// sweep has cleared the flag since the last use.
func (e *entry[V]) use() V {
	if !e.used.Load() {
		e.used.Store(true)
	}
	return e.v
}

func (m *Map[V]) now() int64 { return int64(time.Since(m.epoch)) }

// evictOne drops the first value, in the hand's order, that has not been
// used for a turn of the hand and that evictable accepts, and returns its
// slot, now free (m.slots[slot] is stale until refilled); m.mu is held.
func (m *Map[V]) evictOne() (int, bool) {
	if m.evictable == nil || len(m.slots) == 0 {
		return 0, false
	}
	now := m.now()
	steps := 2 * len(m.slots)
	if m.sweep > 0 && m.sweep < steps {
		steps = m.sweep
	}
	for range steps {
		i := m.hand
		if m.hand++; m.hand == len(m.slots) {
			m.hand = 0
		}
		e := m.slots[i]
		if e.used.Load() {
			e.used.Store(false)
			e.seen = now
			continue
		}
		if m.evictable(e.v, time.Duration(now-e.seen)) {
			m.m.Delete(e.key)
			m.n.Add(-1)
			m.gen.Add(1) // after the removal: see Generation
			return i, true
		}
	}
	return 0, false
}

// removeSlot takes slot out of the ring, moving the last entry into it;
// m.mu is held.
func (m *Map[V]) removeSlot(slot int) {
	last := len(m.slots) - 1
	if slot != last {
		m.slots[slot] = m.slots[last]
		m.slots[slot].slot = slot
	}
	m.slots[last] = nil
	m.slots = m.slots[:last]
	if m.hand >= last {
		m.hand = 0
	}
}

// Lookup returns the value for key without creating it. It does not count
// as a use.
func (m *Map[V]) Lookup(key string) (V, bool) {
	e, ok := m.m.Load(key)
	if !ok {
		var zero V
		return zero, false
	}
	return e.(*entry[V]).v, true
}

// Delete drops key's value, if any.
func (m *Map[V]) Delete(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.m.LoadAndDelete(key); ok {
		m.removeSlot(e.(*entry[V]).slot)
		m.n.Add(-1)
		m.gen.Add(1) // after the removal: see Generation
	}
}

// Generation returns the number of values removed (evicted or deleted) so
// far. A value returned by Get or Lookup after a call of Generation stays its
// key's value for as long as Generation returns the same number: the count
// moves after every removal. Callers that cache values keep the number read
// before their lookup with them, and trust the cached value while it holds.
func (m *Map[V]) Generation() uint64 { return m.gen.Load() }

// Len returns the number of values held.
func (m *Map[V]) Len() int { return int(m.n.Load()) }

// Range calls f for each key and value until f returns false. Values created
// or evicted during Range may or may not be seen. Range does not count as a
// use.
func (m *Map[V]) Range(f func(key string, v V) bool) {
	m.m.Range(func(k, e any) bool { return f(k.(string), e.(*entry[V]).v) })
}
