package watertightkafka

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestWatchdogTimesOutAttempts: on the virtual clock, an attempt that
// outlives its timeout has its context cancelled, with cause
// ErrAttemptTimeout, between the timeout and an eighth more; quick attempts
// in a row, and a run left idle, never see their context end early; the
// attempt after a timeout gets a fresh context.
func TestWatchdogTimesOutAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 80 * time.Millisecond
		w := newWatchdog(timeout)
		w.start()
		defer w.stop()
		r := w.begin(context.Background())
		defer w.end(r)
		r.limit.Store(w.ticks(timeout))

		// Quick attempts, each shorter than the timeout, back to back for
		// many timeouts: none is cancelled.
		for range 100 {
			ctx := w.attempt(r)
			time.Sleep(timeout / 3) // virtual time: the handler's work
			if ctx.Err() != nil || w.done(r) {
				t.Fatal("a quick attempt was cancelled")
			}
		}
		// Idle for a while: the idle run's context may be cancelled, the
		// next attempt must not see it.
		time.Sleep(5 * timeout)
		for _, hang := range []bool{true, false} {
			start := time.Now()
			ctx := w.attempt(r)
			if ctx.Err() != nil {
				t.Fatal("an attempt started with a cancelled context")
			}
			if !hang {
				if w.done(r) {
					t.Fatal("an attempt that returned at once timed out")
				}
				continue
			}
			<-ctx.Done()
			took := time.Since(start)
			if took < timeout || took > timeout+timeout/watchdogSlices {
				t.Fatalf("attempt cancelled after %v, want between %v and %v", took, timeout, timeout+timeout/watchdogSlices)
			}
			if !errors.Is(context.Cause(ctx), ErrAttemptTimeout) || !w.done(r) {
				t.Fatalf("cause %v, done %v: want ErrAttemptTimeout", context.Cause(ctx), w.done(r))
			}
		}
	})
}

// TestAttemptTimeout: a handler that hangs is cut at the lane's
// AttemptTimeout, the attempt fails with an error that matches
// ErrAttemptTimeout, and the retry policy retries it.
func TestAttemptTimeout(t *testing.T) {
	e := newEnv(t, map[string]int32{"hang": 1})
	e.produceN(t, "hang", 1, 1)
	var attempts int
	causes := make(chan error, 3)
	h := func(ctx context.Context, r *kgo.Record) error {
		attempts++
		if attempts < 3 {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}
		causes <- nil
		return nil
	}
	cfg := e.config("g", h, "hang")
	pol := fastRetry(t, 3)
	cfg.DefaultLane = LaneConfig{Workers: 1, AttemptTimeout: 30 * time.Millisecond, Retry: pol}
	c, _ := start(t, cfg)
	for i := range 3 {
		select {
		case err := <-causes:
			if want := i < 2; errors.Is(err, ErrAttemptTimeout) != want {
				t.Fatalf("attempt %d: cause %v", i+1, err)
			}
		case <-time.After(waitLong):
			t.Fatal("no third attempt")
		}
	}
	waitFor(t, waitLong, "the record processed", func() bool { return laneOf(c, e.topic("hang")).Processed == 1 })
}
