// Package circuit is a circuit breaker: it watches the calls to one
// dependency and, when too many of them fail or are slow, stops calling it for
// a while, so that a failing dependency gets room to recover and its callers
// fail fast instead of queueing behind it.
//
// # States
//
// A Breaker is Closed (calls go through and are recorded in a sliding
// window), Open (calls are rejected with ErrOpen), or HalfOpen (a fixed number
// of trial calls go through; their outcome closes the breaker or opens it
// again). Three manual states sit beside them: ForcedOpen rejects everything
// until Reset, Disabled lets everything through and records nothing, and
// MetricsOnly records and reports rates but never rejects — for rolling a
// breaker out on a live dependency before letting it act.
//
// The breaker trips from Closed to Open when the window holds at least
// Config.MinCalls calls and the failure rate reaches Config.FailureRateThreshold,
// or the rate of calls slower than Config.SlowCallDuration reaches
// Config.SlowCallRateThreshold (a slow call counts even when it succeeds). The
// window is count-based (the last WindowSize calls) or time-based (the last
// WindowDuration, in buckets).
//
// # Trip rules
//
// Beside the rates, three rules that other breakers' users run can trip it,
// alone or together (whichever holds first): Config.ConsecutiveFailures (n
// failures in a row: gobreaker's default, the textbook's "5 failures in a
// row"), Config.FailureCountThreshold (k failures among the window's calls,
// failsafe-go's WithFailureThresholdRatio) and Config.TripWhen, a predicate
// over the window's Counts (gobreaker's ReadyToTrip). None of them waits for
// MinCalls. A negative FailureRateThreshold turns the rate rule off, for a
// breaker that trips on the others alone. The StateChange, the Event's
// Reason and the Snapshot name the Rule that tripped it; while open and
// half-open, a Snapshot keeps the counts that opened it (the evidence), and
// the trials so far.
//
// Half-open decides by rate over Config.HalfOpenCalls trials, or, with
// Config.HalfOpenSuccesses, by counting: k successes close it, and a failure
// that makes k unreachable opens it again (k = HalfOpenCalls: the first
// failure opens). ForceHalfOpen lets an operator probe at once. A negative
// Config.OpenDuration is a real zero: the breaker opens and goes half-open
// at once. docs/migrating.md maps each peer's settings onto these.
//
// It stays Open for Config.OpenDuration — growing with consecutive openings
// when Config.OpenDurationMultiplier is above 1, with optional jitter — and
// then turns HalfOpen. A timer makes that change, so a rejection while Open
// costs one atomic load and the add to a striped rejection counter, and never
// reads the clock.
//
// # Outcomes
//
// What counts as a failure is the caller's decision: Config.Classify (by
// default watertight.Classify) maps each call's error to Success, Failure,
// Ignored (the caller's own error, or a cancellation by the caller — neither
// says anything about the dependency) or Saturated (a full bulkhead behind the
// breaker, counted only when Config.CountSaturation is set, and reported on its
// own in Snapshot).
//
// An outcome recorded with a permit from an earlier state (a call that started
// before the breaker opened and ended after) is dropped: every state change
// starts a new generation, and permits carry the generation they were issued
// in.
//
// # Use
//
// A Breaker is a watertight.Policy, to place in a Pipeline; Call wraps one
// function; Allow and Permit.Done are the two-step form for middleware. A
// Registry gives one breaker per key (dependency, host, endpoint) from one
// Config.
//
// # Events
//
// State changes and rejections are reported to Config.Listener as
// watertight.Events (EventStateChange, EventRejected; see Config.Listener for
// the fields), and to the typed hooks Config.OnStateChange and Config.OnReject.
// All are called after the breaker's lock is released, in the goroutine that
// caused the event, so a listener may call back into the breaker. Without a
// listener no event is built: the fast paths cost what they did.
//
// Each event carries a Code, a stable reason for metric labels and alerts:
// a state change the rule that tripped the breaker (CodeFailureRate
// "failure_rate", CodeSlowCallRate "slow_call_rate", CodeConsecutiveFailures
// "consecutive_failures", CodeFailureCount "failure_count", CodeTripWhen
// "trip_when"), or why it moved on (CodeTimer "timer", CodeTrialsSucceeded
// "trials_succeeded", CodeTrialsFailed "trials_failed", CodeTrialsTimedOut
// "trials_timed_out", CodeManual "manual"); a rejection CodeOpen "open",
// CodeHalfOpenFull "half_open_full" or CodeTooManyKeys "too_many_keys".
package circuit
