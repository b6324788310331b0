package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/idempotency"
)

// DefaultKeyPrefix is the prefix of every Redis key the store writes when
// Config.KeyPrefix is empty.
const DefaultKeyPrefix = "watertight:idem:"

// DefaultMaxRecordBytes is the largest encoded record the store writes when
// Config.MaxRecordBytes is zero: 8 MiB, above the HTTP middleware's default
// response limit (1 MiB), so that the middleware's limit is the one that
// applies unless it is raised.
const DefaultMaxRecordBytes = 8 << 20

// ErrCorrupt is returned (wrapped, with the Redis key and the reason) by
// Store.Claim when the value stored under a key was not written by this
// store, or was written by a newer version of it. The key stays as it is
// (it fails closed) until its TTL ends or an operator deletes it.
var ErrCorrupt = errors.New("redisstore: corrupt stored value")

// Config configures a Store. The zero value is valid.
type Config struct {
	// KeyPrefix is put before every idempotency key to make its Redis key,
	// so the store's keys do not collide with the application's and can
	// be listed with SCAN MATCH prefix*. If empty, DefaultKeyPrefix.
	// Two stores (or two server instances) share keys exactly when they
	// use the same Redis and the same prefix.
	KeyPrefix string
	// MaxRecordBytes is the largest encoded record (body, headers,
	// fingerprint and a few bytes of framing) that Complete stores; a
	// larger one gets an error that wraps idempotency.ErrTooLarge, and the
	// claim stays held for the caller to release. If zero,
	// DefaultMaxRecordBytes (8 MiB); if negative, no limit of the store's
	// own (Redis refuses strings over 512 MB).
	MaxRecordBytes int
}

// DefaultConfig returns the configuration that the zero Config stands for,
// with the defaults filled in.
func DefaultConfig() Config {
	return Config{KeyPrefix: DefaultKeyPrefix, MaxRecordBytes: DefaultMaxRecordBytes}
}

// Store is an idempotency.Store kept in Redis. It holds no state of its own
// besides its configuration: any number of Stores, in any number of
// processes, that use the same Redis and KeyPrefix see the same keys.
// A Store is safe for concurrent use. It does not own the client: close
// the client when done with it.
type Store struct {
	client   redis.UniversalClient
	prefix   string
	maxBytes int // < 0: no limit
}

var _ idempotency.Store = (*Store)(nil)

// New returns a Store that keeps its keys in the Redis behind client (a
// *redis.Client, *redis.ClusterClient or failover client: each operation
// touches one key, so the scripts suit a cluster). New does not contact
// Redis.
//
// The client's options decide how a Redis outage looks to callers. Set
// ContextTimeoutEnabled, so that the caller's deadline (the middleware's
// StoreTimeout) bounds each call: without it go-redis ignores context
// deadlines for network I/O, and a hung Redis holds each call well past
// the caller's deadline (5 s, measured with the default options). Short
// DialTimeout, ReadTimeout and WriteTimeout help too; see
// docs/idempotency-redis.md.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: client must not be nil")
	}
	s := &Store{client: client, prefix: cfg.KeyPrefix, maxBytes: cfg.MaxRecordBytes}
	if s.prefix == "" {
		s.prefix = DefaultKeyPrefix
	}
	if s.maxBytes == 0 {
		s.maxBytes = DefaultMaxRecordBytes
	}
	return s, nil
}

// Key returns the Redis key under which the store keeps the idempotency key
// key: Config.KeyPrefix followed by key.
func (s *Store) Key(key string) string { return s.prefix + key }

// claimScript claims KEYS[1] when it is absent: it sets it to the claim
// value ARGV[1] (which holds a fresh token and the lock's end) for ARGV[2]
// milliseconds (the result TTL) and returns 1. Otherwise it returns the
// stored value and its PTTL, for the caller to decode: a claim whose PTTL
// has come down to the lock's end written in it is Unknown. A value equal
// to ARGV[1] whose lock still runs is the caller's own claim, set by an
// earlier attempt of this same call whose reply was lost (the client
// retried it): that is claimed too.
var claimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
local pttl = redis.call('PTTL', KEYS[1])
if v == ARGV[1] and pttl > tonumber(ARGV[3]) then
  return 1
end
return {v, pttl}
`)

// owned is the Lua test shared by the Complete and Release scripts: v is the
// claim whose value starts with ARGV[1] (the claim tag and the owner's
// token) and its lock has not ended — the key's PTTL is still above the
// lock's end, the number that follows the prefix.
const owned = `
local function owned(v)
  if v == false or string.sub(v, 1, string.len(ARGV[1])) ~= ARGV[1] then
    return false
  end
  local lockEnd = tonumber(string.match(v, '^(%d+):', string.len(ARGV[1]) + 1))
  return lockEnd ~= nil and redis.call('PTTL', KEYS[1]) > lockEnd
end
`

// completeScript replaces the claim of KEYS[1] with the record ARGV[2],
// kept for ARGV[3] milliseconds, if the claim is still owned by the token
// in ARGV[1] and its lock has not ended; it returns 1 then and 0 otherwise.
var completeScript = redis.NewScript(owned + `
if owned(redis.call('GET', KEYS[1])) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
`)

// releaseScript deletes KEYS[1] if its claim is still owned by the token in
// ARGV[1] and its lock has not ended; it returns 1 then and 0 otherwise.
var releaseScript = redis.NewScript(owned + `
if owned(redis.call('GET', KEYS[1])) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// Claim implements idempotency.Store: in one Lua script it claims key when
// it is absent, or returns what holds it — a claim whose lock runs
// (InFlight, with its fingerprint), a claim whose lock has ended without a
// result (Unknown), or a stored record (Completed). A new claim's Redis key
// lives for ttl (the result TTL, or lockTTL if that is longer); the lock's
// end is written in its value as the PTTL at which the lock has run for
// lockTTL, so the lock is timed by Redis's own key expiry, with no clock
// of the process. A stored value it cannot decode gives an error that wraps
// ErrCorrupt. key must not be empty and lockTTL must be positive; Redis
// keeps times in milliseconds, rounded down, and at least 1 ms.
func (s *Store) Claim(ctx context.Context, key, fp string, lockTTL, ttl time.Duration) (idempotency.Claim, error) {
	if key == "" {
		return idempotency.Claim{}, errors.New("redisstore: Claim key must not be empty")
	}
	if lockTTL <= 0 {
		return idempotency.Claim{}, fmt.Errorf("redisstore: Claim lockTTL must be > 0, got %v", lockTTL)
	}
	token := newToken()
	rkey := s.prefix + key
	lock := millis(lockTTL)
	life := max(millis(ttl), lock)
	lockEnd := life - lock
	res, err := claimScript.Run(ctx, s.client, []string{rkey}, encodeClaim(token, lockEnd, fp), life, lockEnd).Result()
	if err != nil {
		return idempotency.Claim{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	switch v := res.(type) {
	case int64:
		if v == 1 {
			return idempotency.Claim{State: idempotency.Claimed, Token: token}, nil
		}
	case []any:
		if len(v) == 2 {
			val, ok1 := v[0].(string)
			pttl, ok2 := v[1].(int64)
			if ok1 && ok2 {
				c, err := decodeValue(val, pttl)
				if err != nil {
					return idempotency.Claim{}, fmt.Errorf("%w at Redis key %q: %v", ErrCorrupt, rkey, err)
				}
				return c, nil
			}
		}
	}
	return idempotency.Claim{}, fmt.Errorf("redisstore: claim: unexpected reply %T %v from the Lua script", res, res)
}

// Complete implements idempotency.Store: if token still owns key's claim
// and its lock has not ended, it replaces the claim with rec, kept for ttl
// stretched by up to 5% at random (backoff.SpreadUp: never shorter, so that
// results stored together do not all expire together), a Redis TTL, in one
// Lua script; otherwise it returns idempotency.ErrNotOwner. A record whose
// encoding is larger than Config.MaxRecordBytes gets an error that wraps
// idempotency.ErrTooLarge, and the claim stays held (release it). ttl must
// be positive.
func (s *Store) Complete(ctx context.Context, key, token string, rec idempotency.Record, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("redisstore: Complete ttl must be > 0, got %v", ttl)
	}
	if !isToken(token) {
		return idempotency.ErrNotOwner
	}
	value := encodeRecord(&rec)
	if s.maxBytes >= 0 && len(value) > s.maxBytes {
		return fmt.Errorf("redisstore: %w: %d bytes encoded, Config.MaxRecordBytes is %d", idempotency.ErrTooLarge, len(value), s.maxBytes)
	}
	n, err := completeScript.Run(ctx, s.client, []string{s.prefix + key}, claimPrefix(token), value, millis(backoff.SpreadUp(ttl, ttlSpread))).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	if n != 1 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Release implements idempotency.Store: if token still owns key's claim
// and its lock has not ended, it deletes the key (compare-and-delete, in one Lua script), so the next
// request with the key runs; otherwise it returns idempotency.ErrNotOwner.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if !isToken(token) {
		return idempotency.ErrNotOwner
	}
	n, err := releaseScript.Run(ctx, s.client, []string{s.prefix + key}, claimPrefix(token)).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	if n != 1 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// ttlSpread is the fraction by which Complete stretches a result's TTL at
// most.
const ttlSpread = 0.05

// tokenLen is the length of a token: 16 random bytes in lower-case hex.
const tokenLen = 32

// newToken returns a fresh random fencing token.
func newToken() string {
	var b [tokenLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand.Read crashes the program instead)
	return hex.EncodeToString(b[:])
}

// isToken reports whether s has the form of a token newToken makes. A
// token of any other form was not issued by a Store, so it owns nothing;
// checking the form also keeps the scripts' prefix comparison exact.
func isToken(s string) bool {
	if len(s) != tokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// millis returns d in whole milliseconds, at least 1, for PX.
func millis(d time.Duration) int64 {
	if ms := d.Milliseconds(); ms > 0 {
		return ms
	}
	return 1
}
