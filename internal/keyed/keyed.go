// Package keyed is a bounded map from keys to lazily created values, shared by
// the per-key registries (breakers, bulkheads).
package keyed

import (
	"sync"
	"sync/atomic"
)

// Map gives one value per key, created on first use and kept until evicted.
// Lookups of existing keys take no lock. When the map holds max values, a new
// key evicts one value that the evictable function accepts (an idle one); if
// none is, the new key is refused. It is safe for concurrent use.
type Map[V any] struct {
	m         sync.Map // string -> V
	mu        sync.Mutex
	n         atomic.Int64
	gen       atomic.Uint64 // values removed so far; see Generation
	max       int           // < 0: unbounded
	create    func(key string) (V, error)
	evictable func(V) bool
}

// New returns a Map bounded to max values (max < 0: unbounded). create makes
// the value for a new key; evictable, if not nil, says whether a value may be
// dropped to make room (nil: none may).
func New[V any](max int, create func(key string) (V, error), evictable func(V) bool) *Map[V] {
	return &Map[V]{max: max, create: create, evictable: evictable}
}

// Get returns the value for key, creating it if needed. full is returned when
// the map is full and nothing can be evicted; create's error is returned as it
// is.
func (m *Map[V]) Get(key string, full error) (V, error) {
	if v, ok := m.m.Load(key); ok {
		return v.(V), nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.m.Load(key); ok {
		return v.(V), nil
	}
	if m.max >= 0 && int(m.n.Load()) >= m.max && !m.evictOne() {
		var zero V
		return zero, full
	}
	v, err := m.create(key)
	if err != nil {
		var zero V
		return zero, err
	}
	m.m.Store(key, v)
	m.n.Add(1)
	return v, nil
}

// evictOne drops one evictable value; m.mu is held.
func (m *Map[V]) evictOne() bool {
	if m.evictable == nil {
		return false
	}
	evicted := false
	m.m.Range(func(k, v any) bool {
		if m.evictable(v.(V)) {
			m.m.Delete(k)
			m.n.Add(-1)
			m.gen.Add(1) // after the removal: see Generation
			evicted = true
			return false
		}
		return true
	})
	return evicted
}

// Lookup returns the value for key without creating it.
func (m *Map[V]) Lookup(key string) (V, bool) {
	v, ok := m.m.Load(key)
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

// Delete drops key's value, if any.
func (m *Map[V]) Delete(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m.LoadAndDelete(key); ok {
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
// or evicted during Range may or may not be seen.
func (m *Map[V]) Range(f func(key string, v V) bool) {
	m.m.Range(func(k, v any) bool { return f(k.(string), v.(V)) })
}
