// Package keycache keeps one value per key in front of a lookup that costs
// more, for the HTTP and gRPC adapters' pipelines per key: a call finds its
// key's pipelines with one load from a small direct-mapped table, instead of
// a lookup in each registry and one in a map.
//
// Every value is stored with a generation, a number the caller reads before
// it looks the value up and that moves whenever a value could have gone stale
// (the registries' Generation). Get returns a value with the generation it
// was stored under, for the caller to compare.
package keycache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// slots is the size of the direct-mapped table: enough for the keys of one
// client (hosts, methods) to rarely share a slot; a key whose slot another
// holds goes to the map behind it.
const slots = 64

// Cache maps string keys to values of type V, each under a generation. Keys
// beyond the table's are kept in a sync.Map bounded to a number of entries;
// when it would hold more, it is emptied and refilled as keys come. The zero
// Cache is not usable: call New. A Cache is safe for concurrent use.
type Cache[V any] struct {
	seed  maphash.Seed
	table [slots]atomic.Pointer[entry[V]]
	more  sync.Map // key string → *entry[V]: keys whose slot another key holds
	n     atomic.Int64
	max   int64
}

// entry is a value with its key and generation; never modified once stored.
type entry[V any] struct {
	key string
	gen uint64
	v   V
}

// New returns an empty Cache that keeps at most limit keys beyond its table's
// (max < 1 counts as 1).
func New[V any](limit int) *Cache[V] {
	return &Cache[V]{seed: maphash.MakeSeed(), max: int64(max(limit, 1))}
}

// slot returns key's slot of the table.
func (c *Cache[V]) slot(key string) *atomic.Pointer[entry[V]] {
	return &c.table[maphash.String(c.seed, key)%slots]
}

// Get returns the value last stored for key, if the cache still has it, and
// the generation it was stored under: the caller compares that with the
// generation it read, and may store a stale value again under the new one
// once it has checked that it is still right.
func (c *Cache[V]) Get(key string) (v V, gen uint64, ok bool) {
	if e := c.slot(key).Load(); e != nil && e.key == key {
		return e.v, e.gen, true
	}
	if x, found := c.more.Load(key); found {
		e := x.(*entry[V])
		return e.v, e.gen, true
	}
	return v, 0, false
}

// Put stores v for key under gen. It takes key's slot of the table when the
// slot is free, already key's, or held under another generation than gen
// (generations only grow, so such an entry is stale); otherwise v goes to
// the map.
func (c *Cache[V]) Put(key string, gen uint64, v V) {
	e := &entry[V]{key: key, gen: gen, v: v}
	slot := c.slot(key)
	for {
		old := slot.Load()
		if old != nil && old.key != key && old.gen == gen {
			break // another key's current value: to the map
		}
		if slot.CompareAndSwap(old, e) {
			return // an entry of key's in the map is hidden from now on
		}
	}
	if _, loaded := c.more.Swap(key, e); !loaded && c.n.Add(1) > c.max {
		// Over the bound: start again from this entry. (Under concurrent
		// Puts the count is approximate; it bounds memory, not exactly.)
		c.more.Clear()
		c.more.Store(key, e)
		c.n.Store(1)
	}
}
