package circuit_test

import (
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
)

// Registry.Reconfigure reconfigures the breakers held, in place with their
// state, and the ones made after; an invalid configuration changes nothing.
func TestRegistryReconfigure(t *testing.T) {
	r, err := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{WindowSize: 10, MinCalls: 10}})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	a.ForceOpen()
	if err := r.Reconfigure(circuit.Config{WindowSize: 1, MinCalls: 2}); err == nil {
		t.Fatal("Reconfigure(invalid) = nil")
	}
	if err := r.Reconfigure(circuit.Config{WindowSize: 2, MinCalls: 2}); err != nil {
		t.Fatal(err)
	}
	if a2, _ := r.Get("a"); a2 != a || a2.State() != circuit.ForcedOpen || a2.Name() != "a" {
		t.Fatalf("held breaker: same %v, state %v, name %q", a2 == a, a2.State(), a2.Name())
	}
	a.Reset()
	for _, key := range []string{"a", "b"} { // held, and made after
		b, _ := r.Get(key)
		for range 2 {
			if p, err := b.Allow(); err == nil {
				p.Done(watertight.Failure)
			}
		}
		if b.State() != circuit.Open {
			t.Errorf("%s: %v after 2 failures, want open under MinCalls 2", key, b.State())
		}
		b.Reset()
	}
}
