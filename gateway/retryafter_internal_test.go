package gateway

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/bulkhead"
)

func TestRetryAfterValue(t *testing.T) {
	for _, c := range []struct {
		d        time.Duration
		min, max int
	}{
		{0, 1, 2}, {300 * time.Millisecond, 1, 2}, {1500 * time.Millisecond, 2, 4},
		{12 * time.Second, 12, 22}, {30 * time.Second, 30, 40}, {time.Hour, 300, 310},
	} {
		seen := map[int]bool{}
		for range 500 {
			v, err := strconv.Atoi(retryAfterValue(c.d))
			if err != nil || v < c.min || v > c.max {
				t.Fatalf("retryAfterValue(%v) = %d, want %d to %d", c.d, v, c.min, c.max)
			}
			seen[v] = true
		}
		if len(seen) < 2 {
			t.Fatalf("retryAfterValue(%v) is always %v: not spread", c.d, seen)
		}
	}
}

// A route whose calls take 3 s, one at a time, with three waiting: the
// newcomer's turn is about 12 s away.
func TestDrainTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh, err := bulkhead.New(bulkhead.Config{Name: "r", MaxConcurrent: 1, MaxWait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		rt := &route{bulk: bh}
		for range 50 {
			rt.latency.observe(3 * time.Second)
		}
		if d := rt.drainTime(); d != 3*time.Second {
			t.Fatalf("idle route: %v, want 3s", d)
		}
		if !bh.TryAcquire() {
			t.Fatal("no permit")
		}
		for range 3 {
			go func() {
				if bh.Acquire(context.Background()) == nil {
					bh.Release()
				}
			}()
		}
		synctest.Wait() // the three are waiting
		if d := rt.drainTime(); d != 12*time.Second {
			t.Fatalf("one in flight and three waiting: %v, want 12s", d)
		}
		bh.Release()
	})
}
