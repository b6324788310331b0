package bulkhead_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/watertight-go/watertight/bulkhead"
)

// Registry.Reconfigure resizes the bulkheads held, keeping their permits,
// and the ones made after.
func TestRegistryReconfigure(t *testing.T) {
	r, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 2}})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	if !a.TryAcquire() || !a.TryAcquire() {
		t.Fatal("TryAcquire failed")
	}
	if err := r.Reconfigure(bulkhead.Config{MaxConcurrent: -1}); err == nil {
		t.Fatal("Reconfigure(invalid) = nil")
	}
	if err := r.Reconfigure(bulkhead.Config{MaxConcurrent: 3}); err != nil {
		t.Fatal(err)
	}
	if a2, _ := r.Get("a"); a2 != a || !a.TryAcquire() || a.TryAcquire() {
		t.Fatalf("held bulkhead: %+v, want the same one with 3 permits, 2 held before", a.Snapshot())
	}
	for range 3 {
		a.Release()
	}
	if b, _ := r.Get("b"); b.Snapshot().MaxConcurrent != 3 {
		t.Fatalf("new key: %d permits, want 3", b.Snapshot().MaxConcurrent)
	}
}

// Registry.Reconfigure sets the waiting room of the bulkheads held and of
// new ones; their QueueOrder stays.
func TestRegistryReconfigureWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 1, MaxWait: -1, MaxWaiters: -1}})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := r.Get("a")
		if err := r.Reconfigure(bulkhead.Config{MaxConcurrent: 1, MaxWait: -1, MaxWaiters: 1, QueueOrder: bulkhead.NewestFirst}); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"a", "b"} {
			b, _ := r.Get(key)
			if b != a && key == "a" {
				t.Fatal("Get returned another bulkhead")
			}
			ctx, cancel := context.WithCancel(context.Background())
			_ = b.Acquire(ctx)
			errc := make(chan error, 1)
			go func() { errc <- b.Acquire(ctx) }()
			synctest.Wait()
			// Oldest first still: the newcomer is refused, the waiter stays.
			if err := b.Acquire(ctx); !errors.Is(err, bulkhead.ErrFull) {
				t.Fatalf("%s: Acquire into a full room of 1 = %v, want ErrFull", key, err)
			}
			cancel()
			<-errc
			b.Release()
		}
	})
}
