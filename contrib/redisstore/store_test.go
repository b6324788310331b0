package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redisstore "github.com/watertight-go/watertight/contrib/redisstore"
	"github.com/watertight-go/watertight/idempotency"
)

const (
	lockTTL = time.Minute
	ttl     = time.Hour
)

func sampleRecord(fp string) idempotency.Record {
	return idempotency.Record{
		Fingerprint: fp,
		Status:      http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Set-Cookie":   {"a=1", "b=2"},
			"X-Latin1":     {"caf\xe9"}, // not UTF-8: must replay byte for byte
		},
		Body:    []byte(`{"id":"pay_1","amount":100}` + "\x00\xff"),
		Created: time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC),
	}
}

func sameRecord(t *testing.T, got *idempotency.Record, want idempotency.Record) {
	t.Helper()
	if got == nil {
		t.Fatal("record is nil")
	}
	if got.Fingerprint != want.Fingerprint || got.Status != want.Status ||
		!bytes.Equal(got.Body, want.Body) || !got.Created.Equal(want.Created) {
		t.Fatalf("record = %+v, want %+v", *got, want)
	}
	if len(got.Header) != len(want.Header) {
		t.Fatalf("header = %q, want %q", got.Header, want.Header)
	}
	for k, vs := range want.Header {
		if fmt.Sprint(got.Header[k]) != fmt.Sprint(vs) || len(got.Header[k]) != len(vs) {
			t.Fatalf("header %s = %q, want %q", k, got.Header[k], vs)
		}
	}
}

func mustClaim(t *testing.T, s idempotency.Store, key, fp string, lock time.Duration, want idempotency.ClaimState) idempotency.Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), key, fp, lock, time.Hour)
	if err != nil {
		t.Fatalf("Claim(%q): %v", key, err)
	}
	if c.State != want {
		t.Fatalf("Claim(%q).State = %v, want %v", key, c.State, want)
	}
	return c
}

func TestNewValidates(t *testing.T) {
	if _, err := redisstore.New(nil, redisstore.Config{}); err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") {
		t.Fatalf("New(nil) err = %v, want a redisstore error", err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	s, err := redisstore.New(c, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Key("k"); got != redisstore.DefaultKeyPrefix+"k" {
		t.Fatalf("Key = %q, want the default prefix", got)
	}
	if d := redisstore.DefaultConfig(); d.KeyPrefix != redisstore.DefaultKeyPrefix || d.MaxRecordBytes != redisstore.DefaultMaxRecordBytes {
		t.Fatalf("DefaultConfig = %+v", d)
	}
}

// Arguments that are wrong whatever Redis holds are refused before any
// round trip (the client here points at nothing).
func TestArgumentsCheckedLocally(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	s, _ := redisstore.New(c, redisstore.Config{})
	ctx := context.Background()
	if _, err := s.Claim(ctx, "", "fp", lockTTL, time.Hour); err == nil || !strings.Contains(err.Error(), "key") {
		t.Fatalf("Claim with an empty key: err = %v", err)
	}
	if _, err := s.Claim(ctx, "k", "fp", 0, time.Hour); err == nil || !strings.Contains(err.Error(), "lockTTL") {
		t.Fatalf("Claim with lockTTL 0: err = %v", err)
	}
	if err := s.Complete(ctx, "k", strings.Repeat("a", 32), idempotency.Record{}, -time.Second); err == nil || !strings.Contains(err.Error(), "ttl") {
		t.Fatalf("Complete with ttl < 0: err = %v", err)
	}
	for _, tok := range []string{"", "x", strings.Repeat("A", 32), strings.Repeat("a", 31) + ":"} {
		if err := s.Complete(ctx, "k", tok, idempotency.Record{}, ttl); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("Complete with token %q: err = %v, want ErrNotOwner", tok, err)
		}
		if err := s.Release(ctx, "k", tok); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("Release with token %q: err = %v, want ErrNotOwner", tok, err)
		}
	}
}

func TestClaimCompleteReplay(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client)
	ctx := context.Background()

	c := mustClaim(t, s, "pay-1", "fpA", lockTTL, idempotency.Claimed)
	if len(c.Token) != 32 {
		t.Fatalf("token %q: want 32 hex digits", c.Token)
	}
	// The claim lives in Redis for the result TTL (an hour, mustClaim's),
	// its lock inside it.
	if pttl := client.PTTL(ctx, s.Key("pay-1")).Val(); pttl <= lockTTL || pttl > time.Hour {
		t.Fatalf("claim PTTL = %v, want in (%v, %v]", pttl, lockTTL, time.Hour)
	}
	mustClaim(t, s, "pay-1", "fpA", lockTTL, idempotency.InFlight)

	rec := sampleRecord("fpA")
	if err := s.Complete(ctx, "pay-1", c.Token, rec, ttl); err != nil {
		t.Fatal(err)
	}
	if pttl := client.PTTL(ctx, s.Key("pay-1")).Val(); pttl <= ttl-time.Minute || pttl > ttl+ttl/20 {
		t.Fatalf("record PTTL = %v, want about %v, stretched by at most 5%%", pttl, ttl)
	}
	for range 2 { // replayed as often as asked
		got := mustClaim(t, s, "pay-1", "fpA", lockTTL, idempotency.Completed)
		if got.Fingerprint != "fpA" || got.Token != "" {
			t.Fatalf("completed claim = %+v", got)
		}
		sameRecord(t, got.Record, rec)
	}
	// Completing again, with the same token, is refused: the claim is gone.
	if err := s.Complete(ctx, "pay-1", c.Token, sampleRecord("other"), ttl); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("second Complete: err = %v, want ErrNotOwner", err)
	}
	if err := s.Release(ctx, "pay-1", c.Token); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release after Complete: err = %v, want ErrNotOwner", err)
	}
	sameRecord(t, mustClaim(t, s, "pay-1", "fpA", lockTTL, idempotency.Completed).Record, rec)
}

func TestEmptyRecordRoundTrips(t *testing.T) {
	s := newStore(t, sharedClient(t))
	c := mustClaim(t, s, "k", "", lockTTL, idempotency.Claimed)
	if err := s.Complete(context.Background(), "k", c.Token, idempotency.Record{Status: 204}, ttl); err != nil {
		t.Fatal(err)
	}
	got := mustClaim(t, s, "k", "", lockTTL, idempotency.Completed)
	if r := got.Record; r.Status != 204 || r.Header != nil || r.Body != nil || !r.Created.IsZero() || r.Fingerprint != "" {
		t.Fatalf("record = %+v, want status 204 and nothing else", *r)
	}
}

// The store reports the fingerprint of whoever holds or held the key, so
// the caller can refuse the same key with another request.
func TestFingerprintReported(t *testing.T) {
	s := newStore(t, sharedClient(t))
	c := mustClaim(t, s, "k", "fpA", lockTTL, idempotency.Claimed)
	if got := mustClaim(t, s, "k", "fpB", lockTTL, idempotency.InFlight); got.Fingerprint != "fpA" {
		t.Fatalf("in-flight fingerprint = %q, want fpA", got.Fingerprint)
	}
	if err := s.Complete(context.Background(), "k", c.Token, sampleRecord("fpA"), ttl); err != nil {
		t.Fatal(err)
	}
	got := mustClaim(t, s, "k", "fpB", lockTTL, idempotency.Completed)
	if got.Fingerprint != "fpA" || got.Record.Fingerprint != "fpA" {
		t.Fatalf("completed fingerprint = %q / %q, want fpA", got.Fingerprint, got.Record.Fingerprint)
	}
	// Fingerprints are arbitrary strings, colons and all.
	odd := "POST:/pay:\x00:" + strings.Repeat("é", 40)
	mustClaim(t, s, "odd", odd, lockTTL, idempotency.Claimed)
	if got := mustClaim(t, s, "odd", "x", lockTTL, idempotency.InFlight); got.Fingerprint != odd {
		t.Fatalf("fingerprint = %q, want %q", got.Fingerprint, odd)
	}
}

func TestRelease(t *testing.T) {
	s := newStore(t, sharedClient(t))
	ctx := context.Background()
	c1 := mustClaim(t, s, "k", "fp", lockTTL, idempotency.Claimed)
	if err := s.Release(ctx, "k", c1.Token); err != nil {
		t.Fatal(err)
	}
	c2 := mustClaim(t, s, "k", "fp", lockTTL, idempotency.Claimed)
	if c2.Token == c1.Token {
		t.Fatal("a new claim got the old token")
	}
	// The old token owns nothing now.
	if err := s.Release(ctx, "k", c1.Token); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release with the old token: err = %v, want ErrNotOwner", err)
	}
	if err := s.Complete(ctx, "k", c1.Token, sampleRecord("fp"), ttl); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Complete with the old token: err = %v, want ErrNotOwner", err)
	}
	mustClaim(t, s, "k", "fp", lockTTL, idempotency.InFlight) // c2 still holds it
	if err := s.Release(ctx, "k", c2.Token); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "k", c2.Token); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("second Release: err = %v, want ErrNotOwner", err)
	}
	if err := s.Release(ctx, "never-claimed", c2.Token); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release of an absent key: err = %v, want ErrNotOwner", err)
	}
}

// A claim whose owner died reads Unknown after its lock TTL (timed by the
// key's real Redis TTL, hence polling), and the dead owner's token can
// neither complete nor release it any more; only after the claim's ttl
// does the next request take the key over.
func TestLockExpiryAndTakeover(t *testing.T) {
	s := newStore(t, sharedClient(t))
	ctx := context.Background()
	const short = 100 * time.Millisecond
	start := time.Now()
	old, err := s.Claim(ctx, "k", "fp", short, 3*short)
	if err != nil || old.State != idempotency.Claimed {
		t.Fatalf("Claim: %+v, %v", old, err)
	}
	state := func() idempotency.Claim {
		c, err := s.Claim(ctx, "k", "fp", lockTTL, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	eventually(t, 5*time.Second, "the expired claim never read unknown", func() bool {
		c := state()
		if c.State != idempotency.InFlight && c.State != idempotency.Unknown {
			t.Fatalf("before the claim's ttl: %v, want in flight or unknown", c.State)
		}
		return c.State == idempotency.Unknown
	})
	if waited := time.Since(start); waited < short-5*time.Millisecond {
		t.Fatalf("claim unknown after %v, before its %v lock TTL", waited, short)
	}
	if err := s.Complete(ctx, "k", old.Token, sampleRecord("stale"), ttl); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Complete by the expired owner: err = %v, want ErrNotOwner", err)
	}
	if c := state(); c.State != idempotency.Unknown || c.Fingerprint != "fp" {
		t.Fatalf("after the expired owner's Complete: %+v, want unknown with fp", c)
	}
	var taken idempotency.Claim
	eventually(t, 5*time.Second, "the unknown claim was not taken over", func() bool {
		taken = state()
		if taken.State != idempotency.Claimed && taken.State != idempotency.Unknown {
			t.Fatalf("after the lock: %v, want unknown or claimed", taken.State)
		}
		return taken.State == idempotency.Claimed
	})
	if waited := time.Since(start); waited < 3*short-5*time.Millisecond {
		t.Fatalf("claim taken over after %v, before its %v ttl", waited, 3*short)
	}
	if err := s.Complete(ctx, "k", old.Token, sampleRecord("stale"), ttl); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Complete by the expired owner: err = %v, want ErrNotOwner", err)
	}
	if err := s.Release(ctx, "k", old.Token); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release by the expired owner: err = %v, want ErrNotOwner", err)
	}
	mustClaim(t, s, "k", "fp", lockTTL, idempotency.InFlight)
	rec := sampleRecord("fp")
	if err := s.Complete(ctx, "k", taken.Token, rec, ttl); err != nil {
		t.Fatal(err)
	}
	sameRecord(t, mustClaim(t, s, "k", "fp", lockTTL, idempotency.Completed).Record, rec)
}

// A stored record is kept for its TTL, then the key is free again.
func TestRecordExpiry(t *testing.T) {
	s := newStore(t, sharedClient(t))
	ctx := context.Background()
	c := mustClaim(t, s, "k", "fp", lockTTL, idempotency.Claimed)
	const short = 200 * time.Millisecond
	start := time.Now()
	if err := s.Complete(ctx, "k", c.Token, sampleRecord("fp"), short); err != nil {
		t.Fatal(err)
	}
	// Still there, unless a busy machine let its TTL pass already.
	c, err := s.Claim(ctx, "k", "fp", lockTTL, time.Hour)
	switch {
	case err != nil:
		t.Fatal(err)
	case c.State == idempotency.Claimed && time.Since(start) >= short:
		return // expired, as it should have by now
	case c.State != idempotency.Completed:
		t.Fatalf("just after Complete: %+v; want the record", c)
	}
	eventually(t, 5*time.Second, "the record did not expire", func() bool {
		c, err := s.Claim(ctx, "k", "fp", lockTTL, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c.State == idempotency.Claimed
	})
}

// Two server instances (two clients, two stores, one Redis) and many
// goroutines each race for the same keys: exactly one claim per key wins,
// and once it completes every caller gets that key's record.
func TestConcurrentClaimsAcrossInstances(t *testing.T) {
	addr := redisAddr(t)
	a, b := newClient(t, addr, timeout), newClient(t, addr, timeout)
	prefix := freshPrefix(t, a)
	stores := []*redisstore.Store{newStoreWithPrefix(t, a, prefix), newStoreWithPrefix(t, b, prefix)}
	ctx := context.Background()

	const keys, perKey = 50, 10
	type result struct {
		claim idempotency.Claim
		err   error
	}
	results := make([][]result, keys)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k := range keys {
		results[k] = make([]result, perKey)
		for i := range perKey {
			wg.Go(func() {
				<-start
				c, err := stores[i%2].Claim(ctx, fmt.Sprint("key-", k), "fp", lockTTL, time.Hour)
				results[k][i] = result{c, err}
			})
		}
	}
	close(start)
	wg.Wait()

	for k := range keys {
		winners := 0
		var token string
		for i, r := range results[k] {
			switch {
			case r.err != nil:
				t.Fatalf("key %d caller %d: %v", k, i, r.err)
			case r.claim.State == idempotency.Claimed:
				winners++
				token = r.claim.Token
			case r.claim.State != idempotency.InFlight:
				t.Fatalf("key %d caller %d: state %v", k, i, r.claim.State)
			}
		}
		if winners != 1 {
			t.Fatalf("key %d: %d callers claimed it, want exactly 1", k, winners)
		}
		rec := sampleRecord("fp")
		rec.Body = fmt.Appendf(nil, "result of key %d", k)
		if err := stores[k%2].Complete(ctx, fmt.Sprint("key-", k), token, rec, ttl); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	for k := range keys {
		for i := range perKey {
			wg.Go(func() {
				c, err := stores[i%2].Claim(ctx, fmt.Sprint("key-", k), "fp", lockTTL, time.Hour)
				mu.Lock()
				defer mu.Unlock()
				if err != nil || c.State != idempotency.Completed {
					t.Errorf("key %d replay: %+v, %v", k, c, err)
					return
				}
				if want := fmt.Sprintf("result of key %d", k); string(c.Record.Body) != want {
					t.Errorf("key %d replay body %q, want %q", k, c.Record.Body, want)
				}
			})
		}
	}
	wg.Wait()
}

// Complete racing with a takeover: of an expired owner and a new owner
// completing at once, only the owner of the live claim succeeds.
func TestCompleteRacesTakeover(t *testing.T) {
	addr := redisAddr(t)
	a, b := newClient(t, addr, timeout), newClient(t, addr, timeout)
	prefix := freshPrefix(t, a)
	sa, sb := newStoreWithPrefix(t, a, prefix), newStoreWithPrefix(t, b, prefix)
	ctx := context.Background()
	for i := range 20 {
		key := fmt.Sprint("k", i)
		old, err := sa.Claim(ctx, key, "fp", time.Millisecond, 2*time.Millisecond)
		if err != nil || old.State != idempotency.Claimed {
			t.Fatalf("Claim: %+v, %v", old, err)
		}
		var cur idempotency.Claim
		eventually(t, 5*time.Second, "claim did not expire", func() bool {
			c, err := sb.Claim(ctx, key, "fp", lockTTL, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			cur = c
			return c.State == idempotency.Claimed
		})
		if err := sa.Complete(ctx, key, old.Token, sampleRecord("old"), ttl); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("old owner before the race: %v, want ErrNotOwner", err)
		}
		var errOld, errNew error
		var wg sync.WaitGroup
		wg.Go(func() { errOld = sa.Complete(ctx, key, old.Token, sampleRecord("old"), ttl) })
		wg.Go(func() { errNew = sb.Complete(ctx, key, cur.Token, sampleRecord("new"), ttl) })
		wg.Wait()
		if !errors.Is(errOld, idempotency.ErrNotOwner) || errNew != nil {
			t.Fatalf("old owner: %v (want ErrNotOwner), new owner: %v (want nil)", errOld, errNew)
		}
		if got := mustClaim(t, sa, key, "fp", lockTTL, idempotency.Completed); got.Fingerprint != "new" {
			t.Fatalf("stored record from %q, want the new owner's", got.Fingerprint)
		}
	}
}

// A value the store cannot read gives a clear error that wraps ErrCorrupt,
// names the key and says what is wrong; the key is left alone (fail
// closed).
func TestCorruptValue(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client)
	ctx := context.Background()
	c := mustClaim(t, s, "good", "fp", lockTTL, idempotency.Claimed)
	if err := s.Complete(ctx, "good", c.Token, sampleRecord("fp"), ttl); err != nil {
		t.Fatal(err)
	}
	good := client.Get(ctx, s.Key("good")).Val()

	cases := []struct{ value, want string }{
		{"hello", "not written by redisstore"},
		{"wt2:r:whatever", `unsupported encoding version "wt2"`},
		{"wt1:x:", "unknown value kind"},
		{"wt1:c:nottoken:fp", "malformed older claim"},
		{"wt1:l:nottoken:5:fp", "malformed claim"},
		{good[:len(good)-3], "malformed record"},
		{good + "x", "unexpected bytes after the body"},
	}
	for _, tc := range cases {
		if err := client.Set(ctx, s.Key("bad"), tc.value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Claim(ctx, "bad", "fp", lockTTL, time.Hour)
		if !errors.Is(err, redisstore.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), s.Key("bad")) {
			t.Fatalf("value %q: err = %v, want ErrCorrupt naming the key and saying %q", tc.value, err, tc.want)
		}
		if got := client.Get(ctx, s.Key("bad")).Val(); got != tc.value {
			t.Fatalf("the corrupt value was changed to %q", got)
		}
	}

	// A key of another Redis type: Redis's own error comes back.
	client.Del(ctx, s.Key("bad"))
	client.HSet(ctx, s.Key("bad"), "f", "v")
	if _, err := s.Claim(ctx, "bad", "fp", lockTTL, time.Hour); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("hash at the key: err = %v, want Redis's WRONGTYPE", err)
	}
}

func TestMaxRecordBytes(t *testing.T) {
	client := sharedClient(t)
	prefix := freshPrefix(t, client)
	ctx := context.Background()
	small, err := redisstore.New(client, redisstore.Config{KeyPrefix: prefix, MaxRecordBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	c := mustClaim(t, small, "k", "fp", lockTTL, idempotency.Claimed)
	big := idempotency.Record{Status: 200, Body: make([]byte, 101)}
	if err := small.Complete(ctx, "k", c.Token, big, ttl); !errors.Is(err, idempotency.ErrTooLarge) ||
		!strings.Contains(err.Error(), "MaxRecordBytes") {
		t.Fatalf("Complete of a large record: err = %v, want idempotency.ErrTooLarge naming the field", err)
	}
	// Nothing stored; the claim still belongs to its owner, who releases it.
	mustClaim(t, small, "k", "fp", lockTTL, idempotency.InFlight)
	if err := small.Release(ctx, "k", c.Token); err != nil {
		t.Fatal(err)
	}

	unlimited, _ := redisstore.New(client, redisstore.Config{KeyPrefix: prefix, MaxRecordBytes: -1})
	c = mustClaim(t, unlimited, "k", "fp", lockTTL, idempotency.Claimed)
	huge := idempotency.Record{Status: 200, Body: bytes.Repeat([]byte("x"), redisstore.DefaultMaxRecordBytes+1)}
	if err := unlimited.Complete(ctx, "k", c.Token, huge, ttl); err != nil {
		t.Fatal(err)
	}
	if got := mustClaim(t, unlimited, "k", "fp", lockTTL, idempotency.Completed); !bytes.Equal(got.Record.Body, huge.Body) {
		t.Fatal("the large body did not round-trip")
	}
}

// Operations honour the context.
func TestCanceledContext(t *testing.T) {
	s := newStore(t, sharedClient(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Claim(ctx, "k", "fp", lockTTL, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with a canceled context: err = %v, want context.Canceled", err)
	}
}

// Complete stretches each result's TTL by up to 5% at random (issue 16),
// never shortening it: results stored together do not expire together.
func TestResultTTLSpread(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client)
	ctx := context.Background()
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for i := range 20 {
		key := fmt.Sprint("k", i)
		c := mustClaim(t, s, key, "fp", lockTTL, idempotency.Claimed)
		if err := s.Complete(ctx, key, c.Token, sampleRecord("fp"), ttl); err != nil {
			t.Fatal(err)
		}
		pttl := client.PTTL(ctx, s.Key(key)).Val()
		if pttl <= ttl-time.Minute || pttl > ttl+ttl/20 {
			t.Fatalf("record PTTL = %v, want in [%v, %v] (less the test's own time)", pttl, ttl, ttl+ttl/20)
		}
		lo, hi = min(lo, pttl), max(hi, pttl)
	}
	// 20 draws from 3 minutes of spread all within 5 s: less than 1e-30.
	if hi-lo < 5*time.Second {
		t.Fatalf("20 result TTLs all within %v of each other (%v to %v): not spread", hi-lo, lo, hi)
	}
}
