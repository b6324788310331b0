package circuit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/internal/stripe"
)

// State is a breaker's state.
type State uint8

const (
	// Closed lets calls through and records their outcomes.
	Closed State = iota
	// Open rejects calls with ErrOpen until the open duration has passed.
	Open
	// HalfOpen lets Config.HalfOpenCalls trial calls through; their outcome
	// closes the breaker or opens it again.
	HalfOpen
	// ForcedOpen rejects every call with ErrOpen until Reset.
	ForcedOpen
	// Disabled lets every call through and records nothing.
	Disabled
	// MetricsOnly records outcomes and reports rates, but never rejects.
	MetricsOnly
)

// String returns the state's name: "closed", "open", "half-open",
// "forced-open", "disabled" or "metrics-only".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	case ForcedOpen:
		return "forced-open"
	case Disabled:
		return "disabled"
	case MetricsOnly:
		return "metrics-only"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

var (
	// ErrOpen rejects a call while the breaker is open or forced open.
	ErrOpen = watertight.NewRejection("circuit: open")
	// ErrHalfOpen rejects a call while the breaker is half-open and all its
	// trial calls are in flight.
	ErrHalfOpen = watertight.NewRejection("circuit: half-open, all trial calls in flight")
)

// The state word holds the generation above the state.
const (
	stateBits = 3
	stateMask = 1<<stateBits - 1
)

func stateOf(w uint64) State { return State(w & stateMask) }
func genOf(w uint64) uint64  { return w >> stateBits }

// StateChange describes one change of a breaker's state.
type StateChange struct {
	// Name is the breaker's Config.Name.
	Name string
	// From and To are the states before and after.
	From, To State
	// Reason says why, for logs: "failure rate 60% >= 50% over 20 calls"
	// (with the failures and saturations apart when saturation counts),
	// "consecutive failures: 5 in a row (>= 5)", "open for 30s",
	// "trials: 3 of 5 trial calls failed", "forced". When a rule decided,
	// it begins with the rule's name (Rule.String).
	Reason string
	// Rule is the rule that decided the change: the trip rule for closed →
	// open, RuleTrials for a change out of half-open that the trials
	// decided; RuleNone for timers and manual changes.
	Rule Rule
	// OpenFor is how long the breaker will stay open, when To is Open.
	OpenFor time.Duration
	// Code says why in a stable form for metric labels and alerts: the
	// rule that tripped the breaker (CodeFailureRate, ...), CodeTimer,
	// CodeTrialsSucceeded, CodeTrialsFailed, CodeTrialsTimedOut or
	// CodeManual. The listener's EventStateChange carries it as Code.
	Code string
}

// Breaker is a circuit breaker for one dependency. Build it with New; it is
// safe for concurrent use, and one breaker is meant to be shared by every
// call site of its dependency, whatever their result types.
//
// Reconfigure changes its settings while it is in use, keeping its state.
//
// On the success path of a closed breaker, Allow is an atomic load of the
// state word and one of the settings, and recording an outcome is an atomic
// add and a few loads; nothing allocates, no
// lock is taken, and the clock is read only when slow calls are measured or
// the window is time-based.
type Breaker struct {
	_     [64]byte      // keep the hot, read-mostly state word on a line of its own
	state atomic.Uint64 // generation<<stateBits | State
	_     [56]byte
	win   atomic.Pointer[window]
	// trials is the half-open admission: low 32 bits count the trials
	// issued, high 32 bits hold the generation they belong to.
	trials   atomic.Uint64
	_        [48]byte
	rejected stripe.Counter

	// cfg is the resolved configuration; Reconfigure replaces it (under
	// mu), so each call loads it once and uses that one throughout.
	cfg   atomic.Pointer[settings]
	name  string    // Config.Name, fixed by New
	epoch time.Time // the breaker's clock: now() is time.Since(epoch)
	// The Name and Key of the breaker's events: cfg.Name and "" from New;
	// the registry's Name and the key for a breaker a Registry made.
	evName, evKey string
	// regGen is, for a breaker a Registry made, the registry's
	// configuration generation the breaker was last configured for.
	regGen atomic.Uint64

	mu          sync.Mutex
	timer       *time.Timer
	consecutive int // openings without a close in between
	opens       uint64
	openFor     time.Duration // length of the current opening
	since       int64         // b.now() when the current state began
	timerSeq    uint64        // counts the timers armed: a stale one does nothing
	trialDone   int
	trialFails  int
	trialSlow   int
	trialBad    int // trials that failed, were saturated or were slow
	// What decided the current state, and the evidence a Snapshot shows
	// while open or half-open: the window's counts when the breaker left
	// closed, the trials' when trials opened it again.
	rule     Rule
	reason   string
	evidence counts
	evStreak int64
}

// changes holds the state changes one step made, to report after the lock
// is released: at most two (open, then at once half-open, when OpenDuration
// is negative).
type changes struct {
	ev [2]StateChange
	n  int
}

func (c *changes) add(more changes) {
	for i := range more.n {
		c.ev[c.n] = more.ev[i]
		c.n++
	}
}

// New returns a closed breaker for cfg, or an error that names the first
// invalid field and its rule.
func New(cfg Config) (*Breaker, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	b := &Breaker{name: c.Name, epoch: time.Now(), evName: c.Name}
	b.cfg.Store(newSettings(c))
	b.win.Store(newWindow(&c, 0, 0))
	b.state.Store(uint64(Closed))
	return b, nil
}

// settings is a resolved Config and what is derived from it. Every call
// reads it; the padding keeps it off the cache lines of whatever the
// allocator puts next to it (the window's counters, written by calls).
type settings struct {
	_ [64]byte
	Config
	slow   bool // SlowCallDuration > 0
	streak bool // consecutive failures are counted (a rule or TripWhen needs them)
	_      [64]byte
}

func newSettings(c Config) *settings {
	return &settings{Config: c, slow: c.SlowCallDuration > 0, streak: c.ConsecutiveFailures > 0 || c.TripWhen != nil}
}

// now reads the breaker's monotonic clock, in nanoseconds since New: one
// clock read, where time.Now makes two.
func (b *Breaker) now() int64 { return int64(time.Since(b.epoch)) }

// Name returns the breaker's Config.Name.
func (b *Breaker) Name() string { return b.name }

// State returns the current state.
func (b *Breaker) State() State { return stateOf(b.state.Load()) }

// Permit is the right to make one call, from Allow. Its Done or Record must
// be called exactly once, when the call ends. The zero Permit does nothing.
type Permit struct {
	b     *Breaker
	w     uint64
	start int64 // b.now()+1 at Allow when slow calls are measured, else 0
}

// Allow asks to make one call. It returns a Permit, or ErrOpen (open or
// forced open) or ErrHalfOpen (half-open with all trials in flight); both
// are rejections (watertight.IsRejection).
func (b *Breaker) Allow() (Permit, error) {
	w := b.state.Load()
	switch stateOf(w) {
	case Closed, MetricsOnly:
		p := Permit{b: b, w: w}
		if b.cfg.Load().slow {
			p.start = b.now() + 1
		}
		return p, nil
	case Disabled:
		return Permit{b: b, w: w}, nil
	case HalfOpen:
		if err := b.acquireTrial(w); err != nil {
			return Permit{}, b.reject(err)
		}
		p := Permit{b: b, w: w}
		if b.cfg.Load().slow {
			p.start = b.now() + 1
		}
		return p, nil
	}
	return Permit{}, b.reject(ErrOpen)
}

func (b *Breaker) reject(err error) error {
	b.rejected.Add(1)
	c := b.cfg.Load()
	if c.OnReject != nil {
		c.OnReject(b.name, err)
	}
	if c.Listener != nil {
		b.emitReject(c.Listener, err)
	}
	return err
}

// emitReject sends an EventRejected. It is kept out of line so that the
// rejection path of a breaker without a listener stays as small as it was.
//
//go:noinline
func (b *Breaker) emitReject(l watertight.Listener, err error) {
	watertight.Emit(l, watertight.Event{
		Kind: watertight.EventRejected, Source: source, Name: b.evName, Key: b.evKey, Err: err, Code: rejectCode(err),
	})
}

// source is the Source of the breaker's events.
const source = "circuit"

// acquireTrial takes one half-open trial slot of generation genOf(w).
func (b *Breaker) acquireTrial(w uint64) error {
	g := uint32(genOf(w))
	limit := uint32(b.cfg.Load().HalfOpenCalls)
	for {
		t := b.trials.Load()
		if uint32(t>>32) != g {
			return ErrOpen // the half-open state this caller saw is over
		}
		if uint32(t) >= limit {
			return ErrHalfOpen
		}
		if b.trials.CompareAndSwap(t, t+1) {
			return nil
		}
	}
}

// releaseTrial gives back a trial slot whose call said nothing (ignored).
func (b *Breaker) releaseTrial(w uint64) {
	g := uint32(genOf(w))
	for {
		t := b.trials.Load()
		if uint32(t>>32) != g || uint32(t) == 0 {
			return
		}
		if b.trials.CompareAndSwap(t, t-1) {
			return
		}
	}
}

// Done records the call's outcome. For a slow-call breaker the call's
// duration is measured from Allow.
func (p Permit) Done(o watertight.Outcome) {
	if p.b != nil {
		p.b.record(p.w, p.start, o)
	}
}

// Record classifies err with the breaker's Config.Classify (ctx is the
// caller's context) and records the outcome.
func (p Permit) Record(ctx context.Context, err error) {
	if p.b != nil {
		p.b.record(p.w, p.start, p.b.cfg.Load().Classify(ctx, err))
	}
}

// record is the end of every permitted call.
func (b *Breaker) record(w uint64, start int64, o watertight.Outcome) {
	st := stateOf(w)
	if st == Disabled {
		return
	}
	cfg := b.cfg.Load()
	var code uint32
	switch o {
	case watertight.Success:
	case watertight.Failure:
		code = codeFail
	case watertight.Saturated:
		if cfg.CountSaturation {
			code = codeSat
			break
		}
		fallthrough
	default: // Ignored: says nothing about the dependency.
		if st == HalfOpen {
			b.releaseTrial(w)
		}
		return
	}
	var now int64
	if cfg.slow {
		now = b.now()
		// A call allowed before Reconfigure turned slow calls on was not
		// timed (start 0): it is not counted slow.
		if start != 0 && time.Duration(now-start+1) >= cfg.SlowCallDuration {
			code |= codeSlow
		}
	}
	if st == HalfOpen {
		b.recordTrial(w, code)
		return
	}
	win := b.win.Load()
	if win.gen != genOf(w) {
		return // a call from an earlier generation
	}
	var streak int64
	if cfg.streak {
		if code&(codeFail|codeSat) != 0 {
			streak = win.streak.Add(1)
		} else if win.streak.Load() != 0 {
			win.streak.Store(0)
		}
	}
	var c counts
	var bad bool
	if win.buckets != nil {
		if !cfg.slow {
			now = b.now()
		}
		c, bad = win.addTime(now, code)
	} else {
		c, bad = win.addCount(code, uint64(cfg.MinCalls))
	}
	if !bad || st != Closed {
		return
	}
	if rule, reason := cfg.tripReason(c, streak); rule != RuleNone {
		b.trip(w, rule, reason)
	}
}

func percent(n, of int64) float64 {
	if of <= 0 {
		return 0
	}
	return float64(n) * 100 / float64(of)
}

// trip opens a closed breaker whose state word is still w.
func (b *Breaker) trip(w uint64, rule Rule, reason string) {
	b.mu.Lock()
	if b.state.Load() != w {
		b.mu.Unlock()
		return
	}
	evs := b.setLocked(Open, rule, reason)
	b.mu.Unlock()
	b.emit(evs)
}

// recordTrial counts one trial outcome and decides, when it can, whether to
// close or open again.
func (b *Breaker) recordTrial(w uint64, code uint32) {
	b.mu.Lock()
	if b.state.Load() != w {
		b.mu.Unlock()
		return
	}
	b.trialDone++
	if code&(codeFail|codeSat) != 0 {
		b.trialFails++
	}
	if code&codeSlow != 0 {
		b.trialSlow++
	}
	if code != 0 {
		b.trialBad++
	}
	evs := b.decideTrialsLocked()
	b.mu.Unlock()
	b.emit(evs)
}

// decideTrialsLocked closes or opens a half-open breaker again when its
// trials so far decide it; it returns no change when they do not yet. b.mu
// is held.
func (b *Breaker) decideTrialsLocked() changes {
	cfg := b.cfg.Load()
	n := cfg.HalfOpenCalls
	if k := cfg.HalfOpenSuccesses; k > 0 {
		switch ok := b.trialDone - b.trialBad; {
		case ok >= k:
			return b.setLocked(Closed, RuleTrials, fmt.Sprintf("trials: %d of %d trial calls succeeded (>= %d)", ok, n, k))
		case b.trialBad > n-k:
			return b.reopenLocked(fmt.Sprintf("trials: %d of %d trial calls failed or were slow, so %d successes can no longer be reached", b.trialBad, n, k))
		}
		return changes{}
	}
	switch {
	case cfg.FailureRateThreshold > 0 && percent(int64(b.trialFails), int64(n)) >= cfg.FailureRateThreshold:
		return b.reopenLocked(fmt.Sprintf("trials: %d of %d trial calls failed", b.trialFails, n))
	case cfg.slow && percent(int64(b.trialSlow), int64(n)) >= cfg.SlowCallRateThreshold:
		return b.reopenLocked(fmt.Sprintf("trials: %d of %d trial calls were slow", b.trialSlow, n))
	case b.trialDone >= n:
		return b.setLocked(Closed, RuleTrials, fmt.Sprintf("trials: %d trial calls ended below the thresholds", n))
	}
	return changes{}
}

// reopenLocked opens a half-open breaker again on its trials' evidence.
// b.mu is held.
func (b *Breaker) reopenLocked(reason string) changes {
	// Taken first: with no open wait, setLocked starts the next trials.
	evidence := counts{calls: int64(b.trialDone), fails: int64(b.trialFails), slows: int64(b.trialSlow)}
	b.evidence, b.evStreak = evidence, 0
	return b.setLocked(Open, RuleTrials, reason)
}

// setLocked moves to state to, starting a new generation; b.mu is held. It
// prepares everything the new state needs before publishing it.
func (b *Breaker) setLocked(to State, rule Rule, reason string) changes {
	old := b.state.Load()
	gen := genOf(old) + 1
	w := gen<<stateBits | uint64(to)
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	cfg := b.cfg.Load()
	b.since = b.now()
	ev := StateChange{Name: b.name, From: stateOf(old), To: to, Reason: reason, Rule: rule, Code: changeCode(rule, stateOf(old), to)}
	// Leaving closed keeps the window's counts as the evidence a Snapshot
	// shows; a half-open breaker keeps what opened it.
	switch from := stateOf(old); {
	case to == Closed || to == MetricsOnly || to == Disabled:
		b.evidence, b.evStreak = counts{}, 0
	case from == Closed || from == MetricsOnly:
		if win := b.win.Load(); win.gen == genOf(old) {
			b.evidence, b.evStreak = win.totals(b.since), win.streak.Load()
		}
	}
	if to != HalfOpen || stateOf(old) != Open {
		b.rule, b.reason = rule, reason
	}
	var evs changes
	switch to {
	case Closed, MetricsOnly:
		b.consecutive = 0
		b.win.Store(newWindow(&cfg.Config, gen, b.since))
	case Open:
		b.opens++
		b.consecutive++
		if cfg.OpenDuration < 0 {
			// No wait: report the opening, then go half-open at once.
			b.openFor = 0
			b.state.Store(w)
			evs.ev[0], evs.n = ev, 1
			evs.add(b.setLocked(HalfOpen, RuleNone, "open for 0s (OpenDuration < 0: no wait)"))
			return evs
		}
		d := cfg.openDuration(b.consecutive)
		ev.OpenFor = d
		b.openFor = d
		b.armLocked(d, w, b.halfOpen)
	case HalfOpen:
		b.trials.Store(uint64(uint32(gen)) << 32)
		b.trialDone, b.trialFails, b.trialSlow, b.trialBad = 0, 0, 0, 0
		if cfg.MaxHalfOpenWait > 0 {
			b.armLocked(cfg.MaxHalfOpenWait, w, b.halfOpenExpired)
		}
	case ForcedOpen:
		b.opens++
	}
	b.state.Store(w)
	evs.ev[0], evs.n = ev, 1
	return evs
}

// openDuration is the length of the n-th consecutive opening, spread by
// OpenJitter (backoff.Spread, or the same draw from Rand when it is set).
func (cfg *settings) openDuration(n int) time.Duration {
	if cfg.OpenDuration < 0 {
		return 0 // no wait
	}
	d := float64(cfg.OpenDuration)
	for i := 1; i < n && d < float64(cfg.MaxOpenDuration); i++ {
		d *= cfg.OpenDurationMultiplier
	}
	grown := time.Duration(min(d, float64(cfg.MaxOpenDuration)))
	spread := grown
	switch j := cfg.OpenJitter; {
	case j <= 0: // resolved: negative means no jitter
	case cfg.Rand == nil:
		spread = backoff.Spread(grown, j)
	default:
		spread = time.Duration(float64(grown) * (1 - j + 2*j*cfg.Rand()))
	}
	// The cap holds after jitter too.
	return max(min(spread, cfg.MaxOpenDuration), 1)
}

// armLocked starts the current state's timer, w its state word: f(w, seq)
// runs after d. A timer fires for nothing once the state or its timer has
// changed (Reconfigure re-arms one): f checks both. b.mu is held.
func (b *Breaker) armLocked(d time.Duration, w uint64, f func(w, seq uint64)) {
	b.timerSeq++
	seq := b.timerSeq
	b.timer = time.AfterFunc(d, func() { f(w, seq) })
}

// halfOpen is the open timer's end: open → half-open.
func (b *Breaker) halfOpen(w, seq uint64) {
	b.mu.Lock()
	if b.state.Load() != w || b.timerSeq != seq {
		b.mu.Unlock()
		return
	}
	evs := b.setLocked(HalfOpen, RuleNone, "open for "+b.openFor.String())
	b.mu.Unlock()
	b.emit(evs)
}

// halfOpenExpired ends a half-open state whose trials did not all end within
// MaxHalfOpenWait: it decides on the trials that did end (closing if their
// rates are below the thresholds), and opens again if none did — the
// dependency did not answer, or a permit was lost.
func (b *Breaker) halfOpenExpired(w, seq uint64) {
	b.mu.Lock()
	if b.state.Load() != w || b.timerSeq != seq {
		b.mu.Unlock()
		return
	}
	var evs changes
	n := int64(b.trialDone)
	cfg := b.cfg.Load()
	switch {
	case n == 0:
		evs = b.reopenLocked(fmt.Sprintf("trials: no trial call ended within %v", cfg.MaxHalfOpenWait))
		evs.ev[0].Code = CodeTrialsTimedOut
	case cfg.HalfOpenSuccesses > 0:
		// Enough successes would have closed it already.
		evs = b.reopenLocked(fmt.Sprintf("trials: %d of the %d trial calls that ended within %v succeeded (< %d)", b.trialDone-b.trialBad, n, cfg.MaxHalfOpenWait, cfg.HalfOpenSuccesses))
	case cfg.FailureRateThreshold > 0 && percent(int64(b.trialFails), n) >= cfg.FailureRateThreshold:
		evs = b.reopenLocked(fmt.Sprintf("trials: %d of the %d trial calls that ended within %v failed", b.trialFails, n, cfg.MaxHalfOpenWait))
	case cfg.slow && percent(int64(b.trialSlow), n) >= cfg.SlowCallRateThreshold:
		evs = b.reopenLocked(fmt.Sprintf("trials: %d of the %d trial calls that ended within %v were slow", b.trialSlow, n, cfg.MaxHalfOpenWait))
	default:
		evs = b.setLocked(Closed, RuleTrials, fmt.Sprintf("trials: %d trial calls ended within %v, below the thresholds", n, cfg.MaxHalfOpenWait))
	}
	b.mu.Unlock()
	b.emit(evs)
}

// emit reports state changes, in order, to OnStateChange and the Listener.
// It is called after b.mu is released.
func (b *Breaker) emit(evs changes) {
	if evs.n == 0 {
		return
	}
	cfg := b.cfg.Load()
	for _, ev := range evs.ev[:evs.n] {
		if cfg.OnStateChange != nil {
			cfg.OnStateChange(ev)
		}
		if cfg.Listener != nil {
			watertight.Emit(cfg.Listener, watertight.Event{
				Kind: watertight.EventStateChange, Source: source, Name: b.evName, Key: b.evKey,
				From: ev.From.String(), To: ev.To.String(), Reason: ev.Reason, Delay: ev.OpenFor, Code: ev.Code,
			})
		}
	}
}

// set moves to a manual state (or back to closed).
func (b *Breaker) set(to State, reason string) {
	b.mu.Lock()
	evs := b.setLocked(to, RuleNone, reason)
	evs.ev[0].Code = CodeManual // ForceHalfOpen from open is not the timer
	b.mu.Unlock()
	b.emit(evs)
}

// ForceOpen holds the breaker open, rejecting every call, until Reset or
// another manual change.
func (b *Breaker) ForceOpen() { b.set(ForcedOpen, "forced") }

// Disable lets every call through without recording, until Reset or another
// manual change.
func (b *Breaker) Disable() { b.set(Disabled, "disabled") }

// SetMetricsOnly makes the breaker record outcomes and report rates without
// ever rejecting, until Reset or another manual change.
func (b *Breaker) SetMetricsOnly() { b.set(MetricsOnly, "metrics only") }

// ForceHalfOpen moves the breaker to half-open now, from any state, so that
// an operator can probe a dependency without waiting for the open duration
// (or after ForceOpen): the next HalfOpenCalls calls are trials, and their
// outcomes close the breaker or open it again as usual, MaxHalfOpenWait
// included.
func (b *Breaker) ForceHalfOpen() { b.set(HalfOpen, "forced half-open") }

// Reset closes the breaker with an empty window and forgets consecutive
// openings.
func (b *Breaker) Reset() { b.set(Closed, "reset") }

// Reconfigure applies cfg to the breaker while it is in use, so that every
// caller holding the breaker sees the new settings. cfg is validated and
// resolved as New does; an invalid cfg is an error naming the field, and
// leaves the breaker unchanged. cfg.Name is ignored: the breaker keeps the
// name New gave it.
//
// The state is kept, and a reconfiguration is not a state change (no
// OnStateChange, no EventStateChange):
//
//   - closed or metrics-only: the window keeps its outcomes when its shape
//     is unchanged (same WindowType, and the same WindowSize for a count
//     window, WindowDuration and WindowBuckets for a time window);
//     otherwise it starts empty in the new shape. The new thresholds and
//     MinCalls apply at once: a closed breaker whose kept window breaks
//     them opens (a state change, reported as usual). Slow calls are
//     measured for the calls allowed from now on.
//   - open: stays open; the open time is computed anew from the new
//     timings (OpenDuration, multiplier, cap, jitter, for the same count of
//     consecutive openings) and counted from when the breaker opened, so it
//     goes half-open at that new time — at once if it has passed.
//   - half-open: the trials under way go on; the new HalfOpenCalls and
//     thresholds decide (at once, if the trials that have ended already
//     do), and MaxHalfOpenWait is counted from when the breaker went
//     half-open.
//   - forced open, disabled: unchanged until Reset.
//
// The consecutive-openings count and the totals (Rejected, Opens) carry on.
// Callbacks for a state change that the new settings decide at once run
// after the lock is released, as always.
func (b *Breaker) Reconfigure(cfg Config) error {
	c, err := cfg.resolve()
	if err != nil {
		return err
	}
	c.Name = b.name
	next := newSettings(c)
	b.mu.Lock()
	old := b.cfg.Load()
	b.cfg.Store(next)
	w := b.state.Load()
	now := b.now()
	var evs changes
	var judge *window
	switch st := stateOf(w); st {
	case Closed, MetricsOnly:
		win := b.win.Load()
		if !sameShape(&old.Config, &c) {
			win = newWindow(&c, genOf(w), now)
			b.win.Store(win)
		}
		if st == Closed && win.gen == genOf(w) {
			judge = win
		}
	case Open:
		d := next.openDuration(b.consecutive)
		b.openFor = d
		if b.timer != nil {
			b.timer.Stop()
		}
		b.armLocked(max(time.Duration(b.since+int64(d)-now), 0), w, b.halfOpen)
	case HalfOpen:
		if b.timer != nil {
			b.timer.Stop()
			b.timer = nil
			b.timerSeq++ // a fired timer waiting for mu does nothing
		}
		if c.MaxHalfOpenWait > 0 {
			b.armLocked(max(time.Duration(b.since+int64(c.MaxHalfOpenWait)-now), 0), w, b.halfOpenExpired)
		}
		evs = b.decideTrialsLocked()
	}
	b.mu.Unlock()
	b.emit(evs)
	if judge != nil {
		// The window may already break the new rules or reach a lower
		// MinCalls: judge it now, as the next outcome would — with no lock
		// held, for TripWhen; trip checks that the state is still w.
		if rule, reason := next.tripReason(judge.totals(b.now()), judge.streak.Load()); rule != RuleNone {
			b.trip(w, rule, reason)
		}
	}
	return nil
}

// sameShape reports whether a window made for a holds what one made for b
// would: same type and size.
func sameShape(a, b *Config) bool {
	if a.WindowType != b.WindowType {
		return false
	}
	if a.WindowType == TimeBased {
		return a.WindowDuration == b.WindowDuration && a.WindowBuckets == b.WindowBuckets
	}
	return a.WindowSize == b.WindowSize
}

// Snapshot is a breaker's state and counts at one moment.
type Snapshot struct {
	// Name is the breaker's Config.Name.
	Name string
	// State is the current state.
	State State
	// Calls, Failures, SlowCalls and Saturated count outcomes. While
	// closed or metrics-only they are the current window's. While open,
	// forced open or half-open they keep the evidence: the window's counts
	// when the breaker left closed or, when half-open trials opened it
	// again, the trials' (Calls the trials that ended). Disabled: zero.
	// Saturated outcomes are recorded only when Config.CountSaturation is
	// set; otherwise they are ignored and Saturated stays zero.
	Calls, Failures, SlowCalls, Saturated int64
	// ConsecutiveFailures is the current streak of failures while closed
	// (the streak at the trip while open or half-open). It is counted only
	// when Config.ConsecutiveFailures or Config.TripWhen is set.
	ConsecutiveFailures int64
	// FailureRate is the percentage compared with FailureRateThreshold
	// (failures, plus saturations when CountSaturation is set); SlowCallRate
	// the one compared with SlowCallRateThreshold; both over the counts
	// above. Zero without calls.
	FailureRate, SlowCallRate float64
	// Rule and Reason say what decided the current state: while open or
	// half-open, the rule that opened the breaker and why, in the words of
	// its StateChange (a forced state: RuleNone and "forced"); while
	// closed, what closed it last ("trials: ...", "reset"; empty since New).
	Rule   Rule
	Reason string
	// Rejected counts the calls rejected since New.
	Rejected uint64
	// Opens counts the times the breaker opened (including forced) since New.
	Opens uint64
	// TrialsInFlight counts the trial calls let through in the current
	// half-open state and not yet ended.
	TrialsInFlight int
	// OpenLeft, while open (not forced open), is how long until the
	// breaker goes half-open; zero in any other state. A caller refused
	// by ErrOpen can tell its own callers to come back then (a gateway's
	// Retry-After).
	OpenLeft time.Duration
	// TrialCalls, TrialFailures and TrialSlowCalls count the trial calls
	// that ended in the current half-open state, those that failed (or
	// were counted saturations), and those that were slow: the trials so
	// far, beside the evidence that opened the breaker.
	TrialCalls, TrialFailures, TrialSlowCalls int
}

// Snapshot returns the current state and counts. It takes the breaker's lock
// briefly; it is meant for metrics collection, not for every call.
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	w := b.state.Load()
	cfg := b.cfg.Load()
	s := Snapshot{Name: b.name, State: stateOf(w), Opens: b.opens, Rule: b.rule, Reason: b.reason}
	c, streak := b.evidence, b.evStreak
	if s.State == HalfOpen {
		s.TrialsInFlight = int(uint32(b.trials.Load())) - b.trialDone
		s.TrialCalls, s.TrialFailures, s.TrialSlowCalls = b.trialDone, b.trialFails, b.trialSlow
	}
	if s.State == Open {
		s.OpenLeft = max(time.Duration(b.since+int64(b.openFor)-b.now()), 0)
	}
	b.mu.Unlock()
	s.Rejected = b.rejected.Load()
	if s.State == Closed || s.State == MetricsOnly {
		c, streak = counts{}, 0
		if win := b.win.Load(); win.gen == genOf(w) {
			c, streak = win.totals(b.now()), win.streak.Load()
		}
	}
	s.Calls, s.Failures, s.SlowCalls, s.Saturated = c.calls, c.fails, c.slows, c.sats
	s.ConsecutiveFailures = streak
	fails := c.fails
	if cfg.CountSaturation {
		fails += c.sats
	}
	s.FailureRate = percent(fails, c.calls)
	s.SlowCallRate = percent(c.slows, c.calls)
	return s
}

// Enter implements watertight.Policy: it calls Allow.
func (b *Breaker) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	p, err := b.Allow()
	if err != nil {
		return ctx, watertight.Ticket{}, err
	}
	return ctx, watertight.Ticket{Seq: p.w, Start: p.start}, nil
}

// Exit implements watertight.Policy: it classifies err with Config.Classify
// and records the outcome. It returns err unchanged.
func (b *Breaker) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	b.record(t.Seq, t.Start, b.cfg.Load().Classify(ctx, err))
	return err
}

// Call calls fn if the breaker allows it and records the outcome (classified
// with Config.Classify); a rejection is returned without calling fn. If fn
// panics, the call is recorded as a failure and the panic goes on.
func Call[T any](ctx context.Context, b *Breaker, fn func(context.Context) (T, error)) (T, error) {
	p, err := b.Allow()
	if err != nil {
		var zero T
		return zero, err
	}
	done := false
	defer func() {
		if !done {
			p.Done(watertight.Failure)
		}
	}()
	v, err := fn(ctx)
	done = true
	p.Record(ctx, err)
	return v, err
}
