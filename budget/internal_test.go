package budget

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/watertight-go/watertight/internal/stripe"
	"pgregory.net/rapid"
)

// addrFor returns a stack-like address for which b picks cell i under its
// current seed: with it, a test can make deposits and withdrawals land in
// the cells it chooses.
func addrFor(t interface{ Fatalf(string, ...any) }, b *Budget, i int) uintptr {
	s := b.seed.Load()
	for a := uintptr(1) << 11; a < 1<<32; a += 1 << 11 {
		if b.index(a, s) == i {
			return a
		}
	}
	t.Fatalf("no address picks cell %d of %d", i, b.k)
	return 0
}

// ledger is where a budget's units are, and its counts.
type ledger struct {
	deposited uint64  // units deposited into the cells
	dropped   uint64  // deposits dropped whole
	grants    uint64  // tokens granted from the balance
	discarded uint64  // units discarded above the cap
	cells     []int64 // each cell's balance, in units
	pool      int64   // the pool's balance, in units
}

func (b *Budget) ledger() ledger {
	var l ledger
	for k := range b.k {
		c := &b.cells[k]
		l.deposited += c.d.Load()
		l.dropped += c.dropped.Load()
		l.grants += c.grants.Load()
		l.discarded += c.discarded.Load()
		l.cells = append(l.cells, c.balance())
	}
	l.pool = b.pool.Load()
	return l
}

func (l ledger) balance() int64 {
	s := l.pool
	for _, c := range l.cells {
		s += c
	}
	return s
}

// check verifies, at quiescence, that every unit deposited is granted,
// held or discarded, and that no place holds more than its cap.
func (b *Budget) check(l ledger) error {
	if got := l.grants*uint64(b.unit) + uint64(l.balance()) + l.discarded; got != l.deposited {
		return fmt.Errorf("granted %d×%d + balance %d + discarded %d = %d units, deposited %d",
			l.grants, b.unit, l.balance(), l.discarded, got, l.deposited)
	}
	for k, c := range l.cells {
		if c < 0 || c > b.unit {
			return fmt.Errorf("cell %d holds %d units, want [0, %d]", k, c, b.unit)
		}
	}
	if l.pool < 0 || l.pool > b.poolCap {
		return fmt.Errorf("pool holds %d units, want [0, %d]", l.pool, b.poolCap)
	}
	return nil
}

func TestCells(t *testing.T) {
	for _, tc := range []struct {
		maxTokens, k int
	}{{1, 1}, {2, 2}, {3, 2}, {4, 4}, {7, 4}, {8, 8}, {10, 8}, {MaxMaxTokens, 8}} {
		b, err := New(Config{Ratio: 0.5, MaxTokens: tc.maxTokens, MinPerSecond: -1})
		if err != nil {
			t.Fatal(err)
		}
		if b.k != tc.k || b.poolCap != b.capUnits-int64(tc.k)*b.unit {
			t.Errorf("MaxTokens %d: %d cells, pool cap %d; want %d cells and the rest of %d in the pool",
				tc.maxTokens, b.k, b.poolCap, tc.k, b.capUnits)
		}
		seen := map[int]bool{}
		for a := uintptr(1) << 11; a < 1<<24; a += 1 << 11 {
			seen[b.index(a, b.seed.Load())] = true
		}
		if len(seen) != tc.k {
			t.Errorf("MaxTokens %d: stack addresses pick %d cells, want %d", tc.maxTokens, len(seen), tc.k)
		}
	}
}

// A single goroutine saves up the full MaxTokens, whatever cells its calls
// land in, and withdraws all of it; deposits above the cap are discarded,
// and once everything is full they are dropped without touching the cells.
func TestFillAndDrain(t *testing.T) {
	b, err := New(Config{Ratio: 0.5, MaxTokens: 10, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	a0, a3 := addrFor(t, b, 0), addrFor(t, b, 3)
	for range 20 { // exactly the cap: 8 cells of one token, 2 in the pool
		b.deposit(a0)
	}
	l := b.ledger()
	if l.balance() != b.capUnits || l.pool != b.poolCap || l.discarded != 0 || b.full.Load() != 0 {
		t.Fatalf("after 20 deposits: %+v, full %d; want everything full, nothing discarded", l, b.full.Load())
	}
	// Above the cap: each search for room fails, and the deposit is
	// discarded; the failsToSetFull-th failure in a row sets the hint.
	for n := range failsToSetFull {
		if b.full.Load() != 0 {
			t.Fatalf("hint set after %d failed searches", n)
		}
		b.deposit(a3)
	}
	if l = b.ledger(); l.discarded != failsToSetFull*depositUnits || b.full.Load() == 0 {
		t.Fatalf("%d deposits above the cap: %+v, full %d; want them discarded and the hint set", failsToSetFull, l, b.full.Load())
	}
	for range 5 {
		b.deposit(a0)
	}
	if l = b.ledger(); l.dropped != 5 || l.deposited != (20+failsToSetFull)*depositUnits {
		t.Fatalf("five more: %+v; want them dropped", l)
	}
	if s := b.Snapshot(); s.Deposits != 20+failsToSetFull+5 || s.Balance != 10 {
		t.Fatalf("Snapshot %+v, want %d deposits and a balance of 10", s, 20+failsToSetFull+5)
	}
	// A withdrawal from cell 3 makes room there, which a deposit into
	// cell 0 fills: the hint does not hide it.
	if !b.withdraw(a3) {
		t.Fatal("refused")
	}
	if b.full.Load() != 0 {
		t.Fatal("a withdrawal left the full hint set")
	}
	b.deposit(a0)
	b.deposit(a0)
	if l = b.ledger(); l.cells[3] != b.unit || l.balance() != b.capUnits || l.discarded != failsToSetFull*depositUnits {
		t.Fatalf("%+v; want cell 3 refilled from cell 0 and nothing more discarded", l)
	}
	n := 0
	for b.withdraw(a0) {
		n++
	}
	if n != 10 {
		t.Errorf("drained %d tokens, want 10", n)
	}
	if err := b.check(b.ledger()); err != nil {
		t.Error(err)
	}
}

// A token split among cells and the pool is still withdrawn, from any
// cell; pieces that add up to less are left where they are.
func TestFragmentedBalance(t *testing.T) {
	b, err := New(Config{Ratio: 0.3, MaxTokens: 10, MinPerSecond: -1}) // a token is 3334 units
	if err != nil {
		t.Fatal(err)
	}
	a2, a5, a7 := addrFor(t, b, 2), addrFor(t, b, 5), addrFor(t, b, 7)
	b.deposit(a2)
	b.deposit(a2)
	b.deposit(a5)
	if b.withdraw(a7) {
		t.Fatal("granted 3000 units as a token of 3334")
	}
	if l := b.ledger(); l.cells[2] != 2000 || l.cells[5] != 1000 || l.cells[7] != 0 {
		t.Fatalf("%+v; want the pieces left in place", l)
	}
	b.pool.Store(334) // as if moved there
	if !b.withdraw(a7) {
		t.Fatal("refused 2000 + 1000 + 334 units")
	}
	l := b.ledger()
	if l.balance() != 0 || l.grants != 1 {
		t.Fatalf("%+v; want one grant and nothing left", l)
	}
	// Leftovers: 4000 units in two cells; the gather takes only a token.
	for range 2 {
		b.deposit(a2)
		b.deposit(a5)
	}
	if !b.withdraw(a7) {
		t.Fatal("refused 4000 units")
	}
	if l = b.ledger(); l.balance() != 4000-3334 {
		t.Fatalf("%+v; want 666 units left", l)
	}
}

// explicitOp is a run of deposits or withdrawals made from a chosen cell.
type explicitOp struct {
	withdraw bool
	count    int
	cell     int
}

// The balance is exactly the single balance of the package doc, in one
// goroutine, whatever cells the calls land in (a goroutine's stack moves,
// and Deposit and Withdraw may be called at different depths): a
// withdrawal is granted if and only if the model holds a token, deposits
// above the cap are discarded and only they, and the Snapshot matches.
func TestAnyCellsMatchModel(t *testing.T) {
	rounds := 10
	if testing.Short() {
		rounds = 1
	}
	for range rounds {
		rapid.Check(t, checkAnyCells)
	}
}

func checkAnyCells(rt *rapid.T) {
	ratio := rapid.SampledFrom([]float64{0.05, 0.1, 0.3, 1.0 / 3, 0.5, 1}).Draw(rt, "ratio")
	maxTokens := rapid.IntRange(1, 20).Draw(rt, "maxTokens")
	b, err := New(Config{Ratio: ratio, MaxTokens: maxTokens, MinPerSecond: -1})
	if err != nil {
		rt.Fatal(err)
	}
	addrs := make([]uintptr, b.k)
	for i := range addrs {
		addrs[i] = addrFor(rt, b, i)
	}
	ops := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) explicitOp {
		return explicitOp{
			withdraw: rapid.Bool().Draw(rt, "withdraw"),
			count:    rapid.IntRange(1, 40).Draw(rt, "count"),
			// Mostly one cell, as a goroutine's calls are.
			cell: rapid.OneOf(rapid.Just(0), rapid.IntRange(0, b.k-1)).Draw(rt, "cell"),
		}
	}), 1, 100).Draw(rt, "ops")
	var bal int64
	var deposits, grants uint64
	for n, op := range ops {
		for range op.count {
			if op.withdraw {
				want := bal >= b.unit
				if got := b.withdraw(addrs[op.cell]); got != want {
					rt.Fatalf("op %d: Withdraw = %v with %d units in the model (token %d)", n, got, bal, b.unit)
				}
				if want {
					bal -= b.unit
					grants++
				}
			} else {
				b.deposit(addrs[op.cell])
				bal = min(bal+depositUnits, b.capUnits)
				deposits++
			}
		}
		s := b.Snapshot()
		want := Snapshot{Deposits: deposits, Withdrawals: grants, Refused: s.Refused, Balance: float64(bal) / float64(b.unit)}
		if s != want {
			rt.Fatalf("op %d: Snapshot %+v, model %+v", n, s, want)
		}
		l := b.ledger()
		if err := b.check(l); err != nil {
			rt.Fatalf("op %d: %v", n, err)
		}
		if l.balance() != bal {
			rt.Fatalf("op %d: %d units, model %d", n, l.balance(), bal)
		}
	}
}

// Deposits and withdrawals from many goroutines, with a cap that binds:
// every unit is accounted for, no place is above its cap, and the grants
// stay within Ratio of the deposits plus MaxTokens.
func TestConcurrentLedger(t *testing.T) {
	for _, cfg := range []Config{
		{Ratio: 0.5, MaxTokens: 10, MinPerSecond: -1},
		{Ratio: 0.1, MaxTokens: 3, MinPerSecond: -1},
		{Ratio: 1, MaxTokens: 1, MinPerSecond: -1},
		{Ratio: 1.0 / 3, MaxTokens: 20, MinPerSecond: -1},
	} {
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		const goroutines, perG = 8, 20_000
		var granted atomic.Uint64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range perG {
					b.Deposit()
					// Goroutines withdraw at different rates, in turns,
					// so the balance goes from full to empty and back.
					if (i/2000)%2 == 0 && (i+g)%(g+1) == 0 && b.Withdraw() {
						granted.Add(1)
					}
					if i%500 == 0 {
						b.Snapshot()
					}
				}
			})
		}
		wg.Wait()
		l := b.ledger()
		if err := b.check(l); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
		s := b.Snapshot()
		if s.Deposits != goroutines*perG || s.Withdrawals != granted.Load() || l.grants != granted.Load() {
			t.Errorf("%+v: Snapshot %+v, ledger %+v; want %d deposits and %d withdrawals", cfg, s, l, goroutines*perG, granted.Load())
		}
		if l.deposited+l.dropped*depositUnits != goroutines*perG*depositUnits {
			t.Errorf("%+v: %d units deposited and %d dropped, want %d deposits", cfg, l.deposited, l.dropped, goroutines*perG)
		}
		if max := cfg.Ratio*goroutines*perG + float64(cfg.MaxTokens); float64(granted.Load()) > max {
			t.Errorf("%+v: granted %d, more than %v", cfg, granted.Load(), max)
		}
		if s.Balance > float64(cfg.MaxTokens) {
			t.Errorf("%+v: balance %v", cfg, s.Balance)
		}
	}
}

// The counters wrap around 2^64 harmlessly: only their difference is used.
func TestCountersWrapAround(t *testing.T) {
	b, err := New(Config{Ratio: 0.5, MaxTokens: 10, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	const start = ^uint64(0) - 4500 // five deposits short of wrapping
	for k := range b.k {
		b.cells[k].d.Store(start)
		b.cells[k].w.Store(start)
	}
	a := addrFor(t, b, 1)
	for range 30 { // 15 tokens, wrapping on the way
		b.deposit(a)
	}
	if d := b.cells[1].d.Load(); d > start {
		t.Fatalf("deposited %d did not wrap", d)
	}
	if s := b.Snapshot(); s.Balance != 10 || s.Withdrawals != 0 {
		t.Fatalf("Snapshot %+v, want a balance of 10 (the cap)", s)
	}
	n := 0
	for b.withdraw(a) {
		n++
	}
	if s := b.Snapshot(); n != 10 || s.Withdrawals != 10 || s.Balance != 0 {
		t.Errorf("granted %d, Snapshot %+v; want 10 and an empty balance", n, s)
	}
}

// A cell re-seeds the hash on its 8th failed compare-and-swap and on every
// power of two after, not in between.
func TestReseedRule(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &b.cells[2]
	reseeds := 0
	for m := 1; m <= 70; m++ {
		s := b.seed.Load()
		b.missed(c, s)
		if b.seed.Load() != s {
			reseeds++
			if m != 8 && m != 16 && m != 32 && m != 64 {
				t.Errorf("re-seeded at miss %d", m)
			}
			if b.seed.Load() != s+stripe.SeedStep {
				t.Errorf("seed %#x, want %#x", b.seed.Load(), s+stripe.SeedStep)
			}
		}
	}
	if reseeds != 4 {
		t.Errorf("%d re-seeds in 70 misses, want 4", reseeds)
	}
	// A miss counted under a seed that has changed since does not re-seed
	// again: one collision, one re-seed.
	s := b.seed.Load()
	c.misses.Store(127)
	b.missed(c, s-stripe.SeedStep)
	if b.seed.Load() != s {
		t.Error("a stale miss re-seeded")
	}
}

// Two goroutines that the hash gives one cell collide there, and the
// collisions re-seed the hash. The seed is forced to one under which every
// address picks cell 0; the goroutines run until the seed changes, which
// takes a few compare-and-swaps that fail, so only a machine that never
// runs them at once could fail this.
func TestCollisionReseeds(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two cores")
	}
	b, err := New(Config{Ratio: 1, MaxTokens: 100, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	mult := stripe.Hash(1<<11, 0)
	forced := -mult // mult + forced = 0: every address picks cell 0
	b.seed.Store(forced)
	if b.index(addrFor(t, b, 0)+5<<11, forced) != 0 || b.index(1<<30, forced) != 0 {
		t.Fatal("the forced seed does not put every address in cell 0")
	}
	const most = 5_000_000
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for i := 0; i < most && b.seed.Load() == forced; i++ {
				b.Deposit()
				b.Withdraw()
			}
		})
	}
	wg.Wait()
	if b.seed.Load() == forced {
		t.Fatalf("two goroutines in one cell did not re-seed; %d misses", b.cells[0].misses.Load())
	}
	if m := b.cells[0].misses.Load(); m < firstReseed {
		t.Errorf("re-seeded after %d misses", m)
	}
	if err := b.check(b.ledger()); err != nil {
		t.Error(err)
	}
}

// The cap is a cap of the total: with MaxTokens of a billion, the pool
// holds all but a token per cell, and the arithmetic stays in an int64.
func TestLargestCap(t *testing.T) {
	b, err := New(Config{Ratio: MinRatio, MaxTokens: MaxMaxTokens, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	if b.capUnits/b.unit != MaxMaxTokens || b.poolCap != b.capUnits-8*b.unit || b.capUnits > math.MaxInt64/2 {
		t.Fatalf("unit %d, cap %d, pool cap %d", b.unit, b.capUnits, b.poolCap)
	}
	b.pool.Store(b.poolCap - 500)
	b.Deposit()
	if l := b.ledger(); l.pool != b.poolCap-500 || l.balance() != b.poolCap-500+depositUnits {
		t.Fatalf("%+v", l)
	}
}
