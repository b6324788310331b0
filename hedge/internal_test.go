package hedge

import (
	"context"
	"errors"
	"sync"
	"testing"
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
