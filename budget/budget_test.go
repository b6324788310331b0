package budget_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"pgregory.net/rapid"
)

func mustNew(t testing.TB, cfg budget.Config) *budget.Budget {
	t.Helper()
	b, err := budget.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// noFloor is a config whose only source of retries is the ratio balance.
func noFloor(ratio float64, maxTokens int) budget.Config {
	return budget.Config{Ratio: ratio, MaxTokens: maxTokens, MinPerSecond: -1}
}

func TestConfigDefaults(t *testing.T) {
	b := mustNew(t, budget.Config{})
	if got, want := b.Config(), budget.DefaultConfig(); got != want {
		t.Errorf("Config() = %+v, want %+v", got, want)
	}
	if want := (budget.Config{Ratio: 0.1, MaxTokens: 10, MinPerSecond: 10}); budget.DefaultConfig() != want {
		t.Errorf("DefaultConfig() = %+v, want %+v", budget.DefaultConfig(), want)
	}
	// A negative MinPerSecond stays negative: no floor.
	if got := mustNew(t, noFloor(0.5, 3)).Config(); got.MinPerSecond != -1 || got.Ratio != 0.5 || got.MaxTokens != 3 {
		t.Errorf("Config() = %+v", got)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg   budget.Config
		field string
	}{
		{budget.Config{Ratio: -0.1}, "Config.Ratio"},
		{budget.Config{Ratio: 1.5}, "Config.Ratio"},
		{budget.Config{Ratio: 1e-9}, "Config.Ratio"},
		{budget.Config{Ratio: math.NaN()}, "Config.Ratio"},
		{budget.Config{Ratio: math.Inf(1)}, "Config.Ratio"},
		{budget.Config{MaxTokens: -1}, "Config.MaxTokens"},
		{budget.Config{MaxTokens: budget.MaxMaxTokens + 1}, "Config.MaxTokens"},
		{budget.Config{MinPerSecond: 2e9}, "Config.MinPerSecond"},
		{budget.Config{MinPerSecond: math.NaN()}, "Config.MinPerSecond"},
		{budget.Config{MinPerSecond: math.Inf(1)}, "Config.MinPerSecond"},
	} {
		b, err := budget.New(tc.cfg)
		if err == nil || b != nil {
			t.Errorf("New(%+v) = %v, %v; want an error", tc.cfg, b, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "budget: "+tc.field+" ") {
			t.Errorf("New(%+v) error %q does not name %s", tc.cfg, err, tc.field)
		}
	}
	// The edges are valid.
	for _, cfg := range []budget.Config{
		{Ratio: 1}, {Ratio: budget.MinRatio, MaxTokens: budget.MaxMaxTokens},
		{MaxTokens: 1}, {MinPerSecond: budget.MaxMinPerSecond}, {MinPerSecond: 0.001},
		{MinPerSecond: math.Inf(-1)},
	} {
		if _, err := budget.New(cfg); err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

func TestErrExhausted(t *testing.T) {
	if !watertight.IsRejection(fmt.Errorf("call: %w", budget.ErrExhausted)) {
		t.Error("ErrExhausted, wrapped, is not a rejection")
	}
	if got := budget.ErrExhausted.Error(); got != "budget: exhausted" {
		t.Errorf("ErrExhausted = %q", got)
	}
}

func TestNilBudgetIsDisabled(t *testing.T) {
	var b *budget.Budget
	b.Deposit()
	for range 1000 {
		if !b.Withdraw() {
			t.Fatal("nil Budget refused a retry")
		}
	}
	if s := b.Snapshot(); s != (budget.Snapshot{}) {
		t.Errorf("nil Snapshot = %+v", s)
	}
	if c := b.Config(); c != (budget.Config{}) {
		t.Errorf("nil Config = %+v", c)
	}
}

// Ten deposits at 10% make one token; the budget starts empty.
func TestRatio(t *testing.T) {
	for _, ratio := range []float64{0.1, 0.2, 0.25, 0.5, 1} {
		b := mustNew(t, noFloor(ratio, 10))
		if b.Withdraw() {
			t.Fatalf("ratio %v: an empty budget granted a retry", ratio)
		}
		per := int(math.Round(1 / ratio))
		for i := range per {
			if i > 0 && b.Withdraw() {
				t.Fatalf("ratio %v: granted after %d deposits", ratio, i)
			}
			b.Deposit()
		}
		if !b.Withdraw() {
			t.Fatalf("ratio %v: refused after %d deposits", ratio, per)
		}
		if b.Withdraw() {
			t.Fatalf("ratio %v: granted twice", ratio)
		}
		s := b.Snapshot()
		want := budget.Snapshot{Deposits: uint64(per), Withdrawals: 1, Refused: uint64(per) + 1}
		if s != want {
			t.Errorf("ratio %v: Snapshot %+v, want %+v", ratio, s, want)
		}
	}
}

// A ratio that is not exact in fixed point rounds down, never up.
func TestRatioRoundsDown(t *testing.T) {
	const ratio = 1.0 / 3
	b := mustNew(t, noFloor(ratio, budget.MaxMaxTokens))
	const n = 300_000
	for range n {
		b.Deposit()
	}
	got := 0
	for b.Withdraw() {
		got++
	}
	if max := ratio * n; float64(got) > max || float64(got) < 0.999*max {
		t.Errorf("granted %d after %d deposits at 1/3, want in [%.0f, %.0f]", got, n, 0.999*max, max)
	}
}

// The balance never holds more than MaxTokens, however many deposits came
// before, and the excess it discards does not count as withdrawals.
func TestCap(t *testing.T) {
	b := mustNew(t, noFloor(0.1, 10))
	for range 10_000 {
		b.Deposit()
	}
	if s := b.Snapshot(); s.Balance != 10 || s.Deposits != 10_000 {
		t.Errorf("Snapshot %+v, want balance 10 after 10000 deposits", s)
	}
	granted := 0
	for b.Withdraw() {
		granted++
	}
	if granted != 10 {
		t.Errorf("granted %d, want MaxTokens = 10", granted)
	}
	// Again: 100 tokens deposited, capped to 10 at the withdrawal that
	// leaves 9; 2.5 more make 11.5, capped to 10 again, all withdrawn.
	for range 1000 {
		b.Deposit()
	}
	if !b.Withdraw() {
		t.Fatal("refused")
	}
	granted++
	if s := b.Snapshot(); s.Balance != 9 {
		t.Errorf("balance %v, want 9", s.Balance)
	}
	for range 25 {
		b.Deposit()
	}
	for b.Withdraw() {
		granted++
	}
	if granted != 10+1+10 {
		t.Errorf("granted %d in all, want 21", granted)
	}
	want := budget.Snapshot{Deposits: 11_025, Withdrawals: 21, Refused: 2, Balance: 0}
	if s := b.Snapshot(); s != want {
		t.Errorf("Snapshot %+v, want %+v", s, want)
	}
}

// The floor grants MinPerSecond retries per second with no deposits, from a
// bucket that starts full and holds one second's worth.
func TestFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, budget.Config{MinPerSecond: 10})
		drain := func() (n int) {
			for b.Withdraw() {
				n++
			}
			return n
		}
		if n := drain(); n != 10 {
			t.Errorf("a new budget's floor granted %d, want 10", n)
		}
		time.Sleep(99 * time.Millisecond)
		if n := drain(); n != 0 {
			t.Errorf("after 99ms: granted %d, want 0", n)
		}
		time.Sleep(time.Millisecond)
		if n := drain(); n != 1 {
			t.Errorf("after 100ms: granted %d, want 1", n)
		}
		time.Sleep(time.Hour)
		if n := drain(); n != 10 {
			t.Errorf("after an hour: granted %d, want the cap, 10", n)
		}
		// Asking every millisecond for ten seconds: 10 per second.
		n := 0
		for range 10_000 {
			time.Sleep(time.Millisecond)
			n += drain()
		}
		if n != 100 {
			t.Errorf("in 10s: granted %d, want 100", n)
		}
	})
}

// A floor below one per second still holds one token.
func TestFloorBelowOnePerSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, budget.Config{MinPerSecond: 0.5})
		if !b.Withdraw() || b.Withdraw() {
			t.Fatal("want exactly one token at first")
		}
		time.Sleep(1999 * time.Millisecond)
		if b.Withdraw() {
			t.Fatal("granted before 2s")
		}
		time.Sleep(time.Millisecond)
		if !b.Withdraw() {
			t.Fatal("refused after 2s")
		}
	})
}

// The ratio balance is spent first: the floor is left for when it is empty.
func TestFloorIsUsedLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, budget.Config{Ratio: 0.5, MaxTokens: 5, MinPerSecond: 3})
		for range 10 {
			b.Deposit()
		}
		n := 0
		for b.Withdraw() {
			n++
		}
		if n != 5+3 {
			t.Errorf("granted %d, want 5 from the balance and 3 from the floor", n)
		}
		if s := b.Snapshot(); s.Withdrawals != 8 || s.Refused != 1 || s.Balance != 0 {
			t.Errorf("Snapshot %+v", s)
		}
	})
}

// A dependency that is completely down: every request fails and asks for a
// retry. With the floor off, retries stay at 10% of the requests (the load
// is 1.1 times normal), plus the MaxTokens a healthy stretch could have saved.
func TestSustainedFailure(t *testing.T) {
	const requests = 100_000
	for _, attempts := range []int{2, 3, 10} {
		b := mustNew(t, noFloor(0.1, 10))
		retries := 0
		for range requests {
			b.Deposit()
			// The call and its retries all fail; each failure asks again,
			// up to the attempt limit.
			for a := 1; a < attempts; a++ {
				if !b.Withdraw() {
					break
				}
				retries++
			}
		}
		share := float64(retries) / requests
		if share < 0.09 || share > 0.11+10.0/requests {
			t.Errorf("%d attempts: %d retries for %d requests (%.4f), want within [0.09, 0.11]", attempts, retries, requests, share)
		}
	}
}

// Deposits and withdrawals from 8 goroutines: the granted retries never
// exceed Ratio of the deposits plus the cap, and every count is exact.
func TestConcurrentAccounting(t *testing.T) {
	const goroutines, perG = 8, 20_000
	b := mustNew(t, noFloor(0.1, 10))
	var granted, refused atomic.Uint64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				b.Deposit()
				if (i+g)%3 == 0 { // some goroutines ask more often than others
					continue
				}
				if b.Withdraw() {
					granted.Add(1)
				} else {
					refused.Add(1)
				}
				if i%1000 == 0 {
					b.Snapshot() // concurrent readers too
				}
			}
		})
	}
	wg.Wait()
	deposits := uint64(goroutines * perG)
	if max := deposits/10 + 10; granted.Load() > max {
		t.Errorf("granted %d retries for %d deposits, more than %d", granted.Load(), deposits, max)
	}
	s := b.Snapshot()
	if s.Deposits != deposits || s.Withdrawals != granted.Load() || s.Refused != refused.Load() {
		t.Errorf("Snapshot %+v; want %d deposits, %d withdrawals, %d refused", s, deposits, granted.Load(), refused.Load())
	}
	// What was granted and what is left add up to the deposits exactly
	// when the cap never binds.
	big := mustNew(t, noFloor(0.1, budget.MaxMaxTokens))
	granted.Store(0)
	for range goroutines {
		wg.Go(func() {
			for i := range perG {
				big.Deposit()
				if i%7 == 0 && big.Withdraw() {
					granted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	s = big.Snapshot()
	if got := float64(granted.Load()) + s.Balance; got != float64(deposits)/10 {
		t.Errorf("granted %d + balance %v = %v, want %v", granted.Load(), s.Balance, got, float64(deposits)/10)
	}
	if s.Withdrawals != granted.Load() {
		t.Errorf("Snapshot.Withdrawals %d, want %d", s.Withdrawals, granted.Load())
	}
}

// workOp is one step of a random workload.
type workOp struct {
	kind    int           // 0: deposits, 1: withdrawals, 2: time passes
	count   int           // deposits or withdrawals
	advance time.Duration // for kind 2
}

// step is what happened at one op, for the bound check.
type step struct {
	at       time.Duration
	deposits int
	granted  int
}

// TestBudgetBound is the budget's contract: over ANY contiguous stretch of a
// random workload of deposits, withdrawals and clock advances, the retries
// granted are at most
//
//	Ratio·deposits + MaxTokens + MinPerSecond·seconds + max(1, MinPerSecond)
//
// (the last two terms only with a floor). Along the way the ratio balance
// matches a plain fixed-point model exactly: a withdrawal is granted whenever
// the model holds a token, and, without a floor, only then. rapid draws each
// workload outside the synctest bubble (rapid cannot run inside one) and
// shrinks any failure.
func TestBudgetBound(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 2
	}
	for range rounds {
		checkBudgetBound(t)
	}
}

func checkBudgetBound(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := budget.Config{
			Ratio:        rapid.SampledFrom([]float64{0.05, 0.1, 0.3, 1.0 / 3, 0.5, 1}).Draw(rt, "ratio"),
			MaxTokens:    rapid.IntRange(1, 20).Draw(rt, "maxTokens"),
			MinPerSecond: rapid.SampledFrom([]float64{-1, 0.5, 1, 3, 10}).Draw(rt, "minPerSecond"),
		}
		ops := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) workOp {
			return workOp{
				kind:  rapid.IntRange(0, 2).Draw(rt, "kind"),
				count: rapid.IntRange(1, 30).Draw(rt, "count"),
				// Mostly short advances, which let a floor refill a token
				// at a time, and some long ones.
				advance: time.Duration(rapid.OneOf(
					rapid.IntRange(0, 150),
					rapid.IntRange(0, 3000),
				).Draw(rt, "advanceMs")) * time.Millisecond,
			}
		}), 1, 200).Draw(rt, "ops")
		var err error
		synctest.Test(t, func(*testing.T) { err = runWorkload(cfg, ops) })
		if err != nil {
			rt.Fatal(err)
		}
	})
}

func runWorkload(cfg budget.Config, ops []workOp) error {
	b, err := budget.New(cfg)
	if err != nil {
		return err
	}
	// The model: the ratio balance in the same fixed point (1000 units per
	// deposit, ceil(1000/Ratio) per token), capped when withdrawn from.
	unit := int64(math.Ceil(1000 / cfg.Ratio))
	capUnits := int64(cfg.MaxTokens) * unit
	var bal int64
	var deposits, granted, refused uint64

	start := time.Now()
	steps := make([]step, len(ops))
	for i, op := range ops {
		steps[i].at = time.Since(start)
		switch op.kind {
		case 0:
			for range op.count {
				b.Deposit()
				bal += 1000
			}
			deposits += uint64(op.count)
			steps[i].deposits = op.count
		case 1:
			for range op.count {
				bal = min(bal, capUnits)
				fromRatio := bal >= unit
				got := b.Withdraw()
				switch {
				case fromRatio && !got:
					return fmt.Errorf("op %d: refused with %d/%d units in the model", i, bal, unit)
				case fromRatio:
					bal -= unit
				case got && cfg.MinPerSecond < 0:
					return fmt.Errorf("op %d: granted with %d/%d units in the model and no floor", i, bal, unit)
				}
				if got {
					granted++
					steps[i].granted++
				} else {
					refused++
				}
			}
		case 2:
			time.Sleep(op.advance)
		}
		s := b.Snapshot()
		want := budget.Snapshot{Deposits: deposits, Withdrawals: granted, Refused: refused,
			Balance: float64(min(bal, capUnits)) / float64(unit)}
		if s != want {
			return fmt.Errorf("op %d: Snapshot %+v, model %+v", i, s, want)
		}
	}

	// Every stretch [i, j], with prefix sums.
	floorRate, floorCap := 0.0, 0.0
	if cfg.MinPerSecond > 0 {
		floorRate, floorCap = cfg.MinPerSecond, max(1, cfg.MinPerSecond)
	}
	for i := range steps {
		d, g := 0, 0
		for j := i; j < len(steps); j++ {
			d += steps[j].deposits
			g += steps[j].granted
			secs := (steps[j].at - steps[i].at).Seconds()
			bound := cfg.Ratio*float64(d) + float64(cfg.MaxTokens) + floorRate*secs + floorCap
			if float64(g) > bound+1e-9 {
				return fmt.Errorf("ops %d..%d: %d retries granted over %d deposits and %.3fs, bound %.3f", i, j, g, d, secs, bound)
			}
		}
	}
	return nil
}

// recorder is a Listener that keeps the events it receives.
type recorder struct {
	mu  sync.Mutex
	evs []watertight.Event
}

func (r *recorder) OnEvent(e watertight.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *recorder) take() []watertight.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.evs
	r.evs = nil
	return evs
}

func TestBudgetEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := noFloor(0.5, 1)
		cfg.Name, cfg.Listener = "payments", rec
		b := mustNew(t, cfg)
		b.Deposit()
		b.Deposit()
		start := time.Now()
		if !b.Withdraw() { // the one token two deposits made
			t.Fatal("refused a retry it had a token for")
		}
		if evs := rec.take(); len(evs) != 0 {
			t.Fatalf("a granted retry sent %v", evs)
		}
		time.Sleep(time.Second)
		if b.Withdraw() || b.Withdraw() {
			t.Fatal("granted a retry without a token")
		}
		evs := rec.take()
		if len(evs) != 2 {
			t.Fatalf("events %v, want two refusals", evs)
		}
		for _, e := range evs {
			if e.Kind != watertight.EventBudgetExhausted || e.Source != "budget" || e.Name != "payments" || e.Err != budget.ErrExhausted || e.Reason == "" || !e.Time.Equal(start.Add(time.Second)) {
				t.Errorf("event %+v", e)
			}
		}
		if s := b.Snapshot(); s.Refused != 2 {
			t.Fatalf("Refused %d", s.Refused)
		}
	})
}

// A listener may call back into the budget: refusals are not reported
// under its lock.
func TestBudgetListenerMayCallBackIn(t *testing.T) {
	var b *budget.Budget
	depth, n := 0, 0
	cfg := noFloor(1, 1)
	cfg.Listener = watertight.ListenerFunc(func(watertight.Event) {
		depth++
		defer func() { depth-- }()
		n++
		_ = b.Snapshot() // takes the budget's mutex
		if depth == 1 {
			b.Deposit()
			if !b.Withdraw() {
				t.Error("a token deposited from the listener was refused")
			}
			_ = b.Withdraw() // refused again, within the event
		}
	})
	b = mustNew(t, cfg)
	if b.Withdraw() {
		t.Fatal("granted from an empty balance")
	}
	if n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
}

func TestBudgetListenerAllocs(t *testing.T) {
	n := 0
	cfg := noFloor(0.1, 1)
	cfg.Listener = watertight.ListenerFunc(func(watertight.Event) { n++ })
	b := mustNew(t, cfg)
	if a := testing.AllocsPerRun(100, func() { b.Deposit(); _ = b.Withdraw() }); a != 0 {
		t.Fatalf("%v allocs per refused withdrawal with a listener", a)
	}
	if n < 90 {
		t.Fatalf("%d events", n)
	}
}

// sink keeps deepen's padding alive.
var sink atomic.Int64

// deepen calls f n frames further down the stack, each frame with 512
// bytes of its own, so that calls made at different depths are made from
// different 2 KiB blocks of the stack, which the budget may map to
// different cells.
//
//go:noinline
func deepen(n int, f func()) {
	var pad [512]byte
	pad[n&511] = byte(n)
	if n > 0 {
		deepen(n-1, f)
	} else {
		f()
	}
	sink.Add(int64(pad[(n*7)&511]))
}

// The striped balance is invisible to one goroutine: with deposits and
// withdrawals made from random call depths (so from cells that change from
// call to call, as when a goroutine's stack moves), the budget matches the
// plain fixed-point model exactly, withdrawal by withdrawal.
func TestCallDepthsDoNotMatter(t *testing.T) {
	for _, cfg := range []budget.Config{noFloor(0.5, 10), noFloor(0.1, 20), noFloor(1, 3), noFloor(1.0/3, 8)} {
		b := mustNew(t, cfg)
		rng := rand.New(rand.NewPCG(1, uint64(cfg.MaxTokens)))
		unit := int64(math.Ceil(1000 / cfg.Ratio))
		capUnits := int64(cfg.MaxTokens) * unit
		var bal int64
		var deposits, granted uint64
		for i := range 5000 {
			// Runs of deposits and of withdrawals, so that the balance
			// goes from empty to full and back.
			deposit := (i/200)%2 == 0 && rng.IntN(10) < 9 || (i/200)%2 == 1 && rng.IntN(10) < 2
			deepen(rng.IntN(24), func() {
				if deposit {
					b.Deposit()
					bal = min(bal+1000, capUnits)
					deposits++
					return
				}
				want := bal >= unit
				if got := b.Withdraw(); got != want {
					t.Fatalf("%+v, call %d: Withdraw = %v with %d units in the model", cfg, i, got, bal)
				}
				if want {
					bal -= unit
					granted++
				}
			})
			want := budget.Snapshot{Deposits: deposits, Withdrawals: granted, Refused: uint64(i+1) - deposits - granted,
				Balance: float64(bal) / float64(unit)}
			if s := b.Snapshot(); s != want {
				t.Fatalf("%+v, call %d: Snapshot %+v, model %+v", cfg, i, s, want)
			}
		}
		if granted < 50 || deposits < 1000 {
			t.Errorf("%+v: %d deposits, %d granted: the workload did not exercise the budget", cfg, deposits, granted)
		}
	}
}

// A healthy balance under a retry storm from several goroutines, each
// making a request and a retry (the bench module's BenchmarkBudget): with
// Ratio 1, every retry has the token its own request deposited, and is
// granted, from the ratio balance alone.
func TestConcurrentRequestAndRetry(t *testing.T) {
	b := mustNew(t, noFloor(1, 10))
	for range 100 {
		b.Deposit()
	}
	const goroutines, perG = 4, 20_000
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range perG {
				b.Deposit()
				if !b.Withdraw() {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	s := b.Snapshot()
	if refused.Load() != 0 || s.Withdrawals != goroutines*perG || s.Deposits != 100+goroutines*perG {
		t.Errorf("%d refused; Snapshot %+v", refused.Load(), s)
	}
	if s.Balance > 10 {
		t.Errorf("balance %v, above the cap", s.Balance)
	}
}

// NewFrom starts with the old budget's balance, capped at the new
// MaxTokens; the old one is left as it was.
func TestNewFromCarriesBalance(t *testing.T) {
	old, err := budget.New(budget.Config{Ratio: 0.5, MaxTokens: 10, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	for range 8 { // 8 deposits at 0.5: 4 tokens
		old.Deposit()
	}
	for _, tc := range []struct {
		cfg  budget.Config
		want float64
	}{
		{budget.Config{Ratio: 0.1, MaxTokens: 10, MinPerSecond: -1}, 4}, // another ratio: the balance kept
		{budget.Config{Ratio: 0.5, MaxTokens: 3, MinPerSecond: -1}, 3},  // capped
		{budget.Config{Ratio: 0.5, MaxTokens: 20, MinPerSecond: 5}, 4},
	} {
		b, err := budget.NewFrom(tc.cfg, old)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Snapshot().Balance; got != tc.want {
			t.Errorf("%+v: balance %v, want %v", tc.cfg, got, tc.want)
		}
		n := 0
		for b.Withdraw() && n < 100 {
			n++
		}
		if tc.cfg.MinPerSecond < 0 && float64(n) != tc.want {
			t.Errorf("%+v: %d withdrawals, want %v", tc.cfg, n, tc.want)
		}
		if s := b.Snapshot(); s.Deposits != 0 {
			t.Errorf("Deposits %d, want 0: the counters start anew", s.Deposits)
		}
	}
	if got := old.Snapshot().Balance; got != 4 {
		t.Errorf("old balance %v, want 4 (untouched)", got)
	}
	if b, err := budget.NewFrom(budget.Config{}, nil); err != nil || b.Snapshot().Balance != 0 {
		t.Errorf("NewFrom(nil) = %v, %v; want an empty budget", b, err)
	}
	if _, err := budget.NewFrom(budget.Config{Ratio: 2}, old); err == nil {
		t.Error("NewFrom with an invalid Config: no error")
	}
}
