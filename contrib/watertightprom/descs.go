package watertightprom

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// descs are the Collector's metric descriptions, built once.
type descs struct {
	circuitState, circuitWindowCalls, circuitWindowFailures, circuitWindowSlowCalls, circuitWindowSaturated *prometheus.Desc
	circuitFailureRatio, circuitSlowCallRatio, circuitTrials, circuitRejected, circuitOpens                 *prometheus.Desc

	bulkheadMax, bulkheadActive, bulkheadQueued, bulkheadAvailable, bulkheadRejected *prometheus.Desc
	bulkheadAcquired, bulkheadCanceled, bulkheadGuaranteed, bulkheadBorrowed         *prometheus.Desc
	poolQueueCapacity, poolDropped, poolCompleted, poolPanicked                      *prometheus.Desc

	budgetDeposits, budgetWithdrawals, budgetRefused, budgetBalance              *prometheus.Desc
	throttlerRequests, throttlerAccepts, throttlerRejectRatio, throttlerRejected *prometheus.Desc

	events, eventsOverflow, circuitTransitions   *prometheus.Desc
	retryScheduled, retryExhausted, retrySkipped *prometheus.Desc
	shed, fallbackUsed, badInput                 *prometheus.Desc

	hedgeCalls, hedgeNotIdempotent, hedgeHedgedCalls, hedgeSent, hedgeWon *prometheus.Desc
	hedgeSuppressed, hedgeDelay, hedgeOverloaded                          *prometheus.Desc

	limiterLimit, limiterInFlight, limiterWaiting, limiterRejected, limiterAcquired *prometheus.Desc
	limiterChanges, limiterLatency, limiterDrops                                    *prometheus.Desc

	list []*prometheus.Desc
}

func (d *descs) init(constLabels prometheus.Labels) error {
	var first error
	nd := func(name, help string, labels ...string) *prometheus.Desc {
		desc := prometheus.NewDesc(name, help, labels, constLabels)
		if err := desc.Err(); err != nil && first == nil {
			first = fmt.Errorf("watertightprom: Config.ConstLabels: %w", err)
		}
		d.list = append(d.list, desc)
		return desc
	}
	nk := []string{"name", "key"}
	nkk := []string{"name", "key", "kind"}
	n := []string{"name"}

	d.circuitState = nd("watertight_circuit_state", "Circuit breaker state: 1 for the current state, 0 for the others.", "name", "key", "state")
	d.circuitWindowCalls = nd("watertight_circuit_window_calls", "Calls recorded in the breaker's current window (closed or metrics-only); while open or half-open, the calls of the window that opened it (or of the trials that opened it again).", nk...)
	d.circuitWindowFailures = nd("watertight_circuit_window_failures", "Failed calls in the breaker's current window.", nk...)
	d.circuitWindowSlowCalls = nd("watertight_circuit_window_slow_calls", "Slow calls in the breaker's current window.", nk...)
	d.circuitWindowSaturated = nd("watertight_circuit_window_saturated", "Saturation rejections counted in the breaker's current window (only with CountSaturation).", nk...)
	d.circuitFailureRatio = nd("watertight_circuit_failure_ratio", "Failure ratio of the breaker's current window: failures (and saturations with CountSaturation) over calls, 0 to 1 (0.5 is 50%; compare with FailureRateThreshold/100).", nk...)
	d.circuitSlowCallRatio = nd("watertight_circuit_slow_call_ratio", "Slow-call ratio of the breaker's current window: slow calls over calls, 0 to 1 (0.5 is 50%; compare with SlowCallRateThreshold/100).", nk...)
	d.circuitTrials = nd("watertight_circuit_trial_calls_in_flight", "Half-open trial calls let through and not yet ended.", nk...)
	d.circuitRejected = nd("watertight_circuit_rejected_total", "Calls the breaker rejected (open, forced open, or half-open with every trial in flight).", nk...)
	d.circuitOpens = nd("watertight_circuit_opens_total", "Times the breaker opened, forced openings included.", nk...)

	d.bulkheadMax = nd("watertight_bulkhead_max_concurrent", "Permits of a semaphore bulkhead, workers of a pool, or the permits all the partitions of a partitioned bulkhead share (key empty).", nkk...)
	d.bulkheadActive = nd("watertight_bulkhead_active", "Permits held (semaphore; partitioned: by the partition, the key) or workers running a task (pool).", nkk...)
	d.bulkheadQueued = nd("watertight_bulkhead_queued", "Callers waiting for a permit (semaphore; partitioned: in the partition's queue) or tasks waiting for a worker (pool).", nkk...)
	d.bulkheadAvailable = nd("watertight_bulkhead_available", "Permits (semaphore; partitioned: of the whole bulkhead, key empty) or idle workers (pool) free now.", nkk...)
	d.bulkheadRejected = nd("watertight_bulkhead_rejected_total", "Calls refused because the bulkhead (partitioned: the partition) was full (semaphore), or tasks refused because the queue was full or the pool closed (pool).", nkk...)
	d.bulkheadAcquired = nd("watertight_bulkhead_acquired_total", "Acquisitions of a semaphore bulkhead (partitioned: of the partition): calls that took permits (an AcquireN counts once).", nk...)
	d.bulkheadCanceled = nd("watertight_bulkhead_canceled_total", "Waits for a semaphore bulkhead's permit (partitioned: the partition's) that ended because the caller's context did.", nk...)
	d.bulkheadGuaranteed = nd("watertight_bulkhead_guaranteed", "Permits a partition of a partitioned bulkhead is guaranteed: its share of max_concurrent by weight.", nk...)
	d.bulkheadBorrowed = nd("watertight_bulkhead_borrowed", "Permits a partition of a partitioned bulkhead holds above its guarantee, lent from the others' unused shares.", nk...)
	d.limiterLimit = nd("watertight_limiter_limit", "Current concurrency limit of an adaptive limiter.", nk...)
	d.limiterInFlight = nd("watertight_limiter_in_flight", "Calls holding a permit of an adaptive limiter.", nk...)
	d.limiterWaiting = nd("watertight_limiter_waiting", "Callers waiting for a permit of an adaptive limiter.", nk...)
	d.limiterRejected = nd("watertight_limiter_rejected_total", "Calls an adaptive limiter refused at its limit.", nk...)
	d.limiterAcquired = nd("watertight_limiter_acquired_total", "Calls an adaptive limiter admitted.", nk...)
	d.limiterChanges = nd("watertight_limiter_changes_total", "Windows after which an adaptive limiter moved its limit.", nk...)
	d.limiterLatency = nd("watertight_limiter_window_latency_seconds", "Latency of the calls of an adaptive limiter's last window: its min, mean and max (stat).", "name", "key", "stat")
	d.limiterDrops = nd("watertight_limiter_window_drops", "Calls dropped (timeouts, overload answers) in an adaptive limiter's last window.", nk...)
	d.poolQueueCapacity = nd("watertight_bulkhead_pool_queue_capacity", "Queue size of a worker pool.", n...)
	d.poolDropped = nd("watertight_bulkhead_pool_dropped_total", "Accepted pool tasks dropped without running (context done, queue wait exceeded, shut down).", n...)
	d.poolCompleted = nd("watertight_bulkhead_pool_completed_total", "Pool tasks that ran to their end, panics included.", n...)
	d.poolPanicked = nd("watertight_bulkhead_pool_panicked_total", "Pool tasks that panicked.", n...)

	d.budgetDeposits = nd("watertight_budget_deposits_total", "Requests deposited into the retry budget.", n...)
	d.budgetWithdrawals = nd("watertight_budget_withdrawals_total", "Retries (or hedges) the budget granted.", n...)
	d.budgetRefused = nd("watertight_budget_refused_total", "Retries (or hedges) the budget refused.", n...)
	d.budgetBalance = nd("watertight_budget_balance", "Tokens in the budget's ratio balance (one token is one retry), the per-second floor not included.", n...)
	d.throttlerRequests = nd("watertight_throttler_window_requests", "Requests counted in the adaptive throttler's window, local rejections included.", n...)
	d.throttlerAccepts = nd("watertight_throttler_window_accepts", "Requests the backend accepted in the adaptive throttler's window.", n...)
	d.throttlerRejectRatio = nd("watertight_throttler_reject_ratio", "Probability, 0 to 1, with which the adaptive throttler rejects the next request locally: the share of requests it is rejecting now.", n...)
	d.throttlerRejected = nd("watertight_throttler_rejected_total", "Requests the throttler rejected locally.", n...)

	d.hedgeCalls = nd("watertight_hedge_calls_total", "Calls made through the hedge policy, hedged or not.", n...)
	d.hedgeNotIdempotent = nd("watertight_hedge_not_idempotent_total", "Calls not hedged because they were not marked idempotent.", n...)
	d.hedgeHedgedCalls = nd("watertight_hedge_hedged_calls_total", "Calls that sent at least one hedge.", n...)
	d.hedgeSent = nd("watertight_hedge_sent_total", "Hedges sent: the extra attempts.", n...)
	d.hedgeWon = nd("watertight_hedge_won_total", "Hedges that answered first.", n...)
	d.hedgeSuppressed = nd("watertight_hedge_suppressed_total", "Hedges due but not sent, by reason: budget, breaker, bulkhead, overload.", "name", "reason")
	d.hedgeDelay = nd("watertight_hedge_delay_seconds", "Current hedge delay: how long an attempt has to answer before the next one is sent.", n...)
	d.hedgeOverloaded = nd("watertight_hedge_overloaded", "1 while the hedge policy is in its overload cool-down (no hedges), 0 otherwise.", n...)

	d.events = nd("watertight_events_total", "Events received by the Collector's listener, by emitting package, kind and reason (the event's code; empty for kinds without one).", "source", "event", "name", "reason")
	d.eventsOverflow = nd("watertight_events_overflow_total", "Events not counted under their labels because Config.MaxEventSeries label sets were already in use.")
	d.circuitTransitions = nd("watertight_circuit_transitions_total", "Circuit breaker state changes (events), by reason: the rule that tripped the breaker (failure_rate, slow_call_rate, consecutive_failures, failure_count, trip_when) or why it moved on (timer, trials_succeeded, trials_failed, trials_timed_out, manual).", "name", "key", "from", "to", "reason")
	d.retryScheduled = nd("watertight_retry_scheduled_total", "Retries scheduled after a failed attempt (events).", nk...)
	d.retryExhausted = nd("watertight_retry_exhausted_total", "Calls whose last allowed attempt failed (events).", nk...)
	d.retrySkipped = nd("watertight_retry_skipped_total", "Retryable failures that were not retried, by reason (the event's code): not_idempotent, no_time, no_budget, no_concurrency, retry_after_too_long, body_not_replayable, other (events).", "name", "key", "reason")
	d.shed = nd("watertight_shed_total", "Requests a server dropped before running them, by reason (the event's code): route_full, displaced, queue_gave_up, client_limit, client_overflow, deadline, other (events).", "name", "key", "reason")
	d.fallbackUsed = nd("watertight_fallback_used_total", "Calls a fallback answered instead of the primary (events).", nk...)
	d.badInput = nd("watertight_bad_input_total", "Values clients sent (headers) that were malformed or out of range and were ignored or clamped, by header and reason (the event's code): malformed, absurd, unknown_criticality, other (events).", "name", "header", "reason")
	return first
}

func (d *descs) all() []*prometheus.Desc { return d.list }
