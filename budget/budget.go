package budget

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

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

// trimMask: the deposit counter crosses a multiple of 2^40 once every 2^40/1000
// (about 1.1e9) deposits, and the crossing trims the balance to the cap. See
// Budget.
const trimMask = 1<<40 - 1

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
// Deposit is one atomic add and never reads the clock. Withdraw, when the
// balance holds a token, is two atomic loads and a compare-and-swap. Neither
// allocates. Withdraw reads the clock only when the balance is empty and the
// floor is consulted, and takes a mutex only when the balance is above the
// cap (a retry after a stretch of deposits with few retries, so uncontended
// in practice) to account for the excess it discards.
//
// # How the balance is kept
//
// The balance is the difference of two monotonic counters on one cache line:
// the units deposited (bumped by Deposit) and the units withdrawn (moved by
// Withdraw with a compare-and-swap, which a Deposit never makes fail). The
// number of deposits is the first counter divided by 1000, and the number of
// granted retries is the second, less the excess discarded above the cap,
// divided by a token's units: neither needs an add of its own. The cap is
// applied lazily: Deposit may push the balance above MaxTokens, and Withdraw
// treats anything above it as MaxTokens, discarding the excess in the same
// compare-and-swap that takes the token. Both counters wrap around modulo
// 2^64 harmlessly, since only their difference is used; to keep that
// difference far from overflow when no Withdraw comes for a very long time,
// the Deposit that crosses every 2^40-th unit (once per 1.1 billion deposits)
// also trims the balance to the cap.
type Budget struct {
	_         [64]byte
	deposited atomic.Uint64 // units; Deposit's only write
	withdrawn atomic.Uint64 // units: granted tokens and the excess discarded above the cap
	_         [48]byte
	tat       atomic.Int64 // floor: GCRA theoretical arrival time, ns since epoch
	floorWins atomic.Uint64
	_         [48]byte
	refused   stripe.Counter

	// Read-mostly.
	unit     uint64 // units per token: ceil(depositUnits / Ratio)
	capUnits int64  // MaxTokens * unit
	floor    bool   // MinPerSecond > 0
	interval int64  // floor: ns per token, ceil(1e9 / MinPerSecond)
	tau      int64  // floor: burst tolerance, (max(1, MinPerSecond) - 1) * interval
	epoch    time.Time
	cfg      Config

	_         [64]byte
	mu        sync.Mutex // serialises discarding; Snapshot takes it to read a consistent count
	discarded uint64     // units discarded above the cap, under mu
}

// New returns a Budget for cfg, with an empty balance and a full floor, or an
// error that names the first invalid field and its rule.
func New(cfg Config) (*Budget, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	b := &Budget{cfg: c}
	b.unit = uint64(math.Ceil(depositUnits / c.Ratio))
	b.capUnits = int64(c.MaxTokens) * int64(b.unit)
	if c.MinPerSecond > 0 {
		b.floor = true
		b.interval = int64(math.Ceil(1e9 / c.MinPerSecond))
		b.tau = int64((max(1, c.MinPerSecond) - 1) * float64(b.interval))
		b.epoch = time.Now()
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

// Deposit records one request: it adds Config.Ratio of a token to the
// balance. Call it once per original request — not per attempt: if retries
// deposited too, retries would fund retries. It is one atomic add; it never
// reads the clock. On a nil Budget it does nothing.
func (b *Budget) Deposit() {
	if b == nil {
		return
	}
	if d := b.deposited.Add(depositUnits); d&trimMask < depositUnits {
		b.trim()
	}
}

// trim discards the balance above the cap; see Budget.
func (b *Budget) trim() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		w := b.withdrawn.Load()
		d := b.deposited.Load()
		if int64(d-w) <= b.capUnits {
			return
		}
		if next := d - uint64(b.capUnits); b.withdrawn.CompareAndSwap(w, next) {
			b.discarded += next - w
			return
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
	for {
		// Load withdrawn first: deposited only grows, so a deposit that lands
		// between the loads can only make the balance look smaller.
		w := b.withdrawn.Load()
		d := b.deposited.Load()
		bal := int64(d - w)
		if bal > b.capUnits {
			if ok, done := b.withdrawOverCap(); done {
				return ok
			}
			continue
		}
		if bal < int64(b.unit) {
			return b.withdrawFloor()
		}
		if b.withdrawn.CompareAndSwap(w, w+b.unit) {
			return true
		}
	}
}

// withdrawOverCap takes a token from a balance above the cap, discarding the
// excess. It reports done = false if the balance is no longer above the cap.
func (b *Budget) withdrawOverCap() (ok, done bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		w := b.withdrawn.Load()
		d := b.deposited.Load()
		if int64(d-w) <= b.capUnits {
			return false, false
		}
		if next := d - uint64(b.capUnits) + b.unit; b.withdrawn.CompareAndSwap(w, next) {
			b.discarded += next - w - b.unit
			return true, true
		}
	}
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
		Reason: "no token in the balance nor from the floor", Err: ErrExhausted,
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
// flight. A nil Budget returns the zero Snapshot.
func (b *Budget) Snapshot() Snapshot {
	if b == nil {
		return Snapshot{}
	}
	b.mu.Lock()
	w := b.withdrawn.Load()
	d := b.deposited.Load()
	discarded := b.discarded
	b.mu.Unlock()
	bal := min(int64(d-w), b.capUnits)
	return Snapshot{
		Deposits:    d / depositUnits,
		Withdrawals: (w-discarded)/b.unit + b.floorWins.Load(),
		Refused:     b.refused.Load(),
		Balance:     float64(bal) / float64(b.unit),
	}
}
