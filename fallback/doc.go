// Package fallback answers when a dependency cannot: a chain of
// alternatives tried from best to worst for the user — the last known good
// value, a sensible default, a reduced feature, deferring the work, and a
// clear fast error — and FailClosed, which denies when a security check
// cannot be made.
//
// # Chains
//
// A Chain[T] wraps the primary function, outermost in the standard pipeline
// (fallback → total deadline → retry → breaker → bulkhead → attempt timeout →
// call), so it sees only the final outcome:
//
//	cache, _ := fallback.NewLastKnownGood[Price](fallback.CacheConfig{MaxStale: 10 * time.Minute})
//	chain, _ := fallback.New(fallback.Config{Name: "prices"},
//		fallback.Stale(cache),                       // the last price we saw, up to 10 minutes old
//		fallback.Reduced(listPrice),                 // the catalogue's list price, no discounts
//		fallback.Error[Price](ErrPricesUnavailable), // a clear answer, at once
//	)
//	price, err := chain.Do(ctx, sku, func(ctx context.Context) (Price, error) {
//		return watertight.Do(ctx, pipeline, func(ctx context.Context) (Price, error) { return quote(ctx, sku) })
//	})
//
// Each step may be narrowed to some errors with When (OnRejection,
// OnTimeout, OnOverload, or any predicate). The chain never replaces an error
// once the caller's own context is done, nor, by default, an error marked as
// the caller's own (see DefaultHandles). DoResult says who answered, so the
// caller can show "prices as of 3 minutes ago". Each answer by a step emits
// watertight.EventFallbackUsed (Source "fallback", Reason the step's name,
// Err the primary's error, and Code the step's kind: CodeStale "stale",
// CodeDefault "default", CodeReduced "reduced", CodeDefer "defer" or
// CodeError "error", stable for metric labels and alerts).
//
// On the success path a Chain calls the function and returns: no
// allocation, no clock read, except that a chain with a Stale step records
// the value in its LastKnownGood cache (a clock read and a map write under a
// sharded lock).
//
// # The rule
//
// A fallback is simpler than what it replaces, does not depend on the
// component that failed, and is exercised regularly. A fallback that calls
// the same database through another path fails with it; a fallback that only
// runs during outages has not run since the code around it changed. Package
// chaos injects the failures that make fallbacks run on purpose, on a game
// day, before an outage does.
//
// # Security decisions fail closed
//
// FailClosed wraps an authorisation check: when the check cannot answer, the
// answer is deny, never allow. See its documentation for why.
package fallback
