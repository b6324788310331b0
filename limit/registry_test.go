package limit_test

import (
	"errors"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/limit"
)

// A Registry gives each key a limiter of its own, bounded in keys: an idle
// one is evicted to make room, a busy one never.
func TestRegistry(t *testing.T) {
	r, err := limit.NewRegistry(limit.RegistryConfig{Config: limit.Config{InitialLimit: 1}, MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	b, _ := r.Get("b")
	if a == b || a.Name() != "a" {
		t.Fatalf("keys share a limiter, or the name is not the key: %q %q", a.Name(), b.Name())
	}
	if again, _ := r.Get("a"); again != a {
		t.Fatal("a second Get made a new limiter")
	}
	pa, _ := a.TryAcquire()
	pb, _ := b.TryAcquire()
	if _, err := r.Get("c"); !errors.Is(err, limit.ErrTooManyKeys) || !watertight.IsRejection(err) {
		t.Fatalf("a third key with both busy: %v", err)
	}
	pb.Ignore()
	c, err := r.Get("c")
	if err != nil || r.Len() != 2 || c.Name() != "c" {
		t.Fatalf("a third key with b idle: %v (len %d)", err, r.Len())
	}
	if s := r.Snapshots(); len(s) != 2 || s[0].Name != "a" || s[1].Name != "c" || s[0].InFlight != 1 {
		t.Fatalf("snapshots %+v", s)
	}
	pa.Ignore()
	if _, err := limit.NewRegistry(limit.RegistryConfig{Config: limit.Config{MinLimit: -1}}); err == nil {
		t.Fatal("a bad Config was accepted")
	}
}

// Reconfigure reaches every limiter held and the ones made later; a nil
// Algorithm keeps what each has learnt.
func TestRegistryReconfigure(t *testing.T) {
	alg := &fixed{next: 30}
	r, err := limit.NewRegistry(limit.RegistryConfig{Config: limit.Config{InitialLimit: 10, WindowSamples: 1, MinWindow: -1, Algorithm: func() limit.Algorithm { return alg }}})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	p, _ := a.TryAcquire()
	p.Done(0) // the algorithm moves a to 30
	if err := r.Reconfigure(limit.Config{MaxLimit: 20, WindowSamples: 1, MinWindow: -1}); err != nil {
		t.Fatal(err)
	}
	if a.Limit() != 20 || a.Snapshot().Algorithm != "fixed" {
		t.Fatalf("held limiter after lowering MaxLimit: %+v", a.Snapshot())
	}
	b, _ := r.Get("b")
	if s := b.Snapshot(); s.Algorithm != "fixed" || s.Limit != 20 {
		t.Fatalf("a new key after Reconfigure: %+v, want the kept algorithm and the new bound", s)
	}
	if err := r.Reconfigure(limit.Config{MinLimit: 5, MaxLimit: 2}); err == nil {
		t.Fatal("a bad Config was accepted")
	}
}
