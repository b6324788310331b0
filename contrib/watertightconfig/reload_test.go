package watertightconfig

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
)

// Issue 23: a reload that changes a bulkhead's limit keeps the permits in
// flight. Ten callers hold the ten permits of max_concurrent 10; the file
// is reloaded with 12; newcomers that look the bulkhead up (as callers
// should) get two permits, not twelve: never more than 12 in flight.
// (Before, the reload built a new bulkhead with every permit free: 20 and
// more in flight.)
func TestReloadKeepsPermitsInFlight(t *testing.T) {
	const v1 = "bulkheads:\n  db: {max_concurrent: 10}\n"
	r := newReg(t, v1, Options{})
	var inFlight, peak atomic.Int64
	enter := func() {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
	}
	old, _ := r.Bulkhead("db")
	for range 10 {
		if !old.TryAcquire() {
			t.Fatal("TryAcquire failed on an empty bulkhead")
		}
		enter()
	}
	ch, err := r.Reload(mustParse(t, strings.Replace(v1, "10", "12", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Changed, []string{"bulkheads.db"}) || len(ch.Rebuilt) != 0 {
		t.Errorf("changes %v, rebuilt %q; want bulkheads.db reconfigured in place", ch, ch.Rebuilt)
	}
	var got atomic.Int64
	var wg sync.WaitGroup
	held := make([]*bulkhead.Bulkhead, 20)
	for i := range 20 {
		wg.Go(func() {
			b, _ := r.Bulkhead("db")
			if b.TryAcquire() {
				enter()
				got.Add(1)
				held[i] = b
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 12 || got.Load() != 2 {
		t.Fatalf("%d newcomers got a permit, %d in flight at the peak; want 2 and at most 12", got.Load(), p)
	}
	if b, _ := r.Bulkhead("db"); b != old {
		t.Error("the reload replaced the bulkhead")
	}
	for range 10 {
		old.Release() // the first holders give back into the bulkhead they took from
	}
	for _, b := range held {
		if b != nil {
			b.Release()
		}
	}
	if s := old.Snapshot(); s.Active != 0 || s.MaxConcurrent != 12 {
		t.Fatalf("after every release: %+v", s)
	}
}

// Issue 23: a reload that changes an open breaker's open_duration keeps it
// open: it rejects, and goes half-open at the new open duration counted
// from when it opened. (Before, the reload replaced it with a closed
// breaker, and the failing dependency was called again at once.)
func TestReloadKeepsBreakerOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const v1 = "breakers:\n  pay: {window_size: 2, min_calls: 2, open_duration: 10s, open_jitter: 0}\n"
		r := newReg(t, v1, Options{})
		b, _ := r.Breaker("pay")
		opened := time.Now()
		for range 2 {
			if p, err := b.Allow(); err == nil {
				p.Record(t.Context(), errors.New("down"))
			}
		}
		if b.State() != circuit.Open {
			t.Fatalf("state %v, want open", b.State())
		}
		time.Sleep(2 * time.Second)
		if _, err := r.Reload(mustParse(t, strings.Replace(v1, "10s", "30s", 1))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30*time.Second - time.Since(opened) - time.Nanosecond)
		synctest.Wait()
		nb, _ := r.Breaker("pay")
		if _, err := nb.Allow(); !errors.Is(err, circuit.ErrOpen) {
			t.Fatalf("Allow just before the new open time = %v, want ErrOpen", err)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if nb.State() != circuit.HalfOpen || nb != b {
			t.Fatalf("state %v at %v (same breaker: %v); want half-open at 30s", nb.State(), time.Since(opened), nb == b)
		}
		nb.Reset()
	})
}

// The keyed registries follow a reload: reconfigured in place (the same
// registry, its breakers keeping their state, new keys on the new
// configuration) when circuit.Registry can be; otherwise dropped, named in
// Changes.Rebuilt, and rebuilt on next use with the new configuration.
func TestReloadKeyedRegistries(t *testing.T) {
	const v1 = "breakers:\n  hosts: {min_calls: 5, window_size: 10}\nbulkheads:\n  hosts: {max_concurrent: 2}\n"
	r := newReg(t, v1, Options{})
	keyed, _ := r.CircuitRegistry("hosts")
	a, _ := keyed.Get("a")
	a.ForceOpen()
	bkeyed, _ := r.BulkheadRegistry("hosts")
	ba, _ := bkeyed.Get("a")
	if !ba.TryAcquire() {
		t.Fatal("TryAcquire failed")
	}
	v2 := strings.NewReplacer("min_calls: 5", "min_calls: 7", "max_concurrent: 2", "max_concurrent: 3").Replace(v1)
	ch, err := r.Reload(mustParse(t, v2))
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := r.CircuitRegistry("hosts")
	_, inPlace := any(keyed).(interface{ Reconfigure(circuit.Config) error })
	if inPlace {
		if k2 != keyed || slices.Contains(ch.Rebuilt, "breakers.hosts.keyed") {
			t.Errorf("keyed breakers rebuilt (%v) though circuit.Registry can be reconfigured", ch.Rebuilt)
		}
		if a2, _ := k2.Get("a"); a2 != a || a2.State() != circuit.ForcedOpen {
			t.Error("keyed breaker lost its state")
		}
	} else if k2 == keyed || !slices.Contains(ch.Rebuilt, "breakers.hosts.keyed") {
		t.Errorf("keyed breakers kept on the old configuration; rebuilt %q", ch.Rebuilt)
	}
	// Either way, a new key takes the new configuration: 6 failures of 6
	// calls do not open a breaker of min_calls 7.
	nb, _ := k2.Get("new")
	for range 6 {
		if p, err := nb.Allow(); err == nil {
			p.Record(t.Context(), errors.New("down"))
		}
	}
	if nb.State() != circuit.Closed {
		t.Errorf("new key's breaker %v after 6 failures: min_calls 7 not applied", nb.State())
	}
	b2, _ := r.BulkheadRegistry("hosts")
	_, bInPlace := any(bkeyed).(interface{ Reconfigure(bulkhead.Config) error })
	if bInPlace {
		if ba2, _ := b2.Get("a"); b2 != bkeyed || ba2 != ba || ba2.Snapshot().Active != 1 || ba2.Snapshot().MaxConcurrent != 3 {
			t.Error("keyed bulkhead not reconfigured in place")
		}
	} else if b2 == bkeyed || !slices.Contains(ch.Rebuilt, "bulkheads.hosts.keyed") {
		t.Errorf("keyed bulkheads kept on the old configuration; rebuilt %q", ch.Rebuilt)
	}
	if nbh, _ := b2.Get("new"); nbh.Snapshot().MaxConcurrent != 3 {
		t.Errorf("new key's bulkhead has %d permits, want 3", nbh.Snapshot().MaxConcurrent)
	}
	ba.Release()
	a.Reset()
	// A change of max_keys always makes a fresh keyed registry.
	ch, err = r.Reload(mustParse(t, strings.Replace(v2, "window_size: 10}", "window_size: 10, max_keys: 5}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if k3, _ := r.CircuitRegistry("hosts"); k3 == k2 || !slices.Contains(ch.Rebuilt, "breakers.hosts.keyed") {
		t.Errorf("max_keys changed: keyed registry kept; rebuilt %q", ch.Rebuilt)
	}
}

// A reload that changes a budget carries its balance over to the new one.
func TestReloadBudgetKeepsBalance(t *testing.T) {
	const v1 = "budgets:\n  shared: {ratio: 50%, max_tokens: 10, min_per_second: off}\n"
	r := newReg(t, v1, Options{})
	b, _ := r.Budget("shared")
	for range 8 {
		b.Deposit() // 4 tokens
	}
	if _, err := r.Reload(mustParse(t, strings.Replace(v1, "50%", "20%", 1))); err != nil {
		t.Fatal(err)
	}
	nb, _ := r.Budget("shared")
	if nb == b || nb.Snapshot().Balance != 4 {
		t.Fatalf("new budget balance %v, want the 4 tokens carried over", nb.Snapshot().Balance)
	}
}

// An invalid change leaves every instance as it was: nothing is
// reconfigured before the whole file is known to be valid.
func TestReloadRefusedReconfiguresNothing(t *testing.T) {
	const v1 = "bulkheads:\n  a: {max_concurrent: 2}\n"
	r := newReg(t, v1, Options{Bulkhead: func(name string, c *bulkhead.Config) {
		if name == "b" {
			c.MaxConcurrent = -1 // refused by bulkhead.New
		}
	}})
	a, _ := r.Bulkhead("a")
	if _, err := r.Reload(mustParse(t, "bulkheads:\n  a: {max_concurrent: 5}\n  b: {}\n")); err == nil {
		t.Fatal("Reload with an invalid bulkhead: no error")
	}
	if s := a.Snapshot(); s.MaxConcurrent != 2 {
		t.Fatalf("a refused reload reconfigured a to %d", s.MaxConcurrent)
	}
}

// The trip rules in a file: off keywords, open_duration 0 as a real zero
// (circuit's negative), and all of it read back from what Write writes.
func TestTripRulesInFile(t *testing.T) {
	f := mustParse(t, "breakers:\n"+
		"  streak: {consecutive_failures: 5, failure_rate_threshold: off, half_open_calls: 3, half_open_successes: 3, open_duration: 0s}\n"+
		"  count: {window_size: 5, min_calls: 5, failure_count_threshold: 3, half_open_successes: off}\n"+
		"  dflt: {}\n")
	check := func(f *File, when string) {
		t.Helper()
		s, c, d := f.Breakers["streak"].Config, f.Breakers["count"].Config, f.Breakers["dflt"].Config
		if s.ConsecutiveFailures != 5 || s.FailureRateThreshold != -1 || s.HalfOpenSuccesses != 3 || s.OpenDuration != -1 {
			t.Errorf("%s: streak %+v", when, s)
		}
		if c.FailureCountThreshold != 3 || c.HalfOpenSuccesses != 0 || c.FailureRateThreshold != circuit.DefaultFailureRateThreshold {
			t.Errorf("%s: count %+v", when, c)
		}
		if d.ConsecutiveFailures != 0 || d.FailureCountThreshold != 0 || d.HalfOpenSuccesses != 0 || d.OpenDuration != circuit.DefaultOpenDuration {
			t.Errorf("%s: dflt %+v", when, d)
		}
	}
	check(f, "parsed")
	var sb strings.Builder
	if err := f.Write(&sb); err != nil {
		t.Fatal(err)
	}
	check(mustParse(t, sb.String()), "written and read back")
	// The breaker the file builds trips on the streak alone and goes
	// straight to half-open.
	b, err := circuit.New(f.Breakers["streak"].Config)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		p, _ := b.Allow()
		p.Done(watertight.Failure)
	}
	if b.State() != circuit.HalfOpen {
		t.Errorf("after 5 failures: %v, want half-open (open_duration 0)", b.State())
	}
}

// open_jitter: 0 in a file is no jitter (circuit's negative), and the
// field left out is circuit's default.
func TestOpenJitterInFile(t *testing.T) {
	f := mustParse(t, "breakers:\n  none: {open_jitter: 0}\n  dflt: {}\n  some: {open_jitter: 20%}\n")
	for name, want := range map[string]float64{"none": -1, "dflt": circuit.DefaultOpenJitter, "some": 0.2} {
		if got := f.Breakers[name].Config.OpenJitter; got != want {
			t.Errorf("%s: OpenJitter %v, want %v", name, got, want)
		}
	}
	var sb strings.Builder
	if err := f.Write(&sb); err != nil {
		t.Fatal(err)
	}
	g := mustParse(t, sb.String())
	if got := g.Breakers["none"].Config.OpenJitter; got != -1 {
		t.Errorf("written and read back: OpenJitter %v, want -1\n%s", got, sb.String())
	}
}
