package circuit

import (
	"fmt"
	"time"

	"github.com/watertight-go/watertight"
)

// WindowType selects how the breaker's sliding window is measured.
type WindowType uint8

const (
	// CountBased keeps the outcomes of the last Config.WindowSize calls.
	CountBased WindowType = iota
	// TimeBased keeps the outcomes of the calls that ended in the last
	// Config.WindowDuration, in Config.WindowBuckets buckets.
	TimeBased
)

// String returns "count" or "time".
func (w WindowType) String() string {
	switch w {
	case CountBased:
		return "count"
	case TimeBased:
		return "time"
	}
	return fmt.Sprintf("WindowType(%d)", uint8(w))
}

// Defaults used for zero fields of Config.
const (
	DefaultWindowSize            = 100
	DefaultWindowDuration        = 60 * time.Second
	DefaultWindowBuckets         = 10
	DefaultMinCalls              = 20
	DefaultFailureRateThreshold  = 50.0
	DefaultSlowCallRateThreshold = 100.0
	DefaultOpenDuration          = 30 * time.Second
	DefaultOpenJitter            = 0.1
	DefaultHalfOpenCalls         = 5
	DefaultMaxHalfOpenWait       = 60 * time.Second
)

// Config configures a Breaker. The zero value is valid: every zero field
// takes the default named in its comment (see DefaultConfig).
type Config struct {
	// Name labels the breaker in events and snapshots (the dependency or
	// endpoint it protects). It may be empty.
	Name string

	// WindowType selects a count-based (the zero value) or time-based window.
	WindowType WindowType
	// WindowSize is the number of calls a count-based window keeps. Zero
	// means DefaultWindowSize (100). Must not be negative, nor smaller than
	// MinCalls.
	WindowSize int
	// WindowDuration is the span a time-based window keeps. Zero means
	// DefaultWindowDuration (60s). Must not be negative.
	WindowDuration time.Duration
	// WindowBuckets is the number of buckets a time-based window is split
	// into; the window slides one bucket at a time. Zero means
	// DefaultWindowBuckets (10). Must not be negative.
	WindowBuckets int
	// MinCalls is the number of calls the window must hold before a rate
	// can trip the breaker. Zero means DefaultMinCalls (20). Must not be
	// negative.
	MinCalls int

	// FailureRateThreshold is the failure rate, in percent, at or above
	// which the breaker opens. Zero means DefaultFailureRateThreshold (50);
	// a negative value turns the failure-rate rule off, for a breaker that
	// trips on ConsecutiveFailures, FailureCountThreshold or TripWhen alone;
	// half-open then needs every trial to succeed, unless HalfOpenSuccesses
	// says otherwise. Must be at most 100.
	FailureRateThreshold float64
	// SlowCallDuration is the duration from which a call counts as slow,
	// even when it succeeds. Zero or negative means slow calls are not
	// measured, and the clock is not read for them. The duration runs from
	// Allow (or the breaker's Enter) to Done (or Exit): in the standard order
	// the breaker is outside the bulkhead, so a wait for a bulkhead permit
	// counts in it.
	SlowCallDuration time.Duration
	// SlowCallRateThreshold is the slow-call rate, in percent, at or above
	// which the breaker opens. Zero means DefaultSlowCallRateThreshold (100).
	// Must be in (0, 100]. It has no effect unless SlowCallDuration is set.
	SlowCallRateThreshold float64
	// ConsecutiveFailures, if positive, trips the breaker when that many
	// calls in a row have failed (gobreaker's default rule, with
	// ConsecutiveFailures 6 for its "more than 5"), whatever MinCalls says:
	// the streak is its own evidence. A success ends the streak; an ignored
	// outcome neither extends nor ends it; a saturation extends it when
	// CountSaturation is set. Zero means the rule is off. Must not be
	// negative.
	ConsecutiveFailures int
	// FailureCountThreshold, if positive, trips the breaker when the window
	// holds that many failures (saturations too, with CountSaturation):
	// with a count window of WindowSize n, "k failures among the last n
	// calls" (failsafe-go's WithFailureThresholdRatio(k, n)); with a time
	// window, k failures in the last WindowDuration. MinCalls does not
	// apply: the first k calls failing trip it. Zero means the rule is
	// off. Must not be negative, nor above WindowSize for a count window.
	FailureCountThreshold int
	// TripWhen, if not nil, is asked whether the window's counts should
	// trip the breaker (gobreaker's ReadyToTrip), after every outcome that
	// could raise a rate: a failure, a slow call or a counted saturation
	// (and in a time window, where old successes slide out, every
	// outcome). MinCalls does not apply: the predicate sees the counts and
	// decides. It is called in the caller's goroutine with no lock held, on
	// the failure path: keep it cheap and free of side effects.
	TripWhen func(Counts) bool

	// CountSaturation makes Saturated outcomes (a full bulkhead behind the
	// breaker, see watertight.NewSaturation) count toward the failure rate.
	// They are still counted apart (Snapshot.Saturated), so a dashboard can
	// tell a saturated bulkhead from a failing dependency. If false,
	// Saturated outcomes are ignored.
	CountSaturation bool

	// OpenDuration is how long the breaker stays open before it lets trial
	// calls through. Zero means DefaultOpenDuration (30s). A negative value
	// is a real zero: the breaker opens and goes half-open at once (two
	// state changes, reported in order), so the calls after the trip are
	// trials (failsafe-go's WithDelay(0)); multiplier, cap and jitter then
	// do not apply.
	OpenDuration time.Duration
	// OpenDurationMultiplier makes the open duration grow with consecutive
	// openings (opened again from half-open without closing in between): the
	// n-th consecutive opening lasts OpenDuration·multiplier^(n-1), capped
	// by MaxOpenDuration. Zero or 1 means no growth; it must not be below 1
	// otherwise.
	OpenDurationMultiplier float64
	// MaxOpenDuration caps the grown and jittered open duration. Zero means
	// 10·OpenDuration. Must not be negative nor below OpenDuration.
	MaxOpenDuration time.Duration
	// OpenJitter spreads open durations by a random fraction, so breakers
	// that opened together do not probe together: each duration is scaled
	// by a factor drawn uniformly from [1-OpenJitter, 1+OpenJitter]
	// (backoff.Spread), then capped by MaxOpenDuration. Zero means
	// DefaultOpenJitter (0.1); a negative value means no jitter, for
	// reproducible open durations. Must be below 1.
	OpenJitter float64

	// HalfOpenCalls is the number of trial calls let through in half-open.
	// When they have all ended, the breaker closes if their failure and
	// slow-call rates are below the thresholds, and opens again otherwise
	// (at once, as soon as enough trials have failed to decide). Zero means
	// DefaultHalfOpenCalls (5). Must not be negative.
	HalfOpenCalls int
	// HalfOpenSuccesses, if positive, decides half-open by counting instead
	// of by rate: the breaker closes as soon as that many trials have
	// succeeded, and opens again as soon as so many have failed (or were
	// slow, when SlowCallDuration is set) that it no longer can. With
	// HalfOpenSuccesses equal to HalfOpenCalls every trial must succeed
	// and the first failure opens (gobreaker's MaxRequests, failsafe-go's
	// WithSuccessThreshold(k)); below it, k successes among HalfOpenCalls
	// trials close (failsafe-go's WithSuccessThresholdRatio(k, n)). When
	// MaxHalfOpenWait runs out before k trials succeeded, the breaker
	// opens again. Zero means the rates decide. Must not be negative, nor
	// above HalfOpenCalls.
	HalfOpenSuccesses int
	// MaxHalfOpenWait bounds the time in half-open, for dependencies with
	// little traffic and for trial permits that are never completed: when it
	// runs out, the breaker decides on the trials that did end (closing if
	// their rates are below the thresholds), and opens again if none did.
	// Zero means DefaultMaxHalfOpenWait (60s); negative means no bound — then
	// a trial permit that is never completed keeps the breaker half-open
	// until Reset.
	MaxHalfOpenWait time.Duration

	// Classify maps a call's error to an outcome. If nil,
	// watertight.Classify is used.
	Classify watertight.Classifier
	// OnStateChange, if not nil, is called after every state change, in the
	// goroutine that caused it (a caller, or a timer for open → half-open),
	// after the breaker's lock is released: it may call back into the
	// breaker. It should return quickly.
	OnStateChange func(StateChange)
	// OnReject, if not nil, is called for every rejected call with the
	// breaker's name and the rejection (ErrOpen or ErrHalfOpen), in the
	// caller's goroutine. It runs on the hot path of an open breaker: keep
	// it cheap (increment a counter).
	OnReject func(name string, err error)
	// Listener, if not nil, receives the breaker's events, with Source
	// "circuit", Name this Name (in a Registry: the registry's Name, and
	// Key the breaker's key):
	//
	//   - EventStateChange after every state change, with From and To the
	//     states' names (State.String: "closed", "open", "half-open",
	//     "forced-open", "disabled", "metrics-only"), Reason, and Delay the
	//     open duration when To is "open";
	//   - EventRejected for every rejected call, with Err ErrOpen or
	//     ErrHalfOpen (and ErrTooManyKeys from a full Registry).
	//
	// It is called as OnStateChange and OnReject are, after them: in the
	// goroutine that caused the event, after the breaker's lock is
	// released. Rejections come on the hot path of an open breaker, so it
	// should return quickly (see watertight.Listener). If nil, no events
	// are built.
	Listener watertight.Listener
	// Rand, if not nil, returns numbers in [0, 1) for the open-duration
	// jitter, for reproducible simulations. If nil, math/rand/v2 is used.
	Rand func() float64
}

// DefaultConfig returns the configuration that zero fields resolve to: a
// count window of 100 calls, at least 20 calls before tripping, 50% failure
// rate, slow calls not measured, open for 30s (spread by ±10%) without
// growth, 5 trial calls,
// at most 60s in half-open. MaxOpenDuration is left zero, so that it follows
// OpenDuration (10·OpenDuration) when a caller changes the latter.
func DefaultConfig() Config {
	return Config{
		WindowType:             CountBased,
		WindowSize:             DefaultWindowSize,
		WindowDuration:         DefaultWindowDuration,
		WindowBuckets:          DefaultWindowBuckets,
		MinCalls:               DefaultMinCalls,
		FailureRateThreshold:   DefaultFailureRateThreshold,
		SlowCallRateThreshold:  DefaultSlowCallRateThreshold,
		OpenDuration:           DefaultOpenDuration,
		OpenDurationMultiplier: 1,
		MaxOpenDuration:        10 * DefaultOpenDuration,
		OpenJitter:             DefaultOpenJitter,
		HalfOpenCalls:          DefaultHalfOpenCalls,
		MaxHalfOpenWait:        DefaultMaxHalfOpenWait,
	}
}

// resolve fills defaults and validates; the error names the field and the rule.
func (c Config) resolve() (Config, error) {
	bad := func(field, rule string, got any) error {
		return fmt.Errorf("circuit: Config.%s %s, got %v", field, rule, got)
	}
	if c.WindowType != CountBased && c.WindowType != TimeBased {
		return c, bad("WindowType", "must be CountBased or TimeBased", c.WindowType)
	}
	if c.WindowSize < 0 {
		return c, bad("WindowSize", "must be >= 0 (0 means 100)", c.WindowSize)
	}
	if c.WindowSize == 0 {
		c.WindowSize = DefaultWindowSize
	}
	if c.WindowDuration < 0 {
		return c, bad("WindowDuration", "must be >= 0 (0 means 60s)", c.WindowDuration)
	}
	if c.WindowDuration == 0 {
		c.WindowDuration = DefaultWindowDuration
	}
	if c.WindowBuckets < 0 {
		return c, bad("WindowBuckets", "must be >= 0 (0 means 10)", c.WindowBuckets)
	}
	if c.WindowBuckets == 0 {
		c.WindowBuckets = DefaultWindowBuckets
	}
	if c.WindowType == TimeBased && c.WindowDuration/time.Duration(c.WindowBuckets) <= 0 {
		return c, bad("WindowBuckets", "must leave buckets of at least 1ns (WindowDuration/WindowBuckets)", c.WindowBuckets)
	}
	if c.MinCalls < 0 {
		return c, bad("MinCalls", "must be >= 0 (0 means 20)", c.MinCalls)
	}
	if c.MinCalls == 0 {
		c.MinCalls = DefaultMinCalls
	}
	if c.FailureRateThreshold == 0 {
		c.FailureRateThreshold = DefaultFailureRateThreshold
	}
	if !(c.FailureRateThreshold <= 100) { // also NaN
		return c, fmt.Errorf("circuit: Config.FailureRateThreshold must be a percentage in (0, 100], got %v (0 means 50; a negative value turns the rule off)", c.FailureRateThreshold)
	}
	if c.FailureRateThreshold < 0 {
		c.FailureRateThreshold = -1
	}
	if c.ConsecutiveFailures < 0 {
		return c, bad("ConsecutiveFailures", "must be >= 0 (0 turns the rule off)", c.ConsecutiveFailures)
	}
	if c.FailureCountThreshold < 0 {
		return c, bad("FailureCountThreshold", "must be >= 0 (0 turns the rule off)", c.FailureCountThreshold)
	}
	if c.WindowType == CountBased && c.FailureCountThreshold > c.WindowSize {
		return c, fmt.Errorf("circuit: Config.FailureCountThreshold must be <= WindowSize (%d), or the window could never hold that many failures, got %d", c.WindowSize, c.FailureCountThreshold)
	}
	if c.SlowCallRateThreshold == 0 {
		c.SlowCallRateThreshold = DefaultSlowCallRateThreshold
	}
	if !(c.SlowCallRateThreshold > 0 && c.SlowCallRateThreshold <= 100) {
		return c, bad("SlowCallRateThreshold", "must be a percentage in (0, 100]", c.SlowCallRateThreshold)
	}
	if c.SlowCallDuration < 0 {
		c.SlowCallDuration = 0
	}
	// A rate needs MinCalls calls in the window: a count window smaller
	// than that could never trip on one.
	if c.WindowType == CountBased && c.WindowSize < c.MinCalls && (c.FailureRateThreshold > 0 || c.SlowCallDuration > 0) {
		return c, fmt.Errorf("circuit: Config.WindowSize must be >= MinCalls (%d), or the rates could never trip the breaker (a negative FailureRateThreshold turns the rate rule off), got %d", c.MinCalls, c.WindowSize)
	}
	if c.OpenDuration < 0 {
		c.OpenDuration = -1
		c.OpenDurationMultiplier = max(c.OpenDurationMultiplier, 1)
		if c.MaxOpenDuration < 0 {
			return c, bad("MaxOpenDuration", "must be >= 0", c.MaxOpenDuration)
		}
		if !(c.OpenJitter < 1) {
			return c, bad("OpenJitter", "must be a fraction below 1 (0 means 0.1, negative means no jitter)", c.OpenJitter)
		}
		if c.OpenJitter == 0 {
			c.OpenJitter = DefaultOpenJitter
		}
		return c.resolveHalfOpen()
	}
	if c.OpenDuration == 0 {
		c.OpenDuration = DefaultOpenDuration
	}
	if c.OpenDurationMultiplier == 0 {
		c.OpenDurationMultiplier = 1
	}
	if !(c.OpenDurationMultiplier >= 1) {
		return c, bad("OpenDurationMultiplier", "must be 0 or >= 1", c.OpenDurationMultiplier)
	}
	if c.MaxOpenDuration < 0 {
		return c, bad("MaxOpenDuration", "must be >= 0 (0 means 10·OpenDuration)", c.MaxOpenDuration)
	}
	if c.MaxOpenDuration == 0 {
		c.MaxOpenDuration = 10 * c.OpenDuration
	}
	if c.MaxOpenDuration < c.OpenDuration {
		return c, fmt.Errorf("circuit: Config.MaxOpenDuration must be >= OpenDuration (%v), got %v", c.OpenDuration, c.MaxOpenDuration)
	}
	if !(c.OpenJitter < 1) {
		return c, bad("OpenJitter", "must be a fraction below 1 (0 means 0.1, negative means no jitter)", c.OpenJitter)
	}
	if c.OpenJitter == 0 {
		c.OpenJitter = DefaultOpenJitter
	}
	return c.resolveHalfOpen()
}

// resolveHalfOpen is the end of resolve: the half-open settings and Classify.
func (c Config) resolveHalfOpen() (Config, error) {
	bad := func(field, rule string, got any) error {
		return fmt.Errorf("circuit: Config.%s %s, got %v", field, rule, got)
	}
	if c.HalfOpenCalls < 0 {
		return c, bad("HalfOpenCalls", "must be >= 0 (0 means 5)", c.HalfOpenCalls)
	}
	if c.HalfOpenCalls == 0 {
		c.HalfOpenCalls = DefaultHalfOpenCalls
	}
	if c.HalfOpenSuccesses < 0 {
		return c, bad("HalfOpenSuccesses", "must be >= 0 (0 means the rates decide)", c.HalfOpenSuccesses)
	}
	if c.HalfOpenSuccesses == 0 && c.FailureRateThreshold < 0 {
		// No rate to judge the trials by: every one must succeed.
		c.HalfOpenSuccesses = c.HalfOpenCalls
	}
	if c.HalfOpenSuccesses > c.HalfOpenCalls {
		return c, fmt.Errorf("circuit: Config.HalfOpenSuccesses must be <= HalfOpenCalls (%d), or the trials could never close the breaker, got %d", c.HalfOpenCalls, c.HalfOpenSuccesses)
	}
	if c.MaxHalfOpenWait == 0 {
		c.MaxHalfOpenWait = DefaultMaxHalfOpenWait
	}
	if c.Classify == nil {
		c.Classify = watertight.Classify
	}
	return c, nil
}
