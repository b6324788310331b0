package idempotency_test

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

// recordShape is a kind of result a store holds, for the memory tests.
type recordShape struct {
	name    string
	headers int  // header fields, one value each
	body    int  // bytes
	scoped  bool // every key in a scope of its own
}

var recordShapes = []recordShape{
	{"small", 0, 0, false},
	{"typical", 3, 200, false},
	{"large", 10, 16 << 10, false},
	{"typical-scope-per-key", 3, 200, true},
}

// fill claims and completes n fresh keys of one shape in s, with a 36-byte
// key (a UUID) and a 64-byte fingerprint in scope (or a scope per key, for
// sh.scoped), every string and slice a
// new allocation as they are when they come from requests.
func fill(t testing.TB, s *idempotency.MemoryStore, sh recordShape, from, n int, scope string) {
	t.Helper()
	for i := from; i < from+n; i++ {
		sc := scope
		if sh.scoped {
			sc = fmt.Sprint("tenant-", i)
		}
		key := idempotency.ScopedKey(sc, fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i))
		fp := fmt.Sprintf("sha256:%057d", i)
		c, err := s.Claim(bg, key, fp, time.Minute, time.Hour)
		if err != nil || c.State != idempotency.Claimed {
			t.Fatalf("Claim %d: %+v, %v", i, c, err)
		}
		var h http.Header
		if sh.headers > 0 {
			h = make(http.Header, sh.headers)
			for j := range sh.headers {
				h[fmt.Sprintf("X-Header-%d", j)] = []string{fmt.Sprintf("value-%d-%d", j, i)}
			}
		}
		rec := idempotency.Record{Status: 201, Header: h, Body: make([]byte, sh.body), Created: time.Now()}
		if err := s.Complete(bg, key, c.Token, rec, time.Hour); err != nil {
			t.Fatalf("Complete %d: %v", i, err)
		}
	}
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// A store filled to MaxBytes holds about MaxBytes of live heap: the
// accounting counts what the entries really cost (the map, the heaps, the
// lists, every string, header map and body), within 25%, for small,
// typical and large records. (It used to count 1.6–3 times too little.)
func TestMemoryStoreBytesMatchHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("fills stores of several MiB")
	}
	const maxBytes = 8 << 20
	for _, sh := range recordShapes {
		t.Run(sh.name, func(t *testing.T) {
			before := liveHeap()
			s := newMemory(t, idempotency.MemoryConfig{MaxEntries: -1, MaxBytes: maxBytes, MaxTombstones: -1})
			// Fill until the store evicts, then as much again, so that it
			// is full at its bound and its map has reached its size.
			n := 0
			for s.Stats().Evicted == 0 {
				fill(t, s, sh, n, 256, "tenant")
				n += 256
			}
			fill(t, s, sh, n, n, "tenant")
			heap := liveHeap() - before
			st := s.Stats()
			runtime.KeepAlive(s)
			perEntry := float64(heap) / float64(st.Entries)
			t.Logf("%s: %d entries, %d bytes counted (%.0f/entry), %d bytes of heap (%.0f/entry): heap/counted = %.2f",
				sh.name, st.Entries, st.Bytes, float64(st.Bytes)/float64(st.Entries), heap, perEntry, float64(heap)/float64(st.Bytes))
			if st.Bytes > maxBytes || st.Bytes < maxBytes*9/10 {
				t.Fatalf("the store counts %d bytes; want it full, near %d", st.Bytes, maxBytes)
			}
			if lo, hi := int64(maxBytes*3/4), int64(maxBytes*5/4); heap < lo || heap > hi {
				t.Fatalf("a store full at MaxBytes = %d holds %d bytes of heap (%.2f×); want within ±25%%", maxBytes, heap, float64(heap)/maxBytes)
			}
		})
	}
}

// The tombstones' memory is what the documentation says: about
// tombstoneBytes each, beside the store's MaxBytes.
func TestMemoryStoreTombstoneMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a store")
	}
	const tombs = 50_000
	const documented = idempotency.TombstoneBytes
	sh := recordShape{"small", 0, 0, false}
	before := liveHeap()
	s := newMemory(t, idempotency.MemoryConfig{MaxEntries: 1000, MaxBytes: -1, MaxTombstones: tombs})
	fill(t, s, sh, 0, 1000, "t")
	withEntries := liveHeap()
	fill(t, s, sh, 1000, 2*tombs, "t") // evicts 2×tombs results: the ring wraps
	heap := liveHeap()
	st := s.Stats()
	runtime.KeepAlive(s)
	if st.Tombstones != tombs {
		t.Fatalf("Stats().Tombstones = %d, want the cap %d", st.Tombstones, tombs)
	}
	per := float64(heap-withEntries) / tombs
	t.Logf("tombstones: %.1f bytes each (store of 1000 entries: %d bytes)", per, withEntries-before)
	if per > documented*5/4 || per < documented/2 {
		t.Fatalf("a tombstone takes %.1f bytes of heap; the documentation says about %d", per, documented)
	}
}
