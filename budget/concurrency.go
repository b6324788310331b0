package budget

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/internal/stripe"
)

// Defaults used for zero fields of ConcurrencyConfig: Envoy's retry_budget
// defaults.
const (
	DefaultPercent        = 20.0
	DefaultMinConcurrency = 3
)

// MaxMinConcurrency is the largest ConcurrencyConfig.MinConcurrency.
const MaxMinConcurrency = 1_000_000_000

// ppmUnit is one in fixed point: Percent is kept in millionths of the
// active requests (20% is 200_000), so that the limit is integer arithmetic,
// exact for every Percent with at most four decimals.
const ppmUnit = 1_000_000

// maxActive caps the active count used in the limit's product, so that
// active·ppm stays inside an int64 (8.8e12 requests in flight is beyond any
// process).
const maxActive = 1 << 43

// ConcurrencyConfig configures a Concurrency. The zero value is valid: every
// zero field takes the default named in its comment (see
// DefaultConcurrencyConfig).
type ConcurrencyConfig struct {
	// Name labels the budget in events (the dependency it guards). It may
	// be empty.
	Name string
	// Percent is the share of the active requests, in percent, that may be
	// retries in flight at once: with 20, a hundred requests in progress
	// allow twenty retries in flight. The product is rounded down. Zero
	// means DefaultPercent (20, Envoy's budget_percent); negative means no
	// share, so that MinConcurrency alone is the limit (a fixed cap on
	// retries in flight, like Envoy's max_retries). Must be at most 100
	// and, if positive, at least 0.0001; it is kept to four decimals.
	Percent float64
	// MinConcurrency is the floor: this many retries may be in flight at
	// once however few requests are active (a dependency with little traffic
	// could otherwise never retry). Zero means DefaultMinConcurrency (3,
	// Envoy's min_retry_concurrency); negative means no floor. Must be at
	// most MaxMinConcurrency, and not off together with Percent.
	MinConcurrency int
	// Listener, if not nil, receives an EventBudgetExhausted, with Source
	// "budget", Name this Name and Err ErrExhausted, for every TryAcquire
	// the budget refuses. It is called in the goroutine of TryAcquire, with
	// no lock held; refusals come in bursts when a dependency fails, so it
	// should return quickly (see watertight.Listener). If nil, no events
	// are built.
	Listener watertight.Listener
}

// DefaultConcurrencyConfig returns the configuration that zero fields
// resolve to, Envoy's: retries in flight limited to 20% of the active
// requests, with a floor of 3.
func DefaultConcurrencyConfig() ConcurrencyConfig {
	return ConcurrencyConfig{Percent: DefaultPercent, MinConcurrency: DefaultMinConcurrency}
}

// resolve fills defaults and validates; the error names the field and the rule.
func (c ConcurrencyConfig) resolve() (ConcurrencyConfig, error) {
	bad := func(field, rule string, got any) error {
		return fmt.Errorf("budget: ConcurrencyConfig.%s %s, got %v", field, rule, got)
	}
	if c.Percent == 0 {
		c.Percent = DefaultPercent
	}
	if math.IsNaN(c.Percent) || c.Percent > 100 || (c.Percent > 0 && math.Round(c.Percent*1e4) < 1) {
		return c, bad("Percent", "must be in [0.0001, 100] (0 means 20, negative means no share: MinConcurrency alone)", c.Percent)
	}
	if c.MinConcurrency == 0 {
		c.MinConcurrency = DefaultMinConcurrency
	}
	if c.MinConcurrency > MaxMinConcurrency {
		return c, bad("MinConcurrency", "must be at most 1e9 (0 means 3, negative means no floor)", c.MinConcurrency)
	}
	if c.Percent < 0 && c.MinConcurrency < 0 {
		return c, bad("MinConcurrency", "must not be negative (no floor) when Percent is negative (no share): every retry would be refused", c.MinConcurrency)
	}
	return c, nil
}

// Concurrency is a concurrent-retry budget, Envoy's retry_budget: the
// retries in flight at once may be at most Config.Percent of the active
// requests, or Config.MinConcurrency, whichever is more. Where a Budget caps
// retries at a share of past requests, a Concurrency caps them at a share of
// the requests in progress now, so that it needs no memory of the past and
// follows a bursty request rate at once. One Concurrency is meant to be shared
// by every call site of one dependency. Build it with NewConcurrency; it is
// safe for concurrent use.
//
// Use it in two pairs of calls. Enter when a request starts and Leave when it
// ends, once per original request whatever its attempts (a request that is
// being retried, or waits before a retry, is active: Envoy counts the
// retry's own upstream request among the active ones, and the pending ones
// too). TryAcquire before a retry, which reports whether it may go, and then
// Release when that retry attempt has ended, on every path. Package retry
// makes these calls when its Config.Concurrency is set; it takes the slot
// when it schedules the retry, as Envoy does, so the slot is held through
// the wait before the retry as well as the attempt.
//
// The limit is checked when a slot is taken: a slot is never taken back, so
// after requests leave, more retries than the limit may stay in flight
// until they end.
//
// A nil *Concurrency is valid and means "no limit": Enter, Leave and Release
// do nothing and TryAcquire always grants. The zero Concurrency is not
// usable: use NewConcurrency.
//
// # Cost
//
// Enter and Leave are one atomic add each on a striped counter
// (internal/stripe), on a cache line that other cores seldom touch.
// TryAcquire sums the counter's eight cells and takes the slot with a
// compare-and-swap on one shared word; Release is an atomic add on that
// word. None of them allocates, takes a lock or reads the clock.
type Concurrency struct {
	// Read-only after NewConcurrency.
	ppm   int64 // Percent in millionths; 0 when off
	floor int64 // MinConcurrency; 0 when off
	cfg   ConcurrencyConfig

	_       [64]byte
	retries atomic.Int64  // slots held
	granted atomic.Uint64 // on the line TryAcquire's compare-and-swap owns
	_       [112]byte
	refused stripe.Counter
	active  stripe.Counter // Enter adds 1, Leave subtracts 1
}

// NewConcurrency returns a Concurrency for cfg, with no request active and no
// retry in flight, or an error that names the first invalid field and its
// rule.
func NewConcurrency(cfg ConcurrencyConfig) (*Concurrency, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	b := &Concurrency{cfg: c}
	if c.Percent > 0 {
		b.ppm = int64(math.Round(c.Percent * 1e4))
	}
	if c.MinConcurrency > 0 {
		b.floor = int64(c.MinConcurrency)
	}
	return b, nil
}

// Config returns the budget's configuration, with defaults filled in.
func (c *Concurrency) Config() ConcurrencyConfig {
	if c == nil {
		return ConcurrencyConfig{}
	}
	return c.cfg
}

// Enter records that a request has started: it is active until Leave. Call
// it once per original request, not per attempt. On a nil Concurrency it
// does nothing.
func (c *Concurrency) Enter() {
	if c != nil {
		c.active.Add(1)
	}
}

// Leave records that a request Enter recorded has ended. On a nil
// Concurrency it does nothing.
func (c *Concurrency) Leave() {
	if c != nil {
		c.active.Add(^uint64(0)) // -1
	}
}

// TryAcquire asks for a retry slot: it reports true, taking one, when fewer
// retries are in flight than the limit, max(MinConcurrency, Percent% of the
// active requests); the caller must then call Release when the retry
// attempt ends. A false means the retry must not be made (return or wrap
// ErrExhausted). On a nil Concurrency it always reports true.
func (c *Concurrency) TryAcquire() bool {
	if c == nil {
		return true
	}
	limit := c.limit()
	for {
		n := c.retries.Load()
		if n >= limit {
			return c.refuse()
		}
		if c.retries.CompareAndSwap(n, n+1) {
			c.granted.Add(1)
			return true
		}
	}
}

// Release gives back a slot TryAcquire granted. It panics if no slot is
// held. On a nil Concurrency it does nothing.
func (c *Concurrency) Release() {
	if c == nil {
		return
	}
	if c.retries.Add(-1) < 0 {
		c.retries.Add(1)
		panic("budget: Concurrency.Release without a slot held")
	}
}

// limit returns the most retries that may be in flight now.
func (c *Concurrency) limit() int64 {
	a := min(max(int64(c.active.Load()), 0), maxActive)
	return max(c.floor, a*c.ppm/ppmUnit)
}

// refuse counts a refusal and reports it to the listener.
func (c *Concurrency) refuse() bool {
	c.refused.Add(1)
	if c.cfg.Listener != nil {
		c.emitRefused()
	}
	return false
}

// emitRefused sends an EventBudgetExhausted, out of line (see
// Budget.emitRefused).
//
//go:noinline
func (c *Concurrency) emitRefused() {
	watertight.Emit(c.cfg.Listener, watertight.Event{
		Kind: watertight.EventBudgetExhausted, Source: source, Name: c.cfg.Name,
		Reason: "retries in flight at the limit, max(MinConcurrency, Percent of the active requests)", Err: ErrExhausted,
		Code: CodeConcurrencyLimit,
	})
}

// ConcurrencySnapshot is a Concurrency's counters at one moment.
type ConcurrencySnapshot struct {
	// Active is the number of requests between Enter and Leave.
	Active int64
	// InFlight is the number of retry slots held: granted and not released.
	InFlight int64
	// Limit is the most retries that may be in flight with Active requests.
	Limit int64
	// Granted is the number of slots granted since NewConcurrency.
	Granted uint64
	// Refused is the number of slots refused since NewConcurrency.
	Refused uint64
}

// Snapshot returns the budget's counters. Under concurrent use they are read
// one after the other, not at one instant, and may be off by the calls in
// flight. A nil Concurrency returns the zero ConcurrencySnapshot.
func (c *Concurrency) Snapshot() ConcurrencySnapshot {
	if c == nil {
		return ConcurrencySnapshot{}
	}
	return ConcurrencySnapshot{
		Active:   int64(c.active.Load()),
		InFlight: c.retries.Load(),
		Limit:    c.limit(),
		Granted:  c.granted.Load(),
		Refused:  c.refused.Load(),
	}
}
