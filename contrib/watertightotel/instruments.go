package watertightotel

import (
	"errors"

	"go.opentelemetry.io/otel/metric"
)

// instruments are the asynchronous instruments Metrics observes.
type instruments struct {
	circuitState, circuitWindowCalls, circuitWindowFailures, circuitWindowSlowCalls, circuitWindowSaturated metric.Int64Observable
	circuitTrials, circuitRejections, circuitOpens                                                          metric.Int64Observable
	circuitFailureRatio, circuitSlowCallRatio                                                               metric.Float64Observable

	bulkheadLimit, bulkheadActive, bulkheadQueued, bulkheadAvailable, bulkheadRejections metric.Int64Observable
	bulkheadAcquisitions, bulkheadCancellations, bulkheadGuaranteed, bulkheadBorrowed    metric.Int64Observable
	poolQueueCapacity, poolDropped, poolCompleted, poolPanicked                          metric.Int64Observable

	budgetDeposits, budgetWithdrawals, budgetRefusals        metric.Int64Observable
	budgetBalance                                            metric.Float64Observable
	throttlerRequests, throttlerAccepts, throttlerRejections metric.Int64Observable
	throttlerRejectRatio                                     metric.Float64Observable

	events, eventsOverflow, circuitTransitions   metric.Int64Observable
	retryScheduled, retryExhausted, retrySkipped metric.Int64Observable
	shed, fallbackUsed, badInput                 metric.Int64Observable

	hedgeCalls, hedgeNotIdempotent, hedgeHedgedCalls, hedgeSent, hedgeWon, hedgeSuppressed metric.Int64Observable
	hedgeDelay                                                                             metric.Float64Observable
	hedgeOverloaded                                                                        metric.Int64Observable

	limiterLimit, limiterInFlight, limiterWaiting, limiterRejections, limiterAcquisitions, limiterChanges, limiterDrops metric.Int64Observable
	limiterLatency                                                                                                      metric.Float64Observable
}

func (in *instruments) init(meter metric.Meter) ([]metric.Observable, error) {
	var errs []error
	var all []metric.Observable
	keep := func(o metric.Observable, err error) {
		errs = append(errs, err)
		all = append(all, o)
	}
	gauge := func(name, unit, desc string) metric.Int64Observable {
		o, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		keep(o, err)
		return o
	}
	fgauge := func(name, unit, desc string) metric.Float64Observable {
		o, err := meter.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		keep(o, err)
		return o
	}
	updown := func(name, unit, desc string) metric.Int64Observable {
		o, err := meter.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		keep(o, err)
		return o
	}
	counter := func(name, unit, desc string) metric.Int64Observable {
		o, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		keep(o, err)
		return o
	}

	in.circuitState = gauge("watertight.circuit.state", "{state}", "Circuit breaker state: 1 for the current state (attribute state), 0 for the others.")
	in.circuitWindowCalls = gauge("watertight.circuit.window.calls", "{call}", "Calls recorded in the breaker's current window (closed or metrics-only); while open or half-open, the calls of the window that opened it (or of the trials that opened it again).")
	in.circuitWindowFailures = gauge("watertight.circuit.window.failures", "{call}", "Failed calls in the breaker's current window.")
	in.circuitWindowSlowCalls = gauge("watertight.circuit.window.slow_calls", "{call}", "Slow calls in the breaker's current window.")
	in.circuitWindowSaturated = gauge("watertight.circuit.window.saturated", "{call}", "Saturation rejections counted in the breaker's current window (only with CountSaturation).")
	in.circuitFailureRatio = fgauge("watertight.circuit.failure_ratio", "1", "Failure ratio of the breaker's current window: failures (and saturations with CountSaturation) over calls, 0 to 1 (0.5 is 50%; compare with FailureRateThreshold/100).")
	in.circuitSlowCallRatio = fgauge("watertight.circuit.slow_call_ratio", "1", "Slow-call ratio of the breaker's current window: slow calls over calls, 0 to 1 (0.5 is 50%; compare with SlowCallRateThreshold/100).")
	in.circuitTrials = updown("watertight.circuit.trial_calls", "{call}", "Half-open trial calls let through and not yet ended.")
	in.circuitRejections = counter("watertight.circuit.rejections", "{call}", "Calls the breaker rejected (open, forced open, or half-open with every trial in flight).")
	in.circuitOpens = counter("watertight.circuit.opens", "{open}", "Times the breaker opened, forced openings included.")

	in.bulkheadLimit = updown("watertight.bulkhead.limit", "{permit}", "Permits of a semaphore bulkhead, workers of a pool, or the permits all the partitions of a partitioned bulkhead share (key empty).")
	in.bulkheadActive = updown("watertight.bulkhead.active", "{call}", "Permits held (semaphore; partitioned: by the partition, the key) or workers running a task (pool).")
	in.bulkheadQueued = updown("watertight.bulkhead.queued", "{call}", "Callers waiting for a permit (semaphore; partitioned: in the partition's queue) or tasks waiting for a worker (pool).")
	in.bulkheadAvailable = updown("watertight.bulkhead.available", "{permit}", "Permits (semaphore; partitioned: of the whole bulkhead, key empty) or idle workers (pool) free now.")
	in.bulkheadRejections = counter("watertight.bulkhead.rejections", "{call}", "Calls refused because the bulkhead (partitioned: the partition) was full (semaphore), or tasks refused because the queue was full or the pool closed (pool).")
	in.bulkheadAcquisitions = counter("watertight.bulkhead.acquisitions", "{permit}", "Acquisitions of a semaphore bulkhead (partitioned: of the partition): calls that took permits (an AcquireN counts once).")
	in.bulkheadCancellations = counter("watertight.bulkhead.cancellations", "{call}", "Waits for a semaphore bulkhead's permit (partitioned: the partition's) that ended because the caller's context did.")
	in.bulkheadGuaranteed = updown("watertight.bulkhead.guaranteed", "{permit}", "Permits a partition of a partitioned bulkhead is guaranteed: its share of watertight.bulkhead.limit by weight.")
	in.bulkheadBorrowed = updown("watertight.bulkhead.borrowed", "{permit}", "Permits a partition of a partitioned bulkhead holds above its guarantee, lent from the others' unused shares.")
	in.poolQueueCapacity = updown("watertight.bulkhead.pool.queue.capacity", "{task}", "Queue size of a worker pool.")
	in.poolDropped = counter("watertight.bulkhead.pool.dropped", "{task}", "Accepted pool tasks dropped without running (context done, queue wait exceeded, shut down).")
	in.poolCompleted = counter("watertight.bulkhead.pool.completed", "{task}", "Pool tasks that ran to their end, panics included.")
	in.poolPanicked = counter("watertight.bulkhead.pool.panicked", "{task}", "Pool tasks that panicked.")

	in.budgetDeposits = counter("watertight.budget.deposits", "{request}", "Requests deposited into the retry budget.")
	in.budgetWithdrawals = counter("watertight.budget.withdrawals", "{retry}", "Retries (or hedges) the budget granted.")
	in.budgetRefusals = counter("watertight.budget.refusals", "{retry}", "Retries (or hedges) the budget refused.")
	in.budgetBalance = fgauge("watertight.budget.balance", "{token}", "Tokens in the budget's ratio balance (one token is one retry), the per-second floor not included.")
	in.throttlerRequests = gauge("watertight.throttler.window.requests", "{request}", "Requests counted in the adaptive throttler's window, local rejections included.")
	in.throttlerAccepts = gauge("watertight.throttler.window.accepts", "{request}", "Requests the backend accepted in the adaptive throttler's window.")
	in.throttlerRejectRatio = fgauge("watertight.throttler.reject_ratio", "1", "Probability, 0 to 1, with which the adaptive throttler rejects the next request locally: the share of requests it is rejecting now.")
	in.throttlerRejections = counter("watertight.throttler.rejections", "{request}", "Requests the throttler rejected locally.")

	in.events = counter("watertight.events", "{event}", "Events received by the listener, by emitting package (source), kind (event) and reason (the event's code; empty for kinds without one).")
	in.eventsOverflow = counter("watertight.events_overflow", "{event}", "Events not counted under their attributes because Config.MaxEventSeries attribute sets were already in use.")
	in.circuitTransitions = counter("watertight.circuit.transitions", "{transition}", "Circuit breaker state changes (events), by reason: the rule that tripped the breaker (failure_rate, slow_call_rate, consecutive_failures, failure_count, trip_when) or why it moved on (timer, trials_succeeded, trials_failed, trials_timed_out, manual).")
	in.retryScheduled = counter("watertight.retry.scheduled", "{retry}", "Retries scheduled after a failed attempt (events).")
	in.retryExhausted = counter("watertight.retry.exhausted", "{call}", "Calls whose last allowed attempt failed (events).")
	in.retrySkipped = counter("watertight.retry.skipped", "{call}", "Retryable failures that were not retried, by reason (the event's code): not_idempotent, no_time, no_budget, no_concurrency, retry_after_too_long, body_not_replayable, other (events).")
	in.hedgeCalls = counter("watertight.hedge.calls", "{call}", "Calls made through the hedge policy, hedged or not.")
	in.hedgeNotIdempotent = counter("watertight.hedge.not_idempotent", "{call}", "Calls not hedged because they were not marked idempotent.")
	in.hedgeHedgedCalls = counter("watertight.hedge.hedged_calls", "{call}", "Calls that sent at least one hedge.")
	in.hedgeSent = counter("watertight.hedge.sent", "{hedge}", "Hedges sent: the extra attempts.")
	in.hedgeWon = counter("watertight.hedge.won", "{hedge}", "Hedges that answered first.")
	in.hedgeSuppressed = counter("watertight.hedge.suppressed", "{hedge}", "Hedges due but not sent, by reason: budget, breaker, bulkhead, overload.")
	in.hedgeDelay = fgauge("watertight.hedge.delay", "s", "Current hedge delay: how long an attempt has to answer before the next one is sent.")
	in.hedgeOverloaded = gauge("watertight.hedge.overloaded", "{state}", "1 while the hedge policy is in its overload cool-down (no hedges), 0 otherwise.")
	in.shed = counter("watertight.shed", "{request}", "Requests a server dropped before running them, by reason (the event's code): route_full, displaced, queue_gave_up, client_limit, client_overflow, deadline, other (events).")
	in.fallbackUsed = counter("watertight.fallback.used", "{call}", "Calls a fallback answered instead of the primary (events).")
	in.badInput = counter("watertight.bad_input", "{value}", "Values clients sent (headers) that were malformed or out of range and were ignored or clamped, by header and reason (the event's code): malformed, absurd, unknown_criticality, other (events).")
	in.limiterLimit = updown("watertight.limiter.limit", "{permit}", "Current concurrency limit of an adaptive limiter.")
	in.limiterInFlight = updown("watertight.limiter.in_flight", "{call}", "Calls holding a permit of an adaptive limiter.")
	in.limiterWaiting = updown("watertight.limiter.waiting", "{call}", "Callers waiting for a permit of an adaptive limiter.")
	in.limiterRejections = counter("watertight.limiter.rejections", "{call}", "Calls an adaptive limiter refused at its limit.")
	in.limiterAcquisitions = counter("watertight.limiter.acquisitions", "{call}", "Calls an adaptive limiter admitted.")
	in.limiterChanges = counter("watertight.limiter.changes", "{change}", "Windows after which an adaptive limiter moved its limit.")
	in.limiterLatency = fgauge("watertight.limiter.window.latency", "s", "Latency of the calls of an adaptive limiter's last window: its min, mean and max (stat).")
	in.limiterDrops = gauge("watertight.limiter.window.drops", "{call}", "Calls dropped (timeouts, overload answers) in an adaptive limiter's last window.")
	return all, errors.Join(errs...)
}
