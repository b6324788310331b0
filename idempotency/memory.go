package idempotency

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
)

// Defaults of MemoryConfig.
const (
	// DefaultMaxEntries bounds the keys (claims and results) a MemoryStore
	// holds when MemoryConfig.MaxEntries is zero.
	DefaultMaxEntries = 100_000
	// DefaultMaxBytes bounds the bytes a MemoryStore holds when
	// MemoryConfig.MaxBytes is zero: 64 MiB.
	DefaultMaxBytes = 64 << 20
	// DefaultMaxTombstones bounds the tombstones of evicted results a
	// MemoryStore keeps when MemoryConfig.MaxTombstones is zero: 100,000,
	// about TombstoneBytes each (6.1 MiB).
	DefaultMaxTombstones = 100_000
	// EntryOverhead is what every entry counts toward MemoryConfig.MaxBytes
	// besides its key, its fingerprint and its record: the bookkeeping
	// around it (the entry, its share of the map and of the expiry heap),
	// measured on amd64. Strings, bodies and header maps are counted as the
	// heap holds them, rounded up to the allocator's size classes.
	EntryOverhead = entryOverhead
	// TombstoneBytes is the memory a tombstone takes (a 64-bit hash of the
	// key and the result's expiry, in a map and a ring), beside MaxBytes.
	TombstoneBytes = 64
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
	// MaxBytes bounds the heap the entries hold: for each entry its key,
	// its fingerprint and its record (body, header map, names and values)
	// as allocated, and EntryOverhead; for each scope a little more (its
	// share of the fairness bookkeeping). A store full at MaxBytes holds
	// MaxBytes of heap to within a few tenths (tombstones aside). Zero means
	// DefaultMaxBytes (64 MiB); a negative value means no limit.
	MaxBytes int64
	// MaxTombstones bounds the tombstones kept for results evicted before
	// their TTL, so that their keys answer Forgotten instead of running
	// again (see MemoryStore). Each takes TombstoneBytes, outside MaxBytes.
	// When the bound is reached the oldest tombstone is dropped, and its key,
	// if it comes again before its result's TTL would have ended, runs again
	// as a new one (MemoryStats.TombstonesDropped counts them). Zero means
	// DefaultMaxTombstones (100,000); a negative value means none: an
	// evicted result's key runs again.
	MaxTombstones int
}

// DefaultMemoryConfig returns the configuration NewMemoryStore uses for
// zero fields: 100,000 entries, 64 MiB and 100,000 tombstones.
func DefaultMemoryConfig() MemoryConfig {
	return MemoryConfig{MaxEntries: DefaultMaxEntries, MaxBytes: DefaultMaxBytes, MaxTombstones: DefaultMaxTombstones}
}

// MemoryStore is a Store that keeps claims and results in the process's
// memory: the embedded default. It deduplicates only the requests that
// reach this process; servers that run as several instances need a shared
// store (the Redis store of contrib/redisstore).
//
// It is bounded, and fair between scopes. When a new claim or a new result
// would exceed MemoryConfig.MaxEntries or MaxBytes, expired entries go first
// (they are dropped as soon as they are noticed anyway), then results of
// the scope that holds the most results (when entries are short; the most
// result bytes when bytes are), its oldest completed first. The scope is
// the caller's part of the key (ScopedKey's digest; keys ScopedKey did not
// make share one scope). So a scope that floods the store evicts its own
// results, and what a scope can count on is this: with S scopes holding
// results, a scope that holds fewer than 1/S of the results held (of the
// result bytes, when bytes are short) is never evicted — with no claims in
// flight, a scope under MaxEntries/S results and MaxBytes/S bytes keeps
// every result for its TTL, however fast the others send new keys. An
// in-flight claim, or a key whose claim expired (Unknown), is never
// evicted: a claim that finds the store full of them fails with ErrFull
// instead, so that no duplicate can slip in.
//
// A result evicted before its TTL leaves a tombstone (a 64-bit hash of its
// key and its expiry, TombstoneBytes, at most MemoryConfig.MaxTombstones,
// oldest dropped first): until the result's TTL would have ended, a Claim
// of the key answers Forgotten and nothing runs again. Size MaxEntries and
// MaxBytes for the peak rate of keyed requests times the result TTL, and
// MaxTombstones for the evictions within a TTL (MemoryStats counts both).
//
// A claim's lock expires lockTTL after it was taken: the key then reads
// Unknown (kept, never claimed again) until the claim's ttl has passed since
// it was taken. Results expire after ttl stretched by up to 5% at random
// (backoff.SpreadUp(ttl, 0.05): never sooner than ttl), so that the
// results of a burst do not all expire at once. Time is read with
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
	scopes     map[string]*scope
	byResults  scopeHeap // scopes holding results, most results first
	byBytes    scopeHeap // scopes holding results, most result bytes first
	tombs      tombstones
	spread     float64 // of result TTLs: ttlSpread (0 in the model test)
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
	sc      *scope // the key's scope
	prev    *entry // the scope's results list
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
	s.scopes = make(map[string]*scope)
	s.byResults = scopeHeap{byBytes: false}
	s.byBytes = scopeHeap{byBytes: true}
	s.tombs.init(cfg.MaxTombstones)
	s.spread = ttlSpread
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
	if s.tombs.forgotten(key, now) {
		s.mu.Unlock()
		return Claim{State: Forgotten}, nil
	}
	sc := s.scopeLocked(key)
	sc.entries++ // the new entry's, now: the scope stays while room is made
	token := strconv.FormatUint(s.tokens+1, 10)
	size := claimSize(key, fp, token)
	if !s.makeRoomLocked(1, size, now) {
		sc.entries--
		s.dropScopeIfEmptyLocked(sc)
		n := len(s.m)
		s.mu.Unlock()
		return Claim{}, fmt.Errorf("%w: all %d entries are in-flight claims or unknown keys, and those are never evicted; retry later, or raise MemoryConfig.MaxEntries or MaxBytes", ErrFull, n)
	}
	s.tokens++
	e := &entry{key: key, fp: fp, token: token, expires: now.Add(lockTTL), keepUntil: now.Add(ttl), size: size, sc: sc}
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
// claim's. The result is kept for ttl stretched by up to 5% at random
// (backoff.SpreadUp(ttl, 0.05)): never less than ttl, and the results of a
// burst do not expire together.
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
	if stored.Fingerprint == "" || stored.Fingerprint == e.fp {
		stored.Fingerprint = e.fp // one string for both
	}
	size := resultSize(key, e.fp, stored)
	if s.maxBytes >= 0 && size > s.maxBytes {
		return fmt.Errorf("%w: the record takes %d bytes, the store holds at most %d", ErrTooLarge, size, s.maxBytes)
	}
	if !s.makeRoomLocked(0, size-e.size, now) {
		return fmt.Errorf("%w: no room for a record of %d bytes beside the %d in-flight claims", ErrFull, size, s.claims)
	}
	e.token = ""
	e.rec = stored
	e.expires = now.Add(backoff.SpreadUp(ttl, s.spread))
	heap.Fix(&s.expiry, e.index)
	s.bytes += size - e.size
	e.size = size
	s.claims--
	s.addResultLocked(e)
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

// makeRoomLocked evicts results until entries more entries and bytes more
// bytes fit, and reports whether they do. Each eviction takes the oldest
// result of the scope holding the most results (the most result bytes,
// when only bytes are short) and leaves a tombstone of its key.
func (s *MemoryStore) makeRoomLocked(entries int, bytes int64, now time.Time) bool {
	for {
		var h *scopeHeap
		switch {
		case s.maxEntries >= 0 && len(s.m)+entries > s.maxEntries:
			h = &s.byResults
		case s.maxBytes >= 0 && s.bytes+bytes > s.maxBytes:
			h = &s.byBytes
		default:
			return true
		}
		if len(h.s) == 0 {
			return false
		}
		e := h.s[0].oldest
		s.tombs.add(e.key, e.expires, now)
		s.removeLocked(e)
		s.evicted++
	}
}

// removeLocked forgets e.
func (s *MemoryStore) removeLocked(e *entry) {
	delete(s.m, e.key)
	heap.Remove(&s.expiry, e.index)
	s.bytes -= e.size
	switch {
	case e.unknown:
	case e.token != "":
		s.claims--
	default:
		s.removeResultLocked(e)
	}
	e.sc.entries--
	s.dropScopeIfEmptyLocked(e.sc)
}

// scopeLocked returns the scope of key, made (and counted) if it holds
// nothing yet.
func (s *MemoryStore) scopeLocked(key string) *scope {
	name := scopeOf(key)
	sc := s.scopes[name]
	if sc == nil {
		sc = &scope{name: strings.Clone(name), byResults: -1, byBytes: -1}
		s.scopes[sc.name] = sc
		s.bytes += scopeOverhead
	}
	return sc
}

// dropScopeIfEmptyLocked forgets sc if it holds no entry.
func (s *MemoryStore) dropScopeIfEmptyLocked(sc *scope) {
	if sc.entries == 0 {
		delete(s.scopes, sc.name)
		s.bytes -= scopeOverhead
	}
}

// addResultLocked appends the newly completed e to its scope's results.
func (s *MemoryStore) addResultLocked(e *entry) {
	sc := e.sc
	e.prev = sc.newest
	if sc.newest != nil {
		sc.newest.next = e
	} else {
		sc.oldest = e
	}
	sc.newest = e
	sc.results++
	sc.resultBytes += e.size
	if sc.results == 1 {
		heap.Push(&s.byResults, sc)
		heap.Push(&s.byBytes, sc)
	} else {
		heap.Fix(&s.byResults, sc.byResults)
		heap.Fix(&s.byBytes, sc.byBytes)
	}
}

// removeResultLocked takes the result e out of its scope's results.
func (s *MemoryStore) removeResultLocked(e *entry) {
	sc := e.sc
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		sc.oldest = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		sc.newest = e.prev
	}
	e.prev, e.next = nil, nil
	sc.results--
	sc.resultBytes -= e.size
	if sc.results == 0 {
		heap.Remove(&s.byResults, sc.byResults)
		heap.Remove(&s.byBytes, sc.byBytes)
	} else {
		heap.Fix(&s.byResults, sc.byResults)
		heap.Fix(&s.byBytes, sc.byBytes)
	}
}

// MemoryStats is a snapshot of a MemoryStore.
type MemoryStats struct {
	// Entries is the number of keys held: claims, unknown keys and results.
	Entries int
	// Claims is the number of in-flight claims.
	Claims int
	// Bytes is what the entries and their scopes count toward
	// MemoryConfig.MaxBytes: about the heap they hold.
	Bytes int64
	// Evicted counts the results dropped before their TTL to make room
	// (each leaves a tombstone, unless MaxTombstones is negative).
	Evicted uint64
	// Expired counts the claims and results removed because their time was
	// up.
	Expired uint64
	// Scopes is the number of scopes holding entries.
	Scopes int
	// Tombstones is the number of tombstones held (TombstoneBytes each);
	// some may have outlived their result's TTL and not been noticed yet.
	Tombstones int
	// TombstonesDropped counts the tombstones dropped, to keep within
	// MaxTombstones, before their result's TTL had ended: their keys run
	// again if they come back in time.
	TombstonesDropped uint64
}

// Stats returns the store's counts, after removing what has expired.
func (s *MemoryStore) Stats() MemoryStats {
	s.lock(time.Now())
	defer s.mu.Unlock()
	return MemoryStats{Entries: len(s.m), Claims: s.claims, Bytes: s.bytes, Evicted: s.evicted, Expired: s.expired,
		Scopes: len(s.scopes), Tombstones: len(s.tombs.m), TombstonesDropped: s.tombs.dropped}
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

// ttlSpread stretches each result's TTL by up to this fraction
// (backoff.SpreadUp), so that a burst's results do not expire together.
const ttlSpread = 0.05

// scopeDigestLen is the length of the scope part of a ScopedKey: a
// base64url SHA-256 digest, whose alphabet has no '/'.
const scopeDigestLen = 43

// scopeOf returns the scope part of a store key that ScopedKey made (the
// scope's digest), or "" — one shared scope — for any other key.
func scopeOf(key string) string {
	if len(key) > scopeDigestLen && key[scopeDigestLen] == '/' {
		return key[:scopeDigestLen]
	}
	return ""
}

// scope is what the store knows of a scope's entries, for fair eviction.
// It lives while the scope holds an entry. Its fields are guarded by
// MemoryStore.mu.
type scope struct {
	name        string
	entries     int   // claims, unknown keys and results
	results     int   // results, in the list below
	resultBytes int64 // their size
	oldest      *entry
	newest      *entry
	byResults   int // index in MemoryStore.byResults, -1 when absent
	byBytes     int // index in MemoryStore.byBytes, -1 when absent
}

// scopeHeap is a max-heap of the scopes that hold results, by their number
// of results or by their bytes (container/heap).
type scopeHeap struct {
	s       []*scope
	byBytes bool
}

func (h *scopeHeap) Len() int { return len(h.s) }
func (h *scopeHeap) Less(i, j int) bool {
	if h.byBytes {
		return h.s[i].resultBytes > h.s[j].resultBytes
	}
	return h.s[i].results > h.s[j].results
}
func (h *scopeHeap) Swap(i, j int) {
	h.s[i], h.s[j] = h.s[j], h.s[i]
	h.setIndex(i, i)
	h.setIndex(j, j)
}
func (h *scopeHeap) setIndex(i, to int) {
	if h.byBytes {
		h.s[i].byBytes = to
	} else {
		h.s[i].byResults = to
	}
}
func (h *scopeHeap) Push(x any) {
	h.s = append(h.s, x.(*scope))
	h.setIndex(len(h.s)-1, len(h.s)-1)
}
func (h *scopeHeap) Pop() any {
	n := len(h.s) - 1
	h.setIndex(n, -1)
	sc := h.s[n]
	h.s[n] = nil
	h.s = h.s[:n]
	return sc
}

// tombstones remembers the keys of results evicted before their TTL: a
// 64-bit hash of each key (maphash, with the store's own seed) and the
// result's expiry, at most max of them, the oldest dropped first. A key
// that hashes like a tombstone's (odds about n/2⁶⁴) reads Forgotten too.
type tombstones struct {
	max     int // 0: none are kept
	seed    maphash.Seed
	m       map[uint64]int64 // key hash → the result's expiry, Unix ns
	ring    []tomb           // as added; once full, the oldest is at next
	next    int
	dropped uint64
}

type tomb struct {
	hash    uint64
	expires int64 // Unix ns
}

func (t *tombstones) init(max int) {
	switch {
	case max == 0:
		max = DefaultMaxTombstones
	case max < 0:
		max = 0
	}
	t.max = max
	t.seed = maphash.MakeSeed()
	t.m = make(map[uint64]int64)
}

// add keeps a tombstone of key until expires, dropping the oldest when
// there are max already.
func (t *tombstones) add(key string, expires, now time.Time) {
	if t.max == 0 || !now.Before(expires) {
		return
	}
	tb := tomb{maphash.String(t.seed, key), expires.UnixNano()}
	if len(t.ring) < t.max {
		t.ring = append(t.ring, tb)
	} else {
		old := t.ring[t.next]
		if exp, ok := t.m[old.hash]; ok && exp == old.expires {
			delete(t.m, old.hash)
			if now.UnixNano() < old.expires {
				t.dropped++
			}
		}
		t.ring[t.next] = tb
		t.next = (t.next + 1) % t.max
	}
	t.m[tb.hash] = tb.expires
}

// forgotten reports whether key has a tombstone that has not expired at
// now; an expired one is dropped.
func (t *tombstones) forgotten(key string, now time.Time) bool {
	if len(t.m) == 0 {
		return false
	}
	h := maphash.String(t.seed, key)
	exp, ok := t.m[h]
	if !ok {
		return false
	}
	if now.UnixNano() < exp {
		return true
	}
	delete(t.m, h)
	return false
}

// The memory the store's bookkeeping takes, measured on amd64 (see
// TestMemoryStoreBytesMatchHeap): per entry, the entry (160 bytes, its
// size class), its map slot (a string and a pointer, with the map's
// slack) and its expiry heap slot; per scope, its struct, its name, its
// map slot and its two heap slots; per record, the Record.
const (
	entryOverhead  = 224
	scopeOverhead  = 160
	recordOverhead = 80
)

// allocSize returns the heap an object of n bytes takes: n rounded up to
// the allocator's size class (within an eighth, as Go's classes are), or
// to whole pages beyond 32 KiB.
func allocSize(n int) int64 {
	switch {
	case n <= 0:
		return 0
	case n <= 8:
		return 8
	case n <= 16:
		return 16
	case n <= 24:
		return 24
	case n <= 128:
		return int64(n+15) &^ 15
	case n > 32<<10:
		return int64(n+8191) &^ 8191
	}
	step := 1 << (bits.Len(uint(n-1)) - 3) // an eighth of the next power of two
	return int64((n + step - 1) &^ (step - 1))
}

// claimSize is what a claim counts toward MaxBytes.
func claimSize(key, fp, token string) int64 {
	return EntryOverhead + allocSize(len(key)) + allocSize(len(fp)) + allocSize(len(token))
}

// resultSize is what a result counts toward MaxBytes: its key, the claim's
// fingerprint fp, and rec as Record.clone copied it (a header map and one
// slice of values; names and values are counted though they are shared
// with the caller's, who often drops them).
func resultSize(key, fp string, rec *Record) int64 {
	n := EntryOverhead + allocSize(len(key)) + allocSize(len(fp)) + recordOverhead + allocSize(len(rec.Body))
	if rec.Fingerprint != fp {
		n += allocSize(len(rec.Fingerprint))
	}
	if rec.Header != nil {
		values := 0
		for k, vs := range rec.Header {
			n += allocSize(len(k))
			for _, v := range vs {
				n += allocSize(len(v))
			}
			values += len(vs)
		}
		n += allocSize(16*values) + headerMapSize(len(rec.Header))
	}
	return n
}

// headerMapSize is the heap of a map[string][]string made for n entries:
// its header, and groups of 8 slots (a 16-byte key, a 24-byte value) with
// a control word, for at most 7/8 of them full.
func headerMapSize(n int) int64 {
	const group = 8 + 8*(16+24)
	if n <= 8 {
		return 48 + allocSize(group)
	}
	slots := 1 << bits.Len(uint(n*8/7))
	return 48 + 64 + int64(slots/8)*group
}
