package hedge

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Materialising, stopping and releasing an attempt's context from several
// goroutines at once: whatever the order, the context ends up done, Err and
// Done agree, and the first cause given wins (run with -race).
func TestAttemptRaces(t *testing.T) {
	cause := errors.New("cause")
	for i := range 2000 {
		a := &attempt{parent: context.Background()}
		var wg sync.WaitGroup
		wg.Go(func() { a.Done() })
		wg.Go(func() { a.Value(1) })
		if i%2 == 0 {
			wg.Go(func() { a.stop(cause) })
		}
		wg.Go(func() { a.release() })
		wg.Wait()
		if a.Err() != context.Canceled {
			t.Fatalf("round %d: Err = %v, want context.Canceled", i, a.Err())
		}
		select {
		case <-a.Done():
		default:
			t.Fatalf("round %d: Done not closed after release", i)
		}
		if c := context.Cause(a); c != cause && c != context.Canceled {
			t.Fatalf("round %d: Cause = %v", i, c)
		}
	}
}

func TestAttemptString(t *testing.T) {
	if s := (&attempt{}).String(); s != "hedge.attempt" {
		t.Fatal(s)
	}
}

// TestTimerLatenessCompensation: a percentile policy learns how late its
// timer fires and arms it that much earlier, never below half the delay.
func TestTimerLatenessCompensation(t *testing.T) {
	p, err := New(Config{Percentile: 0.95, MinDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.armFor(8 * time.Millisecond); got != 8*time.Millisecond {
		t.Fatalf("before any lateness: armFor(8ms) = %v", got)
	}
	for range 100 {
		p.noteLate(time.Millisecond)
	}
	if got := p.armFor(8 * time.Millisecond); got < 7*time.Millisecond-20*time.Microsecond || got > 7*time.Millisecond+20*time.Microsecond {
		t.Fatalf("after 1ms lateness: armFor(8ms) = %v, want about 7ms", got)
	}
	if got := p.armFor(time.Millisecond); got != 500*time.Microsecond {
		t.Fatalf("armFor(1ms) = %v, want the floor of half the delay", got)
	}
	for range 100 {
		p.noteLate(time.Hour) // a pause, not lateness: clamped to 10ms
	}
	if late := time.Duration(p.lateNs.Load()); late > 10*time.Millisecond {
		t.Fatalf("lateness %v above the clamp", late)
	}
	for range 200 {
		p.noteLate(-time.Millisecond) // early (clock skew): counted as 0
	}
	if late := time.Duration(p.lateNs.Load()); late > 100*time.Microsecond {
		t.Fatalf("lateness %v after on-time fires", late)
	}
}
