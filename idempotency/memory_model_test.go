package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"
)

// The states of a key in the reference model of the MemoryStore.
const (
	mFree = iota
	mClaimed
	mUnknown
	mResult
	mTomb // evicted before its TTL: Forgotten until expires
)

type modelKey struct {
	key, body string
	scope     int
	kind      int
	token     string
	lockUntil time.Time // mClaimed
	keepUntil time.Time // mClaimed, mUnknown
	expires   time.Time // mResult, mTomb
	seq       int       // mResult: completion order
}

type modelTomb struct {
	k       *modelKey
	expires time.Time
}

// The MemoryStore against a simple reference model: random claims,
// completions, releases (with right and wrong tokens) and waits on the fake
// clock, over keys of three scopes (one of them keys ScopedKey did not make),
// under a random MaxEntries and MaxTombstones. The model says what every
// answer must be: claims are never evicted; when room is needed the victim
// is the oldest result of a scope holding the most results; an evicted key
// reads Forgotten until its TTL, unless its tombstone was dropped, oldest
// first, beyond MaxTombstones; locks, unknown keys and results expire on
// time; and the counts of Stats agree.
func TestMemoryStoreModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		maxEntries := rapid.IntRange(1, 8).Draw(rt, "maxEntries")
		// With tombstones, the victim of an eviction can be found without
		// changing the store (it reads Forgotten); no tombstones is
		// TestMemoryStoreTombstones's.
		maxTombs := rapid.SampledFrom([]int{1, 3, 100}).Draw(rt, "maxTombstones")
		ops := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) modelOp {
			return modelOp{
				op:         rapid.SampledFrom([]string{"claim", "claim+complete", "claim+complete", "complete", "release", "wait"}).Draw(rt, "op"),
				key:        rapid.IntRange(0, 11).Draw(rt, "key"),
				lockTTL:    time.Duration(rapid.IntRange(1, 30).Draw(rt, "lockTTL")) * time.Second,
				extra:      time.Duration(rapid.IntRange(0, 60).Draw(rt, "extra")) * time.Second,
				ttl:        time.Duration(rapid.IntRange(1, 120).Draw(rt, "ttl")) * time.Second,
				rightToken: rapid.IntRange(0, 5).Draw(rt, "rightToken") > 0,
				wait:       time.Duration(rapid.SampledFrom([]int{1, 5, 30, 61}).Draw(rt, "seconds")) * time.Second,
			}
		}), 1, 80).Draw(rt, "ops")
		var failed string
		synctest.Test(t, func(*testing.T) { failed = runMemoryModel(maxEntries, maxTombs, ops) })
		if failed != "" {
			rt.Fatal(failed)
		}
	})
}

type modelOp struct {
	op                  string
	key                 int
	lockTTL, extra, ttl time.Duration
	rightToken          bool
	wait                time.Duration
}

type modelFailure string

// runMemoryModel runs ops on a store and the model, and returns what went
// wrong, or "".
func runMemoryModel(maxEntries, maxTombs int, ops []modelOp) (failed string) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(modelFailure)
			if !ok {
				panic(r)
			}
			failed = string(f)
		}
	}()
	rt := modelT{}
	ctx := context.Background()
	s, err := NewMemoryStore(MemoryConfig{MaxEntries: maxEntries, MaxBytes: -1, MaxTombstones: maxTombs})
	if err != nil {
		rt.Fatal(err)
	}
	s.spread = 0 // exact expiries, for the model

	var keys []*modelKey
	for sc := range 3 {
		for k := range 4 {
			key := ScopedKey(fmt.Sprint("scope", sc), fmt.Sprint(k))
			if sc == 2 {
				key = fmt.Sprint("plain-", k)
			}
			keys = append(keys, &modelKey{key: key, scope: sc})
		}
	}
	var tombs []modelTomb // as added, as the store's ring
	seq, evicted, dropped := 0, uint64(0), uint64(0)

	expire := func(now time.Time) {
		for _, k := range keys {
			switch {
			case k.kind == mClaimed && !now.Before(k.lockUntil):
				k.kind = mUnknown
				if !now.Before(k.keepUntil) {
					k.kind = mFree
				}
			case k.kind == mUnknown && !now.Before(k.keepUntil),
				k.kind == mResult && !now.Before(k.expires),
				k.kind == mTomb && !now.Before(k.expires):
				k.kind = mFree
			}
		}
	}
	// evict finds, among the candidates the model allows, the result the
	// store evicted (the only one that now reads Forgotten) and buries it.
	evict := func() {
		perScope := map[int]int{}
		oldest := map[int]*modelKey{}
		most := 0
		for _, k := range keys {
			if k.kind != mResult {
				continue
			}
			perScope[k.scope]++
			most = max(most, perScope[k.scope])
			if o := oldest[k.scope]; o == nil || k.seq < o.seq {
				oldest[k.scope] = k
			}
		}
		var victim *modelKey
		for sc, n := range perScope {
			if n != most {
				continue
			}
			k := oldest[sc]
			c, err := s.Claim(ctx, k.key, "fp", time.Second, time.Second)
			if err != nil {
				rt.Fatalf("Claim(%s) of a candidate for eviction: %v", k.key, err)
			}
			switch c.State {
			case Completed:
			case Forgotten:
				if victim != nil {
					rt.Fatalf("two results evicted for one claim: %s and %s", victim.key, k.key)
				}
				victim = k
			default:
				rt.Fatalf("candidate %s reads %v, want completed or forgotten", k.key, c.State)
			}
		}
		if victim == nil {
			rt.Fatalf("the store made room, but not by evicting the oldest result of a largest scope (%v results per scope)", perScope)
		}
		evicted++
		victim.kind = mTomb
		tombs = append(tombs, modelTomb{victim, victim.expires})
		if len(tombs) > maxTombs {
			o := tombs[0]
			tombs = tombs[1:]
			if o.k.kind == mTomb && o.k.expires.Equal(o.expires) {
				o.k.kind = mFree
				dropped++
			}
		}
	}

	// finish completes or releases k, with its token if o.rightToken.
	finish := func(op string, k *modelKey, o modelOp, now time.Time) {
		token := "0" // never handed out
		if k.kind == mClaimed && o.rightToken {
			token = k.token
		}
		owner := k.kind == mClaimed && token == k.token
		var err error
		if op == "complete" {
			seq++
			body := fmt.Sprint(k.key, "#", seq)
			err = s.Complete(ctx, k.key, token, Record{Status: 200, Body: []byte(body)}, o.ttl)
			if err == nil {
				k.kind, k.body, k.expires, k.seq = mResult, body, now.Add(o.ttl), seq
			}
		} else {
			err = s.Release(ctx, k.key, token)
			if err == nil {
				k.kind = mFree
			}
		}
		if owner != (err == nil) {
			rt.Fatalf("%s(%s) with token %q = %v; the key was %v in the model", op, k.key, token, err, k.kind)
		}
		if err != nil && !errors.Is(err, ErrNotOwner) {
			rt.Fatalf("%s(%s) = %v, want ErrNotOwner", op, k.key, err)
		}
	}

	for _, o := range ops {
		op, k := o.op, keys[o.key]
		now := time.Now()
		expire(now)
		switch op {
		case "claim", "claim+complete":
			lockTTL, ttl := o.lockTTL, o.lockTTL+o.extra
			entries := 0
			for _, o := range keys {
				if o.kind == mClaimed || o.kind == mUnknown || o.kind == mResult {
					entries++
				}
			}
			results := 0
			for _, o := range keys {
				if o.kind == mResult {
					results++
				}
			}
			c, err := s.Claim(ctx, k.key, "fp", lockTTL, ttl)
			want := map[int]ClaimState{mClaimed: InFlight, mUnknown: Unknown, mResult: Completed, mTomb: Forgotten}[k.kind]
			if k.kind == mFree {
				if entries+1 > maxEntries && results == 0 {
					if !errors.Is(err, ErrFull) {
						rt.Fatalf("Claim(%s) in a store full of claims: %+v, %v; want ErrFull", k.key, c, err)
					}
					continue
				}
				want = Claimed
			}
			if err != nil || c.State != want {
				rt.Fatalf("Claim(%s) = %+v, %v; want %v", k.key, c, err, want)
			}
			if want == Completed && string(c.Record.Body) != k.body {
				rt.Fatalf("Claim(%s) replays %q, want %q", k.key, c.Record.Body, k.body)
			}
			if want == Claimed {
				if entries+1 > maxEntries {
					evict()
				}
				k.kind, k.token, k.lockUntil, k.keepUntil = mClaimed, c.Token, now.Add(lockTTL), now.Add(ttl)
				if op == "claim+complete" {
					finish("complete", k, o, now)
				}
			}
		case "complete", "release":
			// Mostly a key that is claimed: the model's choice among them.
			var claimed []*modelKey
			for _, c := range keys {
				if c.kind == mClaimed {
					claimed = append(claimed, c)
				}
			}
			if len(claimed) > 0 && o.key%4 != 0 {
				k = claimed[o.key%len(claimed)]
			}
			finish(op, k, o, now)
		case "wait":
			time.Sleep(o.wait)
			expire(time.Now())
		}

		st := s.Stats()
		var entries, claims, live int
		scopes := map[int]bool{}
		for _, o := range keys {
			switch o.kind {
			case mClaimed:
				claims++
				fallthrough
			case mUnknown, mResult:
				entries++
				scopes[o.scope] = true
			case mTomb:
				live++
			}
		}
		if st.Entries != entries || st.Claims != claims || st.Scopes != len(scopes) || st.Evicted != evicted ||
			st.TombstonesDropped != dropped || st.Tombstones < live || st.Tombstones > max(maxTombs, 0) {
			rt.Fatalf("Stats = %+v; the model has %d entries, %d claims, %d scopes, %d evicted, %d live tombstones (%d dropped)",
				st, entries, claims, len(scopes), evicted, live, dropped)
		}
		if st.Bytes < 0 || (entries == 0 && st.Bytes != 0) {
			rt.Fatalf("Stats().Bytes = %d with %d entries", st.Bytes, entries)
		}
	}
	return ""
}

// modelT fails a model run.
type modelT struct{}

func (modelT) Fatal(args ...any) { panic(modelFailure(fmt.Sprint(args...))) }
func (modelT) Fatalf(format string, args ...any) {
	panic(modelFailure(fmt.Sprintf(format, args...)))
}

// scopeOf reads ScopedKey's scope back, whatever the key holds (slashes
// included), and puts every other key in the shared scope "".
func TestScopeOf(t *testing.T) {
	a1, a2, b := ScopedKey("tenant-a", "k/1"), ScopedKey("tenant-a", "/"), ScopedKey("tenant-b", "k/1")
	if scopeOf(a1) == "" || scopeOf(a1) != scopeOf(a2) || scopeOf(a1) == scopeOf(b) || len(scopeOf(a1)) != scopeDigestLen {
		t.Fatalf("scopeOf: %q, %q, %q", scopeOf(a1), scopeOf(a2), scopeOf(b))
	}
	if !strings.HasPrefix(a1, scopeOf(a1)+"/") {
		t.Fatalf("%q does not start with its scope %q", a1, scopeOf(a1))
	}
	for _, k := range []string{"", "k", "a/b", strings.Repeat("x", 43), strings.Repeat("x", 44)} {
		if got := scopeOf(k); got != "" {
			t.Fatalf("scopeOf(%q) = %q, want the shared scope", k, got)
		}
	}
}
