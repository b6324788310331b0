// Package storetest checks that an idempotency.Store keeps the contract the
// HTTP middleware relies on: claim, complete and replay; in-flight
// duplicates; release; fencing tokens (ErrNotOwner); a claim whose lock
// expires reads Unknown, never claimed again, until the claim's ttl; expiry
// of results; and atomicity under concurrency (exactly one of N concurrent
// claims wins).
//
// A store's own tests call Run with a function that makes a store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) idempotency.Store { return newTestStore(t) })
//	}
//
// The suite runs in real time, not in a testing/synctest bubble, so that it
// can check a store behind a network (Redis): the expiry tests use short
// TTLs (Options.TTL, 150ms by default) and poll. Every subtest uses keys of
// its own, made with a random prefix, so stores may be shared between
// subtests and runs; the subtests run one after the other.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

// Options tunes the suite. The zero value is the default.
type Options struct {
	// TTL is the claim and result lifetime of the expiry tests, which wait
	// for it in real time. Zero means 150ms. A store that measures time
	// coarsely needs a longer one.
	TTL time.Duration
	// Wait bounds how long past TTL an expiry test polls before it fails.
	// Zero means 5s.
	Wait time.Duration
	// Goroutines is the number of concurrent callers of the concurrency
	// tests. Zero means 64.
	Goroutines int
	// Timeout bounds every store call. Zero means 10s.
	Timeout time.Duration
}

// Run runs the conformance suite with the default Options. newStore is
// called once per subtest; it may return the same shared store each time.
func Run(t *testing.T, newStore func(t *testing.T) idempotency.Store) {
	t.Helper()
	RunWith(t, newStore, Options{})
}

// RunWith runs the conformance suite with opts.
func RunWith(t *testing.T, newStore func(t *testing.T) idempotency.Store, opts Options) {
	t.Helper()
	if opts.TTL <= 0 {
		opts.TTL = 150 * time.Millisecond
	}
	if opts.Wait <= 0 {
		opts.Wait = 5 * time.Second
	}
	if opts.Goroutines <= 0 {
		opts.Goroutines = 64
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	for _, tc := range []struct {
		name string
		run  func(*suite)
	}{
		{"ClaimCompleteReplay", (*suite).claimCompleteReplay},
		{"EmptyRecord", (*suite).emptyRecord},
		{"RecordsAreCopied", (*suite).recordsAreCopied},
		{"InFlight", (*suite).inFlight},
		{"Release", (*suite).releaseFrees},
		{"NotOwner", (*suite).notOwner},
		{"KeysAreIndependent", (*suite).keysAreIndependent},
		{"ExpiredClaimIsUnknown", (*suite).claimExpires},
		{"UnknownIsNeverClaimed", (*suite).unknownNeverClaimed},
		{"ClaimTTLNoLongerThanLock", (*suite).claimTTLNoLongerThanLock},
		{"ResultExpiresAfterTTL", (*suite).resultExpires},
		{"ConcurrentClaimsOneWins", (*suite).concurrentClaims},
		{"ConcurrentClaimsManyKeys", (*suite).concurrentManyKeys},
		{"ClaimsRacingComplete", (*suite).claimsRacingComplete},
		{"CanceledContext", (*suite).canceledContext},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &suite{t: t, store: newStore(t), opts: opts, prefix: "storetest:" + idempotency.NewKey() + ":"}
			tc.run(s)
		})
	}
}

type suite struct {
	t      *testing.T
	store  idempotency.Store
	opts   Options
	prefix string
}

// key returns a key of this subtest.
func (s *suite) key(name string) string { return s.prefix + name }

func (s *suite) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.Timeout)
}

// claim calls Store.Claim with a result TTL of an hour and fails the test
// on an error.
func (s *suite) claim(key, fp string, lockTTL time.Duration) idempotency.Claim {
	s.t.Helper()
	return s.claimTTL(key, fp, lockTTL, time.Hour)
}

// claimTTL calls Store.Claim and fails the test on an error.
func (s *suite) claimTTL(key, fp string, lockTTL, ttl time.Duration) idempotency.Claim {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	c, err := s.store.Claim(ctx, key, fp, lockTTL, ttl)
	if err != nil {
		s.t.Fatalf("Claim(%q): %v", key, err)
	}
	if c.State == idempotency.Claimed && c.Token == "" {
		s.t.Fatalf("Claim(%q) = claimed with an empty token", key)
	}
	return c
}

func (s *suite) complete(key, token string, rec idempotency.Record, ttl time.Duration) error {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	return s.store.Complete(ctx, key, token, rec, ttl)
}

func (s *suite) release(key, token string) error {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	return s.store.Release(ctx, key, token)
}

// mustClaim claims key and fails unless it was free.
func (s *suite) mustClaim(key, fp string, lockTTL time.Duration) string {
	s.t.Helper()
	c := s.claim(key, fp, lockTTL)
	if c.State != idempotency.Claimed {
		s.t.Fatalf("Claim(%q) of a free key = %v, want claimed", key, c.State)
	}
	return c.Token
}

// wantState fails unless c has the state st and the fingerprint fp.
func (s *suite) wantState(c idempotency.Claim, st idempotency.ClaimState, fp string) {
	s.t.Helper()
	if c.State != st {
		s.t.Fatalf("Claim = %v, want %v", c.State, st)
	}
	if st != idempotency.Claimed && c.Fingerprint != fp {
		s.t.Fatalf("Claim (%v) has fingerprint %q, want %q", st, c.Fingerprint, fp)
	}
	if st == idempotency.Completed && c.Record == nil {
		s.t.Fatalf("Claim = completed without a record")
	}
	if (st == idempotency.InFlight || st == idempotency.Unknown) && (c.Record != nil || c.Token != "") {
		s.t.Fatalf("Claim = %v, with a record or a token: %+v", st, c)
	}
}

// record returns a record with some of everything.
func record(fp string, status int, body string) idempotency.Record {
	return idempotency.Record{
		Fingerprint: fp,
		Status:      status,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Set-Cookie":   {"a=1", "b=2"}, // several values, order kept
			"X-Empty":      {""},
		},
		Body:    []byte(body),
		Created: time.Now().Truncate(time.Millisecond),
	}
}

// sameRecord fails unless got is want, Created to the millisecond and a
// nil header or body equal to an empty one.
func (s *suite) sameRecord(got *idempotency.Record, want idempotency.Record) {
	s.t.Helper()
	if got == nil {
		s.t.Fatalf("no record, want %+v", want)
	}
	if got.Status != want.Status || got.Fingerprint != want.Fingerprint || !bytes.Equal(got.Body, want.Body) {
		s.t.Fatalf("record = {status %d, fp %q, body %q}, want {status %d, fp %q, body %q}",
			got.Status, got.Fingerprint, got.Body, want.Status, want.Fingerprint, want.Body)
	}
	if !sameHeader(got.Header, want.Header) {
		s.t.Fatalf("record header = %v, want %v", got.Header, want.Header)
	}
	if got.Created.Truncate(time.Millisecond).UnixMilli() != want.Created.UnixMilli() {
		s.t.Fatalf("record created = %v, want %v", got.Created, want.Created)
	}
}

func sameHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || len(va) != len(vb) {
			return false
		}
		for i := range va {
			if va[i] != vb[i] {
				return false
			}
		}
	}
	return true
}

const long = time.Hour // a TTL that does not run out during a test

func (s *suite) claimCompleteReplay() {
	k, fp := s.key("k"), "fp-1"
	tok := s.mustClaim(k, fp, long)
	rec := record(fp, http.StatusCreated, `{"id":"ch_1"}`+"\x00\xff")
	if err := s.complete(k, tok, rec, long); err != nil {
		s.t.Fatalf("Complete: %v", err)
	}
	for range 2 { // replayed as often as asked
		c := s.claim(k, fp, long)
		s.wantState(c, idempotency.Completed, fp)
		s.sameRecord(c.Record, rec)
	}
	// A different fingerprint still finds the result, with the original's
	// fingerprint: the caller decides (422).
	c := s.claim(k, "fp-2", long)
	s.wantState(c, idempotency.Completed, fp)
}

func (s *suite) emptyRecord() {
	k := s.key("k")
	tok := s.mustClaim(k, "fp", long)
	rec := idempotency.Record{Fingerprint: "fp", Status: http.StatusNoContent, Created: time.Now().Truncate(time.Millisecond)}
	if err := s.complete(k, tok, rec, long); err != nil {
		s.t.Fatalf("Complete: %v", err)
	}
	c := s.claim(k, "fp", long)
	s.wantState(c, idempotency.Completed, "fp")
	s.sameRecord(c.Record, rec)
}

func (s *suite) recordsAreCopied() {
	k := s.key("k")
	tok := s.mustClaim(k, "fp", long)
	rec := record("fp", 200, "original")
	want := record("fp", 200, "original")
	want.Created = rec.Created
	if err := s.complete(k, tok, rec, long); err != nil {
		s.t.Fatalf("Complete: %v", err)
	}
	// The caller changes what it passed...
	rec.Body[0] = 'X'
	rec.Header.Set("Content-Type", "text/plain")
	rec.Header["Set-Cookie"][0] = "changed"
	c := s.claim(k, "fp", long)
	s.sameRecord(c.Record, want)
	// ...and what it got.
	c.Record.Body[0] = 'Y'
	c.Record.Header.Set("Content-Type", "text/html")
	c.Record.Header["Set-Cookie"][1] = "changed"
	s.sameRecord(s.claim(k, "fp", long).Record, want)
}

func (s *suite) inFlight() {
	k := s.key("k")
	s.mustClaim(k, "fp-1", long)
	s.wantState(s.claim(k, "fp-1", long), idempotency.InFlight, "fp-1")
	// Another request with the key sees the holder's fingerprint.
	s.wantState(s.claim(k, "fp-2", long), idempotency.InFlight, "fp-1")
}

func (s *suite) releaseFrees() {
	k := s.key("k")
	tok := s.mustClaim(k, "fp-1", long)
	if err := s.release(k, tok); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	// Free again: the next request runs, with a new token.
	tok2 := s.mustClaim(k, "fp-2", long)
	if tok2 == tok {
		s.t.Fatalf("a new claim got the released claim's token %q", tok)
	}
	if err := s.release(k, tok); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Release with a released token = %v, want ErrNotOwner", err)
	}
	if err := s.complete(k, tok, record("fp-1", 200, "stale"), long); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Complete with a released token = %v, want ErrNotOwner", err)
	}
	s.wantState(s.claim(k, "fp-2", long), idempotency.InFlight, "fp-2")
}

func (s *suite) notOwner() {
	k := s.key("k")
	if err := s.complete(s.key("never-claimed"), "1", record("fp", 200, ""), long); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Complete of a key never claimed = %v, want ErrNotOwner", err)
	}
	if err := s.release(s.key("never-claimed"), "1"); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Release of a key never claimed = %v, want ErrNotOwner", err)
	}
	tok := s.mustClaim(k, "fp", long)
	if err := s.complete(k, tok+"x", record("fp", 200, "forged"), long); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Complete with a wrong token = %v, want ErrNotOwner", err)
	}
	if err := s.release(k, ""); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Release with an empty token = %v, want ErrNotOwner", err)
	}
	s.wantState(s.claim(k, "fp", long), idempotency.InFlight, "fp")
	rec := record("fp", 200, "first")
	if err := s.complete(k, tok, rec, long); err != nil {
		s.t.Fatalf("Complete: %v", err)
	}
	if err := s.complete(k, tok, record("fp", 500, "second"), long); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("a second Complete = %v, want ErrNotOwner", err)
	}
	if err := s.release(k, tok); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Release after Complete = %v, want ErrNotOwner", err)
	}
	c := s.claim(k, "fp", long)
	s.wantState(c, idempotency.Completed, "fp")
	s.sameRecord(c.Record, rec)
}

func (s *suite) keysAreIndependent() {
	keys := []string{
		s.key("a"), s.key("b"), s.key("with space"), s.key("colon:brace{}star*?[x]"),
		s.key(`quote"back\slash`), s.key("ünïcødé"), s.key(strings.Repeat("L", 300)),
		s.key("a") + "\x00", // not the same as "a"
	}
	toks := make([]string, len(keys))
	for i, k := range keys {
		toks[i] = s.mustClaim(k, fmt.Sprintf("fp-%d", i), long)
	}
	for i, k := range keys {
		if err := s.complete(k, toks[i], record(fmt.Sprintf("fp-%d", i), 200+i, k), long); err != nil {
			s.t.Fatalf("Complete(%q): %v", k, err)
		}
	}
	for i, k := range keys {
		c := s.claim(k, "other", long)
		s.wantState(c, idempotency.Completed, fmt.Sprintf("fp-%d", i))
		if c.Record.Status != 200+i || string(c.Record.Body) != k {
			s.t.Fatalf("key %q replays status %d body %q: another key's record", k, c.Record.Status, c.Record.Body)
		}
	}
}

// pollUntilClaimed claims key until it gets it, failing if the state is
// not from meanwhile, or after TTL + Wait.
func (s *suite) pollUntilClaimed(key, fp string, lockTTL time.Duration, from idempotency.ClaimState) idempotency.Claim {
	s.t.Helper()
	return s.pollUntil(key, fp, lockTTL, from, idempotency.Claimed)
}

// pollUntil claims key (result TTL: an hour) until the answer is to,
// failing if the state is neither from nor to, or after TTL + Wait.
func (s *suite) pollUntil(key, fp string, lockTTL time.Duration, from, to idempotency.ClaimState) idempotency.Claim {
	s.t.Helper()
	start := time.Now()
	deadline := start.Add(s.opts.TTL + s.opts.Wait)
	for {
		c := s.claim(key, fp, lockTTL)
		if c.State == to {
			return c
		}
		if c.State != from {
			s.t.Fatalf("Claim while waiting for %v = %v, want %v or %v", to, c.State, from, to)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("still %v %v after the TTL of %v: it never turns %v", c.State, time.Since(start), s.opts.TTL, to)
		}
		time.Sleep(s.opts.TTL / 10) // a real store: there is no clock to advance
	}
}

// The owner "dies" with its claim: nobody completes or releases it. After
// lockTTL the key reads Unknown — the operation may have run — and stays
// so until the claim's ttl; the old owner is fenced off; only then is the
// key free, for one new owner.
func (s *suite) claimExpires() {
	k, lock := s.key("k"), s.opts.TTL
	ttl := 3 * lock
	start := time.Now()
	old := s.claimTTL(k, "fp", lock, ttl)
	if old.State != idempotency.Claimed {
		s.t.Fatalf("Claim of a free key = %v, want claimed", old.State)
	}
	s.wantState(s.claim(k, "fp", lock), idempotency.InFlight, "fp")
	c := s.pollUntil(k, "fp", long, idempotency.InFlight, idempotency.Unknown)
	if since := time.Since(start); since < lock-time.Millisecond {
		s.t.Fatalf("the claim's lock expired after %v, before its lockTTL of %v", since, lock)
	}
	s.wantState(c, idempotency.Unknown, "fp")
	// Another request with the key sees the claim's fingerprint.
	s.wantState(s.claim(k, "fp-2", long), idempotency.Unknown, "fp")
	// The old owner wakes up: fenced off, and the key stays Unknown.
	if err := s.complete(k, old.Token, record("fp", 200, "late"), long); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Complete by the expired owner = %v, want ErrNotOwner", err)
	}
	if err := s.release(k, old.Token); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Release by the expired owner = %v, want ErrNotOwner", err)
	}
	s.wantState(s.claim(k, "fp", long), idempotency.Unknown, "fp")
	// Free once the claim's ttl is over.
	n := s.pollUntil(k, "fp", long, idempotency.Unknown, idempotency.Claimed)
	if since := time.Since(start); since < ttl-time.Millisecond {
		s.t.Fatalf("the Unknown key came free after %v, before the claim's ttl of %v", since, ttl)
	}
	if n.Token == old.Token {
		s.t.Fatalf("the new claim got the expired claim's token %q", old.Token)
	}
	if err := s.complete(k, old.Token, record("fp", 200, "late"), long); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Complete by the expired owner after the new claim = %v, want ErrNotOwner", err)
	}
	s.wantState(s.claim(k, "fp", long), idempotency.InFlight, "fp")
	rec := record("fp", 200, "new owner")
	if err := s.complete(k, n.Token, rec, long); err != nil {
		s.t.Fatalf("Complete by the new owner: %v", err)
	}
	s.sameRecord(s.claim(k, "fp", long).Record, rec)
}

// Many retries arrive together at a key whose claim's lock expired: none
// of them is handed the key while it is Unknown; once the claim's ttl is
// over, exactly one is.
func (s *suite) unknownNeverClaimed() {
	k, lock := s.key("k"), s.opts.TTL
	ttl := 2 * lock
	start := time.Now()
	if c := s.claimTTL(k, "fp", lock, ttl); c.State != idempotency.Claimed {
		s.t.Fatalf("Claim of a free key = %v, want claimed", c.State)
	}
	s.pollUntil(k, "fp", long, idempotency.InFlight, idempotency.Unknown)
	deadline := start.Add(ttl + s.opts.Wait)
	for round := 1; ; round++ {
		claimed := s.race(k, "fp", long, idempotency.Unknown)
		// Every claim of the round was made before the race returned: if
		// that is before the claim's ttl (less Redis's millisecond
		// rounding), none may have won.
		before := time.Since(start) < ttl-5*time.Millisecond
		if claimed > 0 && before {
			s.t.Fatalf("round %d: %d of %d concurrent claims of an Unknown key won before the claim's ttl", round, claimed, s.opts.Goroutines)
		}
		if claimed > 1 {
			s.t.Fatalf("%d of %d concurrent claims of a key whose ttl ended won, want 1", claimed, s.opts.Goroutines)
		}
		if claimed == 1 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the Unknown key never came free (%d rounds)", round)
		}
		time.Sleep(lock / 10)
	}
}

// A claim whose ttl is no longer than its lock has no Unknown period worth
// keeping: at lockTTL the key is Unknown or free, never in flight forever,
// and it is free by the ttl.
func (s *suite) claimTTLNoLongerThanLock() {
	k, lock := s.key("k"), s.opts.TTL
	old := s.claimTTL(k, "fp", lock, lock)
	if old.State != idempotency.Claimed {
		s.t.Fatalf("Claim of a free key = %v, want claimed", old.State)
	}
	time.Sleep(lock)
	deadline := time.Now().Add(s.opts.Wait)
	for {
		c := s.claim(k, "fp", long)
		if c.State == idempotency.Claimed {
			break
		}
		if c.State != idempotency.InFlight && c.State != idempotency.Unknown {
			s.t.Fatalf("Claim after lockTTL = %v, want in flight, unknown or claimed", c.State)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("still %v %v after the lock and result TTL of %v", c.State, s.opts.Wait, lock)
		}
		time.Sleep(lock / 10)
	}
	if err := s.complete(k, old.Token, record("fp", 200, "late"), long); !errors.Is(err, idempotency.ErrNotOwner) {
		s.t.Fatalf("Complete by the expired owner = %v, want ErrNotOwner", err)
	}
}

// race claims key from Goroutines goroutines released together, checks
// that every answer is claimed, in flight or (when other is Unknown)
// unknown, and returns how many claimed.
func (s *suite) race(key, fp string, lockTTL time.Duration, other ...idempotency.ClaimState) int {
	s.t.Helper()
	n := s.opts.Goroutines
	states := make([]idempotency.Claim, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := s.ctx()
			defer cancel()
			<-start
			states[i], errs[i] = s.store.Claim(ctx, key, fp, lockTTL, time.Hour)
		})
	}
	close(start)
	wg.Wait()
	claimed := 0
	for i := range n {
		if errs[i] != nil {
			s.t.Fatalf("concurrent Claim: %v", errs[i])
		}
		st := states[i].State
		switch {
		case st == idempotency.Claimed:
			claimed++
		case st == idempotency.InFlight || slices.Contains(other, st):
			if states[i].Fingerprint != fp {
				s.t.Fatalf("concurrent Claim: %v with fingerprint %q, want %q", st, states[i].Fingerprint, fp)
			}
		default:
			s.t.Fatalf("concurrent Claim = %v", st)
		}
	}
	return claimed
}

func (s *suite) resultExpires() {
	k, ttl := s.key("k"), s.opts.TTL
	tok := s.mustClaim(k, "fp", long)
	start := time.Now()
	if err := s.complete(k, tok, record("fp", 200, "short-lived"), ttl); err != nil {
		s.t.Fatalf("Complete: %v", err)
	}
	s.wantState(s.claim(k, "fp", long), idempotency.Completed, "fp")
	s.pollUntilClaimed(k, "fp", long, idempotency.Completed)
	if since := time.Since(start); since < ttl-time.Millisecond {
		s.t.Fatalf("the result expired after %v, before its TTL of %v", since, ttl)
	}
}

func (s *suite) concurrentClaims() {
	k := s.key("k")
	for round := range 5 {
		key := fmt.Sprintf("%s-%d", k, round)
		if claimed := s.race(key, "fp", long); claimed != 1 {
			s.t.Fatalf("round %d: %d of %d concurrent claims of a free key won, want exactly 1", round, claimed, s.opts.Goroutines)
		}
	}
}

func (s *suite) concurrentManyKeys() {
	const keys = 16
	per := max(2, s.opts.Goroutines/keys)
	type answer struct {
		key   int
		claim idempotency.Claim
		err   error
	}
	answers := make(chan answer, keys*per)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range keys * per {
		wg.Go(func() {
			ctx, cancel := s.ctx()
			defer cancel()
			kk := i % keys
			key, fp := s.key(fmt.Sprint(kk)), fmt.Sprint("fp-", kk)
			<-start
			c, err := s.store.Claim(ctx, key, fp, long, time.Hour)
			if err == nil && c.State == idempotency.Claimed {
				err = s.store.Complete(ctx, key, c.Token, record(fp, 200, key), long)
			}
			answers <- answer{kk, c, err}
		})
	}
	close(start)
	wg.Wait()
	close(answers)
	won := make([]int, keys)
	for a := range answers {
		if a.err != nil {
			s.t.Fatalf("key %d: %v", a.key, a.err)
		}
		switch a.claim.State {
		case idempotency.Claimed:
			won[a.key]++
		case idempotency.Completed:
			if string(a.claim.Record.Body) != s.key(fmt.Sprint(a.key)) {
				s.t.Fatalf("key %d replays %q: another key's record", a.key, a.claim.Record.Body)
			}
		}
	}
	for kk, n := range won {
		if n != 1 {
			s.t.Fatalf("key %d was claimed %d times, want exactly 1", kk, n)
		}
		c := s.claim(s.key(fmt.Sprint(kk)), "", long)
		s.wantState(c, idempotency.Completed, fmt.Sprint("fp-", kk))
	}
}

func (s *suite) claimsRacingComplete() {
	k := s.key("k")
	tok := s.mustClaim(k, "fp", long)
	rec := record("fp", 200, "done")
	n := s.opts.Goroutines
	errs := make(chan error, n)
	var completed atomic.Bool // set once Complete has returned
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := s.ctx()
			defer cancel()
			for {
				after := completed.Load()
				c, err := s.store.Claim(ctx, k, "fp", long, time.Hour)
				switch {
				case err != nil:
					errs <- err
					return
				case c.State == idempotency.Claimed:
					errs <- errors.New("a duplicate claimed a key that was in flight or completed")
					return
				case c.State == idempotency.Completed:
					if string(c.Record.Body) != "done" {
						errs <- fmt.Errorf("replayed %q", c.Record.Body)
					}
					return
				case after:
					errs <- errors.New("a Claim that started after Complete returned saw the key in flight")
					return
				}
			}
		})
	}
	if err := s.complete(k, tok, rec, long); err != nil {
		s.t.Fatalf("Complete: %v", err)
	}
	completed.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		s.t.Fatal(err)
	}
}

func (s *suite) canceledContext() {
	k := s.key("k")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.store.Claim(ctx, k, "fp", long, time.Hour); err == nil {
		s.t.Fatalf("Claim with a canceled context succeeded; want an error")
	}
	// It did not take the key.
	tok := s.mustClaim(k, "fp", long)
	if err := s.store.Complete(ctx, k, tok, record("fp", 200, "x"), long); err == nil {
		s.t.Fatalf("Complete with a canceled context succeeded; want an error")
	}
	if err := s.store.Release(ctx, k, tok); err == nil {
		s.t.Fatalf("Release with a canceled context succeeded; want an error")
	}
	s.wantState(s.claim(k, "fp", long), idempotency.InFlight, "fp")
}
