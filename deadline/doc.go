// Package deadline propagates a request's deadline from hop to hop, and
// refuses work that cannot finish in the time left.
//
// A deadline is an absolute instant for the whole request. Each hop sends on
// the time that remains, reduced by a safety margin (the Google SRE book
// suggests "a few hundred milliseconds") for the network and the reply, and
// capped by a maximum; the next hop turns it back into an absolute deadline on
// its own clock. Relative times on the wire keep clocks out of it: hosts need
// not agree on the time.
//
// # Wire format
//
// The time left travels as a decimal integer of whole milliseconds in one
// header, X-Request-Timeout-Ms by default (DefaultHeader; Config.Header
// changes it), for example
//
//	X-Request-Timeout-Ms: 250
//
// On input, two other headers are understood, after the configured one:
// gRPC's grpc-timeout (1 to 8 ASCII digits followed by a unit: H hours,
// M minutes, S seconds, m milliseconds, u microseconds, n nanoseconds; see
// ParseGRPCTimeout) and Envoy's x-envoy-expected-rq-timeout-ms (whole
// milliseconds, like ours). The first well-formed one wins.
//
// # Untrusted input
//
// Incoming headers come from the network. A value that is malformed (a sign,
// a fraction, spaces inside, a unit missing, too many digits) is ignored and
// logged at Warn with the header, the value and the reason (Config.Logger);
// the next header is tried. A well-formed value larger than Config.Max is
// clamped to Max: a caller cannot make a server wait longer than it is willing
// to. Parsing never panics (the parsers are fuzzed).
//
// # Fail fast
//
// A callee whose remaining time is below what its work needs should answer at
// once rather than start work it cannot finish: Check returns ErrTooShort (a
// watertight rejection, see watertight.IsRejection) when less than
// Config.MinRemaining is left, and Inject refuses to send a request with no
// time left after the margin.
//
// # Server and client
//
// A server reads the caller's timeout with WithIncoming, which derives a
// context whose deadline is now plus the timeout (or the context's own, if
// earlier); when it passes, context.Cause is an *ExpiredError naming the
// header, so a handler can tell the caller's deadline from its own timeouts.
// A client sends the remaining time on with Inject (or Outgoing, for other
// transports). As a watertight.Policy, a Propagator fails fast (Check) before
// the protected call.
package deadline
