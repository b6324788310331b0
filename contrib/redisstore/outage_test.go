package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

// Redis killed mid-test: every operation returns an error, promptly, and
// none of them pretends to succeed; when Redis is back on the same address
// the same stores work again without being rebuilt.
func TestRedisKilled(t *testing.T) {
	srv := startOwnRedis(t)
	// Short timeouts: a dead Redis must show as an error quickly.
	a, b := newClient(t, srv.addr(), outageTimeout), newClient(t, srv.addr(), outageTimeout)
	sa, sb := newStoreWithPrefix(t, a, "outage:"), newStoreWithPrefix(t, b, "outage:")
	ctx := context.Background()

	held := mustClaim(t, sa, "held", "fp", lockTTL, idempotency.Claimed)
	done := mustClaim(t, sb, "done", "fp", lockTTL, idempotency.Claimed)
	if err := sb.Complete(ctx, "done", done.Token, sampleRecord("fp"), ttl); err != nil {
		t.Fatal(err)
	}

	// Traffic from both instances while Redis dies under it: every call
	// either succeeds or fails, promptly; none hangs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, failed int
	for w := range 4 {
		s := []idempotency.Store{sa, sb}[w%2]
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("traffic-%d-%d", w, i)
				start := time.Now()
				c, err := s.Claim(ctx, key, "fp", lockTTL, time.Hour)
				if err == nil && c.State == idempotency.Claimed {
					err = s.Complete(ctx, key, c.Token, sampleRecord("fp"), ttl)
				}
				if took := time.Since(start); took > prompt {
					t.Errorf("an operation took %v while Redis died, want under %v", took, prompt)
				}
				mu.Lock()
				if err == nil {
					ok++
				} else {
					failed++
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // pacing, not synchronisation
			}
		})
	}
	eventually(t, 5*time.Second, "no traffic succeeded before the kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ok >= 20
	})
	srv.kill()
	eventually(t, 5*time.Second, "no operation failed after the kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return failed >= 20
	})
	close(stop)
	wg.Wait()
	t.Logf("traffic: %d operations succeeded, %d failed", ok, failed)

	for _, s := range []struct {
		name  string
		store idempotency.Store
	}{{"instance a", sa}, {"instance b", sb}} {
		for range 3 { // again and again: the pool's dial errors must not turn into a hang
			failsPromptly(t, s.name+" with Redis down", s.store, held.Token)
		}
	}

	srv.start()

	// The clients reconnect by themselves (go-redis probes a failed pool
	// about once a second); then everything works again. The new Redis
	// kept nothing (no persistence), so the old keys are free.
	for _, s := range []idempotency.Store{sa, sb} {
		eventually(t, 10*time.Second, "the store did not recover after Redis restarted", func() bool {
			_, err := s.Claim(ctx, "probe", "fp", lockTTL, time.Hour)
			return err == nil
		})
	}
	c := mustClaim(t, sa, "after", "fp", lockTTL, idempotency.Claimed)
	mustClaim(t, sb, "after", "fp", lockTTL, idempotency.InFlight)
	if err := sb.Complete(ctx, "after", c.Token, sampleRecord("fp"), ttl); err != nil {
		t.Fatal(err)
	}
	sameRecord(t, mustClaim(t, sb, "after", "fp", lockTTL, idempotency.Completed).Record, sampleRecord("fp"))
	mustClaim(t, sa, "done", "fp", lockTTL, idempotency.Claimed)
	if err := sa.Complete(ctx, "held", held.Token, sampleRecord("fp"), ttl); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Complete of a claim Redis lost: err = %v, want ErrNotOwner", err)
	}
}
