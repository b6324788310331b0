package circuit

// The codes of the breaker's events (watertight.Event.Code) and of
// StateChange.Code: stable, machine-readable reasons for metric labels,
// dashboards and alerts. They keep their meaning across versions; the words
// for people are in Reason.
const (
	// CodeFailureRate: closed → open, the failure rate reached
	// FailureRateThreshold (RuleFailureRate).
	CodeFailureRate = "failure_rate"
	// CodeSlowCallRate: closed → open, the slow-call rate reached
	// SlowCallRateThreshold (RuleSlowCallRate).
	CodeSlowCallRate = "slow_call_rate"
	// CodeConsecutiveFailures: closed → open, ConsecutiveFailures calls in
	// a row failed (RuleConsecutiveFailures).
	CodeConsecutiveFailures = "consecutive_failures"
	// CodeFailureCount: closed → open, the window held
	// FailureCountThreshold failures (RuleFailureCount).
	CodeFailureCount = "failure_count"
	// CodeTripWhen: closed → open, Config.TripWhen returned true
	// (RuleTripWhen).
	CodeTripWhen = "trip_when"
	// CodeTimer: open → half-open, the open duration passed.
	CodeTimer = "timer"
	// CodeTrialsSucceeded: half-open → closed, the trial calls ended below
	// the thresholds (or HalfOpenSuccesses of them succeeded).
	CodeTrialsSucceeded = "trials_succeeded"
	// CodeTrialsFailed: half-open → open, the trial calls failed or were
	// slow too often.
	CodeTrialsFailed = "trials_failed"
	// CodeTrialsTimedOut: half-open → open, no trial call ended within
	// MaxHalfOpenWait.
	CodeTrialsTimedOut = "trials_timed_out"
	// CodeManual: a change an operator asked for: ForceOpen, ForceHalfOpen,
	// Disable, SetMetricsOnly or Reset (To says which).
	CodeManual = "manual"

	// CodeOpen: a call rejected by an open or forced-open breaker (ErrOpen).
	CodeOpen = "open"
	// CodeHalfOpenFull: a call rejected by a half-open breaker with every
	// trial call in flight (ErrHalfOpen).
	CodeHalfOpenFull = "half_open_full"
	// CodeTooManyKeys: a Registry.Get refused because the registry holds
	// MaxKeys breakers that may not be evicted (ErrTooManyKeys).
	CodeTooManyKeys = "too_many_keys"
)

// changeCode is the code of a change from → to decided by rule; set and
// halfOpenExpired replace it where the rule does not say enough (manual
// changes, trials that timed out).
func changeCode(rule Rule, from, to State) string {
	switch rule {
	case RuleFailureRate:
		return CodeFailureRate
	case RuleSlowCallRate:
		return CodeSlowCallRate
	case RuleConsecutiveFailures:
		return CodeConsecutiveFailures
	case RuleFailureCount:
		return CodeFailureCount
	case RuleTripWhen:
		return CodeTripWhen
	case RuleTrials:
		if to == Closed {
			return CodeTrialsSucceeded
		}
		return CodeTrialsFailed
	}
	if from == Open && to == HalfOpen {
		return CodeTimer
	}
	return CodeManual
}

// rejectCode is the code of a rejection err.
func rejectCode(err error) string {
	switch err {
	case ErrHalfOpen:
		return CodeHalfOpenFull
	case ErrTooManyKeys:
		return CodeTooManyKeys
	}
	return CodeOpen
}
