package budget_test

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"pgregory.net/rapid"
)

func mustConcurrency(t testing.TB, cfg budget.ConcurrencyConfig) *budget.Concurrency {
	t.Helper()
	c, err := budget.NewConcurrency(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConcurrencyConfigDefaults(t *testing.T) {
	c := mustConcurrency(t, budget.ConcurrencyConfig{})
	if got, want := c.Config(), budget.DefaultConcurrencyConfig(); got != want {
		t.Errorf("Config() = %+v, want %+v", got, want)
	}
	if want := (budget.ConcurrencyConfig{Percent: 20, MinConcurrency: 3}); budget.DefaultConcurrencyConfig() != want {
		t.Errorf("DefaultConcurrencyConfig() = %+v, want %+v", budget.DefaultConcurrencyConfig(), want)
	}
	// Negative stays negative: off.
	if got := mustConcurrency(t, budget.ConcurrencyConfig{Percent: -1, MinConcurrency: 5}).Config(); got.Percent != -1 || got.MinConcurrency != 5 {
		t.Errorf("Config() = %+v", got)
	}
	if got := mustConcurrency(t, budget.ConcurrencyConfig{Percent: 50, MinConcurrency: -1}).Config(); got.Percent != 50 || got.MinConcurrency != -1 {
		t.Errorf("Config() = %+v", got)
	}
}

func TestConcurrencyConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg   budget.ConcurrencyConfig
		field string
	}{
		{budget.ConcurrencyConfig{Percent: 100.5}, "ConcurrencyConfig.Percent"},
		{budget.ConcurrencyConfig{Percent: 1e-5}, "ConcurrencyConfig.Percent"},
		{budget.ConcurrencyConfig{Percent: math.NaN()}, "ConcurrencyConfig.Percent"},
		{budget.ConcurrencyConfig{Percent: math.Inf(1)}, "ConcurrencyConfig.Percent"},
		{budget.ConcurrencyConfig{MinConcurrency: budget.MaxMinConcurrency + 1}, "ConcurrencyConfig.MinConcurrency"},
		{budget.ConcurrencyConfig{Percent: -1, MinConcurrency: -1}, "ConcurrencyConfig.MinConcurrency"},
	} {
		c, err := budget.NewConcurrency(tc.cfg)
		if err == nil || c != nil {
			t.Errorf("NewConcurrency(%+v) = %v, %v; want an error", tc.cfg, c, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "budget: "+tc.field+" ") {
			t.Errorf("NewConcurrency(%+v) error %q does not name %s", tc.cfg, err, tc.field)
		}
	}
	// The edges are valid.
	for _, cfg := range []budget.ConcurrencyConfig{
		{Percent: 100}, {Percent: 0.0001}, {Percent: math.Inf(-1)},
		{MinConcurrency: budget.MaxMinConcurrency}, {MinConcurrency: -1},
	} {
		if _, err := budget.NewConcurrency(cfg); err != nil {
			t.Errorf("NewConcurrency(%+v): %v", cfg, err)
		}
	}
}

func TestNilConcurrencyIsDisabled(t *testing.T) {
	var c *budget.Concurrency
	c.Enter()
	for range 1000 {
		if !c.TryAcquire() {
			t.Fatal("nil Concurrency refused a retry")
		}
	}
	c.Release()
	c.Leave()
	if s := c.Snapshot(); s != (budget.ConcurrencySnapshot{}) {
		t.Errorf("nil Snapshot = %+v", s)
	}
	if cfg := c.Config(); cfg != (budget.ConcurrencyConfig{}) {
		t.Errorf("nil Config = %+v", cfg)
	}
}

// acquireAll takes slots until refused and returns how many it took.
func acquireAll(c *budget.Concurrency) int {
	n := 0
	for c.TryAcquire() {
		n++
	}
	return n
}

// The limit is Envoy's: max(MinConcurrency, Percent% of the active
// requests, rounded down).
func TestConcurrencyLimit(t *testing.T) {
	for _, tc := range []struct {
		cfg    budget.ConcurrencyConfig
		active int
		want   int
	}{
		{budget.ConcurrencyConfig{}, 0, 3},               // the floor
		{budget.ConcurrencyConfig{}, 15, 3},              // 20% of 15 is 3
		{budget.ConcurrencyConfig{}, 24, 4},              // 4.8, rounded down
		{budget.ConcurrencyConfig{}, 100, 20},            // 20%
		{budget.ConcurrencyConfig{}, 1000, 200},          //
		{budget.ConcurrencyConfig{Percent: 29}, 100, 29}, // 0.29·100 is 28.999… in float64
		{budget.ConcurrencyConfig{Percent: 12.5, MinConcurrency: -1}, 7, 0},
		{budget.ConcurrencyConfig{Percent: 12.5, MinConcurrency: -1}, 8, 1},
		{budget.ConcurrencyConfig{Percent: -1, MinConcurrency: 2}, 1000, 2}, // a fixed cap
		{budget.ConcurrencyConfig{Percent: 100, MinConcurrency: -1}, 5, 5},
	} {
		c := mustConcurrency(t, tc.cfg)
		for range tc.active {
			c.Enter()
		}
		if got := acquireAll(c); got != tc.want {
			t.Errorf("%+v with %d active: %d retries in flight, want %d", tc.cfg, tc.active, got, tc.want)
		}
		s := c.Snapshot()
		if s.Active != int64(tc.active) || s.InFlight != int64(tc.want) || s.Limit != int64(tc.want) || s.Granted != uint64(tc.want) || s.Refused != 1 {
			t.Errorf("%+v with %d active: Snapshot %+v", tc.cfg, tc.active, s)
		}
	}
}

// A released slot can be taken again; slots are not taken back when
// requests leave, but no new one is granted until the count is under the
// limit again.
func TestConcurrencyRelease(t *testing.T) {
	c := mustConcurrency(t, budget.ConcurrencyConfig{Percent: 50, MinConcurrency: 1})
	for range 4 {
		c.Enter()
	}
	if got := acquireAll(c); got != 2 {
		t.Fatalf("%d slots with 4 active at 50%%, want 2", got)
	}
	c.Release()
	if !c.TryAcquire() || c.TryAcquire() {
		t.Fatal("a released slot was not granted again, or one more was")
	}
	for range 3 {
		c.Leave()
	}
	if s := c.Snapshot(); s.InFlight != 2 || s.Limit != 1 {
		t.Fatalf("after leaving: %+v, want 2 in flight over a limit of 1", s)
	}
	c.Release()
	if c.TryAcquire() {
		t.Fatal("granted at the limit")
	}
	c.Release()
	if !c.TryAcquire() {
		t.Fatal("refused under the limit")
	}
}

func TestConcurrencyReleaseWithoutSlotPanics(t *testing.T) {
	c := mustConcurrency(t, budget.ConcurrencyConfig{})
	defer func() {
		if recover() == nil {
			t.Fatal("Release without a slot did not panic")
		}
		if s := c.Snapshot(); s.InFlight != 0 {
			t.Errorf("InFlight %d after the panic, want 0", s.InFlight)
		}
	}()
	c.Release()
}

func TestConcurrencyEvents(t *testing.T) {
	rec := &recorder{}
	c := mustConcurrency(t, budget.ConcurrencyConfig{Name: "payments", Percent: -1, MinConcurrency: 1, Listener: rec})
	if !c.TryAcquire() {
		t.Fatal("refused under the floor")
	}
	if evs := rec.take(); len(evs) != 0 {
		t.Fatalf("a granted slot sent %v", evs)
	}
	if c.TryAcquire() || c.TryAcquire() {
		t.Fatal("granted over the limit")
	}
	evs := rec.take()
	if len(evs) != 2 {
		t.Fatalf("events %v, want two refusals", evs)
	}
	for _, e := range evs {
		if e.Kind != watertight.EventBudgetExhausted || e.Source != "budget" || e.Name != "payments" || e.Err != budget.ErrExhausted || e.Reason == "" {
			t.Errorf("event %+v", e)
		}
	}
}

// A listener may call back in: nothing is held while it runs.
func TestConcurrencyListenerMayCallBackIn(t *testing.T) {
	var c *budget.Concurrency
	n := 0
	c = mustConcurrency(t, budget.ConcurrencyConfig{Percent: -1, MinConcurrency: 1, Listener: watertight.ListenerFunc(func(watertight.Event) {
		n++
		c.Release() // frees the one slot
		if !c.TryAcquire() {
			t.Error("a slot freed from the listener was refused")
		}
	})})
	if !c.TryAcquire() || c.TryAcquire() {
		t.Fatal("want one slot granted, the second refused")
	}
	if n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

func TestConcurrencyAllocs(t *testing.T) {
	n := 0
	c := mustConcurrency(t, budget.ConcurrencyConfig{Percent: -1, MinConcurrency: 1, Listener: watertight.ListenerFunc(func(watertight.Event) { n++ })})
	a := testing.AllocsPerRun(100, func() {
		c.Enter()
		if c.TryAcquire() {
			_ = c.TryAcquire() // refused, with an event
			c.Release()
		}
		c.Leave()
	})
	if a != 0 {
		t.Fatalf("%v allocs per request, retry and refusal", a)
	}
	if n < 100 {
		t.Fatalf("%d events", n)
	}
}

// TestConcurrencyModel checks the budget against a reference model, over
// random configurations and random sequences of Enter, Leave, TryAcquire
// and Release: every grant and refusal is the model's (a slot is granted
// exactly when fewer than max(floor, percent·active) are held), nothing
// goes negative, and releasing and leaving everything returns to zero.
func TestConcurrencyModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Percent in hundredths of a percent (basis points), or off.
		bp := rapid.OneOf(rapid.Just(-1), rapid.IntRange(1, 10_000)).Draw(t, "basisPoints")
		floor := rapid.IntRange(-1, 10).Draw(t, "minConcurrency")
		if bp < 0 && floor < 0 {
			floor = 1
		}
		cfg := budget.ConcurrencyConfig{Percent: float64(bp) / 100, MinConcurrency: floor}
		if bp < 0 {
			cfg.Percent = -1
		}
		c, err := budget.NewConcurrency(cfg)
		if err != nil {
			t.Fatal(err)
		}
		modelFloor := floor
		switch {
		case floor == 0:
			modelFloor = 3
		case floor < 0:
			modelFloor = 0
		}
		limit := func(active int) int {
			if bp < 0 {
				return modelFloor
			}
			return max(modelFloor, active*bp/10_000)
		}
		var active, held, granted, refused int
		ops := rapid.SliceOfN(rapid.IntRange(0, 3), 1, 400).Draw(t, "ops")
		for i, op := range ops {
			switch {
			case op == 0:
				c.Enter()
				active++
			case op == 1 && active > 0:
				c.Leave()
				active--
			case op == 2:
				want := held < limit(active)
				if got := c.TryAcquire(); got != want {
					t.Fatalf("op %d: TryAcquire() = %v, model %v (%d held, %d active, limit %d)", i, got, want, held, active, limit(active))
				}
				if want {
					held++
					granted++
				} else {
					refused++
				}
			case op == 3 && held > 0:
				c.Release()
				held--
			}
			s := c.Snapshot()
			want := budget.ConcurrencySnapshot{Active: int64(active), InFlight: int64(held), Limit: int64(limit(active)), Granted: uint64(granted), Refused: uint64(refused)}
			if s != want {
				t.Fatalf("op %d: Snapshot %+v, model %+v", i, s, want)
			}
		}
		for ; held > 0; held-- {
			c.Release()
		}
		for ; active > 0; active-- {
			c.Leave()
		}
		if s := c.Snapshot(); s.Active != 0 || s.InFlight != 0 {
			t.Fatalf("after releasing and leaving everything: %+v", s)
		}
	})
}

// TestConcurrencyHammer runs requests and retries from many goroutines at
// once: each request enters, may take a slot, holds it for a moment and
// releases it, and leaves. The slots held at once never exceed the largest
// limit the active requests allow (at most every goroutine active), every
// TryAcquire is counted once, and everything returns to zero.
func TestConcurrencyHammer(t *testing.T) {
	const goroutines, perG = 16, 5_000
	c := mustConcurrency(t, budget.ConcurrencyConfig{Percent: 25, MinConcurrency: 2})
	maxLimit := int64(max(2, goroutines*25/100))
	var held, peak, tries atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := range perG {
				c.Enter()
				tries.Add(1)
				if c.TryAcquire() {
					h := held.Add(1)
					for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
					}
					if i%64 == 0 {
						_ = c.Snapshot() // concurrent readers too
					}
					held.Add(-1)
					c.Release()
				}
				c.Leave()
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > maxLimit {
		t.Errorf("%d slots held at once, more than the largest limit %d", p, maxLimit)
	}
	s := c.Snapshot()
	if s.Active != 0 || s.InFlight != 0 || s.Limit != 2 {
		t.Errorf("at the end: %+v, want nothing active or in flight", s)
	}
	if s.Granted+s.Refused != uint64(tries.Load()) || s.Granted == 0 {
		t.Errorf("Granted %d + Refused %d, want %d tries", s.Granted, s.Refused, tries.Load())
	}
}
