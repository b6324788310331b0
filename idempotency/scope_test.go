package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

func TestScopedKey(t *testing.T) {
	a, b := idempotency.ScopedKey("tenant-a", "k"), idempotency.ScopedKey("tenant-b", "k")
	if a == b {
		t.Fatal("two scopes share a store key")
	}
	if strings.Contains(a, "tenant-a") || !strings.HasSuffix(a, "/k") {
		t.Fatalf("ScopedKey = %q: the scope must be hashed and the key kept", a)
	}
	// The digest has a fixed length, so a scope cannot swallow a key's prefix.
	if idempotency.ScopedKey("a/b", "c") == idempotency.ScopedKey("a", "b/c") {
		t.Fatal("scope and key boundaries are ambiguous")
	}
}

// TestWaitWhileInFlight: it polls with growing waits until the key is no
// longer in flight, gives up at the deadline it is given or when ctx ends,
// and passes a store error on.
func TestWaitWhileInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		c, err := idempotency.WaitWhileInFlight(t.Context(), start.Add(time.Minute), "fp", func(context.Context) (idempotency.Claim, error) {
			calls++
			if time.Since(start) < time.Second {
				return idempotency.Claim{State: idempotency.InFlight}, nil
			}
			return idempotency.Claim{State: idempotency.Completed}, nil
		})
		if err != nil || c.State != idempotency.Completed {
			t.Fatalf("got %v, %v", c, err)
		}
		if took := time.Since(start); took < time.Second || took > time.Second+250*time.Millisecond {
			t.Fatalf("took %v, want just over 1s", took)
		}
		if calls < 5 || calls > 15 { // 5ms doubling to 250ms: about 9 polls in a second
			t.Fatalf("%d polls in a second", calls)
		}

		start = time.Now()
		c, err = idempotency.WaitWhileInFlight(t.Context(), start.Add(3*time.Second), "fp", func(context.Context) (idempotency.Claim, error) {
			return idempotency.Claim{State: idempotency.InFlight}, nil
		})
		if err != nil || c.State != idempotency.InFlight || c.Fingerprint != "fp" || time.Since(start) != 3*time.Second {
			t.Fatalf("gave up with %v, %v after %v", c, err, time.Since(start))
		}

		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		c, _ = idempotency.WaitWhileInFlight(ctx, time.Now().Add(time.Hour), "fp", func(context.Context) (idempotency.Claim, error) {
			return idempotency.Claim{State: idempotency.InFlight}, nil
		})
		if c.State != idempotency.InFlight {
			t.Fatalf("cancelled wait: %v", c)
		}

		boom := errors.New("store down")
		if _, err := idempotency.WaitWhileInFlight(t.Context(), time.Now().Add(time.Hour), "fp", func(context.Context) (idempotency.Claim, error) {
			return idempotency.Claim{}, boom
		}); !errors.Is(err, boom) {
			t.Fatalf("store error: %v", err)
		}
	})
}
