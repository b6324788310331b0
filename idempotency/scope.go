package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"math/rand/v2"
	"strings"
	"time"
)

// ScopedKey returns the store key of key in scope (the caller a request
// belongs to): the scope's SHA-256 digest — fixed length, so that no scope
// and key pair can spell another's, and the scope, which may be a secret,
// never reaches the store — then '/' and the key. The HTTP middleware and
// the gRPC interceptor both use it, so one key in one scope is one store
// key over both protocols.
//
// The MemoryStore reads the scope back from a store key (the 43 characters
// before the first '/': base64url has no '/') to evict fairly between
// scopes; a change of this format must keep the digest first.
func ScopedKey(scope, key string) string {
	sum := sha256.Sum256([]byte(scope))
	var b strings.Builder
	b.Grow(base64.RawURLEncoding.EncodedLen(len(sum)) + 1 + len(key))
	enc := base64.NewEncoder(base64.RawURLEncoding, &b)
	_, _ = enc.Write(sum[:])
	_ = enc.Close()
	b.WriteByte('/')
	b.WriteString(key)
	return b.String()
}

// WaitWhileInFlight waits for a key that another execution holds: it calls
// claim after a wait that starts at 5 ms and doubles up to 250 ms, each
// jittered (so that callers waiting for one key do not poll in step), until
// claim reports a state other than InFlight, until is reached, or ctx ends.
// It returns that claim, or a Claim{State: InFlight, Fingerprint: fp} when it
// gave up. An error from claim is returned as it is, unless ctx ended (then
// it gave up).
func WaitWhileInFlight(ctx context.Context, until time.Time, fp string, claim func(context.Context) (Claim, error)) (Claim, error) {
	gaveUp := Claim{State: InFlight, Fingerprint: fp}
	delay := 5 * time.Millisecond
	for {
		d := delay/2 + rand.N(delay/2+1)
		if left := time.Until(until); d > left {
			d = left
		}
		if d <= 0 {
			return gaveUp, nil
		}
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return gaveUp, nil
		case <-timer.C:
		}
		c, err := claim(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return gaveUp, nil
			}
			return c, err
		}
		if c.State != InFlight {
			return c, nil
		}
		delay = min(2*delay, 250*time.Millisecond)
	}
}
