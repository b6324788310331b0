package circuit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
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
	// "open for 30s", "3 of 5 trial calls failed", "forced".
	Reason string
	// OpenFor is how long the breaker will stay open, when To is Open.
	OpenFor time.Duration
}

// Breaker is a circuit breaker for one dependency. Build it with New; it is
// safe for concurrent use, and one breaker is meant to be shared by every
// call site of its dependency, whatever their result types.
//
// On the success path of a closed breaker, Allow is one atomic load and
// recording an outcome is an atomic add and a load; nothing allocates, no
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

	cfg   Config
	slow  bool      // cfg.SlowCallDuration > 0
	epoch time.Time // the breaker's clock: now() is time.Since(epoch)
	// The Name and Key of the breaker's events: cfg.Name and "" from New;
	// the registry's Name and the key for a breaker a Registry made.
	evName, evKey string

	mu          sync.Mutex
	timer       *time.Timer
	consecutive int // openings without a close in between
	opens       uint64
	openFor     time.Duration // length of the current opening
	trialDone   int
	trialFails  int
	trialSlow   int
}

// New returns a closed breaker for cfg, or an error that names the first
// invalid field and its rule.
func New(cfg Config) (*Breaker, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	b := &Breaker{cfg: c, slow: c.SlowCallDuration > 0, epoch: time.Now(), evName: c.Name}
	b.win.Store(newWindow(&b.cfg, 0, 0))
	b.state.Store(uint64(Closed))
	return b, nil
}

// now reads the breaker's monotonic clock, in nanoseconds since New: one
// clock read, where time.Now makes two.
func (b *Breaker) now() int64 { return int64(time.Since(b.epoch)) }

// Name returns the breaker's Config.Name.
func (b *Breaker) Name() string { return b.cfg.Name }

// State returns the current state.
func (b *Breaker) State() State { return stateOf(b.state.Load()) }

// Permit is the right to make one call, from Allow. Its Done or Record must
// be called exactly once, when the call ends. The zero Permit does nothing.
type Permit struct {
	b     *Breaker
	w     uint64
	start int64 // b.now() at Allow, when slow calls are measured
}

// Allow asks to make one call. It returns a Permit, or ErrOpen (open or
// forced open) or ErrHalfOpen (half-open with all trials in flight); both
// are rejections (watertight.IsRejection).
func (b *Breaker) Allow() (Permit, error) {
	w := b.state.Load()
	switch stateOf(w) {
	case Closed, MetricsOnly:
		p := Permit{b: b, w: w}
		if b.slow {
			p.start = b.now()
		}
		return p, nil
	case Disabled:
		return Permit{b: b, w: w}, nil
	case HalfOpen:
		if err := b.acquireTrial(w); err != nil {
			return Permit{}, b.reject(err)
		}
		p := Permit{b: b, w: w}
		if b.slow {
			p.start = b.now()
		}
		return p, nil
	}
	return Permit{}, b.reject(ErrOpen)
}

func (b *Breaker) reject(err error) error {
	b.rejected.Add(1)
	if b.cfg.OnReject != nil {
		b.cfg.OnReject(b.cfg.Name, err)
	}
	if b.cfg.Listener != nil {
		b.emitReject(err)
	}
	return err
}

// emitReject sends an EventRejected. It is kept out of line so that the
// rejection path of a breaker without a listener stays as small as it was.
//
//go:noinline
func (b *Breaker) emitReject(err error) {
	watertight.Emit(b.cfg.Listener, watertight.Event{
		Kind: watertight.EventRejected, Source: source, Name: b.evName, Key: b.evKey, Err: err,
	})
}

// source is the Source of the breaker's events.
const source = "circuit"

// acquireTrial takes one half-open trial slot of generation genOf(w).
func (b *Breaker) acquireTrial(w uint64) error {
	g := uint32(genOf(w))
	limit := uint32(b.cfg.HalfOpenCalls)
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
		p.b.record(p.w, p.start, p.b.cfg.Classify(ctx, err))
	}
}

// record is the end of every permitted call.
func (b *Breaker) record(w uint64, start int64, o watertight.Outcome) {
	st := stateOf(w)
	if st == Disabled {
		return
	}
	var code uint32
	switch o {
	case watertight.Success:
	case watertight.Failure:
		code = codeFail
	case watertight.Saturated:
		if b.cfg.CountSaturation {
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
	if b.slow {
		now = b.now()
		if time.Duration(now-start) >= b.cfg.SlowCallDuration {
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
	var c counts
	var bad bool
	if win.buckets != nil {
		if !b.slow {
			now = b.now()
		}
		c, bad = win.addTime(now, code)
	} else {
		c, bad = win.addCount(code, uint64(b.cfg.MinCalls))
	}
	if !bad || st != Closed || c.calls < int64(b.cfg.MinCalls) {
		return
	}
	if reason := b.tripReason(c); reason != "" {
		b.trip(w, reason)
	}
}

// tripReason says why counts c trip the breaker, or "" if they do not.
func (b *Breaker) tripReason(c counts) string {
	fails := c.fails
	if b.cfg.CountSaturation {
		fails += c.sats
	}
	if rate := percent(fails, c.calls); rate >= b.cfg.FailureRateThreshold {
		if c.sats > 0 && b.cfg.CountSaturation {
			return fmt.Sprintf("failure rate %.4g%% >= %.4g%% over %d calls (%d failures, %d saturated)", rate, b.cfg.FailureRateThreshold, c.calls, c.fails, c.sats)
		}
		return fmt.Sprintf("failure rate %.4g%% >= %.4g%% over %d calls", rate, b.cfg.FailureRateThreshold, c.calls)
	}
	if b.slow {
		if rate := percent(c.slows, c.calls); rate >= b.cfg.SlowCallRateThreshold {
			return fmt.Sprintf("slow-call rate %.4g%% >= %.4g%% over %d calls (slow: >= %v)", rate, b.cfg.SlowCallRateThreshold, c.calls, b.cfg.SlowCallDuration)
		}
	}
	return ""
}

func percent(n, of int64) float64 {
	if of <= 0 {
		return 0
	}
	return float64(n) * 100 / float64(of)
}

// trip opens a closed breaker whose state word is still w.
func (b *Breaker) trip(w uint64, reason string) {
	b.mu.Lock()
	if b.state.Load() != w {
		b.mu.Unlock()
		return
	}
	ev := b.setLocked(Open, reason)
	b.mu.Unlock()
	b.emit(ev)
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
	n := int64(b.cfg.HalfOpenCalls)
	var ev StateChange
	switch {
	case percent(int64(b.trialFails), n) >= b.cfg.FailureRateThreshold:
		ev = b.setLocked(Open, fmt.Sprintf("%d of %d trial calls failed", b.trialFails, n))
	case b.slow && percent(int64(b.trialSlow), n) >= b.cfg.SlowCallRateThreshold:
		ev = b.setLocked(Open, fmt.Sprintf("%d of %d trial calls were slow", b.trialSlow, n))
	case int64(b.trialDone) >= n:
		ev = b.setLocked(Closed, fmt.Sprintf("%d trial calls ended below the thresholds", n))
	default:
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.emit(ev)
}

// setLocked moves to state to, starting a new generation; b.mu is held. It
// prepares everything the new state needs before publishing it.
func (b *Breaker) setLocked(to State, reason string) StateChange {
	old := b.state.Load()
	gen := genOf(old) + 1
	w := gen<<stateBits | uint64(to)
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	ev := StateChange{Name: b.cfg.Name, From: stateOf(old), To: to, Reason: reason}
	switch to {
	case Closed, MetricsOnly:
		b.consecutive = 0
		b.win.Store(newWindow(&b.cfg, gen, b.now()))
	case Open:
		b.opens++
		b.consecutive++
		d := b.openDuration(b.consecutive)
		ev.OpenFor = d
		b.openFor = d
		b.timer = time.AfterFunc(d, func() { b.halfOpen(w) })
	case HalfOpen:
		b.trials.Store(uint64(uint32(gen)) << 32)
		b.trialDone, b.trialFails, b.trialSlow = 0, 0, 0
		if b.cfg.MaxHalfOpenWait > 0 {
			b.timer = time.AfterFunc(b.cfg.MaxHalfOpenWait, func() { b.halfOpenExpired(w) })
		}
	case ForcedOpen:
		b.opens++
	}
	b.state.Store(w)
	return ev
}

// openDuration is the length of the n-th consecutive opening.
func (b *Breaker) openDuration(n int) time.Duration {
	d := float64(b.cfg.OpenDuration)
	for i := 1; i < n && d < float64(b.cfg.MaxOpenDuration); i++ {
		d *= b.cfg.OpenDurationMultiplier
	}
	if j := b.cfg.OpenJitter; j > 0 {
		r := rand.Float64
		if b.cfg.Rand != nil {
			r = b.cfg.Rand
		}
		d *= 1 - j + 2*j*r()
	}
	// The cap holds after jitter too.
	return max(min(time.Duration(d), b.cfg.MaxOpenDuration), 1)
}

// halfOpen is the open timer's end: open → half-open.
func (b *Breaker) halfOpen(w uint64) {
	b.mu.Lock()
	if b.state.Load() != w {
		b.mu.Unlock()
		return
	}
	ev := b.setLocked(HalfOpen, "open for "+b.openFor.String())
	b.mu.Unlock()
	b.emit(ev)
}

// halfOpenExpired ends a half-open state whose trials did not all end within
// MaxHalfOpenWait: it decides on the trials that did end (closing if their
// rates are below the thresholds), and opens again if none did — the
// dependency did not answer, or a permit was lost.
func (b *Breaker) halfOpenExpired(w uint64) {
	b.mu.Lock()
	if b.state.Load() != w {
		b.mu.Unlock()
		return
	}
	var ev StateChange
	n := int64(b.trialDone)
	switch {
	case n == 0:
		ev = b.setLocked(Open, fmt.Sprintf("no trial call ended within %v", b.cfg.MaxHalfOpenWait))
	case percent(int64(b.trialFails), n) >= b.cfg.FailureRateThreshold:
		ev = b.setLocked(Open, fmt.Sprintf("%d of the %d trial calls that ended within %v failed", b.trialFails, n, b.cfg.MaxHalfOpenWait))
	case b.slow && percent(int64(b.trialSlow), n) >= b.cfg.SlowCallRateThreshold:
		ev = b.setLocked(Open, fmt.Sprintf("%d of the %d trial calls that ended within %v were slow", b.trialSlow, n, b.cfg.MaxHalfOpenWait))
	default:
		ev = b.setLocked(Closed, fmt.Sprintf("%d trial calls ended within %v, below the thresholds", n, b.cfg.MaxHalfOpenWait))
	}
	b.mu.Unlock()
	b.emit(ev)
}

// emit reports a state change to OnStateChange and the Listener. It is
// called after b.mu is released.
func (b *Breaker) emit(ev StateChange) {
	if b.cfg.OnStateChange != nil {
		b.cfg.OnStateChange(ev)
	}
	if b.cfg.Listener != nil {
		watertight.Emit(b.cfg.Listener, watertight.Event{
			Kind: watertight.EventStateChange, Source: source, Name: b.evName, Key: b.evKey,
			From: ev.From.String(), To: ev.To.String(), Reason: ev.Reason, Delay: ev.OpenFor,
		})
	}
}

// set moves to a manual state (or back to closed).
func (b *Breaker) set(to State, reason string) {
	b.mu.Lock()
	ev := b.setLocked(to, reason)
	b.mu.Unlock()
	b.emit(ev)
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

// Reset closes the breaker with an empty window and forgets consecutive
// openings.
func (b *Breaker) Reset() { b.set(Closed, "reset") }

// Snapshot is a breaker's state and counts at one moment.
type Snapshot struct {
	// Name is the breaker's Config.Name.
	Name string
	// State is the current state.
	State State
	// Calls, Failures, SlowCalls and Saturated count the outcomes in the
	// current window (closed or metrics-only; zero in other states).
	// Saturated outcomes are recorded only when Config.CountSaturation is
	// set; otherwise they are ignored and Saturated stays zero.
	Calls, Failures, SlowCalls, Saturated int64
	// FailureRate is the percentage compared with FailureRateThreshold
	// (failures, plus saturations when CountSaturation is set); SlowCallRate
	// the one compared with SlowCallRateThreshold. Zero without calls.
	FailureRate, SlowCallRate float64
	// Rejected counts the calls rejected since New.
	Rejected uint64
	// Opens counts the times the breaker opened (including forced) since New.
	Opens uint64
	// TrialsInFlight counts the trial calls let through in the current
	// half-open state and not yet ended.
	TrialsInFlight int
}

// Snapshot returns the current state and counts. It takes the breaker's lock
// briefly; it is meant for metrics collection, not for every call.
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	w := b.state.Load()
	s := Snapshot{Name: b.cfg.Name, State: stateOf(w), Opens: b.opens}
	if s.State == HalfOpen {
		s.TrialsInFlight = int(uint32(b.trials.Load())) - b.trialDone
	}
	b.mu.Unlock()
	s.Rejected = b.rejected.Load()
	if s.State == Closed || s.State == MetricsOnly {
		if win := b.win.Load(); win.gen == genOf(w) {
			c := win.totals(b.now())
			s.Calls, s.Failures, s.SlowCalls, s.Saturated = c.calls, c.fails, c.slows, c.sats
			fails := c.fails
			if b.cfg.CountSaturation {
				fails += c.sats
			}
			s.FailureRate = percent(fails, c.calls)
			s.SlowCallRate = percent(c.slows, c.calls)
		}
	}
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
	b.record(t.Seq, t.Start, b.cfg.Classify(ctx, err))
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
