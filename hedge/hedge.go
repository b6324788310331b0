package hedge

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/internal/latency"
	"github.com/watertight-go/watertight/internal/stripe"
)

// ErrLost is the cause (context.Cause) with which Do cancels the context of
// an attempt that lost the race: another attempt answered first. It matches
// context.Canceled with errors.Is, so a loser's error counts as a
// cancellation (watertight.Classify: Ignored), not as a failure of the
// dependency.
var ErrLost = fmt.Errorf("hedge: lost the race, another attempt answered first: %w", context.Canceled)

// Defaults used for zero fields of Config.
const (
	DefaultMaxHedges        = 1
	DefaultMinSamples       = 100
	DefaultWindow           = 10 * time.Second
	DefaultOverloadCooldown = time.Second
	// DefaultMinDelay is DefaultConfig's floor: the 10 ms after which Dean
	// and Barroso's BigTable client sent its backup requests.
	DefaultMinDelay = 10 * time.Millisecond
	// DefaultPercentile is DefaultConfig's percentile: hedging at the p95
	// sends about 5% more requests.
	DefaultPercentile = 0.95
)

// MaxMaxHedges is the largest Config.MaxHedges.
const MaxMaxHedges = 16

// The reasons a hedge was suppressed, in EventHedgeSuppressed's Reason.
const (
	// ReasonBudget: Config.Budget refused the hedge.
	ReasonBudget = "budget"
	// ReasonBreaker: Config.Breaker was not closed.
	ReasonBreaker = "breaker"
	// ReasonBulkhead: Config.Bulkhead was saturated.
	ReasonBulkhead = "bulkhead"
	// ReasonOverload: an attempt of the call, or of a recent call, carried
	// the overloaded signal (watertight.IsOverloaded).
	ReasonOverload = "overload"
)

type reason uint8

const (
	noReason reason = iota
	rBudget
	rBreaker
	rBulkhead
	rOverload
	numReasons
)

var reasonNames = [numReasons]string{"", ReasonBudget, ReasonBreaker, ReasonBulkhead, ReasonOverload}
var reasonErrs = [numReasons]error{nil, budget.ErrExhausted, circuit.ErrOpen, bulkhead.ErrFull, watertight.ErrOverloaded}

// refreshEvery is how often, at most, a percentile policy recomputes its
// delay from the latencies.
const refreshEvery = 100 * time.Millisecond

// Config configures a Policy. There is no useful zero value: a hedge needs
// a delay, fixed (Delay) or tracked (Percentile). DefaultConfig hedges at
// the p95 with a 10 ms floor.
type Config struct {
	// Name labels the policy's events and Snapshot. It may be empty.
	Name string

	// Delay is how long an attempt has to answer before the next one is
	// sent. Without Percentile it is the fixed delay and must be > 0. With
	// Percentile it is the delay used until MinSamples latencies are known
	// (the cold start); zero then means MinDelay. Negative is an error.
	Delay time.Duration
	// Percentile, if not zero, tracks the latencies of recent attempts and
	// sends a hedge when an attempt has taken longer than this percentile
	// of them: 0.95 hedges the slowest 5% or so. Must be in [0, 1); zero
	// means a fixed Delay. A percentile policy also learns how late its
	// timer fires (Go's timers fire up to a millisecond late on Linux) and
	// arms it that much earlier, so that the share of calls hedged matches
	// the percentile.
	Percentile float64
	// MinDelay is a floor under the tracked delay: hedging sooner rarely
	// pays (a hedge cannot beat the network's round trip) and costs the
	// most. Zero means no floor; negative is an error. With Percentile,
	// Delay or MinDelay must be > 0, for the cold start.
	MinDelay time.Duration
	// MinSamples is how many latencies the tracker must hold before the
	// percentile is used. Zero means DefaultMinSamples (100); negative
	// means one.
	MinSamples int
	// Window is how far back the latency tracker looks (Percentile only):
	// it forgets a fifth of it at a time. Zero means DefaultWindow (10s);
	// negative is an error.
	Window time.Duration

	// MaxHedges is how many extra attempts a call may make, each one Delay
	// after the previous. Zero means DefaultMaxHedges (1); negative means
	// none: Do calls the function once. At most MaxMaxHedges.
	MaxHedges int
	// Idempotent says that every call through the policy is safe to send
	// twice. If false (the default), only calls whose context is marked
	// with retry.Idempotent or retry.WithIdempotencyKey are hedged — the
	// rule of the retry package; the others run once, unhedged, and are
	// counted in Snapshot.NotIdempotent.
	Idempotent bool

	// Budget, if not nil, must grant every hedge (Withdraw); every hedged
	// call (an idempotent one) deposits into it once. Give the hedge policy
	// a Budget of its own, with the share of extra requests you accept
	// (budget.Config.Ratio 0.05 for 5%), rather than the retry policy's:
	// both deposit once per call.
	Budget *budget.Budget
	// Breaker, if not nil, is the dependency's breaker: hedges are sent only
	// while it is closed (or disabled, or metrics-only). A dependency that
	// is failing gets no extra load.
	Breaker *circuit.Breaker
	// Bulkhead, if not nil, is the bulkhead in front of the dependency:
	// hedges are not sent while it has no free permit or has callers
	// waiting for one.
	Bulkhead *bulkhead.Bulkhead
	// OverloadCooldown is how long the whole policy stops hedging after an
	// attempt failed with the overloaded signal (watertight.IsOverloaded):
	// the callee, or a layer below, says more load would hurt. The call
	// that saw the signal sends no further hedge whatever this says. Zero
	// means DefaultOverloadCooldown (1s); negative means only that call.
	OverloadCooldown time.Duration

	// Listener receives EventHedgeSent, EventHedgeWon and
	// EventHedgeSuppressed. If nil, no events.
	Listener watertight.Listener
}

// DefaultConfig returns a configuration that hedges at the p95 of the
// latencies of the last ten seconds, never sooner than 10 ms (also the delay
// of the first 100 calls), with one hedge per call, for calls marked
// idempotent.
func DefaultConfig() Config {
	return Config{
		Percentile:       DefaultPercentile,
		MinDelay:         DefaultMinDelay,
		MinSamples:       DefaultMinSamples,
		Window:           DefaultWindow,
		MaxHedges:        DefaultMaxHedges,
		OverloadCooldown: DefaultOverloadCooldown,
	}
}

func (c Config) resolve() (Config, error) {
	bad := func(field, rule string, got any) error {
		return fmt.Errorf("hedge: Config.%s %s, got %v", field, rule, got)
	}
	if c.Delay < 0 {
		return c, bad("Delay", "must be >= 0", c.Delay)
	}
	if c.MinDelay < 0 {
		return c, bad("MinDelay", "must be >= 0", c.MinDelay)
	}
	if math.IsNaN(c.Percentile) || c.Percentile < 0 || c.Percentile >= 1 {
		return c, bad("Percentile", "must be in [0, 1) (0 means a fixed Delay)", c.Percentile)
	}
	if c.Percentile == 0 && c.Delay == 0 {
		return c, bad("Delay", "must be > 0 without Percentile", c.Delay)
	}
	if c.Percentile > 0 && c.Delay == 0 && c.MinDelay == 0 {
		return c, fmt.Errorf("hedge: Config.Delay or Config.MinDelay must be > 0 with Percentile (the delay before MinSamples latencies are known), got %v and %v", c.Delay, c.MinDelay)
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultMinSamples
	}
	if c.MinSamples < 0 {
		c.MinSamples = 1
	}
	if c.Window < 0 {
		return c, bad("Window", "must be >= 0 (0 means 10s)", c.Window)
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxHedges > MaxMaxHedges {
		return c, bad("MaxHedges", fmt.Sprintf("must be at most %d", MaxMaxHedges), c.MaxHedges)
	}
	if c.MaxHedges == 0 {
		c.MaxHedges = DefaultMaxHedges
	}
	if c.OverloadCooldown == 0 {
		c.OverloadCooldown = DefaultOverloadCooldown
	}
	return c, nil
}

// Policy sends hedged requests: see the package documentation and Do. Build
// it with New; it is safe for concurrent use, and one Policy is meant to be
// shared by every call to one dependency, whatever their result types. A
// nil *Policy is valid: Do then calls the function once.
type Policy struct {
	cfg       Config
	off       bool          // MaxHedges < 0
	cold      time.Duration // the fixed delay, or the cold-start delay
	tr        *latency.Tracker
	epoch     time.Time // the clock of the overload cool-down
	cooldown  int64     // ns; <= 0: none
	maxHedges int

	delayNs   atomic.Int64 // current delay
	refreshAt atomic.Int64 // tracker stamp of the next recomputation
	lateNs    atomic.Int64 // how late the hedge timer fires, on average (Percentile only)
	overUntil atomic.Int64 // ns since epoch until which hedges are off; 0: never set

	timers sync.Pool // *hedgeTimer, stopped and idle

	calls      stripe.Counter
	notIdem    atomic.Uint64
	hedged     atomic.Uint64
	sent       atomic.Uint64
	won        atomic.Uint64
	suppressed [numReasons]atomic.Uint64
}

// New returns a Policy for cfg, or an error naming the invalid field and
// its rule.
func New(cfg Config) (*Policy, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	p := &Policy{
		cfg:       c,
		off:       c.MaxHedges < 0,
		cold:      max(c.Delay, c.MinDelay),
		epoch:     time.Now(),
		cooldown:  int64(c.OverloadCooldown),
		maxHedges: c.MaxHedges,
	}
	if c.Percentile == 0 {
		p.cold = c.Delay // MinDelay floors only a tracked delay
	} else {
		p.tr, err = latency.New(latency.Config{Window: c.Window})
		if err != nil {
			return nil, fmt.Errorf("hedge: Config.Window: %w", err)
		}
	}
	p.delayNs.Store(int64(p.cold))
	return p, nil
}

// Config returns the policy's configuration, with defaults filled in.
func (p *Policy) Config() Config { return p.cfg }

// Delay returns the delay the policy waits now before sending a hedge: the
// fixed Delay, or the tracked percentile (recomputed at most every 100 ms),
// or the cold-start delay. It is 0 for a nil policy or one that never
// hedges.
func (p *Policy) Delay() time.Duration {
	if p == nil || p.off {
		return 0
	}
	if p.tr == nil {
		return p.cold
	}
	return p.delay(int64(p.tr.Now()))
}

// delay returns the current delay, recomputing it when it is due.
func (p *Policy) delay(now int64) time.Duration {
	if next := p.refreshAt.Load(); now >= next && p.refreshAt.CompareAndSwap(next, now+int64(refreshEvery)) {
		d := p.cold
		if q, n := p.tr.QuantileCount(p.cfg.Percentile); n >= uint64(p.cfg.MinSamples) {
			d = max(q, p.cfg.MinDelay)
		}
		p.delayNs.Store(int64(d))
		return d
	}
	return time.Duration(p.delayNs.Load())
}

// armFor returns how long to arm the hedge timer for a delay of d: d less
// the timer's average lateness, so that hedges go out when due. Go's timers
// fire late by up to a millisecond on an idle Linux machine (the poller
// sleeps in whole milliseconds); against a latency distribution whose tail
// falls steeply, that alone would hedge a fifth fewer calls than the
// percentile says. Only a percentile policy learns the lateness: it reads
// the clock when a hedge is due anyway.
func (p *Policy) armFor(d time.Duration) time.Duration {
	if late := time.Duration(p.lateNs.Load()); late > 0 {
		return max(d-late, d/2)
	}
	return d
}

// noteLate folds one observed lateness of the hedge timer into the
// average (an exponentially weighted mean, weight 1/8; concurrent updates
// may lose one another, which only slows the average down).
func (p *Policy) noteLate(late time.Duration) {
	late = min(max(late, 0), 10*time.Millisecond) // a scheduler pause is not the timer's lateness
	old := p.lateNs.Load()
	p.lateNs.Store(old + (int64(late)-old)/8)
}

// now returns the time on the cool-down clock.
func (p *Policy) now() int64 { return int64(time.Since(p.epoch)) }

// overloaded notes the overloaded signal: hedges are off for the cool-down.
func (p *Policy) overloaded() {
	if p.cooldown > 0 {
		p.overUntil.Store(p.now() + p.cooldown)
	}
}

// suppress returns why a hedge must not be sent now, or noReason; when it
// returns noReason, the budget has granted the hedge. sawOverload says the
// call itself saw the overloaded signal.
func (p *Policy) suppress(sawOverload bool) reason {
	if sawOverload {
		return rOverload
	}
	if until := p.overUntil.Load(); until != 0 && p.now() < until {
		return rOverload
	}
	if b := p.cfg.Breaker; b != nil {
		switch b.State() {
		case circuit.Open, circuit.HalfOpen, circuit.ForcedOpen:
			return rBreaker
		}
	}
	if h := p.cfg.Bulkhead; h != nil {
		if s := h.Snapshot(); s.Available == 0 || s.Waiting > 0 {
			return rBulkhead
		}
	}
	if !p.cfg.Budget.Withdraw() {
		return rBudget
	}
	return noReason
}

func (p *Policy) emit(kind watertight.EventKind, n int, d time.Duration, r reason) {
	if p.cfg.Listener == nil {
		return
	}
	watertight.Emit(p.cfg.Listener, watertight.Event{
		Kind:    kind,
		Source:  "hedge",
		Name:    p.cfg.Name,
		Attempt: n,
		Delay:   d,
		Reason:  reasonNames[r],
		Err:     reasonErrs[r],
		Code:    reasonNames[r], // the Reason constants are the Code values
	})
}

// Snapshot is a Policy's counters at one moment, read one by one: under
// load they may not add up exactly.
type Snapshot struct {
	// Name is Config.Name.
	Name string
	// Calls is the number of calls made through Do since New, hedged or
	// not.
	Calls uint64
	// NotIdempotent is the number of calls that were not hedged because
	// neither Config.Idempotent nor their context said they were safe to
	// send twice.
	NotIdempotent uint64
	// HedgedCalls is the number of calls that sent at least one hedge.
	HedgedCalls uint64
	// Sent is the number of hedges sent: the extra attempts.
	Sent uint64
	// Won is the number of hedges that answered first.
	Won uint64
	// SuppressedBudget, SuppressedBreaker, SuppressedBulkhead and
	// SuppressedOverload count the hedges that were due but not sent, by
	// reason.
	SuppressedBudget, SuppressedBreaker, SuppressedBulkhead, SuppressedOverload uint64
	// Delay is the current delay (Policy.Delay).
	Delay time.Duration
	// Overloaded reports whether the policy is in its overload cool-down.
	Overloaded bool
}

// Suppressed returns the number of hedges suppressed, all reasons together.
func (s Snapshot) Suppressed() uint64 {
	return s.SuppressedBudget + s.SuppressedBreaker + s.SuppressedBulkhead + s.SuppressedOverload
}

// ExtraPercent returns the extra attempts as a percentage of the calls:
// 100·Sent/Calls, or 0 before any call.
func (s Snapshot) ExtraPercent() float64 {
	if s.Calls == 0 {
		return 0
	}
	return 100 * float64(s.Sent) / float64(s.Calls)
}

// Snapshot returns the policy's counters. A nil Policy returns the zero
// Snapshot.
func (p *Policy) Snapshot() Snapshot {
	if p == nil {
		return Snapshot{}
	}
	until := p.overUntil.Load()
	return Snapshot{
		Name:               p.cfg.Name,
		Calls:              p.calls.Load(),
		NotIdempotent:      p.notIdem.Load(),
		HedgedCalls:        p.hedged.Load(),
		Sent:               p.sent.Load(),
		Won:                p.won.Load(),
		SuppressedBudget:   p.suppressed[rBudget].Load(),
		SuppressedBreaker:  p.suppressed[rBreaker].Load(),
		SuppressedBulkhead: p.suppressed[rBulkhead].Load(),
		SuppressedOverload: p.suppressed[rOverload].Load(),
		Delay:              p.Delay(),
		Overloaded:         until != 0 && p.now() < until,
	}
}

// hedgeTimer is a timer that Do arms for the first hedge of a call, kept in
// a pool so that a call whose first attempt answers in time allocates no
// timer. Its function calls the fire method of the call it is armed for.
type hedgeTimer struct {
	t        *time.Timer
	target   atomic.Pointer[hook]
	poolable bool // created outside a testing/synctest bubble
}

// hook is what a hedgeTimer points at: the call, behind an interface, since
// calls are generic.
type hook struct{ f interface{ fire() } }

func (h *hedgeTimer) run() {
	if t := h.target.Load(); t != nil {
		t.f.fire()
	}
}

// bubbleHorizon tells a timer created inside a testing/synctest bubble,
// whose clock starts at midnight UTC on 1 January 2000, from one created on
// the real clock. A bubble's timer must never be reset outside its bubble
// (the runtime stops the program), so such timers are not pooled: a test
// pays for a timer per call; a program whose clock is set before 2015 too.
var bubbleHorizon = time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC)

// getTimer returns a stopped timer from the pool, or a new one.
func (p *Policy) getTimer() *hedgeTimer {
	if h, ok := p.timers.Get().(*hedgeTimer); ok {
		return h
	}
	h := &hedgeTimer{poolable: !time.Now().Before(bubbleHorizon)}
	h.t = time.AfterFunc(time.Hour, h.run)
	h.t.Stop()
	return h
}

// putTimer returns a stopped timer whose function will not run to the pool.
func (p *Policy) putTimer(h *hedgeTimer) {
	if h.poolable {
		h.target.Store(nil)
		p.timers.Put(h)
	}
}
