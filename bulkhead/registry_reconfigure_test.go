package bulkhead_test

import (
	"testing"

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
