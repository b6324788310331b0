package budget

import (
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/internal/stripe"
)

// ErrExhausted is the error a retry (or hedge) policy returns, or wraps, when
// the budget refuses a retry. It is a rejection (watertight.IsRejection): it
// is never retried and never counts as a failure of the dependency.
var ErrExhausted = watertight.NewRejection("budget: exhausted")

// Defaults used for zero fields of Config.
const (
	DefaultRatio        = 0.1
	DefaultMaxTokens    = 10
	DefaultMinPerSecond = 10.0
)

// Limits of Config, which keep the fixed-point arithmetic inside an int64.
const (
	// MinRatio is the smallest Config.Ratio: one retry per million requests.
	MinRatio = 1e-6
	// MaxMaxTokens is the largest Config.MaxTokens.
	MaxMaxTokens = 1_000_000_000
	// MaxMinPerSecond is the largest Config.MinPerSecond.
	MaxMinPerSecond = 1e9
)

// Config configures a Budget. The zero value is valid: every zero field takes
// the default named in its comment (see DefaultConfig).
type Config struct {
	// Name labels the budget in events (the dependency it guards). It may
	// be empty.
	Name string
	// Ratio is the share of requests that may be retried: each Deposit adds
	// Ratio of a token and each granted retry takes one whole token. Zero
	// means DefaultRatio (0.1: at most one retry per ten requests, over
	// time). Must be in [MinRatio, 1]; 1 lets every request retry once on
	// average. The ratio is kept in fixed point: the budget grants at most
	// Ratio and at least 99.9% of it (Ratio 0.1, 0.2, 0.25, 0.5 and 1 are
	// exact).
	Ratio float64
	// MaxTokens caps the balance: the burst of retries that a long healthy
	// stretch can save up, and so the most retries the budget grants beyond
	// Ratio of the requests, over any stretch of time (plus the floor). Zero
	// means DefaultMaxTokens (10). Must be in [1, MaxMaxTokens].
	MaxTokens int
	// MinPerSecond is a floor: this many retries per second are granted even
	// when the requests have deposited nothing (a dependency with little
	// traffic could otherwise never retry). It is a token bucket of its own,
	// refilled at MinPerSecond per second and holding at most one second's
	// worth (max(1, MinPerSecond) tokens); it starts full, and is consulted
	// only when the ratio balance holds less than one token. Zero means
	// DefaultMinPerSecond (10); negative means no floor. Must not be above
	// MaxMinPerSecond.
	MinPerSecond float64
	// Listener, if not nil, receives an EventBudgetExhausted, with Source
	// "budget", Name this Name and Err ErrExhausted, for every Withdraw the
	// budget refuses. It is called in the goroutine of Withdraw, with no
	// lock held; refusals come in bursts when a dependency fails, so it
	// should return quickly (see watertight.Listener). If nil, no events
	// are built.
	Listener watertight.Listener
}

// DefaultConfig returns the configuration that zero fields resolve to: retries
// limited to 10% of requests, a saved-up burst of at most 10 retries, and a
// floor of 10 retries per second.
func DefaultConfig() Config {
	return Config{
		Ratio:        DefaultRatio,
		MaxTokens:    DefaultMaxTokens,
		MinPerSecond: DefaultMinPerSecond,
	}
}

// resolve fills defaults and validates; the error names the field and the rule.
func (c Config) resolve() (Config, error) {
	bad := func(field, rule string, got any) error {
		return fmt.Errorf("budget: Config.%s %s, got %v", field, rule, got)
	}
	if c.Ratio == 0 {
		c.Ratio = DefaultRatio
	}
	if !(c.Ratio >= MinRatio && c.Ratio <= 1) {
		return c, bad("Ratio", "must be in [1e-6, 1] (0 means 0.1)", c.Ratio)
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultMaxTokens
	}
	if c.MaxTokens < 1 || c.MaxTokens > MaxMaxTokens {
		return c, bad("MaxTokens", "must be in [1, 1e9] (0 means 10)", c.MaxTokens)
	}
	if c.MinPerSecond == 0 {
		c.MinPerSecond = DefaultMinPerSecond
	}
	if math.IsNaN(c.MinPerSecond) || c.MinPerSecond > MaxMinPerSecond {
		return c, bad("MinPerSecond", "must be at most 1e9 (0 means 10, negative means no floor)", c.MinPerSecond)
	}
	return c, nil
}

// Fixed point: each Deposit adds depositUnits; a token is worth
// ceil(depositUnits/Ratio) units, so the effective ratio is never above
// Ratio and, with depositUnits = 1000, within 0.1% of it.
const depositUnits = 1000

// maxCells is the most cells a Budget stripes its balance over (a power of
// two); see Budget.
const maxCells = 8

// firstReseed is the number of failed compare-and-swaps on a cell after
// which the cell first re-seeds the budget's cell choice; it re-seeds again
// at every power of two above. See Budget.
const firstReseed = 8

// failsToSetFull is the number of searches for room from one cell that
// must fail in a row, with no withdrawal from the cell in between, before
// the full hint is set. See Budget.
const failsToSetFull = 2

// Budget is a retry budget: it lets retries through only while they stay
// within a share (Config.Ratio) of the requests, plus a saved-up burst
// (Config.MaxTokens) and a small floor per second (Config.MinPerSecond). One
// Budget is meant to be shared by every call site of one dependency, so that
// together they cannot multiply its load. Build it with New; it is safe for
// concurrent use.
//
// A nil *Budget is valid and means "no budget": Deposit does nothing and
// Withdraw always grants. The zero Budget is not usable: use New.
//
// # Cost
//
// Deposit is a compare-and-swap, and Withdraw, when the caller's cell of
// the balance holds a token, a compare-and-swap and an add, on a cache line
// that other cores seldom touch (see below); neither allocates, nor takes a
// lock, nor reads the clock. A Deposit into a full balance is a
// compare-and-swap on a counter of the same line. A Withdraw whose cell is
// empty looks in the pool and the other cells, and takes a mutex only to
// gather a token that lies in pieces among them; it reads the clock only
// when the balance holds less than a token and the floor is consulted.
//
// # How the balance is kept
//
// The balance is striped over up to eight cells, each alone on its cache
// lines, and a pool. A call uses the cell that the address of its
// goroutine's stack picks (internal/stripe's hash), so that goroutines
// running on different cores usually deposit into and withdraw from cells of
// their own. The reason is what one shared balance costs: from two cores, a
// deposit and a withdrawal on one cache line cost at least 31-32 ns however
// little they do, because the line travels between the cores on every call;
// on lines of their own they cost what their atomics cost.
//
// A cell holds at most one token and the pool the rest of the cap (MaxTokens
// less a token per cell), so the total never exceeds MaxTokens. There are as
// many cells as the largest power of two that is at most eight and at most
// MaxTokens: with MaxTokens 1, one cell and no pool, one shared balance. A
// cell's balance is the difference of two counters: the units deposited into
// it, which only Deposit adds to (so that they count the deposits), and the
// units out of it (tokens granted, units moved elsewhere, less units moved
// in). Both wrap around modulo 2^64 harmlessly, since only their difference
// is used; it stays small, as a cell never holds more than a token and the
// deposits in flight. Separate counters of the grants and of the deposits
// dropped (below) make Snapshot's counts, which only grow.
//
// The cap is applied as the tokens arrive. A Deposit that takes its cell
// above one token moves the excess to the pool, then, if the pool is full,
// searches the other cells for room, and discards only what fits nowhere. A
// hint spares that search to the deposits of a healthy stretch, when every
// cell and the pool are full: once two searches from one cell have failed
// in a row (with no withdrawal from the cell in between), the hint is set,
// and a Deposit that finds its own cell full and the hint set drops its
// deposit, counting it, without touching another cache line. Every Withdraw
// that takes a token clears the hint if it is set (reading it first, so that
// nothing shared is written while it is clear). The hint is set after a
// failed search and followed by a second one: the room that a Withdraw makes
// is then either found by the second search or seen by the Withdraw, with
// the hint set, to clear. Waiting for two failures keeps a balance that
// hovers at its cap, where deposits refill the room that withdrawals make,
// from setting the hint after nearly every deposit for the next withdrawal
// to clear.
//
// Being exact has a price there. When goroutines on several cores withdraw
// often from a balance at its cap, a deposit that finds its own cell full
// searches for, and fills, the room that another goroutine's withdrawal has
// just made in that goroutine's cell: for all it can tell, the two calls
// could have come from one goroutine whose stack moved. That costs cache
// misses that one shared balance would not.
//
// A Withdraw takes a token from its own cell, else from the pool, else from
// another cell, else, under the mutex, in pieces from all of them; only when
// they do not add up to a token does it turn to the floor. So, in one
// goroutine, the balance is exactly the single balance of the package doc,
// wherever its units lie (a goroutine's stack can move, and calls from
// different depths can pick different cells): a withdrawal is granted
// whenever the total holds a token, and a deposit is discarded only above
// the cap. Under concurrency a call can miss units that another one is
// moving, and the deposits in flight can take the total a deposit or so
// above the cap, for a moment.
//
// Two goroutines that the hash gives one cell share it, and their
// compare-and-swaps then fail now and then: a cell's 8th failure, and each
// power of two after it, re-seeds the hash (internal/stripe's rule), so that
// they part. A re-seed moves no units; it changes which goroutine uses which
// cell.
type Budget struct {
	// Read-only after New.
	unit     int64 // units per token, ceil(depositUnits / Ratio); a cell's cap
	capUnits int64 // MaxTokens * unit
	poolCap  int64 // capUnits - k*unit
	k        int   // cells in use: a power of two, at most maxCells
	shift    uint  // 64 - log2(k): a hash's top bits pick the cell
	floor    bool  // MinPerSecond > 0
	interval int64 // floor: ns per token, ceil(1e9 / MinPerSecond)
	tau      int64 // floor: burst tolerance, (max(1, MinPerSecond) - 1) * interval
	epoch    time.Time
	cfg      Config

	_    [128]byte
	seed atomic.Uint64 // the hash's seed, read by every call; a re-seed adds stripe.SeedStep
	_    [120]byte
	full atomic.Uint32 // hint: non-zero when searches found no room anywhere
	_    [124]byte

	cells [maxCells]cell

	pool atomic.Int64 // units, at most poolCap
	_    [120]byte
	tat  atomic.Int64 // floor: GCRA theoretical arrival time, ns since epoch
	// floorWins counts the floor's grants.
	floorWins atomic.Uint64
	_         [112]byte
	refused   stripe.Counter
	mu        sync.Mutex // serialises the gathering of a token in pieces
}

// cell is one stripe of the balance, alone on its cache lines.
type cell struct {
	d         atomic.Uint64 // units deposited into the cell; only Deposit adds to it
	w         atomic.Uint64 // units out: tokens granted and units moved out, less units moved in
	grants    atomic.Uint64 // tokens granted (from anywhere) to Withdraws that used this cell
	dropped   atomic.Uint64 // deposits dropped whole, the balance being full
	discarded atomic.Uint64 // units discarded above the cap by calls that used this cell
	misses    atomic.Uint32 // failed compare-and-swaps on d, w and dropped, for re-seeding
	fails     atomic.Uint32 // searches for room from this cell that failed in a row, since a withdrawal from it
	_         [80]byte
}

// balance returns the cell's units. w is loaded first: d only grows, so a
// compare-and-swap of that w that succeeds finds at least this balance.
func (c *cell) balance() int64 {
	w := c.w.Load()
	return int64(c.d.Load() - w)
}

// take takes n units if the cell holds them.
func (c *cell) take(n int64) bool {
	for {
		w := c.w.Load()
		if int64(c.d.Load()-w) < n {
			return false
		}
		if c.w.CompareAndSwap(w, w+uint64(n)) {
			return true
		}
	}
}

// takeUpTo takes what the cell holds, up to n units, and returns it.
func (c *cell) takeUpTo(n int64) int64 {
	for {
		w := c.w.Load()
		y := min(int64(c.d.Load()-w), n)
		if y <= 0 {
			return 0
		}
		if c.w.CompareAndSwap(w, w+uint64(y)) {
			return y
		}
	}
}

// shed moves out of the cell what it holds above limit, and returns it. It
// never takes more than the excess: the balance it acts on is at most the
// one the compare-and-swap finds.
func (c *cell) shed(limit int64) int64 {
	for {
		w := c.w.Load()
		x := int64(c.d.Load()-w) - limit
		if x <= 0 {
			return 0
		}
		if c.w.CompareAndSwap(w, w+uint64(x)) {
			return x
		}
	}
}

// put moves up to x units into the cell, without taking it above limit,
// and returns what did not fit. A deposit that lands between the room's
// reading and the compare-and-swap could take the cell above limit: put
// then moves that excess out again, and returns it with the rest.
func (c *cell) put(x, limit int64) int64 {
	for {
		w := c.w.Load()
		y := min(limit-int64(c.d.Load()-w), x)
		if y <= 0 {
			return x
		}
		if c.w.CompareAndSwap(w, w-uint64(y)) {
			return x - y + c.shed(limit)
		}
	}
}

// New returns a Budget for cfg, with an empty balance and a full floor, or an
// error that names the first invalid field and its rule.
func New(cfg Config) (*Budget, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	b := &Budget{cfg: c}
	b.unit = int64(math.Ceil(depositUnits / c.Ratio))
	b.capUnits = int64(c.MaxTokens) * b.unit
	b.k = 1
	for b.k*2 <= min(maxCells, c.MaxTokens) {
		b.k *= 2
	}
	b.shift = 64 - uint(bits.TrailingZeros(uint(b.k)))
	b.poolCap = b.capUnits - int64(b.k)*b.unit
	if c.MinPerSecond > 0 {
		b.floor = true
		b.interval = int64(math.Ceil(1e9 / c.MinPerSecond))
		b.tau = int64((max(1, c.MinPerSecond) - 1) * float64(b.interval))
		b.epoch = time.Now()
	}
	return b, nil
}

// NewFrom is New for a budget that replaces old (a configuration reload,
// say): the new budget starts with old's ratio balance, in tokens, capped
// at the new MaxTokens, instead of an empty one, so that a change of Ratio,
// MaxTokens or MinPerSecond neither hands out a fresh burst nor takes away
// the retries already earned. What else starts anew: the counters of
// Snapshot (Deposits, Withdrawals, Refused) and the floor, which starts
// full as in New. A nil old is New.
func NewFrom(cfg Config, old *Budget) (*Budget, error) {
	b, err := New(cfg)
	if err != nil || old == nil {
		return b, err
	}
	units := min(int64(old.Snapshot().Balance*float64(b.unit)), b.capUnits)
	// Moved in, as a gathering moves units between cells: the cells first,
	// up to a token each, then the pool.
	for i := range b.k {
		if units <= 0 {
			break
		}
		x := min(units, b.unit)
		b.cells[i].w.Add(^uint64(x - 1)) // w -= x
		units -= x
	}
	if units > 0 {
		b.pool.Store(min(units, b.poolCap))
	}
	return b, nil
}

// Config returns the budget's configuration, with defaults filled in.
func (b *Budget) Config() Config {
	if b == nil {
		return Config{}
	}
	return b.cfg
}

// index returns the cell for a stack address under seed s.
func (b *Budget) index(addr uintptr, s uint64) int {
	return int(stripe.Hash(addr, s)>>b.shift) & (maxCells - 1)
}

// missed counts a failed compare-and-swap on cell c, used under seed s,
// and re-seeds on the 8th and every power of two after.
func (b *Budget) missed(c *cell, s uint64) {
	if b.k == 1 {
		return // nowhere to move to
	}
	if m := c.misses.Add(1); m >= firstReseed && m&(m-1) == 0 {
		b.seed.CompareAndSwap(s, s+stripe.SeedStep)
	}
}

// Deposit records one request: it adds Config.Ratio of a token to the
// balance. Call it once per original request — not per attempt: if retries
// deposited too, retries would fund retries. It never reads the clock. On
// a nil Budget it does nothing.
func (b *Budget) Deposit() {
	if b == nil {
		return
	}
	// The cell is picked by the address of a variable on the caller's
	// stack. Deposit and Withdraw are small enough to be inlined, so that
	// the calls of one function take their addresses from its frame, and
	// usually pick one cell.
	var probe byte
	b.deposit(uintptr(unsafe.Pointer(&probe)))
}

func (b *Budget) deposit(addr uintptr) {
	s := b.seed.Load()
	i := b.index(addr, s)
	c := &b.cells[i]
	w := c.w.Load()
	d := c.d.Load()
	if int64(d-w) >= b.unit && (b.k == 1 || b.full.Load() != 0) {
		// Everything is full (with one cell, a full cell is all there is):
		// the deposit would be discarded whole.
		if n := c.dropped.Load(); !c.dropped.CompareAndSwap(n, n+1) {
			c.dropped.Add(1)
			b.missed(c, s)
		}
		return
	}
	if !c.d.CompareAndSwap(d, d+depositUnits) {
		d = c.d.Add(depositUnits) - depositUnits
		b.missed(c, s)
	}
	if int64(d+depositUnits-c.w.Load()) > b.unit {
		b.overflow(i)
	}
}

// overflow moves cell i's excess over one token elsewhere, and discards
// what fits nowhere.
func (b *Budget) overflow(i int) {
	c := &b.cells[i]
	if x := c.shed(b.unit); x > 0 {
		if x = b.place(i, x); x > 0 {
			c.discarded.Add(uint64(x))
		}
	}
}

// place puts x units, moved out of cell i, into the pool and then into the
// other cells, each up to its cap, and returns what fits nowhere. Unless the
// full hint says that there is no room, it searches the cells; when the
// searches from cell i have failed failsToSetFull times in a row, it sets
// the hint and searches once more. A Withdraw loads the hint after taking:
// so the room it makes is either there for the second search to find, or
// there with the hint set for the Withdraw to clear. A search that finds
// room writes nothing shared but that room.
func (b *Budget) place(i int, x int64) int64 {
	if x = b.putPool(x); x == 0 || b.k == 1 || b.full.Load() != 0 {
		return x
	}
	c := &b.cells[i]
	if x = b.search(i, x); x == 0 {
		if c.fails.Load() != 0 {
			c.fails.Store(0)
		}
		return 0
	}
	if c.fails.Add(1) < failsToSetFull {
		return x
	}
	b.full.Store(1)
	if x = b.putPool(x); x > 0 {
		x = b.search(i, x)
	}
	if x == 0 {
		b.clearFull()
	}
	return x
}

// search puts up to x units into the cells other than i, each up to its
// cap, and returns what did not fit.
func (b *Budget) search(i int, x int64) int64 {
	for j := 1; j < b.k && x > 0; j++ {
		x = b.cells[(i+j)&(b.k-1)].put(x, b.unit)
	}
	return x
}

// clearFull clears the full hint if it is set: a withdrawal has made room.
// It loads first, so that a healthy balance's withdrawals write nothing
// shared.
func (b *Budget) clearFull() {
	if b.full.Load() != 0 {
		b.full.Store(0)
	}
}

// putPool puts up to x units into the pool, without taking it above its
// cap, and returns what did not fit.
func (b *Budget) putPool(x int64) int64 {
	for {
		p := b.pool.Load()
		y := min(b.poolCap-p, x)
		if y <= 0 {
			return x
		}
		if b.pool.CompareAndSwap(p, p+y) {
			return x - y
		}
	}
}

// takePoolUpTo takes what the pool holds, up to n units, and returns it.
func (b *Budget) takePoolUpTo(n int64) int64 {
	for {
		p := b.pool.Load()
		y := min(p, n)
		if y <= 0 {
			return 0
		}
		if b.pool.CompareAndSwap(p, p-y) {
			return y
		}
	}
}

// Withdraw asks for one retry. It reports true, taking one token, when the
// balance holds a whole token or, failing that, when the floor grants one; a
// false means the retry must not be made (return or wrap ErrExhausted). On a
// nil Budget it always reports true.
//
// A hedge is a retry sent early: a Budget works as a hedge budget, with
// Withdraw before sending each hedge.
func (b *Budget) Withdraw() bool {
	if b == nil {
		return true
	}
	var probe byte // see Deposit
	return b.withdraw(uintptr(unsafe.Pointer(&probe)))
}

func (b *Budget) withdraw(addr uintptr) bool {
	s := b.seed.Load()
	i := b.index(addr, s)
	c := &b.cells[i]
	for {
		w := c.w.Load()
		if int64(c.d.Load()-w) < b.unit {
			return b.withdrawSlow(i)
		}
		if c.w.CompareAndSwap(w, w+uint64(b.unit)) {
			if c.fails.Load() != 0 {
				c.fails.Store(0)
			}
			return b.granted(c)
		}
		b.missed(c, s)
	}
}

// granted counts a token granted from the balance to a Withdraw that used
// cell c, and clears the full hint (after the taking: see place).
func (b *Budget) granted(c *cell) bool {
	c.grants.Add(1)
	b.clearFull()
	return true
}

// withdrawSlow is Withdraw when cell i holds less than a token: it takes
// one from the pool, or another cell, or in pieces from all of them, or
// else asks the floor.
func (b *Budget) withdrawSlow(i int) bool {
	own := &b.cells[i]
	sum := max(own.balance(), 0)
	for {
		p := b.pool.Load()
		if p < b.unit {
			sum += max(p, 0)
			break
		}
		if b.pool.CompareAndSwap(p, p-b.unit) {
			return b.granted(own)
		}
	}
	for j := 1; j < b.k; j++ {
		o := &b.cells[(i+j)&(b.k-1)]
		bal := o.balance()
		if bal >= b.unit && o.take(b.unit) {
			return b.granted(own)
		}
		sum += max(bal, 0)
	}
	if sum >= b.unit && b.gather(i) {
		return b.granted(own)
	}
	return b.withdrawFloor()
}

// gather takes a token in pieces, from cell i, the pool and the other
// cells. If they no longer add up to a token (calls in flight took from
// them), it puts the pieces back and reports false.
func (b *Budget) gather(i int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	var got [maxCells]int64 // by cell
	need := b.unit
	fromPool := int64(0)
	for j := 0; j < b.k && need > 0; j++ {
		k := (i + j) & (b.k - 1)
		got[k] = b.cells[k].takeUpTo(need)
		need -= got[k]
		if j == 0 && need > 0 {
			fromPool = b.takePoolUpTo(need)
			need -= fromPool
		}
	}
	if need == 0 {
		return true
	}
	// Put the pieces back where they came from; what deposits in flight
	// have filled the room of goes elsewhere, or is discarded.
	rest := b.putPool(fromPool)
	for k := range b.k {
		if got[k] > 0 {
			rest += b.cells[k].put(got[k], b.unit)
		}
	}
	if rest > 0 {
		if rest = b.place(i, rest); rest > 0 {
			b.cells[i].discarded.Add(uint64(rest))
		}
	}
	return false
}

// withdrawFloor is Withdraw when the ratio balance is empty.
func (b *Budget) withdrawFloor() bool {
	if b.takeFloor() {
		b.floorWins.Add(1)
		return true
	}
	b.refused.Add(1)
	if b.cfg.Listener != nil {
		b.emitRefused()
	}
	return false
}

// emitRefused sends an EventBudgetExhausted. It is kept out of line so that
// the refusal path of a budget without a listener stays as small as it was.
//
//go:noinline
func (b *Budget) emitRefused() {
	watertight.Emit(b.cfg.Listener, watertight.Event{
		Kind: watertight.EventBudgetExhausted, Source: source, Name: b.cfg.Name,
		Reason: "no token in the balance nor from the floor", Err: ErrExhausted, Code: CodeNoTokens,
	})
}

// source is the Source of the package's events.
const source = "budget"

// takeFloor takes a token from the floor bucket, a GCRA (generic cell rate
// algorithm) in one atomic word: it reports whether a retry now keeps the
// floor's grants within one per interval plus the burst.
func (b *Budget) takeFloor() bool {
	if !b.floor {
		return false
	}
	now := int64(time.Since(b.epoch))
	for {
		tat := b.tat.Load()
		t := max(tat, now)
		if t-now > b.tau {
			return false
		}
		if b.tat.CompareAndSwap(tat, t+b.interval) {
			return true
		}
	}
}

// Snapshot is a Budget's counters at one moment.
type Snapshot struct {
	// Deposits is the number of Deposit calls since New (it wraps around
	// after 1.8e16).
	Deposits uint64
	// Withdrawals is the number of retries granted since New, by the ratio
	// balance or the floor.
	Withdrawals uint64
	// Refused is the number of retries refused since New.
	Refused uint64
	// Balance is the number of tokens the ratio balance holds, capped at
	// MaxTokens; the floor is not included.
	Balance float64
}

// Snapshot returns the budget's counters. Under concurrent use they are read
// one after the other, not at one instant, and may be off by the calls in
// flight; Deposits and Withdrawals never go back from one Snapshot to the
// next. A nil Budget returns the zero Snapshot.
func (b *Budget) Snapshot() Snapshot {
	if b == nil {
		return Snapshot{}
	}
	// Deposits and Withdrawals are sums of counters that only grow, so
	// that they never go back; the balance, which units in flight between
	// cells can make look low for a moment, is only a gauge.
	var deposited, dropped, grants uint64
	var bal int64
	for k := range b.k {
		c := &b.cells[k]
		bal += c.balance()
		deposited += c.d.Load()
		dropped += c.dropped.Load()
		grants += c.grants.Load()
	}
	bal = min(max(bal+b.pool.Load(), 0), b.capUnits)
	return Snapshot{
		Deposits:    deposited/depositUnits + dropped,
		Withdrawals: grants + b.floorWins.Load(),
		Refused:     b.refused.Load(),
		Balance:     float64(bal) / float64(b.unit),
	}
}
