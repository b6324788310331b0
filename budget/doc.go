// Package budget keeps a client's extra load on a struggling dependency in
// proportion to its real load: a retry budget, which caps retries (and
// hedges) at a share of requests, a concurrent-retry budget (Concurrency,
// Envoy's retry_budget), which caps the retries in flight at a share of the
// requests in progress, client-side adaptive throttling, which
// rejects requests locally when the dependency keeps rejecting them for
// overload, and gRPC's retry throttling (RetryThrottle, gRFC A6), which stops
// retries while failures outweigh successes.
//
// # Retry budget
//
// Retries turn a transient failure into a success, and a lasting one into
// more load: with three attempts per call, a dependency that is completely
// down receives three times its normal traffic at the moment it can least
// take it, and every layer that retries multiplies that again. A per-attempt
// limit cannot tell a transient failure from a lasting one; a budget can. A
// [Budget] lets retries through only while they stay within a share of the
// requests — Config.Ratio, 10% by default, as in the Google SRE book
// (chapter 21, "Handling Overload", section "Deciding to Retry") — so that a
// dependency that is 100% down sees at most about 1.1 times its normal load
// (plus the floor of MinPerSecond retries a second, which dominates at low
// traffic: at 20 requests a second the default floor of 10 allows 1.6 times),
// while occasional failures (below 10% of the calls) are
// retried. One Budget is shared by every call site of one dependency,
// whatever their result types.
//
// Use it in two calls: [Budget.Deposit] once per original request (not per
// attempt: if retries deposited, retries would fund retries), and
// [Budget.Withdraw] before each retry, which reports whether the retry may go.
// When it may not, the retry policy gives up, with an error that matches
// [ErrExhausted] (package retry's SkippedError; package retry takes a *Budget in its Config and makes the
// calls). A hedged request is a retry sent early, before the first attempt has
// failed: the same Budget, with Withdraw before each hedge, is a hedge budget.
//
// # Tokens, and how they expire
//
// The design is Finagle's RetryBudget: each request deposits Ratio of a token,
// each retry withdraws a whole one, in fixed point (a deposit is 1000 units, a
// token 1000/Ratio). Deposit is one compare-and-swap, usually on a cache line
// of the caller's own (the balance is striped over up to eight cells and a
// pool; see Budget), and never reads the clock, so it can sit on every
// request. Finagle's deposits expire by age (they are
// kept for a TTL, ten seconds by default), so its balance is Ratio times the
// requests of the last TTL. Here tokens expire by the cap instead: the
// balance never holds more than Config.MaxTokens (ten by default), however
// long ago the tokens were deposited. That gives a bound that holds over any
// stretch of time, however short or long:
//
//	retries ≤ Ratio·requests + MaxTokens + MinPerSecond·seconds + max(1, MinPerSecond)
//
// where the last two terms are the floor (below). The bound is exact for
// calls that do not overlap in time; calls in flight at the same moment can
// move it by a deposit or two. The difference from
// Finagle: after a busy period, Finagle's client may spend Ratio times the
// last TTL's requests at once (a thousand retries for a client that made ten
// thousand requests in ten seconds), and a token deposited just before a
// quiet spell is gone after the TTL; here the saved-up burst is MaxTokens
// whatever the traffic, and a token saved up stays until it is spent. Both
// bound the retries to about Ratio of the requests over time.
//
// A dependency with little traffic deposits little: without help, a client
// making one request a minute could never retry. Config.MinPerSecond is a
// floor (Finagle's minRetriesPerSec): that many retries per second are always
// granted, from a small time-based token bucket that is consulted — and the
// clock read — only when the ratio balance is empty. The bucket holds one
// second's worth; Finagle's reserve holds a TTL's worth (a hundred retries by
// default), a larger burst on a dependency that is down.
//
// Finagle's default ratio is 20%; the SRE book's, used here, is 10%.
//
// # Concurrent retry budget
//
// A [Concurrency] is Envoy's retry_budget (a cluster's circuit-breaker
// threshold): the retries in flight at once may be at most
// ConcurrencyConfig.Percent of the active requests (20% by default), and
// ConcurrencyConfig.MinConcurrency retries (3 by default) may always be in
// flight however few requests are active:
//
//	retries in flight ≤ max(MinConcurrency, ⌊Percent/100 · active requests⌋)
//
// It takes two pairs of calls: [Concurrency.Enter] when a request starts and
// [Concurrency.Leave] when it ends (once per original request: a request
// that is being retried, or waits before a retry, stays active, as it does in
// Envoy, which counts a retry's own upstream request and the pending ones),
// and [Concurrency.TryAcquire] before a retry, with [Concurrency.Release]
// when the retry attempt ends. Package retry makes the four calls when its
// Config.Concurrency is set, and takes the slot when it schedules the retry,
// so the slot covers the wait before the retry too, as in Envoy.
//
// Which to use. A [Budget] remembers: its balance is what past requests
// deposited (up to MaxTokens), so after a quiet stretch a burst of failures
// finds the saved-up tokens and the floor only, and after a busy one a sudden
// drop in traffic can still spend what the busy stretch saved. A Concurrency
// remembers nothing: its limit is a share of the requests in progress at this
// moment, so it follows a bursty request rate at once — a burst of a thousand
// concurrent requests that all fail may send two hundred retries at once,
// whatever came before — and it needs no clock and no window. What it does not
// bound is the retries over time: a retry that ends frees its slot for the
// next, so a dependency that is down and answers fast can see many retries a
// second from few slots. Prefer the Concurrency for bursty traffic, many
// calls in flight together (a proxy, a fan-out); prefer the
// Budget to bound the extra load as a share of the requests over time; set
// both (package retry's Config.Budget and Config.Concurrency) to have both
// bounds: a retry then needs a token and a slot.
//
// Sizing: Percent is the extra concurrency the dependency must absorb when
// every request fails, so 20% means it must take 1.2 times the usual
// requests in flight; MinConcurrency is what a quiet client may retry at
// once, and should stay small (a handful), since it is the whole limit at
// low traffic. Negative Percent leaves MinConcurrency alone as a fixed cap
// (Envoy's max_retries); negative MinConcurrency removes the floor.
//
// # Adaptive throttling
//
// A dependency that rejects requests for overload still pays for each one
// (read it, decide, answer), and a client that keeps sending can keep it
// overloaded on rejections alone. A [Throttler] implements the client-side
// throttling of the SRE book (chapter 21, "Handling Overload"): it counts, over
// the last two minutes (ThrottleConfig.Window), the requests the client made
// and the ones the dependency accepted, and rejects new requests locally, with
// [ErrThrottled], with probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// While the dependency accepts everything the probability is zero and nothing
// is drawn. Once it accepts fewer than 1/K of the requests, the client sends
// about K times what the dependency accepts and rejects the rest itself, at no
// cost to the dependency. K (ThrottleConfig.K, 2 by default) trades waste for
// responsiveness: the (K−1)·accepts requests sent beyond what is accepted are
// rejected by the dependency, but they are also what notices, quickly, that it
// accepts more again. K = 1 sends nothing that will be rejected and reacts
// slowest.
//
// A Throttler is a watertight.Policy. Put it inside the retry, so that every
// attempt counts as a request, and inside the breaker and the bulkhead, so
// that their rejections, which never reach the dependency, do not count at
// all (a throttler outside them counts such a rejection as a request that was
// not accepted, by default). Its own rejections are rejections, which a
// breaker ignores and a retry does not retry:
//
//	retry (with budget) → breaker → bulkhead → throttler → attempt timeout → call
//
// A dependency that sheds load by timing out rather than answering "overloaded"
// needs ThrottleConfig.Rejected to count timeouts too.
//
// # Disabled
//
// A nil *Budget, a nil *Concurrency and a nil *Throttler are valid and
// disabled: a nil Budget or Concurrency grants every retry, a nil Throttler
// lets every request through. Code that takes an optional budget or
// throttler calls them without checking.
//
// # Events
//
// With Config.Listener, a Budget reports each refused Withdraw as a
// watertight.EventBudgetExhausted, and with ConcurrencyConfig.Listener, a
// Concurrency each refused TryAcquire; with ThrottleConfig.Listener, a Throttler
// reports each local rejection as a watertight.EventRejected (Err
// ErrThrottled). All have Source "budget" and the configured Name, and are
// sent with no lock held. Without a listener nothing is built: the paths
// cost what they did.
//
// Each event carries a Code, a stable reason for metric labels and alerts:
// CodeNoTokens "no_tokens" (a Budget), CodeConcurrencyLimit
// "concurrency_limit" (a Concurrency), CodeTokensBelowHalf
// "tokens_below_half" (a RetryThrottle, whose RetryThrottleConfig.Listener
// gets an EventBudgetExhausted for each refused retry) and CodeThrottled
// "throttled" (a Throttler's EventRejected).
package budget
