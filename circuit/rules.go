package circuit

import (
	"fmt"
	"strconv"
)

// Rule names what made a breaker change state: the trip rule that opened a
// closed breaker, or what decided a half-open one. StateChange.Rule and
// Snapshot.Rule carry it, and a state change's Reason begins with the rule's
// name, so a log line or a dashboard can say why a breaker is open.
type Rule uint8

const (
	// RuleNone: no rule decided (a timer, a manual change, Reset).
	RuleNone Rule = iota
	// RuleFailureRate: the failure rate reached FailureRateThreshold over
	// at least MinCalls calls.
	RuleFailureRate
	// RuleSlowCallRate: the slow-call rate reached SlowCallRateThreshold
	// over at least MinCalls calls.
	RuleSlowCallRate
	// RuleConsecutiveFailures: ConsecutiveFailures calls in a row failed.
	RuleConsecutiveFailures
	// RuleFailureCount: the window held FailureCountThreshold failures.
	RuleFailureCount
	// RuleTripWhen: Config.TripWhen returned true.
	RuleTripWhen
	// RuleTrials: the half-open trials decided (closed, or opened again).
	RuleTrials
)

var ruleNames = [...]string{
	RuleNone:                "none",
	RuleFailureRate:         "failure rate",
	RuleSlowCallRate:        "slow-call rate",
	RuleConsecutiveFailures: "consecutive failures",
	RuleFailureCount:        "failure count",
	RuleTripWhen:            "TripWhen",
	RuleTrials:              "trials",
}

// String returns the rule's name: "failure rate", "slow-call rate",
// "consecutive failures", "failure count", "TripWhen", "trials" or "none".
func (r Rule) String() string {
	if int(r) < len(ruleNames) {
		return ruleNames[r]
	}
	return "Rule(" + strconv.Itoa(int(r)) + ")"
}

// Counts is what a breaker's window holds, as Config.TripWhen sees it.
type Counts struct {
	// Calls is the number of outcomes in the window (successes, failures,
	// and saturations when CountSaturation is set).
	Calls int64
	// Failures counts the failed calls in the window; Saturated, apart,
	// the saturations (only when CountSaturation is set).
	Failures, Saturated int64
	// SlowCalls counts the calls at least SlowCallDuration long (when it
	// is set), whatever their outcome.
	SlowCalls int64
	// ConsecutiveFailures is the current streak of failures (and counted
	// saturations) with no success in between. It is counted only when
	// Config.ConsecutiveFailures or Config.TripWhen is set; otherwise it
	// reads zero.
	ConsecutiveFailures int64
}

// tripReason says which rule counts c (and the streak of consecutive
// failures) trip the breaker by, and why in words; RuleNone if none does.
// The cheap rules go first, the user's predicate last.
func (cfg *settings) tripReason(c counts, streak int64) (Rule, string) {
	fails := c.fails
	if cfg.CountSaturation {
		fails += c.sats
	}
	if k := int64(cfg.ConsecutiveFailures); k > 0 && streak >= k {
		return RuleConsecutiveFailures, fmt.Sprintf("consecutive failures: %d in a row (>= %d)", streak, k)
	}
	if k := int64(cfg.FailureCountThreshold); k > 0 && fails >= k {
		return RuleFailureCount, fmt.Sprintf("failure count: %d failures among the last %d calls (>= %d)", fails, c.calls, k)
	}
	if c.calls >= int64(cfg.MinCalls) && c.calls > 0 {
		if cfg.FailureRateThreshold > 0 {
			if rate := percent(fails, c.calls); rate >= cfg.FailureRateThreshold {
				if c.sats > 0 && cfg.CountSaturation {
					return RuleFailureRate, fmt.Sprintf("failure rate %.4g%% >= %.4g%% over %d calls (%d failures, %d saturated)", rate, cfg.FailureRateThreshold, c.calls, c.fails, c.sats)
				}
				return RuleFailureRate, fmt.Sprintf("failure rate %.4g%% >= %.4g%% over %d calls", rate, cfg.FailureRateThreshold, c.calls)
			}
		}
		if cfg.slow {
			if rate := percent(c.slows, c.calls); rate >= cfg.SlowCallRateThreshold {
				return RuleSlowCallRate, fmt.Sprintf("slow-call rate %.4g%% >= %.4g%% over %d calls (slow: >= %v)", rate, cfg.SlowCallRateThreshold, c.calls, cfg.SlowCallDuration)
			}
		}
	}
	if cfg.TripWhen != nil && cfg.TripWhen(Counts{
		Calls: c.calls, Failures: c.fails, Saturated: c.sats, SlowCalls: c.slows, ConsecutiveFailures: streak,
	}) {
		return RuleTripWhen, fmt.Sprintf("TripWhen: true over %d calls (%d failures, %d slow, %d saturated, %d in a row)", c.calls, c.fails, c.slows, c.sats, streak)
	}
	return RuleNone, ""
}
