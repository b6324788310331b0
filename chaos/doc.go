// Package chaos injects faults — errors, latency, replacement results — into
// calls, at configured rates per key, for game days: it makes the failures
// that fallbacks, breakers, retries and timeouts exist for happen on purpose,
// at a time of your choosing, so that you learn whether they work before an
// outage tells you.
//
// An Injector holds rules by key (a dependency, a route, a method) and a
// switch. It plugs in four ways:
//
//   - Injector.Policy(key): a watertight.Policy for a Pipeline (errors and
//     latency), placed innermost, next to the call;
//   - Do[T]: wraps one function, and can also replace its result;
//   - Transport: an http.RoundTripper for the client side;
//   - Handler: an http.Handler middleware for the server side, which answers
//     injected errors with a status (503 by default).
//
// Decide exposes the decision itself, for integrations of your own.
//
// # Safety
//
// An Injector is off unless Config.Enabled is set or Enable is called, and
// Disable turns it off at once, for every call that starts afterwards. It
// touches only the keys that have a rule (or every key, if a rule for AnyKey
// exists — use that knowingly). Rules change at run time with SetRule and
// DeleteRule. When off, each integration costs one atomic load per call.
// Every injected fault is counted (Snapshot), reported as a
// watertight.EventFaultInjected (Source "chaos", Key the key, Code and
// Reason CodeError "error", CodeLatency "latency" or CodeResult "result"),
// and marked on HTTP responses with HeaderInjected.
//
// Decisions draw from Config.Rand; SeededRand makes them repeat in tests.
package chaos
