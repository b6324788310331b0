// Package watertight keeps a failure in its compartment: it composes circuit
// breakers, bulkheads, timeouts and retries under a budget into one
// [Pipeline] that wraps a call; hedges (package hedge) and fallbacks (package
// fallback) wrap a call or a pipeline from outside.
//
// The root package holds the contracts every protection plugs into:
//
//   - [Policy] and [Ticket]: the two-step Enter/Exit form each protection implements;
//   - [Repeater]: a policy that runs the rest of the pipeline again (a retry);
//   - [Pipeline], [Do] and [DoDetached]: composition in the order given, outermost first;
//   - [Outcome] and [Classify]: how a call's error counts (success, failure, ignored,
//     saturated);
//   - [NewRejection], [IsRejection]: the marker every rejection carries (open breaker,
//     full bulkhead, …), so that no retry retries it;
//   - [ErrOverloaded], [Overloaded], [IsOverloaded]: the "overloaded, don't retry"
//     signal between layers, so that only the layer closest to a failing
//     dependency retries.
//
// The root package never imports a pattern package; patterns import it.
//
// # The standard order
//
// Outermost first, the recommended client pipeline is
//
//	fallback → total deadline → retry (with budget) | hedge → breaker → bulkhead → attempt timeout → call
//
// An open breaker and a full bulkhead are final answers that a retry does not
// retry; a slow attempt times out inside the breaker, so it counts as a failure
// and gives its bulkhead permit back; a fallback sees only the final outcome.
package watertight
