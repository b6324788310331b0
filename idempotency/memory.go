package idempotency

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/watertight-go/watertight"
)

// Defaults of MemoryConfig.
const (
	// DefaultMaxEntries bounds the keys (claims and results) a MemoryStore
	// holds when MemoryConfig.MaxEntries is zero.
	DefaultMaxEntries = 100_000
	// DefaultMaxBytes bounds the bytes a MemoryStore holds when
	// MemoryConfig.MaxBytes is zero: 64 MiB.
	DefaultMaxBytes = 64 << 20
	// EntryOverhead is what every entry counts toward MemoryConfig.MaxBytes
	// besides its key and its record (Record.Size): a rough measure of the
	// bookkeeping around it.
	EntryOverhead = 128
)

// Errors of the MemoryStore (other stores may return them too).
var (
	// ErrFull: the store has no room. Claim returns it when every entry is
	// an in-flight claim (results are evicted to make room, claims never
	// are: dropping one would let a duplicate run); Complete returns it
	// when the record does not fit even after evicting every result. It is
	// a saturation (watertight.IsSaturation), and the returned error wraps
	// it with the reason.
	ErrFull = watertight.NewSaturation("idempotency: store full")
	// ErrTooLarge: Complete was given a record larger than the store's
	// byte limit; nothing was stored and the claim is still held (release
	// it).
	ErrTooLarge = errors.New("idempotency: record larger than the store's limit")
)

// MemoryConfig configures a MemoryStore.
type MemoryConfig struct {
	// MaxEntries bounds the number of keys held, claims and results
	// together. Zero means DefaultMaxEntries (100,000); a negative value
	// means no limit.
	MaxEntries int
	// MaxBytes bounds the bytes held: for each entry its key, its
	// fingerprint, its record (Record.Size) and EntryOverhead. Zero means
	// DefaultMaxBytes (64 MiB); a negative value means no limit.
	MaxBytes int64
}

// DefaultMemoryConfig returns the configuration NewMemoryStore uses for
// zero fields: 100,000 entries and 64 MiB.
func DefaultMemoryConfig() MemoryConfig {
	return MemoryConfig{MaxEntries: DefaultMaxEntries, MaxBytes: DefaultMaxBytes}
}

// MemoryStore is a Store that keeps claims and results in the process's
// memory: the embedded default. It deduplicates only the requests that
// reach this process; servers that run as several instances need a shared
// store (the Redis store of contrib/redisstore).
//
// It is bounded. When a new claim or a new result would exceed
// MemoryConfig.MaxEntries or MaxBytes, expired entries go first (they are
// dropped as soon as they are noticed anyway), then the oldest results, in
// the order they were completed. An in-flight claim is never evicted: a
// claim that finds the store full of claims fails with ErrFull instead, so
// that no duplicate can slip in. A result evicted before its TTL is
// forgotten: a request that comes later with its key runs again, so size
// the bounds for the peak rate of keyed requests times the result TTL (see
// Stats for the evictions).
//
// A claim's lock expires lockTTL after it was taken: the key then reads
// Unknown (kept, never claimed again) until the claim's ttl has passed since
// it was taken. Results expire ttl after they were stored. Time is read with
// time.Now (so testing/synctest's fake clock drives it).
// Expired entries are removed by the operations themselves, oldest expiry
// first, at a logarithmic cost per entry: the store starts no goroutine and
// needs no Close.
//
// Tokens are fencing tokens: decimal numbers that grow with every claim,
// never reused by the store. Records are copied in and out: the caller may
// reuse or change what it passed to Complete and what Claim returned.
//
// A MemoryStore is safe for concurrent use; every operation is atomic (one
// mutex). The zero value is ready to use, with the default bounds.
type MemoryStore struct {
	mu         sync.Mutex
	ready      bool
	maxEntries int   // < 0: no limit
	maxBytes   int64 // < 0: no limit
	m          map[string]*entry
	expiry     expiryHeap // every entry, soonest expiry first
	oldest     *entry     // results, oldest completed first
	newest     *entry
	bytes      int64
	claims     int
	tokens     uint64 // the last token handed out
	evicted    uint64
	expired    uint64
}

// entry is a key's claim or result. All fields are guarded by
// MemoryStore.mu.
type entry struct {
	key     string
	fp      string
	token   string // the claim's token; "" once completed or unknown
	rec     *Record
	expires time.Time
	size    int64
	index   int    // in the expiry heap
	prev    *entry // results list
	next    *entry

	// keepUntil is the claim's time plus its ttl: when the claim's lock
	// expires before that, the entry becomes unknown until keepUntil.
	keepUntil time.Time
	unknown   bool // the claim's lock expired: its outcome is unknown
}

// NewMemoryStore returns a MemoryStore for cfg. Negative fields mean no
// limit, so every cfg is valid and the error is always nil; it is there for
// the Config convention.
func NewMemoryStore(cfg MemoryConfig) (*MemoryStore, error) {
	s := &MemoryStore{}
	s.init(cfg)
	return s, nil
}

func (s *MemoryStore) init(cfg MemoryConfig) {
	s.maxEntries = cfg.MaxEntries
	switch {
	case s.maxEntries == 0:
		s.maxEntries = DefaultMaxEntries
	case s.maxEntries < 0:
		s.maxEntries = -1
	}
	s.maxBytes = cfg.MaxBytes
	switch {
	case s.maxBytes == 0:
		s.maxBytes = DefaultMaxBytes
	case s.maxBytes < 0:
		s.maxBytes = -1
	}
	s.m = make(map[string]*entry)
	s.ready = true
}

// lock takes the mutex, sets up a zero store, and removes the entries
// expired at now — except a claim whose lock expired before its ttl: it
// becomes unknown (kept, never claimed again) until the claim's ttl is over.
func (s *MemoryStore) lock(now time.Time) {
	s.mu.Lock()
	if !s.ready {
		s.init(MemoryConfig{})
	}
	for len(s.expiry) > 0 && !now.Before(s.expiry[0].expires) {
		e := s.expiry[0]
		if e.token != "" && now.Before(e.keepUntil) {
			e.token, e.unknown = "", true
			e.expires = e.keepUntil
			heap.Fix(&s.expiry, e.index)
			s.claims--
			continue
		}
		s.removeLocked(e)
		s.expired++
	}
}

// Claim implements Store. It fails with ErrFull (wrapped) when the store is
// full of in-flight claims, and with an error for an empty key or a lockTTL
// that is not positive.
func (s *MemoryStore) Claim(ctx context.Context, key, fp string, lockTTL, ttl time.Duration) (Claim, error) {
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	if key == "" {
		return Claim{}, errors.New("idempotency: MemoryStore.Claim: the key is empty")
	}
	if lockTTL <= 0 {
		return Claim{}, fmt.Errorf("idempotency: MemoryStore.Claim: lockTTL must be > 0, got %v", lockTTL)
	}
	now := time.Now()
	s.lock(now)
	if e := s.m[key]; e != nil {
		c := Claim{State: InFlight, Fingerprint: e.fp}
		if e.unknown {
			c.State = Unknown
		}
		rec := e.rec
		s.mu.Unlock()
		if rec != nil {
			// A stored record is never modified (Complete stores a new
			// one), so it is copied outside the lock.
			c.State, c.Record = Completed, rec.clone()
		}
		return c, nil
	}
	size := EntryOverhead + int64(len(key)+len(fp))
	if !s.makeRoomLocked(1, size) {
		n := len(s.m)
		s.mu.Unlock()
		return Claim{}, fmt.Errorf("%w: all %d entries are in-flight claims, and claims are never evicted; retry later, or raise MemoryConfig.MaxEntries or MaxBytes", ErrFull, n)
	}
	s.tokens++
	token := strconv.FormatUint(s.tokens, 10)
	e := &entry{key: key, fp: fp, token: token, expires: now.Add(lockTTL), keepUntil: now.Add(ttl), size: size}
	s.m[key] = e
	heap.Push(&s.expiry, e)
	s.bytes += size
	s.claims++
	s.mu.Unlock()
	return Claim{State: Claimed, Token: token, Fingerprint: fp}, nil
}

// Complete implements Store. It fails with ErrNotOwner when token does not
// hold key's claim (including a claim that has expired), with ErrTooLarge
// when the record alone exceeds MaxBytes, and with ErrFull (wrapped) when it
// does not fit even after evicting every result; in the last two cases the
// claim is still held. A record with an empty Fingerprint is stored with the
// claim's.
func (s *MemoryStore) Complete(ctx context.Context, key, token string, rec Record, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("idempotency: MemoryStore.Complete: ttl must be > 0, got %v", ttl)
	}
	stored := rec.clone() // outside the lock
	now := time.Now()
	s.lock(now)
	defer s.mu.Unlock()
	e := s.m[key]
	if e == nil || e.token == "" || e.token != token {
		return ErrNotOwner
	}
	if stored.Fingerprint == "" {
		stored.Fingerprint = e.fp
	}
	size := EntryOverhead + int64(len(key)+stored.Size())
	if stored.Fingerprint != e.fp {
		size += int64(len(e.fp))
	}
	if s.maxBytes >= 0 && size > s.maxBytes {
		return fmt.Errorf("%w: the record takes %d bytes, the store holds at most %d", ErrTooLarge, size, s.maxBytes)
	}
	if !s.makeRoomLocked(0, size-e.size) {
		return fmt.Errorf("%w: no room for a record of %d bytes beside the %d in-flight claims", ErrFull, size, s.claims)
	}
	e.token = ""
	e.rec = stored
	e.expires = now.Add(ttl)
	heap.Fix(&s.expiry, e.index)
	s.bytes += size - e.size
	e.size = size
	s.claims--
	// Append to the results list.
	e.prev = s.newest
	if s.newest != nil {
		s.newest.next = e
	} else {
		s.oldest = e
	}
	s.newest = e
	return nil
}

// Release implements Store. It fails with ErrNotOwner when token does not
// hold key's claim (including a claim that has expired).
func (s *MemoryStore) Release(ctx context.Context, key, token string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.lock(time.Now())
	defer s.mu.Unlock()
	e := s.m[key]
	if e == nil || e.token == "" || e.token != token {
		return ErrNotOwner
	}
	s.removeLocked(e)
	return nil
}

// makeRoomLocked evicts the oldest results until entries more entries and
// bytes more bytes fit, and reports whether they do.
func (s *MemoryStore) makeRoomLocked(entries int, bytes int64) bool {
	for (s.maxEntries >= 0 && len(s.m)+entries > s.maxEntries) || (s.maxBytes >= 0 && s.bytes+bytes > s.maxBytes) {
		if s.oldest == nil {
			return false
		}
		s.removeLocked(s.oldest)
		s.evicted++
	}
	return true
}

// removeLocked forgets e.
func (s *MemoryStore) removeLocked(e *entry) {
	delete(s.m, e.key)
	heap.Remove(&s.expiry, e.index)
	s.bytes -= e.size
	if e.unknown {
		return
	}
	if e.token != "" {
		s.claims--
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.oldest = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.newest = e.prev
	}
	e.prev, e.next = nil, nil
}

// MemoryStats is a snapshot of a MemoryStore.
type MemoryStats struct {
	// Entries is the number of keys held: claims and results.
	Entries int
	// Claims is the number of in-flight claims.
	Claims int
	// Bytes is what the entries count toward MemoryConfig.MaxBytes.
	Bytes int64
	// Evicted counts the results dropped before their TTL to make room.
	Evicted uint64
	// Expired counts the claims and results removed because their time was
	// up.
	Expired uint64
}

// Stats returns the store's counts, after removing what has expired.
func (s *MemoryStore) Stats() MemoryStats {
	s.lock(time.Now())
	defer s.mu.Unlock()
	return MemoryStats{Entries: len(s.m), Claims: s.claims, Bytes: s.bytes, Evicted: s.evicted, Expired: s.expired}
}

// clone returns a deep copy of r.
func (r *Record) clone() *Record {
	c := *r
	if r.Header != nil {
		c.Header = r.Header.Clone()
	}
	if r.Body != nil {
		c.Body = append(make([]byte, 0, len(r.Body)), r.Body...)
	}
	return &c
}

// expiryHeap is a min-heap of entries by expiry (container/heap).
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
