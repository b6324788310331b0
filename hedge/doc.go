// Package hedge sends hedged requests: when a call has not answered within a
// delay, it sends a copy — to another replica, where the caller has several
// — and takes whichever answers first, cancelling the other. A few extra
// requests buy a much shorter tail: in Dean and Barroso's "The Tail at
// Scale" (CACM, 2013), a BigTable client that sent a backup request after
// 10 ms cut its 99.9th-percentile latency from 1,800 ms to 74 ms while
// sending 2% more requests.
//
// # Use
//
// Build one Policy per dependency and call [Do] with a function of the
// attempt number:
//
//	p, _ := hedge.New(hedge.Config{Percentile: 0.95, MinDelay: 5 * time.Millisecond, Budget: b})
//	v, err := hedge.Do(ctx, p, func(ctx context.Context, attempt int) (Value, error) {
//		return replicas[(attempt-1)%len(replicas)].Get(ctx, key)
//	})
//
// The first attempt runs at once; if it has not answered after the delay, a
// second starts, and so on up to Config.MaxHedges extra attempts, one delay
// apart. The first success is the answer, and the others are cancelled at
// once with [ErrLost] as their context's cause. A failure does not end the
// call while another attempt runs; when all that were sent have failed, the
// last failure is returned. A hedge is not a retry: an attempt that fails
// before the delay is the answer, and no hedge is sent to replace failed
// attempts. Use a retry policy for failures, a hedge for slowness.
//
// # The delay
//
// A fixed Config.Delay, or Config.Percentile of the latencies of recent
// attempts (with a floor, Config.MinDelay, and a cold-start delay until
// Config.MinSamples are known). Hedging at the p95 sends a hedge for about
// one call in twenty: about 5% more requests. The tracker keeps a
// log-linear histogram (16 buckets per power of two, so within about 3%) of
// the last Config.Window (ten seconds), and the delay is recomputed from it
// at most every 100 ms. It records the latency of every attempt that
// succeeds, and of every attempt that loses, at the moment it is cancelled:
// a lower bound that still counts the attempt among the slow ones, so that
// hedging does not hide the tail it cuts and drag its own delay down.
// Failures are not recorded.
//
// # Only idempotent calls
//
// A hedge sends the same request twice, and both may be served. As with
// retries (package retry), only calls marked safe to repeat are hedged:
// Config.Idempotent for every call, or a context marked with
// retry.Idempotent or retry.WithIdempotencyKey. Other calls run once,
// unhedged (counted in Snapshot.NotIdempotent; no event, since no timer is
// armed for them).
//
// # Off under overload
//
// Hedges are extra load, and extra load is the last thing a struggling
// dependency needs. A hedge that is due is not sent — and EventHedgeSuppressed
// says why — when:
//
//   - "overload": an attempt of this call failed with the overloaded signal
//     (watertight.IsOverloaded: the callee, or the layer below it, says more
//     load would hurt); or any call's attempt did, less than
//     Config.OverloadCooldown (one second) ago. The call that saw the signal
//     sends no further hedge; the cool-down switches hedging off for every
//     call, and is renewed by every new signal, so that a dependency that
//     keeps saying so gets no hedges at all;
//   - "breaker": Config.Breaker is open, half-open or forced open;
//   - "bulkhead": Config.Bulkhead has no free permit or has callers waiting;
//   - "budget": Config.Budget refuses the hedge. Every hedged call deposits
//     once; each hedge withdraws a token. A Budget of its own for the hedge
//     policy, with Ratio set to the share of extra requests you accept, keeps
//     hedges within that share whatever happens (budget.Config.Ratio 0.05
//     for 5%).
//
// The checks run in that order, and the budget last, so that a hedge
// suppressed for another reason does not spend a token.
//
// # Cost
//
// The common call — the first attempt answers before the delay — runs the
// function in the caller's goroutine and allocates only the call's state
// (144 bytes on amd64), which holds the attempt's context: that context is built
// lazily, so a function that never waits on it costs no context allocation
// (one that does pays for one context.WithCancelCause, as without hedging).
// The timer is a pooled time.Timer, re-armed with Reset and stopped with
// Stop; there is no goroutine. With a percentile delay, two clock reads
// measure the latency. Only when a hedge is due does the call allocate its
// hedging state, and the hedge runs in the timer's goroutine.
//
// Because the first attempt runs in the caller's goroutine, Do cannot
// return before it does: when a hedge wins, Do returns as soon as the first
// attempt's function has noticed its cancellation. Functions must honour
// their context — which network calls do — or hedging gains nothing. Hedges
// run in goroutines of their own: a losing hedge is cancelled and Do
// returns without waiting for it; its goroutine ends when its function
// returns, and its result goes to the discard function of [DoDiscard].
//
// # Contexts
//
// Each attempt's context derives from the caller's (its values, deadline
// and cancellation) and is cancelled when Do is done with it. A result that
// needs its context after Do returns — an HTTP response whose body is read
// later — calls [DeferCancel] in the function, and ends the context itself
// when done (watertighthttp.HedgingTransport does so on closing the body).
//
// # Composing
//
// In the standard client order, a hedge takes the place of the retry:
//
//	fallback → total deadline → retry | hedge → breaker → bulkhead → attempt timeout → call
//
// with the breaker, bulkhead and attempt timeout inside the function, so
// that each attempt goes through them, and the same breaker and bulkhead in
// the Config, so that the hedge knows when to stay away. Hedging inside a
// retry multiplies the two (three attempts, each hedged once, is up to six
// requests); if both are wanted, give them one shared picture of overload —
// the retry's ExhaustedError carries the overloaded signal that switches
// hedging off — and budgets of their own.
//
// # Observing
//
// Events (Config.Listener): EventHedgeSent (Attempt 2 for the first hedge,
// Delay since the call started), EventHedgeWon (the winning attempt), and
// EventHedgeSuppressed (Code and Reason CodeBudget "budget", CodeBreaker
// "breaker", CodeBulkhead "bulkhead" or CodeOverload "overload", Err the
// matching sentinel). [Policy.Snapshot] counts the calls,
// the hedges sent (the extra requests: Snapshot.ExtraPercent), won and
// suppressed by reason, and gives the current delay.
//
// Nothing in the package reads a clock of its own beyond the time package,
// so a simulation that runs in real time with goroutines — replicas that
// sleep, honouring their context — exercises the real code, and
// testing/synctest runs it on a virtual clock. In such a test, build the
// policy inside the bubble: the pooled timers of a policy that has served
// calls outside a bubble run on the real clock.
package hedge
