package idempotency_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

// complete claims key and stores body for it, for ttl.
func complete(t *testing.T, s *idempotency.MemoryStore, key, body string, ttl time.Duration) {
	t.Helper()
	c, err := s.Claim(bg, key, "fp", time.Minute, ttl)
	if err != nil || c.State != idempotency.Claimed {
		t.Fatalf("Claim(%q) = %+v, %v; want claimed", key, c, err)
	}
	if err := s.Complete(bg, key, c.Token, idempotency.Record{Status: 200, Body: []byte(body)}, ttl); err != nil {
		t.Fatalf("Complete(%q): %v", key, err)
	}
}

// replays reports how many of scope's keys 0..n-1 still replay their body.
func replays(t *testing.T, s *idempotency.MemoryStore, scope string, n int) int {
	t.Helper()
	ok := 0
	for i := range n {
		key := idempotency.ScopedKey(scope, fmt.Sprint(i))
		c, err := s.Claim(bg, key, "fp", time.Minute, time.Hour)
		if err != nil {
			t.Fatalf("Claim(%q): %v", key, err)
		}
		switch {
		case c.State == idempotency.Completed && string(c.Record.Body) == fmt.Sprint(scope, i):
			ok++
		case c.State == idempotency.Claimed:
			t.Fatalf("%s's key %d was claimed again: its result was lost without a tombstone", scope, i)
		}
	}
	return ok
}

// Scope A floods the store with 100k new keys over ten seconds while scopes
// B, C and D, each within its fair share, keep every one of their results:
// A evicts its own. (The store used to evict the oldest results whatever
// their scope: B's went first.) A's evicted keys answer Forgotten.
func TestMemoryStoreFloodEvictsTheFlooder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const max = 10_000
		s := newMemory(t, idempotency.MemoryConfig{MaxEntries: max})
		quiet := []string{"B", "C", "D"}
		for _, sc := range quiet {
			for i := range 100 {
				complete(t, s, idempotency.ScopedKey(sc, fmt.Sprint(i)), fmt.Sprint(sc, i), 24*time.Hour)
			}
		}
		const flood = 100_000
		for i := range flood {
			complete(t, s, idempotency.ScopedKey("A", fmt.Sprint(i)), "a", 24*time.Hour)
			if i%1000 == 999 {
				time.Sleep(100 * time.Millisecond) // 10k keys a second
			}
		}
		for _, sc := range quiet {
			if n := replays(t, s, sc, 100); n != 100 {
				t.Errorf("after A's flood, %s replays %d of its 100 results; want all", sc, n)
			}
		}
		st := s.Stats()
		if st.Entries != max || st.Evicted != flood+300-max || st.Scopes != 4 {
			t.Fatalf("after the flood: %+v; want full, A's surplus evicted, 4 scopes", st)
		}
		// A's oldest keys were evicted: they say so, they do not run again.
		c, err := s.Claim(bg, idempotency.ScopedKey("A", "0"), "fp", time.Minute, time.Hour)
		if err != nil || c.State != idempotency.Forgotten {
			t.Fatalf("A's first key after its eviction: %+v, %v; want forgotten", c, err)
		}
		// And its newest are kept.
		c, _ = s.Claim(bg, idempotency.ScopedKey("A", fmt.Sprint(flood-1)), "fp", time.Minute, time.Hour)
		if c.State != idempotency.Completed {
			t.Fatalf("A's last key: %v, want completed", c.State)
		}
	})
}

// The same when bytes are short: a scope sending large bodies evicts its
// own results, and a scope of small ones within its share of MaxBytes keeps
// them all.
func TestMemoryStoreFloodOfBytesEvictsTheFlooder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const max = 1 << 20
		s := newMemory(t, idempotency.MemoryConfig{MaxEntries: -1, MaxBytes: max})
		for i := range 100 {
			complete(t, s, idempotency.ScopedKey("B", fmt.Sprint(i)), fmt.Sprint("B", i), time.Hour)
		}
		big := strings.Repeat("x", 8<<10)
		for i := range 1000 { // 8 MiB through a 1 MiB store
			complete(t, s, idempotency.ScopedKey("A", fmt.Sprint(i)), big, time.Hour)
		}
		if n := replays(t, s, "B", 100); n != 100 {
			t.Fatalf("after A's flood of bytes, B replays %d of its 100 results; want all", n)
		}
		if st := s.Stats(); st.Bytes > max || st.Evicted < 800 {
			t.Fatalf("after the flood: %+v", st)
		}
	})
}

// Room for 10: a scope holding 8 results meets one sending 5 new keys; the
// larger scope is evicted each time, so they end even, 5 and 5.
func TestMemoryStoreEvictsTheLargestScope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemory(t, idempotency.MemoryConfig{MaxEntries: 10})
		for i := range 8 {
			complete(t, s, idempotency.ScopedKey("A", fmt.Sprint(i)), fmt.Sprint("A", i), time.Hour)
		}
		for i := range 5 { // B0 and B1 fit; B2, B3 and B4 each evict one of A's
			complete(t, s, idempotency.ScopedKey("B", fmt.Sprint(i)), fmt.Sprint("B", i), time.Hour)
		}
		a, b := 0, 0
		for i := range 8 {
			c, _ := s.Claim(bg, idempotency.ScopedKey("A", fmt.Sprint(i)), "fp", time.Minute, time.Hour)
			if c.State == idempotency.Completed {
				a++
			} else if c.State != idempotency.Forgotten {
				t.Fatalf("A's key %d: %v", i, c.State)
			}
			if i >= 5 {
				continue
			}
			c, _ = s.Claim(bg, idempotency.ScopedKey("B", fmt.Sprint(i)), "fp", time.Minute, time.Hour)
			if c.State == idempotency.Completed {
				b++
			}
		}
		if a != 5 || b != 5 {
			t.Fatalf("A keeps %d results and B %d; want 5 and 5", a, b)
		}
		// Within a scope, the oldest went: A's first three.
		for i := range 3 {
			c, _ := s.Claim(bg, idempotency.ScopedKey("A", fmt.Sprint(i)), "fp", time.Minute, time.Hour)
			if c.State != idempotency.Forgotten {
				t.Fatalf("A's key %d (among its oldest) is %v, want forgotten", i, c.State)
			}
		}
	})
}

// A tombstone lasts until the result's TTL would have ended, then the key is
// free; beyond MaxTombstones the oldest is dropped (and counted) and its key
// runs again; with MaxTombstones negative, evicted keys run again.
func TestMemoryStoreTombstones(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemory(t, idempotency.MemoryConfig{MaxEntries: 1, MaxTombstones: 2})
		for i := range 4 { // each evicts the one before: tombstones of 0, 1, 2
			complete(t, s, fmt.Sprint(i), "r", time.Hour)
		}
		st := s.Stats()
		if st.Evicted != 3 || st.Tombstones != 2 || st.TombstonesDropped != 1 {
			t.Fatalf("after 3 evictions with room for 2 tombstones: %+v", st)
		}
		for _, k := range []string{"1", "2"} {
			if got := state(t, s, k); got != idempotency.Forgotten {
				t.Fatalf("evicted key %s = %v, want forgotten", k, got)
			}
		}
		// Key 0's tombstone was dropped: it runs again (and evicts 3).
		if got := state(t, s, "0"); got != idempotency.Claimed {
			t.Fatalf("key 0, tombstone dropped = %v, want claimed", got)
		}
		// After the results' TTL (an hour, spread by up to 5%), the
		// tombstones are over: the keys are new.
		time.Sleep(time.Hour * 21 / 20)
		for _, k := range []string{"1", "2"} {
			c, err := s.Claim(bg, k, "fp", time.Minute, time.Hour)
			if err != nil || c.State != idempotency.Claimed {
				t.Fatalf("key %s after its result's TTL = %+v, %v; want claimed", k, c, err)
			}
			if err := s.Release(bg, k, c.Token); err != nil {
				t.Fatal(err)
			}
		}

		none := newMemory(t, idempotency.MemoryConfig{MaxEntries: 1, MaxTombstones: -1})
		complete(t, none, "0", "r", time.Hour)
		complete(t, none, "1", "r", time.Hour)
		if got := state(t, none, "0"); got != idempotency.Claimed {
			t.Fatalf("without tombstones, an evicted key = %v, want claimed", got)
		}
		if st := none.Stats(); st.Tombstones != 0 || st.Evicted != 2 {
			t.Fatalf("without tombstones: %+v", st)
		}
	})
}

// Results stored together do not expire together: each TTL is stretched by
// up to 5%, never shortened.
func TestMemoryStoreSpreadsResultTTLs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 200
		s := newMemory(t, idempotency.MemoryConfig{})
		for i := range n {
			complete(t, s, fmt.Sprint(i), "r", time.Hour)
		}
		time.Sleep(time.Hour - time.Nanosecond)
		if st := s.Stats(); st.Entries != n {
			t.Fatalf("just before the TTL, %d of %d results left; none may expire early", st.Entries, n)
		}
		// Halfway through the spread, about half are gone (all on one side:
		// odds 2⁻¹⁹⁹).
		time.Sleep(time.Hour*25/1000 + time.Nanosecond)
		if st := s.Stats(); st.Entries == 0 || st.Entries == n {
			t.Fatalf("at TTL + 2.5%%, %d of %d results left; want the expiries spread", st.Entries, n)
		}
		time.Sleep(time.Hour * 25 / 1000)
		if st := s.Stats(); st.Entries != 0 {
			t.Fatalf("at TTL + 5%%, %d results left, want none", st.Entries)
		}
	})
}
