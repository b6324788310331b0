// Package timeout bounds how long a call may take, as a watertight.Policy.
//
// The same policy serves as a per-attempt timeout (placed innermost, inside the
// breaker and the bulkhead, so a slow attempt counts as a breaker failure and
// gives its permit back) and as a total timeout (placed outermost, around the
// retries). The deadline is set with context.WithTimeoutCause, so the function
// sees it (ctx.Deadline reports it and can be passed on to the next hop) and
// the caller can tell this timeout from its own deadline:
// errors.Is(err, timeout.ErrTimeout) holds for ours, context.Cause(ctx) names
// it.
//
// For functions that ignore their context, Config.Abandon makes the call
// return at the deadline while the work goes on in its own goroutine; run such
// a pipeline with watertight.DoDetached. Bulkhead permits outside the timeout
// stay held until the abandoned work really ends.
package timeout
