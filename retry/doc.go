// Package retry retries failed calls — only the failures worth retrying, only
// for work that is safe to repeat, a few times, with capped exponential
// backoff and full jitter, under a budget — so that retries turn transient
// failures into successes without turning an outage into a retry storm.
//
// # The four rules
//
//  1. Transient failures only. The default classification (IsTransient)
//     retries timeouts, refused and reset connections, connections closed
//     mid-answer, and errors that carry a server's Retry-After (After). It
//     never retries a rejection (open breaker, full bulkhead, exhausted
//     budget: watertight.IsRejection), a caller's cancellation, an
//     "overloaded, don't retry" answer (watertight.IsOverloaded), or any other
//     error: an unknown error is taken as permanent. The HTTP rules (502, 503,
//     504, 429) live in the HTTP adapter, which marks such answers with After
//     or MarkTransient.
//  2. Idempotent work only. A call is retried only when the policy's
//     Config.Idempotent says all its calls are, or the call's context is
//     marked with Idempotent or WithIdempotencyKey. An unmarked call that
//     fails with a transient error is returned at once, wrapped in a
//     SkippedError that says so (errors.Is(err, ErrNotIdempotent)).
//  3. Few attempts: three by default (two retries).
//  4. Backoff with jitter: package backoff, full jitter by default; a
//     server's Retry-After is honoured, capped by Config.MaxDelay.
//
// # Deadlines and budgets
//
// A retry never sleeps past the context's deadline: one whose wait would
// leave less than Config.MinAttemptTime before the deadline is skipped, and
// the last error returned at once (errors.Is(err, ErrNoTime)). A retry
// budget (package budget) shared by every call site of a dependency caps
// retries at a share of requests: with the default 10% a dependency that is
// down sees about 1.1 times its normal load instead of 3 times. A
// concurrent-retry budget (budget.Concurrency, Config.Concurrency; Envoy's
// retry_budget) caps instead the retries in flight at a share of the calls
// in progress (20%, at least 3, by default), which follows a bursty request
// rate at once; with both set, a retry needs both. Either refusal ends the
// call with a SkippedError (ErrNoBudget, ErrNoConcurrency) that matches
// budget.ErrExhausted.
//
// # One layer only
//
// Retry in one layer only, the one closest to the failing dependency. When
// this layer gives up, its error (ExhaustedError, or SkippedError for an
// exhausted budget of either kind) carries the "overloaded, don't retry" signal
// (watertight.IsOverloaded), so that a retry policy in a layer above does not
// multiply the attempts: three layers of three attempts would turn one user
// action into 27 calls to a dependency that is down.
//
// # Use
//
// A *Policy is a watertight.Repeater: place it in a Pipeline outside the
// breaker and the bulkhead (fallback → total deadline → retry → breaker →
// bulkhead → attempt timeout → call), so that each attempt passes them, an
// open breaker or full bulkhead ends the retries, and each attempt has its own
// timeout. Do runs a function under the policy alone.
//
// # Events
//
// Config.Listener receives each decision as a watertight.Event with Source
// "retry": EventRetryScheduled, EventRetryExhausted and EventRetrySkipped,
// in the caller's goroutine. Config.OnEvent receives the same decisions as
// this package's typed Event, whose Reason is an error to compare with
// errors.Is. Without either, nothing is built.
//
// Both carry a Code, a stable reason for metric labels and alerts: a skipped
// retry CodeNotIdempotent "not_idempotent", CodeNoTime "no_time",
// CodeNoBudget "no_budget", CodeNoConcurrency "no_concurrency" or
// CodeRetryAfterTooLong "retry_after_too_long"; an exhausted one
// CodeMaxAttempts "max_attempts".
package retry
