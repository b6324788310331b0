package fallback

import (
	"hash/maphash"
	"sync"
	"time"
)

// Defaults used for zero fields of CacheConfig.
const (
	// DefaultMaxStale is how old a last-known-good value may be when
	// CacheConfig.MaxStale is zero.
	DefaultMaxStale = 5 * time.Minute
	// DefaultMaxEntries is the number of keys a LastKnownGood keeps when
	// CacheConfig.MaxEntries is zero.
	DefaultMaxEntries = 10_000
)

const (
	// maxShards is the number of shards of a large or unbounded cache.
	maxShards = 16
	// exactBelow is the bound up to which a cache has a single shard, so
	// that it evicts exactly the oldest entry.
	exactBelow = 64
)

// CacheConfig configures a LastKnownGood. The zero value is valid: values
// up to DefaultMaxStale old, at most DefaultMaxEntries keys.
type CacheConfig struct {
	// MaxStale is how old a value may be and still be served, counted from
	// when it was recorded. Zero means DefaultMaxStale (5 minutes); a
	// negative value means no limit (any value, however old). Choose it as
	// the age past which a wrong answer is worse than no answer.
	MaxStale time.Duration
	// MaxEntries bounds the number of keys kept. When the cache is full, a
	// new key evicts the entry recorded longest ago (within its shard, see
	// LastKnownGood). Zero means DefaultMaxEntries (10,000); a negative value
	// means no bound.
	MaxEntries int
}

// DefaultCacheConfig returns the configuration NewLastKnownGood uses for
// zero fields: values up to DefaultMaxStale old, at most DefaultMaxEntries
// keys.
func DefaultCacheConfig() CacheConfig {
	return CacheConfig{MaxStale: DefaultMaxStale, MaxEntries: DefaultMaxEntries}
}

// LastKnownGood keeps the last good value per key, with the time it was
// recorded, to serve when the dependency that produced it fails. It is
// bounded and safe for concurrent use; build it with NewLastKnownGood.
//
// Cost: Put reads the clock once (time.Since of a fixed instant), hashes the
// key and writes one map entry under a per-shard mutex; a new key allocates
// one entry, an existing key allocates nothing. On the project's shared
// 2-core VM, Put of an existing key measured about 110 ns in one goroutine,
// half of it the clock read: that is what a Chain with a Stale step adds to
// each success. Get costs about the same and allocates nothing.
//
// A cache bounded to at most 64 entries has one shard and evicts exactly the
// oldest entry. A larger or unbounded cache is split into 16 shards by key
// hash, each with its share of MaxEntries, so that concurrent Puts of
// different keys rarely wait for each other; a full shard evicts its own
// oldest entry, which is the oldest overall only approximately. An entry
// found older than MaxStale is dropped when it is looked up.
//
// MaxStale is exact, not spread by jitter (issue 16 puts jitter on what
// watertight schedules): an expiry here schedules nothing — no refresh, no
// call to the dependency, no timer; it is found on a lookup that serves a
// fallback anyway — so entries that expire together make no herd. And the
// bound is a promise both ways: a value is served while it is at most
// MaxStale old (spreading down would drop values the caller chose to
// keep), and never after (spreading up would serve what the caller said is
// worse than no answer).
type LastKnownGood[T any] struct {
	maxStale time.Duration // < 0: no limit
	epoch    time.Time     // the cache's clock: now() is time.Since(epoch)
	seed     maphash.Seed
	shards   []shard[T] // len is a power of two
}

type shard[T any] struct {
	mu         sync.Mutex
	m          map[string]*entry[T]
	head, tail *entry[T] // oldest and newest record
	max        int       // < 0: unbounded
	_          [64]byte  // keep shards' locks on separate cache lines
}

type entry[T any] struct {
	key        string
	v          T
	at         int64 // ns since the cache's epoch
	prev, next *entry[T]
}

// NewLastKnownGood returns a LastKnownGood for cfg. It never fails today; it
// returns an error to keep the constructor's shape shared by every package.
func NewLastKnownGood[T any](cfg CacheConfig) (*LastKnownGood[T], error) {
	if cfg.MaxStale == 0 {
		cfg.MaxStale = DefaultMaxStale
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	n := maxShards
	if cfg.MaxEntries >= 0 && cfg.MaxEntries <= exactBelow {
		n = 1
	}
	c := &LastKnownGood[T]{
		maxStale: cfg.MaxStale,
		epoch:    time.Now(),
		seed:     maphash.MakeSeed(),
		shards:   make([]shard[T], n),
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.m = make(map[string]*entry[T])
		s.max = -1
		if cfg.MaxEntries >= 0 {
			// Spread the bound exactly: the shards' shares add up to it.
			s.max = cfg.MaxEntries / n
			if i < cfg.MaxEntries%n {
				s.max++
			}
		}
	}
	return c, nil
}

// MaxStale returns how old a value may be and still be served; negative
// means no limit.
func (c *LastKnownGood[T]) MaxStale() time.Duration { return c.maxStale }

func (c *LastKnownGood[T]) now() int64 { return int64(time.Since(c.epoch)) }

func (c *LastKnownGood[T]) shard(key string) *shard[T] {
	if len(c.shards) == 1 {
		return &c.shards[0]
	}
	return &c.shards[maphash.String(c.seed, key)&uint64(len(c.shards)-1)]
}

// Put records v as the last good value for key, as of now. A Chain calls it
// on every success of its primary; call it directly to warm the cache. The
// cache keeps v as it is: a value that holds references (a slice, a map, a
// pointer) shares them with whoever else holds them, so such values must
// not be modified after they are recorded.
func (c *LastKnownGood[T]) Put(key string, v T) {
	now := c.now()
	s := c.shard(key)
	s.mu.Lock()
	if e, ok := s.m[key]; ok {
		e.v, e.at = v, now
		s.moveToBack(e)
		s.mu.Unlock()
		return
	}
	if s.max > 0 && len(s.m) >= s.max {
		s.remove(s.head)
	}
	e := &entry[T]{key: key, v: v, at: now}
	s.m[key] = e
	s.pushBack(e)
	s.mu.Unlock()
}

// Get returns the last good value for key and its age, if the cache holds
// one no older than MaxStale. An older entry is dropped.
func (c *LastKnownGood[T]) Get(key string) (v T, age time.Duration, ok bool) {
	now := c.now()
	s := c.shard(key)
	s.mu.Lock()
	e, found := s.m[key]
	if !found {
		s.mu.Unlock()
		return v, 0, false
	}
	age = time.Duration(now - e.at)
	if c.maxStale >= 0 && age > c.maxStale {
		s.remove(e)
		s.mu.Unlock()
		return v, 0, false
	}
	v = e.v
	s.mu.Unlock()
	return v, age, true
}

// Delete forgets key's value, if any: call it when the value is known to be
// wrong (the item was deleted), so that no fallback serves it.
func (c *LastKnownGood[T]) Delete(key string) {
	s := c.shard(key)
	s.mu.Lock()
	if e, ok := s.m[key]; ok {
		s.remove(e)
	}
	s.mu.Unlock()
}

// Len returns the number of entries held, stale ones included until they
// are looked up or evicted.
func (c *LastKnownGood[T]) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// pushBack appends e as the newest entry; s.mu is held.
func (s *shard[T]) pushBack(e *entry[T]) {
	e.prev, e.next = s.tail, nil
	if s.tail != nil {
		s.tail.next = e
	} else {
		s.head = e
	}
	s.tail = e
}

// unlink takes e out of the list; s.mu is held.
func (s *shard[T]) unlink(e *entry[T]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// moveToBack makes e the newest entry; s.mu is held.
func (s *shard[T]) moveToBack(e *entry[T]) {
	if s.tail == e {
		return
	}
	s.unlink(e)
	s.pushBack(e)
}

// remove drops e; s.mu is held.
func (s *shard[T]) remove(e *entry[T]) {
	s.unlink(e)
	delete(s.m, e.key)
}
