package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/idempotency/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idempotency.Store {
		s, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestZeroMemoryStoreConformance(t *testing.T) {
	storetest.RunWith(t, func(t *testing.T) idempotency.Store { return new(idempotency.MemoryStore) },
		storetest.Options{TTL: 50 * time.Millisecond, Goroutines: 16})
}

func newMemory(t *testing.T, cfg idempotency.MemoryConfig) *idempotency.MemoryStore {
	t.Helper()
	s, err := idempotency.NewMemoryStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var bg = context.Background()

func mustClaim(t *testing.T, s idempotency.Store, key string, lockTTL time.Duration) string {
	t.Helper()
	c, err := s.Claim(bg, key, "fp-"+key, lockTTL, time.Hour)
	if err != nil || c.State != idempotency.Claimed {
		t.Fatalf("Claim(%q) = %+v, %v; want claimed", key, c, err)
	}
	return c.Token
}

func mustComplete(t *testing.T, s idempotency.Store, key, tok string, body string, ttl time.Duration) {
	t.Helper()
	if err := s.Complete(bg, key, tok, idempotency.Record{Status: 200, Body: []byte(body)}, ttl); err != nil {
		t.Fatalf("Complete(%q): %v", key, err)
	}
}

func state(t *testing.T, s idempotency.Store, key string) idempotency.ClaimState {
	t.Helper()
	c, err := s.Claim(bg, key, "fp-"+key, time.Hour, time.Hour)
	if err != nil {
		t.Fatalf("Claim(%q): %v", key, err)
	}
	return c.State
}

// Claims' locks expire exactly lockTTL after they were taken (the key is
// then Unknown until the claim's ttl), results between ttl and ttl + 5%
// after they were stored (the spread), on the (fake) clock.
func TestMemoryStoreExpiryOnTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemory(t, idempotency.MemoryConfig{})
		tok := mustClaim(t, s, "k", 30*time.Second) // ttl: an hour
		time.Sleep(30*time.Second - time.Nanosecond)
		if st := state(t, s, "k"); st != idempotency.InFlight {
			t.Fatalf("just before lockTTL: %v, want in flight", st)
		}
		time.Sleep(time.Nanosecond)
		if st := state(t, s, "k"); st != idempotency.Unknown {
			t.Fatalf("at lockTTL: %v, want unknown", st)
		}
		if err := s.Complete(bg, "k", tok, idempotency.Record{}, time.Hour); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("old owner's Complete = %v, want ErrNotOwner", err)
		}
		time.Sleep(time.Hour - 30*time.Second - time.Nanosecond)
		if st := state(t, s, "k"); st != idempotency.Unknown {
			t.Fatalf("just before the claim's ttl: %v, want unknown", st)
		}
		time.Sleep(time.Nanosecond)
		c, err := s.Claim(bg, "k", "fp-k", time.Minute, time.Hour)
		if err != nil || c.State != idempotency.Claimed || c.Token == tok {
			t.Fatalf("at the claim's ttl: %+v, %v; want a new claim", c, err)
		}
		mustComplete(t, s, "k", c.Token, "r", 24*time.Hour)
		time.Sleep(24*time.Hour - time.Nanosecond)
		if st := state(t, s, "k"); st != idempotency.Completed {
			t.Fatalf("just before the TTL: %v, want completed", st)
		}
		time.Sleep(24*time.Hour*5/100 + time.Nanosecond)
		if st := s.Stats(); st.Entries != 0 || st.Expired != 2 || st.Bytes != 0 {
			t.Fatalf("after the TTL: %+v, want empty with 2 expired", st)
		}
		if st := state(t, s, "k"); st != idempotency.Claimed {
			t.Fatalf("after the TTL: %v, want claimed", st)
		}
	})
}

// A claim whose owner never completes it, even expired, cannot be completed
// later: Complete is fenced by the claim's lifetime, as a store with TTLs
// (Redis) does.
func TestMemoryStoreExpiredClaimCannotComplete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemory(t, idempotency.MemoryConfig{})
		tok := mustClaim(t, s, "k", time.Second)
		time.Sleep(time.Second)
		if err := s.Complete(bg, "k", tok, idempotency.Record{}, time.Hour); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("Complete after lockTTL = %v, want ErrNotOwner", err)
		}
		if err := s.Release(bg, "k", tok); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("Release after lockTTL = %v, want ErrNotOwner", err)
		}
	})
}

// Bounded by entries: expired entries go first, then the oldest results;
// claims are never evicted, and a store full of claims refuses new ones.
func TestMemoryStoreMaxEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemory(t, idempotency.MemoryConfig{MaxEntries: 4})
		// r1 expires soon; r2 and r3 are results completed in that order.
		mustComplete(t, s, "r1", mustClaim(t, s, "r1", time.Hour), "1", time.Minute)
		t2 := mustClaim(t, s, "r2", time.Hour)
		t3 := mustClaim(t, s, "r3", time.Hour)
		mustComplete(t, s, "r3", t3, "3", time.Hour) // r3 completes before r2
		mustComplete(t, s, "r2", t2, "2", time.Hour)
		mustClaim(t, s, "c1", time.Hour)
		time.Sleep(time.Minute * 21 / 20) // r1 expires (its TTL spread by up to 5%)
		mustClaim(t, s, "c2", time.Hour)  // takes r1's place: nothing evicted
		if st := s.Stats(); st.Evicted != 0 || st.Expired != 1 || st.Entries != 4 {
			t.Fatalf("after replacing an expired entry: %+v", st)
		}
		mustClaim(t, s, "c3", time.Hour) // evicts the oldest result: r3
		if st := s.Stats(); st.Evicted != 1 || st.Entries != 4 || st.Claims != 3 {
			t.Fatalf("after one eviction: %+v", st)
		}
		c, _ := s.Claim(bg, "r2", "fp-r2", time.Hour, time.Hour)
		if c.State != idempotency.Completed || string(c.Record.Body) != "2" {
			t.Fatalf("r2 = %+v; the newer result must stay", c)
		}
		mustClaim(t, s, "c4", time.Hour) // evicts r2
		// Full of claims: refused, clearly, and nothing in flight is lost.
		_, err := s.Claim(bg, "c5", "fp", time.Hour, time.Hour)
		if !errors.Is(err, idempotency.ErrFull) || !watertight.IsSaturation(err) || !strings.Contains(err.Error(), "in-flight claims") {
			t.Fatalf("Claim into a store full of claims = %v; want ErrFull saying why", err)
		}
		for _, k := range []string{"c1", "c2", "c3", "c4"} {
			if st := state(t, s, k); st != idempotency.InFlight {
				t.Fatalf("claim %s = %v after the store filled, want in flight", k, st)
			}
		}
		// A replay of something in the store still works when it is full.
		if st := s.Stats(); st.Entries != 4 || st.Claims != 4 || st.Evicted != 2 {
			t.Fatalf("full: %+v", st)
		}
		// A claim that expires makes room.
		time.Sleep(time.Hour)
		mustClaim(t, s, "c5", time.Hour)
	})
}

func TestMemoryStoreMaxBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := strings.Repeat("b", 100)
		// What one result counts, and its scope (all keys share one).
		probe := newMemory(t, idempotency.MemoryConfig{})
		mustComplete(t, probe, "r0", mustClaim(t, probe, "r0", time.Hour), body, time.Hour)
		one := probe.Stats().Bytes
		if one < idempotency.EntryOverhead+100 {
			t.Fatalf("a result with a 100-byte body counts %d bytes", one)
		}
		// Room for two results (and their scope), not three.
		max := 2 * one
		s := newMemory(t, idempotency.MemoryConfig{MaxBytes: max, MaxEntries: -1})
		mustComplete(t, s, "r1", mustClaim(t, s, "r1", time.Hour), body, time.Hour)
		// The same fingerprint given to Complete is kept once, as when none
		// is given.
		tok := mustClaim(t, s, "r2", time.Hour)
		if err := s.Complete(bg, "r2", tok, idempotency.Record{Fingerprint: "fp-r2", Body: []byte(body)}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Bytes > 2*one {
			t.Fatalf("bytes = %d, want at most 2 × %d", st.Bytes, one)
		}
		tok = mustClaim(t, s, "r3", time.Hour)
		mustComplete(t, s, "r3", tok, body, time.Hour) // evicts r1
		if st := s.Stats(); st.Evicted != 1 || st.Entries != 2 || st.Bytes > max {
			t.Fatalf("after a result too many: %+v", st)
		}
		if st := state(t, s, "r1"); st != idempotency.Forgotten { // r1 was evicted; its tombstone answers
			t.Fatalf("r1 = %v, want forgotten (evicted)", st)
		}
		// A record larger than the whole store: ErrTooLarge, claim kept.
		tok = mustClaim(t, s, "big", time.Hour)
		err := s.Complete(bg, "big", tok, idempotency.Record{Body: make([]byte, max)}, time.Hour)
		if !errors.Is(err, idempotency.ErrTooLarge) {
			t.Fatalf("Complete of a huge record = %v, want ErrTooLarge", err)
		}
		if st := state(t, s, "big"); st != idempotency.InFlight {
			t.Fatalf("after ErrTooLarge the claim is %v, want still in flight", st)
		}
		if err := s.Release(bg, "big", tok); err != nil {
			t.Fatalf("Release after ErrTooLarge: %v", err)
		}
	})
}

// A record that would fit the store alone, but not beside the claims in
// flight: ErrFull, after evicting every result.
func TestMemoryStoreCompleteFullOfClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemory(t, idempotency.MemoryConfig{MaxBytes: 4 * idempotency.EntryOverhead, MaxEntries: -1})
		mustComplete(t, s, "r", mustClaim(t, s, "r", time.Hour), "", time.Hour)
		mustClaim(t, s, "a", time.Hour)
		tok := mustClaim(t, s, "b", time.Hour)
		err := s.Complete(bg, "b", tok, idempotency.Record{Body: make([]byte, 2*idempotency.EntryOverhead)}, time.Hour)
		if !errors.Is(err, idempotency.ErrFull) {
			t.Fatalf("Complete = %v, want ErrFull", err)
		}
		if st := s.Stats(); st.Evicted != 1 || st.Claims != 2 {
			t.Fatalf("%+v: want the result evicted and both claims kept", st)
		}
	})
}

func TestMemoryStoreArguments(t *testing.T) {
	s := newMemory(t, idempotency.MemoryConfig{MaxEntries: -1, MaxBytes: -1})
	if _, err := s.Claim(bg, "", "fp", time.Second, time.Hour); err == nil || !strings.Contains(err.Error(), "key is empty") {
		t.Fatalf("Claim of an empty key = %v", err)
	}
	if _, err := s.Claim(bg, "k", "fp", 0, time.Hour); err == nil || !strings.Contains(err.Error(), "lockTTL must be > 0") {
		t.Fatalf("Claim with lockTTL 0 = %v", err)
	}
	tok := mustClaim(t, s, "k", time.Second)
	if err := s.Complete(bg, "k", tok, idempotency.Record{}, -time.Second); err == nil || !strings.Contains(err.Error(), "ttl must be > 0") {
		t.Fatalf("Complete with a negative ttl = %v", err)
	}
	// No limits at all.
	for i := range 1000 {
		mustComplete(t, s, fmt.Sprint(i), mustClaim(t, s, fmt.Sprint(i), time.Hour), strings.Repeat("x", 1000), time.Hour)
	}
	if st := s.Stats(); st.Entries != 1001 || st.Evicted != 0 {
		t.Fatalf("unbounded store: %+v", st)
	}
}

// Records keep every header value and an exact body, and the stored
// fingerprint is the claim's when Complete gives none.
func TestMemoryStoreRecordRoundTrip(t *testing.T) {
	s := newMemory(t, idempotency.MemoryConfig{})
	c, _ := s.Claim(bg, "k", "fp", time.Hour, time.Hour)
	created := time.Now()
	rec := idempotency.Record{Status: 201, Header: http.Header{"A": {"1", "2"}}, Body: []byte{0, 1, 2}, Created: created}
	if err := s.Complete(bg, "k", c.Token, rec, time.Hour); err != nil {
		t.Fatal(err)
	}
	c, _ = s.Claim(bg, "k", "other", time.Hour, time.Hour)
	if c.State != idempotency.Completed || c.Fingerprint != "fp" || c.Record.Fingerprint != "fp" || !c.Record.Created.Equal(created) ||
		c.Record.Status != 201 || len(c.Record.Header["A"]) != 2 || string(c.Record.Body) != "\x00\x01\x02" {
		t.Fatalf("replay = %+v / %+v", c, c.Record)
	}
}

// Many goroutines over few keys, with completes, releases and expiries
// interleaved: every key is claimed by one owner at a time (checked by a
// shadow lock per key), and the store's accounting stays consistent.
func TestMemoryStoreStress(t *testing.T) {
	s := newMemory(t, idempotency.MemoryConfig{MaxEntries: 64, MaxBytes: 64 * 1024})
	const keys, workers, ops = 16, 8, 2000
	var owners [keys]sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range ops {
				k := (i*7 + w) % keys
				key := fmt.Sprint("k", k)
				c, err := s.Claim(bg, key, "fp", time.Hour, time.Hour)
				if err != nil {
					if errors.Is(err, idempotency.ErrFull) {
						continue
					}
					t.Errorf("Claim: %v", err)
					return
				}
				if c.State != idempotency.Claimed {
					continue
				}
				if !owners[k].TryLock() {
					t.Errorf("key %s has two owners", key)
					return
				}
				runtime.Gosched() // hold the key a little
				if i%3 == 0 {
					owners[k].Unlock()
					if err := s.Release(bg, key, c.Token); err != nil {
						t.Errorf("Release: %v", err)
					}
					continue
				}
				owners[k].Unlock()
				// A result that expires at once frees the key for the next.
				if err := s.Complete(bg, key, c.Token, idempotency.Record{Body: []byte("x")}, time.Nanosecond); err != nil {
					t.Errorf("Complete: %v", err)
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	if st.Claims != 0 || st.Entries > 64 || st.Bytes > 64*1024 || st.Bytes < 0 {
		t.Fatalf("after the stress: %+v", st)
	}
}
