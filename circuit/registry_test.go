package circuit_test

import (
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
)

func mustRegistry(t *testing.T, cfg circuit.RegistryConfig) *circuit.Registry {
	t.Helper()
	r, err := circuit.NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// call makes one call through key's breaker with outcome o, and returns the
// breaker's refusal, if any.
func call(t *testing.T, r *circuit.Registry, key string, o watertight.Outcome) error {
	t.Helper()
	b, err := r.Get(key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	p, err := b.Allow()
	if err != nil {
		return err
	}
	p.Done(o)
	return nil
}

// Issue 23: with 100 unique one-off keys between every real call, a key
// whose dependency always fails must still open its breaker, in every
// trial, after the calls its config implies (MinCalls failures). The
// registry used to evict the first closed breaker it met, and "pay" got a
// fresh one on almost every call: 14 of 20 trials never opened.
func TestRegistryChurnKeepsFailingKey(t *testing.T) {
	const minCalls = 5
	for trial := range 20 {
		r := mustRegistry(t, circuit.RegistryConfig{
			Config:  circuit.Config{WindowSize: 10, MinCalls: minCalls, FailureRateThreshold: 50},
			MaxKeys: 16,
		})
		pay := 0 // calls of "pay" let through
		for round := 0; ; round++ {
			for i := range 100 {
				if err := call(t, r, "one-off-"+strconv.Itoa(trial)+"-"+strconv.Itoa(round)+"-"+strconv.Itoa(i), watertight.Success); err != nil {
					t.Fatalf("trial %d: a fresh key's breaker refused: %v", trial, err)
				}
			}
			err := call(t, r, "pay", watertight.Failure)
			if errors.Is(err, circuit.ErrOpen) {
				break
			}
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			if pay++; pay > minCalls {
				t.Fatalf("trial %d: %d failed calls of pay, and its breaker is still closed (MinCalls %d)", trial, pay, minCalls)
			}
		}
		if pay != minCalls {
			t.Errorf("trial %d: pay's breaker opened after %d calls, want %d", trial, pay, minCalls)
		}
		if n := r.Len(); n != 16 {
			t.Errorf("trial %d: Len = %d, want 16", trial, n)
		}
	}
}

// A closed breaker with only successes in its window goes before one whose
// window holds a failure, however recently each was used; breakers that all
// hold state refuse a new key until they have gone unused for Retain; one
// set by an operator is never evicted.
func TestRegistryEvictsOnlyWhatHoldsNoState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustRegistry(t, circuit.RegistryConfig{
			Config:  circuit.Config{WindowSize: 10, MinCalls: 5},
			MaxKeys: 2,
			Retain:  time.Minute,
		})
		call(t, r, "failing", watertight.Failure) // the oldest and least used
		call(t, r, "healthy", watertight.Success)
		call(t, r, "healthy", watertight.Success)
		call(t, r, "new", watertight.Success) // evicts healthy, not failing
		if s, ok := lookup(r, "failing"); !ok || s.Failures != 1 {
			t.Fatal("the breaker with a failure in its window was evicted")
		}
		if _, ok := lookup(r, "healthy"); ok {
			t.Fatal("the breaker of successes only was kept, and one holding a failure dropped")
		}

		call(t, r, "new", watertight.Failure)
		if _, err := r.Get("another"); !errors.Is(err, circuit.ErrTooManyKeys) {
			t.Fatalf("Get on a registry of breakers holding failures = %v, want ErrTooManyKeys", err)
		}
		time.Sleep(30 * time.Second)
		r.Get("new") // in use
		time.Sleep(31 * time.Second)
		// failing unused for 61s (> Retain), new for 31s.
		if _, err := r.Get("another"); err != nil {
			t.Fatalf("Get after Retain: %v", err)
		}
		if _, ok := lookup(r, "failing"); ok {
			t.Error("failing, unused for longer than Retain, was kept")
		}
		if _, ok := lookup(r, "new"); !ok {
			t.Error("new, used within Retain, was evicted")
		}

		// An operator's setting is never evicted.
		f, _ := r.Get("another")
		f.ForceOpen()
		g, _ := r.Get("new")
		g.Disable()
		time.Sleep(time.Hour)
		for range 2 {
			if _, err := r.Get("third"); !errors.Is(err, circuit.ErrTooManyKeys) {
				t.Fatalf("Get on a registry of breakers forced open and disabled = %v, want ErrTooManyKeys", err)
			}
		}
		f.Reset()
		g.Reset()
	})
}

// An open breaker in use is kept; with Retain negative, even an idle one is.
func TestRegistryKeepsOpenBreakers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustRegistry(t, circuit.RegistryConfig{
			Config:  circuit.Config{WindowSize: 1, MinCalls: 1, OpenDuration: time.Hour},
			MaxKeys: 1,
			Retain:  -1,
		})
		call(t, r, "down", watertight.Failure)
		b, _ := r.Get("down")
		if s := b.State(); s != circuit.Open {
			t.Fatalf("state %v, want open", s)
		}
		time.Sleep(10 * time.Hour) // half-open by now, waiting for a trial
		if _, err := r.Get("other"); !errors.Is(err, circuit.ErrTooManyKeys) {
			t.Fatalf("Get = %v, want ErrTooManyKeys: Retain < 0 keeps a breaker holding state for ever", err)
		}
		b.Reset()
		if _, err := r.Get("other"); err != nil {
			t.Fatalf("Get once down closed clean: %v", err)
		}
	})
}

// lookup finds key's snapshot in the registry, without creating the
// breaker nor counting a use (Get would).
func lookup(r *circuit.Registry, key string) (circuit.Snapshot, bool) {
	for _, s := range r.Snapshots() {
		if s.Name == key {
			return s, true
		}
	}
	return circuit.Snapshot{}, false
}
